"""A backend that answers requests with plain JSON bodies (not event streams).

Servers in JSON-response mode (the official Python SDK's `json_response`,
the TypeScript SDK's `enableJsonResponse`, most stateless servers) answer a
POST with `application/json`. Vigil reads such a body's text before the MCP
library decodes it (`backend/kept_post.rs`), so what it relays keeps the
server's members, their order and its numbers, as with a streamed answer.
Each case does the same request directly and through Vigil with the raw
wire client of the differential suite and compares the JSON text apart from
the documented differences (docs/gateway.md, "What a relayed answer keeps").
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from harness import Gateways, Procs, http_backend, start_python_backend
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
