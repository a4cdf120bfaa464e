"""Processes, ports and configs for Vigil's end-to-end tests.

`conftest.py` turns these into fixtures. Every process a test starts runs in
its own process group with stdout/stderr captured to files in the test's own
temporary directory; at teardown the group is terminated, then killed,
together with any descendant still alive.

Binaries are found in `$CARGO_TARGET_DIR/debug/` (default `<repo>/target`), or
at `$VIGIL_BIN` / `$VIGIL_DEMO_BACKEND_BIN` when set. A missing binary fails
the test that needs it (build first: `cargo build --workspace`).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from support import DEADLINE, POLL_INTERVAL

REPO = Path(__file__).resolve().parents[2]

#: Bytes of each log file attached to a failed test's report: its start
#: (how things began) and its end (how they finished).
LOG_HEAD_BYTES = 12_000
LOG_TAIL_BYTES = 12_000

#: How long a process gets to exit after SIGTERM at teardown before SIGKILL.
TERM_GRACE = 3.0

INITIALIZE_BODY = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "vigil-e2e-probe", "version": "0"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


# === binaries ===


def target_dir() -> Path:
    raw = os.environ.get("CARGO_TARGET_DIR")
    path = Path(raw) if raw else REPO / "target"
    return path if path.is_absolute() else REPO / path


def find_binary(name: str, env_var: str) -> Path:
    override = os.environ.get(env_var)
    path = Path(override) if override else target_dir() / "debug" / name
    if not path.is_file():
        pytest.fail(f"{name} not found at {path}: run `cargo build --workspace` or set {env_var}", pytrace=False)
    return path


# === ports ===


def free_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# === processes ===


def _children_of(pid: int) -> list[int]:
    """Direct children of `pid`, read from /proc."""
    kids: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        # Field 4 (ppid) follows the parenthesised command name, which may hold spaces.
        rest = stat.rsplit(")", 1)[-1].split()
        if len(rest) > 1 and rest[1] == str(pid):
            kids.append(int(entry))
    return kids


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid` (bounded walk)."""
    found: list[int] = []
    frontier = [pid]
    while frontier and len(found) < 10_000:
        nxt: list[int] = []
        for p in frontier:
            kids = _children_of(p)
            found.extend(kids)
            nxt.extend(kids)
        frontier = nxt
    return found


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


@dataclass
class Proc:
    """A process started by a test, with its output captured to files."""

    name: str
    argv: list[str]
    popen: subprocess.Popen[bytes]
    stdout_path: Path
    stderr_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def stdout(self) -> str:
        return self.stdout_path.read_text(encoding="utf-8", errors="replace")

    def kill(self) -> None:
        """SIGKILL the process and its whole tree now, and reap it."""
        tree = descendants(self.pid) if self.alive() else []
        _signal_group(self.pid, signal.SIGKILL)
        for pid in tree:
            _signal_pid(pid, signal.SIGKILL)
        try:
            self.popen.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{self.name} (pid {self.pid}) survived SIGKILL for {DEADLINE}s", pytrace=False)

    def terminate(self) -> int:
        """SIGTERM the process alone (as an operator would) and wait for it to exit; its exit status."""
        _signal_pid(self.pid, signal.SIGTERM)
        try:
            return self.popen.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{self.name} (pid {self.pid}) still running {DEADLINE}s after SIGTERM", pytrace=False)

    def stop(self) -> None:
        """SIGTERM, wait a grace period, then SIGKILL the process and every descendant."""
        tree = descendants(self.pid) if self.alive() else []
        if self.alive():
            _signal_group(self.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=TERM_GRACE)
            except subprocess.TimeoutExpired:
                pass
        _signal_group(self.pid, signal.SIGKILL)
        for pid in tree:
            _signal_pid(pid, signal.SIGKILL)
        try:
            self.popen.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            pass


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_pid(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def process_state(pid: int) -> str | None:
    """The state letter of `pid` in /proc (`R`, `S`, `T` for stopped, `Z`, ...), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    rest = stat.rsplit(")", 1)[-1].split()
    return rest[0] if rest else None


def rss_bytes(pid: int) -> int:
    """Resident memory of process `pid` (`VmRSS` in `/proc/PID/status`), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def pids_with_arg(marker: str) -> list[int]:
    """Every live (non-zombie) process on the machine with `marker` in one of its arguments."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and any(marker in a for a in cmdline(int(entry))):
            if process_state(int(entry)) not in (None, "Z"):
                found.append(int(entry))
    return found


def demo_pids(root: int, name: str, binary: Path) -> list[int]:
    """Pids of the demo backend processes started with `--name NAME` under process `root`."""
    found = []
    for pid in descendants(root):
        argv = cmdline(pid)
        if argv and Path(argv[0]).name == binary.name and "--name" in argv and name in argv:
            if process_state(pid) not in (None, "Z"):
                found.append(pid)
    return found


@dataclass
class Procs:
    """Starts processes for one test and stops them all at teardown."""

    dir: Path
    started: list[Proc] = field(default_factory=list)

    def start(self, name: str, argv: list[str], env: dict[str, str | None] | None = None) -> Proc:
        """Run `argv` with the test environment plus `env` (a `None` value removes that variable)."""
        n = sum(1 for p in self.started if p.name == name or p.name.startswith(name + "."))
        label = name if n == 0 else f"{name}.{n}"
        out = self.dir / f"{label}.stdout"
        err = self.dir / f"{label}.stderr"
        full_env = dict(os.environ)
        full_env.setdefault("RUST_LOG", os.environ.get("VIGIL_E2E_RUST_LOG", "info,vigil=debug"))
        full_env.setdefault("RUST_BACKTRACE", "1")
        for key, value in (env or {}).items():
            if value is None:
                full_env.pop(key, None)
            else:
                full_env[key] = value
        with open(out, "wb") as o, open(err, "wb") as e:
            popen = subprocess.Popen(
                [str(a) for a in argv],
                stdin=subprocess.DEVNULL,
                stdout=o,
                stderr=e,
                env=full_env,
                cwd=self.dir,
                start_new_session=True,
            )
        proc = Proc(label, [str(a) for a in argv], popen, out, err)
        self.started.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in reversed(self.started):
            proc.stop()

    def logs(self) -> list[tuple[str, Path]]:
        files: list[tuple[str, Path]] = []
        for proc in self.started:
            files.append((f"{proc.name} stderr", proc.stderr_path))
            files.append((f"{proc.name} stdout", proc.stdout_path))
        files.extend((f"log {p.name}", p) for p in sorted(self.dir.glob("*.log")))
        return files


def wait_http(url: str, proc: Proc, what: str) -> None:
    """Wait until `url` answers any HTTP request, or fail if `proc` exits first."""
    deadline = time.monotonic() + DEADLINE
    last: Any = None
    while time.monotonic() < deadline:
        if not proc.alive():
            pytest.fail(
                f"{what} exited with {proc.popen.returncode} before listening; stderr:\n{proc.stderr()}",
                pytrace=False,
            )
        try:
            resp = httpx.post(url, json=INITIALIZE_BODY, headers=MCP_HEADERS, timeout=2.0)
        except httpx.HTTPError as exc:
            last = exc
        else:
            # The probe's session, if one was opened, is not left behind.
            if session := resp.headers.get("Mcp-Session-Id"):
                try:
                    httpx.delete(url, headers={**MCP_HEADERS, "Mcp-Session-Id": session}, timeout=2.0)
                except httpx.HTTPError:
                    pass
            return
        time.sleep(POLL_INTERVAL)
    pytest.fail(f"{what} did not answer at {url} within {DEADLINE}s (last: {last!r})", pytrace=False)


def wait_api(base: str, proc: Proc) -> None:
    """Wait until the control API at `base` answers a GET (any status), or fail if `proc` exits first."""
    url = f"{base}/api/v1/health/instances"
    deadline = time.monotonic() + DEADLINE
    last: Any = None
    while time.monotonic() < deadline:
        if not proc.alive():
            pytest.fail(
                f"vigil exited with {proc.popen.returncode} before its control API answered; stderr:\n{proc.stderr()}",
                pytrace=False,
            )
        try:
            httpx.get(url, timeout=2.0)
        except httpx.HTTPError as exc:
            last = exc
        else:
            return
        time.sleep(POLL_INTERVAL)
    pytest.fail(
        f"vigil's control API ([api] listen) did not answer at {url} within {DEADLINE}s (last: {last!r}); "
        "is the API served by `vigil serve`?",
        pytrace=False,
    )


def port_taken(proc: Proc) -> bool:
    text = proc.stderr().lower()
    return "address already in use" in text or "addrinuse" in text


# === demo backends ===


@dataclass
class DemoHttp:
    name: str
    port: int
    proc: Proc

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"


#: Backends written with the Python SDK (`tests/e2e/backends`).
PY_BACKENDS = Path(__file__).parent / "backends"


def start_python_backend(
    procs: Procs, name: str, script: str, args: list[str] | None = None, *, port: int | None = None
) -> DemoHttp:
    """Run `python backends/SCRIPT PORT ARGS...` until it answers HTTP.

    With `port` given, that port is used (to bring a backend back where a
    gateway expects it); otherwise a free one, retried if taken meanwhile.
    """
    for _attempt in range(3):
        p = port if port is not None else free_port()
        proc = procs.start(name, [sys.executable, PY_BACKENDS / script, str(p), *(args or [])])
        backend = DemoHttp(name, p, proc)
        try:
            wait_http(backend.url, proc, f"{script} ({name})")
        except pytest.fail.Exception:
            if port is None and not proc.alive() and port_taken(proc):
                continue
            raise
        return backend
    pytest.fail(f"no free port for {script} ({name})", pytrace=False)


def demo_stdio_args(name: str, tools_file: Path | None = None) -> list[str]:
    args = ["--transport", "stdio", "--name", name]
    if tools_file is not None:
        args += ["--tools-file", str(tools_file)]
    return args


# === the gateway ===


def toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def toml_value(value: Any) -> str:
    """One TOML value; a dict is written as an inline table (`{ k = v }`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise TypeError(f"cannot write {value!r} as TOML")
        return repr(value)  # always has a '.' or an exponent: a TOML float
    if isinstance(value, str | Path):
        return json.dumps(str(value))  # a JSON string is a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {value!r} as TOML")


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _table(header: str, path: str, body: dict[str, Any]) -> list[str]:
    """`[path]` (or `[[path]]`) with its keys, then its sub-tables and arrays of tables."""
    plain = {k: v for k, v in body.items() if not isinstance(v, dict) and not _is_table_array(v)}
    lines = [header] + [f"{toml_key(k)} = {toml_value(v)}" for k, v in plain.items()]
    for k, v in body.items():
        sub = f"{path}.{toml_key(k)}"
        if isinstance(v, dict):
            lines += ["", *_table(f"[{sub}]", sub, v)]
        elif _is_table_array(v):
            for item in v:
                lines += ["", *_table(f"[[{sub}]]", sub, item)]
    return lines


def render_config(top: dict[str, Any], backends: list[dict[str, Any]]) -> str:
    """A `vigil.toml`.

    In `top`, plain values are top-level keys, dicts become tables
    (`health={...}` → `[health]`) and lists of dicts arrays of tables
    (`api={"tokens": [{...}]}` → `[[api.tokens]]`). In a backend, a dict is
    an inline table (`health = { interval = "1s" }`).
    """
    lines = [f"{toml_key(k)} = {toml_value(v)}" for k, v in top.items() if not isinstance(v, dict)]
    for k, v in top.items():
        if isinstance(v, dict):
            lines += ["", *_table(f"[{toml_key(k)}]", toml_key(k), v)]
    for b in backends:
        lines += ["", "[[backends]]"] + [f"{toml_key(k)} = {toml_value(v)}" for k, v in b.items()]
    return "\n".join(lines) + "\n"


def stdio_backend(name: str, command: Path | str, args: list[str]) -> dict[str, Any]:
    return {"name": name, "transport": "stdio", "command": str(command), "args": args}


def http_backend(name: str, url: str) -> dict[str, Any]:
    return {"name": name, "transport": "http", "url": url}


@dataclass
class Vigil:
    port: int
    proc: Proc
    config_path: Path
    #: The control API's port (`[api] listen`); the fixture always sets one.
    api_port: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_base(self) -> str:
        """`http://127.0.0.1:PORT` of the control API (paths start with `/api/v1/`)."""
        assert self.api_port is not None, "this gateway was started without [api] listen"
        return f"http://127.0.0.1:{self.api_port}"


class Gateways:
    """What the `vigil` fixture gives: call it to start a gateway; `serve_again` restarts one."""

    def __init__(self, procs: Procs, vigil_bin: Path, tmp_path: Path) -> None:
        self.procs, self.vigil_bin, self.dir = procs, vigil_bin, tmp_path

    def __call__(
        self,
        backends: list[dict[str, Any]],
        *,
        naming: str = "prefix",
        separator: str = "__",
        api: dict[str, Any] | None = None,
        env: dict[str, str | None] | None = None,
        open_files: int | None = None,
        **extra: Any,
    ) -> Vigil:
        # Most tests watch several catalog changes in a row; the default
        # debounce window (the 30 s health interval) would hold the second
        # one back. Tests of the debounce set their own.
        extra.setdefault("freshness", {"debounce": "100ms"})
        for _attempt in range(3):
            port, api_port = free_port(), free_port()
            top = {
                "listen": f"127.0.0.1:{port}",
                "naming": naming,
                "separator": separator,
                **extra,
                "api": {"listen": f"127.0.0.1:{api_port}", **(api or {})},
            }
            config = self.dir / "vigil.toml"
            config.write_text(render_config(top, backends), encoding="utf-8")
            gw = self._serve(config, port, api_port, wait_for_api=api is not None, env=env, open_files=open_files)
            if gw is not None:
                return gw
        pytest.fail("could not find free ports for vigil", pytrace=False)

    def serve_again(self, gw: Vigil, *, env: dict[str, str | None] | None = None) -> Vigil:
        """Stop `gw` with SIGTERM, then serve the same config file again (same ports, same data_dir)."""
        gw.proc.terminate()
        assert gw.api_port is not None
        again = self._serve(gw.config_path, gw.port, gw.api_port, wait_for_api=True, env=env)
        if again is None:
            pytest.fail("the new vigil could not listen on the ports of the one it replaced", pytrace=False)
        return again

    def kill_and_serve_again(self, gw: Vigil) -> Vigil:
        """SIGKILL `gw` (nothing of its shutdown runs), then serve the same config file again (same ports, same data_dir)."""
        gw.proc.kill()
        assert gw.api_port is not None
        again = self._serve(gw.config_path, gw.port, gw.api_port, wait_for_api=True, env=None)
        if again is None:
            pytest.fail("the new vigil could not listen on the ports of the one it replaced", pytrace=False)
        return again

    def serve_file(self, write: Callable[[int, int], Path], *, env: dict[str, str] | None = None) -> Vigil:
        """Serve a config the test wrote itself: `write(port, api_port)` writes it and returns its path."""
        for _attempt in range(3):
            port, api_port = free_port(), free_port()
            gw = self._serve(write(port, api_port), port, api_port, wait_for_api=False, env=env)
            if gw is not None:
                return gw
        pytest.fail("could not find free ports for vigil", pytrace=False)

    def _serve(
        self,
        config: Path,
        port: int,
        api_port: int,
        *,
        wait_for_api: bool,
        env: dict[str, str | None] | None,
        open_files: int | None = None,
    ) -> Vigil | None:
        """`vigil serve --config CONFIG` until it answers; None if a port was taken (pick others).

        `open_files` caps vigil's descriptors (soft and hard limit, so it cannot raise them).
        """
        argv: list[Any] = [self.vigil_bin, "serve", "--config", config]
        if open_files is not None:
            argv = ["prlimit", f"--nofile={open_files}", "--", *argv]
        proc = self.procs.start("vigil", argv, env=env)
        gw = Vigil(port, proc, config, api_port)
        try:
            wait_http(gw.url, proc, "vigil")
            if wait_for_api:
                wait_api(gw.api_base, proc)
        except pytest.fail.Exception:
            if not proc.alive() and port_taken(proc):
                return None
            raise
        return gw


def run_vigil(
    vigil_bin: Path, args: list[str], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `vigil ARGS` to completion (bounded by the deadline; a hang fails); `env` adds variables."""
    proc = subprocess.Popen(
        [str(vigil_bin), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        start_new_session=True,
        env={**os.environ, **(env or {})},
    )
    try:
        out, err = proc.communicate(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        tree = descendants(proc.pid)
        _signal_group(proc.pid, signal.SIGKILL)
        for pid in tree:
            _signal_pid(pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"`vigil {' '.join(args)}` still running after {DEADLINE}s; stderr:\n{err}", pytrace=False)
    # Backends it may have spawned share its process group; none may outlive the test.
    _signal_group(proc.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
