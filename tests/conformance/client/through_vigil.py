"""The conformance suite's client, through Vigil: Vigil's backend-facing
client under test.

usage: python through_vigil.py URL

The suite runs its client command with a scenario server's URL as the last
argument (and MCP_CONFORMANCE_SCENARIO / _PROTOCOL_VERSION / _CONTEXT set).
This wrapper starts `vigil serve` with that server as its only backend
(streamable HTTP, `naming = "none"`), waits until Vigil serves the backend
(its control API reports it `running`, and Vigil's own `tools/list`
answers), then runs driver.py against Vigil's `/mcp` with the same
environment, and exits with the driver's status. So the scenario server
sees Vigil as its client, driven by the same client behaviour as the
direct (baseline) run.

Environment:
  VIGIL_BIN                the vigil binary (default
                           ${CARGO_TARGET_DIR:-target}/debug/vigil, relative
                           to the repository root)
  VIGIL_CONFORMANCE_LOGS   if set, a directory that receives Vigil's log of
                           this run (`<scenario>.vigil.log`)
  VIGIL_LOG_LEVEL          Vigil's `log_level` (default "info,vigil=debug")
  VIGIL_BACKEND_PROTOCOL   the backend's `protocol` (default "auto": Vigil
                           tries `initialize`, then `server/discover`; a
                           revision pins the era)
  VIGIL_READY_SECONDS      how long Vigil may take to serve the backend
                           (default 60: a loaded two-core machine)
Exit status: the driver's; 3 when Vigil could not be started or never
served the backend (the reason on stderr).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
SCENARIO = os.environ.get("MCP_CONFORMANCE_SCENARIO", "unknown")
BACKEND = "scenario"
READY_SECONDS = float(os.environ.get("VIGIL_READY_SECONDS", "60"))


def log(*parts: Any) -> None:
    print(f"through_vigil[{SCENARIO}]:", *parts, file=sys.stderr, flush=True)


def vigil_bin() -> Path:
    if os.environ.get("VIGIL_BIN"):
        return Path(os.environ["VIGIL_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", "target"))
    return (target if target.is_absolute() else ROOT / target) / "debug" / "vigil"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def config(url: str, port: int, api_port: int, data_dir: Path) -> str:
    level = os.environ.get("VIGIL_LOG_LEVEL", "info,vigil=debug")
    return "\n".join(
        [
            f'listen = "127.0.0.1:{port}"',
            'naming = "none"',
            f"log_level = {json.dumps(level)}",
            f"data_dir = {json.dumps(str(data_dir))}",
            "[api]",
            f'listen = "127.0.0.1:{api_port}"',
            "[[backends]]",
            f'name = "{BACKEND}"',
            'transport = "http"',
            f"url = {json.dumps(url)}",
            f"protocol = {json.dumps(os.environ.get('VIGIL_BACKEND_PROTOCOL', 'auto'))}",
            "",
        ]
    )


def die_with_parent() -> None:
    """Vigil gets SIGTERM if this wrapper dies (the suite kills its client on
    timeout), so no gateway outlives its scenario."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def http_json(url: str, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None) -> tuple[Any, dict[str, str]]:
    """GET (no body) or POST JSON; the parsed JSON (or the first SSE data
    message) and the response headers."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    request.add_header("accept", "application/json, text/event-stream")
    if body is not None:
        request.add_header("content-type", "application/json")
    for k, v in (headers or {}).items():
        request.add_header(k, v)
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read().decode()
        hdrs = {k.lower(): v for k, v in response.headers.items()}
    if "text/event-stream" in hdrs.get("content-type", ""):
        for line in text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                message = json.loads(line[5:])
                if "result" in message or "error" in message:
                    return message, hdrs
        return None, hdrs
    return (json.loads(text) if text.strip() else None), hdrs


def backend_running(api: str) -> str:
    """The backend's state in Vigil's control API."""
    report, _ = http_json(f"{api}/api/v1/health/instances/{BACKEND}")
    return str((report or {}).get("state"))


def vigil_lists_tools(mcp: str) -> int:
    """A `tools/list` through Vigil (a session of its own, ended after):
    the number of tools Vigil serves."""
    init, hdrs = http_json(
        mcp,
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "through-vigil-readiness", "version": "1.0.0"},
            },
        },
    )
    if not init or "result" not in init:
        raise RuntimeError(f"initialize: {init!r}")
    session = {"mcp-session-id": hdrs["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    try:
        http_json(mcp, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
        listing, _ = http_json(mcp, {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}, session)
        if not listing or "result" not in listing:
            raise RuntimeError(f"tools/list: {listing!r}")
        return len(listing["result"].get("tools", []))
    finally:
        request = urllib.request.Request(mcp, method="DELETE", headers=session)
        try:
            urllib.request.urlopen(request, timeout=10).close()
        except (urllib.error.URLError, OSError):
            pass


def wait_ready(gateway: subprocess.Popen[bytes], api: str, mcp: str) -> str | None:
    """None once Vigil serves the backend; else why not."""
    deadline = time.monotonic() + READY_SECONDS
    last = "not asked yet"
    while time.monotonic() < deadline:
        if gateway.poll() is not None:
            return f"vigil exited with status {gateway.returncode}"
        try:
            state = backend_running(api)
            if state == "running":
                log(f"vigil serves the backend; its tools/list shows {vigil_lists_tools(mcp)} tools")
                return None
            last = f"backend state {state}"
        except (urllib.error.URLError, OSError, RuntimeError, ValueError, KeyError) as e:
            last = f"{type(e).__name__}: {e}"
        time.sleep(0.2)
    return f"vigil did not serve the backend within {READY_SECONDS:.0f}s (last: {last})"


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main(url: str) -> int:
    binary = vigil_bin()
    if not binary.exists():
        log(f"no vigil binary at {binary} (cargo build -p vigil, or set VIGIL_BIN)")
        return 3
    work = Path(tempfile.mkdtemp(prefix="vigil-conformance-client-"))
    logs = os.environ.get("VIGIL_CONFORMANCE_LOGS")
    log_path = Path(logs) / f"{SCENARIO.replace('/', '_')}.vigil.log" if logs else work / "vigil.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    driver: subprocess.Popen[bytes] | None = None
    gateway: subprocess.Popen[bytes] | None = None
    forward = lambda signum, _frame: sys.exit(128 + signum)  # noqa: E731 - run the finally below
    signal.signal(signal.SIGTERM, forward)
    try:
        port, api_port = free_port(), free_port()
        config_path = work / "vigil.toml"
        config_path.write_text(config(url, port, api_port, work / "data"), encoding="utf-8")
        with open(log_path, "wb") as out:
            gateway = subprocess.Popen(
                [str(binary), "serve", "--config", str(config_path)],
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,
            )
        mcp = f"http://127.0.0.1:{port}/mcp"
        problem = wait_ready(gateway, f"http://127.0.0.1:{api_port}", mcp)
        if problem:
            log(problem, f"(vigil's log: {log_path})")
            return 3
        driver = subprocess.Popen([sys.executable, str(HERE / "driver.py"), mcp], preexec_fn=die_with_parent)
        return driver.wait()
    finally:
        for process in (driver, gateway):
            if process is not None:
                stop(process)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[-1]))
