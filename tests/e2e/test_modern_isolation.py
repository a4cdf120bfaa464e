"""2026-07-28 clients of a backend that speaks the handshake era only.

A 2026-07-28 client has no session; Vigil bridges its requests to a
handshake-era backend over a backend session. That session is its caller's
(`CallerKey`), never the supervisor's shared one: what the backend keeps per
session (here a remembered text) is seen by that caller's requests only.
Without `[auth]` every client is the one anonymous caller (see
docs/security.md); the test uses two API keys.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from harness import Gateways, Procs, http_backend, run_vigil, start_python_backend
from reference import wire
from support import DEADLINE, ControlApi, poll

ALICE_KEY = "k-alice-" + "a1" * 16
BOB_KEY = "k-bob-" + "b2" * 16


def text_of_call(w: wire.ModernHttpWire, tool: str, arguments: dict[str, str], backend: str = "state") -> str:
    params = json.dumps({"name": f"{backend}__{tool}", "arguments": arguments}, separators=(",", ":"))
    msg = wire.parse(w.request("tools/call", params).text)
    assert msg.get("error") is None, f"{tool}: {msg.get('error')}"
    [content] = msg.get("result").get("content")
    return content.get("text").value


def test_two_callers_never_share_a_handshake_backend_session(
    vigil: Gateways, procs: Procs, tmp_path: Path
) -> None:
    server = start_python_backend(procs, "state", "session_state_server.py")
    gw = vigil(
        [{**http_backend("state", server.url), "protocol": "2025-11-25"}],
        auth={"keys": [{"name": "alice", "key_env": "KEY_ALICE"}, {"name": "bob", "key_env": "KEY_BOB"}]},
        env={"KEY_ALICE": ALICE_KEY, "KEY_BOB": BOB_KEY},
    )
    clients = {}
    for who, key in (("alice", ALICE_KEY), ("bob", BOB_KEY)):
        w = wire.ModernHttpWire(gw.url, deadline=DEADLINE, log=tmp_path / f"wire-{who}.log")
        w.extra_headers = {"Authorization": f"Bearer {key}"}
        clients[who] = w
    try:
        alice, bob = clients["alice"], clients["bob"]
        assert text_of_call(alice, "remember", {"text": "alice's secret"}) == "kept"
        assert text_of_call(alice, "recall", {}) == "alice's secret", "the caller's own requests share its session"
        assert text_of_call(bob, "recall", {}) == "", "another caller recalled alice's state"
        assert text_of_call(bob, "remember", {"text": "bob's"}) == "kept"
        assert text_of_call(alice, "recall", {}) == "alice's secret"
    finally:
        for w in clients.values():
            w.close()


@pytest.mark.anyio
async def test_without_auth_serve_status_and_check_say_2026_clients_share_a_session(
    vigil: Gateways, vigil_bin: Path, procs: Procs, tmp_path: Path
) -> None:
    pinned = start_python_backend(procs, "pinned", "session_state_server.py")
    auto = start_python_backend(procs, "auto", "session_state_server.py")
    gw = vigil(
        [{**http_backend("pinned", pinned.url), "protocol": "2025-11-25"}, http_backend("auto", auto.url)],
        api={},
    )
    api = ControlApi(gw.api_base)
    said = "without [auth] every client is the same anonymous caller"
    await poll(lambda: anyio.to_thread.run_sync(gw.proc.stderr), lambda err: said in err, "the warning at serve")
    assert "backend 'pinned' " in gw.proc.stderr() and "backend 'auto' " not in gw.proc.stderr()
    listed = await api.get_json("/api/v1/health/instances")
    assert [w.split(" ")[1] for w in listed["warnings"]] == ["'pinned'"], listed["warnings"]

    # `auto` found the server speaking 2026-07-28 (`server/discover`): a
    # 2026-07-28 client is served in its era, with no backend session for
    # Vigil to share, so even after one came there is nothing to warn of.
    w = wire.ModernHttpWire(gw.url, deadline=DEADLINE, log=tmp_path / "wire-modern.log")
    try:
        text_of_call(w, "remember", {"text": "x"}, backend="auto")
    finally:
        w.close()
    listed = await api.get_json("/api/v1/health/instances")
    names = sorted(w.split(" ")[1] for w in listed["warnings"])
    status = run_vigil(vigil_bin, ["status", "--api", gw.api_base], tmp_path)
    check = run_vigil(vigil_bin, ["check", "--config", str(gw.config_path)], tmp_path)
    assert check.returncode == 0, check.stderr
    assert "warning: backend 'pinned' " in check.stderr and said in check.stderr, check.stderr
    assert "backend 'auto' " not in check.stderr, "check starts nothing: it cannot know what auto finds"
    assert status.returncode == 0, status.stderr
    assert "warning: backend 'pinned' " in status.stdout, status.stdout
    assert names == ["'pinned'"], names
