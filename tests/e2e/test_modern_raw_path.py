"""The raw path of 2026-07-28: a sessionless request forwarded as bytes.

A 2026-07-28 request carries its own revision, capabilities and client info
in `_meta`, so Vigil needs no session to forward it. To a backend it reaches
in that era (one that speaks only 2026-07-28, or one that speaks both once
its 2026-07-28 door is open), `tools/call`, `resources/read` and
`prompts/get` go raw (`vigil_requests_forwarded_total{path="raw"}`): the
client's body with only the id and the routed name replaced, the answer the
backend's own bytes. To a backend that speaks the handshake era only, the
same requests still work, bridged on the typed path (`gateway/mrtr.rs`).
Each answer here is compared with the same request sent to the backend
directly, under the same id: byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness import DemoHttp, Procs, Vigil, http_backend, start_python_backend
import support
from support import DEADLINE, METRICS_VIEWER, ControlApi, moved

pytestmark = pytest.mark.anyio

REVISION = "2026-07-28"
ACCEPT = "application/json, text/event-stream"
VIEWER = METRICS_VIEWER
KEY = "m0dern-raw-7c1f0e8b4f9c2b7e1a0d8c3f"


def body(method: str, params: dict[str, Any], request_id: Any = "c-1") -> bytes:
    meta = {
        "io.modelcontextprotocol/protocolVersion": REVISION,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw-2026", "version": "1"},
    }
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**params, "_meta": meta}}).encode()


def headers(method: str, name: str | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    h = {"Accept": ACCEPT, "Content-Type": "application/json", "MCP-Protocol-Version": REVISION, "Mcp-Method": method}
    if name is not None:
        h["Mcp-Name"] = name
    return {**h, **(extra or {})}


def message_of(resp: httpx.Response) -> str:
    """The JSON-RPC response an answer carries (plain JSON, or an SSE stream's last message), as sent."""
    kind = resp.headers.get("content-type", "").split(";")[0]
    if kind == "application/json":
        return resp.text
    assert kind == "text/event-stream", (kind, resp.text[:300])
    messages = []
    for event in resp.text.replace("\r\n", "\n").split("\n\n"):
        data = "\n".join(line[5:].removeprefix(" ") for line in event.split("\n") if line.startswith("data:"))
        if data.strip():
            messages.append(data)
    return messages[-1]


async def post(url: str, method: str, name: str | None, params: dict[str, Any], extra: dict[str, str] | None = None) -> httpx.Response:
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        return await http.post(url, content=body(method, params), headers=headers(method, name, extra))


async def forwarded(gw: Vigil) -> dict[tuple[str, str], float]:
    return await support.forwarded(gw, VIEWER["token"])


#: (method, the name as Vigil shows it, as the backend knows it, params without the name)
CASES = [
    ("tools/call", "mo__echo", "echo", {"arguments": {"text": 'bytes "quoted" \\ ünïcode'}}),
    ("resources/read", "note://pad", "note://pad", {}),
    ("prompts/get", "mo__greet", "greet", {"arguments": {"name": "Ada"}}),
]


def params_of(method: str, name: str, rest: dict[str, Any]) -> dict[str, Any]:
    key = "uri" if method == "resources/read" else "name"
    return {key: name, **rest}


@pytest.fixture
def modern(procs: Procs, tmp_path: Path) -> str:
    return start_python_backend(procs, "modern", "modern_only_server.py", [str(tmp_path / "modern.log")]).url


async def test_a_2026_client_goes_raw_to_a_modern_backend_and_gets_its_bytes(
    vigil: Callable[..., Vigil], modern: str
) -> None:
    gw = vigil([http_backend("mo", modern)], api={"tokens": [VIEWER]})
    await ControlApi(gw.api_base, VIEWER["token"]).wait_state("mo", "running")
    for method, ours, theirs, rest in CASES:
        direct = await post(modern, method, theirs, params_of(method, theirs, rest))
        before = await forwarded(gw)
        through = await post(gw.url, method, ours, params_of(method, ours, rest))
        assert moved(before, await forwarded(gw)) == {(method, "raw"): 1}, method
        assert through.status_code == direct.status_code == 200, (method, through.text[:300])
        assert message_of(through) == message_of(direct), f"{method}\ndirect: {direct.text}\nvigil:  {through.text}"
        assert json.loads(message_of(through))["id"] == "c-1"


async def test_a_backends_error_keeps_its_http_status_and_an_unknown_name_is_vigils(
    vigil: Callable[..., Vigil], modern: str
) -> None:
    """A modern backend's own refusal comes back as it would directly (its
    code, HTTP 200 for an error in a result's place); a name Vigil cannot
    route gets the typed path's unknown-tool error."""
    gw = vigil([http_backend("mo", modern)], api={"tokens": [VIEWER]})
    await ControlApi(gw.api_base, VIEWER["token"]).wait_state("mo", "running")
    bad = {"arguments": {"nope": 1}}
    direct = await post(modern, "tools/call", "echo", {"name": "echo", **bad})
    before = await forwarded(gw)
    through = await post(gw.url, "tools/call", "mo__echo", {"name": "mo__echo", **bad})
    assert moved(before, await forwarded(gw)) == {("tools/call", "raw"): 1}
    ours, theirs = json.loads(message_of(through)), json.loads(message_of(direct))
    assert through.status_code == direct.status_code, (through.status_code, direct.status_code)
    assert ours.get("error", {}).get("code") == theirs.get("error", {}).get("code"), (ours, theirs)
    assert ours.get("result") == theirs.get("result"), (ours, theirs)

    unknown = await post(gw.url, "tools/call", "mo__missing", {"name": "mo__missing", "arguments": {}})
    error = json.loads(message_of(unknown))["error"]
    assert "mo__missing" in error["message"], error


async def test_with_auth_a_read_is_private_and_otherwise_the_backends(
    vigil: Callable[..., Vigil], modern: str
) -> None:
    """With `[auth]` what Vigil shows depends on the caller, so a relayed
    read may be cached privately only: `cacheScope` is set, nothing else moves."""
    gw = vigil(
        [http_backend("mo", modern)],
        api={"tokens": [VIEWER]},
        auth={"keys": [{"name": "alice", "key_env": "RAW_KEY"}]},
        env={"RAW_KEY": KEY},
    )
    await ControlApi(gw.api_base, VIEWER["token"]).wait_state("mo", "running")
    params = {"uri": "note://pad"}
    direct = json.loads(message_of(await post(modern, "resources/read", "note://pad", params)))
    before = await forwarded(gw)
    resp = await post(gw.url, "resources/read", "note://pad", params, {"Authorization": f"Bearer {KEY}"})
    assert moved(before, await forwarded(gw)) == {("resources/read", "raw"): 1}
    through = json.loads(message_of(resp))
    assert through["result"].pop("cacheScope") == "private", through
    direct["result"].pop("cacheScope", None)
    assert through == direct


async def test_a_backend_speaking_both_eras_is_reached_raw_through_its_modern_door(
    vigil: Callable[..., Vigil], demo_http: Callable[..., DemoHttp]
) -> None:
    """The demo backend (rmcp) speaks both eras: begun in the handshake era,
    its 2026-07-28 clients get a connection of their era (opened by their
    first request, which is typed); from then on their calls go raw."""
    web = demo_http("web")
    gw = vigil([http_backend("web", web.url)], api={"tokens": [VIEWER]})
    await ControlApi(gw.api_base, VIEWER["token"]).wait_state("web", "running")
    listed = await post(gw.url, "tools/list", None, {})
    assert listed.status_code == 200, listed.text[:300]
    call = {"name": "web__echo", "arguments": {"text": "door"}}
    before = await forwarded(gw)
    resp = await post(gw.url, "tools/call", "web__echo", call)
    assert resp.status_code == 200, resp.text[:300]
    assert json.loads(message_of(resp))["result"]["content"][0]["text"] == "door"
    assert moved(before, await forwarded(gw)) == {("tools/call", "raw"): 1}
    # The demo backend names no server on its results; 2026-07-28 asks every
    # result to, so Vigil stamps its own (docs/gateway.md): the one difference.
    direct = json.loads(message_of(await post(web.url, "tools/call", "echo", {"name": "echo", "arguments": {"text": "door"}})))
    through = json.loads(message_of(resp))
    assert "_meta" not in direct["result"], direct
    stamp = through["result"].pop("_meta")
    assert list(stamp) == ["io.modelcontextprotocol/serverInfo"] and stamp[list(stamp)[0]]["name"] == "vigil", stamp
    assert through == direct


async def test_a_handshake_era_backend_is_still_reached_through_the_bridge(
    vigil: Callable[..., Vigil], demo_http: Callable[..., DemoHttp]
) -> None:
    """Pinned to a handshake revision, the backend answers 2026-07-28 clients
    through Vigil's bridge: typed, and still answered."""
    web = demo_http("web")
    gw = vigil([{**http_backend("web", web.url), "protocol": "2025-11-25"}], api={"tokens": [VIEWER]})
    await ControlApi(gw.api_base, VIEWER["token"]).wait_state("web", "running")
    before = await forwarded(gw)
    resp = await post(gw.url, "tools/call", "web__echo", {"name": "web__echo", "arguments": {"text": "bridged"}})
    assert resp.status_code == 200, resp.text[:300]
    answer = json.loads(message_of(resp))
    assert answer["result"]["content"][0]["text"] == "bridged"
    assert answer["result"]["resultType"] == "complete"
    assert moved(before, await forwarded(gw)) == {("tools/call", "typed"): 1}
