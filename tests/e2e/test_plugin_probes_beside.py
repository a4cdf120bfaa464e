"""A probe plugin call runs beside its backend's supervisor, not in it.

The hostile guest is `tests/plugins/hanging-probe`: its `check` blocks in the
host on a `wasi:clocks` timer for its whole deadline (10 s here), using no
CPU. Three stdio demo backends: `hang` has the hanging probe, `control` is
the same backend without plugins (killed with it: the kill works alike on
both), `demo` serves the steady MCP workload and runs `good-probe` (the
innocent plugin).

What must hold while the probe hangs, each shown by the order of events in
Vigil's own log, never by how long something took: `hang` killed with
SIGKILL goes offline before the check in flight ends (before the fix the
supervisor was waiting for the probe: the rest of its deadline, up to
10 s); an operator restart of `hang` through the API is answered before
the check in flight ends (it waited for the probe too); that check still
ends at its deadline, named in `/api/v1/plugins` and the log; and the
steady workload is served (no failed call or API read, RSS bounded; its
latency is printed, not asserted), good-probe keeps probing and is not
disabled. The only clock is the probe's 10 s deadline, which a busy machine
does not come near.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from harness import Gateways, demo_pids, demo_stdio_args, stdio_backend
from steady import assert_served, steady_load
from support import ControlApi, eprint, plugin_dir, plugins_by_name, poll

pytestmark = pytest.mark.anyio

ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: Vigil's RSS may grow this much over its start while the probe hangs.
RSS_GROWTH = 64 << 20
STARTED = "hanging-probe: check started"
#: The WARN of a hanging check cut at its deadline: the end of a check.
ENDED = re.compile(r"plugin call failed.*plugin=hanging-probe.*deadline of 10s")


def log_lines(gw: Gateways) -> list[str]:
    return ANSI.sub("", gw.proc.stderr()).splitlines(keepends=True)


def mark(gw: Gateways) -> int:
    """Where Vigil's log is now: the number of complete lines in it."""
    return sum(1 for line in log_lines(gw) if line.endswith("\n"))


def since(gw: Gateways, at: int) -> list[str]:
    """The log lines written after `mark` gave `at`."""
    return log_lines(gw)[at:]


async def lines_since(gw: Gateways, at: int) -> list[str]:
    return since(gw, at)


def is_end(line: str) -> bool:
    return bool(ENDED.search(line))


def went_offline(line: str, backend: str) -> bool:
    return "health transition" in line and f"backend={backend} " in line and "to=offline" in line


def started_checks(gw: Gateways) -> int:
    return ANSI.sub("", gw.proc.stderr()).count(STARTED)


async def check_in_flight(gw: Gateways, after: int) -> int:
    """Waits for a check to start after `after` had; returns the new count."""

    async def count() -> int:
        return started_checks(gw)

    return await poll(count, lambda n: n > after, "a hanging check in flight")


async def offline_after(api: ControlApi, name: str, since_ms: int) -> int:
    """The time (unix ms) of `name`'s first move to offline at or after `since_ms`."""

    def first(i: dict) -> int | None:
        return next((t["at"] for t in i["transitions"] if t["to"] == "offline" and t["at"] >= since_ms), None)

    instance = await poll(lambda: api.instance(name), lambda i: first(i) is not None, f"{name} offline")
    found = first(instance)
    assert found is not None
    return found


async def test_a_hanging_probe_holds_up_neither_exits_nor_commands(
    vigil: Gateways, demo_bin: Path, built_plugins: Path, tmp_path: Path
) -> None:
    d = plugin_dir(tmp_path, built_plugins, ["hanging-probe", "good-probe"])
    # Many failures allowed: the test is about the supervisor, not disabling.
    (d / "hanging-probe.toml").write_text('[limits]\ndeadline = "10s"\nfailures = 100\n')
    hang = stdio_backend("hang", demo_bin, demo_stdio_args("hang"))
    hang["probes"] = [{"plugin": "hanging-probe", "every": "4s"}]
    control = stdio_backend("control", demo_bin, demo_stdio_args("control"))
    demo = stdio_backend("demo", demo_bin, demo_stdio_args("demo"))
    demo["probes"] = [{"plugin": "good-probe", "every": "200ms"}]
    gw = vigil(
        [hang, control, demo],
        api={},
        plugins={"dir": str(d)},
        health={"interval": "1s", "timeout": "1s"},
        restart={"base": "100ms", "max": "300ms", "jitter": 0.0},
    )
    api = ControlApi(gw.api_base)
    for name in ["hang", "control", "demo"]:
        await api.wait_state(name, "running")

    async with steady_load(gw, api) as load:
        seen = await check_in_flight(gw, 0)
        # Kill both at once while hang's probe hangs (it has ~10 s to go).
        pids = {n: demo_pids(gw.proc.pid, n, demo_bin) for n in ["hang", "control"]}
        assert all(pids.values()), pids
        before_kill = mark(gw)
        killed_ms = int(time.time() * 1000)
        for ps in pids.values():
            for pid in ps:
                os.kill(pid, signal.SIGKILL)
        hang_off = await offline_after(api, "hang", killed_ms)
        control_off = await offline_after(api, "control", killed_ms)
        exit_delays = ((hang_off - killed_ms) / 1000, (control_off - killed_ms) / 1000)
        # In Vigil's log: hang went offline before the check in flight ended
        # (one check at a time: the first end after the kill is its end; a
        # check of an instance that went down is dropped, so there may be none).
        after_kill = await poll(
            lambda: lines_since(gw, before_kill),
            lambda lines: any(went_offline(line, "hang") for line in lines),
            "hang's transition to offline in the log",
        )
        offline_at = next(i for i, line in enumerate(after_kill) if went_offline(line, "hang"))
        end_at = next((i for i, line in enumerate(after_kill) if is_end(line)), len(after_kill))
        assert offline_at < end_at, f"hang went offline only after its hanging check ended: {after_kill[: end_at + 1]}"

        # Back up; its next check hangs again: an operator restart meanwhile.
        await api.wait_for("hang", lambda i: i["state"] == "running" and i["restart_count"] >= 1, "hang running again")
        seen = await check_in_flight(gw, seen)
        before_command = mark(gw)
        t0 = time.perf_counter()
        await api.act_ok("hang", "restart")
        command_took = time.perf_counter() - t0
        # Answered while the check still hangs: its end is not in the log yet.
        ended = [line for line in since(gw, before_command) if is_end(line)]
        assert ended == [], f"the operator restart was answered only after the hanging check ended: {ended}"

        # The next check hangs to its deadline: the call ends there, named.
        hung = await poll(
            lambda: plugins_by_name(api),
            lambda p: "deadline of 10s" in (p["hanging-probe"].get("last_error") or ""),
            "the hanging check cut at its deadline",
        )
    report = load.report()
    eprint(
        f"while the probe hangs: {report}\nfor information: offline after SIGKILL (Vigil's transition times): "
        f"hang {exit_delays[0]:.2f} s, control {exit_delays[1]:.2f} s; "
        f"operator restart answered in {command_took:.2f} s"
    )

    probe = hung["hanging-probe"]
    assert probe["state"] == "active", probe
    log = ANSI.sub("", gw.proc.stderr())
    assert re.search(r"plugin call failed.*plugin=hanging-probe.*deadline of 10s", log), "no WARN naming the deadline"
    good = hung["good-probe"]
    assert good["state"] == "active" and good["failures"] == 0 and good["calls"] > 0, good
    # A probe plugin that failed leaves the state `unknown` until the next
    # probe (it says nothing about the backend): wait for that probe.
    await api.wait_state("demo", "running")
    served = await api.instance("demo")
    assert served["restart_count"] == 0, served

    assert_served(report)
    assert report.peak_rss <= report.start_rss + RSS_GROWTH, report
