"""Readiness probes of HTTP backends go straight to the live session.

Vigil pings an HTTP backend with one POST on a pooled connection, carrying
the session id and protocol version of its open backend session, instead of
through its MCP client (see `host/src/backend/http_ping.rs`). Whatever that
direct ping cannot decide is repeated through the MCP client, so a silent
fallback would hide a broken fast path: these tests check, from Vigil's own
debug log, that the direct ping answers against each server implementation
and each answer style (rmcp with SSE; the Python SDK with SSE and with plain
JSON), and that the backends stay `running` and serve calls meanwhile.

A backend Vigil reaches in 2026-07-28 has neither `ping` nor a session: its
direct probe is the `server/discover` Vigil's connection sent, sent again
(same headers and `_meta` envelope), checked the same way.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness import DemoHttp, Procs, http_backend, start_python_backend
from support import ControlApi, call_text, http_session, poll

pytestmark = pytest.mark.anyio

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def start_sdk_server(procs: Procs, name: str, *, json_response: bool) -> str:
    """Start the Python SDK server; return its MCP URL."""
    return start_python_backend(procs, f"sdk-{name}", "sdk_http_server.py", ["--json"] if json_response else []).url


def answered_pings(log: str, backend: str, probe: str = "ping") -> dict[str, int]:
    """How many probes (`ping` or `server/discover`) of `backend` Vigil
    logged as answered, by path."""
    counts = {"direct": 0, "mcp": 0}
    for line in ANSI.sub("", log).splitlines():
        if "ping answered" in line and f"backend={backend} " in line and f'probe="{probe}"' in line:
            for path in counts:
                if f'path="{path}"' in line or f"path={path}" in line:
                    counts[path] += 1
    return counts


async def test_http_backends_are_pinged_directly_on_their_session(
    procs: Procs, demo_http: Callable[..., DemoHttp], vigil: Callable[..., object]
) -> None:
    demo = demo_http("rmcp")
    sse = start_sdk_server(procs, "sse", json_response=False)
    plain = start_sdk_server(procs, "json", json_response=True)
    backends = {"rmcp": demo.url, "sdksse": sse, "sdkjson": plain}
    # The Python SDK's servers list only 2026-07-28 in server/discover, so
    # `auto` would reach them in that era (no session to ping on): pinned
    # to the handshake era here. The demo backend lists both eras and gets
    # a session with `auto`.
    entries = [
        http_backend(name, url) if name == "rmcp" else {**http_backend(name, url), "protocol": "2025-11-25"}
        for name, url in backends.items()
    ]
    gw = vigil(
        entries,
        health={"interval": "200ms", "timeout": "200ms"},
        api={},
    )
    api = ControlApi(gw.api_base)

    await poll(
        lambda: _counts(gw, backends),
        lambda c: all(v["direct"] >= 5 for v in c.values()),
        "five direct pings answered by every HTTP backend",
    )
    log = ANSI.sub("", gw.proc.stderr())
    assert "direct ping undecided" not in log, [line for line in log.splitlines() if "direct ping undecided" in line][
        :5
    ]
    for name in backends:
        assert answered_pings(log, name)["mcp"] == 0, f"{name}: a ping went through the MCP client"
        report = await api.instance(name)
        assert report["state"] == "running", report
        assert report["latency_ms"] is not None, report

    # The sessions the pings rode on still serve the gateway's clients.
    async with http_session(gw.url) as session:
        assert await call_text(session, "sdksse__echo", {"text": "one"}) == "one"
        assert await call_text(session, "sdkjson__echo", {"text": "two"}) == "two"
        assert await call_text(session, "rmcp__echo", {"text": "three"}) == "three"


async def _counts(gw: object, backends: dict[str, str], probe: str = "ping") -> dict[str, dict[str, int]]:
    log = gw.proc.stderr()  # type: ignore[attr-defined]
    return {name: answered_pings(log, name, probe) for name in backends}


async def test_2026_backends_are_probed_directly_with_their_server_discover(
    procs: Procs, demo_http: Callable[..., DemoHttp], vigil: Callable[..., object], tmp_path: Path
) -> None:
    demo = demo_http("rmcp")
    sse = start_sdk_server(procs, "sse", json_response=False)
    plain = start_sdk_server(procs, "json", json_response=True)
    # Speaks only 2026-07-28; its gate refuses `ping` and any request
    # without the revision's `_meta` envelope, and logs each method.
    gate_log = tmp_path / "gated.log"
    gated = start_python_backend(procs, "gated", "modern_only_server.py", [str(gate_log)]).url
    gate_log.write_text("")  # the harness's own readiness check is not Vigil's traffic
    backends = {"rmcp": demo.url, "sdksse": sse, "sdkjson": plain, "gated": gated}
    # The demo backend lists both eras: pinned. The Python SDK's servers
    # list only 2026-07-28 in server/discover, so `auto` reaches them in it.
    entries = [
        {**http_backend(name, url), "protocol": "2026-07-28"} if name == "rmcp" else http_backend(name, url)
        for name, url in backends.items()
    ]
    gw = vigil(entries, health={"interval": "1s", "timeout": "1s"}, api={})
    api = ControlApi(gw.api_base)

    await poll(
        lambda: _counts(gw, backends, "server/discover"),
        lambda c: all(v["direct"] >= 5 for v in c.values()),
        "five direct server/discover probes answered by every 2026-07-28 backend",
    )
    log = ANSI.sub("", gw.proc.stderr())
    assert "direct ping undecided" not in log, [line for line in log.splitlines() if "direct ping undecided" in line][
        :5
    ]
    for name in backends:
        assert answered_pings(log, name, "server/discover")["mcp"] == 0, f"{name}: a probe went through the MCP client"
        assert answered_pings(log, name, "ping") == {"direct": 0, "mcp": 0}, f"{name}: pinged in 2026-07-28"
        report = await api.instance(name)
        assert report["state"] == "running" and report["restart_count"] == 0, report
    seen = gate_log.read_text().split()
    assert "ping" not in seen, seen
    assert seen.count("server/discover") >= 6, f"the gate let the direct probes through: {seen}"

    async with http_session(gw.url) as session:
        for name in backends:
            assert await call_text(session, f"{name}__echo", {"text": name}) == name


async def test_a_probe_answered_with_an_http_status_is_judged_by_the_status(
    vigil: Callable[..., Any], procs: Procs, tmp_path: Path
) -> None:
    """A ping answered HTTP 429 is a rate-limited, degraded backend, not a
    dead one; 403 where credentials are configured is reachable (degraded);
    503 is down. Told by the status Vigil's HTTP client read, never by
    the wording of its error."""
    status_file = tmp_path / "ping-status"
    server = start_python_backend(procs, "statuses", "hostile_http.py", ["--ping-status-file", str(status_file)])
    backend = {**http_backend("st", server.url), "headers": {"X-Api-Key": "k"}, "health": {"interval": "1s", "timeout": "1s"}}
    gw = vigil([backend], api={})
    api = ControlApi(gw.api_base)
    await api.wait_state("st", "running")
    status_file.write_text("429")
    degraded = await api.wait_state("st", "degraded")
    assert "rate limited: HTTP 429" in degraded["reason"], degraded
    status_file.write_text("403")
    refused = await api.wait_for(
        "st", lambda d: "credentials are refused" in d["reason"], "the 403 with credentials judged reachable"
    )
    assert refused["state"] == "degraded", refused
    status_file.unlink()
    await api.wait_state("st", "running")
    status_file.write_text("503")
    down = await api.wait_state("st", "offline", "restarting")
    assert "503" in down["reason"], down
