#!/usr/bin/env python3
"""Smoke test of vigil-demo-backend with the official Python MCP SDK.

Runs the same checks over stdio and streamable HTTP, each with a
handshake-era client (initialize, 2025-11-25) and a modern one
(server/discover, 2026-07-28), then a few raw stdio checks (stdout carries
only JSON-RPC, `crash` exits with its code).

Run with:

    cargo build -p vigil-demo-backend
    pip install mcp
    python examples/demo-backend/smoke.py [--bin PATH/TO/vigil-demo-backend]

Without --bin the binary is looked up in $CARGO_TARGET_DIR/debug, then in
the workspace's target/debug.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

warnings.filterwarnings("ignore")

NAME = "smoke"
BUILTIN = {
    "echo", "add", "whoami", "slow", "hang", "crash", "ask_llm", "ask_user",
    "list_roots", "progress", "log", "bump", "fail",
}


def find_binary(explicit: str | None) -> str:
    if explicit:
        return explicit
    candidates = []
    if os.environ.get("CARGO_TARGET_DIR"):
        candidates.append(Path(os.environ["CARGO_TARGET_DIR"]) / "debug" / "vigil-demo-backend")
    candidates.append(Path(__file__).resolve().parents[2] / "target" / "debug" / "vigil-demo-backend")
    for candidate in candidates:
        if candidate.exists():
            return str(candidate)
    sys.exit("vigil-demo-backend not found; build it or pass --bin")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def text_of(result: Any) -> str:
    return "".join(block.text for block in result.content if getattr(block, "text", None) is not None)


def method_of(message: Any) -> str | None:
    message = getattr(message, "root", message)
    return getattr(message, "method", None)


class Recorder:
    """The client-side callbacks, recording what the server sent."""

    def __init__(self) -> None:
        self.logs: list[types.LoggingMessageNotificationParams] = []
        self.notifications: list[Any] = []
        self.elicit_action = "accept"

    async def sampling(self, context, params):
        prompt = params.messages[0].content.text
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=f"echo of {prompt}"),
            model="smoke-model",
        )

    async def elicitation(self, context, params):
        assert "name" in params.requested_schema["properties"], params.requested_schema
        if self.elicit_action == "accept":
            return types.ElicitResult(action="accept", content={"name": "Ann"})
        return types.ElicitResult(action=self.elicit_action)

    async def roots(self, context):
        return types.ListRootsResult(roots=[types.Root(uri="file:///tmp/a"), types.Root(uri="file:///tmp/b")])

    async def logging(self, params):
        self.logs.append(params)

    async def message(self, message):
        if not isinstance(message, Exception):
            self.notifications.append(message)

    def methods(self) -> list[str | None]:
        return [method_of(message) for message in self.notifications]

    async def wait_for(self, method: str, timeout: float = 5.0) -> None:
        with anyio.fail_after(timeout):
            while method not in self.methods():
                await anyio.sleep(0.02)


def check(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


async def run_checks(server: Any, mode: str, tools_file: Path, label: str) -> None:
    rec = Recorder()
    modern = mode != "legacy"
    async with Client(
        server,
        mode=mode,
        sampling_callback=rec.sampling,
        elicitation_callback=rec.elicitation,
        list_roots_callback=rec.roots,
        logging_callback=rec.logging,
        message_handler=rec.message,
        log_level="debug" if modern else None,
        read_timeout_seconds=10,
        cache=None,
    ) as client:
        version = client.protocol_version
        check((version == "2026-07-28") == modern, f"negotiated {version}")
        if client.server_info is not None:
            check(client.server_info.name == NAME, f"serverInfo.name {client.server_info.name}")
        caps = client.server_capabilities
        check(caps.tools is not None and caps.tools.list_changed, "tools.listChanged advertised")
        check(caps.resources is not None and caps.resources.subscribe, "resources.subscribe advertised")
        check(caps.prompts is not None and caps.completions is not None, "prompts+completions advertised")

        tools = (await client.list_tools()).tools
        names = {tool.name for tool in tools}
        check(names == BUILTIN, f"tools {sorted(names)}")
        check(all(tool.description and tool.input_schema.get("type") == "object" for tool in tools), "schemas")

        check(text_of(await client.call_tool("echo", {"text": "hi"})) == "hi", "echo")
        check(text_of(await client.call_tool("add", {"a": 2, "b": 3})) == "5", "add ints")
        check(text_of(await client.call_tool("add", {"a": 1.5, "b": 1})) == "2.5", "add floats")
        check(text_of(await client.call_tool("whoami", {})) == NAME, "whoami")
        check(text_of(await client.call_tool("slow", {"ms": 20})) == "slept 20", "slow")
        failed = await client.call_tool("fail", {"message": "boom"})
        check(failed.is_error and text_of(failed) == "boom", "fail")
        bad = await client.call_tool("add", {"a": "x"})
        check(bad.is_error, "bad arguments give isError")

        said = text_of(await client.call_tool("ask_llm", {"prompt": "2+2?"}))
        check(said == "llm said: echo of 2+2?", f"ask_llm: {said}")
        answer = text_of(await client.call_tool("ask_user", {"message": "who?"}))
        check(answer == 'user accept: {"name":"Ann"}', f"ask_user: {answer}")
        rec.elicit_action = "decline"
        answer = text_of(await client.call_tool("ask_user", {"message": "who?"}))
        check(answer == "user decline: null", f"ask_user decline: {answer}")
        roots = text_of(await client.call_tool("list_roots", {}))
        check(json.loads(roots) == ["file:///tmp/a", "file:///tmp/b"], f"list_roots: {roots}")

        steps: list[tuple[float, float | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            steps.append((progress, total))

        done = text_of(await client.call_tool("progress", {"steps": 3}, progress_callback=on_progress))
        check(done == "done 3", f"progress: {done}")
        with anyio.fail_after(5):
            while len(steps) < 3:
                await anyio.sleep(0.02)
        check(steps == [(1, 3), (2, 3), (3, 3)], f"progress steps {steps}")

        check(text_of(await client.call_tool("log", {"level": "warning", "message": "careful"})) == "logged", "log")
        with anyio.fail_after(5):
            while not rec.logs:
                await anyio.sleep(0.02)
        log = rec.logs[0]
        check((log.level, log.data, log.logger) == ("warning", "careful", NAME), f"log {log}")
        if not modern:
            await client.set_logging_level("error")
            await client.call_tool("log", {"level": "info", "message": "hidden"})
            await anyio.sleep(0.2)
            check(len(rec.logs) == 1, "log below setLevel is suppressed")

        # Resources.
        resources = {r.uri for r in (await client.list_resources()).resources}
        check(resources == {f"demo://{NAME}/readme", f"demo://{NAME}/counter"}, f"resources {resources}")
        templates = [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
        check(templates == [f"demo://{NAME}/item/{{id}}"], f"templates {templates}")
        readme = (await client.read_resource(f"demo://{NAME}/readme")).contents[0]
        check(readme.text == f"Hello from {NAME}" and readme.mime_type == "text/plain", "readme")
        item = (await client.read_resource(f"demo://{NAME}/item/7")).contents[0]
        check(item.text == f"item 7 from {NAME}", "item")
        try:
            await client.read_resource(f"demo://{NAME}/nope")
            check(False, "unknown resource must fail")
        except MCPError as error:
            expected = -32602 if modern else -32002
            check(error.code == expected, f"not-found code {error.code}")

        # Prompt and completion.
        prompt = await client.get_prompt("greet", {"name": "Ann"})
        check(len(prompt.messages) == 1 and prompt.messages[0].role == "user", "prompt shape")
        check(prompt.messages[0].content.text == f"Hello, Ann! (from {NAME})", "prompt text")
        completion = await client.complete(types.PromptReference(type="ref/prompt", name="greet"), {"name": "name", "value": "al"})
        check(completion.completion.values == ["alice", "albert"], f"completion {completion.completion.values}")

        # Counter subscription and the tools file.
        counter = f"demo://{NAME}/counter"
        if modern:
            async with client.listen(resource_subscriptions=[counter], tools_list_changed=True) as sub:
                check(text_of(await client.call_tool("bump", {})) == "1", "bump")
                with anyio.fail_after(5):
                    event = await sub.__anext__()
                check(getattr(event, "uri", None) == counter, f"resource event {event}")
                tools_file.write_text(json.dumps({"notify": True, "tools": [{"name": "extra", "description": "Extra"}]}))
                with anyio.fail_after(5):
                    event = await sub.__anext__()
                check(type(event).__name__ == "ToolsListChanged", f"tools event {event}")
        else:
            await client.subscribe_resource(counter)
            check(text_of(await client.call_tool("bump", {})) == "1", "bump")
            await rec.wait_for("notifications/resources/updated")
            tools_file.write_text(json.dumps({"notify": True, "tools": [{"name": "extra", "description": "Extra"}]}))
            await rec.wait_for("notifications/tools/list_changed")
        check((await client.read_resource(counter)).contents[0].text == "1", "counter value")
        names = {tool.name for tool in (await client.list_tools()).tools}
        check(names == BUILTIN | {"extra"}, f"tools after change {sorted(names)}")
        extra = text_of(await client.call_tool("extra", {"x": 1, "a": [True]}))
        check(extra == 'extra: {"a":[true],"x":1}', f"extra: {extra}")

        # A silent redeploy: the set changes, nobody is told.
        before = rec.methods().count("notifications/tools/list_changed")
        tools_file.write_text(json.dumps({"notify": False, "tools": [{"name": "quiet", "description": "Quiet"}]}))
        await anyio.sleep(0.5)
        check(rec.methods().count("notifications/tools/list_changed") == before, "notify=false is silent")
        names = {tool.name for tool in (await client.list_tools()).tools}
        check(names == BUILTIN | {"quiet"}, f"tools after silent change {sorted(names)}")
        # An unparsable file keeps the previous set.
        tools_file.write_text("{oops")
        await anyio.sleep(0.3)
        names = {tool.name for tool in (await client.list_tools()).tools}
        check(names == BUILTIN | {"quiet"}, "unparsable file keeps the previous tools")

        # hang ends only when the call is abandoned; the server stays responsive.
        try:
            await client.call_tool("hang", {}, read_timeout_seconds=0.5)
            check(False, "hang must not return")
        except (MCPError, TimeoutError):
            pass
        check(text_of(await client.call_tool("echo", {"text": "still here"})) == "still here", "alive after hang")
    print(f"ok  {label}")


def write_initial_tools(path: Path) -> None:
    path.write_text(json.dumps({"notify": True, "tools": []}))


async def stdio_checks(binary: str, mode: str, tmp: Path) -> None:
    tools_file = tmp / f"tools-stdio-{mode}.json"
    write_initial_tools(tools_file)
    params = StdioServerParameters(command=binary, args=["--name", NAME, "--tools-file", str(tools_file)])
    await run_checks(params, mode, tools_file, f"stdio {mode}")


async def http_checks(binary: str, mode: str, tmp: Path) -> None:
    tools_file = tmp / f"tools-http-{mode}.json"
    write_initial_tools(tools_file)
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--transport", "http", "--listen", f"127.0.0.1:{port}", "--name", NAME,
         "--tools-file", str(tools_file)],
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        await run_checks(f"http://127.0.0.1:{port}/mcp", mode, tools_file, f"http  {mode}")
        # crash takes the whole process down with its code.
        try:
            async with Client(f"http://127.0.0.1:{port}/mcp", mode=mode, read_timeout_seconds=2, cache=None) as client:
                await client.call_tool("crash", {"code": 7})
        except Exception:
            pass  # the server dies mid-call; the client reports it one way or another
        check(proc.wait(timeout=5) == 7, f"crash exit code {proc.returncode}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    print(f"ok  http  {mode} crash exits 7")


async def fan_out_checks(binary: str, tmp: Path) -> None:
    """Every connected client hears about a tools change, whatever its era;
    a tools file that appears after start-up counts as a change."""
    tools_file = tmp / "tools-fan-out.json"
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--transport", "http", "--listen", f"127.0.0.1:{port}", "--name", NAME,
         "--tools-file", str(tools_file)],
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        first, second = Recorder(), Recorder()
        async with (
            Client(url, mode="legacy", message_handler=first.message, cache=None) as a,
            Client(url, mode="legacy", message_handler=second.message, cache=None) as b,
            Client(url, mode="auto", cache=None) as modern,
        ):
            async with modern.listen(tools_list_changed=True) as sub:
                tools_file.write_text(json.dumps({"tools": [{"name": "late", "description": "Late"}]}))
                await first.wait_for("notifications/tools/list_changed")
                await second.wait_for("notifications/tools/list_changed")
                with anyio.fail_after(5):
                    event = await sub.__anext__()
                check(type(event).__name__ == "ToolsListChanged", f"modern event {event}")
            check("late" in {tool.name for tool in (await a.list_tools()).tools}, "late tool listed")
            # A client without sampling support gets a tool error, not a hang.
            result = await a.call_tool("ask_llm", {"prompt": "?"})
            check(result.is_error, "ask_llm without sampling is an error result")
    finally:
        proc.kill()
        proc.wait()
    print("ok  http  fan-out to two legacy sessions and a modern stream; late tools file")


def raw_stdio_checks(binary: str) -> None:
    """stdout carries only JSON-RPC; crash exits without answering."""
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "whoami", "arguments": {}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "nope", "arguments": {}}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "crash", "arguments": {"code": 3}}},
    ]
    proc = subprocess.Popen([binary, "--name", NAME], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    out = []
    assert proc.stdin is not None and proc.stdout is not None
    for message in lines:
        proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()
        if "id" in message and message["id"] != 4:
            out.append(json.loads(proc.stdout.readline()))
    code = proc.wait(timeout=5)
    rest = proc.stdout.read()
    check(code == 3, f"crash exit code {code}")
    check(rest.strip() == "", f"crash must not answer: {rest!r}")
    check(out[0]["result"]["serverInfo"]["name"] == NAME, "raw initialize")
    check(out[1]["result"]["content"][0]["text"] == NAME, "raw whoami")
    check(out[2]["error"]["code"] == -32602, f"unknown tool error {out[2]}")
    print("ok  raw stdio (protocol-only stdout, unknown tool error, crash exits 3)")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", help="path of the vigil-demo-backend binary")
    args = parser.parse_args()
    binary = find_binary(args.bin)
    raw_stdio_checks(binary)
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("legacy", "auto"):
            await stdio_checks(binary, mode, Path(tmp))
            await http_checks(binary, mode, Path(tmp))
        await fan_out_checks(binary, Path(tmp))
    print("all smoke checks passed")


if __name__ == "__main__":
    anyio.run(main)
