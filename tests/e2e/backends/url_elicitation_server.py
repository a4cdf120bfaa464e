"""A streamable HTTP MCP server (official Python SDK) whose tool first
needs the user at a URL (2025-11-25 `-32042`, URL elicitation required).

    python url_elicitation_server.py PORT

Tool `needs_login(user)`: a user's first call ends with error -32042 naming
one URL elicitation (`https://login.example/start`); their later calls
answer "logged in" (the user is taken to have been there).
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError

URL_ELICITATION_REQUIRED = -32042


def main() -> None:
    port = int(sys.argv[1])
    server = MCPServer("url-elicitation")
    seen: set[str] = set()

    @server.tool()
    def needs_login(user: str) -> str:
        """Needs the user at a login URL the first time."""
        if user not in seen:
            seen.add(user)
            elicitation = {
                "mode": "url",
                "message": "sign in first",
                "url": "https://login.example/start",
                "elicitationId": "login-1",
            }
            raise MCPError(
                code=URL_ELICITATION_REQUIRED,
                message="sign in at the URL, then call again",
                data={"elicitations": [elicitation]},
            )
        return "logged in"

    server.run("streamable-http", host="127.0.0.1", port=port)


if __name__ == "__main__":
    main()
