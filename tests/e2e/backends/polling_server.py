"""A streamable HTTP MCP server (official Python SDK) that closes a call's
SSE stream before answering it (SEP-1699 polling), telling its client to
come back after RETRY_MS.

    python polling_server.py PORT RETRY_MS

Tool `later(ms)`: closes the stream of its own request, waits `ms`, then
answers "done"; the answer reaches a client that resumes the stream with
`Last-Event-ID` (events are kept in memory for replay).
"""

from __future__ import annotations

import itertools
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp.types import JSONRPCMessage


class MemoryEvents(EventStore):
    """Every event of every stream, for replay after a resumption."""

    def __init__(self) -> None:
        self.events: list[tuple[EventId, StreamId, JSONRPCMessage | None]] = []
        self.ids = itertools.count(1)

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        event_id = str(next(self.ids))
        self.events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        stream = next((s for e, s, _ in self.events if e == last_event_id), None)
        if stream is None:
            return None
        after = False
        for event_id, stream_id, message in self.events:
            if after and stream_id == stream and message is not None:
                await send_callback(EventMessage(message, event_id))
            after = after or event_id == last_event_id
        return stream


def main() -> None:
    port, retry_ms = int(sys.argv[1]), int(sys.argv[2])
    server = MCPServer("polling")

    @server.tool()
    async def later(ms: int, ctx: Context) -> str:
        """Closes this request's stream, waits `ms`, answers "done"."""
        await ctx.close_sse_stream()
        await anyio.sleep(ms / 1000)
        return "done"

    server.run(
        "streamable-http",
        host="127.0.0.1",
        port=port,
        event_store=MemoryEvents(),
        retry_interval=retry_ms,
    )


if __name__ == "__main__":
    main()
