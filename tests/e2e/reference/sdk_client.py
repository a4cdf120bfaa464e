"""One official Python SDK client session, for the differential suite: what the SDK gives back, as JSON.

    PYTHON sdk_client.py PLAN    (PYTHON: the e2e venv's for SDK 2.x, clients/setup.sh's py1-venv's for 1.x)

PLAN is a JSON object:

- `"target"`: `{"stdio": [COMMAND, ARG...], "env": {...}}` (a server run
  directly, or `vigil stdio`) or `{"http": URL}` (streamable HTTP);
- `"wait_for"`: a tool name prefix (`"everything__"`): before the first
  operation, list until a tool so named is there, waiting for a
  `notifications/tools/list_changed` between two listings (the deadline
  bounds each wait; no polling); null for none;
- `"ops"`: `[["tools/list"], ["tools/call", NAME, ARGUMENTS], ...]`;
- `"mode"` (SDK 2.x only): absent for a `ClientSession` (the handshake), or
  the `mode` of an `mcp.Client` (`"2026-07-28"`: no `initialize`, the
  revision's envelope on every request);
- `"deadline"`: seconds for each wait.

The session has no callbacks: it declares no capabilities, on both SDK
majors. Prints one JSON object: `sdk` (`"mcp
1.30.0"`), `protocolVersion` (what `initialize` agreed) and `results`, one
per operation: the SDK's result object as
`model_dump(mode="json", by_alias=True, exclude_none=True)` (the SDK's
objects, not the wire: what the SDK keeps of what it read, in its models'
member order). Uses only what SDK 1.x and 2.x share.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
from contextlib import AsyncExitStack
from datetime import timedelta
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client, types
from mcp.client.streamable_http import streamable_http_client

MAJOR = int(importlib.metadata.version("mcp").split(".")[0])


def dump(result: Any) -> Any:
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


def is_tools_changed(message: Any) -> bool:
    inner = getattr(message, "root", message)  # 1.x wraps notifications in ServerNotification
    return isinstance(inner, types.ToolListChangedNotification)


async def main(plan: dict[str, Any]) -> None:
    deadline = float(plan.get("deadline", 30))
    changes = 0
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        nonlocal changes, changed
        if is_tools_changed(message):
            changes += 1
            changed.set()
            changed = anyio.Event()

    target = plan["target"]
    mode = plan.get("mode")
    timeout: Any = 2 * deadline if MAJOR >= 2 else timedelta(seconds=2 * deadline)
    async with AsyncExitStack() as stack:
        if "stdio" in target:
            command, *args = target["stdio"]
            params = StdioServerParameters(command=command, args=args, env=target.get("env") or None)
        if mode is not None:  # 2.x only: `mcp.Client` pinned to `mode` (2026-07-28: the envelope on every request)
            from mcp import Client

            # Entering it opens task groups: not bounded here, the test bounds the whole process.
            session: Any = await stack.enter_async_context(
                Client(
                    params if "stdio" in target else target["http"],
                    mode=mode,
                    read_timeout_seconds=timeout,
                    message_handler=on_message,
                )
            )
            agreed = str(session.protocol_version)
        else:
            if "stdio" in target:
                errlog = stack.enter_context(open(target["errlog"], "a", encoding="utf-8"))
                streams = await stack.enter_async_context(stdio_client(params, errlog=errlog))
            else:
                streams = await stack.enter_async_context(streamable_http_client(target["http"]))
            session = await stack.enter_async_context(
                ClientSession(streams[0], streams[1], read_timeout_seconds=timeout, message_handler=on_message)
            )
            with anyio.fail_after(deadline):
                initialized = await session.initialize()
            agreed = str(initialized.protocolVersion if MAJOR < 2 else initialized.protocol_version)

        prefix = plan.get("wait_for")
        for _ in range(20 if prefix else 0):
            seen = changes
            with anyio.fail_after(deadline):
                listed = await session.list_tools()
            if any(t.name.startswith(prefix) for t in listed.tools):
                break
            try:
                with anyio.fail_after(deadline):
                    while changes == seen:
                        await changed.wait()
            except TimeoutError:
                raise TimeoutError(f"no tools/list_changed within {deadline}s, and no tool named {prefix}*") from None
        else:
            if prefix:
                raise AssertionError(f"20 tools/list_changed and tools/list never showed a tool named {prefix}*")

        results = []
        for op in plan["ops"]:
            with anyio.fail_after(deadline):
                if op[0] == "tools/list":
                    page = await session.list_tools()
                    if dump(page).get("nextCursor"):
                        raise AssertionError("tools/list has more than one page: not compared here")
                    results.append(dump(page))
                elif op[0] == "tools/call":
                    results.append(dump(await session.call_tool(op[1], op[2])))
                else:
                    raise ValueError(f"unknown operation {op!r}")
        out = {
            "sdk": f"mcp {importlib.metadata.version('mcp')}",
            "protocolVersion": agreed,
            "results": results,
        }
        sys.stdout.write(json.dumps(out, ensure_ascii=False, separators=(",", ":")) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} PLAN_JSON")
    anyio.run(main, json.loads(sys.argv[1]))
