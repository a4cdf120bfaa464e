"""The HTTP headers protocol revision 2026-07-28 adds, through Vigil.

A 2026-07-28 request names its method (and tool, prompt or URI) in headers
too (`Mcp-Method`, `Mcp-Name`), and tool arguments a tool marks with
`x-mcp-header` travel as `Mcp-Param-*` headers. Checked against the same
backend directly:

- Vigil refuses a request whose headers are missing or disagree with its
  body the way a backend does (HTTP 400, `-32020`), and answers the methods
  2026-07-28 removed (`initialize`, `ping`, `logging/setLevel`,
  `resources/subscribe`, `resources/unsubscribe`, with or without params)
  and the GET stream the same way (404 `-32601`, 405);
- what Vigil sends a 2026-07-28 backend carries the same headers a client
  talking to that backend directly sends, `Mcp-Param-*` included.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client

from harness import DemoHttp, Procs, Vigil, http_backend, start_python_backend
from support import DEADLINE, ControlApi, call_text, http_session, text_of

pytestmark = pytest.mark.anyio

REVISION = "2026-07-28"
BASE = {
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
    "MCP-Protocol-Version": REVISION,
}


def request(method: str, params: dict[str, Any]) -> dict[str, Any]:
    meta = {"io.modelcontextprotocol/protocolVersion": REVISION, "io.modelcontextprotocol/clientCapabilities": {}}
    return {"jsonrpc": "2.0", "id": 7, "method": method, "params": {**params, "_meta": meta}}


def outcome(r: httpx.Response) -> tuple[int, int | None]:
    """HTTP status and JSON-RPC error code (None for a result)."""
    text = r.text
    if text.startswith(("data:", "event:", "id:", ":")):
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:") and line[5:].strip())
    body = json.loads(text) if text.strip() else {}
    return r.status_code, (body.get("error") or {}).get("code")


async def outcomes(url: str, tool: str) -> dict[str, tuple[int, int | None]]:
    call = request("tools/call", {"name": tool, "arguments": {"text": "x"}})
    cases = {
        "matching": (call, {"Mcp-Method": "tools/call", "Mcp-Name": tool}),
        "other method": (call, {"Mcp-Method": "tools/list", "Mcp-Name": tool}),
        "other name": (call, {"Mcp-Method": "tools/call", "Mcp-Name": "someone_else"}),
        "no Mcp-Name": (call, {"Mcp-Method": "tools/call"}),
        "no headers": (call, {}),
        "ping": (request("ping", {}), {"Mcp-Method": "ping"}),
    }
    # Removed in 2026-07-28, with and without params that would fit them.
    removed = {
        "initialize": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
        "logging/setLevel": {"level": "info"},
        "resources/subscribe": {"uri": "demo://d/counter"},
        "resources/unsubscribe": {"uri": "demo://d/counter"},
    }
    for method, params in removed.items():
        headers = {"Mcp-Method": method}
        if method.startswith("resources/"):
            headers["Mcp-Name"] = params["uri"]
        cases[method] = (request(method, params), headers)
        cases[f"{method} without params"] = (request(method, {}), headers)
    out = {}
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        for case, (body, headers) in cases.items():
            out[case] = outcome(await http.post(url, json=body, headers={**BASE, **headers}))
        out["GET"] = ((await http.get(url, headers=BASE)).status_code, None)
    return out


async def test_requests_whose_headers_disagree_with_their_body_are_refused_as_by_the_backend(
    vigil: Any, demo_http: Any
) -> None:
    demo: DemoHttp = demo_http("d")
    gw: Vigil = vigil([http_backend("d", demo.url)], api={})
    await ControlApi(gw.api_base).wait_state("d", "running")
    direct = await outcomes(demo.url, "echo")
    through = await outcomes(gw.url, "d__echo")
    assert direct["matching"] == (200, None)
    for case in ("other method", "other name", "no Mcp-Name", "no headers"):
        assert direct[case] == (400, -32020), (case, direct[case])
    assert direct["ping"] == (404, -32601) and direct["GET"][0] == 405, direct
    removed = [c for c in direct if c.startswith(("initialize", "logging/", "resources/"))]
    for case in removed:
        if case != "initialize":  # a session may still begin with it: as the backend (400)
            assert through[case] == (404, -32601), (case, through[case])
    # The demo backend (rmcp 3.11) still serves a 2026-07-28 logging/setLevel
    # that has params; Vigil answers it as the revision says.
    direct.pop("logging/setLevel")
    through.pop("logging/setLevel")
    assert through == direct


def headers_sent(log: Path) -> list[dict[str, Any]]:
    path = log.with_suffix(log.suffix + ".headers")
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines]


def of_call(sent: list[dict[str, Any]], method: str) -> dict[str, str]:
    found = [s["headers"] for s in sent if s["method"] == method]
    assert found, f"no {method} among {[s['method'] for s in sent]}"
    return found[-1]


async def test_a_modern_backend_gets_the_headers_a_direct_client_sends(
    vigil: Any, procs: Procs, tmp_path: Path
) -> None:
    log = tmp_path / "modern.log"
    backend = start_python_backend(procs, "modern", "modern_only_server.py", [str(log)])
    mark = len(headers_sent(log))
    async with Client(backend.url, mode=REVISION) as direct:
        with anyio.fail_after(DEADLINE):
            await direct.list_tools()  # the client learns which arguments go in headers
            assert text_of(await direct.call_tool("regional", {"region": "eu-west"})) == "eu-west"
            assert text_of(await direct.read_resource("note://pad")) == "pad"
    direct_sent = headers_sent(log)[mark:]

    gw: Vigil = vigil([{**http_backend("mo", backend.url), "protocol": REVISION}], api={})
    await ControlApi(gw.api_base).wait_state("mo", "running")
    mark = len(headers_sent(log))
    async with Client(gw.url, mode=REVISION) as client:
        with anyio.fail_after(DEADLINE):
            await client.list_tools()
            assert text_of(await client.call_tool("mo__regional", {"region": "eu-west"})) == "eu-west"
            assert text_of(await client.read_resource("note://pad")) == "pad"
    through_sent = headers_sent(log)[mark:]

    for method in ("tools/call", "resources/read"):
        assert of_call(through_sent, method) == of_call(direct_sent, method), method
    assert of_call(through_sent, "tools/call")["mcp-param-region"] == "eu-west"


async def declared(url: str, tool: str, **callbacks: Any) -> Any:
    """What the backend says the request's client declared, for a
    2026-07-28 client with `callbacks`."""
    async with Client(url, mode=REVISION, **callbacks) as client:
        with anyio.fail_after(DEADLINE):
            return json.loads(text_of(await client.call_tool(tool, {})))


async def test_a_modern_backend_sees_each_clients_own_capabilities(
    vigil: Any, procs: Procs, tmp_path: Path
) -> None:
    """2026-07-28 has no session to declare capabilities in: each request
    carries its client's, and a backend asks only what they allow. Through
    Vigil each request carries its own client's (not Vigil's), for a
    2026-07-28 client as directly, and for a 2025-era client its session's."""
    log = tmp_path / "modern.log"
    backend = start_python_backend(procs, "modern", "modern_only_server.py", [str(log)])

    async def accept(_ctx: Any, _params: Any) -> Any:
        raise AssertionError("not asked")

    plain = await declared(backend.url, "capabilities")
    asking = await declared(backend.url, "capabilities", elicitation_callback=accept)
    assert "elicitation" not in (plain or {}) and "elicitation" in asking, (plain, asking)

    gw: Vigil = vigil([{**http_backend("mo", backend.url), "protocol": REVISION}], api={})
    await ControlApi(gw.api_base).wait_state("mo", "running")
    assert await declared(gw.url, "mo__capabilities") == plain
    assert await declared(gw.url, "mo__capabilities", elicitation_callback=accept) == asking

    async with http_session(gw.url) as s:
        session_plain = json.loads(await call_text(s, "mo__capabilities"))
    assert "elicitation" not in (session_plain or {}) and "sampling" not in (session_plain or {}), session_plain
