"""An MCP server that speaks only protocol revision 2026-07-28.

Written with the official Python SDK (2.x), which serves both eras and picks
one from each request; a thin gate in front of it refuses everything of the
handshake era, as a server built for 2026-07-28 alone does: `initialize`,
`ping` and `logging/setLevel` (removed in that revision) and any request
without the revision's `_meta` envelope get a JSON-RPC error (HTTP 400 over
HTTP), GET and DELETE get 405.

    python modern_only_server.py stdio LOG
    python modern_only_server.py PORT LOG     (streamable HTTP on 127.0.0.1:PORT/mcp)

Every request's method is appended to LOG (one per line), so a test can tell
what Vigil sent; over HTTP its `Mcp-*` headers go to LOG.headers (a JSON
line per request). Tools: `echo(text)`; `add_tool(name)`, which adds a tool
and announces it on `subscriptions/listen` streams; `ask_name()`, which asks
the client for a name the 2026-07-28 way (an input-required result with an
elicitation, answered by the client's retry) and greets it; `chatty(tag)`,
which logs `tag` once at debug and once at info level (sent only to a request
that asked for logs in its `_meta`, at the level it asked for); `touch()`,
which announces an update of its resource `note://pad` to the listen streams
that name it; `regional(region)`, whose argument a 2026-07-28 client mirrors
in an `Mcp-Param-Region` header; `capabilities()`, the client capabilities
its request declared (JSON); `hold(tag)`, which logs `before TAG` at info level, waits until
`release()` is called, then logs `after TAG` (so a test can have calls of
two callers running at once). Prompt: `greet(name)`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import anyio
import mcp_types as types
from pydantic import Field
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

REMOVED = {"initialize", "ping", "logging/setLevel"}
ENVELOPE = "io.modelcontextprotocol/protocolVersion"


def refusal(method: str, params: Any) -> str | None:
    """Why the gate refuses a request, or None to let it through."""
    if method in REMOVED:
        return f"{method} is not part of protocol revision 2026-07-28, the only one this server speaks"
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict) or meta.get(ENVELOPE) != "2026-07-28":
        return "this server speaks only 2026-07-28: every request needs its _meta envelope"
    return None


def build(log: Path) -> MCPServer:
    server = MCPServer("modern-only")

    @server.tool()
    def echo(text: str) -> str:
        """Returns its argument."""
        return text

    @server.prompt()
    def greet(name: str) -> str:
        """A greeting for `name`."""
        return f"Hello, {name}!"

    @server.tool()
    async def add_tool(name: str, ctx: Context) -> str:
        """Adds a tool called `name` and announces the change."""

        def added() -> str:
            return name

        server.add_tool(added, name=name, description="added at run time")
        await ctx.notify_tools_changed()
        return f"added {name}"

    @server.resource("note://pad")
    def pad() -> str:
        """A note whose updates `touch` announces."""
        return "pad"

    @server.tool()
    async def touch(ctx: Context) -> str:
        """Announces an update of `note://pad`."""
        await ctx.notify_resource_updated("note://pad")
        return "touched"

    @server.tool()
    def capabilities(ctx: Context) -> str:
        """The client capabilities this request declared, as JSON."""
        caps = ctx.client_capabilities
        return json.dumps(caps.model_dump(by_alias=True, exclude_none=True) if caps else None, sort_keys=True)

    @server.tool()
    def regional(region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]) -> str:
        """Returns its argument, which 2026-07-28 clients mirror in an `Mcp-Param-Region` header."""
        return region

    @server.tool()
    async def chatty(tag: str, ctx: Context) -> str:
        """Logs `tag` at debug and at info level, then returns it."""
        await ctx.debug(f"debug {tag}")
        await ctx.info(f"info {tag}")
        return tag

    released = anyio.Event()

    @server.tool()
    async def hold(tag: str, ctx: Context) -> str:
        """Logs `before TAG`, waits for `release`, logs `after TAG`."""
        nonlocal released
        await ctx.info(f"before {tag}")
        await released.wait()
        released = anyio.Event()
        await ctx.info(f"after {tag}")
        return tag

    @server.tool()
    def release() -> str:
        """Lets the call waiting in `hold` go on."""
        released.set()
        return "released"

    @server.tool()
    async def ask_name(ctx: Context):  # noqa: ANN202 - a result or a question
        """Asks the client for a name (MRTR), then greets it."""
        answer = (ctx.input_responses or {}).get("name")
        if answer is None:
            question = types.ElicitRequest(
                params=types.ElicitRequestFormParams(
                    message="your name?",
                    requested_schema={"type": "object", "properties": {"name": {"type": "string"}}},
                )
            )
            return types.InputRequiredResult(input_requests={"name": question}, request_state="asked-name")
        if ctx.request_state != "asked-name":
            return f"request state came back as {ctx.request_state!r}"
        if not isinstance(answer, types.ElicitResult) or answer.action != "accept" or not answer.content:
            return f"no name: {answer!r}"
        return f"hello {answer.content.get('name')}"

    return server


def record(log: Path, method: str) -> None:
    with log.open("a") as f:
        f.write(method + "\n")


def record_headers(log: Path, method: str, headers: list[tuple[bytes, bytes]]) -> None:
    """HTTP: the MCP headers of each request (`Mcp-*`, `MCP-Protocol-Version`),
    one JSON line per request in LOG.headers."""
    mcp = {k.decode().lower(): v.decode() for k, v in headers if k.lower().startswith(b"mcp-")}
    with log.with_suffix(log.suffix + ".headers").open("a") as f:
        f.write(json.dumps({"method": method, "headers": mcp}) + "\n")


async def serve_stdio(log: Path) -> None:
    server = build(log)
    low = server._lowlevel_server  # the SDK's own stdio loop, fed through the gate
    async with stdio_server() as (read, write):
        inner_send, inner_read = anyio.create_memory_object_stream[SessionMessage | Exception](64)

        async def gate() -> None:
            async with inner_send:
                async for item in read:
                    msg = getattr(item, "message", None)
                    if isinstance(msg, types.JSONRPCRequest):
                        record(log, msg.method)
                        why = refusal(msg.method, msg.params)
                        if why is not None:
                            error = types.JSONRPCError(
                                jsonrpc="2.0", id=msg.id, error=types.ErrorData(code=-32601, message=why)
                            )
                            await write.send(SessionMessage(message=error))
                            continue
                    await inner_send.send(item)

        async with anyio.create_task_group() as tg:
            tg.start_soon(gate)
            await low.run(inner_read, write, low.create_initialization_options())
            tg.cancel_scope.cancel()


def serve_http(port: int, log: Path) -> None:
    import uvicorn

    app = build(log).streamable_http_app(stateless_http=True)

    async def gated(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        if scope["method"] in ("GET", "DELETE"):
            await respond(send, 405, {"error": "this server has no session streams (2026-07-28)"})
            return
        body = b""
        more = True
        while more:
            event = await receive()
            body += event.get("body", b"")
            more = event.get("more_body", False)
        try:
            message = json.loads(body)
        except ValueError:
            message = None
        if isinstance(message, dict) and "method" in message:
            record(log, message["method"])
            record_headers(log, message["method"], scope["headers"])
            why = refusal(message["method"], message.get("params"))
            if why is not None and "id" in message:
                error = {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": why}}
                await respond(send, 400, error)
                return
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await app(scope, replay, send)

    uvicorn.run(gated, host="127.0.0.1", port=port, log_level="warning", lifespan="on")


async def respond(send: Any, status: int, payload: dict[str, Any]) -> None:
    data = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} stdio LOG | PORT LOG")
    if sys.argv[1] == "stdio":
        anyio.run(serve_stdio, Path(sys.argv[2]))
    else:
        serve_http(int(sys.argv[1]), Path(sys.argv[2]))


if __name__ == "__main__":
    main()
