"""A handshake-era backend asks; a 2026-07-28 client answers by calling again (MRTR).

The demo backend (handshake era) asks its client for an elicitation or a
sampling while a tool call runs. A 2026-07-28 client cannot be sent
requests: through Vigil the call answers with an input-required result
holding the question and a `requestState`, and the client's retry with its
answer completes the same backend call. Checked with the official Python
SDK's `Client` (which drives the rounds through its callbacks) for a stdio
and an HTTP backend, and by hand: a forged state (altered, or brought for
another request) and a replayed one are refused with an error saying which,
and none reaches the backend: the genuine retry still completes the call.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, ClientSession, types
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from harness import DemoHttp, Procs, Vigil, demo_stdio_args, http_backend, start_python_backend, stdio_backend
from support import DEADLINE, DEMO_TOOLS, SDK_READ_TIMEOUT, ControlApi, http_session, poll, prefixed, text_of

pytestmark = pytest.mark.anyio

BACKENDS = ["alpha", "beta"]  # alpha: stdio, beta: http


@pytest.fixture
def gateway(vigil: Callable[..., Vigil], demo_http: Callable[..., DemoHttp], demo_bin: Path) -> Vigil:
    beta = demo_http("beta")
    # The demo backend speaks both eras: pinned to the handshake era, Vigil
    # reaches it as a backend that speaks only that one (a 2026-07-28 session
    # for 2026-07-28 clients is checked below).
    pinned = {"protocol": "2025-11-25"}
    alpha = {**stdio_backend("alpha", demo_bin, demo_stdio_args("alpha")), **pinned}
    return vigil([alpha, {**http_backend("beta", beta.url), **pinned}])


async def wait_listed(client: Client, names: set[str]) -> None:
    async def listed() -> set[str]:
        return {t.name for t in (await client.list_tools()).tools}

    await poll(listed, lambda have: names <= have, f"{sorted(names)} listed")


@pytest.mark.parametrize("backend", BACKENDS)
async def test_elicitation_reaches_a_2026_client_as_input_required(gateway: Vigil, backend: str) -> None:
    name = f"user-{uuid.uuid4()}"
    asked: list[types.ElicitRequestParams] = []

    async def elicitation(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"name": name})

    async with Client(gateway.url, mode="2026-07-28", elicitation_callback=elicitation) as client:
        assert client.protocol_version == "2026-07-28"
        await wait_listed(client, prefixed(backend, DEMO_TOOLS))
        message = f"who-{uuid.uuid4()}"
        with anyio.fail_after(DEADLINE):
            result = await client.call_tool(f"{backend}__ask_user", {"message": message})
        said = text_of(result)
        assert said.startswith("user accept: "), said
        assert json.loads(said.removeprefix("user accept: ")) == {"name": name}
        assert [p.message for p in asked] == [message]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_sampling_reaches_a_2026_client_as_input_required(gateway: Vigil, backend: str) -> None:
    reply = f"model-reply-{uuid.uuid4()}"

    async def sampling(ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        return types.CreateMessageResult(role="assistant", content=types.TextContent(text=reply), model="e2e-model")

    async with Client(gateway.url, mode="2026-07-28", sampling_callback=sampling) as client:
        await wait_listed(client, prefixed(backend, DEMO_TOOLS))
        with anyio.fail_after(DEADLINE):
            result = await client.call_tool(f"{backend}__ask_llm", {"prompt": "hello"})
        assert text_of(result) == f"llm said: {reply}"


ACCEPT = {"vigil": {"action": "accept", "content": {"name": "Ada"}}}


async def test_forged_and_replayed_states_are_refused(gateway: Vigil) -> None:
    async def never(_ctx: Any, _params: types.ElicitRequestParams) -> types.ElicitResult:
        raise AssertionError("the rounds are driven by hand (allow_input_required)")

    # The callback only makes the client declare elicitation: a client that
    # did not is never asked (docs/gateway.md, "What each client is shown").
    async with streamable_http_client(gateway.url) as (read, write):
        async with ClientSession(
            read, write, read_timeout_seconds=SDK_READ_TIMEOUT, elicitation_callback=never
        ) as s:
            with anyio.fail_after(DEADLINE):
                await s.discover()
            first = await s.call_tool("alpha__ask_user", {"message": "name?"}, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult), first
            assert first.request_state and first.input_requests and "vigil" in first.input_requests
            state = first.request_state

            # One character of the sealed state changed: refused, the call still waits.
            forged = state[:-1] + ("0" if state[-1] != "0" else "1")
            with pytest.raises(MCPError) as refused:
                await s.call_tool("alpha__ask_user", {"message": "name?"}, input_responses=ACCEPT, request_state=forged)
            assert "requestState was not issued by this gateway" in refused.value.error.message
            assert refused.value.error.code == types.INVALID_PARAMS

            # The same state for another tool of the same backend: refused as well.
            with pytest.raises(MCPError) as other:
                await s.call_tool("alpha__ask_llm", {"prompt": "x"}, input_responses=ACCEPT, request_state=state)
            assert "requestState was not issued by this gateway" in other.value.error.message

            # The genuine retry completes the backend's call.
            done = await s.call_tool(
                "alpha__ask_user", {"message": "name?"}, input_responses=ACCEPT, request_state=state
            )
            assert text_of(done) == 'user accept: {"name":"Ada"}'

            # Replayed: answered once only.
            with pytest.raises(MCPError) as replayed:
                await s.call_tool("alpha__ask_user", {"message": "name?"}, input_responses=ACCEPT, request_state=state)
            assert "requestState was already used" in replayed.value.error.message


async def first_round(streams: Any, tool: str) -> types.InputRequiredResult:
    """A 2026-07-28 session's first round of `tool` (the demo's `ask_user`) over `streams`."""
    async with streams as (read, write, *_):
        async with ClientSession(read, write, read_timeout_seconds=SDK_READ_TIMEOUT) as s:
            with anyio.fail_after(DEADLINE):
                await s.discover()
                first = await s.call_tool(tool, {"message": "name?"}, allow_input_required=True)
    assert isinstance(first, types.InputRequiredResult), first
    return first


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_a_backend_of_both_eras_asks_a_2026_client_in_its_own_words(
    vigil: Callable[..., Vigil], demo_http: Callable[..., DemoHttp], demo_bin: Path, transport: str
) -> None:
    """With `protocol = "auto"` Vigil reaches the demo backend (which speaks
    both eras) in the handshake era, and a 2026-07-28 client's calls through
    a backend session of that era (over stdio, one more process): the
    input-required result is the backend's own (its key, its state), as
    directly, not Vigil's."""
    if transport == "http":
        demo = demo_http("both")
        direct = await first_round(streamable_http_client(demo.url), "ask_user")
        backend = http_backend("both", demo.url)
    else:
        args = demo_stdio_args("both")
        direct = await first_round(stdio_client(StdioServerParameters(command=str(demo_bin), args=args)), "ask_user")
        backend = stdio_backend("both", demo_bin, args)
    gw = vigil([backend])
    async with Client(gw.url, mode="2026-07-28") as client:
        await wait_listed(client, {"both__ask_user"})
    through = await first_round(streamable_http_client(gw.url), "both__ask_user")
    assert list(through.input_requests or {}) == list(direct.input_requests or {}) != ["vigil"], (direct, through)
    assert not (through.request_state or "").startswith("vigil1."), through.request_state


async def test_a_url_elicitation_error_reaches_a_2026_client_as_a_question(
    vigil: Callable[..., Vigil], procs: Procs
) -> None:
    """2025-11-25 ends a call with `-32042` when the user must visit a URL
    first; 2026-07-28 has no such error. A 2026-07-28 client gets the URL
    elicitation as an input-required result, and its retry is the call made
    again, which now succeeds."""
    backend = start_python_backend(procs, "url", "url_elicitation_server.py")
    async with http_session(backend.url) as direct:
        with pytest.raises(MCPError) as refused:
            await direct.call_tool("needs_login", {"user": "direct"})
    assert refused.value.error.code == -32042, "the backend itself, to a 2025-11-25 client"
    gw = vigil([{**http_backend("u", backend.url), "protocol": "2025-11-25"}], api={})
    await ControlApi(gw.api_base).wait_state("u", "running")
    asked: list[Any] = []

    async def visit(_ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept")

    async with Client(gw.url, mode="2026-07-28", elicitation_callback=visit) as client:
        with anyio.fail_after(DEADLINE):
            result = await client.call_tool("u__needs_login", {"user": "through"})
    assert text_of(result) == "logged in"
    assert [getattr(p, "url", None) for p in asked] == ["https://login.example/start"], asked
