"""Resource updates reach the clients that watch a resource, in both eras.

A client watches a resource with `resources/subscribe` (handshake era) or by
naming it in `subscriptions/listen` (2026-07-28). Vigil asks the backend that
serves it once per connection (`resources/subscribe` to a handshake-era
backend, a listen stream naming the URI to a 2026-07-28 one) and relays
`notifications/resources/updated` to every watcher. Checked against each
backend directly where it can be (the same update arrives), and: one client's
unsubscribe does not end another's updates on a shared backend connection;
a subscription follows its backend to a new instance (a restart).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from mcp import Client, types

from harness import DemoHttp, Procs, Vigil, demo_stdio_args, http_backend, start_python_backend, stdio_backend
from support import DEADLINE, ControlApi, Inbox, call_text, http_session, prefixed, wait_for_tools

pytestmark = pytest.mark.anyio


def is_update(uri: str) -> Callable[[object], bool]:
    return lambda m: isinstance(m, types.ResourceUpdatedNotification) and str(m.params.uri) == uri


async def listen_sees_update(url: str, uri: str, tool: str) -> None:
    """A 2026-07-28 client listens for `uri` and gets an update of it after
    each of two calls of `tool` (the second call after the first update).

    Two, because Vigil reports each watched resource updated once when it
    has registered the stream (rmcp acknowledges it before the backend
    watch stands, and a change in between must not go unseen): the second
    update is then the backend's own, relayed. (The SDK merges updates of
    one URI not yet consumed, so the calls wait for each other.)"""
    async with Client(url, mode="2026-07-28") as client:
        with anyio.fail_after(DEADLINE):
            async with client.listen(resource_subscriptions=[uri]) as sub:
                assert uri in (sub.honored.resource_subscriptions or []), sub.honored
                for _ in range(2):
                    await client.call_tool(tool, {})
                    async for event in sub:
                        if getattr(event, "uri", None) == uri:
                            break


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_listen_stream_naming_a_resource_of_a_handshake_backend_gets_its_updates(
    vigil: Callable[..., Vigil], demo_http: Callable[..., DemoHttp], demo_bin: Path, transport: str
) -> None:
    if transport == "http":
        demo = demo_http("d")
        backend = http_backend("d", demo.url)
        # The demo backend itself serves 2026-07-28 listen streams too.
        await listen_sees_update(demo.url, "demo://d/counter", "bump")
    else:
        backend = stdio_backend("d", demo_bin, demo_stdio_args("d"))
    gw = vigil([backend], api={})
    await ControlApi(gw.api_base).wait_state("d", "running")
    await listen_sees_update(gw.url, "demo://d/counter", "d__bump")


async def test_one_clients_unsubscribe_leaves_anothers_updates(
    vigil: Callable[..., Vigil], demo_bin: Path
) -> None:
    gw = vigil([stdio_backend("d", demo_bin, demo_stdio_args("d"))])
    uri = "demo://d/counter"
    first, second = Inbox(), Inbox()
    async with http_session(gw.url, message_handler=first) as a, http_session(gw.url, message_handler=second) as b:
        await wait_for_tools(a, prefixed("d", {"bump"}))
        await a.subscribe_resource(uri)
        await b.subscribe_resource(uri)
        await a.unsubscribe_resource(uri)
        await call_text(a, "d__bump")
        await second.wait_for(is_update(uri), f"{uri} updated, to the client still subscribed")
        # A call's answer follows everything queued for its client before it.
        await call_text(a, "d__echo", {"text": "x"})
        assert not first.matching(is_update(uri)), "the client that unsubscribed got the update"


async def test_a_subscription_follows_its_backend_through_a_restart(
    vigil: Callable[..., Vigil], demo_bin: Path
) -> None:
    """The restarted backend is a new process that knows nothing of the
    subscription: Vigil subscribes it again, tells the client the resource
    may have changed (an update due meanwhile went with the old process),
    and relays the new process's updates as before."""
    gw = vigil([stdio_backend("d", demo_bin, demo_stdio_args("d"))], api={})
    api = ControlApi(gw.api_base)
    uri = "demo://d/counter"
    inbox = Inbox()
    async with http_session(gw.url, message_handler=inbox) as s:
        await wait_for_tools(s, prefixed("d", {"bump"}))
        await s.subscribe_resource(uri)
        await call_text(s, "d__bump")
        await inbox.wait_for(is_update(uri), f"{uri} updated before the restart")
        before = await api.instance("d")
        await api.act_ok("d", "restart")
        await api.wait_for(
            "d", lambda d: d["state"] == "running" and d["restart_count"] == before["restart_count"] + 1, "d restarted"
        )
        await inbox.wait_for(is_update(uri), f"{uri} reported changed after the restart", count=2)
        seen = len(inbox.matching(is_update(uri)))
        # The new process counts from zero: its own update, relayed.
        assert await call_text(s, "d__bump") == "1"
        await inbox.wait_for(is_update(uri), f"{uri} updated by the new process", count=seen + 1)


async def test_a_modern_backends_resource_updates_reach_clients_of_both_eras(
    vigil: Callable[..., Vigil], procs: Procs, tmp_path: Path
) -> None:
    log = tmp_path / "modern-http.log"
    backend = start_python_backend(procs, "modern-http", "modern_only_server.py", [str(log)])
    await listen_sees_update(backend.url, "note://pad", "touch")
    gw = vigil([{**http_backend("mo", backend.url), "protocol": "2026-07-28"}], api={})
    await ControlApi(gw.api_base).wait_state("mo", "running")

    await listen_sees_update(gw.url, "note://pad", "mo__touch")

    inbox = Inbox()
    async with http_session(gw.url, message_handler=inbox) as s:
        await s.subscribe_resource("note://pad")
        assert await call_text(s, "mo__touch") == "touched"
        await inbox.wait_for(is_update("note://pad"), "note://pad updated, to a 2025-era subscriber")
    assert "resources/subscribe" not in log.read_text().split(), "2026-07-28 has no resources/subscribe"
