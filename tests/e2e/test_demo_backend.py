"""The demo backend on its own, without the gateway, over stdio and HTTP.

The gateway tests rely on what these check, so a failure here points at the
demo backend (or the harness) rather than at Vigil.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, types

from harness import DemoHttp, Procs, demo_stdio_args
from support import (
    DEMO_TOOLS,
    Inbox,
    call_text,
    http_session,
    is_tools_list_changed,
    list_all,
    stdio_session,
    text_of,
    tool_names,
    wait_for_tools,
    write_tools_file,
)

pytestmark = pytest.mark.anyio

Connect = Callable[..., AbstractAsyncContextManager[ClientSession]]


@pytest.fixture(params=["stdio", "http"])
def connect(
    request: pytest.FixtureRequest,
    procs: Procs,
    demo_bin: Path,
    demo_http: Callable[..., DemoHttp],
    tmp_path: Path,
) -> Connect:
    """`connect(name, tools_file=None, **callbacks)`: a session straight to a demo backend."""
    transport = request.param

    def open_session(name: str, tools_file: Path | None = None, **callbacks: Any) -> AbstractAsyncContextManager:
        if transport == "stdio":
            return stdio_session(
                demo_bin, demo_stdio_args(name, tools_file), tmp_path / f"{name}.stdio.log", **callbacks
            )
        backend = demo_http(name, tools_file=tools_file)
        return http_session(backend.url, **callbacks)

    return open_session


async def test_lists_builtin_tools_resources_and_prompts(connect: Connect) -> None:
    async with connect("gamma") as s:
        assert DEMO_TOOLS <= await tool_names(s)
        uris = {str(r.uri) for r in await list_all(s, "resources")}
        assert {"demo://gamma/readme", "demo://gamma/counter"} <= uris
        templates = {t.uri_template for t in await list_all(s, "resource_templates")}
        assert "demo://gamma/item/{id}" in templates
        assert "greet" in {p.name for p in await list_all(s, "prompts")}


async def test_builtin_tools_answer(connect: Connect) -> None:
    async with connect("gamma") as s:
        token = f"echo-{uuid.uuid4()}"
        assert await call_text(s, "echo", {"text": token}) == token
        assert await call_text(s, "add", {"a": 2, "b": 3}) == "5"
        assert await call_text(s, "whoami") == "gamma"
        assert await call_text(s, "slow", {"ms": 10}) == "slept 10"
        with anyio.fail_after(30):
            failed = await s.call_tool("fail", {"message": "on purpose"})
        assert failed.is_error
        assert "on purpose" in text_of(failed)


async def test_resources_prompts_and_completion(connect: Connect) -> None:
    async with connect("gamma") as s:
        readme = await s.read_resource("demo://gamma/readme")
        assert text_of(readme) == "Hello from gamma"
        item = await s.read_resource("demo://gamma/item/42")
        assert text_of(item) == "item 42 from gamma"
        prompt = await s.get_prompt("greet", {"name": "Ada"})
        assert "Hello, Ada! (from gamma)" in text_of(prompt)
        done = await s.complete(types.PromptReference(name="greet"), {"name": "name", "value": "al"})
        assert done.completion.values == ["alice", "albert"]


async def test_tools_file_adds_tools_and_notifies(connect: Connect, tmp_path: Path) -> None:
    tools_file = tmp_path / "tools.json"
    write_tools_file(tools_file, [])
    inbox = Inbox()
    async with connect("gamma", tools_file, message_handler=inbox) as s:
        assert "fresh" not in await tool_names(s)
        write_tools_file(tools_file, [{"name": "fresh", "description": "added by the test"}])
        await inbox.wait_for(is_tools_list_changed, "notifications/tools/list_changed")
        listed = await wait_for_tools(s, {"fresh"})
        assert DEMO_TOOLS <= listed
        assert await call_text(s, "fresh", {"x": 1}) == 'fresh: {"x":1}'


async def test_server_to_client_requests(connect: Connect) -> None:
    reply = f"reply-{uuid.uuid4()}"
    user = f"user-{uuid.uuid4()}"
    root = f"file:///srv/project-{uuid.uuid4()}"
    prompts: list[str] = []

    async def sampling(ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        prompts.extend(m.content.text for m in params.messages if isinstance(m.content, types.TextContent))
        return types.CreateMessageResult(role="assistant", content=types.TextContent(text=reply), model="e2e")

    async def elicitation(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"name": user})

    async def roots(ctx: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=root, name="project")])

    async with connect(
        "gamma", sampling_callback=sampling, elicitation_callback=elicitation, list_roots_callback=roots
    ) as s:
        assert await call_text(s, "ask_llm", {"prompt": "what is up"}) == f"llm said: {reply}"
        assert any("what is up" in p for p in prompts), prompts
        said = await call_text(s, "ask_user", {"message": "who are you?"})
        assert said.startswith("user accept: ")
        assert json.loads(said.removeprefix("user accept: ")) == {"name": user}
        assert json.loads(await call_text(s, "list_roots")) == [root]


async def test_progress_and_logging(connect: Connect) -> None:
    logs = Inbox()
    progress = Inbox()

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.put(done)

    async with connect("gamma", logging_callback=logs) as s:
        assert await call_text(s, "progress", {"steps": 3}, progress_callback=on_progress) == "done 3"
        assert progress.items == [1, 2, 3], "progress must arrive in order, before the result"
        token = f"log-{uuid.uuid4()}"
        await call_text(s, "log", {"level": "warning", "message": token})
        [entry] = await logs.wait_for(lambda p: token in json.dumps(p.data), f"a log entry with {token}")
        assert entry.level == "warning"
