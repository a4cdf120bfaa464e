"""The command loop shared by the Python SDK drivers of the clients × revisions matrix.

`py1_driver.py` (official Python SDK 1.x, run in its own venv) and
`py2_driver.py` (2.x, the e2e venv) connect their client and hand `serve` a
`Connection`; `serve` speaks the protocol described in `ts_driver.cjs` (one
JSON object per line on stdin/stdout: a `ready` line, then one answer per
command). Only the standard library and anyio, which both SDK majors depend
on, are used here.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

#: Bounds the driver's own wait for the standing stream (the tests' deadline).
DEADLINE = float(os.environ.get("VIGIL_E2E_DEADLINE", "30"))


@dataclass
class State:
    """What the client's callbacks answer, and what they and the notifications saw."""

    name: str = "nobody"
    reply: str = "nothing"
    changes: int = 0
    elicitations: list[str] = field(default_factory=list)
    samplings: list[str] = field(default_factory=list)
    _changed: anyio.Event = field(default_factory=anyio.Event)
    #: Set when the server answered a GET (the session's standing stream) with 200.
    stream_open: anyio.Event = field(default_factory=anyio.Event)

    async def on_response(self, response: Any) -> None:
        """An httpx response hook: notes the standing stream being answered."""
        if response.request.method == "GET" and response.status_code == 200:
            self.stream_open.set()

    async def standing_stream(self) -> None:
        """Until the server answered the session's GET stream.

        `ready` waits for it: a notification the server sends before the
        stream is open would be lost, and the test would wait for it in vain.
        """
        try:
            with anyio.fail_after(DEADLINE):
                await self.stream_open.wait()
        except TimeoutError:
            raise TimeoutError(f"the session's GET stream was not answered with 200 within {DEADLINE}s") from None

    def changed(self) -> None:
        """One more `tools/list_changed` arrived."""
        self.changes += 1
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_changes(self, count: int, timeout: float) -> int:
        try:
            with anyio.fail_after(timeout):
                while self.changes < count:
                    await self._changed.wait()
        except TimeoutError:
            raise TimeoutError(
                f"timed out after {timeout}s waiting for {count} tools/list_changed (got {self.changes})"
            ) from None
        return self.changes


@dataclass
class Connection:
    sdk: str
    protocol_version: str | None
    list_tools: Callable[[], Awaitable[list[str]]]
    #: (name, arguments) -> (text, is_error)
    call_tool: Callable[[str, dict[str, Any]], Awaitable[tuple[str, bool]]]


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def describe(error: BaseException) -> str:
    # An exception group of one (anyio's task groups wrap what they raise).
    while len(getattr(error, "exceptions", ())) == 1:
        error = error.exceptions[0]  # type: ignore[attr-defined]
    return f"{type(error).__name__}: {error}"


async def run(conn: Connection, state: State, command: dict[str, Any]) -> dict[str, Any]:
    op = command.get("op")
    if op == "list":
        return {"tools": await conn.list_tools()}
    if op == "call":
        text, is_error = await conn.call_tool(command["name"], command.get("arguments") or {})
        return {"text": text, "isError": is_error}
    if op == "answers":
        state.name, state.reply = command["name"], command["reply"]
        return {}
    if op == "wait_changes":
        return {"count": await state.wait_changes(int(command["count"]), float(command["timeout"]))}
    if op == "asked":
        return {"elicitations": state.elicitations, "samplings": state.samplings}
    if op == "close":
        return {}
    raise ValueError(f"unknown op {op!r}")


async def serve(conn: Connection, state: State, version: str) -> None:
    """Print `ready`, then answer commands from stdin until `close` or its end."""
    emit({"event": "ready", "sdk": conn.sdk, "version": version, "protocolVersion": conn.protocol_version})
    stdin = anyio.wrap_file(sys.stdin)
    while True:
        line = await stdin.readline()
        if not line:
            return
        if not line.strip():
            continue
        command = json.loads(line)
        try:
            answer = await run(conn, state, command)
        except Exception as error:  # noqa: BLE001 - reported to the test
            traceback.print_exc(file=sys.stderr)
            emit({"id": command.get("id"), "error": describe(error)})
        else:
            emit({"id": command.get("id"), **answer})
        if command.get("op") == "close":
            return


def failed(error: BaseException) -> None:
    """Report a failed connection (or a driver crash) and exit 1."""
    traceback.print_exception(error, file=sys.stderr)
    emit({"event": "failed", "error": describe(error)})
    sys.exit(1)
