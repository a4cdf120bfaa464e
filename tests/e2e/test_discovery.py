"""What Vigil says about itself to a client, and what a 2026-07-28 client
may cache of what it says.

- `server/discover` and `initialize` carry Vigil's instructions followed by
  those of the backends the caller can use something of (a backend whose
  tools a `[[policy]]` hides from a caller is not named to it);
- discover and the lists carry `ttlMs` 0 and a `cacheScope` that is public
  only when every caller sees the same (no `[auth]`, no policy, no
  `forward_auth`), private otherwise; 2025-era clients get no hints;
- a relayed `resources/read` keeps the backend's scope only when Vigil's own
  is public.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness import Gateways, demo_stdio_args, http_backend, stdio_backend
from support import DEADLINE, ControlApi

pytestmark = pytest.mark.anyio

REVISION = "2026-07-28"
DEMO_SAYS = 'Vigil\'s demo MCP server "{name}": test tools, resources and a prompt.'
KEY = "discovery-key-7c1f0e8b4f9c2b7e1a0d8c3f"


async def modern(url: str, method: str, params: dict[str, Any] | None = None, name: str | None = None, key: str | None = None) -> dict[str, Any]:
    """One 2026-07-28 request; its result."""
    meta = {"io.modelcontextprotocol/protocolVersion": REVISION, "io.modelcontextprotocol/clientCapabilities": {}}
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**(params or {}), "_meta": meta}}
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": REVISION,
        "Mcp-Method": method,
    }
    if name is not None:
        headers["Mcp-Name"] = name
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        answer = data_of(await http.post(url, json=body, headers=headers))
    assert "result" in answer, answer
    return answer["result"]


LEGACY = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


def data_of(r: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC message of an answer (plain JSON or one SSE event)."""
    text = r.text
    if text.startswith(("data:", "event:", "id:", ":")):
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:") and line[5:].strip())
    return json.loads(text)


def hints(result: dict[str, Any]) -> tuple[Any, Any]:
    return result.get("ttlMs"), result.get("cacheScope")


async def test_discover_names_the_backends_instructions_and_says_what_may_be_cached(
    vigil: Gateways, demo_bin: Path, demo_http: Any
) -> None:
    web = demo_http("web")
    gw = vigil([stdio_backend("files", demo_bin, demo_stdio_args("files")), http_backend("web", web.url)], api={})
    api = ControlApi(gw.api_base)
    await api.wait_state("files", "running")
    await api.wait_state("web", "running")

    found = await modern(gw.url, "server/discover")
    text = found["instructions"]
    assert text.startswith("Vigil MCP gateway"), text
    for name in ("files", "web"):
        assert f"## {name} (its tools and prompts are named `{name}__…`)\n{DEMO_SAYS.format(name=name)}" in text, text
    assert text.index("## files") < text.index("## web"), "in name order"
    assert hints(found) == (0, "public"), "no [auth]: every caller sees the same"
    for method in ("tools/list", "prompts/list", "resources/list", "resources/templates/list"):
        assert hints(await modern(gw.url, method)) == (0, "public"), method
    read = await modern(gw.url, "resources/read", {"uri": "demo://files/counter"}, name="demo://files/counter")
    direct = await modern(web.url, "resources/read", {"uri": "demo://web/counter"}, name="demo://web/counter")
    assert hints(direct)[1] == "private", direct
    through = await modern(gw.url, "resources/read", {"uri": "demo://web/counter"}, name="demo://web/counter")
    assert hints(through) == hints(direct), "a relayed result keeps the backend's hints"
    assert read.get("contents"), read

    # The same instructions reach a 2025-era client at initialize, and its
    # lists carry no hints (that revision has none).
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        init = await http.post(gw.url, json=INITIALIZE, headers=LEGACY)
        assert data_of(init)["result"]["instructions"] == text
        session = {**LEGACY, "Mcp-Session-Id": init.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
        await http.post(gw.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
        listed = data_of(await http.post(gw.url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=session))
        assert listed["result"]["tools"] and hints(listed["result"]) == (None, None), listed


async def test_a_callers_discover_names_only_backends_it_can_use_and_is_private(
    vigil: Gateways, demo_bin: Path
) -> None:
    gw = vigil(
        [stdio_backend("files", demo_bin, demo_stdio_args("files")), stdio_backend("web", demo_bin, demo_stdio_args("web"))],
        api={},
        auth={"keys": [{"name": "alice", "key_env": "KEY_ALICE"}]},
        env={"KEY_ALICE": KEY},
        policy=[{"principals": ["key:alice"], "allow": ["web__*", "demo://web/*"]}],
    )
    api = ControlApi(gw.api_base)
    await api.wait_state("files", "running")
    await api.wait_state("web", "running")
    found = await modern(gw.url, "server/discover", key=KEY)
    assert "## web" in found["instructions"] and "## files" not in found["instructions"], found["instructions"]
    assert hints(found) == (0, "private")
    assert hints(await modern(gw.url, "tools/list", key=KEY)) == (0, "private")
