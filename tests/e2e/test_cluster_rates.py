"""A `[[policy]] rate` holds across replicas: three replicas behind nginx
(round-robin), each enforcing its share of the limit among the replicas
alive (`cluster/rate.rs`, `docs/cluster.md`).

A caller limited to 60 calls a minute calls as fast as it can for about
ten seconds through nginx; it gets the limit's own allowance — the burst
(60) plus 60·T/60 for the T seconds it called — within the stated
tolerance of one call per replica either way (each replica's share of
the burst is rounded up, and its refill counted in whole calls).
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from cluster import Replicas, pg_url, postgres, replicas, start_nginx  # noqa: F401 - fixtures
from harness import Procs, http_backend
from support import ControlApi, http_session, wait_for_tools

pytestmark = pytest.mark.anyio

RATE = 60  # per minute
REPLICAS = ("vigil-a", "vigil-b", "vigil-c")
#: The stated tolerance: one call per replica either way.
TOLERANCE = len(REPLICAS)


async def test_a_rate_holds_across_three_replicas_within_the_tolerance(
    replicas: Replicas,  # noqa: F811
    demo_http: Any,
    procs: Procs,
    tmp_path: Any,
) -> None:
    backend = demo_http("alpha")
    backends = [http_backend("alpha", backend.url)]
    policy = [{"principals": ["*"], "allow": ["*"], "rate": f"{RATE}/min"}]
    gws = {n: replicas.start(n, backends, policy=policy) for n in REPLICAS}
    for gw in gws.values():
        await ControlApi(gw.api_base).wait_state("alpha", "running")
    # Every replica counts the three (their heartbeats are a second apart).
    for gw in gws.values():
        with anyio.fail_after(30):
            while True:
                text = (await ControlApi(gw.api_base).request("GET", "/metrics")).text
                if "vigil_cluster_replicas 3" in text:
                    break
                await anyio.sleep(0.2)
    lb = start_nginx(procs, tmp_path / "nginx", [gw.port for gw in gws.values()])

    ok = limited = 0
    async with http_session(lb.url) as s:
        await wait_for_tools(s, {"alpha__echo"})
        started = time.monotonic()
        while time.monotonic() - started < 10.0:
            try:
                await s.call_tool("alpha__echo", {"text": "x"})
                ok += 1
            except MCPError as e:
                assert e.error.code == -32029, e.error
                limited += 1
        took = time.monotonic() - started
    allowance = RATE + RATE * took / 60
    assert limited > 0, "the caller was limited"
    assert allowance - TOLERANCE <= ok <= allowance + TOLERANCE, (
        f"{ok} calls passed in {took:.1f}s ({limited} limited): the allowance is {allowance:.1f} ± {TOLERANCE}"
    )
