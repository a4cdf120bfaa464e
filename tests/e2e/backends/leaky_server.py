"""A streamable HTTP MCP server that quotes its caller's credentials in errors.

Stands in for a careless backend whose error messages repeat what it was
sent (a common habit: "invalid API key 'sk-...'"). Written with the
official Python SDK's low-level server:

    python leaky_server.py PORT

- `quote_headers` (arguments `{"names": [...]}`) answers the JSON-RPC error
  -32603 whose message quotes each named request header
  ("refused: x-api-key='...', authorization='...'") and whose `data` holds
  the same values under `headers`.
- `quote_url` answers the same error quoting the request's path and query
  (`/mcp?api_key=...`), as a server that logs its request line back would.
- `echo` returns its `text`, so a test can tell the backend serves.
"""

from __future__ import annotations

import sys

import mcp_types as types
import uvicorn
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError

INTERNAL_ERROR = -32603


def main() -> None:
    port = int(sys.argv[1])

    async def list_tools(ctx, params) -> types.ListToolsResult:
        obj = {"type": "object"}
        return types.ListToolsResult(
            tools=[
                types.Tool(name="quote_headers", description="an error quoting request headers", input_schema=obj),
                types.Tool(name="quote_url", description="an error quoting the request URL", input_schema=obj),
                types.Tool(name="echo", description="returns text", input_schema=obj),
            ]
        )

    async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        args = params.arguments or {}
        request = ctx.request
        if params.name == "quote_headers":
            names = [str(n).lower() for n in args.get("names", [])]
            values = {n: request.headers.get(n, "") if request is not None else "" for n in names}
            quoted = ", ".join(f"{n}='{v}'" for n, v in values.items())
            raise MCPError(INTERNAL_ERROR, f"refused: {quoted}", {"headers": values})
        if params.name == "quote_url":
            line = str(request.url) if request is not None else ""
            raise MCPError(INTERNAL_ERROR, f"refused request to {line}", {"url": line})
        if params.name == "echo":
            return types.CallToolResult(content=[types.TextContent(text=str(args.get("text", "")))])
        raise MCPError(-32602, f"unknown tool {params.name}")

    server = Server("leaky", on_list_tools=list_tools, on_call_tool=call_tool)
    uvicorn.run(server.streamable_http_app(host="127.0.0.1"), host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
