"""Health monitoring and self-healing, seen through the control API and one MCP session.

Each test runs `vigil serve` with stdio demo backends (runtime `process`) and
reads what the health monitor did from the control API
(`GET /api/v1/health/instances/NAME`: state, counters, and the transition
history with the time of each change), while an MCP client checks what the
clients see: a backend that is down fails fast with "unavailable" and leaves
`tools/list`, the others keep answering in the same session.

- a SIGKILLed backend goes running → offline → restarting → starting → running;
- a backend that crashes on every start is restarted with exponential backoff
  (the recorded delays grow as the policy says, within its jitter) and is
  quarantined after `max_restarts` failures, then left alone until released;
- a flapping backend (up, then down after a moment) is quarantined after a
  bounded number of restarts: no restart storm;
- a frozen backend (SIGSTOP) is caught by the readiness probe (degraded, then
  offline) and restarted, while another backend keeps answering;
- quarantine, restart count and history survive a restart of `vigil serve`;
- the API's tokens: 401 without or with an unknown token, 403 for a viewer's
  restart, 200 for an operator's, both in the audit log.

Times in the history are compared with the restart policy (a delay may be
shortened by up to `jitter`, never lengthened beyond a small scheduling
allowance); nothing else measures time.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import ClientSession
from mcp.shared.exceptions import MCPError

from harness import (
    Gateways,
    Procs,
    Vigil,
    demo_pids,
    demo_stdio_args,
    free_port,
    pids_with_arg,
    process_state,
    render_config,
    stdio_backend,
    wait_api,
    wait_http,
)
from support import (
    DEMO_TOOLS,
    ControlApi,
    Inbox,
    call_error,
    call_text,
    find_run,
    http_session,
    is_tools_list_changed,
    is_unavailable,
    poll,
    prefixed,
    short,
    transition_path,
    wait_for_tools,
)

pytestmark = pytest.mark.anyio

ALPHA = prefixed("alpha", DEMO_TOOLS)
BETA = prefixed("beta", DEMO_TOOLS)

#: What a restart looks like in the history, from the moment the backend went down.
RESTART_CYCLE = ["running", "offline", "restarting", "starting", "running"]

#: Time a supervisor may take, beyond the backoff delay itself, between
#: recording `restarting` and recording the next `starting` (stopping what is
#: left of the instance, waking up). The delays under test are 200-800 ms.
SCHEDULING_ALLOWANCE_MS = 150


def demo(name: str, demo_bin: Path, tools_file: Path | None = None) -> dict[str, Any]:
    return stdio_backend(name, demo_bin, demo_stdio_args(name, tools_file))


async def one_pid(gw: Vigil, name: str, demo_bin: Path) -> int:
    """The pid of the single demo backend process `name` under the gateway."""
    [pid] = await poll(
        lambda: anyio.to_thread.run_sync(demo_pids, gw.proc.pid, name, demo_bin),
        lambda pids: len(pids) == 1,
        f"one {name} backend process under vigil",
    )
    return pid


async def wait_unavailable(s: ClientSession, tool: str, backend: str) -> MCPError:
    """Call `tool` until the gateway answers with the "unavailable" error naming `backend`.

    Right after a backend dies the gateway may not have noticed yet; every
    call must still come back (a hang fails the test).
    """
    what = f"{tool} to fail with {backend!r} unavailable"
    return await poll(lambda: call_error(s, tool), lambda e: is_unavailable(e, backend), what)


async def stays_put(api: ControlApi, name: str, detail: dict[str, Any], seconds: float) -> None:
    """For `seconds`, poll `name`: its state and history must not change from `detail`.

    A bounded observation window for something that must *not* happen (a
    restart after quarantine): the window is the wait; every poll is a check.
    """
    with anyio.move_on_after(seconds):
        while True:
            now = await api.instance(name)
            assert now["state"] == detail["state"], f"{name} left {detail['state']}: {short(now)}"
            new = now["transitions"][len(detail["transitions"]) :]
            assert not new, f"{name} changed while it should have stayed {detail['state']}: {short(new)}"
            await anyio.sleep(0.2)


def count_to(transitions: list[dict[str, Any]], state: str) -> int:
    return sum(1 for t in transitions if t["to"] == state)


# === 1. SIGKILL ===


async def test_sigkilled_backend_goes_offline_and_is_restarted(vigil: Gateways, demo_bin: Path) -> None:
    """kill -9 of a stdio backend: offline (reason says SIGKILL), restarted, its tools leave and return."""
    # A 2 s backoff leaves a window in which alpha is visibly down.
    gw = vigil([demo("alpha", demo_bin), demo("beta", demo_bin)], api={}, restart={"base": "2s"})
    api = ControlApi(gw.api_base)
    inbox = Inbox()
    async with http_session(gw.url, message_handler=inbox) as s:
        await wait_for_tools(s, ALPHA | BETA)
        before = await api.wait_state("alpha", "running")
        pid = await one_pid(gw, "alpha", demo_bin)
        seen = len(inbox.matching(is_tools_list_changed))

        os.kill(pid, signal.SIGKILL)

        # Meanwhile: alpha's calls fail at once, its tools are gone, beta answers in the same session.
        await wait_unavailable(s, "alpha__echo", "alpha")
        again = await call_error(s, "alpha__whoami")
        assert is_unavailable(again, "alpha"), again
        assert await call_text(s, "beta__whoami") == "beta"
        await wait_for_tools(s, BETA, absent=ALPHA)
        assert await call_text(s, "beta__echo", {"text": "still here"}) == "still here"

        # Back: its tools return and it answers, still in the same session.
        await wait_for_tools(s, ALPHA | BETA)
        assert await call_text(s, "alpha__whoami") == "alpha"
        # Each change was announced: one tools/list_changed when they left, one when they came back.
        await inbox.wait_for(is_tools_list_changed, "tools/list_changed for the leave and the return", count=seen + 2)

        start = len(before["transitions"])
        detail = await api.wait_for(
            "alpha",
            lambda d: d["state"] == "running" and find_run(d["transitions"], RESTART_CYCLE, start) is not None,
            f"history to show {' > '.join(RESTART_CYCLE)} after the kill",
        )
        i = find_run(detail["transitions"], RESTART_CYCLE, start)
        assert i is not None
        cycle = detail["transitions"][i : i + len(RESTART_CYCLE) - 1]
        assert all(t["reason"].strip() for t in cycle), f"empty reason in {short(cycle)}"
        assert "SIGKILL" in cycle[0]["reason"], f"the offline reason should say how it ended: {cycle[0]['reason']!r}"
        assert "SIGKILL" in (detail["last_exit"] or ""), f"last_exit: {detail['last_exit']!r}"
        assert detail["restart_count"] == before["restart_count"] + 1, short(detail)
        assert [t["at"] for t in cycle] == sorted(t["at"] for t in cycle), f"times out of order: {short(cycle)}"
        assert pid not in await anyio.to_thread.run_sync(demo_pids, gw.proc.pid, "alpha", demo_bin)
        assert (await api.instance("beta"))["state"] == "running"


# === 2. crash on every start: backoff, quarantine, release ===

CRASH_POLICY = {"base": "200ms", "multiplier": 2.0, "jitter": 0.1, "max_restarts": 4, "max": "5s"}
CRASH_BASE_MS, CRASH_MULTIPLIER, CRASH_JITTER, CRASH_MAX_RESTARTS, CRASH_MAX_MS = 200, 2.0, 0.1, 4, 5000


async def test_crash_looping_backend_backs_off_and_is_quarantined(vigil: Gateways, demo_bin: Path) -> None:
    """Every start fails: restarts wait base·multiplier^(n−1) (minus jitter), then quarantine; release restarts it."""
    crashy = stdio_backend("crashy", "sh", ["-c", "echo boom >&2; exit 3"])
    gw = vigil([crashy, demo("beta", demo_bin)], api={}, restart=CRASH_POLICY)
    api = ControlApi(gw.api_base)

    detail = await api.wait_state("crashy", "quarantined")
    ts = detail["transitions"]
    restarts = CRASH_MAX_RESTARTS - 1  # the last failure quarantines instead of restarting
    expected = ["starting>restarting", "restarting>starting"] * restarts + ["starting>quarantined"]
    assert transition_path(ts) == expected, short(ts)
    assert detail["restart_count"] == restarts, short(detail)
    assert detail["consecutive_failures"] == CRASH_MAX_RESTARTS, short(detail)
    assert detail["quarantine_reason"], short(detail)
    assert detail["next_retry_at"] is None, f"a quarantined backend has no retry scheduled: {short(detail)}"
    assert all(t["reason"].strip() for t in ts), f"empty reason in {short(ts)}"

    # Each wait between `restarting` and the next `starting` is the policy's delay:
    # d_n = base·multiplier^(n−1) (capped at max), shortened by at most `jitter`.
    waits = [st["at"] - r["at"] for r, st in zip(ts[0::2], ts[1::2], strict=False)]
    for n, waited in enumerate(waits, start=1):
        d = min(CRASH_BASE_MS * CRASH_MULTIPLIER ** (n - 1), CRASH_MAX_MS)
        low, high = d * (1 - CRASH_JITTER), d + SCHEDULING_ALLOWANCE_MS
        # Times are whole milliseconds: allow one for the rounding of each end.
        assert low - 1 <= waited <= high, f"restart {n} waited {waited} ms, policy [{low:.0f}, {d:.0f}] ms: {waits}"
    assert waits == sorted(waits) and len(set(waits)) == len(waits), f"the delays must grow: {waits}"

    # Quarantined: no further start for a whole `max` period.
    await stays_put(api, "crashy", detail, CRASH_MAX_MS / 1000)

    # Release applies to quarantined backends only (409 otherwise) and restarts it.
    refused = await api.act("beta", "release")
    assert refused.status_code == 409, f"release of a running backend: HTTP {refused.status_code} {refused.text}"
    report = await api.act_ok("crashy", "release")
    assert report["state"] == "restarting", short(report)
    released = await api.wait_for(
        "crashy",
        lambda d: find_run(d["transitions"], ["quarantined", "restarting", "starting"], len(ts)) is not None,
        "a start after the release",
    )
    [release] = [t for t in released["transitions"][len(ts) :] if t["from"] == "quarantined"]
    assert "local" in release["reason"], f"without tokens the principal is `local`: {release['reason']!r}"


# === 3. flapping ===


async def test_flapping_backend_is_quarantined_without_a_restart_storm(
    vigil: Gateways, demo_bin: Path, tmp_path: Path
) -> None:
    """Up for 2 s, then gone, every time: max_restarts−1 restarts, then quarantine; no more starts."""
    starts = tmp_path / "flappy.starts"
    # Each start appends a line to `starts`, then runs the demo backend for 2 s (timeout sends SIGTERM).
    script = 'echo start >>"$1"; exec timeout 2 "$2" --transport stdio --name flappy'
    max_restarts = 3
    flappy = {
        **stdio_backend("flappy", "sh", ["-c", script, "flap", str(starts), str(demo_bin)]),
        "restart": {"base": "200ms", "max_restarts": max_restarts, "healthy_reset": "30s"},
    }
    gw = vigil([flappy], api={})
    api = ControlApi(gw.api_base)

    detail = await api.wait_state("flappy", "quarantined")
    ts = detail["transitions"]
    assert count_to(ts, "restarting") == max_restarts - 1, short(ts)
    assert detail["restart_count"] == max_restarts - 1, short(detail)
    assert transition_path(ts).count("starting>running") == max_restarts, f"up every time? {short(ts)}"
    assert transition_path(ts)[-2:] == ["running>offline", "offline>quarantined"], short(ts)
    assert starts.read_text().count("start") == max_restarts, "Vigil's starts of the wrapper"

    # No further start: not in the history, not as a process. The next backoff
    # would have been 200 ms · 2^3 = 1.6 s; watch for longer than that.
    await stays_put(api, "flappy", detail, 3.0)
    assert starts.read_text().count("start") == max_restarts
    assert not await anyio.to_thread.run_sync(demo_pids, gw.proc.pid, "flappy", demo_bin)


# === 4. hung backend ===


async def test_frozen_backend_is_caught_by_the_probe_and_restarted(vigil: Gateways, demo_bin: Path) -> None:
    """SIGSTOP: probes time out (degraded, then offline), Vigil restarts it; beta answers meanwhile."""
    gw = vigil(
        [demo("alpha", demo_bin), demo("beta", demo_bin)],
        api={},
        health={"interval": "1s", "timeout": "500ms", "unhealthy_threshold": 2},
        restart={"base": "200ms"},
    )
    api = ControlApi(gw.api_base)
    async with http_session(gw.url) as s:
        await wait_for_tools(s, ALPHA | BETA)
        before = await api.wait_state("alpha", "running")
        pid = await one_pid(gw, "alpha", demo_bin)
        os.kill(pid, signal.SIGSTOP)
        try:
            degraded = await api.wait_for(
                "alpha",
                lambda d: any(t["to"] == "degraded" for t in d["transitions"][len(before["transitions"]) :]),
                "degraded after the SIGSTOP",
            )
            [first] = [t for t in degraded["transitions"][len(before["transitions"]) :] if t["to"] == "degraded"][:1]
            assert "probe" in first["reason"], f"degraded for the failed probe: {first['reason']!r}"

            # Meanwhile: beta answers while alpha is still frozen (Vigil has not killed it yet).
            assert process_state(pid) == "T", "alpha should still be stopped"
            assert await call_text(s, "beta__whoami") == "beta"
            assert process_state(pid) == "T", "alpha should still be stopped"

            cycle = ["running", "degraded", "offline", "restarting", "starting", "running"]
            detail = await api.wait_for(
                "alpha",
                lambda d: find_run(d["transitions"], cycle, len(before["transitions"])) is not None,
                f"history to show {' > '.join(cycle)}",
            )
        finally:
            if process_state(pid) not in (None, "Z"):
                os.kill(pid, signal.SIGCONT)
        i = find_run(detail["transitions"], cycle, len(before["transitions"]))
        assert i is not None
        went_down = detail["transitions"][i + 1]
        assert "probe" in went_down["reason"], f"offline for the failed probes: {went_down['reason']!r}"
        assert all(t["reason"].strip() for t in detail["transitions"][i : i + len(cycle) - 1])

        await wait_for_tools(s, ALPHA | BETA)
        assert await call_text(s, "alpha__whoami") == "alpha"
        assert pid not in await anyio.to_thread.run_sync(demo_pids, gw.proc.pid, "alpha", demo_bin)


# === 5. across a restart of vigil ===


async def test_quarantine_survives_a_restart_of_vigil(vigil: Gateways, demo_bin: Path, tmp_path: Path) -> None:
    """Quarantined, then vigil restarts on the same data_dir: still quarantined, not started, same counts, history."""
    marker = tmp_path / "alpha-tools.json"  # in alpha's arguments only: finds its process anywhere
    gw = vigil(
        [demo("alpha", demo_bin, marker), demo("beta", demo_bin)],
        api={},
        data_dir=tmp_path / "state",
    )
    api = ControlApi(gw.api_base)
    await api.wait_state("alpha", "running")
    assert len(await anyio.to_thread.run_sync(pids_with_arg, str(marker))) == 1

    report = await api.act_ok("alpha", "quarantine", {"reason": "held for the e2e restart test"})
    assert report["state"] == "quarantined", short(report)
    await poll(lambda: anyio.to_thread.run_sync(pids_with_arg, str(marker)), lambda p: not p, "alpha's process to stop")
    before = await api.instance("alpha")
    assert before["state"] == "quarantined"
    assert "held for the e2e restart test" in (before["quarantine_reason"] or ""), short(before)
    assert before["transitions"] and before["transitions"][-1]["to"] == "quarantined", short(before)

    gw2 = vigil.serve_again(gw)
    api2 = ControlApi(gw2.api_base)
    await api2.wait_state("beta", "running")
    after = await api2.instance("alpha")
    assert after["state"] == "quarantined", short(after)
    assert after["restart_count"] == before["restart_count"], short(after)
    assert "held for the e2e restart test" in (after["quarantine_reason"] or ""), short(after)
    assert after["transitions"][: len(before["transitions"])] == before["transitions"], (
        f"the history before the restart must be kept:\nbefore {short(before['transitions'])}\n"
        f"after {short(after['transitions'])}"
    )
    assert count_to(after["transitions"][len(before["transitions"]) :], "starting") == 0, short(after)
    assert not await anyio.to_thread.run_sync(pids_with_arg, str(marker)), "a quarantined backend must not be started"
    async with http_session(gw2.url) as s:
        await wait_for_tools(s, BETA, absent=ALPHA)


# === 6. tokens, roles, audit ===

VIEWER = {"name": "watcher", "token": "viewer-token-0123456789abcdef", "role": "viewer"}
OPERATOR = {"name": "oncall", "token": "operator-token-0123456789abcdef", "role": "operator"}


async def test_api_tokens_roles_and_audit(vigil: Gateways, demo_bin: Path) -> None:
    """401 without or with an unknown token; a viewer reads but may not restart (403); an operator may; both audited."""
    gw = vigil([demo("alpha", demo_bin), demo("beta", demo_bin)], api={"tokens": [VIEWER, OPERATOR]})
    anonymous = ControlApi(gw.api_base)
    stranger = anonymous.as_token("not-a-configured-token-0123")
    viewer = anonymous.as_token(VIEWER["token"])
    operator = anonymous.as_token(OPERATOR["token"])

    for who, api in (("no token", anonymous), ("an unknown token", stranger)):
        got = await api.request("GET", "/api/v1/health/instances")
        assert got.status_code == 401, f"GET with {who}: HTTP {got.status_code} {got.text[:300]}"
        assert got.headers.get("WWW-Authenticate", "").startswith("Bearer"), dict(got.headers)
        got = await api.act("alpha", "restart")
        assert got.status_code == 401, f"restart with {who}: HTTP {got.status_code} {got.text[:300]}"

    before = await viewer.wait_state("alpha", "running")
    assert {i["name"] for i in await viewer.instances()} == {"alpha", "beta"}

    denied = await viewer.act("alpha", "restart")
    assert denied.status_code == 403, f"viewer restart: HTTP {denied.status_code} {denied.text[:300]}"
    unchanged = await viewer.instance("alpha")
    assert unchanged["restart_count"] == before["restart_count"], "a refused restart must not restart"
    assert len(unchanged["transitions"]) == len(before["transitions"]), short(unchanged)

    missing = await operator.act("no-such-backend", "restart")
    assert missing.status_code == 404, f"restart of an unknown backend: HTTP {missing.status_code} {missing.text[:300]}"

    report = await operator.act_ok("alpha", "restart")
    assert report["state"] == "restarting", short(report)
    detail = await operator.wait_for(
        "alpha",
        lambda d: (
            find_run(d["transitions"], ["restarting", "starting", "running"], len(before["transitions"])) is not None
        ),
        "back to running after the operator's restart",
    )
    [asked] = [t for t in detail["transitions"][len(before["transitions"]) :] if t["to"] == "restarting"]
    assert OPERATOR["name"] in asked["reason"], f"the restart's reason names the operator: {asked['reason']!r}"
    assert detail["restart_count"] == before["restart_count"] + 1, short(detail)

    entries = await operator.audit(limit=50)

    def logged(principal: str, outcome: Callable[[str], bool]) -> list[dict[str, Any]]:
        return [
            e
            for e in entries
            if (e["principal"], e["action"], e["target"]) == (principal, "restart", "alpha") and outcome(e["outcome"])
        ]

    assert len(logged(OPERATOR["name"], lambda o: o == "ok")) == 1, f"the operator's restart: {short(entries)}"
    assert len(logged(VIEWER["name"], lambda o: o.startswith("denied"))) == 1, f"the viewer's attempt: {short(entries)}"
    assert all(isinstance(e["at"], int) for e in entries), short(entries)


# === the control API while backends start ===

#: Holds the handshake: the process runs but answers nothing until the gate
#: file is removed, then becomes the demo backend.
HOLD_SCRIPT = 'while [ -e "$1" ]; do sleep 0.05; done; shift; exec "$@"'


async def test_control_api_answers_while_backends_start(
    procs: Procs, vigil_bin: Path, demo_bin: Path, tmp_path: Path
) -> None:
    """Operators can look before the first start attempts settle: the API shows `starting`, MCP is not served yet."""
    gate = tmp_path / "slow.gate"
    gate.touch()
    slow = stdio_backend(
        "slow", "/bin/sh", ["-c", HOLD_SCRIPT, "hold", str(gate), str(demo_bin), *demo_stdio_args("slow")]
    )
    port, api_port = free_port(), free_port()
    config = tmp_path / "vigil.toml"
    top = {
        "listen": f"127.0.0.1:{port}",
        "connect_timeout": "60s",
        "startup_timeout": "60s",
        "api": {"listen": f"127.0.0.1:{api_port}"},
    }
    config.write_text(render_config(top, [slow]), encoding="utf-8")
    proc = procs.start("vigil", [vigil_bin, "serve", "--config", config])
    gw = Vigil(port, proc, config, api_port)
    wait_api(gw.api_base, proc)
    api = ControlApi(gw.api_base)

    report = await api.instance("slow")
    assert report["state"] == "starting", short(report)
    with pytest.raises(httpx.ConnectError):
        httpx.get(gw.url, timeout=2.0)

    gate.unlink()
    await api.wait_state("slow", "running")
    wait_http(gw.url, proc, "vigil")
    async with http_session(gw.url) as session:
        await wait_for_tools(session, prefixed("slow", DEMO_TOOLS))


# === quarantine re-probe ===


async def test_quarantine_reprobe_brings_a_recovered_backend_back(
    vigil: Gateways, demo_bin: Path, tmp_path: Path
) -> None:
    """With `quarantine_reprobe`, a quarantined backend is tried again on that delay and leaves quarantine when up."""
    tries, gate = tmp_path / "phoenix.tries", tmp_path / "phoenix.gate"
    gate.touch()
    # Each start appends to `tries`; while the gate exists the start fails.
    script = 'echo try >>"$1"; if [ -e "$2" ]; then exit 3; fi; exec "$3" --transport stdio --name phoenix'
    phoenix = {
        **stdio_backend("phoenix", "sh", ["-c", script, "phoenix", str(tries), str(gate), str(demo_bin)]),
        "restart": {"base": "100ms", "max_restarts": 2, "quarantine_reprobe": "1s"},
    }
    gw = vigil([phoenix], api={})
    api = ControlApi(gw.api_base)

    # The state is published before the store has written the transition
    # that led to it: wait for both.
    quarantined = await api.wait_for(
        "phoenix",
        lambda d: d["state"] == "quarantined" and any(t["to"] == "quarantined" for t in d["transitions"]),
        "quarantined, and the transition to it in the history",
    )
    assert quarantined["next_retry_at"] is not None, f"a re-probe is scheduled: {short(quarantined)}"
    # Vigil's own history says how many starts came before the quarantine;
    # the file (read after it) may already hold the first re-probe's try,
    # which a slow machine can reach before this line runs.
    path = transition_path(quarantined["transitions"])
    until = next(i for i, p in enumerate(path) if p.endswith(">quarantined"))
    starts = [p for p in path[: until + 1] if p.startswith("starting>")]
    assert len(starts) == 2, f"max_restarts = 2 starts before quarantine: {path}"
    at_quarantine = tries.read_text().count("try")
    reprobes = transition_path((await api.instance("phoenix"))["transitions"]).count("quarantined>starting")
    assert 2 <= at_quarantine <= 2 + reprobes, f"{at_quarantine} tries for 2 starts and {reprobes} re-probes"

    # A failed re-probe keeps it quarantined and schedules the next one.
    await poll(
        lambda: anyio.to_thread.run_sync(tries.read_text), lambda t: t.count("try") > at_quarantine, "a re-probe"
    )
    assert (await api.instance("phoenix"))["state"] == "quarantined"

    gate.unlink()
    back = await api.wait_state("phoenix", "running")
    path = transition_path(back["transitions"])
    out = [p for p in path if p.startswith("quarantined>")]
    assert out, f"left quarantine: {path}"
    assert path[-1].endswith(">running"), path
    assert await api.audit(limit=10) == [], "no operator action was involved"
    async with http_session(gw.url) as session:
        assert await call_text(session, "phoenix__echo", {"text": "back"}) == "back"
