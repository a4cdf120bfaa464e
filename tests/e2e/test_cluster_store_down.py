"""PostgreSQL stopped and started under load, with two replicas serving.

Clients keep calling through both replicas while the server is stopped
(until the lease holder has stopped supervising) and started again: no replica
crashes, every call made is in the call audit afterwards (counted), and
a replica holds the shared backend's lease again. A replica started while
the server is down serves its stdio backend meanwhile and supervises the
shared one once the server is back.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from cluster import Postgres, Replicas, pg_url, postgres, replicas  # noqa: F401 - fixtures
from harness import demo_stdio_args, http_backend, stdio_backend
from support import DEADLINE, ControlApi, call_text, http_session, wait_for_tools

pytestmark = pytest.mark.anyio


def db(url: str) -> str:
    return url.rsplit("/", 1)[1]


def live_holder(pg: Postgres, url: str, backend: str) -> str | None:
    out = pg.psql(f"SELECT holder FROM leases WHERE backend = '{backend}' AND expires_at > now()", db(url))
    return out or None


async def test_a_store_outage_under_load_loses_no_audit_row_and_supervision_resumes(
    replicas: Replicas,  # noqa: F811
    postgres: Postgres,  # noqa: F811
    pg_url: str,  # noqa: F811
    demo_http: Any,
) -> None:
    backend = demo_http("alpha")
    backends = [http_backend("alpha", backend.url)]
    gws = {n: replicas.start(n, backends) for n in ("vigil-a", "vigil-b")}
    for gw in gws.values():
        await ControlApi(gw.api_base).wait_state("alpha", "running")

    made = {"calls": 0}
    stop_calling = anyio.Event()

    async def caller(url: str, who: str) -> None:
        async with http_session(url) as s:
            await wait_for_tools(s, {"alpha__echo"})
            n = 0
            while not stop_calling.is_set():
                text = f"{who}-{n}"
                assert await call_text(s, "alpha__echo", {"text": text}) == text
                made["calls"] += 1
                n += 1
                await anyio.sleep(0.01)

    async def calls_pass(n: int, what: str) -> None:
        """Until `n` more calls went through."""
        target = made["calls"] + n
        try:
            with anyio.fail_after(DEADLINE):
                while made["calls"] < target:
                    await anyio.sleep(0.05)
        except TimeoutError:
            raise AssertionError(f"calls stopped going through {what}: {made['calls']} made") from None

    async def no_replica_supervises() -> None:
        """Until no replica says it holds alpha's lease (its metric)."""
        with anyio.fail_after(DEADLINE):
            while True:
                held = [
                    name
                    for name, gw in gws.items()
                    if 'vigil_lease_held{backend="alpha"} 1'
                    in (await ControlApi(gw.api_base).request("GET", "/metrics")).text
                ]
                if not held:
                    return
                await anyio.sleep(0.1)

    try:
        async with anyio.create_task_group() as tg:
            for name, gw in gws.items():
                tg.start_soon(caller, gw.url, name)
            await calls_pass(50, "before the outage")
            before_outage = made["calls"]
            await anyio.to_thread.run_sync(postgres.stop)
            # The holder's lease runs out without renewals: it stops
            # supervising; calls go on meanwhile.
            await no_replica_supervises()
            await calls_pass(50, "during the outage")
            during = made["calls"] - before_outage
            await anyio.to_thread.run_sync(postgres.start)
            with anyio.fail_after(DEADLINE):
                while live_holder(postgres, pg_url, "alpha") not in gws:
                    await anyio.sleep(0.1)
            await calls_pass(50, "after the outage")
            stop_calling.set()
    finally:
        if postgres.proc.poll() is not None:
            postgres.start()
    assert during > 0, "calls went on while the store was down"
    for name, gw in gws.items():
        assert gw.proc.alive(), f"{name} crashed: {gw.proc.stderr()[-2000:]}"

    # Every call is in the audit (written when the store came back).
    total = made["calls"]
    deadline = time.monotonic() + DEADLINE
    while True:
        stored = int(postgres.psql("SELECT count(*) FROM calls WHERE name = 'alpha__echo'", db(pg_url)))
        if stored >= total or time.monotonic() > deadline:
            break
        await anyio.sleep(0.2)
    assert stored == total, f"{total} calls made, {stored} in the audit"
    for name, gw in gws.items():
        metrics = (await ControlApi(gw.api_base).request("GET", "/metrics")).text
        assert "vigil_audit_queued 0" in metrics, f"{name} holds no record any more"
        assert 'vigil_audit_dropped_total{reason="' not in metrics, f"{name} dropped records"

    # A replica holds the lease again, and supervises: its probes go on.
    with anyio.fail_after(DEADLINE):
        while live_holder(postgres, pg_url, "alpha") not in gws:
            await anyio.sleep(0.1)
    holder = live_holder(postgres, pg_url, "alpha")
    assert holder in gws
    detail = await ControlApi(gws[holder].api_base).wait_state("alpha", "running")
    assert detail["state"] == "running"


async def test_a_replica_started_while_the_store_is_down_serves_and_catches_up(
    replicas: Replicas,  # noqa: F811
    postgres: Postgres,  # noqa: F811
    pg_url: str,  # noqa: F811
    demo_http: Any,
    demo_bin: Any,
) -> None:
    backend = demo_http("alpha")
    backends = [http_backend("alpha", backend.url), stdio_backend("local", demo_bin, demo_stdio_args("local"))]
    await anyio.to_thread.run_sync(postgres.stop)
    try:
        gw = replicas.start("vigil-a", backends)
        api = ControlApi(gw.api_base)
        # The stdio backend is served; the shared one waits for its lease.
        async with http_session(gw.url) as s:
            await wait_for_tools(s, {"local__echo"})
            assert await call_text(s, "local__echo", {"text": "meanwhile"}) == "meanwhile"
        assert "out of reach" in gw.proc.stderr()
        shared = next(r for r in await api.instances() if r["name"] == "alpha")
        assert shared["state"] != "running", shared
    finally:
        await anyio.to_thread.run_sync(postgres.start)
    await api.wait_state("alpha", "running")
    assert live_holder(postgres, pg_url, "alpha") == "vigil-a"
    async with http_session(gw.url) as s:
        await wait_for_tools(s, {"alpha__echo", "local__echo"})
