"""The audit of MCP calls (issue 14, "Audit of calls", acceptance point 6).

Real peers: the official Python SDK as the client of two principals
(`[[auth.keys]]`), the demo backend over stdio, the control API read over
HTTP, and `vigil audit` run as the operator would.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from harness import Gateways, Vigil, demo_stdio_args, run_vigil, stdio_backend
from support import DEADLINE, ControlApi, call_error, call_text, http_session, is_unavailable, poll, text_of

pytestmark = pytest.mark.anyio

ALICE_KEY = "a1ice-9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b"
BOB_KEY = "b0b-0f1e2d3c4b5a69788796a5b4c3d2e1f0"
SESSION_TAG = re.compile(r"s-[0-9a-f]{8}")
BURST = 2000
KEYS_ENV: dict[str, str | None] = {"VIGIL_KEY_ALICE": ALICE_KEY, "VIGIL_KEY_BOB": BOB_KEY}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def audited(vigil: Gateways, demo_bin: Path, **audit: Any) -> Vigil:
    """Two backends (`demo`, and `spare` to quarantine), two keys, `[audit]` as given."""
    return vigil(
        [
            stdio_backend("demo", demo_bin, demo_stdio_args("demo")),
            stdio_backend("spare", demo_bin, demo_stdio_args("spare")),
        ],
        api={},
        auth={"keys": [{"name": "alice", "key_env": "VIGIL_KEY_ALICE"}, {"name": "bob", "key_env": "VIGIL_KEY_BOB"}]},
        env=KEYS_ENV,
        **({"audit": audit} if audit else {}),
    )


async def calls(gw: Vigil, **query: Any) -> list[dict[str, Any]]:
    """`GET /api/v1/audit/calls` with `query`: the calls, newest first."""
    return (await ControlApi(gw.api_base).get_json(f"/api/v1/audit/calls?{httpx.QueryParams(query)}"))["calls"]


async def test_calls_of_two_principals_are_recorded_with_outcome_duration_and_masked_arguments(
    vigil: Gateways, demo_bin: Path
) -> None:
    gw = audited(vigil, demo_bin, arguments=True)
    api = ControlApi(gw.api_base)
    await api.wait_state("spare", "running")
    async with http_session(gw.url, headers=bearer(ALICE_KEY)) as alice:
        # A configured secret (bob's key) in the arguments.
        assert await call_text(alice, "demo__echo", {"text": f"my key is {BOB_KEY}"}) == f"my key is {BOB_KEY}"
        with anyio.fail_after(DEADLINE):
            assert text_of(await alice.read_resource("demo://demo/readme")) == "Hello from demo"
            await alice.get_prompt("demo__greet", {"name": "Ada"})
        # A name nobody serves reaches no backend: not recorded.
        await call_error(alice, "nosuch__tool")
    async with http_session(gw.url, headers=bearer(BOB_KEY)) as bob:
        with anyio.fail_after(DEADLINE):
            failed = await bob.call_tool("demo__fail", {"message": "on purpose"})
        assert failed.is_error
        await api.act_ok("spare", "quarantine", {"reason": "audit test"})
        await api.wait_state("spare", "quarantined")
        down = await call_error(bob, "spare__echo", {"text": "anyone?"})
        assert is_unavailable(down, "spare"), down

    rows = await poll(lambda: calls(gw), lambda r: len(r) >= 5, "five calls in the audit")
    assert len(rows) == 5, rows
    seen = [(r["principal"], r["method"], r["name"], r["backend"], r["outcome"]) for r in reversed(rows)]
    assert seen == [
        ("key:alice", "tools/call", "demo__echo", "demo", "ok"),
        ("key:alice", "resources/read", "demo://demo/readme", "demo", "ok"),
        ("key:alice", "prompts/get", "demo__greet", "demo", "ok"),
        ("key:bob", "tools/call", "demo__fail", "demo", "error"),
        ("key:bob", "tools/call", "spare__echo", "spare", "unavailable"),
    ], rows
    ids = [r["id"] for r in rows]
    assert ids == sorted(ids, reverse=True), "newest first"
    for r in rows:
        assert isinstance(r["duration_us"], int) and r["duration_us"] > 0, r
        assert r["session"] is None or SESSION_TAG.fullmatch(r["session"]), r
    echo = rows[-1]
    assert echo["arguments"] == {"text": "my key is ***"}, echo
    assert rows[-3]["arguments"] == {"name": "Ada"}
    assert "arguments" not in rows[-2], "resources/read has no arguments"

    # Filters, and a follower's cursor (oldest first after an id).
    assert [r["name"] for r in await calls(gw, principal="key:bob")] == ["spare__echo", "demo__fail"]
    assert [r["outcome"] for r in await calls(gw, outcome="unavailable", backend="spare")] == ["unavailable"]
    after = await calls(gw, after=ids[-1], limit=2)
    assert [r["id"] for r in after] == sorted(ids)[1:3]
    assert len(await calls(gw, since="10m")) == 5
    assert await calls(gw, since="2000-01-01T00:00:00+02:00", principal="key:nobody") == []
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        for query, says in [
            ("outcome=fine", "unknown outcome `fine`: use one of ok, error, denied, rate_limited, unavailable"),
            ("since=yesterday", "since: `yesterday` is neither an RFC 3339 time"),
            ("limit=0", "limit: `0` is not a number from 1 to 10000"),
            ("colour=red", "unknown field `colour`"),
        ]:
            r = await http.get(f"{gw.api_base}/api/v1/audit/calls?{query}")
            assert r.status_code == 400, (query, r.text)
            assert says in r.json()["error"]["message"], (query, r.text)

    # `vigil audit --json`, as an operator runs it.
    cli = run_vigil(vigil.vigil_bin, ["audit", "--api", gw.api_base, "--json"], vigil.dir)
    assert cli.returncode == 0, cli.stderr
    assert [r["id"] for r in json.loads(cli.stdout)["calls"]] == ids
    table = run_vigil(vigil.vigil_bin, ["audit", "--api", gw.api_base, "--outcome", "error"], vigil.dir)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["TIME", "PRINCIPAL", "BACKEND", "METHOD", "OUTCOME", "DURATION", "SESSION", "NAME"]
    assert len(lines) == 2 and "key:bob" in lines[1] and lines[1].endswith("demo__fail"), table.stdout
    bad = run_vigil(vigil.vigil_bin, ["audit", "--api", gw.api_base, "--outcome", "fine"], vigil.dir)
    assert bad.returncode == 5 and "unknown outcome" in bad.stderr, (bad.returncode, bad.stderr)

    # The secret is nowhere in what the API or the CLI answer.
    for text in [json.dumps(rows), cli.stdout, table.stdout, gw.proc.stderr()]:
        assert BOB_KEY not in text and ALICE_KEY not in text


async def test_a_burst_of_2000_calls_is_all_recorded_and_survives_a_restart(vigil: Gateways, demo_bin: Path) -> None:
    gw = audited(vigil, demo_bin)
    workers = 20

    async with http_session(gw.url, headers=bearer(ALICE_KEY)) as alice:

        async def worker(k: int) -> None:
            for i in range(k, BURST, workers):
                result = await alice.call_tool("demo__add", {"a": i, "b": 1})
                assert not result.is_error, text_of(result)

        # Bounded: a burst on a loaded machine takes a while, but not forever.
        with anyio.fail_after(10 * DEADLINE):
            async with anyio.create_task_group() as tg:
                for k in range(workers):
                    tg.start_soon(worker, k)
        assert await call_text(alice, "demo__echo", {"text": "after"}) == "after"

    def complete(rows: list[dict[str, Any]]) -> bool:
        return sum(r["name"] == "demo__add" for r in rows) >= BURST and rows[0]["name"] == "demo__echo"

    rows = await poll(lambda: calls(gw, principal="key:alice", limit=10000), complete, f"{BURST} calls in the audit")
    burst = [r for r in rows if r["name"] == "demo__add"]
    assert len(burst) == BURST and len(rows) == BURST + 1
    assert all(r["outcome"] == "ok" and r["duration_us"] > 0 for r in burst)
    assert "arguments" not in burst[0], "arguments are off by default"
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        metrics = (await http.get(f"{gw.api_base}/metrics")).text
    dropped = re.findall(r"^vigil_audit_dropped_total\{[^}]*\} (\d+)", metrics, re.MULTILINE)
    assert all(int(n) == 0 for n in dropped), dropped

    # Stopped and started again on the same data_dir: every row is there.
    again = vigil.serve_again(gw, env=KEYS_ENV)
    after = await calls(again, principal="key:alice", limit=10000)
    assert [r["id"] for r in after] == [r["id"] for r in rows]
    assert after == rows
    newest = ["audit", "--api", again.api_base, "--json", "--principal", "key:alice", "--limit", "1"]
    cli = run_vigil(vigil.vigil_bin, newest, vigil.dir)
    assert cli.returncode == 0, cli.stderr
    assert [r["name"] for r in json.loads(cli.stdout)["calls"]] == ["demo__echo"]
