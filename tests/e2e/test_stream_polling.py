"""SSE stream polling (SEP-1699) through Vigil, against the backend directly.

A 2025-11-25 backend may close a call's SSE stream before answering and
tell its client, in the stream's `retry` field, how long to wait before
resuming with `Last-Event-ID`. Vigil, the backend's client, must wait that
long; so it closes its own client's stream too and tells it the backend's
`retry`, not a figure of its own: the client comes back when the answer can
be there, as it would talking to the backend. The backend here
(`backends/polling_server.py`, Python SDK) asks for 1.7 s, unlike Vigil's
own default (3 s).
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest

from harness import Procs, Vigil, http_backend, start_python_backend
from support import DEADLINE, ControlApi

pytestmark = pytest.mark.anyio

RETRY_MS = 1700
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
#: The client can be asked things, so it has a backend session of its own
#: and its calls take the typed path, where a closed stream is passed on (a
#: call on the raw path is answered in one piece once Vigil resumed the
#: backend's stream itself, after the same `retry`).
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


def events(text: str) -> list[dict[str, str]]:
    """The SSE events of a body: their fields (`id`, `retry`, `data`)."""
    out = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if ":" in line and not line.startswith(":"):
                name, _, value = line.partition(":")
                fields[name] = value.lstrip(" ")
        if fields:
            out.append(fields)
    return out


async def call_later(http: httpx.AsyncClient, url: str, tool: str) -> tuple[httpx.Response, dict[str, str]]:
    """Opens a session that can be asked things and calls `tool`: the
    call's whole first answer, and the session's headers."""
    init = await http.post(url, json=INITIALIZE, headers=ACCEPT)
    session = {**ACCEPT, "Mcp-Session-Id": init.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
    await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": tool, "arguments": {"ms": 300}}}
    return await http.post(url, json=call, headers=session), session


async def closed_call(url: str, tool: str) -> tuple[list[dict[str, str]], str]:
    """Calls `tool` in a session, reads the call's
    stream to its end; the stream's events and, after resuming with the last
    event id, the answer."""
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        first, session = await call_later(http, url, tool)
        seen = events(first.text)
        assert not any('"result"' in e.get("data", "") for e in seen), f"answered before the stream closed: {seen}"
        last = [e["id"] for e in seen if "id" in e][-1]
        resume = {**session, "Accept": "text/event-stream", "Last-Event-ID": last}
        with anyio.fail_after(DEADLINE):
            async with http.stream("GET", url, headers=resume) as resumed:
                async for line in resumed.aiter_lines():
                    if line.startswith("data:") and '"result"' in line:
                        answer = json.loads(line[5:])
                        if answer.get("id") == 2:
                            return seen, answer["result"]["content"][0]["text"]
        pytest.fail(f"{url}: the resumed stream ended without the answer")


def retries(seen: list[dict[str, Any]]) -> list[int]:
    return [int(e["retry"]) for e in seen if "retry" in e]


async def test_a_closed_stream_tells_the_client_the_backends_retry(
    vigil: Any, procs: Procs
) -> None:
    backend = start_python_backend(procs, "polling", "polling_server.py", [str(RETRY_MS)])
    direct, answer = await closed_call(backend.url, "later")
    assert answer == "done"
    assert retries(direct) and retries(direct)[-1] == RETRY_MS, f"the backend's own stream: {direct}"

    # A 2025-11-25 backend (the Python SDK's server speaks 2026-07-28 too,
    # which has no stream resumption: `auto` would choose that).
    gw: Vigil = vigil([{**http_backend("p", backend.url), "protocol": "2025-11-25"}], api={})
    await ControlApi(gw.api_base).wait_state("p", "running")
    through, answer = await closed_call(gw.url, "p__later")
    assert answer == "done"
    assert retries(through) and retries(through)[-1] == RETRY_MS, f"Vigil's stream to its client: {through}"

