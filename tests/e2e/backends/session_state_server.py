"""A streamable HTTP MCP server that keeps state per MCP session.

`python session_state_server.py PORT` serves `/mcp` on 127.0.0.1:PORT with
three tools: `remember(text)` keeps `text` for the calling session,
`recall()` returns what this session was told (empty when nothing), and
`make_note(name, text)` makes a resource `note://NAME` for the calling
session alone: listed (after a `notifications/resources/list_changed` sent
on that session) and readable by that session only, like server-everything's
`gzip-file-as-resource` (whose streamable HTTP server registers it on the
most recently opened session instead). What one session keeps no other
session sees: the shape of a server with per-session state (roots, log
level, toggles, session resources). Vigil is pinned to the handshake era for
it (`protocol = "2025-11-25"`) where a test needs a handshake-era backend
session for 2026-07-28 clients.
"""

from __future__ import annotations

import sys
from typing import Any

from mcp import types
from mcp.server.mcpserver import Context, MCPServer


def session_of(ctx: Context) -> str:
    return (ctx.headers or {}).get("mcp-session-id", "")


class SessionNotes(MCPServer):
    """Lists and reads each session's notes beside the server's own resources."""

    def __init__(self) -> None:
        super().__init__("session-state")
        self.notes: dict[str, dict[str, str]] = {}

    def _notes_of(self, request_context: Any) -> dict[str, str]:
        return self.notes.get(session_of(Context(request_context=request_context, mcp_server=self)), {})

    async def _handle_list_resources(self, ctx: Any, params: Any) -> types.ListResourcesResult:
        listed = await super()._handle_list_resources(ctx, params)
        mine = [
            types.Resource(uri=f"note://{name}", name=name, mime_type="text/plain") for name in self._notes_of(ctx)
        ]
        return types.ListResourcesResult(resources=[*listed.resources, *mine])

    async def _handle_read_resource(self, ctx: Any, params: types.ReadResourceRequestParams) -> Any:
        uri = str(params.uri)
        notes = self._notes_of(ctx)
        if uri.startswith("note://") and uri.removeprefix("note://") in notes:
            text = notes[uri.removeprefix("note://")]
            return types.ReadResourceResult(
                contents=[types.TextResourceContents(uri=uri, text=text, mime_type="text/plain")]
            )
        return await super()._handle_read_resource(ctx, params)


def main() -> None:
    port = int(sys.argv[1])
    server = SessionNotes()
    memory: dict[str, list[str]] = {}

    @server.tool()
    def remember(text: str, ctx: Context) -> str:
        """Keeps `text` for this session."""
        memory.setdefault(session_of(ctx), []).append(text)
        return "kept"

    @server.tool()
    def recall(ctx: Context) -> str:
        """What this session was told, one item a line."""
        return "\n".join(memory.get(session_of(ctx), []))

    @server.tool()
    async def make_note(name: str, text: str, ctx: Context) -> list[types.ResourceLink]:
        """Makes the resource note://NAME for this session alone, and links to it."""
        server.notes.setdefault(session_of(ctx), {})[name] = text
        await ctx.session.send_resource_list_changed()
        return [types.ResourceLink(type="resource_link", uri=f"note://{name}", name=name, mime_type="text/plain")]

    @server.resource("static://readme", mime_type="text/plain")
    def readme() -> str:
        """A resource every session lists."""
        return "hello"

    server.run("streamable-http", host="127.0.0.1", port=port)


if __name__ == "__main__":
    main()
