"""One cluster, seen from any replica: each replica publishes a digest of
what it serves, and one serving another configuration is reported by
`vigil status`, the instances API and the dashboard of every replica.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from browser import Page
from cluster import Replicas, pg_url, postgres, replicas  # noqa: F401 - fixtures
from harness import http_backend, run_vigil
from support import ControlApi, poll

pytestmark = pytest.mark.anyio

OPERATOR = {"name": "oncall", "token": "operator-token-0123456789abcdef", "role": "operator"}


async def test_a_replica_with_another_configuration_is_reported_everywhere(
    replicas: Replicas,  # noqa: F811
    demo_http: Any,
    vigil_bin: Path,
    browser: Page,
) -> None:
    alpha, beta = demo_http("alpha"), demo_http("beta")
    same = [http_backend("alpha", alpha.url)]
    api = {"tokens": [OPERATOR]}
    a = replicas.start("vigil-a", same, api=api)
    b = replicas.start("vigil-b", same, api=api)
    api_a = ControlApi(a.api_base, OPERATOR["token"])

    async def warnings() -> list[str]:
        return (await api_a.get_json("/api/v1/health/instances")).get("warnings", [])

    # Two replicas with one configuration: nothing to say.
    await api_a.wait_state("alpha", "running")
    assert not [w for w in await warnings() if "replica" in w], await warnings()

    # A third serves one more backend.
    replicas.start("vigil-c", [*same, http_backend("beta", beta.url)], api=api)
    said = await poll(warnings, lambda w: any("`vigil-c` serves another configuration" in x for x in w), "a warning naming vigil-c")
    assert not any("vigil-b" in x for x in said), said

    async def status_of_b() -> str:
        done = await anyio.to_thread.run_sync(
            lambda: run_vigil(vigil_bin, ["status", "--api", b.api_base, "--token", OPERATOR["token"]], b.config_path.parent)
        )
        return done.stdout

    # b reads the replicas every second, like a.
    table = await poll(status_of_b, lambda out: "vigil-c" in out, "`vigil status` through b to name vigil-c")
    assert "`vigil-c` serves another configuration" in table, table

    def shown() -> list[str]:
        browser.open(f"{a.api_base}/ui#token={OPERATOR['token']}")
        return browser.wait(
            lambda: [li.text for li in browser.all("#warnings li")],
            lambda items: any("vigil-c" in t for t in items),
            "the dashboard to show the warning",
        )

    items = await anyio.to_thread.run_sync(shown)
    assert any("serves another configuration" in t for t in items), items
