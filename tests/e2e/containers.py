"""A container engine and container backends for end-to-end tests.

Needs a Docker-API container engine reached through `DOCKER_HOST`
(`unix://SOCKET`) and the demo backend's image
`localhost/vigil-demo-backend:test`; `scripts/test.sh` provides both, or by
hand:

    eval "$(bash scripts/container-engine.sh)"   # exports DOCKER_HOST
    bash scripts/container-image.sh

Without them the tests that use `engine` or `box` fail (they are not
skipped): a container runtime that is never tested is not known to work.
The fixtures are made visible to every test module by `conftest.py`.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness import Procs, free_port
from support import DEADLINE, DEMO_TOOLS, prefixed

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
