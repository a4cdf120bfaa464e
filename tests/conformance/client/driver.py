"""The MCP client the conformance suite's client scenarios expect, built on
the official Python MCP SDK.

usage: python driver.py URL

The suite runs its client command with the scenario server's URL as the
last argument and these variables set:
  MCP_CONFORMANCE_SCENARIO          the scenario's name
  MCP_CONFORMANCE_PROTOCOL_VERSION  the revision the scenario speaks
  MCP_CONFORMANCE_CONTEXT           JSON data some scenarios hand the client

The same driver runs against the scenario server directly (the baseline) and
against Vigil fronting it (through_vigil.py passes Vigil's /mcp URL and the
same variables), so whatever differs between the two runs is Vigil's
backend-facing client.

Each scenario does what a well-behaved client does: lists what the server
offers, calls what the scenario names, answers elicitations. Every step runs
even when an earlier one failed; the exit status is 1 when any step failed.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any, Awaitable, Callable

import anyio
import mcp_types as types
from mcp import Client

SCENARIO = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
PROTOCOL = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION", "2025-11-25")
CONTEXT: dict[str, Any] = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
# 2026-07-28 has no initialize handshake: the SDK asks server/discover
# ("auto") and sends self-contained requests. Earlier revisions open a
# session with initialize ("legacy").
MODE = "auto" if PROTOCOL >= "2026-07-28" else "legacy"
# Generous: through Vigil every request is two hops on a loaded machine.
TIMEOUT = float(os.environ.get("DRIVER_REQUEST_TIMEOUT", "30"))

failures: list[str] = []


def log(*parts: Any) -> None:
    print(f"driver[{SCENARIO}]:", *parts, file=sys.stderr, flush=True)


async def step(what: str, fn: Callable[[], Awaitable[Any]]) -> Any:
    """Runs one step; a failure is logged and remembered, never fatal."""
    try:
        result = await fn()
        log("ok:", what)
        return result
    except Exception as e:  # noqa: BLE001 - every failure is reported the same way
        failures.append(what)
        log(f"FAILED: {what}: {type(e).__name__}: {e}")
        traceback.print_exc(file=sys.stderr)
        return None


def schema_defaults(schema: Any) -> dict[str, Any]:
    """The default of every property of an elicitation form that has one:
    what a client shows pre-filled and sends when the user accepts it as is
    (SEP-1034; the TypeScript SDK's `applyDefaults`)."""
    if hasattr(schema, "model_dump"):
        schema = schema.model_dump(by_alias=True, exclude_none=True)
    out: dict[str, Any] = {}
    for name, prop in (schema or {}).get("properties", {}).items():
        if isinstance(prop, dict) and "default" in prop:
            out[name] = prop["default"]
    return out


async def accept_with_defaults(_ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    content = schema_defaults(getattr(params, "requested_schema", None))
    log("elicitation: accepting with", json.dumps(content))
    return types.ElicitResult(action="accept", content=content)


def client(url: str, **kw: Any) -> Client:
    return Client(
        url,
        mode=MODE,
        read_timeout_seconds=TIMEOUT,
        client_info=types.Implementation(name="vigil-conformance-driver", version="1.0.0"),
        **kw,
    )


def tool_names(listing: Any) -> list[str]:
    return [t.name for t in (listing.tools if listing else [])]


# --- scenarios --------------------------------------------------------------


async def basic(url: str) -> None:
    """initialize, tools_call: list the tools, call the first with a and b."""
    async with client(url) as c:
        listing = await step("tools/list", c.list_tools)
        names = tool_names(listing)
        if names:
            await step(f"tools/call {names[0]}", lambda: c.call_tool(names[0], {"a": 2, "b": 3}))


async def elicitation_defaults(url: str) -> None:
    async with client(url, elicitation_callback=accept_with_defaults) as c:
        await step("tools/list", c.list_tools)
        await step(
            "tools/call test_client_elicitation_defaults",
            lambda: c.call_tool("test_client_elicitation_defaults", {}),
        )


async def sse_retry(url: str) -> None:
    """The server closes the call's stream before the result; the client must
    come back with GET and Last-Event-ID after the stream's `retry`."""
    async with client(url) as c:
        await step("tools/list", c.list_tools)
        await step("tools/call test_reconnection", lambda: c.call_tool("test_reconnection", {}))


async def list_tools_only(url: str) -> None:
    """request-metadata, json-schema-ref-no-deref: discover and list."""
    async with client(url) as c:
        await step("tools/list", c.list_tools)


async def schema_preservation(url: str) -> None:
    """List, then hand the focal tool's inputSchema back to the echo tool."""
    async with client(url) as c:
        listing = await step("tools/list", c.list_tools)
        focal = next((t for t in (listing.tools if listing else []) if t.name == "json_schema_2020_12_tool"), None)
        if focal is None:
            failures.append("json_schema_2020_12_tool not listed")
            log("FAILED: json_schema_2020_12_tool not listed")
            return
        await step(
            "tools/call json_schema_echo",
            lambda: c.call_tool("json_schema_echo", {"schema": focal.input_schema}),
        )


async def standard_headers(url: str) -> None:
    """Every request kind that carries Mcp-Method / Mcp-Name headers."""
    async with client(url) as c:
        listing = await step("tools/list", c.list_tools)
        for name in tool_names(listing):
            await step(f"tools/call {name}", lambda name=name: c.call_tool(name, {}))
        resources = await step("resources/list", c.list_resources)
        for r in resources.resources if resources else []:
            await step(f"resources/read {r.uri}", lambda uri=r.uri: c.read_resource(uri))
        prompts = await step("prompts/list", c.list_prompts)
        for p in prompts.prompts if prompts else []:
            await step(f"prompts/get {p.name}", lambda name=p.name: c.get_prompt(name, {}))


async def custom_headers(url: str) -> None:
    """Call the tools the scenario names with the arguments it gives."""
    async with client(url) as c:
        await step("tools/list", c.list_tools)
        for call in CONTEXT.get("toolCalls", []):
            await step(
                f"tools/call {call['name']}",
                lambda call=call: c.call_tool(call["name"], call.get("arguments", {})),
            )


def placeholder_arguments(tool: Any) -> dict[str, Any]:
    values = {"string": "x", "integer": 1, "number": 1, "boolean": True, "object": {}, "array": [], "null": None}
    schema = tool.input_schema or {}
    props = schema.get("properties", {})
    return {name: values.get(props.get(name, {}).get("type"), "x") for name in schema.get("required", [])}


async def invalid_tool_headers(url: str) -> None:
    """Call every tool the client keeps: a client must drop the tools whose
    x-mcp-header annotations are invalid and keep the valid one."""
    async with client(url) as c:
        listing = await step("tools/list", c.list_tools)
        tools = listing.tools if listing else []
        log("tools kept:", [t.name for t in tools])
        for tool in tools:
            await step(f"tools/call {tool.name}", lambda tool=tool: c.call_tool(tool.name, placeholder_arguments(tool)))


def answers(result: types.InputRequiredResult) -> dict[str, Any]:
    """Accept every elicitation of an input-required result."""
    out: dict[str, Any] = {}
    for key, req in (result.input_requests or {}).items():
        method = getattr(req, "method", None) or (req.get("method") if isinstance(req, dict) else None)
        if method == "elicitation/create":
            out[key] = types.ElicitResult(action="accept", content={"confirmed": True})
    return out


async def request_state(url: str) -> None:
    """SEP-2322 by hand: take the input-required result, call an unrelated tool
    in between, then retry with the answers and the echoed requestState."""
    async with client(url) as c:
        s = c.session
        await step("tools/list", c.list_tools)

        first = await step(
            "tools/call test_mrtr_echo_state",
            lambda: s.call_tool("test_mrtr_echo_state", {}, allow_input_required=True),
        )
        if isinstance(first, types.InputRequiredResult):
            await step("tools/call test_mrtr_unrelated", lambda: s.call_tool("test_mrtr_unrelated", {}))
            await step(
                "tools/call test_mrtr_echo_state (retry)",
                lambda: s.call_tool(
                    "test_mrtr_echo_state",
                    {},
                    input_responses=answers(first),
                    request_state=first.request_state,
                    allow_input_required=True,
                ),
            )
        else:
            failures.append("test_mrtr_echo_state: no input-required result")
            log("FAILED: test_mrtr_echo_state gave", repr(first)[:300])

        second = await step(
            "tools/call test_mrtr_no_state",
            lambda: s.call_tool("test_mrtr_no_state", {}, allow_input_required=True),
        )
        if isinstance(second, types.InputRequiredResult):
            await step(
                "tools/call test_mrtr_no_state (retry)",
                lambda: s.call_tool(
                    "test_mrtr_no_state",
                    {},
                    input_responses=answers(second),
                    request_state=second.request_state,
                    allow_input_required=True,
                ),
            )
        else:
            failures.append("test_mrtr_no_state: no input-required result")
            log("FAILED: test_mrtr_no_state gave", repr(second)[:300])

        await step("tools/call test_mrtr_no_result_type", lambda: s.call_tool("test_mrtr_no_result_type", {}))


SCENARIOS: dict[str, Callable[[str], Awaitable[None]]] = {
    "initialize": basic,
    "tools_call": basic,
    "elicitation-sep1034-client-defaults": elicitation_defaults,
    "sse-retry": sse_retry,
    "request-metadata": list_tools_only,
    "json-schema-ref-no-deref": list_tools_only,
    "json-schema-2020-12-preservation": schema_preservation,
    "http-standard-headers": standard_headers,
    "http-custom-headers": custom_headers,
    "http-invalid-tool-headers": invalid_tool_headers,
    "sep-2322-client-request-state": request_state,
}


async def main(url: str) -> int:
    run = SCENARIOS.get(SCENARIO)
    if run is None:
        log(f"no client behaviour for scenario {SCENARIO!r}; known: {', '.join(sorted(SCENARIOS))}")
        return 2
    log(f"url={url} protocol={PROTOCOL} mode={MODE}")
    try:
        await run(url)
    except Exception as e:  # noqa: BLE001 - the connection itself failed
        failures.append("connect")
        log(f"FAILED: connect/close: {type(e).__name__}: {e}")
        traceback.print_exc(file=sys.stderr)
    if failures:
        log("failed steps:", "; ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(anyio.run(main, sys.argv[-1]))
