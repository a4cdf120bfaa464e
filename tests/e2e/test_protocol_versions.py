"""Clients of every protocol revision are served, whatever the backend speaks.

Vigil negotiates with each client on its own; the backends (demo servers,
which rmcp lets speak every revision) are reached with Vigil's own
handshake. For each revision a client must be able to list and call
tools through Vigil and be told when a backend's tools change:

- 2025-03-26, 2025-06-18, 2025-11-25: raw streamable HTTP (httpx) with that
  `protocolVersion` in `initialize` and the `MCP-Protocol-Version` header;
  change notifications arrive as `notifications/tools/list_changed` on the
  session's GET stream;
- 2026-07-28: the Python SDK's `server/discover` lifecycle (no session),
  change notifications through a `subscriptions/listen` stream.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import listen

from harness import Vigil, demo_stdio_args, stdio_backend
from support import DEADLINE, SDK_READ_TIMEOUT, call_text, prefixed, tool_names, write_tools_file

pytestmark = pytest.mark.anyio

NEW_TOOL = {"name": "late_tool", "description": "added after the client connected"}
ACCEPT = "application/json, text/event-stream"


@pytest.fixture
def tools_file(tmp_path: Path) -> Path:
    path = tmp_path / "alpha-tools.json"
    write_tools_file(path, [], notify=True)
    return path


@pytest.fixture
def gateway(vigil: Callable[..., Vigil], demo_bin: Path, tools_file: Path) -> Vigil:
    return vigil([stdio_backend("alpha", demo_bin, demo_stdio_args("alpha", tools_file))])


def sse_messages(body: str) -> list[dict[str, Any]]:
    """The JSON-RPC messages in an SSE body (or a plain JSON body)."""
    body = body.strip()
    if body.startswith("{"):
        return [json.loads(body)]
    out = []
    for line in body.splitlines():
        if line.startswith("data:") and line[5:].strip():
            out.append(json.loads(line[5:].strip()))
    return out


class RawSession:
    """A hand-rolled streamable HTTP client pinned to one protocol revision."""

    def __init__(self, client: httpx.AsyncClient, url: str, version: str) -> None:
        self.client, self.url, self.version = client, url, version
        self.session_id: str | None = None
        self.next_id = 1

    def headers(self) -> dict[str, str]:
        h = {"Accept": ACCEPT, "Content-Type": "application/json", "MCP-Protocol-Version": self.version}
        if self.session_id:
            h["Mcp-Session-Id"] = self.session_id
        return h

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        rid = self.next_id
        self.next_id += 1
        body = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}}
        r = await self.client.post(self.url, json=body, headers=self.headers())
        assert r.status_code == 200, f"{method}: HTTP {r.status_code}: {r.text}"
        if self.session_id is None:
            self.session_id = r.headers.get("mcp-session-id")
        replies = [m for m in sse_messages(r.text) if m.get("id") == rid]
        assert replies, f"{method}: no reply in {r.text!r}"
        assert "error" not in replies[0], f"{method}: {replies[0]}"
        return replies[0]["result"]

    async def notify(self, method: str) -> None:
        r = await self.client.post(self.url, json={"jsonrpc": "2.0", "method": method}, headers=self.headers())
        assert r.status_code in (200, 202), f"{method}: HTTP {r.status_code}"


@pytest.mark.parametrize("version", ["2025-03-26", "2025-06-18", "2025-11-25"])
async def test_session_revisions_list_call_and_hear_changes(gateway: Vigil, tools_file: Path, version: str) -> None:
    async with httpx.AsyncClient(timeout=SDK_READ_TIMEOUT) as client:
        s = RawSession(client, gateway.url, version)
        init = await s.request(
            "initialize",
            {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
        )
        assert init["protocolVersion"] == version, init
        assert s.session_id, "a session-mode client gets a session id"
        await s.notify("notifications/initialized")

        names = {t["name"] for t in (await s.request("tools/list"))["tools"]}
        assert prefixed("alpha", {"echo", "add"}) <= names
        result = await s.request("tools/call", {"name": "alpha__add", "arguments": {"a": 2, "b": 3}})
        assert result["content"][0]["text"] == "5"
        assert "resultType" not in result, "pre-2026 clients get the pre-2026 result shape"

        # The session's GET stream carries notifications not tied to a request.
        seen: list[dict[str, Any]] = []
        opened = anyio.Event()

        async def read_get_stream() -> None:
            headers = {k: v for k, v in s.headers().items() if k != "Content-Type"}
            headers["Accept"] = "text/event-stream"
            async with client.stream("GET", s.url, headers=headers) as r:
                assert r.status_code == 200
                opened.set()
                async for line in r.aiter_lines():
                    if line.startswith("data:") and line[5:].strip():
                        seen.append(json.loads(line[5:].strip()))

        with anyio.fail_after(DEADLINE):
            async with anyio.create_task_group() as tg:
                tg.start_soon(read_get_stream)
                await opened.wait()
                write_tools_file(tools_file, [NEW_TOOL], notify=True)
                while not any(m.get("method") == "notifications/tools/list_changed" for m in seen):
                    await anyio.sleep(0.05)
                tg.cancel_scope.cancel()

        names = {t["name"] for t in (await s.request("tools/list"))["tools"]}
        assert "alpha__late_tool" in names


async def test_2026_client_is_stateless_and_hears_changes_through_listen(gateway: Vigil, tools_file: Path) -> None:
    async with streamable_http_client(gateway.url) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=SDK_READ_TIMEOUT) as s:
            with anyio.fail_after(DEADLINE):
                await s.discover()
            assert s.protocol_version == "2026-07-28"
            assert prefixed("alpha", {"echo", "add"}) <= await tool_names(s)
            assert await call_text(s, "alpha__add", {"a": 1, "b": 2}) == "3"
            async with listen(s, tools_list_changed=True) as sub:
                write_tools_file(tools_file, [NEW_TOOL], notify=True)
                with anyio.fail_after(DEADLINE):
                    event = await sub.__anext__()
                assert "ToolsListChanged" in type(event).__name__, event
            assert "alpha__late_tool" in await tool_names(s)
            assert await call_text(s, "alpha__late_tool", {"x": 1}) == 'late_tool: {"x":1}'
