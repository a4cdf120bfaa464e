"""Clients that try to exhaust Vigil, and what Vigil does about them.

Raw sockets play the clients no SDK would be: connections that trickle a
request head a byte at a time (slowloris) or send nothing at all, more
connections than a listener takes, more sessions than `max_sessions`, and
requests whose answers are never read. Each test checks what such a client
gets (the connection closed, an HTTP 503 naming the limit, a JSON-RPC error)
and that everyone else is still served, and that Vigil stays bounded in
descriptors and memory (RSS from `/proc`).
"""

from __future__ import annotations

import json
import os
import re
import select
import selectors
import socket
import time
from pathlib import Path

import anyio
import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from harness import INITIALIZE_BODY, MCP_HEADERS, Gateways, demo_stdio_args, rss_bytes, stdio_backend
from support import DEADLINE, SDK_READ_TIMEOUT, ControlApi, call_text, http_session, poll, short

pytestmark = pytest.mark.anyio

MiB = 1024 * 1024


def connect(port: int, *, rcvbuf: int | None = None) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        # Before connect, so the window stays small (no autotuning).
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(DEADLINE)
    s.connect(("127.0.0.1", port))
    return s


def closed_by_peer(s: socket.socket) -> bool:
    """Whether the other end closed `s` (EOF or reset), without waiting."""
    ready, _, _ = select.select([s], [], [], 0)
    if not ready:
        return False
    try:
        return s.recv(65536, socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def wait_all_closed(socks: list[socket.socket], what: str, *, trickle: bool = False) -> float:
    """Waits until Vigil closed every socket of `socks` (a trickle sends one header byte a round)."""
    start = time.monotonic()
    open_ = list(socks)
    while open_ and time.monotonic() - start < DEADLINE:
        for s in list(open_):
            if trickle:
                try:
                    s.send(b"X")
                except OSError:
                    open_.remove(s)
                    continue
            if closed_by_peer(s):
                open_.remove(s)
        time.sleep(0.25)
    assert not open_, f"{len(open_)} of {len(socks)} {what} still open after {DEADLINE}s"
    return time.monotonic() - start


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def metric(api_base: str, name: str, labels: str = "") -> float:
    text = httpx.get(f"{api_base}/metrics", timeout=DEADLINE).text
    key = f"{name}{{{labels}}}" if labels else name
    for line in text.splitlines():
        if line.startswith(key + " "):
            return float(line.split()[1])
    return 0.0


LIMITS = {"read_timeout": "2s", "idle_timeout": "3s", "write_timeout": "2s"}


def test_slow_and_silent_connections_are_closed(vigil: Gateways, demo_bin: Path) -> None:
    """Before: 1,000 slow connections stayed open 75 s (no header-read or idle timeout on either listener)."""
    gw = vigil([stdio_backend("alpha", demo_bin, demo_stdio_args("alpha"))], api={}, limits=LIMITS)
    slow = []
    for port in (gw.port, gw.api_port):
        for _ in range(20):
            s = connect(port)
            s.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            slow.append(s)
    silent = [connect(gw.port) for _ in range(20)] + [connect(gw.api_port) for _ in range(20)]
    wait_all_closed(slow, "connections trickling a request head", trickle=True)
    wait_all_closed(silent, "connections that sent nothing")
    assert metric(gw.api_base, "vigil_connections_cut_total", 'listener="mcp",reason="read_timeout"') >= 20
    assert metric(gw.api_base, "vigil_connections_cut_total", 'listener="api",reason="read_timeout"') >= 20
    # A request whose body trickles in is cut at the same bound, with a 4xx.
    s = connect(gw.port)
    s.sendall(
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Accept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{"
    )
    answer = b""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        try:
            s.send(b" ")
        except OSError:
            break
        ready, _, _ = select.select([s], [], [], 0.5)
        if ready:
            chunk = s.recv(65536)
            if not chunk:
                break
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408"), f"a body that never ends gets a 408: {answer[:300]!r}"
    assert b"limits.read_timeout" in answer, answer[:500]
    for sock in slow + silent + [s]:
        sock.close()


async def test_the_control_api_answers_while_mcp_is_saturated(vigil: Gateways, demo_bin: Path) -> None:
    """Before: at the descriptor limit new MCP clients and the control API stopped answering."""
    gw = vigil(
        [stdio_backend("alpha", demo_bin, demo_stdio_args("alpha"))],
        api={},
        open_files=512,
        limits={"connections": 300, "api_connections": 16, "idle_timeout": "120s", "read_timeout": "120s"},
    )
    hogs = [connect(gw.port) for _ in range(600)]
    # The control API has its own room: it answers with /mcp saturated.
    api = ControlApi(gw.api_base)
    with anyio.fail_after(DEADLINE):
        assert [i["name"] for i in await api.instances()] == ["alpha"]
    # 300 are held; every further one is answered 503 and closed.
    refused = []
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline and len(refused) < 300:
        for s in readable(hogs, deadline):
            hogs.remove(s)
            refused.append(s.recv(65536))
    assert len(refused) >= 300, f"{len(refused)} of 600 connections refused (cap 300)"
    first = refused[0].decode(errors="replace")
    assert first.startswith("HTTP/1.1 503 Service Unavailable"), first
    body = json.loads(first.split("\r\n\r\n", 1)[1])
    assert "limits.connections = 300" in body["error"]["message"], body
    assert metric(gw.api_base, "vigil_connections", 'listener="mcp"') == 300
    assert open_fds(gw.proc.pid) < 512 - 64, f"{open_fds(gw.proc.pid)} descriptors open of 512"
    # Once the hogs go, MCP clients are served again.
    for s in hogs:
        s.close()
    async with http_session(gw.url) as s:
        assert await call_text(s, "alpha__echo", {"text": "back"}) == "back"


def readable(socks: list[socket.socket], deadline: float) -> list[socket.socket]:
    """Those of `socks` with something to read (data, or a close), once one has: waits until then or `deadline`
    (`time.monotonic()`). An epoll selector, so descriptors above 1024 are fine."""
    with selectors.DefaultSelector() as sel:
        for s in socks:
            sel.register(s, selectors.EVENT_READ)
        events = sel.select(max(0.0, deadline - time.monotonic()))
    return [key.fileobj for key, _ in events]  # type: ignore[misc]


def answered(s: socket.socket) -> bytes | None:
    """What Vigil wrote on `s` so far (b"" for a close without a word); None while it wrote nothing (no wait)."""
    data = b""
    try:
        while chunk := s.recv(65536, socket.MSG_DONTWAIT):
            data += chunk
    except BlockingIOError:
        return data or None
    except OSError:
        pass
    return data


async def test_idle_connections_cannot_take_the_descriptors_clients_and_the_api_need(
    vigil: Gateways, demo_bin: Path
) -> None:
    """Before: under a low open-file limit, idle sockets took every descriptor (the cap, 4,096, ignored it).

    New clients and the control API got no answer, and sockets that sent nothing stayed open until idle_timeout.
    """
    gw = vigil([stdio_backend("alpha", demo_bin, demo_stdio_args("alpha"))], api={}, open_files=512)
    # More idle sockets than Vigil has descriptors, with the default limits.
    hogs = [connect(gw.port) for _ in range(600)]
    # The control API answers.
    api = ControlApi(gw.api_base)
    with anyio.fail_after(DEADLINE):
        assert [i["name"] for i in await api.instances()] == ["alpha"]
    # Vigil said at start which cap it chose, and why.
    caps = [line for line in gw.proc.stderr().splitlines() if "connection caps lowered" in line]
    assert len(caps) == 1, short(caps)
    found = re.search(r"mcp_connections=(\d+)", caps[0])
    assert found and "open_files=512" in caps[0], caps[0]
    cap = int(found.group(1))
    assert cap < 512, caps[0]
    # /mcp holds `cap` of them; the others are answered 503 naming the
    # limit and why it is lower than configured (or, past the refusals
    # being written at once, just closed).
    await poll(
        lambda: anyio.to_thread.run_sync(metric, gw.api_base, "vigil_connections", 'listener="mcp"'),
        lambda n: n == cap,
        f"/mcp holding {cap} connections",
    )
    refused: list[bytes] = []
    turned_away: list[socket.socket] = []
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline and len(turned_away) < 600 - cap:
        for s in readable(hogs, deadline):
            data = answered(s)
            if data is not None:
                hogs.remove(s)
                turned_away.append(s)
                if data:
                    refused.append(data)
    assert len(turned_away) == 600 - cap, f"{len(turned_away)} of {600 - cap} connections past the cap turned away"
    assert len(hogs) == cap
    assert refused and all(r.startswith(b"HTTP/1.1 503 Service Unavailable") for r in refused), short(refused[:3])
    body = json.loads(refused[0].decode().split("\r\n\r\n", 1)[1])
    why = f"limits.connections = 4096, lowered to {cap} to fit the open-file limit of 512"
    assert why in body["error"]["message"], body
    # A new MCP client is answered (refused while the cap is full).
    r = await anyio.to_thread.run_sync(initialize, gw.port)
    assert r.status_code in (200, 503), r.text
    # The held sockets sent nothing: each is closed at read_timeout (10 s
    # by default), not at idle_timeout (60 s).
    await anyio.to_thread.run_sync(wait_all_closed, hogs, "connections that sent nothing")
    assert metric(gw.api_base, "vigil_connections_cut_total", 'listener="mcp",reason="read_timeout"') >= cap
    async with http_session(gw.url) as session:
        assert await call_text(session, "alpha__echo", {"text": "served"}) == "served"
    for sock in hogs + turned_away:
        sock.close()


def initialize(port: int) -> httpx.Response:
    return httpx.post(f"http://127.0.0.1:{port}/mcp", json=INITIALIZE_BODY, headers=MCP_HEADERS, timeout=DEADLINE)


async def test_sessions_are_capped_with_an_error_naming_the_limit(vigil: Gateways, demo_bin: Path) -> None:
    """Before: no cap (5,000 anonymous sessions in 25 s, ~126-275 KiB and a descriptor each)."""
    gw = vigil([stdio_backend("alpha", demo_bin, demo_stdio_args("alpha"))], api={}, limits={"max_sessions": 20})
    before = rss_bytes(gw.proc.pid)
    opened = [initialize(gw.port) for _ in range(20)]
    assert all(r.status_code == 200 and r.headers.get("mcp-session-id") for r in opened), short(opened)
    refusals = [initialize(gw.port) for _ in range(480)]
    statuses = {r.status_code for r in refusals}
    assert statuses == {503}, f"statuses past the cap: {statuses}"
    err = refusals[0].json()
    assert err["id"] == INITIALIZE_BODY["id"], err
    assert err["error"]["code"] == -32000
    assert err["error"]["message"].startswith("Vigil is at its session limit (limits.max_sessions = 20)"), err
    assert rss_bytes(gw.proc.pid) - before < 64 * MiB, "480 refused sessions cost nothing lasting"
    assert metric(gw.api_base, "vigil_sessions_refused_total") >= 480
    # A 2026-07-28 client needs no session and is served at the cap.
    async with streamable_http_client(gw.url) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=SDK_READ_TIMEOUT) as modern:
            with anyio.fail_after(DEADLINE):
                await modern.discover()
            assert modern.protocol_version == "2026-07-28"
            assert await call_text(modern, "alpha__echo", {"text": "stateless"}) == "stateless"
    # A closed session makes room for a new one.
    sid = opened[0].headers["mcp-session-id"]
    gone = httpx.delete(gw.url, headers={**MCP_HEADERS, "Mcp-Session-Id": sid}, timeout=DEADLINE)
    assert gone.status_code in (200, 202, 204), gone.text
    await poll(lambda: anyio.to_thread.run_sync(initialize, gw.port), lambda r: r.status_code == 200, "a session again")
    # The log has a warning or two, not one per refusal.
    warnings = gw.proc.stderr().count("refusing new MCP sessions")
    assert 1 <= warnings <= 5, f"{warnings} warnings for 480 refusals"


async def test_a_client_that_reads_no_answers_is_cut_off_and_its_buffers_freed(vigil: Gateways, demo_bin: Path) -> None:
    """Before: 500 unread ~3 MiB answers held +2 GiB, for as long as the clients stayed connected."""
    gw = vigil([stdio_backend("alpha", demo_bin, demo_stdio_args("alpha"))], api={}, limits={"write_timeout": "2s"})
    init = initialize(gw.port)
    sid = init.headers["mcp-session-id"]
    headers = {**MCP_HEADERS, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-06-18"}
    httpx.post(
        gw.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers, timeout=DEADLINE
    )
    baseline = rss_bytes(gw.proc.pid)
    text = "x" * (3 * MiB)
    readers = []
    for i in range(60):
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 100 + i,
                "method": "tools/call",
                "params": {"name": "alpha__echo", "arguments": {"text": text}},
            }
        ).encode()
        s = connect(gw.port, rcvbuf=4096)
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        s.sendall(
            f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{gw.port}\r\n{head}Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        readers.append(s)
    peak = max(rss_bytes(gw.proc.pid) for _ in range(3))
    print(f"unread answers: baseline {baseline / MiB:.0f} MiB, with 60 unread {peak / MiB:.0f} MiB")
    # Nobody reads: after write_timeout Vigil cuts every one of them...
    await poll(
        lambda: anyio.to_thread.run_sync(
            metric, gw.api_base, "vigil_connections_cut_total", 'listener="mcp",reason="write_timeout"'
        ),
        lambda n: n >= 60,
        "60 connections cut at write_timeout",
        timeout=2 * DEADLINE,
    )
    # ... and what was buffered for them is freed.
    await poll(
        lambda: anyio.to_thread.run_sync(rss_bytes, gw.proc.pid),
        lambda rss: rss - baseline < 100 * MiB,
        "Vigil's memory back within 100 MiB of where it started",
    )
    for s in readers:
        s.close()
    # The session and the backend still serve.
    async with http_session(gw.url) as s:
        assert await call_text(s, "alpha__echo", {"text": "still"}) == "still"


def test_wrong_typed_params_of_a_known_method_name_the_field(vigil: Gateways, demo_bin: Path) -> None:
    """Before: `-32601 Method not found` for `tools/call` with a number as its name."""
    gw = vigil([stdio_backend("alpha", demo_bin, demo_stdio_args("alpha"))])
    init = initialize(gw.port)
    headers = {**MCP_HEADERS, "Mcp-Session-Id": init.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-06-18"}
    httpx.post(
        gw.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers, timeout=DEADLINE
    )

    def call(method: str, params: object) -> dict:
        r = httpx.post(
            gw.url,
            json={"jsonrpc": "2.0", "id": 9, "method": method, "params": params},
            headers=headers,
            timeout=DEADLINE,
        )
        text = r.text
        data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:") and line[5:].strip()]
        return json.loads(data[-1] if data else text)

    err = call("tools/call", {"name": 5})["error"]
    assert err["code"] == -32602, err
    assert err["message"] == "Invalid params for tools/call: `name`: invalid type: integer `5`, expected a string", err
    err = call("resources/read", {"uri": {"x": 1}})["error"]
    assert err["code"] == -32602 and "`uri`" in err["message"], err
    # Control: an unknown method is still -32601, and well-typed params are served.
    assert call("tools/explode", {})["error"]["code"] == -32601
    assert "result" in call("tools/call", {"name": "alpha__echo", "arguments": {"text": "ok"}})


def test_rejected_requests_are_logged_once_in_a_while(vigil: Gateways, demo_bin: Path) -> None:
    """Before: every rejected anonymous /mcp request wrote a WARN line."""
    gw = vigil([stdio_backend("alpha", demo_bin, demo_stdio_args("alpha"))])
    for _ in range(200):
        r = httpx.post(gw.url, content=b"{not json", headers=MCP_HEADERS, timeout=DEADLINE)
        assert r.status_code == 400
    lines = [line for line in gw.proc.stderr().splitlines() if "WARN" in line and "rejected MCP request" in line]
    assert 1 <= len(lines) <= 3, f"{len(lines)} WARN lines for 200 rejected requests"
    assert "more=" in "\n".join(lines) or len(lines) == 1
