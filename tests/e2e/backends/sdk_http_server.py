"""A streamable HTTP MCP server written with the official Python SDK.

A second implementation next to the demo backend (rmcp), so Vigil is tested
against what users run: `python sdk_http_server.py PORT [--json]` serves
`/mcp` on 127.0.0.1:PORT with two tools: `echo`, and `reading`, whose
structured result has members out of alphabetical order and fractional
numbers (what a relay must not rewrite). `--json` answers requests with
plain JSON bodies instead of SSE streams.
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

    @server.tool()
    def reading(station: str) -> dict[str, object]:
        """A weather station's last reading."""
        return {"station": station, "temperature": 21.75, "humidity": 0.7, "conditions": "clear", "at": 1}

    server.run("streamable-http", host="127.0.0.1", port=port, json_response=json_response)


if __name__ == "__main__":
    main()
