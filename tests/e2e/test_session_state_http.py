"""What an HTTP backend makes for one client's session stays with that client.

The backend (`backends/session_state_server.py`) makes a resource for the
calling session alone, announces it on that session with
`notifications/resources/list_changed`, and lists and reads it there only.
Through Vigil the call travels on a backend session of that client: its
own, or (a client that declared nothing) its caller's lane; a 2026-07-28
client's on its caller's. Vigil re-lists that backend session when it
announces a change, and what it lists beyond the shared listing is shown
to the clients of that backend session and no one else; a read of it goes
there at once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import types

from harness import Gateways, Procs, http_backend, start_python_backend
from reference import wire
from support import DEADLINE, Inbox, http_session, list_all, poll_sync

pytestmark = pytest.mark.anyio

KEYS = {"alice": "k-alice-" + "a1" * 16, "bob": "k-bob-" + "b2" * 16}
NOTE = "note://n1"


def keyed(vigil: Gateways, procs: Procs, **backend: Any) -> str:
    server = start_python_backend(procs, "state", "session_state_server.py")
    gw = vigil(
        [{**http_backend("state", server.url), **backend}],
        auth={"keys": [{"name": n, "key_env": f"KEY_{n.upper()}"} for n in KEYS]},
        env={f"KEY_{n.upper()}": k for n, k in KEYS.items()},
    )
    return gw.url


def bearer(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[who]}"}


async def uris(s: Any) -> list[str]:
    return [str(r.uri) for r in await list_all(s, "resources")]


async def list_roots(_ctx: object) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[])


@pytest.mark.parametrize("declares", ["nothing", "roots"])
async def test_a_session_resource_is_listed_and_read_by_its_session_alone(
    vigil: Gateways, procs: Procs, declares: str
) -> None:
    """`nothing`: the calls take the caller's lane (raw path); `roots`: the session's own backend session."""
    url = keyed(vigil, procs)
    extra: dict[str, Any] = {"list_roots_callback": list_roots} if declares == "roots" else {}
    inbox = Inbox()
    async with (
        http_session(url, headers=bearer("alice"), message_handler=inbox, **extra) as alice,
        http_session(url, headers=bearer("bob"), **extra) as bob,
    ):
        assert NOTE not in await uris(alice)
        with anyio.fail_after(DEADLINE):
            made = await alice.call_tool("state__make_note", {"name": "n1", "text": "alice's note"})
        assert not made.is_error, made
        # Read at once, by the link the call returned.
        with anyio.fail_after(DEADLINE):
            read = await alice.read_resource(NOTE)
        assert [c.text for c in read.contents if isinstance(c, types.TextResourceContents)] == ["alice's note"]
        # Listed after a resources/list_changed that reaches alice.
        for n in range(1, 21):
            await inbox.wait_for(
                lambda m: isinstance(m, types.ResourceListChangedNotification), "resources/list_changed", count=n
            )
            if NOTE in await uris(alice):
                break
        else:
            raise AssertionError(f"20 resources/list_changed and {NOTE} never listed to alice")
        assert NOTE not in await uris(bob), "another caller lists alice's note"
        with pytest.raises(Exception) as refused:
            with anyio.fail_after(DEADLINE):
                await bob.read_resource(NOTE)
        assert "alice's note" not in str(refused.value)


def test_a_2026_client_lists_what_its_callers_backend_session_made(
    vigil: Gateways, procs: Procs, tmp_path: Path
) -> None:
    url = keyed(vigil, procs, protocol="2025-11-25")
    callers = {}
    for who in KEYS:
        w = wire.ModernHttpWire(url, deadline=DEADLINE, log=tmp_path / f"wire-{who}.log")
        w.extra_headers = bearer(who)
        callers[who] = w
    try:
        alice, bob = callers["alice"], callers["bob"]
        params = json.dumps({"name": "state__make_note", "arguments": {"name": "n1", "text": "alice's note"}})
        made = wire.parse(alice.request("tools/call", params).text)
        assert made.get("error") is None, made.get("error")

        def listed(w: wire.ModernHttpWire) -> list[str]:
            msg = wire.parse(w.request("resources/list").text)
            return [r.get("uri").value for r in msg.get("result").get("resources")]

        # A 2026-07-28 client is told of no change: it lists again, within the deadline.
        poll_sync(lambda: listed(alice), lambda uris: NOTE in uris, "the note listed to its maker")
        assert NOTE not in listed(bob), "another caller lists alice's note"
    finally:
        for w in callers.values():
            w.close()
