"""Health of a backend that Vigil runs as a container (runtime `container`).

The engine and the container backend come from `containers.py` (see there
for what they need).

- the container is killed through the engine: the history shows it went
  offline (exit 137 / SIGKILL), was restarted and runs again; its tools leave
  and return;
- the engine becomes unreachable while the backend runs (Vigil was given a
  symlink to the engine's socket, which the test removes): the backend is
  `unknown`, not offline, nothing is restarted, and it keeps serving.

Each test names its backend (and so its container, `vigil-NAME`) uniquely,
and removes the container at the end whatever happened.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from containers import RESTART_CYCLE, Box, Engine
from harness import Gateways
from support import (
    ControlApi,
    call_text,
    find_run,
    http_session,
    short,
    wait_for_tools,
)

pytestmark = pytest.mark.anyio


async def test_killed_container_goes_offline_and_is_restarted(vigil: Gateways, engine: Engine, box: Box) -> None:
    """The engine kills the container: offline with exit 137 / SIGKILL, restarted, running; its tools return."""
    # A 2 s backoff leaves a window in which the backend is visibly down.
    gw = vigil([box.config()], api={}, restart={"base": "2s"})
    api = ControlApi(gw.api_base)
    async with http_session(gw.url) as s:
        await wait_for_tools(s, box.tools)
        before = await api.wait_state(box.name, "running")
        assert before["runtime"] == "container", short(before)

        await anyio.to_thread.run_sync(engine.kill, box.container)

        await wait_for_tools(s, set(), absent=box.tools)
        start = len(before["transitions"])
        detail = await api.wait_for(
            box.name,
            lambda d: d["state"] == "running" and find_run(d["transitions"], RESTART_CYCLE, start) is not None,
            f"history to show {' > '.join(RESTART_CYCLE)} after the kill",
        )
        i = find_run(detail["transitions"], RESTART_CYCLE, start)
        assert i is not None
        cycle = detail["transitions"][i : i + len(RESTART_CYCLE) - 1]
        assert all(t["reason"].strip() for t in cycle), f"empty reason in {short(cycle)}"
        went = cycle[0]["reason"]
        assert "137" in went or "SIGKILL" in went, f"the offline reason should give the exit: {went!r}"
        assert detail["restart_count"] == before["restart_count"] + 1, short(detail)

        await wait_for_tools(s, box.tools)
        assert await call_text(s, f"{box.name}__whoami") == "box"


async def test_unreachable_engine_makes_the_backend_unknown_not_restarted(
    vigil: Gateways, engine: Engine, box: Box, tmp_path: Path
) -> None:
    """The engine's socket goes away: `unknown` (not offline), no restart, MCP calls still served."""
    link = tmp_path / "engine.sock"
    link.symlink_to(engine.socket)
    gw = vigil(
        [box.config(health={"interval": "1s", "timeout": "1s"})],
        api={},
        env={"DOCKER_HOST": f"unix://{link}"},
    )
    api = ControlApi(gw.api_base)
    async with http_session(gw.url) as s:
        await wait_for_tools(s, box.tools)
        before = await api.wait_state(box.name, "running")
        start = len(before["transitions"])

        link.unlink()
        try:
            detail = await api.wait_state(box.name, "unknown", "offline", "restarting")
            assert detail["state"] == "unknown", f"an unreachable engine is not the backend's fault: {short(detail)}"
            assert "engine" in detail["reason"], f"the reason should name the engine: {detail['reason']!r}"

            # Still served while Vigil cannot tell, and never restarted for it: watch a few probes.
            assert await call_text(s, f"{box.name}__whoami") == "box"
            with anyio.move_on_after(3.0):
                while True:
                    now = await api.instance(box.name)
                    since = now["transitions"][start:]
                    assert now["state"] == "unknown", short(now)
                    assert not [t for t in since if t["to"] in ("offline", "restarting", "starting")], short(since)
                    assert now["restart_count"] == before["restart_count"], short(now)
                    await anyio.sleep(0.2)
            assert await call_text(s, f"{box.name}__echo", {"text": "still served"}) == "still served"
            assert box.tools <= {t.name for t in (await s.list_tools()).tools}
        finally:
            # Give vigil its engine back, so that it can stop the container at teardown.
            if not link.is_symlink():
                link.symlink_to(engine.socket)
