"""Fixtures for Vigil's end-to-end tests (helpers live in `harness.py`).

- `procs`: starts processes for one test, stops them all at teardown, and
  attaches their captured output to the report of a failed test;
- `demo_http`: starts an HTTP demo backend and waits until it answers;
- `vigil`: writes a config into the test's directory, runs
  `vigil serve --config FILE` and waits until `/mcp` (and, when asked, the
  control API) answers; `vigil.serve_again(gw)` restarts it on the same
  config;
- `vigil_bin`, `demo_bin`: the binaries under test;
- `anyio_backend`: async tests (`@pytest.mark.anyio`) run on asyncio;
- `built_plugins`: the WebAssembly plugins (first-party and test fixtures),
  built from source once per test session;
- `built_examples`: the Python and C example probes of `examples/`, built
  from source once per test session.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from browser import browser  # noqa: F401 - fixtures for every module
from containers import box, engine  # noqa: F401
from harness import (
    LOG_HEAD_BYTES,
    LOG_TAIL_BYTES,
    DemoHttp,
    Gateways,
    Procs,
    find_binary,
    free_port,
    port_taken,
    wait_http,
)
from reference.wire import HttpWire
from support import DEADLINE

#: Terminal colour codes, dropped from logs attached to a report.
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@pytest.fixture
def vigil_bin() -> Path:
    return find_binary("vigil", "VIGIL_BIN")


@pytest.fixture
def demo_bin() -> Path:
    return find_binary("vigil-demo-backend", "VIGIL_DEMO_BACKEND_BIN")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def run_build_scripts(out: Path, scripts: list[str]) -> None:
    """Runs each build script (relative to the repo) with `out` as its output directory.

    The scripts keep their own cargo target directories, not the host's.
    """
    repo = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "CARGO_TARGET_DIR"}
    for script in scripts:
        done = subprocess.run(
            ["bash", str(repo / script), str(out)],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0:
            pytest.fail(f"{script} failed:\n{done.stdout}\n{done.stderr}", pytrace=False)


def prebuilt(variable: str) -> Path | None:
    """The directory `scripts/test.sh` built into before the tests ran, if it did."""
    value = os.environ.get(variable)
    return Path(value) if value and Path(value).is_dir() else None


@pytest.fixture(scope="session")
def built_plugins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every plugin of plugins/ and tests/plugins, built for wasm32-wasip2 into one directory.

    Built from source: by `scripts/test.sh` in its setup step
    (`VIGIL_BUILT_PLUGINS`), or here when the tests run on their own.
    """
    if (done := prebuilt("VIGIL_BUILT_PLUGINS")) is not None:
        return done
    out = tmp_path_factory.mktemp("built-plugins")
    run_build_scripts(out, ["scripts/build-plugins.sh", "scripts/build-test-plugins.sh"])
    return out


@pytest.fixture(scope="session")
def built_examples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`python-probe.wasm` (componentize-py) and `c-probe.wasm` (clang), built from source.

    Each build script installs its own toolchain on first use (a venv with
    componentize-py; Debian's clang-19 and wasi-libc) and reuses it after.
    `scripts/test.sh` runs them in its setup step (`VIGIL_BUILT_EXAMPLES`),
    so no test waits for a toolchain install.
    """
    if (done := prebuilt("VIGIL_BUILT_EXAMPLES")) is not None:
        return done
    out = tmp_path_factory.mktemp("built-examples")
    run_build_scripts(out, ["examples/python-probe/build.sh", "examples/c-probe/build.sh"])
    return out


@pytest.fixture
def procs(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Procs]:
    registry = Procs(tmp_path)
    request.node._vigil_procs = registry
    try:
        yield registry
    finally:
        registry.stop_all()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    registry: Procs | None = getattr(item, "_vigil_procs", None)
    if not report.failed or registry is None:
        return
    for title, path in registry.logs():
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if not data:
            continue
        if len(data) <= LOG_HEAD_BYTES + LOG_TAIL_BYTES:
            raw = data
        else:
            cut = len(data) - LOG_HEAD_BYTES - LOG_TAIL_BYTES
            raw = data[:LOG_HEAD_BYTES] + f"\n[... {cut} bytes cut ...]\n".encode() + data[-LOG_TAIL_BYTES:]
        text = ANSI.sub("", raw.decode("utf-8", errors="replace"))
        report.sections.append((f"{title} ({path})", text))


@pytest.fixture
def demo_http(procs: Procs, demo_bin: Path) -> Callable[..., DemoHttp]:
    """Start `vigil-demo-backend --transport http` and wait until it answers.

    `start(name, port=None, tools_file=None)`; with `port` given, that port is
    used (to bring a backend up where a gateway already expects it).
    """

    def start(name: str, *, port: int | None = None, tools_file: Path | None = None) -> DemoHttp:
        fixed = port is not None
        for _attempt in range(3):
            p = port if fixed else free_port()
            argv = [demo_bin, "--transport", "http", "--listen", f"127.0.0.1:{p}", "--name", name]
            if tools_file is not None:
                argv += ["--tools-file", tools_file]
            proc = procs.start(f"demo-{name}", argv)
            backend = DemoHttp(name, p, proc)
            try:
                wait_http(backend.url, proc, f"demo backend {name!r}")
            except pytest.fail.Exception:
                if not fixed and not proc.alive() and port_taken(proc):
                    continue
                raise
            return backend
        pytest.fail(f"could not find a free port for demo backend {name!r}", pytrace=False)

    return start


@pytest.fixture
def http_wires(tmp_path: Path) -> Iterator[Callable[..., HttpWire]]:
    """Opens raw-wire sessions (`reference/wire.py`): `open(url, label, capabilities="{}")`
    initializes one declaring `capabilities`, logged to `wire-LABEL.log`; all are closed after the test."""
    opened: list[HttpWire] = []

    def open_wire(url: str, label: str, capabilities: str = "{}") -> HttpWire:
        w = HttpWire(url, deadline=DEADLINE, log=tmp_path / f"wire-{label}.log")
        opened.append(w)
        w.initialize(capabilities)
        return w

    yield open_wire
    for w in opened:
        w.close()


@pytest.fixture
def vigil(procs: Procs, vigil_bin: Path, tmp_path: Path) -> Gateways:
    """Write a config and run `vigil serve --config FILE` until `/mcp` answers.

    `vigil(backends, naming="prefix", separator="__", api=None, env=None, **extra_top_level_keys)`.
    A dict among the extra keys becomes a table (`health={"interval": "1s"}`
    → `[health]`). The control API always gets a free loopback port
    (`[api] listen`, kept in `Vigil.api_port`); with `api` given (more `[api]`
    keys such as `{"tokens": [...]}`, or `{}`), the call also waits until the
    API answers. `env` adds environment variables for vigil.
    `vigil.serve_again(gw)` stops `gw` with SIGTERM and serves its config
    file again.
    """
    return Gateways(procs, vigil_bin, tmp_path)
