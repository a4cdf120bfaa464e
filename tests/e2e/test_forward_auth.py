"""Credential-forwarding backends (`forward_auth = true`).

Each client session reaches such a backend over its own connection carrying
that client's `Authorization` header, and sees its own catalog of it. The
backend here (`backends/per_user_server.py`, Python SDK) serves each token
its own tools, refuses requests without credentials with 401, and logs whose
token every `tools/list` came with, so the tests can tell that Vigil never
listed it without a client's credentials or with another session's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, NamedTuple

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ToolsListChanged

from harness import DemoHttp, Gateways, Procs, demo_stdio_args, http_backend, start_python_backend, stdio_backend
from support import (
    DEADLINE,
    DEMO_TOOLS,
    ControlApi,
    Inbox,
    call_error,
    call_text,
    http_session,
    is_tools_list_changed,
    poll,
    prefixed,
    text_of,
    tool_names,
)

pytestmark = pytest.mark.anyio

ALICE = {"Authorization": "Bearer alice"}
BOB = {"Authorization": "Bearer bob"}
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def write_tools(state: Path, table: dict[str, list[str]]) -> None:
    """Rewrite the per-token tool table (the backend reads it on every listing)."""
    tmp = state / "tools.json.tmp"
    tmp.write_text(json.dumps(table), encoding="utf-8")
    tmp.replace(state / "tools.json")


def listings(state: Path) -> list[str]:
    """The `Authorization` of every `tools/list` the backend answered, in order."""
    log = state / "listings.log"
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


class PerUser(NamedTuple):
    """A running per_user_server: its state directory, process, and Vigil backend table."""

    state: Path
    server: DemoHttp
    backend: dict[str, Any]


def start_per_user(procs: Procs, tmp_path: Path, table: dict[str, list[str]], **extra: Any) -> PerUser:
    """per_user_server.py serving `table`, and a `forward_auth` backend `per` for it (plus `extra` keys)."""
    state = tmp_path / "per-user"
    state.mkdir()
    write_tools(state, table)
    server = start_python_backend(procs, "per-user", "per_user_server.py", [str(state)])
    backend = http_backend("per", server.url) | {"forward_auth": True, **extra}
    return PerUser(state, server, backend)


def changes(inbox: Inbox) -> int:
    return len(inbox.matching(is_tools_list_changed))


async def test_sessions_with_different_tokens_see_and_refresh_their_own_tools(
    vigil: Gateways, procs: Procs, demo_bin: Path, tmp_path: Path
) -> None:
    state, _, backend = start_per_user(procs, tmp_path, {"Bearer alice": ["alpha"], "Bearer bob": ["beta"]})
    gw = vigil(
        [stdio_backend("shared", demo_bin, demo_stdio_args("shared")), backend],
        api={},
        health={"interval": "1s", "timeout": "1s"},
        env={"VIGIL_POLL_INTERVAL": "1s"},
    )
    api = ControlApi(gw.api_base)
    # Vigil holds no credentials for the backend: its probe counts the 401
    # for a request without them as "the server is there".
    await poll(lambda: api.instance("per"), lambda i: i["state"] == "running", "per running")

    alice_inbox, bob_inbox = Inbox(), Inbox()
    async with (
        http_session(gw.url, headers=ALICE, message_handler=alice_inbox) as alice,
        http_session(gw.url, headers=BOB, message_handler=bob_inbox) as bob,
    ):
        shared = prefixed("shared", DEMO_TOOLS)
        assert await tool_names(alice) == shared | {"per__alpha"}
        assert await tool_names(bob) == shared | {"per__beta"}
        assert await call_text(alice, "per__alpha", {}) == "alpha for Bearer alice"
        assert await call_text(bob, "per__beta", {}) == "beta for Bearer bob"
        # Bob's catalog has no alpha: nothing routes his call to it.
        err = await call_error(bob, "per__alpha", {})
        assert "unknown tool 'per__alpha'" in str(err), err

        # Alice gets a new tool on the backend, which says nothing. The
        # poller re-lists through each session's own connection: Alice
        # hears of it; Bob's re-listing finds nothing new for him.
        alice_seen, bob_seen = changes(alice_inbox), changes(bob_inbox)
        mark = len(listings(state))
        write_tools(state, {"Bearer alice": ["alpha", "gamma"], "Bearer bob": ["beta"]})
        await alice_inbox.wait_for(
            is_tools_list_changed, "tools/list_changed for Alice's new tool", count=alice_seen + 1
        )
        assert await tool_names(alice) == shared | {"per__alpha", "per__gamma"}
        assert await call_text(alice, "per__gamma", {}) == "gamma for Bearer alice"
        await poll(
            lambda: anyio.to_thread.run_sync(lambda: listings(state)[mark:]),
            lambda since: "Bearer bob" in since,
            "a re-listing through Bob's connection",
        )
        await anyio.sleep(0.5)  # let a (wrong) notification for Bob arrive
        assert changes(bob_inbox) == bob_seen, bob_inbox.items
        assert await tool_names(bob) == shared | {"per__beta"}

    # Every listing carried one of the two clients' own tokens: never none,
    # never Vigil's own.
    seen = set(listings(state))
    assert seen == {"Bearer alice", "Bearer bob"}, seen


async def test_a_session_without_credentials_sees_none_of_the_backends_tools(
    vigil: Gateways, procs: Procs, tmp_path: Path
) -> None:
    state, _, backend = start_per_user(procs, tmp_path, {"Bearer alice": ["alpha"]})
    gw = vigil([backend], startup_timeout="5s")
    async with http_session(gw.url) as anonymous, http_session(gw.url, headers=ALICE) as alice:
        assert await tool_names(alice) == {"per__alpha"}
        # The backend refuses a session without credentials; Vigil has none
        # of its own to offer instead.
        assert await tool_names(anonymous) == set()
        err = await call_error(anonymous, "per__alpha", {})
        assert "per__alpha" in str(err), err
    assert "" not in listings(state)


async def test_an_idle_session_connection_is_closed_and_reopened_on_use(
    vigil: Gateways, procs: Procs, tmp_path: Path
) -> None:
    state, _, backend = start_per_user(procs, tmp_path, {"Bearer alice": ["alpha"]}, session_idle="300ms")
    gw = vigil([backend], log_level="vigil=debug", poller={"interval": "0s"})
    async with http_session(gw.url, headers=ALICE) as alice:
        assert await call_text(alice, "per__alpha", {}) == "alpha for Bearer alice"
        opened = len(listings(state))

        def closed_idle() -> bool:
            return "closing an idle session connection" in ANSI.sub("", gw.proc.stderr())

        await poll(lambda: anyio.to_thread.run_sync(closed_idle), bool, "the idle connection closed")
        # The next call opens a new connection (listing again, after the
        # call: requests never wait for a listing) and works.
        assert await call_text(alice, "per__alpha", {}) == "alpha for Bearer alice"
        await poll(
            lambda: anyio.to_thread.run_sync(lambda: listings(state)),
            lambda seen: len(seen) > opened,
            "a listing through the reopened connection",
        )
        assert await tool_names(alice) == {"per__alpha"}


async def test_sessions_lose_and_regain_the_backends_tools_with_its_health(
    vigil: Gateways, procs: Procs, tmp_path: Path
) -> None:
    """The backend's shared entry is empty; its health still reaches every session's own view."""
    state, per_user, backend = start_per_user(procs, tmp_path, {"Bearer alice": ["alpha"]})
    gw = vigil(
        [backend],
        health={"interval": "300ms", "timeout": "300ms"},
        restart={"base": "100ms", "max": "300ms", "jitter": 0.0},
    )
    inbox = Inbox()
    async with http_session(gw.url, headers=ALICE, message_handler=inbox) as alice:
        assert await tool_names(alice) == {"per__alpha"}
        seen = changes(inbox)

        per_user.proc.kill()
        await inbox.wait_for(is_tools_list_changed, "tools/list_changed for the loss", count=seen + 1)
        assert await tool_names(alice) == set()
        err = await call_error(alice, "per__alpha", {})
        assert "unavailable" in str(err), err

        seen = changes(inbox)
        start_python_backend(procs, "per-user-again", "per_user_server.py", [str(state)], port=per_user.port)
        await inbox.wait_for(is_tools_list_changed, "tools/list_changed for the recovery", count=seen + 1)
        assert await tool_names(alice) == {"per__alpha"}
        assert await call_text(alice, "per__alpha", {}) == "alpha for Bearer alice"


def modern_client(url: str, headers: dict[str, str] | None = None) -> Client:
    """A 2026-07-28 client: no session, its `Authorization` on every request."""
    http = httpx2.AsyncClient(headers=headers or {}, timeout=httpx2.Timeout(30.0, read=300.0))
    return Client(streamable_http_client(url, http_client=http), mode="2026-07-28")


async def modern_tools(client: Client) -> set[str]:
    with anyio.fail_after(DEADLINE):
        return {t.name for t in (await client.list_tools()).tools}


async def test_sessionless_clients_reach_the_backend_with_their_own_credentials(
    vigil: Gateways, procs: Procs, tmp_path: Path
) -> None:
    """A 2026-07-28 client has no session: each request carries its own
    `Authorization`. Through Vigil it sees, calls and hears of what the
    backend serves *its* token, as it does talking to the backend directly;
    another token sees its own, and no token sees nothing of the backend."""
    state, server, backend = start_per_user(procs, tmp_path, {"Bearer alice": ["alpha"], "Bearer bob": ["beta"]})
    async with modern_client(server.url, ALICE) as direct:
        assert await modern_tools(direct) == {"alpha"}, "the backend itself, to Alice's token"
    gw = vigil([backend], api={}, env={"VIGIL_POLL_INTERVAL": "1s"})
    await poll(lambda: ControlApi(gw.api_base).instance("per"), lambda i: i["state"] == "running", "per running")

    async with modern_client(gw.url, ALICE) as alice, modern_client(gw.url, BOB) as bob, modern_client(gw.url) as nobody:
        assert await modern_tools(alice) == {"per__alpha"}
        assert await modern_tools(bob) == {"per__beta"}
        assert await modern_tools(nobody) == set()
        with anyio.fail_after(DEADLINE):
            assert text_of(await alice.call_tool("per__alpha", {})) == "alpha for Bearer alice"
            assert text_of(await bob.call_tool("per__beta", {})) == "beta for Bearer bob"
            with pytest.raises(MCPError, match="unknown tool 'per__alpha'"):
                await bob.call_tool("per__alpha", {})

        # Alice's listen stream hears of a tool the backend adds for her
        # (the poller re-lists through her connection).
        with anyio.fail_after(DEADLINE):
            async with alice.listen(tools_list_changed=True) as sub:
                write_tools(state, {"Bearer alice": ["alpha", "gamma"], "Bearer bob": ["beta"]})
                async for event in sub:
                    if isinstance(event, ToolsListChanged):
                        break
        assert await modern_tools(alice) == {"per__alpha", "per__gamma"}
        assert await modern_tools(bob) == {"per__beta"}

    seen = set(listings(state))
    assert seen == {"Bearer alice", "Bearer bob"}, f"every listing carried a client's own token: {seen}"
