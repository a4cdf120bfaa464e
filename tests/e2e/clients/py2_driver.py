"""The official Python SDK 2.x as a client of the clients × revisions matrix.

    python py2_driver.py URL REVISION | --supported     (with the e2e venv's python)

Connects `mcp.Client` to URL over streamable HTTP, pinned to REVISION, and
answers commands on stdin (`driver_loop.py`; the protocol is described in
`ts_driver.cjs`):

- 2026-07-28: `Client(mode="2026-07-28")` (the SDK's own pin: no
  `initialize`, every request in the revision's envelope); change
  notifications through `client.listen(tools_list_changed=True)`;
- earlier revisions: `mode="legacy"` (the `initialize` handshake). The SDK
  always offers its newest handshake revision (`LATEST_HANDSHAKE_VERSION`)
  and has no option for another, so the driver sets that constant to
  REVISION before connecting: the handshake then offers REVISION, and the
  SDK adopts what the server answers (the driver reports it).
"""

from __future__ import annotations

import importlib.metadata
import sys
from contextlib import AsyncExitStack
from typing import Any

import anyio
import mcp.client.session
from driver_loop import Connection, State, emit, failed, serve
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

#: Longer than any wait of the test, so an unanswered request is the test's
#: failure, not an SDK timeout posing as the gateway's answer.
READ_TIMEOUT = 600.0


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def prompt_of(params: types.CreateMessageRequestParams) -> str:
    texts: list[str] = []
    for message in params.messages:
        blocks = message.content if isinstance(message.content, list) else [message.content]
        texts += [b.text for b in blocks if isinstance(b, types.TextContent)]
    return "".join(texts)


async def main(url: str, revision: str) -> None:
    state = State()

    async def elicitation(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        state.elicitations.append(params.message)
        return types.ElicitResult(action="accept", content={"name": state.name})

    async def sampling(ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        state.samplings.append(prompt_of(params))
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(text=state.reply), model="matrix-model"
        )

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            state.changed()

    modern = revision in MODERN_PROTOCOL_VERSIONS
    if not modern:
        mcp.client.session.LATEST_HANDSHAKE_VERSION = revision
    async with AsyncExitStack() as stack:
        try:
            http = await stack.enter_async_context(create_mcp_http_client())
            http.event_hooks = {"response": [state.on_response]}
            client = await stack.enter_async_context(
                Client(
                    streamable_http_client(url, http_client=http),
                    mode=revision if modern else "legacy",
                    read_timeout_seconds=READ_TIMEOUT,
                    elicitation_callback=elicitation,
                    sampling_callback=sampling,
                    message_handler=on_message,
                )
            )
            tasks = await stack.enter_async_context(anyio.create_task_group())
            if modern:
                subscription = await stack.enter_async_context(client.listen(tools_list_changed=True))

                async def count_events() -> None:
                    async for event in subscription:
                        if "ToolsListChanged" in type(event).__name__:
                            state.changed()

                tasks.start_soon(count_events)
            else:
                await state.standing_stream()
        except Exception as error:  # noqa: BLE001 - reported to the test
            failed(error)

        async def list_tools() -> list[str]:
            names: list[str] = []
            cursor: str | None = None
            for _ in range(100):
                page = await client.list_tools(cursor=cursor)
                names += [t.name for t in page.tools]
                cursor = page.next_cursor
                if not cursor:
                    return names
            raise RuntimeError("tools/list still paginating after 100 pages")

        async def call_tool(name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
            result = await client.call_tool(name, arguments)
            return text_of(result), bool(result.is_error)

        sdk = f"mcp {importlib.metadata.version('mcp')}"
        await serve(Connection(sdk, client.protocol_version, list_tools, call_tool), state, revision)
        tasks.cancel_scope.cancel()


if __name__ == "__main__":
    if sys.argv[1:] == ["--supported"]:
        emit({"handshake": list(HANDSHAKE_PROTOCOL_VERSIONS), "modern": list(MODERN_PROTOCOL_VERSIONS)})
        sys.exit(0)
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} URL REVISION | --supported")
    anyio.run(main, sys.argv[1], sys.argv[2])
