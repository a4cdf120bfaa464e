"""Sessions any replica can serve: three replicas on PostgreSQL behind
Debian's nginx, round-robin, no affinity (`cluster.py`).

- an official Python SDK client makes 300 calls in one session through
  nginx while the replica holding its GET stream is killed (SIGKILL)
  part-way: every call after the kill succeeds on the same session id (at
  most the one in flight fails), and its `list_changed` stream survives
  (its SDK reconnects it, with `Last-Event-ID`, to another replica);
- the same with a 2026-07-28 client (no session) and its
  `subscriptions/listen` stream, opened again on a living replica;
- a session closed (DELETE) through one replica is closed on every one;
- an MRTR retry reaching another replica completes: a 2026-07-28
  backend's own `requestState` passes through, and a call Vigil parked
  for a handshake-era backend is resumed by the replica holding it, the
  retry routed there; once that replica is dead, the retry gets a clear
  error naming it;
- ids that are tampered with, or sealed under another key, are unknown
  sessions; after a key rotation (new key, the old one as previous) the
  sessions opened before it go on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client, ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import SubscriptionLost
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ToolsListChanged

from cluster import Replicas, new_key, pg_url, postgres, replicas, start_nginx  # noqa: F401 - fixtures
from harness import Procs, http_backend
from support import (
    DEADLINE,
    SDK_READ_TIMEOUT,
    ControlApi,
    Inbox,
    call_text,
    http_session,
    is_tools_list_changed,
    text_of,
    tool_names,
    wait_for_tools,
    write_tools_file,
)

from test_bad_input import messages
from test_session_ids import HEADERS, altered, open_session, ping

pytestmark = pytest.mark.anyio

async def three(replicas: Replicas, backend_url: str) -> dict[str, Any]:
    """Three replicas serving one HTTP backend, each with its tools listed."""
    backends = [http_backend("alpha", backend_url)]
    gws = {n: replicas.start(n, backends) for n in ("vigil-a", "vigil-b", "vigil-c")}
    for gw in gws.values():
        async with http_session(gw.url) as s:
            await wait_for_tools(s, {"alpha__echo"})
    return gws


async def open_connections(gw: Any) -> int:
    """The connections open on `gw`'s MCP listener (its `/metrics`)."""
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        text = (await http.get(f"{gw.api_base}/metrics")).text
    for line in text.splitlines():
        if line.startswith('vigil_connections{listener="mcp"}'):
            return int(float(line.split()[-1]))
    raise AssertionError("no vigil_connections for the mcp listener")


async def stream_holder(gws: dict[str, Any]) -> str:
    """The replica holding the one long-lived connection (the GET stream)."""
    with anyio.fail_after(DEADLINE):
        while True:
            open_now = {name: await open_connections(gw) for name, gw in gws.items() if gw.proc.alive()}
            holders = [name for name, n in open_now.items() if n > 0]
            if len(holders) == 1 and open_now[holders[0]] == 1:
                return holders[0]
            await anyio.sleep(0.05)


async def test_a_session_survives_the_replica_holding_its_stream(
    replicas: Replicas,  # noqa: F811
    demo_http: Any,
    procs: Procs,
    tmp_path: Path,
) -> None:
    """300 calls through nginx; the replica of the GET stream is killed at the 100th."""
    tools_file = tmp_path / "alpha-tools.json"
    write_tools_file(tools_file, [], notify=True)
    backend = demo_http("alpha", tools_file=tools_file)
    gws = await three(replicas, backend.url)
    lb = start_nginx(procs, tmp_path / "nginx", [gw.port for gw in gws.values()])

    sent_ids: list[str | None] = []

    async def note_session(request: httpx2.Request) -> None:
        if request.method == "POST":
            sent_ids.append(request.headers.get("mcp-session-id"))

    inbox = Inbox()
    failures: list[tuple[int, str]] = []
    killed: str | None = None
    timeout = httpx2.Timeout(30.0, read=300.0)
    async with (
        httpx2.AsyncClient(timeout=timeout, event_hooks={"request": [note_session]}) as http,
        streamable_http_client(lb.url, http_client=http) as (read, write),
        ClientSession(read, write, read_timeout_seconds=SDK_READ_TIMEOUT, message_handler=inbox) as s,
    ):
        with anyio.fail_after(DEADLINE):
            await s.initialize()
        # The SDK opens its GET stream beside the first requests; nginx logs
        # a request when it ends, so the replica holding it is the one with
        # a connection open between two calls.
        holding = await stream_holder(gws)
        for i in range(300):
            if i == 100:
                assert await stream_holder(gws) == holding, "the GET stream stayed where it was"
                killed = holding
                replicas.kill(killed)
            try:
                with anyio.fail_after(DEADLINE):
                    assert await call_text(s, "alpha__echo", {"text": f"call {i}"}) == f"call {i}"
            except Exception as exc:  # noqa: BLE001 - every failure is counted and reported
                failures.append((i, repr(exc)))
        assert killed is not None
        assert len(failures) <= 1, f"at most the call in flight at the kill fails: {failures}"
        assert all(i == 100 for i, _ in failures), failures
        # One session id throughout.
        ids = {i for i in sent_ids if i is not None}
        assert len(ids) == 1, f"the client kept one session id: {len(ids)} seen"
        # Its GET stream went to a living replica, and list_changed still comes.
        seen = len(inbox.matching(is_tools_list_changed))
        write_tools_file(tools_file, [{"name": "added"}], notify=True)
        await inbox.wait_for(is_tools_list_changed, "tools/list_changed after the kill", count=seen + 1)
        with anyio.fail_after(DEADLINE):
            while "alpha__added" not in await tool_names(s):
                await anyio.sleep(0.1)
        assert await call_text(s, "alpha__added", {"n": 1}) == 'added: {"n":1}'
    gets = lb.upstreams("GET")
    assert len({g for g in gets if g}) >= 2, f"the GET stream was reconnected to another replica: {gets}"


async def test_a_session_closed_through_one_replica_is_closed_on_all(
    replicas: Replicas,  # noqa: F811
    demo_http: Any,
) -> None:
    backend = demo_http("alpha")
    gws = await three(replicas, backend.url)
    a, b, c = gws["vigil-a"], gws["vigil-b"], gws["vigil-c"]
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        session = await open_session(http, a.url)
        # Adopted by b: it works there.
        assert (await ping(http, b.url, session)).status_code == 200
        closed = await http.delete(b.url, headers={"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"})
        assert closed.status_code in (200, 202), closed.text
        for gw in (a, b, c):
            gone = await ping(http, gw.url, session)
            assert gone.status_code == 404, (gw.url, gone.text)


async def test_tampered_and_foreign_ids_are_unknown_and_a_rotation_keeps_sessions(
    replicas: Replicas,  # noqa: F811
    demo_http: Any,
) -> None:
    backend = demo_http("alpha")
    backends = [http_backend("alpha", backend.url)]
    old_key = replicas.key
    a = replicas.start("vigil-a", backends)
    foreign = replicas.start("vigil-x", backends, key=new_key())
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        session = await open_session(http, a.url)
        assert (await ping(http, a.url, session)).status_code == 200
        tampered = await ping(http, a.url, altered(session))
        assert tampered.status_code == 404, tampered.text
        # Sealed under another key (a replica of another cluster): unknown.
        theirs = await open_session(http, foreign.url)
        assert (await ping(http, a.url, theirs)).status_code == 404
        assert (await ping(http, foreign.url, session)).status_code == 404

        # Rotation: b starts with a new key and the old one as previous.
        b = replicas.start("vigil-b", backends, key=new_key(), previous_key=old_key)
        assert (await ping(http, b.url, session)).status_code == 200, "a session from before the rotation goes on"
        fresh = await open_session(http, b.url)
        assert (await ping(http, b.url, fresh)).status_code == 200
        # The old key alone does not open ids sealed under the new one.
        assert (await ping(http, a.url, fresh)).status_code == 404


async def test_a_2026_client_and_its_listen_stream_survive_the_replica_holding_the_stream(
    replicas: Replicas,  # noqa: F811
    demo_http: Any,
    procs: Procs,
    tmp_path: Path,
) -> None:
    """A 2026-07-28 client (no session) makes 300 calls through nginx; the
    replica holding its `subscriptions/listen` stream is killed at the
    100th: the calls after it succeed, and the stream, opened again on a
    living replica, still hears `tools/list_changed`."""
    tools_file = tmp_path / "alpha-tools.json"
    write_tools_file(tools_file, [], notify=True)
    backend = demo_http("alpha", tools_file=tools_file)
    gws = await three(replicas, backend.url)
    lb = start_nginx(procs, tmp_path / "nginx", [gw.port for gw in gws.values()])

    heard: list[Any] = []
    listens = {"opened": 0, "lost": 0}
    stop = anyio.Event()
    failures: list[tuple[int, str]] = []
    http = httpx2.AsyncClient(timeout=httpx2.Timeout(30.0, read=300.0))
    async with Client(streamable_http_client(lb.url, http_client=http), mode="2026-07-28") as client:

        async def listen_forever() -> None:
            while not stop.is_set():
                try:
                    async with client.listen(tools_list_changed=True) as sub:
                        listens["opened"] += 1
                        async for event in sub:
                            heard.append(event)
                except (SubscriptionLost, MCPError):
                    listens["lost"] += 1
                    await anyio.sleep(0.1)

        async with anyio.create_task_group() as tg:
            tg.start_soon(listen_forever)
            with anyio.fail_after(DEADLINE):
                while listens["opened"] < 1:
                    await anyio.sleep(0.05)
            holding = await stream_holder(gws)
            for i in range(300):
                if i == 100:
                    assert await stream_holder(gws) == holding
                    replicas.kill(holding)
                try:
                    with anyio.fail_after(DEADLINE):
                        result = await client.call_tool("alpha__echo", {"text": f"call {i}"})
                    assert text_of(result) == f"call {i}"
                except Exception as exc:  # noqa: BLE001 - every failure is counted and reported
                    failures.append((i, repr(exc)))
            assert len(failures) <= 1 and all(i == 100 for i, _ in failures), failures
            # The stream was lost with its replica and opened again.
            with anyio.fail_after(DEADLINE):
                while listens["opened"] < 2:
                    await anyio.sleep(0.05)
            assert listens["lost"] >= 1
            before = len([e for e in heard if isinstance(e, ToolsListChanged)])
            write_tools_file(tools_file, [{"name": "added"}], notify=True)
            with anyio.fail_after(DEADLINE):
                while len([e for e in heard if isinstance(e, ToolsListChanged)]) <= before:
                    await anyio.sleep(0.05)
            with anyio.fail_after(DEADLINE):
                while "alpha__added" not in {t.name for t in (await client.list_tools()).tools}:
                    await anyio.sleep(0.1)
            stop.set()
            tg.cancel_scope.cancel()
    await http.aclose()


async def round_on(url: str, tool: str, **retry: Any) -> Any:
    """One round of the demo's `tool` by a 2026-07-28 client at `url`: the
    first (input required) or, with `input_responses` and `request_state`,
    a retry; a JSON-RPC error is returned."""
    async def never(_ctx: Any, _params: types.ElicitRequestParams) -> types.ElicitResult:
        raise AssertionError("the rounds are driven by hand")

    # The callback makes the client declare elicitation: one that does not
    # is never asked.
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(
            read, write, read_timeout_seconds=SDK_READ_TIMEOUT, elicitation_callback=never
        ) as s:
            with anyio.fail_after(DEADLINE):
                await s.discover()
                try:
                    return await s.call_tool(tool, {"message": "name?"}, allow_input_required=not retry, **retry)
                except MCPError as refused:
                    # Returned, not raised: out of the session it would
                    # come wrapped in its task group's exception group.
                    return refused


@pytest.mark.parametrize("era", ["2026-07-28", "2025-11-25"])
async def test_an_mrtr_retry_reaching_another_replica(
    replicas: Replicas,  # noqa: F811
    demo_http: Any,
    era: str,
) -> None:
    """A 2026-07-28 backend's own `requestState` passes through: the retry
    completes on another replica. A call Vigil parked for a handshake-era
    backend waits on the replica that parked it: the retry reaching another
    one is routed there and completes, once; with that replica dead, it is
    refused, saying which replica held it and to call again."""
    backend = demo_http("alpha")
    backends = [{**http_backend("alpha", backend.url), "protocol": era}]
    a = replicas.start("vigil-a", backends)
    b = replicas.start("vigil-b", backends)
    for gw in (a, b):
        await ControlApi(gw.api_base).wait_state("alpha", "running")
    first = await round_on(a.url, "alpha__ask_user")
    assert isinstance(first, types.InputRequiredResult), first
    key = next(iter(first.input_requests or {}))
    answer = {key: {"action": "accept", "content": {"name": "Ada"}}}
    if era == "2026-07-28":
        assert key != "vigil" and not (first.request_state or "").startswith("vigil1."), first
        done = await round_on(b.url, "alpha__ask_user", input_responses=answer, request_state=first.request_state)
        assert text_of(done) == 'user accept: {"name":"Ada"}', done
    else:
        assert key == "vigil", first
        done = await round_on(b.url, "alpha__ask_user", input_responses=answer, request_state=first.request_state)
        assert text_of(done) == 'user accept: {"name":"Ada"}', done
        # Answered once: the same state again is refused, wherever it goes.
        for gw in (a, b):
            again = await round_on(gw.url, "alpha__ask_user", input_responses=answer, request_state=first.request_state)
            assert isinstance(again, MCPError) and "already used" in again.error.message, again
        # A call parked on a replica that then dies.
        second = await round_on(a.url, "alpha__ask_user")
        assert isinstance(second, types.InputRequiredResult), second
        replicas.kill("vigil-a")
        refused = await round_on(b.url, "alpha__ask_user", input_responses=answer, request_state=second.request_state)
        assert isinstance(refused, MCPError), refused
        message = refused.error.message
        assert "replica `vigil-a`" in message and "call again without it" in message, message


async def sse_events(response: httpx.Response, want: int, seen: list[dict[str, str]]) -> None:
    """Reads SSE events of `response` into `seen` until `want` events with
    data have been read."""
    fields: dict[str, str] = {}
    async for line in response.aiter_lines():
        if line == "":
            if fields.get("data"):
                seen.append(fields)
                if len([e for e in seen if e.get("data")]) >= want:
                    return
            fields = {}
        elif ":" in line and not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value.lstrip(" ")


def list_changed(event: dict[str, str]) -> bool:
    return '"notifications/tools/list_changed"' in event.get("data", "")


async def test_a_get_stream_resumed_with_last_event_id_gets_what_it_missed(
    replicas: Replicas,  # noqa: F811
    demo_http: Any,
    tmp_path: Path,
) -> None:
    """A session's GET stream breaks, the catalog changes meanwhile, and the
    client reconnects with `Last-Event-ID`: on the same replica the missed
    `list_changed` is replayed after that event (never the one it named);
    on another replica, which has none of the first one's events, the
    adopting replica sends `list_changed` for every list."""
    tools_file = tmp_path / "alpha-tools.json"
    write_tools_file(tools_file, [], notify=True)
    backend = demo_http("alpha", tools_file=tools_file)
    backends = [http_backend("alpha", backend.url)]
    a, b = (replicas.start(n, backends) for n in ("vigil-a", "vigil-b"))
    for gw in (a, b):
        async with http_session(gw.url) as s:
            await wait_for_tools(s, {"alpha__echo"})
    async with httpx.AsyncClient(timeout=httpx.Timeout(DEADLINE, read=DEADLINE)) as http:
        session = await open_session(http, a.url)
        on = {**HEADERS, "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
        stream = {**on, "Accept": "text/event-stream"}

        async def tools_on(gw: Any) -> set[str]:
            listed = await http.post(gw.url, json={"jsonrpc": "2.0", "id": 9, "method": "tools/list"}, headers=on)
            answer = next(m for m in messages(listed) if m.get("id") == 9)
            return {t["name"] for t in answer["result"]["tools"]}

        # The stream hears one change; its event id is where to resume.
        first: list[dict[str, str]] = []
        with anyio.fail_after(DEADLINE):
            async with http.stream("GET", a.url, headers=stream) as live:
                assert live.status_code == 200, await live.aread()
                write_tools_file(tools_file, [{"name": "one"}], notify=True)
                await sse_events(live, 1, first)
        assert list_changed(first[-1]) and first[-1].get("id"), first
        last = first[-1]["id"]
        # A change while no stream is open: a's session is told of it.
        write_tools_file(tools_file, [{"name": "one"}, {"name": "two"}], notify=True)
        with anyio.fail_after(DEADLINE):
            while "alpha__two" not in await tools_on(a):
                await anyio.sleep(0.1)
        replayed: list[dict[str, str]] = []
        with anyio.fail_after(DEADLINE):
            async with http.stream("GET", a.url, headers={**stream, "Last-Event-ID": last}) as resumed:
                assert resumed.status_code == 200, await resumed.aread()
                await sse_events(resumed, 1, replayed)
        assert list_changed(replayed[0]), replayed
        assert replayed[0].get("id") != last, f"the event it named is not sent again: {replayed}"
        assert int(replayed[0]["id"]) == int(last) + 1, replayed

        # Another replica: the id names nothing there; it adopts the
        # session and says every list may have changed.
        adopted: list[dict[str, str]] = []
        with anyio.fail_after(DEADLINE):
            async with http.stream("GET", b.url, headers={**stream, "Last-Event-ID": last}) as elsewhere:
                assert elsewhere.status_code == 200, await elsewhere.aread()
                await sse_events(elsewhere, 3, adopted)
        kinds = {json.loads(e["data"])["method"] for e in adopted}
        assert kinds == {
            "notifications/tools/list_changed",
            "notifications/resources/list_changed",
            "notifications/prompts/list_changed",
        }, adopted
        assert "alpha__two" in await tools_on(b)
