"""A streamable HTTP MCP server that keeps state per MCP session.

`python session_state_server.py PORT` serves `/mcp` on 127.0.0.1:PORT with
two tools: `remember(text)` keeps `text` for the calling session, `recall()`
returns what this session was told (empty when nothing). What one session
remembers no other session recalls: the shape of a server with per-session
state (roots, log level, toggles, session resources). Vigil is pinned to the
handshake era for it (`protocol = "2025-11-25"`), so a 2026-07-28 client of
Vigil is served over a handshake-era backend session.
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import Context, MCPServer


def main() -> None:
    port = int(sys.argv[1])
    server = MCPServer("session-state")
    memory: dict[str, list[str]] = {}

    def session_of(ctx: Context) -> str:
        return (ctx.headers or {}).get("mcp-session-id", "")

    @server.tool()
    def remember(text: str, ctx: Context) -> str:
        """Keeps `text` for this session."""
        memory.setdefault(session_of(ctx), []).append(text)
        return "kept"

    @server.tool()
    def recall(ctx: Context) -> str:
        """What this session was told, one item a line."""
        return "\n".join(memory.get(session_of(ctx), []))

    server.run("streamable-http", host="127.0.0.1", port=port)


if __name__ == "__main__":
    main()
