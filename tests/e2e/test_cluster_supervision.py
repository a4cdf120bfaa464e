"""One supervisor per shared backend among replicas on PostgreSQL.

Two or three `vigil serve` replicas share one database (`cluster.py`) and
serve one container backend (`containers.py`). The lease table says which
replica supervises it; the others follow: they show its state and serve
its tools over connections of their own.

- the lease holder is killed (SIGKILL), then the container: exactly one
  restart (the engine's start events are counted), made by the replica
  that took the lease after the old one ran out (the order is read from
  the store), and the history stays continuous;
- a follower shows the holder's state and serves the backend's tools,
  and hears when the holder sees the backend go down;
- operator actions through any replica (its API or `vigil status`) take
  effect on the holder, and the audit has each with its principal;
- another replica's instance of a stdio backend (`NAME.REPLICA`) is read
  and acted on through any replica.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from cluster import Postgres, Replicas, pg_url, postgres, replicas  # noqa: F401 - fixtures
from containers import Box, Engine
from harness import demo_stdio_args, http_backend, run_vigil, stdio_backend
from support import ControlApi, call_text, http_session, poll, short, wait_for_tools

pytestmark = pytest.mark.anyio


def holder(pg: Postgres, url: str, backend: str) -> str | None:
    db = url.rsplit("/", 1)[1]
    out = pg.psql(f"SELECT holder FROM leases WHERE backend = '{backend}' AND expires_at > now()", db)
    return out or None


async def wait_holder(pg: Postgres, url: str, backend: str, among: set[str]) -> str:
    with anyio.fail_after(60):
        while True:
            h = await anyio.to_thread.run_sync(holder, pg, url, backend)
            if h in among:
                return h
            await anyio.sleep(0.1)


def start_events(engine: Engine, container: str, since: int) -> list[dict[str, Any]]:
    """The engine's `start` events of `container` since `since` (unix seconds), up to now."""
    filters = json.dumps({"container": [container], "event": ["start"], "type": ["container"]})
    resp = engine.request("GET", "/events", since=str(since), until=str(int(time.time()) + 1), filters=filters)
    assert resp.status_code == 200, resp.text[:300]
    return [json.loads(line) for line in resp.text.splitlines() if line.strip()]


async def starts_once_seen(engine: Engine, container: str, since: int, count: int) -> list[dict[str, Any]]:
    """The `start` events of `container`, read again until at least `count` are there.

    The engine writes its event log apart from answering the start, and a
    read racing a write may miss the newest line; a later read sees it. The
    caller asserts the exact count, so a surplus start still fails.
    """
    return await poll(
        lambda: anyio.to_thread.run_sync(start_events, engine, container, since),
        lambda starts: len(starts) >= count,
        f"{count} start event(s) of {container} in the engine's log",
    )


def assert_continuous(transitions: list[dict[str, Any]]) -> None:
    for before, after in zip(transitions, transitions[1:], strict=False):
        assert after["from"] == before["to"], f"a gap in the history: {short(before)} then {short(after)}"


async def test_a_killed_holder_is_replaced_and_its_container_restarted_once(
    replicas: Replicas, postgres: Postgres, pg_url: str, engine: Engine, box: Box  # noqa: F811
) -> None:
    """Kill the lease holder, then the container: one restart, by the new holder, after the old lease ran out."""
    since = int(time.time()) - 1
    backends = [box.config(health={"interval": "1s", "timeout": "1s"})]
    gws = {n: replicas.start(n, backends, lease="3s", restart={"base": "500ms"}) for n in ("vigil-a", "vigil-b")}
    first = await wait_holder(postgres, pg_url, box.name, set(gws))
    other = next(n for n in gws if n != first)
    api_first, api_other = ControlApi(gws[first].api_base), ControlApi(gws[other].api_base)
    await api_first.wait_state(box.name, "running")
    # The follower shows the holder's state and serves the tools itself.
    following = await api_other.wait_state(box.name, "running")
    assert following["restart_count"] == 0, short(following)
    async with http_session(gws[other].url) as s:
        await wait_for_tools(s, box.tools)
        assert await call_text(s, f"{box.name}__whoami") == "box"
    assert len(await starts_once_seen(engine, box.container, since, 1)) == 1, "started once, by one replica"

    replicas.kill(first)
    await anyio.to_thread.run_sync(engine.kill, box.container)

    detail = await api_other.wait_for(
        box.name,
        lambda d: d["state"] == "running" and d["restart_count"] == 1,
        "running again after one restart",
    )
    assert await wait_holder(postgres, pg_url, box.name, {other}) == other
    async with http_session(gws[other].url) as s:
        await wait_for_tools(s, box.tools)
        assert await call_text(s, f"{box.name}__whoami") == "box"
    starts = await starts_once_seen(engine, box.container, since, 2)
    assert len(starts) == 2, f"one start, then exactly one restart: {short(starts)}"

    db = pg_url.rsplit("/", 1)[1]
    # The new holder took the lease after the old one ran out…
    taken = postgres.psql(
        f"SELECT taken_from, acquired_at >= previous_expires_at FROM leases WHERE backend = '{box.name}'", db
    )
    assert taken == f"{first}|t", taken
    # …and every transition since was its own, made after it took over.
    rows = postgres.psql(
        "SELECT t.replica, t.from_state, t.to_state, t.at >= (extract(epoch FROM l.acquired_at) * 1000)::bigint "
        f"FROM transitions t, leases l WHERE l.backend = t.backend AND t.backend = '{box.name}' ORDER BY t.id",
        db,
    ).splitlines()
    after = [r for r in rows if r.endswith("|t")]
    assert after, f"the restart was recorded: {rows}"
    assert all(r.startswith(f"{other}|") for r in after), rows
    assert [r.split("|")[1:3] for r in after][:2] == [["running", "offline"], ["offline", "restarting"]], rows
    assert all(r.startswith(f"{first}|") for r in rows if r.endswith("|f")), rows
    assert_continuous(detail["transitions"])


async def test_a_follower_hears_the_backend_go_down_and_come_back(
    replicas: Replicas, postgres: Postgres, pg_url: str, engine: Engine, box: Box  # noqa: F811
) -> None:
    """The holder restarts the container; a follower's session loses the tools and gets them back."""
    backends = [box.config(health={"interval": "1s", "timeout": "1s"})]
    gws = {n: replicas.start(n, backends, lease="3s", restart={"base": "2s"}) for n in ("vigil-a", "vigil-b")}
    first = await wait_holder(postgres, pg_url, box.name, set(gws))
    other = next(n for n in gws if n != first)
    api_other = ControlApi(gws[other].api_base)
    await api_other.wait_state(box.name, "running")
    async with http_session(gws[other].url) as s:
        await wait_for_tools(s, box.tools)
        await anyio.to_thread.run_sync(engine.kill, box.container)
        await wait_for_tools(s, set(), absent=box.tools)
        down = await api_other.wait_state(box.name, "offline", "restarting", "starting")
        assert down["restart_count"] <= 1, short(down)
        await wait_for_tools(s, box.tools)
        back = await api_other.wait_for(box.name, lambda d: d["state"] == "running", "running again")
        assert back["restart_count"] == 1, short(back)
        assert await call_text(s, f"{box.name}__whoami") == "box"
    # Only the holder acted: the follower never held the lease.
    assert holder(postgres, pg_url, box.name) == first


TOKENS = [
    {"name": name, "token": f"{name}-token-0123456789abcdef0123", "role": "operator"}
    for name in ("alice", "bob", "carol")
]


def as_(gw: Any, name: str) -> ControlApi:
    token = next(t["token"] for t in TOKENS if t["name"] == name)
    return ControlApi(gw.api_base, token)


async def test_operator_actions_through_any_replica_act_on_the_holder(
    replicas: Replicas,  # noqa: F811
    demo_http: Any,
    vigil_bin: Path,
) -> None:
    """Quarantine through A, `vigil status` through B, release through C: each takes effect on the holder."""
    backend = demo_http("alpha")
    backends = [http_backend("alpha", backend.url)]
    gws = {
        n: replicas.start(n, backends, api={"tokens": TOKENS}, health={"interval": "1s", "timeout": "1s"})
        for n in ("vigil-a", "vigil-b", "vigil-c")
    }
    for n, gw in gws.items():
        await as_(gw, "bob").wait_state("alpha", "running")
    a, b, c = gws["vigil-a"], gws["vigil-b"], gws["vigil-c"]

    held = await as_(a, "alice").act_ok("alpha", "quarantine", {"reason": "cluster test"})
    assert held["state"] == "quarantined", short(held)
    # Every replica shows it, and hides the tools.
    for gw in gws.values():
        await as_(gw, "bob").wait_state("alpha", "quarantined")
        async with http_session(gw.url) as s:
            await wait_for_tools(s, set(), absent={"alpha__echo"})

    def status() -> tuple[int, str]:
        done = run_vigil(vigil_bin, ["status", "--api", b.api_base, "--token", TOKENS[1]["token"]], b.config_path.parent)
        return done.returncode, done.stdout

    code, table = await anyio.to_thread.run_sync(status)
    row = next(line for line in table.splitlines() if line.split() and line.split()[0] == "alpha")
    assert row.split()[1] == "quarantined" and "cluster test" in table, table
    assert code == 3, table

    released = await as_(c, "carol").act_ok("alpha", "release")
    assert released["state"] in ("restarting", "starting", "running"), short(released)
    for gw in gws.values():
        await as_(gw, "bob").wait_state("alpha", "running")
        async with http_session(gw.url) as s:
            await wait_for_tools(s, {"alpha__echo"})
            assert await call_text(s, "alpha__echo", {"text": "back"}) == "back"

    # A remote backend cannot be restarted: the holder's refusal comes
    # back through the replica asked.
    refused = await as_(b, "bob").act("alpha", "restart")
    assert refused.status_code == 409 and "cannot be restarted" in refused.text, refused.text
    # Once more the other way round: quarantine through B, release through A.
    await as_(b, "bob").act_ok("alpha", "quarantine", {"reason": "again"})
    await as_(c, "carol").wait_state("alpha", "quarantined")
    await as_(a, "alice").act_ok("alpha", "release")
    await as_(b, "bob").wait_state("alpha", "running")

    # The audit, read through any replica, has all three with their principals.
    entries = (await as_(a, "alice").get_json("/api/v1/audit?limit=50"))["entries"]
    acted = [(e["principal"], e["action"], e["target"], e["outcome"]) for e in entries]
    expected = [
        ("alice", "quarantine", "alpha", "ok"),
        ("carol", "release", "alpha", "ok"),
        ("bob", "quarantine", "alpha", "ok"),
        ("alice", "release", "alpha", "ok"),
    ]
    assert [x for x in acted if x in expected] == expected, acted
    refusals = [(p, act, t) for p, act, t, out in acted if out.startswith("error")]
    assert ("bob", "restart", "alpha") in refusals, acted


async def test_another_replicas_stdio_instance_is_acted_on_through_any_replica(
    replicas: Replicas,  # noqa: F811
    demo_bin: Path,
    vigil_bin: Path,
) -> None:
    """Each replica runs its own process of a stdio backend, recorded as
    `NAME.REPLICA`; `local.vigil-b` restarted through A is b's process, and
    A's list of instances and `vigil status` show it as b recorded it."""
    backends = [stdio_backend("local", demo_bin, demo_stdio_args("local"))]
    gws = {n: replicas.start(n, backends, api={"tokens": TOKENS}) for n in ("vigil-a", "vigil-b")}
    a, b = gws["vigil-a"], gws["vigil-b"]
    await as_(a, "alice").wait_state("local", "running")
    await as_(b, "bob").wait_state("local", "running")
    # a knows b once b's heartbeat is read.
    detail = await poll(
        lambda: as_(a, "alice").request("GET", "/api/v1/health/instances/local.vigil-b"),
        lambda r: r.status_code == 200,
        "b's instance readable through a",
    )
    assert detail.json()["state"] == "running", detail.text
    restarted = await as_(a, "alice").act_ok("local.vigil-b", "restart")
    assert restarted["name"] == "local.vigil-b", short(restarted)
    after = await as_(b, "bob").wait_for("local", lambda d: d["restart_count"] == 1 and d["state"] == "running", "b's own instance restarted")
    assert after["restart_count"] == 1
    mine = await as_(a, "alice").instance("local")
    assert mine["restart_count"] == 0, "a's own instance is untouched"
    history = (await as_(a, "alice").instance("local.vigil-b"))["transitions"]
    assert any("restart requested by alice" in t["reason"] for t in history), history
    # The whole cluster's instances, listed through a.
    def listed(reports: Any) -> dict[str, Any]:
        return {r["name"]: r for r in reports.get("instances", [])}

    reports = await poll(
        lambda: as_(a, "alice").get_json("/api/v1/health/instances"),
        lambda r: listed(r).get("local.vigil-b", {}).get("restart_count") == 1,
        "b's restarted instance in a's list",
    )
    assert listed(reports)["local"]["restart_count"] == 0, short(reports)
    assert listed(reports)["local.vigil-b"]["runtime"] == "process", short(reports)
    assert "local.vigil-a" not in listed(reports), "a's own instance is listed under its name here"
    done = await anyio.to_thread.run_sync(
        lambda: run_vigil(vigil_bin, ["status", "--api", a.api_base, "--token", TOKENS[0]["token"]], a.config_path.parent)
    )
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines() if line.split()}
    assert rows.get("local.vigil-b", [None, None])[1] == "running", done.stdout
    unknown = await as_(a, "alice").act("local.vigil-z", "restart")
    assert unknown.status_code == 404, unknown.text
