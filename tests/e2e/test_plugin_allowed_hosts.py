"""IPv6 entries of a plugin manifest's `[http] allowed_hosts`, end to end.

The guest is `tests/plugins/http-not-allowed` (a notifier that POSTs each
health event to its config `url`), copied under several names, each with a
manifest spelling the IPv6 loopback another way; receivers listen on `::1`.
What must hold: `[::1]:PORT` and `[::1]:*` reach a server on `::1`; a bare
`::1` is accepted at load (it used to parse as host `:` port 1 and allow
nothing) and means ports 80 and 443 only, so it reaches `[::1]:80` and not
another port; an ambiguous `::1:PORT` and an unclosed `[::1` are refused at
load with the key and the fix. All while the steady MCP workload runs and is
served (`steady.assert_served`: no failed call or API read, RSS bounded; its
latency is printed, not asserted).

Needs IPv6 loopback (`ip -6 addr show lo`); the `[::1]:80` case needs the
right to listen on port 80 and is left out (said in the output) without it.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from harness import Gateways, demo_stdio_args, stdio_backend
from steady import WINDOW_CALLS, assert_served, steady_load
from support import ControlApi, Receiver, eprint, plugin_dir, plugins_by_name, poll

pytestmark = pytest.mark.anyio

ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: Vigil's RSS may grow this much over its start while the notifiers run.
RSS_GROWTH = 64 << 20


def notifier(d: Path, built: Path, name: str, allowed: list[str], url: str) -> None:
    shutil.copy(built / "http-not-allowed.wasm", d / f"{name}.wasm")
    hosts = ", ".join(f'"{h}"' for h in allowed)
    (d / f"{name}.toml").write_text(f'[http]\nallowed_hosts = [{hosts}]\n[config]\nurl = "{url}"\n')


async def test_ipv6_allow_list_entries(vigil: Gateways, demo_bin: Path, built_plugins: Path, tmp_path: Path) -> None:
    rx = Receiver("::1")
    try:
        web: Receiver | None = Receiver("::1", 80)
    except OSError as e:
        web = None
        eprint(f"cannot listen on [::1]:80 ({e}): the bare `::1` on port 80 case is left out")
    try:
        port = rx.port
        d = plugin_dir(tmp_path, built_plugins, ["good-probe"])
        notifier(d, built_plugins, "v6-port", [f"[::1]:{port}"], f"http://[::1]:{port}/v6-port")
        notifier(d, built_plugins, "v6-any", ["[::1]:*"], f"http://[::1]:{port}/v6-any")
        # Bare: ports 80 and 443 only; this URL's port is neither.
        notifier(d, built_plugins, "v6-bare", ["::1"], f"http://[::1]:{port}/v6-bare")
        if web is not None:
            notifier(d, built_plugins, "v6-web", ["::1"], "http://[::1]/v6-web")
        notifier(d, built_plugins, "v6-ambiguous", [f"::1:{port}"], f"http://[::1]:{port}/v6-ambiguous")
        notifier(d, built_plugins, "v6-unclosed", ["[::1"], f"http://[::1]:{port}/v6-unclosed")
        # `demo` serves the steady load; `events` is restarted for transitions.
        backend = stdio_backend("demo", demo_bin, demo_stdio_args("demo"))
        backend["probes"] = [{"plugin": "good-probe", "every": "200ms"}]
        events = stdio_backend("events", demo_bin, demo_stdio_args("events"))
        gw = vigil([backend, events], api={}, plugins={"dir": str(d)}, health={"interval": "1s", "timeout": "1s"})
        api = ControlApi(gw.api_base)
        await poll(
            lambda: plugins_by_name(api),
            lambda p: p.get("good-probe", {}).get("calls", 0) > 0 and "v6-unclosed" in p,
            "the directory loaded",
        )

        async with steady_load(gw, api) as load:
            # A restart gives every notifier fresh transitions to deliver.
            await api.act_ok("events", "restart")
            await poll(
                lambda: api.instance("events"),
                lambda i: i["state"] == "running" and i["restart_count"] >= 1,
                "events restarted",
            )
            await poll(
                lambda: plugins_by_name(api),
                lambda p: bool(rx.on("/v6-port")) and bool(rx.on("/v6-any")) and bool(p["v6-bare"].get("last_error")),
                "the IPv6 notifiers delivered (or were refused)",
            )
            if web is not None:
                await poll(lambda: plugins_by_name(api), lambda _: bool(web.on("/v6-web")), "v6-web delivered")
            # A window of steady calls beside the notifiers (counted in calls, not seconds).
            await load.more_calls(WINDOW_CALLS)
        report = load.report()
        eprint(f"with the IPv6 notifiers: {report}")

        plugins = await plugins_by_name(api)
        log = ANSI.sub("", gw.proc.stderr())
        for name in ["v6-port", "v6-any"] + (["v6-web"] if web is not None else []):
            p = plugins[name]
            assert p["state"] == "active" and p["failures"] == 0, p
        # Bare ::1 loaded (not rejected), but a port other than 80/443 is refused.
        bare = plugins["v6-bare"]
        assert bare["state"] == "active", bare
        assert f"POST http://[::1]:{port}/v6-bare" in bare["last_error"], bare
        assert f"does not allow; refused host=[::1] port={port}" in log
        assert rx.on("/v6-bare") == [], "a bare ::1 must not reach another port than 80/443"
        ambiguous = plugins["v6-ambiguous"]
        assert ambiguous["state"] == "rejected", ambiguous
        # `::1:PORT` is ambiguous when PORT could be a group (at most 4 hex
        # digits), else malformed; either way the message gives the fix.
        assert f"http.allowed_hosts: `::1:{port}`" in ambiguous["reason"], ambiguous
        assert f"write `[::1]:{port}`" in ambiguous["reason"], ambiguous
        unclosed = plugins["v6-unclosed"]
        assert unclosed["state"] == "rejected", unclosed
        assert "http.allowed_hosts: `[::1` has an unclosed `[`" in unclosed["reason"], unclosed
        assert "plugin refused" in log and f"`::1:{port}`" in log
        assert rx.on("/v6-ambiguous") == [] and rx.on("/v6-unclosed") == []
        good = plugins["good-probe"]
        assert good["state"] == "active" and good["failures"] == 0, good

        assert_served(report, calls=WINDOW_CALLS)
        assert report.peak_rss <= report.start_rss + RSS_GROWTH, report
    finally:
        rx.close()
        if web is not None:
            web.close()
