"""The official Python SDK 1.x as a client of the clients × revisions matrix.

    python py1_driver.py URL REVISION | --supported     (with the python of setup.sh's 1.x venv)

Connects a `ClientSession` over streamable HTTP to URL, pinned to REVISION,
and answers commands on stdin (`driver_loop.py`; the protocol is described
in `ts_driver.cjs`). The 1.x SDK speaks the handshake era only
(2024-11-05 through 2025-11-25). It always offers its newest revision
(`mcp.types.LATEST_PROTOCOL_VERSION`) and has no option for another, so the
driver sets that constant to REVISION before `initialize`: the handshake
then offers REVISION, and the SDK adopts what the server answers (the
driver reports it).
"""

from __future__ import annotations

import importlib.metadata
import sys
from contextlib import AsyncExitStack
from typing import Any

import anyio
from driver_loop import Connection, State, emit, failed, serve
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.version import SUPPORTED_PROTOCOL_VERSIONS

#: Longer than any wait of the test (see py2_driver.py).
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
    from datetime import timedelta

    state = State()

    async def elicitation(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        state.elicitations.append(params.message)
        return types.ElicitResult(action="accept", content={"name": state.name})

    async def sampling(ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        state.samplings.append(prompt_of(params))
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=state.reply), model="matrix-model"
        )

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ServerNotification) and isinstance(
            message.root, types.ToolListChangedNotification
        ):
            state.changed()

    async with AsyncExitStack() as stack:
        try:
            if revision not in SUPPORTED_PROTOCOL_VERSIONS:
                raise ValueError(f"the 1.x SDK does not speak {revision} (it speaks {SUPPORTED_PROTOCOL_VERSIONS})")
            types.LATEST_PROTOCOL_VERSION = revision
            http = await stack.enter_async_context(create_mcp_http_client())
            http.event_hooks = {"response": [state.on_response]}
            read, write, _ = await stack.enter_async_context(streamable_http_client(url, http_client=http))
            session = await stack.enter_async_context(
                ClientSession(
                    read,
                    write,
                    read_timeout_seconds=timedelta(seconds=READ_TIMEOUT),
                    sampling_callback=sampling,
                    elicitation_callback=elicitation,
                    message_handler=on_message,
                )
            )
            initialized = await session.initialize()
            await state.standing_stream()
        except Exception as error:  # noqa: BLE001 - reported to the test
            failed(error)

        async def list_tools() -> list[str]:
            names: list[str] = []
            cursor: str | None = None
            for _ in range(100):
                page = await session.list_tools(cursor=cursor)
                names += [t.name for t in page.tools]
                cursor = page.nextCursor
                if not cursor:
                    return names
            raise RuntimeError("tools/list still paginating after 100 pages")

        async def call_tool(name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
            result = await session.call_tool(name, arguments)
            return text_of(result), bool(result.isError)

        sdk = f"mcp {importlib.metadata.version('mcp')}"
        await serve(Connection(sdk, str(initialized.protocolVersion), list_tools, call_tool), state, revision)


if __name__ == "__main__":
    if sys.argv[1:] == ["--supported"]:
        emit({"handshake": list(SUPPORTED_PROTOCOL_VERSIONS), "modern": []})
        sys.exit(0)
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} URL REVISION | --supported")
    anyio.run(main, sys.argv[1], sys.argv[2])
