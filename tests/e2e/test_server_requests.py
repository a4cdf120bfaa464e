"""Requests and notifications from a backend reach the client that caused them.

During a tool call the demo backend asks the client for a sampling
(`sampling/createMessage`), an elicitation (`elicitation/create`) or its roots
(`roots/list`), and sends progress and log notifications. Through Vigil each
must reach the Python client's callback, and the callback's answer must reach
the backend: the tool's result quotes it. Checked for a stdio backend (alpha)
and an HTTP backend (beta).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import types

from harness import DemoHttp, Vigil, demo_stdio_args, http_backend, stdio_backend
from support import (
    DEMO_TOOLS,
    Inbox,
    call_text,
    http_session,
    prefixed,
    wait_for_tools,
)

pytestmark = pytest.mark.anyio

BACKENDS = ["alpha", "beta"]  # alpha: stdio, beta: http
ALL_TOOLS = prefixed("alpha", DEMO_TOOLS) | prefixed("beta", DEMO_TOOLS)


@pytest.fixture
def gateway(vigil: Callable[..., Vigil], demo_http: Callable[..., DemoHttp], demo_bin: Path) -> Vigil:
    beta = demo_http("beta")
    return vigil(
        [
            stdio_backend("alpha", demo_bin, demo_stdio_args("alpha")),
            http_backend("beta", beta.url),
        ]
    )


@pytest.mark.parametrize("backend", BACKENDS)
async def test_sampling_reaches_the_client_and_back(gateway: Vigil, backend: str) -> None:
    reply = f"model-reply-{uuid.uuid4()}"
    asked = Inbox()

    async def sampling(ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        asked.put(params)
        return types.CreateMessageResult(role="assistant", content=types.TextContent(text=reply), model="e2e-model")

    async with http_session(gateway.url, sampling_callback=sampling) as s:
        await wait_for_tools(s, ALL_TOOLS)
        prompt = f"prompt-{uuid.uuid4()}"
        assert await call_text(s, f"{backend}__ask_llm", {"prompt": prompt}) == f"llm said: {reply}"
        [params] = asked.items
        texts = [m.content.text for m in params.messages if isinstance(m.content, types.TextContent)]
        assert any(prompt in t for t in texts), f"the backend's prompt did not reach the client: {texts}"


@pytest.mark.parametrize("backend", BACKENDS)
async def test_elicitation_accept_reaches_the_client_and_back(gateway: Vigil, backend: str) -> None:
    name = f"user-{uuid.uuid4()}"
    asked = Inbox()

    async def elicitation(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.put(params)
        return types.ElicitResult(action="accept", content={"name": name})

    async with http_session(gateway.url, elicitation_callback=elicitation) as s:
        await wait_for_tools(s, ALL_TOOLS)
        message = f"who-{uuid.uuid4()}"
        said = await call_text(s, f"{backend}__ask_user", {"message": message})
        assert said.startswith("user accept: "), said
        assert json.loads(said.removeprefix("user accept: ")) == {"name": name}
        [params] = asked.items
        assert params.message == message
        assert "name" in params.requested_schema.get("properties", {})


@pytest.mark.parametrize("backend", BACKENDS)
async def test_elicitation_decline_reaches_the_backend(gateway: Vigil, backend: str) -> None:
    async def elicitation(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="decline")

    async with http_session(gateway.url, elicitation_callback=elicitation) as s:
        await wait_for_tools(s, ALL_TOOLS)
        assert await call_text(s, f"{backend}__ask_user", {"message": "name?"}) == "user decline: null"


@pytest.mark.parametrize("backend", BACKENDS)
async def test_roots_come_from_the_calling_client(gateway: Vigil, backend: str) -> None:
    roots = [f"file:///srv/project-{uuid.uuid4()}", f"file:///srv/other-{uuid.uuid4()}"]

    async def list_roots(ctx: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=u) for u in roots])

    async with http_session(gateway.url, list_roots_callback=list_roots) as s:
        await wait_for_tools(s, ALL_TOOLS)
        assert json.loads(await call_text(s, f"{backend}__list_roots")) == roots


async def test_server_requests_go_to_the_session_that_called(gateway: Vigil) -> None:
    """Two sessions share alpha's one stdio connection; each gets its own sampling."""

    def sampler(reply: str) -> Callable[..., Any]:
        async def sampling(ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
            return types.CreateMessageResult(role="assistant", content=types.TextContent(text=reply), model="e2e")

        return sampling

    async with (
        http_session(gateway.url, sampling_callback=sampler("from-one")) as one,
        http_session(gateway.url, sampling_callback=sampler("from-two")) as two,
    ):
        await wait_for_tools(one, ALL_TOOLS)
        await wait_for_tools(two, ALL_TOOLS)
        assert await call_text(two, "alpha__ask_llm", {"prompt": "hi"}) == "llm said: from-two"
        assert await call_text(one, "alpha__ask_llm", {"prompt": "hi"}) == "llm said: from-one"


@pytest.mark.parametrize("backend", BACKENDS)
async def test_progress_reaches_the_progress_callback(gateway: Vigil, backend: str) -> None:
    progress = Inbox()

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.put((done, total))

    async with http_session(gateway.url) as s:
        await wait_for_tools(s, ALL_TOOLS)
        steps = 4
        assert await call_text(s, f"{backend}__progress", {"steps": steps}, progress_callback=on_progress) == (
            f"done {steps}"
        )
        # Progress belongs before the result: the SDK drops progress for a request
        # that is already answered (and straight to the demo backend it always
        # arrives in order, before the result).
        expected = [(float(n), float(steps)) for n in range(1, steps + 1)]
        assert progress.items == expected, (
            f"progress lost, reordered or sent after the result: got {progress.items}, want {expected}"
        )


@pytest.mark.parametrize("backend", BACKENDS)
async def test_log_reaches_the_logging_callback(gateway: Vigil, backend: str) -> None:
    logs = Inbox()
    async with http_session(gateway.url, logging_callback=logs) as s:
        await wait_for_tools(s, ALL_TOOLS)
        token = f"log-{uuid.uuid4()}"
        await call_text(s, f"{backend}__log", {"level": "error", "message": token})
        [entry] = await logs.wait_for(lambda p: token in json.dumps(p.data), f"the log entry {token}")
        assert entry.level == "error"


@pytest.mark.parametrize("backend", BACKENDS)
async def test_subscribed_resource_update_reaches_the_client(gateway: Vigil, backend: str) -> None:
    inbox = Inbox()
    uri = f"demo://{backend}/counter"

    async with http_session(gateway.url, message_handler=inbox) as s:
        await wait_for_tools(s, ALL_TOOLS)
        await s.subscribe_resource(uri)
        await call_text(s, f"{backend}__bump")
        await inbox.wait_for(
            lambda m: isinstance(m, types.ResourceUpdatedNotification) and str(m.params.uri) == uri,
            f"notifications/resources/updated for {uri}",
        )
