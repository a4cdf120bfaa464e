"""What a client's declared capabilities cost, and how their backend sessions follow the backend.

A server lists tools by what its client declared (docs/gateway.md, "What
each client is shown"). Vigil's shared session with a stdio backend declares
nothing; each *distinct* set of sampling / elicitation / roots that clients
declared gets one more process of the backend, shared by that set's clients,
ended with the backend's instance and opened again on next use. These tests
count the backend's processes under Vigil (the cost claim) and restart the
backend under a capable client (the lifecycle claim), against server-everything.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from harness import Gateways, Vigil, stdio_backend
from reference import wire
from reference.wire import HttpWire
from support import DEADLINE, ControlApi, poll

pytestmark = pytest.mark.anyio

PREFIX = "everything__"
SAMPLING = '{"sampling":{}}'
ROOTS = '{"roots":{"listChanged":true}}'


def processes_of(vigil_pid: int, marker: str) -> list[int]:
    """Pids of the live processes below `vigil_pid` whose command line names `marker`."""
    children: dict[int, list[int]] = {}
    cmdlines: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
        cmdlines[int(entry.name)] = cmdline
    found, todo = [], list(children.get(vigil_pid, []))
    while todo:
        pid = todo.pop()
        if marker in cmdlines.get(pid, ""):
            found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def tools_of(w: HttpWire) -> list[str]:
    msg = wire.parse(w.request("tools/list").text)
    assert isinstance(msg, wire.Obj), msg
    return [t.get("name").value.removeprefix(PREFIX) for t in msg.get("result").get("tools")]


def start(vigil: Gateways) -> Vigil:
    server = wire.everything()
    backend = stdio_backend("everything", server.command, server.args)
    return vigil([backend], naming="prefix", api={})


def direct_tools(capabilities: str, tmp_path: Path) -> list[str]:
    server = wire.everything()
    label = f"direct-{len(list(tmp_path.glob('direct-*.log')))}"
    w = wire.StdioWire(
        [server.command, *server.args],
        cwd=tmp_path,
        stderr=tmp_path / f"{label}.stderr",
        env={**os.environ, **server.env},
        deadline=DEADLINE,
        log=tmp_path / f"{label}.log",
    )
    try:
        w.initialize(capabilities)
        msg = wire.parse(w.request("tools/list").text)
        assert isinstance(msg, wire.Obj), msg
        return [t.get("name").value for t in msg.get("result").get("tools")]
    finally:
        w.close()


async def test_one_backend_process_per_distinct_capability_set(
    vigil: Gateways, http_wires: Callable[..., HttpWire], tmp_path: Path
) -> None:
    """Four clients of three sets (none, sampling twice, roots): three processes of the server, not four or one."""
    gw = start(vigil)
    await ControlApi(gw.api_base).wait_state("everything", "running")
    clients = {
        "none": http_wires(gw.url, "none"),
        "sampling-1": http_wires(gw.url, "sampling-1", SAMPLING),
        "sampling-2": http_wires(gw.url, "sampling-2", SAMPLING),
        "roots": http_wires(gw.url, "roots", ROOTS),
    }
    seen = {label: tools_of(w) for label, w in clients.items()}
    assert seen["sampling-1"] == seen["sampling-2"] == direct_tools(SAMPLING, tmp_path)
    assert seen["roots"] == direct_tools(ROOTS, tmp_path)
    assert seen["none"] == direct_tools("{}", tmp_path)
    assert len(processes_of(gw.proc.pid, "server-everything")) == 3, processes_of(gw.proc.pid, "server-everything")


async def test_a_capability_sets_session_follows_the_backends_restart(
    vigil: Gateways, http_wires: Callable[..., HttpWire], tmp_path: Path
) -> None:
    """kill -9 of the backend: its capable client's own tools are listed and callable again once it is back."""
    gw = start(vigil)
    api = ControlApi(gw.api_base)
    await api.wait_state("everything", "running")
    (shared,) = processes_of(gw.proc.pid, "server-everything")
    capable = http_wires(gw.url, "capable", SAMPLING)
    assert "trigger-sampling-request" in tools_of(capable)
    before = set(processes_of(gw.proc.pid, "server-everything"))
    assert len(before) == 2 and shared in before, before
    restarts = (await api.instance("everything"))["restart_count"]
    os.kill(shared, signal.SIGKILL)
    await api.wait_for(
        "everything", lambda d: d["restart_count"] > restarts and d["state"] == "running", "restarted"
    )

    # The set's old process ends with the instance; the next use opens a new one.
    await poll(
        lambda: anyio.to_thread.run_sync(lambda: set(processes_of(gw.proc.pid, "server-everything")) & before),
        lambda left: not left,
        "the old processes ended",
    )
    assert "trigger-sampling-request" in tools_of(capable)
    after = set(processes_of(gw.proc.pid, "server-everything"))
    assert len(after) == 2 and not after & before, (before, after)
