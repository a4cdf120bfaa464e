"""A streamable HTTP MCP server whose tools depend on the caller's token.

Stands in for a backend that serves each user what their credentials allow
(the case of Vigil's `forward_auth`). Written with the official Python SDK's
low-level server:

    python per_user_server.py PORT STATE_DIR

- Every HTTP request without an `Authorization` header gets 401.
- `STATE_DIR/tools.json` maps a whole `Authorization` value to tool names,
  e.g. `{"Bearer alice": ["alpha"], "Bearer bob": ["beta"]}`. It is read on
  every `tools/list`, so a test changes a user's tools by rewriting it; the
  server sends no `list_changed` (a silent change).
- Each `tools/list` appends the caller's `Authorization` value as one line to
  `STATE_DIR/listings.log`, so a test can tell whose connection listed.
- Calling a tool returns "TOOL for AUTH"; a tool the caller's token does
  not have is an error result.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import mcp_types as types
import uvicorn
from mcp.server.lowlevel.server import Server
from starlette.responses import JSONResponse


def main() -> None:
    port = int(sys.argv[1])
    state = Path(sys.argv[2])

    def tools_of(auth: str) -> list[str]:
        table = json.loads((state / "tools.json").read_text())
        return list(table.get(auth, []))

    def auth_of(ctx) -> str:
        request = ctx.request
        return request.headers.get("authorization", "") if request is not None else ""

    async def list_tools(ctx, params) -> types.ListToolsResult:
        auth = auth_of(ctx)
        with (state / "listings.log").open("a") as log:
            log.write(auth + "\n")
        return types.ListToolsResult(
            tools=[
                types.Tool(name=name, description=f"{name} (per user)", input_schema={"type": "object"})
                for name in tools_of(auth)
            ]
        )

    async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        auth = auth_of(ctx)
        if params.name not in tools_of(auth):
            return types.CallToolResult(
                content=[types.TextContent(text=f"no tool {params.name} for this token")], is_error=True
            )
        return types.CallToolResult(content=[types.TextContent(text=f"{params.name} for {auth}")])

    server = Server("per-user", on_list_tools=list_tools, on_call_tool=call_tool)
    mcp_app = server.streamable_http_app(host="127.0.0.1")

    async def app(scope, receive, send):
        # Like a real per-user server: no credentials, no service.
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if b"authorization" not in headers:
                response = JSONResponse({"error": "missing credentials"}, status_code=401)
                await response(scope, receive, send)
                return
        await mcp_app(scope, receive, send)

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
