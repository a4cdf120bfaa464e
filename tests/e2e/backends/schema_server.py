"""A streamable HTTP MCP server whose one tool's schema depends on its version.

Stands in for a backend redeployed with a changed tool: written with the
official Python SDK's low-level server,

    python schema_server.py PORT v1|v2

serves `greet`, which takes `{"name"}` in v1 and `{"first", "last"}` in v2.
Arguments that do not fit the running version's schema get the JSON-RPC
error -32602 (invalid params), as a validating server answers them.
"""

from __future__ import annotations

import sys

import mcp_types as types
import uvicorn
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError

SCHEMAS = {
    "v1": ["name"],
    "v2": ["first", "last"],
}


def main() -> None:
    port, version = int(sys.argv[1]), sys.argv[2]
    fields = SCHEMAS[version]
    schema = {
        "type": "object",
        "properties": {f: {"type": "string"} for f in fields},
        "required": fields,
    }

    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[types.Tool(name="greet", description=f"greet ({version})", input_schema=schema)]
        )

    async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        args = params.arguments or {}
        if params.name != "greet":
            raise MCPError(-32602, f"unknown tool {params.name}")
        missing = [f for f in fields if not isinstance(args.get(f), str)]
        if missing or set(args) - set(fields):
            raise MCPError(-32602, f"invalid arguments for greet: expected {fields}, got {sorted(args)}")
        return types.CallToolResult(content=[types.TextContent(text="hello " + " ".join(args[f] for f in fields))])

    server = Server("schema", on_list_tools=list_tools, on_call_tool=call_tool)
    uvicorn.run(server.streamable_http_app(host="127.0.0.1"), host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
