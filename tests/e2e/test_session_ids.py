"""Sealed session ids: what a client is given as `Mcp-Session-Id`.

A client session's id is sealed by Vigil (`gateway/session_ids.rs`): opaque
(`s1.` and base64url), carrying whose session it is, verified on every
request without a lookup. An altered id is an unknown session; the key
lives in `data_dir/session.key` (0600) and survives a restart, and so do
the sessions: a restarted Vigil adopts them (`gateway/adopt.rs`).
"""

from __future__ import annotations

import stat
from pathlib import Path

import httpx
import pytest

from harness import Gateways, demo_stdio_args, stdio_backend
from support import DEADLINE

pytestmark = pytest.mark.anyio

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "ids", "version": "1"}},
}
PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


async def open_session(http: httpx.AsyncClient, url: str) -> str:
    opened = await http.post(url, json=INIT, headers=HEADERS)
    assert opened.status_code == 200, opened.text
    session = opened.headers["mcp-session-id"]
    on = {**HEADERS, "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await http.post(url, json=note, headers=on)).status_code == 202
    return session


async def ping(http: httpx.AsyncClient, url: str, session: str) -> httpx.Response:
    on = {**HEADERS, "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
    return await http.post(url, json=PING, headers=on)


def altered(session: str) -> str:
    at = len(session) - 6
    return session[:at] + ("A" if session[at] != "A" else "B") + session[at + 1 :]


async def test_a_session_id_is_sealed_and_an_altered_one_is_unknown(vigil: Gateways, demo_bin: Path) -> None:
    gw = vigil([stdio_backend("alpha", demo_bin, demo_stdio_args("alpha"))], api={})
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        session = await open_session(http, gw.url)
        assert session.startswith("s1.") and len(session) < 2048, session
        assert all(c.isalnum() or c in "-_." for c in session), session
        ok = await ping(http, gw.url, session)
        assert ok.status_code == 200 and '"result"' in ok.text, ok.text
        forged = await ping(http, gw.url, altered(session))
        unknown = await ping(http, gw.url, "no-such-session")
        assert forged.status_code == unknown.status_code == 404, (forged.text, unknown.text)
        assert forged.text == unknown.text
        # The genuine one still works: a refusal changes nothing.
        assert (await ping(http, gw.url, session)).status_code == 200


async def test_the_key_is_private_and_kept_across_a_restart(vigil: Gateways, demo_bin: Path) -> None:
    gw = vigil([stdio_backend("alpha", demo_bin, demo_stdio_args("alpha"))], api={})
    key = gw.config_path.parent / "vigil-data" / "session.key"
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        before = await open_session(http, gw.url)
    assert key.exists(), "the key is made at the first start"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    first = key.read_bytes()
    assert len(first) == 32
    again = vigil.serve_again(gw)
    assert key.read_bytes() == first, "a restart keeps the key"
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        # The earlier run's session is adopted: its id still says what it
        # is, and the new run opens it again under the same id...
        adopted = await ping(http, again.url, before)
        assert adopted.status_code == 200 and '"result"' in adopted.text, adopted.text
        assert (await ping(http, again.url, before)).status_code == 200
        # ...and new ones open as before.
        after = await open_session(http, again.url)
        assert (await ping(http, again.url, after)).status_code == 200
