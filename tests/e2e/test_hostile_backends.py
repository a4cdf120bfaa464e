"""Backends that try to stall or bloat Vigil, and what Vigil does about them.

Each backend here is written to misbehave (`backends/hostile_stdio.py`,
`backends/hostile_http.py`): it never answers a listing, pages without end,
answers a probe with a body that never ends, or floods log messages while a
client does not read. Each test checks what a user sees (the state and the
reason in the control API, the error a client gets) and that Vigil stays
bounded: in memory (RSS from `/proc`) and in time (the operator's restart is
answered, probes keep running, other clients' calls keep answering).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio
import httpx
import pytest

from harness import (
    INITIALIZE_BODY,
    MCP_HEADERS,
    PY_BACKENDS,
    Gateways,
    Procs,
    cmdline,
    demo_stdio_args,
    descendants,
    pids_with_arg,
    rss_bytes,
    start_python_backend,
    stdio_backend,
)
from support import (
    DEADLINE,
    ControlApi,
    call_text,
    http_session,
    poll,
    short,
    tool_names,
    wait_for_tools,
)

pytestmark = pytest.mark.anyio

HOSTILE_STDIO = PY_BACKENDS / "hostile_stdio.py"
MiB = 1024 * 1024


def hostile(name: str, *flags: str) -> dict:
    return stdio_backend(name, sys.executable, [str(HOSTILE_STDIO), *flags])


def reasons(detail: dict) -> list[str]:
    return [t["reason"] for t in detail["transitions"]]


#: Restarts come quickly and quarantine early, so a failing start is seen
#: through to the end within the deadline.
FAST_RESTARTS = {"base": "100ms", "max": "200ms", "jitter": 0.0, "max_restarts": 2}


#: What a start whose listing never comes ends with, however the answer was lost.
NO_LISTING = "listing capabilities failed: backend 'mute': tools/list: no answer to page 1 within 2s (request_timeout)"


@pytest.mark.parametrize(
    "flags",
    [["--hang-list-after", "0"], ["--bad-list", "invalid-utf8"], ["--bad-list", "huge-line"]],
    ids=["never-answers", "invalid-utf8", "line-too-long"],
)
async def test_a_start_whose_listing_never_comes_fails_and_ends_in_quarantine(
    vigil: Gateways, demo_bin: Path, flags: list[str]
) -> None:
    """Before: the backend stayed `starting` forever. Now each start fails at the request timeout."""
    gw = vigil(
        [hostile("mute", *flags), stdio_backend("alpha", demo_bin, demo_stdio_args("alpha"))],
        api={},
        request_timeout="2s",
        startup_timeout="1s",
        restart=FAST_RESTARTS,
    )
    api = ControlApi(gw.api_base)
    detail = await api.wait_state("mute", "quarantined")
    assert any(NO_LISTING in r for r in reasons(detail)), f"a reason names the listing: {short(reasons(detail))}"
    assert detail["quarantine_reason"] and NO_LISTING in detail["quarantine_reason"], short(detail)
    # The other backend serves throughout.
    async with http_session(gw.url) as s:
        assert await call_text(s, "alpha__echo", {"text": "still here"}) == "still here"


#: What a start ends with when its first listing outlasts `connect_timeout = "2s"`, however long the request timeout.
START_DEADLINE = (
    "listing capabilities failed: backend 'mute': tools/list: "
    "no answer to page 1 within the start's 2s (connect_timeout)"
)


@pytest.mark.parametrize(
    ("transport", "flags"),
    [
        ("stdio", ["--hang-list-after", "0"]),
        ("stdio", ["--bad-list", "invalid-utf8"]),
        ("stdio", ["--bad-list", "huge-line"]),
        ("http", ["--hang-list-after", "0"]),
    ],
    ids=["never-answers", "invalid-utf8", "line-too-long", "http-never-answers"],
)
async def test_a_first_listing_that_never_comes_fails_the_start_at_the_connect_timeout(
    vigil: Gateways, procs: Procs, transport: str, flags: list[str]
) -> None:
    """Before: it stayed `starting` for the whole request timeout (60 s by default, 300 s here), not connect_timeout."""
    if transport == "stdio":
        backend = hostile("mute", *flags)
    else:
        server = start_python_backend(procs, "mute", "hostile_http.py", flags)
        backend = {"name": "mute", "transport": "http", "url": server.url}
    gw = vigil(
        [backend],
        api={},
        request_timeout="300s",
        connect_timeout="2s",
        startup_timeout="1s",
        restart=FAST_RESTARTS,
    )
    api = ControlApi(gw.api_base)
    detail = await api.wait_for(
        "mute", lambda d: any(START_DEADLINE in r for r in reasons(d)), "a start failed at the connect timeout"
    )
    assert detail["state"] != "running", short(detail)
    if transport == "stdio":
        # Each start fails the same way, until quarantine.
        detail = await api.wait_state("mute", "quarantined")
        assert START_DEADLINE in (detail["quarantine_reason"] or ""), short(detail)


def hostile_pids(gw_pid: int) -> list[int]:
    """The hostile stdio backends `gw_pid` runs now."""
    return [p for p in descendants(gw_pid) if str(HOSTILE_STDIO) in cmdline(p)]


async def test_an_operator_is_answered_while_a_start_hangs(vigil: Gateways) -> None:
    """Before: a restart sent while the first listing hung got no answer until the request timeout ended the start."""
    gw = vigil(
        [hostile("mute", "--hang-list-after", "0")],
        api={},
        # Longer than any wait here: only a supervisor that answers during a start passes.
        request_timeout="300s",
        connect_timeout="300s",
        startup_timeout="1s",
        restart={"base": "100ms", "max": "200ms", "jitter": 0.0},
    )
    api = ControlApi(gw.api_base)

    def listings_seen() -> int:
        return gw.proc.stderr().count("tools/list #1")

    def backend_pids() -> list[int]:
        return hostile_pids(gw.proc.pid)

    await poll(lambda: anyio.to_thread.run_sync(listings_seen), lambda n: n >= 1, "the first listing to come")
    assert (await api.instance("mute"))["state"] == "starting"
    # 1. A restart is answered, and ends the start it interrupts: the old
    #    process goes, a new one is started and lists again.
    with anyio.fail_after(DEADLINE):
        resp = await api.act("mute", "restart")
    assert resp.status_code == 200, resp.text
    await poll(lambda: anyio.to_thread.run_sync(listings_seen), lambda n: n >= 2, "the new process's first listing")
    detail = await api.instance("mute")
    assert detail["state"] == "starting" and detail["restart_count"] == 1, short(detail)
    await poll(lambda: anyio.to_thread.run_sync(backend_pids), lambda p: len(p) == 1, "one backend process")
    # 2. A quarantine is answered too, and stops the start.
    with anyio.fail_after(DEADLINE):
        resp = await api.act("mute", "quarantine", {"reason": "hangs at start"})
    assert resp.status_code == 200, resp.text
    await api.wait_state("mute", "quarantined")
    await poll(lambda: anyio.to_thread.run_sync(backend_pids), lambda p: not p, "no backend process")


async def test_a_relisting_that_hangs_leaves_probes_and_operators_in_charge(vigil: Gateways, tmp_path: Path) -> None:
    """Before: a hanging re-listing wedged the supervisor (no probes, no answer to a restart)."""
    gw = vigil(
        [hostile("slow", "--hang-list-after", "1")],
        api={},
        # Longer than any wait here: only a supervisor that stays responsive passes.
        request_timeout="300s",
        health={"interval": "500ms", "timeout": "500ms", "unhealthy_threshold": 2},
        restart={"base": "100ms", "max": "200ms", "jitter": 0.0},
    )
    api = ControlApi(gw.api_base)
    await api.wait_state("slow", "running")

    async def hang_a_relisting(times_seen: int) -> None:
        """Makes the backend announce a change; Vigil's re-listing (its second) then hangs."""
        await api.wait_state("slow", "running")
        async with http_session(gw.url) as s:
            assert await call_text(s, "slow__relist") == "ok"
        await poll(
            lambda: anyio.to_thread.run_sync(gw.proc.stderr),
            lambda text: text.count("tools/list #2") >= times_seen,
            "the hanging re-listing to reach the backend",
        )

    # 1. Probes keep running: a backend frozen while its re-listing hangs is
    #    still caught (offline) and restarted.
    await hang_a_relisting(1)
    pids = pids_with_arg(str(HOSTILE_STDIO))
    assert pids, "the hostile backend's process"
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    detail = await api.wait_for(
        "slow", lambda d: d["restart_count"] >= 1 and d["state"] == "running", "restarted after freezing"
    )
    assert any("probe" in r or "ping" in r for r in reasons(detail)), short(reasons(detail))

    # 2. An operator's restart is answered while a re-listing hangs (the new
    #    process counts its listings from #1 again).
    await hang_a_relisting(2)
    with anyio.fail_after(DEADLINE):
        resp = await api.act("slow", "restart")
    assert resp.status_code == 200, resp.text
    await api.wait_for("slow", lambda d: d["restart_count"] >= 2, "restarted by the operator")


async def test_endless_pagination_is_cut_at_the_page_limit(vigil: Gateways, demo_bin: Path) -> None:
    """Before: every page with a nextCursor was followed forever (+1.5 GiB in 30 s)."""
    gw = vigil(
        [hostile("pager", "--endless-pages"), stdio_backend("alpha", demo_bin, demo_stdio_args("alpha"))],
        api={},
        limits={"list_pages": 50},
        restart=FAST_RESTARTS,
    )
    api = ControlApi(gw.api_base)
    detail = await api.wait_state("pager", "quarantined")
    expected = (
        "listing capabilities failed: backend 'pager': tools/list: still paging after 50 pages (limits.list_pages)"
    )
    assert any(expected in r for r in reasons(detail)), short(reasons(detail))
    # 50 pages of 100 tools of ~1 KB per attempt: a few MiB, never the
    # gigabytes an endless listing reaches.
    assert rss_bytes(gw.proc.pid) < 200 * MiB, f"vigil RSS {rss_bytes(gw.proc.pid) / MiB:.0f} MiB"
    async with http_session(gw.url) as s:
        names = await tool_names(s)
        assert "alpha__echo" in names and not any(n.startswith("pager__") for n in names)


async def test_a_bytes_limit_refuses_a_listing_too_large(vigil: Gateways) -> None:
    gw = vigil([hostile("pager", "--endless-pages")], api={}, limits={"list_bytes": 200_000}, restart=FAST_RESTARTS)
    detail = await ControlApi(gw.api_base).wait_state("pager", "quarantined")
    expected = "more than 200000 bytes in one listing (limits.list_bytes)"
    assert any(expected in r for r in reasons(detail)), short(reasons(detail))


async def test_a_forward_auth_listing_that_hangs_does_not_hold_the_session(
    vigil: Gateways, procs: Procs, demo_bin: Path
) -> None:
    """Before: a session's listing through its own connection waited forever, and so did its tools/list."""
    backend = start_python_backend(procs, "hang", "hostile_http.py", ["--hang-list-after", "0"])
    gw = vigil(
        [
            {"name": "hang", "transport": "http", "url": backend.url, "forward_auth": True},
            stdio_backend("alpha", demo_bin, demo_stdio_args("alpha")),
        ],
        api={},
        request_timeout="2s",
    )
    await ControlApi(gw.api_base).wait_state("hang", "running")
    async with http_session(gw.url, headers={"Authorization": "Bearer user-token"}) as s:
        names = await tool_names(s)
        assert "alpha__echo" in names and not any(n.startswith("hang__") for n in names), short(names)
        assert await call_text(s, "alpha__echo", {"text": "answered"}) == "answered"
    assert "tools/list #1" in backend.proc.stderr(), "the session's listing reached the backend"


async def test_a_probe_answer_that_never_ends_is_read_only_so_far(vigil: Gateways, procs: Procs) -> None:
    """Before: the forward_auth reachability probe read an endless body to its timeout (+1.47 GiB)."""
    backend = start_python_backend(procs, "endless", "hostile_http.py", ["--endless-body"])
    gw = vigil(
        [{"name": "endless", "transport": "http", "url": backend.url, "forward_auth": True}],
        api={},
        health={"interval": "2s", "timeout": "2s"},
    )
    api = ControlApi(gw.api_base)
    await api.wait_state("endless", "running")
    start = rss_bytes(gw.proc.pid)
    probes = backend.proc.stderr().count("POST auth=None")
    # Five probes later (each answered with an endless body), the backend is
    # still up (a 200 is an answer) and Vigil has not grown by what it was sent.
    await poll(
        lambda: anyio.to_thread.run_sync(backend.proc.stderr),
        lambda text: text.count("POST auth=None") >= probes + 5,
        "five more reachability probes",
        timeout=2 * DEADLINE,
    )
    detail = await api.instance("endless")
    assert detail["state"] == "running", short(detail)
    grown = rss_bytes(gw.proc.pid) - start
    assert grown < 64 * MiB, f"vigil grew by {grown / MiB:.0f} MiB while probing an endless body"


async def metric(api_base: str, name: str) -> float:
    """One unlabelled sample of the control API's `/metrics`."""
    async with httpx.AsyncClient(timeout=DEADLINE) as client:
        text = (await client.get(f"{api_base}/metrics")).text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


async def test_a_client_that_never_reads_holds_up_no_one_else(vigil: Gateways) -> None:
    """Before: its relay queue grew without bound (+3.3 MiB/s) and every other client's call waited 2 s on it."""
    gw = vigil([hostile("flood", "--log-rate", "10000")], api={}, limits={"relay_queue": 100})
    await ControlApi(gw.api_base).wait_state("flood", "running")
    async with httpx.AsyncClient(timeout=httpx.Timeout(DEADLINE, read=None)) as raw:
        # Client A: a session whose standing GET stream is opened and never read.
        init = await raw.post(gw.url, json=INITIALIZE_BODY, headers=MCP_HEADERS)
        sid = init.headers["mcp-session-id"]
        headers = {**MCP_HEADERS, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-06-18"}
        await raw.post(gw.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
        async with raw.stream("GET", gw.url, headers={**headers, "Accept": "text/event-stream"}) as stuck:
            assert stuck.status_code == 200
            # 30,000 messages in, A's socket and queues are full.
            await poll(
                lambda: anyio.to_thread.run_sync(gw.proc.stderr),
                lambda text: text.count("flood sent") >= 3,
                "the flood to be under way",
            )
            sent = gw.proc.stderr().count("flood sent")
            start = rss_bytes(gw.proc.pid)
            # Client B, meanwhile: every call answers without waiting on A
            # (before: 2 s each, 40 s for the lot).
            async with http_session(gw.url) as b:
                await b.set_logging_level("error")
                with anyio.move_on_after(DEADLINE / 2):
                    answered = 0
                    for i in range(20):
                        assert await call_text(b, "flood__echo", {"text": str(i)}) == str(i)
                        answered += 1
                assert answered == 20, f"client B got {answered} of 20 answers in {DEADLINE / 2}s"
            # 100,000 more messages later, Vigil has not kept them...
            await poll(
                lambda: anyio.to_thread.run_sync(gw.proc.stderr),
                lambda text: text.count("flood sent") >= sent + 10,
                "100,000 more flooded messages",
                timeout=2 * DEADLINE,
            )
            grown = rss_bytes(gw.proc.pid) - start
            assert grown < 16 * MiB, f"vigil grew by {grown / MiB:.1f} MiB while a client did not read"
            # ... it dropped them from A's queue, and counted them.
            assert await metric(gw.api_base, "vigil_relay_dropped_total") > 50_000


async def test_a_chatty_backend_does_not_fill_the_log(vigil: Gateways) -> None:
    """Before: rmcp logged each notification with its payload at INFO (20,200 lines, 10 MiB in 10 s)."""
    gw = vigil([hostile("chatty", "--log-rate", "2000", "--grow-on-relist")], api={})
    await ControlApi(gw.api_base).wait_state("chatty", "running")
    await poll(
        lambda: anyio.to_thread.run_sync(gw.proc.stderr),
        lambda text: "flood sent 20000" in text,
        "20,000 notifications sent",
        timeout=2 * DEADLINE,
    )
    log = gw.proc.stderr()
    quoting = [line for line in log.splitlines() if "flood message" in line]
    print(f"after 20,000 notifications: {len(log) / MiB:.2f} MiB of log, {len(quoting)} lines quoting them")
    # At `info,vigil=debug` (the harness's level): Vigil's own DEBUG line,
    # one a second at most, and none of rmcp's.
    assert len(quoting) <= 100, f"{len(quoting)} log lines quote the notifications: {short(quoting[:3])}"
    assert not any("received notification" in line for line in quoting), short(quoting[:3])
    assert len(log) < 1 * MiB, f"{len(log) / MiB:.1f} MiB of log"
    # A change the backend announces still gets its line.
    async with http_session(gw.url) as s:
        await s.set_logging_level("error")
        assert await call_text(s, "chatty__relist") == "ok"
        await wait_for_tools(s, {"chatty__extra1"})

    def change_lines() -> list[str]:
        return [
            line
            for line in gw.proc.stderr().splitlines()
            if "capabilities changed on re-listing" in line and "chatty" in line
        ]

    lines = await poll(lambda: anyio.to_thread.run_sync(change_lines), bool, "the change's log line")
    assert len(lines) == 1 and "INFO" in lines[0], short(lines)
