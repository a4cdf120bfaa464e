"""A streamable HTTP MCP server written with the official Python SDK.

A second implementation next to the demo backend (rmcp), so Vigil is tested
against what users run: `python sdk_http_server.py PORT [--json]` serves
`/mcp` on 127.0.0.1:PORT with one tool, `echo`. `--json` answers requests
with plain JSON bodies instead of SSE streams.
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer


def main() -> None:
    port = int(sys.argv[1])
    json_response = "--json" in sys.argv[2:]
    server = MCPServer("sdk-http")

    @server.tool()
    def echo(text: str) -> str:
        """Returns its argument."""
        return text

    server.run("streamable-http", host="127.0.0.1", port=port, json_response=json_response)


if __name__ == "__main__":
    main()
