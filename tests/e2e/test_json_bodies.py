"""A backend that answers requests with plain JSON bodies (not event streams).

Servers in JSON-response mode (the official Python SDK's `json_response`,
the TypeScript SDK's `enableJsonResponse`, most stateless servers) answer a
POST with `application/json`. Vigil reads such a body's text before the MCP
library decodes it (`backend/kept_post.rs`), so what it relays keeps the
server's members, their order and its numbers, as with a streamed answer.
Each case does the same request directly and through Vigil with the raw
wire client of the differential suite and compares the JSON text apart from
the documented differences (docs/gateway.md, "What a relayed answer keeps").

Vigil's own answers take the same rule from the other side: JSON when the
answer is the first message of its response (docs/gateway.md, "JSON when
JSON will do").
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from harness import DemoHttp, Gateways, Procs, demo_stdio_args, http_backend, start_python_backend, stdio_backend
from reference import wire
from reference.wire import Frame, HttpWire, normalize
from support import DEADLINE

PREFIX = "sdk__"


def same(direct: Frame, via: Frame, *, answers: str) -> None:
    expected = normalize(direct.text, answers=answers)
    got = normalize(via.text, answers=answers, prefix=PREFIX)
    diff = wire.first_difference(expected, got)
    assert diff is None, f"{answers} differs through Vigil: {diff}"


def wait_for_tool(w: HttpWire, name: str) -> None:
    """Vigil lists the backend's tools once its first listing is in; wait for the `list_changed` if not yet."""
    frame = w.request("tools/list")
    if name in frame.text:
        return
    w.wait_for(wire.is_method("notifications/tools/list_changed"), "tools/list_changed", DEADLINE)
    assert name in w.request("tools/list").text, f"{name} never listed through Vigil"


@pytest.mark.parametrize("mode", ["json", "sse"])
def test_a_json_body_backend_is_relayed_as_written(
    vigil: Gateways, procs: Procs, http_wires: Callable[..., HttpWire], mode: str
) -> None:
    """tools/list and a structured tools/call of an SDK server, answering JSON bodies or event streams."""
    backend = start_python_backend(procs, "sdk", "sdk_http_server.py", ["--json"] if mode == "json" else [])
    direct = http_wires(backend.url, f"direct-{mode}")
    # Both hops in the era the direct client speaks: the SDK server writes
    # some schemas differently for a 2026-07-28 client.
    gw = vigil([{**http_backend("sdk", backend.url), "protocol": "2025-11-25"}], naming="prefix")
    via = http_wires(gw.url, f"vigil-{mode}")
    wait_for_tool(via, f"{PREFIX}reading")

    d_list = direct.request("tools/list")
    if mode == "json":
        assert d_list.content_type.startswith("application/json"), d_list.content_type
    same(d_list, via.request("tools/list"), answers="tools/list")

    args = '{"name":"reading","arguments":{"station":"north"}}'
    d_call = direct.request("tools/call", args)
    v_call = via.request("tools/call", args.replace('"reading"', f'"{PREFIX}reading"'))
    assert '"humidity":0.7' in d_call.text, d_call.text
    same(d_call, v_call, answers="tools/call")


def test_vigil_answers_json_when_nothing_comes_before_the_result(
    vigil: Gateways,
    demo_http: Callable[..., DemoHttp],
    demo_bin: Path,
    http_wires: Callable[..., HttpWire],
) -> None:
    """A client that accepts both gets `application/json` for an answer that
    is the first message of its response, on every path (Vigil's own list,
    the typed path to a stdio backend, the raw path to an HTTP backend, with
    and without a progress token), and an event stream only when something
    comes first (the call's progress)."""
    web = demo_http("web")
    gw = vigil([http_backend("web", web.url), stdio_backend("local", demo_bin, demo_stdio_args("local"))])
    w = http_wires(gw.url, "json-answers")
    wait_for_tool(w, "web__echo")
    wait_for_tool(w, "local__echo")

    def kind(method: str, params: str | None = None) -> str:
        answer = w.request(method, params)
        assert '"result"' in answer.text, answer.text[:300]
        return (answer.content_type or "").split(";")[0]

    echo = '{{"name":"{}","arguments":{{"text":"hi"}}{}}}'
    token = ',"_meta":{"progressToken":"p1"}'
    assert kind("tools/list") == "application/json", "Vigil's own listing"
    assert kind("tools/call", echo.format("local__echo", "")) == "application/json", "typed path"
    assert kind("tools/call", echo.format("web__echo", "")) == "application/json", "raw path"
    assert kind("tools/call", echo.format("web__echo", token)) == "application/json", "raw path, progress token"
    assert kind("tools/call", echo.format("local__echo", token)) == "application/json", "typed path, progress token"
    progress = '{"name":"web__progress","arguments":{"steps":2},"_meta":{"progressToken":"p2"}}'
    assert kind("tools/call", progress) == "text/event-stream", "progress before the result"
    progress_local = progress.replace("web__", "local__").replace('"p2"', '"p3"')
    assert kind("tools/call", progress_local) == "text/event-stream", "typed path, progress before the result"
