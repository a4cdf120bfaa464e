"""WebAssembly plugins, built from source in this test run (see `built_plugins`).

Hostile plugins (busy loop, memory bomb, panic, huge return value, wrong
world, incompatible WIT version, corrupt file) are stopped or refused with a
clear reason in the API and the log, while the gateway keeps serving MCP
traffic. Plugins in the directory are replaced only by versions that
validate, and compiled code is cached across restarts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from harness import Gateways, demo_pids, demo_stdio_args, free_port, run_vigil, stdio_backend
from support import ControlApi, Receiver, call_text, http_session, plugin_dir, plugins_by_name, poll

pytestmark = pytest.mark.anyio

ANSI = re.compile(r"\x1b\[[0-9;]*m")

HOSTILE_PROBES = ["busy-loop", "memory-bomb", "trap", "huge-return"]


async def test_hostile_plugins_are_stopped_or_refused_while_mcp_keeps_serving(
    vigil: Gateways, demo_bin: Path, built_plugins: Path, tmp_path: Path
) -> None:
    d = plugin_dir(
        tmp_path, built_plugins, [*HOSTILE_PROBES, "wrong-world", "future-version", "good-probe", "http-not-allowed"]
    )
    (d / "corrupt.wasm").write_bytes(b"\0asm\x0d\0\x01\0" + bytes(range(256)) * 8)
    # A notifier that posts to a live local server its manifest does not allow.
    rx = Receiver()
    (d / "http-not-allowed.toml").write_text(
        f'[http]\nallowed_hosts = ["example.com"]\n[config]\nurl = "http://127.0.0.1:{rx.port}/sneaky"\n'
    )
    # Fail fast: two failures in a row disable a plugin.
    for name in HOSTILE_PROBES:
        (d / f"{name}.toml").write_text('[limits]\ndeadline = "300ms"\nfailures = 2\n')
    backend = stdio_backend("demo", demo_bin, demo_stdio_args("demo"))
    backend["probes"] = [{"plugin": p, "every": "200ms"} for p in [*HOSTILE_PROBES, "good-probe"]]
    gw = vigil([backend], api={}, plugins={"dir": str(d)}, health={"interval": "1s", "timeout": "1s"})
    api = ControlApi(gw.api_base)

    async with http_session(gw.url) as session:
        # MCP calls keep succeeding while the plugins misbehave. The caller
        # stops between calls, never inside one: the SDK client fails its
        # session's teardown when a call's JSON answer arrives after it.
        stop = anyio.Event()

        async def keep_calling() -> None:
            n = 0
            while not stop.is_set():
                n += 1
                assert await call_text(session, "demo__echo", {"text": f"call {n}"}) == f"call {n}"
                await anyio.sleep(0.05)

        async with anyio.create_task_group() as tg:
            tg.start_soon(keep_calling)
            plugins = await poll(
                lambda: plugins_by_name(api),
                lambda p: all(p.get(n, {}).get("state") == "disabled" for n in HOSTILE_PROBES),
                "every hostile probe disabled",
            )
            stop.set()

    # The notifier ran on the startup transitions; every request refused.
    sneaky = await poll(
        lambda: plugins_by_name(api),
        lambda p: bool(p["http-not-allowed"].get("last_error")),
        "the notifier's delivery failed",
    )
    log = ANSI.sub("", gw.proc.stderr())
    assert f"does not allow; refused host=127.0.0.1 port={rx.port}" in log
    assert rx.on("/sneaky") == [], "the request must never reach the server"
    rx.close()
    assert sneaky["http-not-allowed"]["state"] == "active"
    reasons = {n: plugins[n]["reason"] for n in HOSTILE_PROBES}
    assert "CPU deadline" in reasons["busy-loop"], reasons
    assert "memory limit" in reasons["memory-bomb"], reasons
    assert "panicked" in reasons["trap"], reasons
    # 64 MiB of return value cannot even be built within 16 MiB of memory.
    assert "memory limit" in reasons["huge-return"], reasons
    refused = {n: plugins[n] for n in ["wrong-world", "future-version", "corrupt"]}
    assert all(p["state"] == "rejected" for p in refused.values()), refused
    assert "not a Vigil plugin" in refused["wrong-world"]["reason"]
    assert "vigil:plugin@0.2.0" in refused["future-version"]["reason"]
    assert "vigil:plugin@0.1.0" in refused["future-version"]["reason"]
    assert "not a valid WebAssembly component" in refused["corrupt"]["reason"]
    good = plugins["good-probe"]
    assert good["state"] == "active" and good["calls"] > 0 and good["failures"] == 0, good

    # The backend was never restarted for any of it, and is running. A probe
    # plugin's failure says nothing about the backend: it leaves the state
    # `unknown` until the next probe (the last hostile probe's failure may
    # be the latest event here), so wait for that probe.
    await api.wait_state("demo", "running")
    demo = await api.instance("demo")
    assert demo["restart_count"] == 0, demo
    for name in HOSTILE_PROBES:
        assert re.search(rf"plugin disabled.*plugin={name}|plugin={name}.*plugin disabled", log), name
    assert "plugin refused" in log and "future-version" in log


async def test_a_bad_new_version_leaves_the_old_one_running_and_removal_unloads(
    vigil: Gateways, demo_bin: Path, built_plugins: Path, tmp_path: Path
) -> None:
    d = plugin_dir(tmp_path, built_plugins, [])
    shutil.copy(built_plugins / "good-probe.wasm", d / "swap.wasm")
    backend = stdio_backend("demo", demo_bin, demo_stdio_args("demo"))
    backend["probes"] = [{"plugin": "swap", "every": "200ms"}]
    gw = vigil([backend], api={}, plugins={"dir": str(d)})
    api = ControlApi(gw.api_base)
    first = await poll(
        lambda: plugins_by_name(api),
        lambda p: p.get("swap", {}).get("calls", 0) > 0,
        "swap loaded and called",
    )
    assert first["swap"]["kind"] == "probe"

    # Replace it with another valid probe: swapped in, no restart of Vigil.
    (d / "swap.toml").write_text('[http]\nallowed_hosts = ["127.0.0.1:*"]\n')
    tmp = d / "swap.wasm.tmp"
    shutil.copy(built_plugins / "http-readiness.wasm", tmp)
    tmp.replace(d / "swap.wasm")
    swapped = await poll(
        lambda: plugins_by_name(api),
        lambda p: p["swap"]["sha256"] != first["swap"]["sha256"],
        "the new version swapped in",
    )
    assert swapped["swap"]["state"] == "active", swapped["swap"]
    assert swapped["swap"]["loaded_at"] > first["swap"]["loaded_at"], swapped["swap"]
    assert gw.proc.alive(), "vigil was not restarted"
    sha = swapped["swap"]["sha256"]

    # Replace it with a file that does not validate: refused, old one runs.
    (d / "swap.wasm").write_bytes(b"not wasm at all")
    after = await poll(
        lambda: plugins_by_name(api),
        lambda p: "new version refused" in (p["swap"].get("last_error") or ""),
        "the bad version refused",
    )
    assert after["swap"]["state"] == "active" and after["swap"]["sha256"] == sha, after["swap"]
    calls = after["swap"]["calls"]
    later = await poll(
        lambda: plugins_by_name(api), lambda p: p["swap"]["calls"] > calls, "the old version still called"
    )
    assert later["swap"]["failures"] == 0

    # Removing the file unloads the plugin.
    (d / "swap.wasm").unlink()
    await poll(lambda: plugins_by_name(api), lambda p: "swap" not in p, "swap unloaded")


async def test_compiled_plugins_are_cached_across_restarts(
    vigil: Gateways, demo_bin: Path, built_plugins: Path, tmp_path: Path
) -> None:
    d = plugin_dir(tmp_path, built_plugins, ["good-probe"])
    gw = vigil([stdio_backend("demo", demo_bin, demo_stdio_args("demo"))], api={}, plugins={"dir": str(d)})
    api = ControlApi(gw.api_base)
    first = await poll(lambda: plugins_by_name(api), lambda p: "good-probe" in p, "good-probe loaded")
    assert first["good-probe"]["from_cache"] is False

    again = vigil.serve_again(gw)
    api = ControlApi(again.api_base)
    second = await poll(lambda: plugins_by_name(api), lambda p: "good-probe" in p, "good-probe loaded again")
    assert second["good-probe"]["from_cache"] is True, second


class ReadyServer:
    """A local HTTP server whose `/ready` answers the status the test sets."""

    def __init__(self) -> None:
        import http.server
        import threading

        self.status = 200
        self.hits = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                outer.hits += 1
                body = b"ready" if outer.status == 200 else b"not ready"
                self.send_response(outer.status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def test_a_probe_plugin_fails_a_backend_into_a_restart_and_back_to_running(
    vigil: Gateways, demo_bin: Path, built_plugins: Path, tmp_path: Path
) -> None:
    """http-readiness (first-party, built with the SDK) drives the backend's health."""
    ready = ReadyServer()
    try:
        d = plugin_dir(tmp_path, built_plugins, ["http-readiness"])
        (d / "http-readiness.toml").write_text('[http]\nallowed_hosts = ["127.0.0.1:*"]\n[limits]\ndeadline = "2s"\n')
        backend = stdio_backend("demo", demo_bin, demo_stdio_args("demo"))
        backend["probes"] = [
            {"plugin": "http-readiness", "every": "200ms", "url": f"http://127.0.0.1:{ready.port}/ready"}
        ]
        gw = vigil(
            [backend],
            api={},
            plugins={"dir": str(d)},
            # The built-in ping stays quiet; the plugin decides.
            health={"interval": "30s", "timeout": "5s", "unhealthy_threshold": 2},
            restart={"base": "100ms", "max": "300ms", "jitter": 0.0},
        )
        api = ControlApi(gw.api_base)
        await poll(lambda: plugins_by_name(api), lambda p: p.get("http-readiness", {}).get("calls", 0) > 0, "probed")
        assert (await api.instance("demo"))["state"] == "running"

        ready.status = 503
        failed = await poll(lambda: api.instance("demo"), lambda i: i["restart_count"] >= 1, "a restart")
        reasons = " | ".join(t["reason"] for t in failed["transitions"])
        assert "probe plugin 'http-readiness'" in reasons and "503" in reasons, reasons

        ready.status = 200
        back = await poll(
            lambda: api.instance("demo"),
            lambda i: i["state"] == "running" and i["transitions"][-1]["to"] == "running",
            "running again",
        )
        restarts = back["restart_count"]
        hits = ready.hits
        await poll(lambda: anyio.to_thread.run_sync(lambda: ready.hits), lambda h: h >= hits + 3, "more probes")
        steady = await api.instance("demo")
        assert steady["state"] == "running" and steady["restart_count"] == restarts, steady
        states = [t["to"] for t in steady["transitions"]]
        assert "offline" in states and "restarting" in states, states
    finally:
        ready.close()


def notifier_manifest(url: str, rate: int = 60) -> str:
    return (
        '[http]\nallowed_hosts = ["127.0.0.1:*"]\n[limits]\ndeadline = "3s"\n'
        f'[config]\nurl = "{url}"\n[filter]\nmin_severity = "info"\nrate = {rate}\n'
    )


async def test_notifiers_deliver_discord_and_slack_payloads_for_a_killed_backend(
    vigil: Gateways, demo_bin: Path, built_plugins: Path, tmp_path: Path
) -> None:
    """A real kill -9; a notifier whose receiver is down retries and delays no one."""
    rx = Receiver()
    try:
        d = plugin_dir(tmp_path, built_plugins, ["discord", "slack", "webhook"])
        base = f"http://127.0.0.1:{rx.port}"
        (d / "discord.toml").write_text(notifier_manifest(f"{base}/discord"))
        (d / "slack.toml").write_text(notifier_manifest(f"{base}/slack"))
        # Nothing listens on this port: every delivery fails.
        (d / "webhook.toml").write_text(notifier_manifest(f"http://127.0.0.1:{free_port()}/down"))
        gw = vigil(
            [stdio_backend("demo", demo_bin, demo_stdio_args("demo"))],
            api={},
            plugins={"dir": str(d)},
            restart={"base": "200ms", "max": "500ms", "jitter": 0.0},
        )
        api = ControlApi(gw.api_base)
        await poll(
            lambda: plugins_by_name(api),
            lambda p: all(p.get(n, {}).get("state") == "active" for n in ["discord", "slack", "webhook"]),
            "notifiers loaded",
        )
        await poll(lambda: api.instance("demo"), lambda i: i["state"] == "running", "demo running")
        [pid] = await anyio.to_thread.run_sync(demo_pids, gw.proc.pid, "demo", demo_bin)
        killed_at = time.monotonic()
        os.kill(pid, signal.SIGKILL)

        def offline(path: str) -> list[tuple[Any, float]]:
            return [(b, at) for b, at in rx.on(path) if "offline" in json.dumps(b)]

        await poll(lambda: anyio.to_thread.run_sync(lambda: offline("/discord")), bool, "Discord alert")
        await poll(lambda: anyio.to_thread.run_sync(lambda: offline("/slack")), bool, "Slack alert")
        [(discord, discord_at), *_] = offline("/discord")
        [(slack, _), *_] = offline("/slack")

        # Discord's webhook shape: username, content, one embed.
        assert discord["username"] and discord["content"], discord
        [embed] = discord["embeds"]
        assert "demo" in embed["title"] and "offline" in embed["title"], embed
        assert isinstance(embed["color"], int) and embed["timestamp"], embed
        assert "SIGKILL" in embed["description"] or "signal 9" in embed["description"], embed
        # Slack's incoming-webhook shape: text plus blocks.
        assert "demo" in slack["text"], slack
        assert slack["blocks"][0]["type"] == "section", slack
        assert "offline" in json.dumps(slack["blocks"]), slack

        # The Discord alert did not wait for the failing webhook's retries
        # (its backoff alone is 0.5 + 1 + 2 + 4 s).
        assert discord_at - killed_at < 3.0, discord_at - killed_at
        log_of = lambda: ANSI.sub("", gw.proc.stderr())  # noqa: E731
        await poll(
            lambda: anyio.to_thread.run_sync(lambda: log_of().count("notifier failed; retrying")),
            lambda n: n >= 2,
            "the failing notifier retried",
        )
        assert "plugin=webhook" in log_of()
        webhook = (await plugins_by_name(api))["webhook"]
        assert webhook["last_error"], webhook
        # The backend came back, and that was announced too.
        await poll(
            lambda: anyio.to_thread.run_sync(
                lambda: [b for b, at in rx.on("/discord") if at > discord_at and "running" in json.dumps(b)]
            ),
            bool,
            "the recovery announced",
        )
    finally:
        rx.close()


def test_plugin_check_prints_the_world_or_the_reason(vigil_bin: Path, built_plugins: Path, tmp_path: Path) -> None:
    ok = run_vigil(vigil_bin, ["plugin", "check", str(built_plugins / "good-probe.wasm")], tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "world:    probe (vigil:plugin@0.1.0)" in ok.stdout, ok.stdout
    assert "exports:  vigil:plugin/prober@0.1.0" in ok.stdout, ok.stdout
    assert "vigil:plugin/target@0.1.0" in ok.stdout, ok.stdout

    manifest = tmp_path / "m.toml"
    manifest.write_text('kind = "notifier"\n')
    wrong_kind = run_vigil(
        vigil_bin, ["plugin", "check", str(built_plugins / "good-probe.wasm"), "--manifest", str(manifest)], tmp_path
    )
    assert wrong_kind.returncode == 2 and 'kind = "notifier"' in wrong_kind.stderr, wrong_kind.stderr

    future = run_vigil(vigil_bin, ["plugin", "check", str(built_plugins / "future-version.wasm")], tmp_path)
    assert future.returncode == 2
    assert "vigil:plugin@0.2.0" in future.stderr and "vigil:plugin@0.1.0" in future.stderr, future.stderr
    other = run_vigil(vigil_bin, ["plugin", "check", str(built_plugins / "wrong-world.wasm")], tmp_path)
    assert other.returncode == 2 and "not a Vigil plugin" in other.stderr, other.stderr


def test_plugin_new_scaffolds_crates_that_build_and_pass_check(vigil_bin: Path, tmp_path: Path) -> None:
    """`vigil plugin new` crates build as they are and validate as plugins of their kind."""
    target = Path(os.environ.get("HOME", "/root")) / ".cache" / "vigil-plugins-target"
    env = {k: v for k, v in os.environ.items() if k != "CARGO_TARGET_DIR"} | {"CARGO_TARGET_DIR": str(target)}
    for kind in ("probe", "notifier"):
        name = f"my-{kind}"
        made = run_vigil(vigil_bin, ["plugin", "new", name, "--kind", kind], tmp_path)
        assert made.returncode == 0, made.stderr
        built = subprocess.run(
            ["cargo", "build", "--release", "--target", "wasm32-wasip2"],
            cwd=tmp_path / name,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert built.returncode == 0, built.stderr[-3000:]
        wasm = target / "wasm32-wasip2" / "release" / f"{name.replace('-', '_')}.wasm"
        manifest = tmp_path / name / f"{name}.toml"
        checked = run_vigil(vigil_bin, ["plugin", "check", str(wasm), "--manifest", str(manifest)], tmp_path)
        assert checked.returncode == 0, checked.stderr
        assert f"world:    {kind} (vigil:plugin@0.1.0)" in checked.stdout, checked.stdout
    again = run_vigil(vigil_bin, ["plugin", "new", "my-probe", "--kind", "probe"], tmp_path)
    assert again.returncode == 2 and "already exists" in again.stderr, again.stderr
