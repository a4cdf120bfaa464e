"""The modern-only backend of the clients × revisions matrix.

`backends/modern_only_server.py` (a server that speaks only protocol
revision 2026-07-28, behind its gate that refuses the handshake era), with
one more tool: `ask_llm(prompt)`, which asks the client's LLM the 2026-07-28
way (an input-required result holding a `sampling/createMessage`, answered by
the client's retry) and answers "llm said: <reply>", as the demo backend's
tool of the same name does. Same command line as that server:

    python modern_backend.py stdio LOG
    python modern_backend.py PORT LOG
"""

from __future__ import annotations

import sys
from pathlib import Path

import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends"))
import modern_only_server  # noqa: E402 - found through the path above

STATE = "asked-llm"

#: The server's own build; `build` below adds to what it builds.
base_build = modern_only_server.build


def build(log: Path) -> MCPServer:
    server = base_build(log)

    @server.tool()
    async def ask_llm(prompt: str, ctx: Context):  # noqa: ANN202 - a result or a question
        """Asks the client's LLM (MRTR sampling), then says what it answered."""
        answer = (ctx.input_responses or {}).get("sampling")
        if answer is None:
            question = types.CreateMessageRequest(
                params=types.CreateMessageRequestParams(
                    messages=[types.SamplingMessage(role="user", content=types.TextContent(text=prompt))],
                    max_tokens=64,
                )
            )
            return types.InputRequiredResult(input_requests={"sampling": question}, request_state=STATE)
        if ctx.request_state != STATE:
            return f"request state came back as {ctx.request_state!r}"
        if not isinstance(answer, types.CreateMessageResult) or not isinstance(answer.content, types.TextContent):
            return f"no reply: {answer!r}"
        return f"llm said: {answer.content.text}"

    return server


# The server's stdio and HTTP loops call `build` through their module's global.
modern_only_server.build = build

if __name__ == "__main__":
    modern_only_server.main()
