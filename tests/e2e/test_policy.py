"""`[[policy]]`: per-principal views, denied calls, live edits and rate limits (issue 14, acceptance 3 and 5).

Real peers: the official Python SDK as the client of two (or three)
principals at once, each with its own `[[auth.keys]]` key; the demo backend
over stdio; the config file edited on disk while the sessions stay open.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from harness import Gateways, demo_stdio_args, stdio_backend, toml_value
from support import (
    DEADLINE,
    DEMO_TOOLS,
    Inbox,
    call_error,
    call_text,
    http_session,
    is_tools_list_changed,
    poll,
    prefixed,
    tool_names,
)
from test_audit import calls
from test_reload import rewrite

pytestmark = pytest.mark.anyio

KEYS = {
    "alice": "a1ice-7c1f0e8b4f9c2b7e1a0d8c3f6b5e9a2d",
    "bob": "b0b-4f9c2b7e1a0d8c3f6b5e9a2d7c1f0e8b",
    "carol": "car0l-9a2d7c1f0e8b4f9c2b7e1a0d8c3f6b5e",
}
ALL = prefixed("demo", DEMO_TOOLS)
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def policies(bob_allows: list[str], alice_denies: list[str] | None = None) -> list[dict[str, Any]]:
    return [
        {"principals": ["key:alice"], "allow": ["*"], "deny": alice_denies or []},
        {"principals": ["key:carol"], "allow": ["demo__echo"], "rate": "60/min"},
        {"principals": ["*"], "allow": bob_allows, "deny": ["demo__crash"]},
    ]


def gateway(vigil: Gateways, demo_bin: Path, bob_allows: list[str]) -> Any:
    return vigil(
        [stdio_backend("demo", demo_bin, demo_stdio_args("demo"))],
        api={},
        auth={"keys": [{"name": n, "key_env": f"VIGIL_KEY_{n.upper()}"} for n in KEYS]},
        env={f"VIGIL_KEY_{n.upper()}": k for n, k in KEYS.items()},
        policy=policies(bob_allows),
    )


def bearer(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[name]}"}


async def test_two_principals_see_and_call_what_their_policy_allows(vigil: Gateways, demo_bin: Path) -> None:
    gw = gateway(vigil, demo_bin, ["demo__echo", "demo__a*", "demo__crash"])
    async with (
        http_session(gw.url, headers=bearer("alice")) as alice,
        http_session(gw.url, headers=bearer("bob")) as bob,
    ):
        assert await tool_names(alice) == ALL
        assert await tool_names(bob) == {"demo__echo", "demo__add", "demo__ask_llm", "demo__ask_user"}
        assert await call_text(bob, "demo__echo", {"text": "allowed"}) == "allowed"
        assert await call_text(alice, "demo__whoami") != ""

        # A denied tool (not allowed, or allowed and denied) answers exactly
        # like a tool that does not exist: same code, same message but the name.
        unknown = await call_error(bob, "demo__no_such_tool")
        for denied in ("demo__whoami", "demo__crash"):
            err = await call_error(bob, denied)
            assert err.error.code == unknown.error.code, (denied, err.error, unknown.error)
            assert err.error.message.replace(denied, "NAME") == unknown.error.message.replace(
                "demo__no_such_tool", "NAME"
            ), (err.error.message, unknown.error.message)
            assert json.dumps(err.error.data).replace(denied, "NAME") == json.dumps(unknown.error.data).replace(
                "demo__no_such_tool", "NAME"
            ), (err.error.data, unknown.error.data)
        # The same tool is there for alice.
        assert await call_text(alice, "demo__echo", {"text": "all"}) == "all"

    # The audit has who called what, and the refusals as `denied`.
    def seen(rows: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
        return {(r["principal"], r["name"], r["outcome"]) for r in rows}

    rows = await poll(
        lambda: calls(gw, limit=100),
        lambda rows: {("key:bob", "demo__whoami", "denied"), ("key:bob", "demo__crash", "denied")} <= seen(rows),
        "bob's denied calls in the audit",
    )
    assert {("key:bob", "demo__echo", "ok"), ("key:alice", "demo__echo", "ok")} <= seen(rows), rows
    # A name bob may not use is `denied` whether or not it exists: the
    # policy answers before any route is looked up.
    assert ("key:bob", "demo__no_such_tool", "denied") in seen(rows), rows
    assert all(isinstance(r["duration_us"], int) for r in rows), rows


async def test_a_policy_edit_reaches_only_the_sessions_whose_view_changed(vigil: Gateways, demo_bin: Path) -> None:
    gw = gateway(vigil, demo_bin, ["demo__echo"])
    alice_inbox, bob_inbox = Inbox(), Inbox()
    async with (
        http_session(gw.url, headers=bearer("alice"), message_handler=alice_inbox) as alice,
        http_session(gw.url, headers=bearer("bob"), message_handler=bob_inbox) as bob,
    ):
        assert await tool_names(bob) == {"demo__echo"}
        assert await tool_names(alice) == ALL

        def edit(entries: list[dict[str, Any]]) -> None:
            text = gw.config_path.read_text(encoding="utf-8")
            edited = re.sub(r"(?m)^policy = .*$", "policy = " + toml_value(entries), text)
            assert edited != text
            rewrite(gw.config_path, edited)

        # Bob may now add: his view changes, alice's does not.
        edit(policies(["demo__echo", "demo__add"]))
        await bob_inbox.wait_for(is_tools_list_changed, "bob's list_changed after the first edit")
        assert await tool_names(bob) == {"demo__echo", "demo__add"}
        assert await call_text(bob, "demo__add", {"a": 2, "b": 3}) == "5"

        # Alice may no longer crash the backend: her view changes, bob's
        # does not. Her notification for this edit is the first she gets:
        # had the first edit notified her, it would have come before it.
        edit(policies(["demo__echo", "demo__add"], alice_denies=["demo__crash"]))
        await alice_inbox.wait_for(is_tools_list_changed, "alice's list_changed after the second edit")
        assert await tool_names(alice) == ALL - {"demo__crash"}
        assert len(alice_inbox.matching(is_tools_list_changed)) == 1, alice_inbox.items
        assert len(bob_inbox.matching(is_tools_list_changed)) == 1, bob_inbox.items
        assert await tool_names(bob) == {"demo__echo", "demo__add"}
        reloads = [line for line in ANSI.sub("", gw.proc.stderr()).splitlines() if "config reloaded" in line]
        assert len(reloads) == 2 and all('"policy"' in line for line in reloads), reloads


async def test_a_rate_limited_principal_gets_retry_after_and_others_are_unaffected(
    vigil: Gateways, demo_bin: Path
) -> None:
    gw = gateway(vigil, demo_bin, ["demo__echo"])
    async with (
        http_session(gw.url, headers=bearer("carol")) as carol,
        http_session(gw.url, headers=bearer("bob")) as bob,
    ):
        for i in range(60):
            assert await call_text(carol, "demo__echo", {"text": str(i)}) == str(i)
        err = await call_error(carol, "demo__echo", {"text": "61st"})
        assert err.error.code == -32029, err.error
        assert "rate limited" in err.error.message and "60/min" in err.error.message, err.error.message
        assert "policy[1].rate" in err.error.message, err.error.message
        data = err.error.data
        assert data["reason"] == "rate_limited" and data["principal"] == "key:carol", data
        assert isinstance(data["retryAfterSeconds"], int) and 1 <= data["retryAfterSeconds"] <= 60, data
        # Another principal has its own budget.
        for i in range(5):
            assert await call_text(bob, "demo__echo", {"text": f"b{i}"}) == f"b{i}"

    rows = await poll(
        lambda: calls(gw, principal="key:carol", limit=1000),
        lambda rows: len(rows) >= 61,
        "carol's 61 calls in the audit",
    )
    outcomes = [r["outcome"] for r in rows]
    assert outcomes.count("ok") == 60 and outcomes.count("rate_limited") == 1, outcomes
    assert rows[0]["outcome"] == "rate_limited", "newest first: the 61st call"

    async with httpx.AsyncClient(timeout=10) as http:
        metrics = (await http.get(gw.api_base + "/metrics")).text
    line = [m for m in metrics.splitlines() if m.startswith('vigil_rate_limited_total{principal="key:carol"}')]
    assert line and float(line[0].split()[-1]) >= 1, metrics[-3000:]
    assert 'vigil_rate_limited_total{principal="key:bob"}' not in metrics


async def test_a_call_in_flight_keeps_the_generation_it_was_decided_in(
    vigil: Gateways, demo_bin: Path, tmp_path: Path
) -> None:
    """Issue 31, acceptance 4: a new generation (here, a `[[policy]]` edit
    that denies the tool) is published while a call is surely at the
    backend; the call ends as decided (answered, audited `ok`), the next one
    is decided by the new generation (denied)."""
    gw = gateway(vigil, demo_bin, ["demo__echo"])
    gate = tmp_path / "answer-now"
    inbox = Inbox()
    at_backend = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        at_backend.set()

    async with http_session(gw.url, headers=bearer("alice"), message_handler=inbox) as alice:
        async with anyio.create_task_group() as tg:
            answer: dict[str, Any] = {}

            async def in_flight() -> None:
                answer["result"] = await alice.call_tool(
                    "demo__progress", {"steps": 1, "wait_for": str(gate)}, progress_callback=on_progress
                )

            tg.start_soon(in_flight)
            with anyio.fail_after(DEADLINE):
                await at_backend.wait()

            # The call is at the backend: publish a generation that denies it.
            text = gw.config_path.read_text(encoding="utf-8")
            edited = re.sub(
                r"(?m)^policy = .*$",
                "policy = " + toml_value(policies(["demo__echo"], alice_denies=["demo__progress"])),
                text,
            )
            assert edited != text
            rewrite(gw.config_path, edited)
            await inbox.wait_for(is_tools_list_changed, "alice's list_changed once the edit is in force")
            assert await tool_names(alice) == ALL - {"demo__progress"}
            denied = await call_error(alice, "demo__progress", {"steps": 0})
            assert "demo__progress" in denied.error.message, denied.error
            assert "result" not in answer, "the call was still waiting for its gate"

            gate.write_text("now", encoding="utf-8")
        result = answer["result"]
        assert not result.is_error, result
        assert [c.text for c in result.content if c.type == "text"] == ["done 1"], result

    rows = await poll(
        lambda: calls(gw, limit=100),
        lambda rows: len([r for r in rows if r["principal"] == "key:alice"]) >= 2,
        "alice's two calls in the audit",
    )
    alices = sorted((r["name"], r["outcome"]) for r in rows if r["principal"] == "key:alice")
    assert alices == [("demo__progress", "denied"), ("demo__progress", "ok")], rows
