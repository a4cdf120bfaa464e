"""Fixtures for Vigil's end-to-end tests (helpers live in `harness.py`).

- `procs`: starts processes for one test, stops them all at teardown, and
  attaches their captured output to the report of a failed test;
- `demo_http`: starts an HTTP demo backend and waits until it answers;
- `vigil`: writes a config into the test's directory, runs
  `vigil serve --config FILE` and waits until `/mcp` answers;
- `vigil_bin`, `demo_bin`: the binaries under test;
- `anyio_backend`: async tests (`@pytest.mark.anyio`) run on asyncio.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import (
    LOG_HEAD_BYTES,
    LOG_TAIL_BYTES,
    DemoHttp,
    Procs,
    Vigil,
    find_binary,
    free_port,
    port_taken,
    render_config,
    wait_http,
)

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
def vigil(procs: Procs, vigil_bin: Path, tmp_path: Path) -> Callable[..., Vigil]:
    """Write a config and run `vigil serve --config FILE` until `/mcp` answers.

    `start(backends, naming="prefix", separator="__", **extra_top_level_keys)`.
    """

    def start(backends: list[dict[str, Any]], *, naming: str = "prefix", separator: str = "__", **extra: Any) -> Vigil:
        for _attempt in range(3):
            port = free_port()
            top = {"listen": f"127.0.0.1:{port}", "naming": naming, "separator": separator, **extra}
            config = tmp_path / "vigil.toml"
            config.write_text(render_config(top, backends), encoding="utf-8")
            proc = procs.start("vigil", [vigil_bin, "serve", "--config", config])
            gw = Vigil(port, proc, config)
            try:
                wait_http(gw.url, proc, "vigil")
            except pytest.fail.Exception:
                if not proc.alive() and port_taken(proc):
                    continue
                raise
            return gw
        pytest.fail("could not find a free port for vigil", pytrace=False)

    return start
