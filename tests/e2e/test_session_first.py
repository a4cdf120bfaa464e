"""A backend `auto` finds speaking only 2026-07-28 but that takes a session
too (every Python SDK 2.x server; the conformance suite's reference server).

The supervisor's shared connection stays in 2026-07-28 (`test_probes.py`
checks it is probed with `server/discover`), but a 2025-era client's own
backend connection asks `initialize` first: only a session carries what
the server asks of that client during a call. So an elicitation the server
sends as a request reaches a 2025-era client through Vigil as it does
directly. Spoken to in 2026-07-28 instead, the call failed (the conformance
reference server's `tools-call-elicitation`, `tools-call-sampling`,
`elicitation-sep1034-defaults`, `elicitation-sep1330-enums`,
`resources-subscribe` and `-unsubscribe` failed that way through Vigil).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from mcp import types

from harness import Procs, Vigil, http_backend, start_python_backend
from support import ControlApi, call_text, http_session

pytestmark = pytest.mark.anyio


async def greeted(url: str, tool: str) -> tuple[str, list[str]]:
    """What `tool` answers a 2025-era client that gives its name, and what
    the client was asked."""
    asked: list[str] = []

    async def elicitation(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async with http_session(url, elicitation_callback=elicitation) as s:
        return await call_text(s, tool), asked


async def test_a_2025_client_is_asked_what_the_server_asks_through_a_session_of_its_own(
    vigil: Callable[..., Vigil], procs: Procs
) -> None:
    backend = start_python_backend(procs, "sdk-session", "sdk_http_server.py", [])
    direct = await greeted(backend.url, "ask_name")
    assert direct == ("hello Ada", ["your name?"]), direct

    gw = vigil([http_backend("sdk", backend.url)], api={})
    await ControlApi(gw.api_base).wait_state("sdk", "running")
    through = await greeted(gw.url, "sdk__ask_name")
    assert through == direct, f"through Vigil {through}, directly {direct}"
    # A second client: the connection of its own is a session again.
    assert await greeted(gw.url, "sdk__ask_name") == direct
    async with http_session(gw.url) as s:
        assert await call_text(s, "sdk__echo", {"text": "still served"}) == "still served"
