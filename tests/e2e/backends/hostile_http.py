"""A streamable HTTP MCP server that misbehaves on purpose, for Vigil's hardening tests.

Just enough of the transport by hand (JSON answers, a session id header), so
it can break the rules no SDK would let it break:

    python hostile_http.py PORT [--hang-list-after N] [--endless-pages]
                                [--endless-body] [--require-auth]
                                [--ping-status-file PATH]

- `initialize` gets a session (`Mcp-Session-Id`), notifications 202, `ping`
  an empty result, `tools/call` of `echo {text}` its text; GET has no
  standing stream (405), DELETE ends nothing (200).
- `--hang-list-after N`: answers the first N `tools/list` requests, then
  holds every later one open without an answer (0: never answers one).
- `--endless-pages`: every `tools/list` page holds 100 tools of about 1 KB
  and a `nextCursor`.
- `--endless-body`: a `ping` without a session id (a reachability probe)
  gets HTTP 200 and a body that never ends (zeros, as fast as the client
  reads).
- `--require-auth`: a request without `Authorization` gets 401.
- `--ping-status-file PATH`: while PATH exists, a `ping` on the session
  gets the HTTP status written in it (e.g. 429) and no JSON-RPC answer.

Every `tools/list` is counted on stderr (`tools/list #K`), and every request
with the `Authorization` it carried (`auth=...`), so a test can see whose
connection asked.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


def tool(name: str, description: str) -> dict:
    return {"name": name, "description": description, "inputSchema": {"type": "object"}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--hang-list-after", type=int, default=None)
    parser.add_argument("--endless-pages", action="store_true")
    parser.add_argument("--endless-body", action="store_true")
    parser.add_argument("--require-auth", action="store_true")
    parser.add_argument("--ping-status-file", default=None)
    args = parser.parse_args()
    state = {"listings": 0, "page": 0}

    async def zeros():
        chunk = b"\0" * 65536
        while True:
            yield chunk
            # Writes that do not block never yield to the event loop; without
            # this a client that hangs up leaves the server spinning.
            await asyncio.sleep(0)

    async def mcp(request: Request) -> Response:
        auth = request.headers.get("authorization")
        print(f"{request.method} auth={auth}", file=sys.stderr, flush=True)
        if args.require_auth and auth is None:
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        if request.method == "GET":
            return Response(status_code=405)
        if request.method == "DELETE":
            return Response(status_code=200)
        session = request.headers.get("mcp-session-id")
        try:
            msg = json.loads(await request.body())
        except ValueError:
            return JSONResponse({"error": "not json"}, status_code=400)
        method, mid = msg.get("method"), msg.get("id")
        if args.endless_body and session is None and method == "ping":
            return StreamingResponse(zeros(), media_type="application/json")
        if mid is None:
            return Response(status_code=202)

        def answer(result: dict, headers: dict | None = None) -> JSONResponse:
            return JSONResponse({"jsonrpc": "2.0", "id": mid, "result": result}, headers=headers)

        if method == "initialize":
            version = msg.get("params", {}).get("protocolVersion", "2025-06-18")
            result = {
                "protocolVersion": version,
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "hostile-http", "version": "0.1.0"},
            }
            return answer(result, {"mcp-session-id": "hostile-session"})
        if method == "ping":
            if args.ping_status_file and os.path.exists(args.ping_status_file):
                with open(args.ping_status_file) as f:
                    return Response(status_code=int(f.read().strip()))
            return answer({})
        if method == "tools/list":
            state["listings"] += 1
            print(f"tools/list #{state['listings']}", file=sys.stderr, flush=True)
            if args.hang_list_after is not None and state["listings"] > args.hang_list_after:
                await asyncio.Event().wait()
            if args.endless_pages:
                state["page"] += 1
                page = state["page"]
                tools = [tool(f"t{page}_{i}", "d" * 1000) for i in range(100)]
                return answer({"tools": tools, "nextCursor": str(page)})
            return answer({"tools": [tool("echo", "Echoes text")]})
        if method == "tools/call":
            text = str(msg.get("params", {}).get("arguments", {}).get("text", ""))
            return answer({"content": [{"type": "text", "text": text}]})
        return JSONResponse({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": f"no {method}"}})

    app = Starlette(routes=[Route("/mcp", mcp, methods=["GET", "POST", "DELETE"])])
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
