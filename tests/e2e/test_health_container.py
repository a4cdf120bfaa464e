"""Health of a backend that Vigil runs as a container (runtime `container`).

Needs a Docker-API container engine reached through `DOCKER_HOST`
(`unix://SOCKET`) and the demo backend's image
`localhost/vigil-demo-backend:test`; `scripts/test.sh` provides both, or by
hand:

    eval "$(bash scripts/container-engine.sh)"   # exports DOCKER_HOST
    bash scripts/container-image.sh

Without them these tests fail (they are not skipped): a container runtime
that is never tested is not known to work.

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

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from harness import Gateways, Procs, free_port
from support import (
    DEADLINE,
    DEMO_TOOLS,
    ControlApi,
    call_text,
    find_run,
    http_session,
    prefixed,
    short,
    wait_for_tools,
)

pytestmark = pytest.mark.anyio

IMAGE = os.environ.get("VIGIL_TEST_IMAGE", "localhost/vigil-demo-backend:test")
SETUP = (
    'run `eval "$(bash scripts/container-engine.sh)"` (it exports DOCKER_HOST) '
    "and `bash scripts/container-image.sh`, or `bash scripts/test.sh`, which does both"
)

#: What a restart looks like in the history, from the moment the backend went down.
RESTART_CYCLE = ["running", "offline", "restarting", "starting", "running"]


@dataclass
class Engine:
    """The container engine's Docker API over its unix socket."""

    socket: Path

    def request(self, method: str, path: str, **params: Any) -> httpx.Response:
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(self.socket)), timeout=DEADLINE) as client:
            return client.request(method, f"http://engine{path}", params=params or None)

    def kill(self, container: str, signal: str = "KILL") -> None:
        resp = self.request("POST", f"/containers/{container}/kill", signal=signal)
        assert resp.status_code == 204, f"kill {container}: HTTP {resp.status_code} {resp.text[:300]}"

    def remove(self, container: str) -> None:
        resp = self.request("DELETE", f"/containers/{container}", force="true")
        assert resp.status_code in (200, 204, 404), f"remove {container}: HTTP {resp.status_code} {resp.text[:300]}"


@pytest.fixture
def engine() -> Engine:
    """The engine named by `DOCKER_HOST`, answering, with the demo image in it; else the test fails."""
    host = os.environ.get("DOCKER_HOST", "").strip()
    if not host:
        pytest.fail(f"DOCKER_HOST is not set: these tests need a container engine; {SETUP}", pytrace=False)
    if not host.startswith("unix://"):
        pytest.fail(f"DOCKER_HOST={host}: these tests reach the engine over a unix socket; {SETUP}", pytrace=False)
    eng = Engine(Path(host.removeprefix("unix://")))
    try:
        ping = eng.request("GET", "/_ping")
    except httpx.HTTPError as exc:
        pytest.fail(f"the container engine at {host} does not answer ({exc!r}); {SETUP}", pytrace=False)
    if ping.status_code != 200:
        pytest.fail(f"the container engine at {host} answers /_ping: HTTP {ping.status_code}; {SETUP}", pytrace=False)
    image = eng.request("GET", f"/images/{IMAGE}/json")
    if image.status_code != 200:
        pytest.fail(f"image {IMAGE} is not in the engine at {host} (HTTP {image.status_code}); {SETUP}", pytrace=False)
    return eng


@dataclass
class Box:
    """A container backend: the demo image serving MCP over HTTP on a host loopback port."""

    name: str
    port: int

    @property
    def container(self) -> str:
        return f"vigil-{self.name}"

    @property
    def tools(self) -> set[str]:
        return prefixed(self.name, DEMO_TOOLS)

    def config(self, **more: Any) -> dict[str, Any]:
        return {
            "name": self.name,
            "transport": "http",
            "runtime": "container",
            "image": IMAGE,
            "args": ["--transport", "http", "--listen", f"127.0.0.1:{self.port}", "--name", "box"],
            "network": "host",
            "url": f"http://127.0.0.1:{self.port}/mcp",
            **more,
        }


@pytest.fixture
def box(engine: Engine, procs: Procs) -> Iterator[Box]:
    """A uniquely named container backend; at the end vigil is stopped, then its container removed."""
    b = Box(f"box-{uuid.uuid4().hex[:8]}", free_port())
    try:
        yield b
    finally:
        # Stopped first, vigil cannot start the container again once it is removed.
        procs.stop_all()
        engine.remove(b.container)


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
