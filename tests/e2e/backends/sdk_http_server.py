"""A streamable HTTP MCP server written with the official Python SDK.

A second implementation next to the demo backend (rmcp), so Vigil is tested
against what users run: `python sdk_http_server.py PORT [--json]` serves
`/mcp` on 127.0.0.1:PORT with three tools: `echo`; `reading`, whose
structured result has members out of alphabetical order and fractional
numbers (what a relay must not rewrite); `ask_name`, which asks the client
for a name during the call (an `elicitation/create` request on a session)
and greets it. `--json` answers requests with plain JSON bodies instead of
SSE streams.

Like every Python SDK 2.x server it lists only 2026-07-28 in
`server/discover` yet takes `initialize`.
"""

from __future__ import annotations

import sys

from pydantic import BaseModel

from mcp.server.mcpserver import Context, MCPServer


class Name(BaseModel):
    name: str


def main() -> None:
    port = int(sys.argv[1])
    json_response = "--json" in sys.argv[2:]
    server = MCPServer("sdk-http")

    @server.tool()
    def echo(text: str) -> str:
        """Returns its argument."""
        return text

    @server.tool()
    def reading(station: str) -> dict[str, object]:
        """A weather station's last reading."""
        return {"station": station, "temperature": 21.75, "humidity": 0.7, "conditions": "clear", "at": 1}

    @server.tool()
    async def ask_name(ctx: Context) -> str:
        """Asks the client for a name and greets it."""
        answer = await ctx.elicit("your name?", Name)
        return f"hello {answer.data.name}" if answer.action == "accept" else answer.action

    server.run("streamable-http", host="127.0.0.1", port=port, json_response=json_response)


if __name__ == "__main__":
    main()
