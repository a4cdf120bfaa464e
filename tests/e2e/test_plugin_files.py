"""What the plugin directory may hold besides plugins: files that must not hold up or bloat Vigil.

This item has no wasm guest: the hostile "guests" are the files themselves.
At start-up the directory holds `good-probe.wasm` (a probe on the backend)
beside a FIFO named `x.wasm` (a plain read waits for a writer forever, and
with it the directory watcher: nothing would load or unload again), a valid
`y.wasm` whose manifest `y.toml` is a FIFO, a directory named `d.wasm`, and
a 1 GiB sparse `big.wasm` (a plain read allocates 1 GiB before anything can
refuse it). Later, under the steady load, another FIFO, a 4 GiB sparse file
and a new valid probe are added, one at a time, then `big.wasm` grows.

What must hold: the start-up scan finishes (good-probe becomes active and
its verdicts arrive), each bad file is `rejected` with a reason naming what
it is (a FIFO, a directory, over `[plugins] max_file_bytes`) in the API and
an ERROR in the log; Vigil's peak RSS (`VmHWM`) stays under
`PEAK_RSS_BOUND`; the plugin added afterwards is loaded (the watcher is
alive); each refused file is logged once per change of it, however many
rescans see it (the grown `big.wasm` once more); and the steady MCP
workload is served throughout: no failed call or API read (`steady.py`).
How fast it was served is printed, not asserted.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import anyio
import pytest

from harness import Gateways, demo_stdio_args, stdio_backend
from steady import WINDOW_CALLS, assert_served, steady_load
from support import ControlApi, eprint, plugin_dir, plugins_by_name, poll

pytestmark = pytest.mark.anyio

ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: Vigil's peak RSS over its whole run, start-up included. A debug build
#: serving this test sits near 150 MiB; reading big.wasm would take it past
#: 1 GiB.
PEAK_RSS_BOUND = 512 << 20
FIFO = "is a FIFO (named pipe), not a regular file"


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for pid {pid}")


def sparse(path: Path, size: int) -> None:
    with path.open("wb") as f:
        f.truncate(size)


def refusals(log: str, name: str) -> int:
    """How many ERROR lines say plugin `name` was refused."""
    return sum(
        1
        for line in log.splitlines()
        if "ERROR" in line and "plugin refused" in line and re.search(rf"plugin={re.escape(name)}\b", line)
    )


async def rescanned(api: ControlApi, name: str, what: str) -> dict[str, dict]:
    """Waits until plugin `name`, just added, is listed: a scan ran after the change (and saw every file)."""
    return await poll(lambda: plugins_by_name(api), lambda p: name in p, f"{what} listed (a rescan ran)")


async def test_fifos_sparse_files_and_directories_in_the_plugin_dir(
    vigil: Gateways, demo_bin: Path, built_plugins: Path, tmp_path: Path
) -> None:
    d = plugin_dir(tmp_path, built_plugins, ["good-probe"])
    os.mkfifo(d / "x.wasm")
    shutil.copy(built_plugins / "good-probe.wasm", d / "y.wasm")
    os.mkfifo(d / "y.toml")
    (d / "d.wasm").mkdir()
    sparse(d / "big.wasm", 1 << 30)
    backend = stdio_backend("demo", demo_bin, demo_stdio_args("demo"))
    backend["probes"] = [{"plugin": "good-probe", "every": "200ms"}]
    gw = vigil([backend], api={}, plugins={"dir": str(d)})
    api = ControlApi(gw.api_base)

    plugins = await poll(
        lambda: plugins_by_name(api),
        lambda p: p.get("good-probe", {}).get("calls", 0) > 0 and {"x", "y", "d", "big"} <= p.keys(),
        "the start-up scan finished: good-probe probing, every bad file listed",
    )
    x, y, dw, big = (plugins[n] for n in ["x", "y", "d", "big"])
    assert x["state"] == "rejected" and f"x.wasm: it {FIFO}" in x["reason"], x
    assert y["state"] == "rejected" and f"y.toml: cannot read it: it {FIFO}" in y["reason"], y
    assert dw["state"] == "rejected" and "d.wasm: it is a directory, not a regular file" in dw["reason"], dw
    assert big["state"] == "rejected", big
    assert (
        "big.wasm: it is 1073741824 bytes, more than the 67108864 bytes allowed; raise [plugins] max_file_bytes"
        in big["reason"]
    ), big
    log = ANSI.sub("", gw.proc.stderr())
    for name in ["x", "y", "d", "big"]:
        assert refusals(log, name) >= 1, f"no ERROR for {name}"

    async with steady_load(gw, api) as load:
        # More of the same, and a new plugin: the watcher must still act.
        # One at a time, each waited for: every change is a rescan of its
        # own, and each rescan reads (and refuses) every bad file again.
        os.mkfifo(d / "z.wasm")
        await rescanned(api, "z", "the FIFO z.wasm")
        sparse(d / "huge.wasm", 4 << 30)
        await rescanned(api, "huge", "the sparse huge.wasm")
        tmp = d / ".late.tmp"
        shutil.copy(built_plugins / "good-probe.wasm", tmp)
        tmp.replace(d / "late.wasm")
        later = await poll(
            lambda: plugins_by_name(api),
            lambda p: p.get("late", {}).get("state") == "active",
            "the plugin added later loaded",
        )
        # Three rescans since start-up: each bad file was still logged once.
        log = ANSI.sub("", gw.proc.stderr())
        once = {name: refusals(log, name) for name in ["x", "y", "d", "big", "z", "huge"]}
        assert all(n == 1 for n in once.values()), f"refusal ERRORs per file over 3 rescans: {once}"

        # A refused file that changes is logged again, once (replaced whole,
        # so no scan can see it half made).
        sparse(d / ".big.tmp", 2 << 30)
        (d / ".big.tmp").replace(d / "big.wasm")
        await poll(
            lambda: plugins_by_name(api),
            lambda p: "2147483648 bytes" in (p["big"].get("reason") or ""),
            "big.wasm refused again at its new size",
        )
        await poll(
            lambda: anyio.to_thread.run_sync(lambda: ANSI.sub("", gw.proc.stderr())),
            lambda text: refusals(text, "big") == 2,
            "the grown big.wasm logged once more",
        )
        (d / "w.wasm").mkdir()
        await rescanned(api, "w", "the directory w.wasm")

        calls = later["good-probe"]["calls"]
        await poll(
            lambda: plugins_by_name(api),
            lambda p: p["good-probe"]["calls"] >= calls + 5,
            "good-probe's verdicts keep arriving",
        )
        # A window of steady calls beside all of it (counted in calls, not seconds).
        await load.more_calls(WINDOW_CALLS)
    report = load.report()
    peak = status_kib(gw.proc.pid, "VmHWM") * 1024
    eprint(f"with the hostile files: {report}; peak RSS (VmHWM) {peak >> 20} MiB")
    log = ANSI.sub("", gw.proc.stderr())
    counts = {name: refusals(log, name) for name in ["x", "y", "d", "big", "z", "huge", "w"]}
    assert counts == {"x": 1, "y": 1, "d": 1, "big": 2, "z": 1, "huge": 1, "w": 1}, counts

    plugins = await plugins_by_name(api)
    assert plugins["z"]["state"] == "rejected" and FIFO in plugins["z"]["reason"], plugins["z"]
    assert "more than the 67108864 bytes allowed" in plugins["huge"]["reason"], plugins["huge"]
    for name in ["good-probe", "late"]:
        p = plugins[name]
        assert p["state"] == "active" and p["failures"] == 0, p
    demo = await api.instance("demo")
    assert demo["state"] == "running" and demo["restart_count"] == 0, demo

    assert_served(report, calls=WINDOW_CALLS)
    assert peak <= PEAK_RSS_BOUND, f"peak RSS {peak >> 20} MiB over {PEAK_RSS_BOUND >> 20} MiB"
