"""A backend's own tools/list_changed reaches clients and refreshes the catalog.

alpha runs over stdio with a tools file (notify = true); rewriting the file
makes the demo backend add or drop tools and send
`notifications/tools/list_changed`, which Vigil must turn into a fresh catalog
and a `list_changed` to every live session, without a reconnect.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from harness import DemoHttp, Vigil, demo_stdio_args, http_backend, stdio_backend
from support import (
    DEMO_TOOLS,
    Inbox,
    announced,
    call_text,
    http_session,
    is_tools_list_changed,
    prefixed,
    tool_names,
    wait_for_tools,
    write_tools_file,
)

pytestmark = pytest.mark.anyio

NEW_TOOL = {"name": "fresh_tool", "description": "added while the session was open"}


@pytest.fixture
def tools_file(tmp_path: Path) -> Path:
    path = tmp_path / "alpha-tools.json"
    write_tools_file(path, [], notify=True)
    return path


@pytest.fixture
def gateway(vigil: Callable[..., Vigil], demo_bin: Path, tools_file: Path) -> Vigil:
    return vigil([stdio_backend("alpha", demo_bin, demo_stdio_args("alpha", tools_file))])


async def test_added_tool_is_announced_and_callable(gateway: Vigil, tools_file: Path) -> None:
    inbox = Inbox()
    async with http_session(gateway.url, message_handler=inbox) as s:
        await wait_for_tools(s, prefixed("alpha", DEMO_TOOLS))
        assert "alpha__fresh_tool" not in await tool_names(s)
        seen = len(inbox.matching(is_tools_list_changed))

        write_tools_file(tools_file, [NEW_TOOL], notify=True)

        listed = await announced(s, inbox, seen, lambda t: "alpha__fresh_tool" in t, "with alpha__fresh_tool")
        assert prefixed("alpha", DEMO_TOOLS) <= listed
        assert await call_text(s, "alpha__fresh_tool", {"n": 1}) == 'fresh_tool: {"n":1}'


async def test_removed_tool_is_announced_and_gone(gateway: Vigil, tools_file: Path) -> None:
    write_tools_file(tools_file, [NEW_TOOL], notify=True)
    inbox = Inbox()
    async with http_session(gateway.url, message_handler=inbox) as s:
        await wait_for_tools(s, {"alpha__fresh_tool"})
        seen = len(inbox.matching(is_tools_list_changed))

        write_tools_file(tools_file, [], notify=True)

        listed = await announced(s, inbox, seen, lambda t: "alpha__fresh_tool" not in t, "without alpha__fresh_tool")
        assert prefixed("alpha", DEMO_TOOLS) <= listed
        assert await call_text(s, "alpha__whoami") == "alpha"


async def test_every_live_session_is_told(gateway: Vigil, tools_file: Path) -> None:
    inboxes = [Inbox(), Inbox()]
    async with (
        http_session(gateway.url, message_handler=inboxes[0]) as one,
        http_session(gateway.url, message_handler=inboxes[1]) as two,
    ):
        await wait_for_tools(one, prefixed("alpha", DEMO_TOOLS))
        await wait_for_tools(two, prefixed("alpha", DEMO_TOOLS))
        seen = [len(i.matching(is_tools_list_changed)) for i in inboxes]

        write_tools_file(tools_file, [NEW_TOOL], notify=True)

        for n, (session, inbox, before) in enumerate(zip((one, two), inboxes, seen, strict=True)):
            await announced(session, inbox, before, lambda t: "alpha__fresh_tool" in t, f"in session {n}")


async def test_http_backend_list_changed(
    vigil: Callable[..., Vigil], demo_http: Callable[..., DemoHttp], tools_file: Path
) -> None:
    """The same through an HTTP backend, whose notification arrives on its GET stream."""
    beta = demo_http("beta", tools_file=tools_file)
    gw = vigil([http_backend("beta", beta.url)])
    inbox = Inbox()
    async with http_session(gw.url, message_handler=inbox) as s:
        await wait_for_tools(s, prefixed("beta", DEMO_TOOLS))
        seen = len(inbox.matching(is_tools_list_changed))

        write_tools_file(tools_file, [NEW_TOOL], notify=True)

        await announced(s, inbox, seen, lambda t: "beta__fresh_tool" in t, "with beta__fresh_tool")
        assert await call_text(s, "beta__fresh_tool", {}) == "fresh_tool: {}"
