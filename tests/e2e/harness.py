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
import signal
import socket
import subprocess
import time
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


@dataclass
class Procs:
    """Starts processes for one test and stops them all at teardown."""

    dir: Path
    started: list[Proc] = field(default_factory=list)

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Proc:
        n = sum(1 for p in self.started if p.name == name or p.name.startswith(name + "."))
        label = name if n == 0 else f"{name}.{n}"
        out = self.dir / f"{label}.stdout"
        err = self.dir / f"{label}.stderr"
        full_env = dict(os.environ)
        full_env.setdefault("RUST_LOG", os.environ.get("VIGIL_E2E_RUST_LOG", "info,vigil=debug"))
        full_env.setdefault("RUST_BACKTRACE", "1")
        if env:
            full_env.update(env)
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


def demo_stdio_args(name: str, tools_file: Path | None = None) -> list[str]:
    args = ["--transport", "stdio", "--name", name]
    if tools_file is not None:
        args += ["--tools-file", str(tools_file)]
    return args


# === the gateway ===


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str | Path):
        return json.dumps(str(value))  # a JSON string is a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def render_config(top: dict[str, Any], backends: list[dict[str, Any]]) -> str:
    lines = [f"{k} = {toml_value(v)}" for k, v in top.items()]
    for b in backends:
        lines += ["", "[[backends]]"] + [f"{k} = {toml_value(v)}" for k, v in b.items()]
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

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def run_vigil(vigil_bin: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run `vigil ARGS` to completion (bounded by the deadline; a hang fails)."""
    proc = subprocess.Popen(
        [str(vigil_bin), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        start_new_session=True,
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
