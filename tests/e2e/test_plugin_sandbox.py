"""The plugin sandbox, second round: what a hostile component can do to the host.

Each test drops hostile components (built from source in this run: the Rust
guests of tests/plugins and the hand-written WAT of tests/plugins/memories)
into a running Vigil while an SDK client calls a tool in a loop
(`steady.py`), and asserts what the issue asks of every limit and a busy
machine cannot break: every client call and control-API read answered
(within the steady timeout, which only a stalled gateway reaches), none
failed, at least a window's worth of calls made beside the hostile plugins,
Vigil's RSS within a stated bound of the baseline's, an innocent plugin
(`good-probe`, the `webhook` notifier) working and never disabled, and the
limit named in `/api/v1/plugins` and in the log. The client's latency
against the baseline's is printed, not asserted: `vigil-bench busy-plugins`
measures it (docs/benchmarks.md, "Plugin sandbox, second round").
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import anyio
import pytest

from harness import Gateways, demo_stdio_args, stdio_backend
from steady import WINDOW_CALLS, Report, assert_served, baseline, steady_load
from support import ControlApi, Receiver, eprint, plugin_dir, plugins_by_name, poll

pytestmark = pytest.mark.anyio

ANSI = re.compile(r"\x1b\[[0-9;]*m")
MIB = 1 << 20


def assert_unharmed(base: Report, under: Report, *, rss_growth: int) -> None:
    """The steady workload under attack: served, and RSS against its baseline (latencies printed only)."""
    eprint(f"steady load: baseline {base}; with the hostile plugins {under}")
    assert_served(under, calls=WINDOW_CALLS)
    grew = under.peak_rss - base.start_rss
    assert grew <= rss_growth, f"Vigil's RSS grew {grew >> 20} MiB (bound {rss_growth >> 20} MiB): {under}"


def start(
    vigil: Gateways,
    demo_bin: Path,
    d: Path,
    probes: list[dict[str, object]],
    *,
    other: bool = False,
    extra: list[dict[str, object]] = [],  # noqa: B006 - never mutated
) -> tuple[object, ControlApi]:
    """Vigil with the `demo` backend (probed by `probes`), `other` (a second one to restart) and `extra`."""
    backend = stdio_backend("demo", demo_bin, demo_stdio_args("demo"))
    backend["probes"] = probes
    backends = [backend, *extra]
    if other:
        backends.append(stdio_backend("other", demo_bin, demo_stdio_args("other")))
    gw = vigil(backends, api={}, plugins={"dir": str(d)}, health={"interval": "2s", "timeout": "2s"})
    return gw, ControlApi(gw.api_base)


async def good_probe_calls(api: ControlApi) -> int:
    good = (await plugins_by_name(api))["good-probe"]
    assert good["state"] == "active" and good["failures"] == 0, good
    return int(good["calls"])


def log_of(gw: object) -> str:
    return ANSI.sub("", gw.proc.stderr())  # type: ignore[attr-defined]


async def test_busy_plugins_take_no_thread_from_mcp_or_the_api(
    vigil: Gateways, demo_bin: Path, built_plugins: Path, tmp_path: Path
) -> None:
    """Item 1: twice the CPUs' worth of busy loops, each running to a 5 s deadline.

    Before, plugin code ran on the gateway's async workers: three such probes
    on two CPUs stalled MCP calls up to 11.9 s and the API 6.5 s.
    """
    busy = [f"busy-{i}" for i in range(2 * (os.cpu_count() or 2))]
    d = plugin_dir(tmp_path, built_plugins, ["good-probe"])
    probes: list[dict[str, object]] = [{"plugin": "good-probe", "every": "300ms"}]
    # Each busy loop probes a backend of its own: their calls run at once.
    extra = [stdio_backend(b, demo_bin, demo_stdio_args(b)) for b in busy]
    for b, backend in zip(busy, extra, strict=True):
        backend["probes"] = [{"plugin": b, "every": "200ms"}]
    gw, api = start(vigil, demo_bin, d, probes, extra=extra)
    await poll(lambda: good_probe_calls(api), lambda n: n >= 2, "good-probe running")
    base = await baseline(gw, api)

    # Drop the busy loops in: the watcher loads them and each backend probe
    # round runs them, every one until its deadline.
    for b in busy:
        (d / f"{b}.toml").write_text('[limits]\ndeadline = "5s"\nfailures = 1000\n')
        shutil.copy(built_plugins / "busy-loop.wasm", d / f"{b}.wasm")
    await poll(
        lambda: plugins_by_name(api),
        lambda p: all(p.get(b, {}).get("calls", 0) >= 1 for b in busy),
        "every busy loop ran into its deadline once",
        timeout=60,
    )
    before = await good_probe_calls(api)
    async with steady_load(gw, api) as load:
        await load.more_calls(3 * WINDOW_CALLS)
    under = load.report()
    plugins = await plugins_by_name(api)
    assert_unharmed(base, under, rss_growth=96 * MIB)
    assert await good_probe_calls(api) > before + 5, "good-probe kept its schedule"
    for b in busy:
        assert plugins[b]["state"] == "active", plugins[b]
        assert "CPU deadline of 5s" in (plugins[b]["last_error"] or ""), plugins[b]


async def test_host_resources_a_call_creates_are_capped(
    vigil: Gateways, demo_bin: Path, built_plugins: Path, tmp_path: Path
) -> None:
    """Item 2: headers and request bodies live in the host, outside the memory cap.

    Before, a 16 MiB plugin made Vigil hold +414 MiB in a 1 s call.
    """
    # `host-hoard` fills header maps to 120 KiB each (past the host's bound
    # per map), `hoard-small` to 12 KiB each (so only their number stops it).
    hoarders = {"host-hoard": 120, "hoard-small": 12}
    d = plugin_dir(tmp_path, built_plugins, ["good-probe"])
    probes: list[dict[str, object]] = [{"plugin": "good-probe", "every": "300ms"}]
    probes += [{"plugin": h, "every": "300ms"} for h in hoarders]
    gw, api = start(vigil, demo_bin, d, probes)
    await poll(lambda: good_probe_calls(api), lambda n: n >= 2, "good-probe running")
    base = await baseline(gw, api)
    for h, kib in hoarders.items():
        (d / f"{h}.toml").write_text(f"[limits]\nfailures = 1000\n[config]\nmap_kib = {kib}\n")
        shutil.copy(built_plugins / "host-hoard.wasm", d / f"{h}.wasm")
    async with steady_load(gw, api) as load:
        hoard = await poll(
            lambda: plugins_by_name(api),
            lambda p: all(p.get(h, {}).get("calls", 0) >= 5 for h in hoarders),
            "each hoarder called five times",
            timeout=60,
        )
        await load.more_calls(WINDOW_CALLS)
    under = load.report()
    assert_unharmed(base, under, rss_growth=64 * MIB)
    big, small = hoard["host-hoard"], hoard["hoard-small"]
    assert "more than 16 KiB into one header map" in (big["last_limit"] or ""), big
    assert "limits.host_resources" in (small["last_limit"] or ""), small
    assert "ran out of host resources" in (small["last_error"] or ""), small
    log = log_of(gw)
    assert re.search(r"plugin call hit a limit.*limit=limits\.host_resources", log)
    assert re.search(r"plugin call hit a limit.*limit=host headers per map", log)
    assert (await plugins_by_name(api))["good-probe"]["failures"] == 0


async def test_the_memory_cap_is_the_total_of_every_memory(
    vigil: Gateways, demo_bin: Path, built_plugins: Path, tmp_path: Path
) -> None:
    """Item 3: a component's memories share one `limits.memory`; too many memories are refused.

    Before, each memory had the cap to itself: two 12 MiB memories passed a
    16 MiB cap (four got 4x the cap, and four pool slots).
    """
    d = plugin_dir(tmp_path, built_plugins, ["good-probe"])
    probes: list[dict[str, object]] = [
        {"plugin": "good-probe", "every": "300ms"},
        {"plugin": "two-memories", "every": "300ms"},
    ]
    gw, api = start(vigil, demo_bin, d, probes)
    await poll(lambda: good_probe_calls(api), lambda n: n >= 2, "good-probe running")
    base = await baseline(gw, api)
    for name in ["two-memories", "many-memories"]:
        (d / f"{name}.toml").write_text('[limits]\nmemory = "16MiB"\nfailures = 1000\n')
        shutil.copy(built_plugins / f"{name}.wasm", d / f"{name}.wasm")
    async with steady_load(gw, api) as load:
        plugins = await poll(
            lambda: plugins_by_name(api),
            lambda p: p.get("two-memories", {}).get("calls", 0) >= 5 and "many-memories" in p,
            "two-memories called five times, many-memories seen",
            timeout=60,
        )
        await load.more_calls(WINDOW_CALLS)
    under = load.report()
    assert_unharmed(base, under, rss_growth=64 * MIB)
    two = plugins["two-memories"]
    assert two["failures"] == two["calls"], f"every call must run out of memory: {two}"
    assert "ran out of its memory limit" in (two["last_error"] or ""), two
    assert "limits.memory" in (two["last_limit"] or "") and "memories and tables together" in two["last_limit"], two
    many = plugins["many-memories"]
    assert many["state"] == "rejected", many
    assert "4 Wasm linear memories" in many["reason"] or "4 linear memories" in many["reason"], many
    assert re.search(r"plugin call hit a limit.*limit=limits\.memory", log_of(gw))


async def test_a_crowd_of_slow_notifiers_disables_no_one(
    vigil: Gateways, demo_bin: Path, built_plugins: Path, tmp_path: Path
) -> None:
    """Item 4: 240 notifiers blocking on one event leave room for the innocent.

    Before, the engine's 64 slots ran out: other plugins' calls failed with
    "maximum concurrent limit", counted as their failures, until they were
    disabled and their alerts lost.
    """
    rx = Receiver()
    try:
        crowd = [f"slow-{i:03}" for i in range(240)]
        d = plugin_dir(tmp_path, built_plugins, ["good-probe", "webhook"])
        (d / "webhook.toml").write_text(
            f'[http]\nallowed_hosts = ["127.0.0.1:*"]\n[limits]\ndeadline = "3s"\nfailures = 2\n'
            f'[config]\nurl = "http://127.0.0.1:{rx.port}/alerts"\n[filter]\nrate = 600\n'
        )
        (d / "good-probe.toml").write_text("[limits]\nfailures = 2\n")
        probes: list[dict[str, object]] = [{"plugin": "good-probe", "every": "300ms"}]
        gw, api = start(vigil, demo_bin, d, probes, other=True)
        await poll(lambda: good_probe_calls(api), lambda n: n >= 2, "good-probe running")
        await api.wait_state("other", "running")
        base = await baseline(gw, api)
        for name in crowd:
            (d / f"{name}.toml").write_text('[limits]\ndeadline = "40s"\n[config]\nhold_ms = 30000\n')
            shutil.copy(built_plugins / "slow-notifier.wasm", d / f"{name}.wasm")
        await poll(
            lambda: plugins_by_name(api),
            lambda p: all(n in p for n in crowd),
            "the crowd loaded",
            timeout=120,
        )
        async with steady_load(gw, api) as load:
            # Events for everyone (another backend's restart): each slow
            # notifier now holds an instance for 30 s per event.
            restarted_at = time.monotonic()
            assert (await api.act("other", "restart")).status_code == 200
            alerts = await poll(
                lambda: anyio.to_thread.run_sync(lambda: [b for b, at in rx.on("/alerts") if at >= restarted_at]),
                lambda posts: any(b.get("backend") == "other" and b.get("to") == "restarting" for b in posts),
                "the webhook's alert of the restart",
            )
            before = await good_probe_calls(api)
            await poll(lambda: good_probe_calls(api), lambda n: n >= before + 5, "good-probe kept running")
            # Still inside the crowd's 30 s hold: enough calls to judge by.
            await load.more_calls(WINDOW_CALLS)
        under = load.report()
        assert alerts, "the innocent notifier delivered"
        assert_unharmed(base, under, rss_growth=256 * MIB)
        plugins = await plugins_by_name(api)
        assert all(p["state"] == "active" for p in plugins.values()), [
            (n, p["state"], p["reason"]) for n, p in plugins.items() if p["state"] != "active"
        ]
        assert plugins["webhook"]["failures"] == 0, plugins["webhook"]
        assert plugins["good-probe"]["failures"] == 0, plugins["good-probe"]
        assert "maximum concurrent" not in log_of(gw)
    finally:
        rx.close()
