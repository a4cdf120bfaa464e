"""Which way a routed request goes: raw (as bytes, on a backend session
shared by plain clients) or typed (through the MCP client machinery).

Vigil counts both in `vigil_requests_forwarded_total{method, path}`. A
client that declared no sampling, elicitation or roots has its
`tools/call`, `resources/read`, `prompts/get` and `completion/complete` to an
HTTP backend forwarded raw, with its progress relayed as it comes; a
declared capability, a log level or a stdio backend sends them the typed
way. A raw answer is the
backend's own bytes but for the id (checked against the same call sent to the
backend directly, with a plain HTTP client).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import types

from harness import DemoHttp, Gateways, Vigil, demo_stdio_args, http_backend, stdio_backend
import support
from support import (
    DEADLINE,
    METRICS_VIEWER,
    Inbox,
    call_error,
    call_text,
    http_session,
    moved,
    text_of,
)

pytestmark = pytest.mark.anyio

VIEWER = METRICS_VIEWER
METHODS = ("tools/call", "resources/read", "prompts/get", "completion/complete")
ACCEPT = "application/json, text/event-stream"


@pytest.fixture
def gateway(vigil: Gateways, demo_http: Callable[..., DemoHttp], demo_bin: Path) -> Vigil:
    web = demo_http("web")
    return vigil(
        [http_backend("web", web.url), stdio_backend("local", demo_bin, demo_stdio_args("local"))],
        api={"tokens": [VIEWER]},
    )


async def forwarded(gw: Vigil) -> dict[tuple[str, str], float]:
    return await support.forwarded(gw, VIEWER["token"])


async def every_method(s: Any, backend: str) -> None:
    """One request of each raw-eligible method to `backend`, answers checked."""
    text = f"hi-{uuid.uuid4()}"
    assert await call_text(s, f"{backend}__echo", {"text": text}) == text
    readme = await s.read_resource(f"demo://{backend}/readme")
    assert text_of(readme) == f"Hello from {backend}"
    prompt = await s.get_prompt(f"{backend}__greet", {"name": "ada"})
    assert "ada" in text_of(prompt)
    done = await s.complete(
        types.PromptReference(type="ref/prompt", name=f"{backend}__greet"), {"name": "name", "value": "al"}
    )
    assert done.completion.values == ["alice", "albert"]


async def test_a_plain_client_goes_raw_for_each_eligible_method(gateway: Vigil) -> None:
    async with http_session(gateway.url) as s:
        before = await forwarded(gateway)
        await every_method(s, "web")
        assert moved(before, await forwarded(gateway)) == {(m, "raw"): 1 for m in METHODS}


async def test_a_call_with_a_progress_token_goes_raw_and_its_progress_arrives_while_it_runs(gateway: Vigil) -> None:
    """Progress in order, with the client's token, before any answer; cancelling the call ends it on the backend."""
    async with http_session(gateway.url) as s:
        before = await forwarded(gateway)
        progress = Inbox()

        async def on_progress(p: float, total: float | None, message: str | None) -> None:
            progress.put((p, total))

        result = await s.call_tool("web__progress", {"steps": 3}, progress_callback=on_progress)
        assert text_of(result) == "done 3"
        assert progress.items == [(1.0, 3.0), (2.0, 3.0), (3.0, 3.0)]
        assert moved(before, await forwarded(gateway)) == {("tools/call", "raw"): 1}

        # The tool waits after its progress and never answers: the progress
        # reaching the client proves it is relayed while the call runs.
        live = Inbox()

        async def on_live(p: float, total: float | None, message: str | None) -> None:
            live.put(p)

        async with anyio.create_task_group() as tg:

            async def call() -> None:
                await s.call_tool("web__progress", {"steps": 2, "hang_after": True}, progress_callback=on_live)

            tg.start_soon(call)
            await live.wait_for(lambda _: True, "two progress notifications", count=2)
            assert live.items == [1.0, 2.0]
            tg.cancel_scope.cancel()
        # Cancelled, the session carries on.
        assert await call_text(s, "web__echo", {"text": "after"}) == "after"


async def test_what_carries_something_per_session_goes_typed(gateway: Vigil) -> None:
    # The same client: to a stdio backend, and with a progress token.
    async with http_session(gateway.url) as s:
        before = await forwarded(gateway)
        await every_method(s, "local")
        assert moved(before, await forwarded(gateway)) == {(m, "typed"): 1 for m in METHODS}

        before = await forwarded(gateway)
        progress: list[float] = []

        async def on_progress(p: float, total: float | None, message: str | None) -> None:
            progress.append(p)

        result = await s.call_tool("local__progress", {"steps": 2}, progress_callback=on_progress)
        assert text_of(result) == "done 2" and progress == [1.0, 2.0], (text_of(result), progress)
        assert moved(before, await forwarded(gateway)) == {("tools/call", "typed"): 1}

    # A client that declared sampling: everything typed.
    async def sampling(ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text="x"), model="m")

    async with http_session(gateway.url, sampling_callback=sampling) as s:
        before = await forwarded(gateway)
        await every_method(s, "web")
        assert moved(before, await forwarded(gateway)) == {(m, "typed"): 1 for m in METHODS}

    # A plain client that set a log level: typed from then on.
    async with http_session(gateway.url) as s:
        await s.set_logging_level("debug")
        before = await forwarded(gateway)
        await every_method(s, "web")
        assert moved(before, await forwarded(gateway)) == {(m, "typed"): 1 for m in METHODS}


class Raw:
    """A hand-driven streamable HTTP session: initialize, then POSTs."""

    def __init__(self, client: httpx.AsyncClient, url: str) -> None:
        self.client, self.url, self.session = client, url, ""

    async def open(self) -> None:
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw-test", "version": "1"},
            },
        }
        resp = await self.client.post(self.url, json=init, headers={"Accept": ACCEPT})
        assert resp.status_code == 200, resp.text
        self.session = resp.headers["mcp-session-id"]
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        resp = await self.client.post(self.url, json=note, headers=self.headers())
        assert resp.status_code == 202, resp.text

    def headers(self) -> dict[str, str]:
        return {"Accept": ACCEPT, "Mcp-Session-Id": self.session, "MCP-Protocol-Version": "2025-11-25"}

    async def answer(self, body: bytes) -> tuple[str, str]:
        """(content type, the JSON-RPC message that answers `body`) as sent."""
        resp = await self.client.post(
            self.url, content=body, headers={**self.headers(), "Content-Type": "application/json"}
        )
        assert resp.status_code == 200, resp.text
        kind = resp.headers["content-type"].split(";")[0]
        if kind == "application/json":
            return kind, resp.text
        assert kind == "text/event-stream", kind
        messages = []
        for event in resp.text.replace("\r\n", "\n").split("\n\n"):
            data = "\n".join(line[5:].removeprefix(" ") for line in event.split("\n") if line.startswith("data:"))
            if data.strip():
                messages.append(data)
        return kind, messages[-1]


async def test_a_raw_answer_is_the_backends_own_bytes_but_for_the_id(
    gateway: Vigil, demo_http: Callable[..., DemoHttp]
) -> None:
    direct_backend = demo_http("web")  # the same program, reached without Vigil
    text = f'bytes "quoted" \\ ünïcode {uuid.uuid4()}'

    def call(request_id: Any, tool: str) -> bytes:
        return json.dumps(
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "tools/call",
                "params": {"name": tool, "arguments": {"text": text}},
            }
        ).encode()

    async with httpx.AsyncClient(timeout=DEADLINE) as client:
        direct = Raw(client, direct_backend.url)
        await direct.open()
        _, theirs = await direct.answer(call(41, "echo"))
        through = Raw(client, gateway.url)
        await through.open()
        before = await forwarded(gateway)
        kind, ours = await through.answer(call("client-7", "web__echo"))
    assert moved(before, await forwarded(gateway)) == {("tools/call", "raw"): 1}
    assert json.loads(theirs)["id"] == 41 and json.loads(ours)["id"] == "client-7"
    assert kind == "application/json"
    assert ours == theirs.replace('"id":41', '"id":"client-7"', 1), f"direct: {theirs}\nvigil:  {ours}"
    assert text in json.loads(ours)["result"]["content"][0]["text"]


ALICE_KEY = "a1ice-lane-7c1f0e8b4f9c2b7e1a0d8c3f"
BOB_KEY = "b0b-lane-4f9c2b7e1a0d8c3f6b5e9a2d"


async def test_each_principal_has_its_own_lane_and_hears_only_its_own_logs(
    vigil: Gateways, demo_http: Callable[..., DemoHttp]
) -> None:
    """The demo backend sends a tool's log on its session's own stream; on a
    lane that stream is shared by one principal's sessions only."""
    web = demo_http("web")
    gw = vigil(
        [http_backend("web", web.url)],
        api={"tokens": [VIEWER]},
        auth={"keys": [{"name": "alice", "key_env": "LANE_KEY_ALICE"}, {"name": "bob", "key_env": "LANE_KEY_BOB"}]},
        env={"LANE_KEY_ALICE": ALICE_KEY, "LANE_KEY_BOB": BOB_KEY},
    )
    alice_logs, alice_too_logs, bob_logs = Inbox(), Inbox(), Inbox()
    async with (
        http_session(gw.url, headers={"Authorization": f"Bearer {ALICE_KEY}"}, logging_callback=alice_logs) as alice,
        http_session(
            gw.url, headers={"Authorization": f"Bearer {ALICE_KEY}"}, logging_callback=alice_too_logs
        ) as alice_too,
        http_session(gw.url, headers={"Authorization": f"Bearer {BOB_KEY}"}, logging_callback=bob_logs) as bob,
    ):
        before = await forwarded(gw)
        secret = f"alice-{uuid.uuid4()}"
        await call_text(alice, "web__log", {"level": "error", "message": secret})
        await alice_logs.wait_for(lambda p: secret in json.dumps(p.data), "alice's log on her session")
        # Her other session shares her lane, so it hears it too...
        await alice_too_logs.wait_for(lambda p: secret in json.dumps(p.data), "alice's log on her other session")
        # ...and bob's does not. His own log comes later on his own queue,
        # so had hers been sent to him it would be there before his.
        own = f"bob-{uuid.uuid4()}"
        await call_text(bob, "web__log", {"level": "error", "message": own})
        await bob_logs.wait_for(lambda p: own in json.dumps(p.data), "bob's own log")
        assert not any(secret in json.dumps(p.data) for p in bob_logs.items), bob_logs.items
        assert moved(before, await forwarded(gw)) == {("tools/call", "raw"): 2}
        assert await call_text(alice_too, "web__echo", {"text": "still raw"}) == "still raw"


#: `limits.max_result_bytes` for the test below: an echo of twice as much is over it.
SMALL_LIMIT = 65536


@pytest.mark.parametrize(("backend", "path"), [("web", "raw"), ("local", "typed")])
async def test_an_answer_over_max_result_bytes_is_refused_with_the_limit_named(
    vigil: Gateways, demo_http: Callable[..., DemoHttp], demo_bin: Path, backend: str, path: str
) -> None:
    """One limit on both paths: the client gets an error naming the key, and
    the backend session (the raw path's lane) still serves the next call."""
    web = demo_http("web")
    gw = vigil(
        [http_backend("web", web.url), stdio_backend("local", demo_bin, demo_stdio_args("local"))],
        api={"tokens": [VIEWER]},
        limits={"max_result_bytes": SMALL_LIMIT},
    )
    async with http_session(gw.url) as s:
        before = await forwarded(gw)
        err = await call_error(s, f"{backend}__echo", {"text": "x" * (2 * SMALL_LIMIT)})
        assert moved(before, await forwarded(gw)) == {("tools/call", path): 1}
        message = str(err)
        assert f"limits.max_result_bytes ({SMALL_LIMIT} bytes)" in message and "raise the limit" in message, message
        assert await call_text(s, f"{backend}__echo", {"text": "small"}) == "small"
