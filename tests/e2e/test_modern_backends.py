"""Backends that speak only protocol revision 2026-07-28 (no `initialize`, no `ping`).

The backend is the official Python SDK (2.x) behind a gate that refuses the
handshake era (`backends/modern_only_server.py`); it logs every method it is
sent. Through Vigil, with the default `protocol = "auto"` and with
`protocol = "2026-07-28"`, such a backend must be:

- reached: over HTTP by `server/discover` (auto asks it first, and pinned
  asks nothing else; under auto a 2025-era client's own connection asks
  `initialize` first, once per instance); over stdio (auto) `initialize`
  refused, then `server/discover` on the same pipes;
- probed without `ping`, many times, and never restarted for it;
- listed and called by a 2025-era client and by a 2026-07-28 client;
- heard: a tool it adds reaches clients as `tools/list_changed`, taken from
  its `subscriptions/listen` stream;
- killed (stdio) and restarted like any other backend, then served again;
- asked things the 2026-07-28 way (an input-required result) and have the
  question reach a client of either era.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, ClientSession, types
from mcp.client.streamable_http import streamable_http_client

from harness import PY_BACKENDS, Procs, Vigil, cmdline, descendants, http_backend, start_python_backend, stdio_backend
from support import (
    DEADLINE,
    SDK_READ_TIMEOUT,
    ControlApi,
    Inbox,
    call_text,
    http_session,
    is_tools_list_changed,
    poll,
    text_of,
    wait_for_tools,
)

pytestmark = pytest.mark.anyio

SCRIPT = "modern_only_server.py"
#: Probes every second, so a few seconds see many of them.
FAST_HEALTH = {"interval": "1s", "timeout": "1s"}


def start_modern_http(procs: Procs, log: Path) -> str:
    """The HTTP backend's URL; its log starts empty once it answers (the
    harness's own readiness check is not Vigil's traffic)."""
    backend = start_python_backend(procs, "modern-http", SCRIPT, [str(log)])
    log.write_text("")
    return backend.url


def methods(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def modern_stdio(name: str, log: Path, **extra: object) -> dict[str, object]:
    return {**stdio_backend(name, sys.executable, [str(PY_BACKENDS / SCRIPT), "stdio", str(log)]), **extra}


def backend_pid(vigil: Vigil, log: Path) -> int | None:
    for pid in descendants(vigil.proc.pid):
        argv = cmdline(pid)
        if SCRIPT in " ".join(argv) and str(log) in argv:
            return pid
    return None


async def wait_probed(log: Path, count: int) -> None:
    """Until the backend answered `count` more `server/discover` requests."""
    start = methods(log).count("server/discover")
    await poll(
        lambda: anyio.to_thread.run_sync(methods, log),
        lambda m: m.count("server/discover") >= start + count,
        f"{count} more server/discover probes in {log.name}",
    )


@pytest.mark.parametrize("protocol", ["auto", "2026-07-28"])
async def test_modern_http_backend_is_probed_listed_and_called(
    vigil: Callable[..., Vigil], procs: Procs, tmp_path: Path, protocol: str
) -> None:
    log = tmp_path / "modern-http.log"
    entry = {**http_backend("mo", start_modern_http(procs, log)), "health": FAST_HEALTH}
    if protocol != "auto":
        entry["protocol"] = protocol
    gw = vigil([entry], api={})
    api = ControlApi(gw.api_base)
    await api.wait_state("mo", "running")
    await wait_probed(log, 3)

    seen = methods(log)
    assert "ping" not in seen, f"a 2026-07-28 backend was sent ping: {seen}"
    assert "server/discover" in seen and "tools/list" in seen, seen
    assert seen[0] == "server/discover", f"over HTTP, auto asks server/discover first: {seen}"
    assert "initialize" not in seen, f"a backend that speaks only 2026-07-28 is never sent initialize: {seen}"
    detail = await api.instance("mo")
    assert detail["state"] == "running" and detail["restart_count"] == 0, detail

    # A 2025-era client (initialize) and a 2026-07-28 client (discover).
    async with http_session(gw.url) as s:
        assert await call_text(s, "mo__echo", {"text": "from 2025"}) == "from 2025"
    async with streamable_http_client(gw.url) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=SDK_READ_TIMEOUT) as s:
            with anyio.fail_after(DEADLINE):
                await s.discover()
            assert s.protocol_version == "2026-07-28"
            assert await call_text(s, "mo__echo", {"text": "from 2026"}) == "from 2026"
    # A second 2025-era client: its connection is not asked for a session
    # again on this instance.
    async with http_session(gw.url) as s:
        assert await call_text(s, "mo__echo", {"text": "again"}) == "again"
    seen = methods(log)
    assert "ping" not in seen
    # Each 2025-era client session has a backend connection of its own.
    # Pinned, it asks server/discover only. Under auto it asks a session
    # first (some servers list only 2026-07-28 yet take one), once for the
    # instance: refused, then server/discover, and the refusal is kept.
    expected = 1 if protocol == "auto" else 0
    assert seen.count("initialize") == expected, seen
    assert seen.count("tools/call") == 3, seen


async def test_modern_backend_changes_reach_clients_through_listen(
    vigil: Callable[..., Vigil], procs: Procs, tmp_path: Path
) -> None:
    log = tmp_path / "modern-http.log"
    gw = vigil([{**http_backend("mo", start_modern_http(procs, log)), "protocol": "2026-07-28"}], api={})
    await ControlApi(gw.api_base).wait_state("mo", "running")
    inbox = Inbox()
    async with http_session(gw.url, message_handler=inbox.put) as s:
        await wait_for_tools(s, {"mo__echo", "mo__add_tool"})
        # Vigil opened its subscription when it connected; the poller
        # (5 min) cannot be what brings the new tool.
        assert "subscriptions/listen" in methods(log)
        assert await call_text(s, "mo__add_tool", {"name": "fresh"}) == "added fresh"
        await inbox.wait_for(is_tools_list_changed, "tools/list_changed after the backend added a tool")
        await wait_for_tools(s, {"mo__fresh"})
        assert await call_text(s, "mo__fresh") == "fresh"


async def test_modern_stdio_backend_is_killed_and_restarted_like_any_other(
    vigil: Callable[..., Vigil], tmp_path: Path
) -> None:
    log = tmp_path / "modern-stdio.log"
    gw = vigil(
        [modern_stdio("ms", log, health=FAST_HEALTH, restart={"base": "200ms", "jitter": 0.0})],
        api={},
    )
    api = ControlApi(gw.api_base)
    await api.wait_state("ms", "running")
    await wait_probed(log, 3)
    seen = methods(log)
    assert seen[:2] == ["initialize", "server/discover"], (
        f"auto, stdio: initialize, then discover on the same pipes: {seen}"
    )
    assert "ping" not in seen, seen
    assert (await api.instance("ms"))["restart_count"] == 0

    async with http_session(gw.url) as s:
        assert await call_text(s, "ms__echo", {"text": "before"}) == "before"
        pid = backend_pid(gw, log)
        assert pid is not None, "the backend process runs under vigil"
        os.kill(pid, signal.SIGKILL)
        await api.wait_for("ms", lambda d: d["restart_count"] >= 1 and d["state"] == "running", "restarted and running")
        new_pid = backend_pid(gw, log)
        assert new_pid is not None and new_pid != pid

        async def echo() -> str:
            return await call_text(s, "ms__echo", {"text": "after"})

        await poll(echo, lambda t: t == "after", "a call to the restarted backend")
    await wait_probed(log, 3)
    assert "ping" not in methods(log)
    detail = await api.instance("ms")
    assert detail["restart_count"] == 1, f"restarted once, for the kill, not for probes: {detail}"


async def test_modern_backends_questions_reach_clients_of_both_eras(
    vigil: Callable[..., Vigil], procs: Procs, tmp_path: Path
) -> None:
    """The backend asks with an input-required result (MRTR).

    A 2025-era client is asked a real `elicitation/create` and Vigil calls
    again with its answer; a 2026-07-28 client gets the result itself and
    calls again. Either way the backend sees its own `requestState` back
    unchanged (`ask_name` checks it) and the client's answer.
    """
    log = tmp_path / "modern-http.log"
    gw = vigil([{**http_backend("mo", start_modern_http(procs, log)), "protocol": "2026-07-28"}], api={})
    await ControlApi(gw.api_base).wait_state("mo", "running")
    asked: list[str] = []

    async def elicitation(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": f"Ada{len(asked)}"})

    async with http_session(gw.url, elicitation_callback=elicitation) as s:
        await wait_for_tools(s, {"mo__ask_name"})
        assert await call_text(s, "mo__ask_name") == "hello Ada1"
    async with Client(gw.url, mode="2026-07-28", elicitation_callback=elicitation) as client:
        with anyio.fail_after(DEADLINE):
            result = await client.call_tool("mo__ask_name", {})
        assert text_of(result) == "hello Ada2"
    assert asked == ["your name?", "your name?"]
    assert methods(log).count("tools/call") == 4, "two rounds per call, each a request of its own"


async def test_a_modern_backends_log_messages_reach_the_calls_that_asked_for_them(
    vigil: Callable[..., Vigil], procs: Procs, tmp_path: Path
) -> None:
    """2026-07-28 has no `logging/setLevel`: a level travels in each request's
    `_meta`, and the backend logs only for requests that carry one.

    A 2026-07-28 client's per-request level reaches the backend through Vigil
    as it does directly (the same messages come back); a 2025-era client's
    `logging/setLevel` becomes the level on each of its requests; a client
    that asked for nothing gets nothing.
    """
    log = tmp_path / "modern-http.log"
    backend = start_modern_http(procs, log)
    gw = vigil([{**http_backend("mo", backend), "protocol": "2026-07-28"}], api={})
    await ControlApi(gw.api_base).wait_state("mo", "running")

    async def modern_call(url: str, tool: str, tag: str, level: str | None) -> list[str]:
        got: list[str] = []

        async def on_log(params: types.LoggingMessageNotificationParams) -> None:
            got.append(str(params.data))

        async with Client(url, mode="2026-07-28", log_level=level, logging_callback=on_log) as client:
            with anyio.fail_after(DEADLINE):
                result = await client.call_tool(tool, {"tag": tag})
        assert text_of(result) == tag
        return got

    direct = await modern_call(backend, "chatty", "direct", "info")
    assert direct == ["info direct"], f"the backend itself, asked for info: {direct}"
    through = await modern_call(gw.url, "mo__chatty", "vigil", "info")
    assert through == ["info vigil"], f"through Vigil, the same as directly: {through}"
    assert await modern_call(gw.url, "mo__chatty", "quiet", None) == [], "no level asked, no messages"

    heard = Inbox()
    async with http_session(gw.url, logging_callback=heard) as s:
        await s.set_logging_level("debug")
        assert await call_text(s, "mo__chatty", {"tag": "session"}) == "session"
        # The messages may reach the session after the call's answer.
        await heard.wait_for(lambda _: True, "the call's two log messages", count=2)
    got = [str(p.data) for p in heard.items]
    assert got == ["debug session", "info session"], f"a 2025 client's setLevel, per request: {got}"
    assert "logging/setLevel" not in methods(log), "2026-07-28 has no logging/setLevel"


ALICE_KEY = "a1ice-modern-7c1f0e8b4f9c2b7e1a0d8c3f"
BOB_KEY = "b0b-modern-4f9c2b7e1a0d8c3f6b5e9a2d"


async def test_one_callers_log_messages_never_reach_another_caller(
    vigil: Callable[..., Vigil], procs: Procs, tmp_path: Path
) -> None:
    """Each caller's log messages reach that caller only. Alice's call logs
    before and after Bob's call; Bob's call logs while Alice's runs; then a
    call that asked for no logs lets Alice's go on. Each call goes raw, on a
    request of its own whose stream carries its own messages: Alice gets her
    two, Bob his one, the quiet call none, as each would directly.
    """
    log = tmp_path / "modern-http.log"
    backend = start_modern_http(procs, log)
    gw = vigil(
        [{**http_backend("mo", backend), "protocol": "2026-07-28"}],
        api={},
        auth={"keys": [{"name": "alice", "key_env": "KEY_ALICE"}, {"name": "bob", "key_env": "KEY_BOB"}]},
        env={"KEY_ALICE": ALICE_KEY, "KEY_BOB": BOB_KEY},
    )
    await ControlApi(gw.api_base).wait_state("mo", "running")

    def client_of(key: str, got: list[str], level: str | None = "info") -> Client:
        async def on_log(params: types.LoggingMessageNotificationParams) -> None:
            got.append(str(params.data))

        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=SDK_READ_TIMEOUT)
        return Client(
            streamable_http_client(gw.url, http_client=http),
            mode="2026-07-28",
            log_level=level,
            logging_callback=on_log,
        )

    alice_got: list[str] = []
    bob_got: list[str] = []
    quiet_got: list[str] = []
    async with (
        client_of(ALICE_KEY, alice_got) as alice,
        client_of(BOB_KEY, bob_got) as bob,
        client_of(BOB_KEY, quiet_got, level=None) as quiet,
    ):
        with anyio.fail_after(DEADLINE):
            async with anyio.create_task_group() as tg:
                held: list[str] = []

                async def hold() -> None:
                    held.append(text_of(await alice.call_tool("mo__hold", {"tag": "alice"})))

                tg.start_soon(hold)
                async def alice_log() -> list[str]:
                    return list(alice_got)

                await poll(alice_log, lambda got: got == ["before alice"], "Alice's first message, hers alone")
                assert text_of(await bob.call_tool("mo__chatty", {"tag": "bob"})) == "bob"
                # Asks for no logs: a 2026-07-28 backend logs nothing for it.
                assert text_of(await quiet.call_tool("mo__release", {})) == "released"
            assert held == ["alice"]
    assert alice_got == ["before alice", "after alice"], alice_got
    assert bob_got == ["info bob"], bob_got
    assert quiet_got == []
