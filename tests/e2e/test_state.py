"""State on disk (issue 12, items 13-15), against a real `vigil serve`.

- The data directory, `vigil.db` and its `-wal`/`-shm` files, and the
  compiled-plugin cache are private to Vigil's user even under umask 000;
  loose ones left from before are tightened (and logged).
- A plugin cache another user could write is not used: the ERROR names the
  path and the fix, plugins still load (compiled in memory) and MCP keeps
  serving; a private cache is used (the control pair); a cached file others
  can write is compiled again and replaced.
- A saved row with a state this build does not know (a newer Vigil wrote
  it) is skipped and named in a WARN; every other backend keeps its saved
  state: the quarantined one stays quarantined and is not started. The
  history and audit readers skip such rows the same way instead of failing.
- A store that cannot be opened refuses the start (non-zero exit, what,
  where, how to fix) before any backend starts, unless `[store] optional =
  true`, which serves without it and says so.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from harness import (
    Gateways,
    Procs,
    Vigil,
    demo_pids,
    demo_stdio_args,
    free_port,
    port_taken,
    render_config,
    run_vigil,
    stdio_backend,
    wait_api,
    wait_http,
)
from support import (
    DEADLINE,
    ControlApi,
    http_session,
    plugin_dir,
    plugins_by_name,
    poll,
    prefixed,
    short,
    wait_for_tools,
)

pytestmark = pytest.mark.anyio

DEMO = frozenset({"echo", "whoami"})

#: How the refusal of a start ends, whatever failed (the fix line before it
#: depends on the failure).
OPTIONAL_HINT = (
    "  or set `optional = true` under [store] to serve without durable state "
    "(quarantines, restart counts and history are then lost when Vigil stops, "
    "and quarantined backends are started again)"
)

#: The ERROR of a Vigil serving without its store because it was told it may.
SERVING_WITHOUT = (
    "cannot open the state store; serving without it because [store] optional = true: "
    "quarantines, restart counts and history will not survive a restart, and quarantined backends are started again"
)

#: Far above what Vigil with three demo backends and one plugin holds (about
#: 60-120 MiB in a debug build); a bound, not a measurement.
RSS_BOUND_MIB = 512


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def modes(paths: list[Path]) -> dict[str, str]:
    return {p.name: f"{mode(p):04o}" for p in paths}


def rss_mib(pid: int) -> float:
    """Resident memory of `pid` from /proc/PID/status, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def demo(name: str, demo_bin: Path, marker: Path | None = None) -> dict[str, Any]:
    """A stdio demo backend; with `marker`, started through `sh`, which creates that file first.

    The file tells whether Vigil ever started the backend, even if the
    process is gone by the time the test looks.
    """
    if marker is None:
        return stdio_backend(name, demo_bin, demo_stdio_args(name))
    script = 'touch "$0"; exec "$@"'
    return stdio_backend(name, "sh", ["-c", script, str(marker), str(demo_bin), *demo_stdio_args(name)])


def serve_under_umask(
    procs: Procs, vigil_bin: Path, tmp_path: Path, top: dict[str, Any], backends: list[dict[str, Any]], umask: int
) -> Vigil:
    """`vigil serve` with the process umask set to `umask` (through `sh`), once /mcp and the API answer."""
    for _attempt in range(3):
        port, api_port = free_port(), free_port()
        config = tmp_path / "vigil.toml"
        full = {"listen": f"127.0.0.1:{port}", **top, "api": {"listen": f"127.0.0.1:{api_port}"}}
        config.write_text(render_config(full, backends), encoding="utf-8")
        script = f'umask {umask:03o}; exec "$0" serve --config "$1"'
        proc = procs.start("vigil", ["sh", "-c", script, vigil_bin, config])
        gw = Vigil(port, proc, config, api_port)
        try:
            wait_http(gw.url, proc, "vigil")
            wait_api(gw.api_base, proc)
        except pytest.fail.Exception:
            if not proc.alive() and port_taken(proc):
                continue
            raise
        return gw
    pytest.fail("could not find free ports for vigil", pytrace=False)


def companions(db: Path) -> list[Path]:
    return [db.with_name(db.name + suffix) for suffix in ("-wal", "-shm")]


def cached_files(cache: Path) -> list[Path]:
    return sorted(p for p in cache.rglob("*") if p.is_file())


# === item 13: modes of what Vigil keeps on disk ===


async def test_state_files_are_private_under_umask_000_and_loose_ones_are_tightened(
    procs: Procs, vigil_bin: Path, demo_bin: Path, built_plugins: Path, tmp_path: Path
) -> None:
    """umask 000: data dir and cache 0700, vigil.db, -wal, -shm, cached code 0600; 0777/0666 from before: tightened."""
    data = tmp_path / "state"
    plugins = plugin_dir(tmp_path, built_plugins, ["good-probe"])
    top = {"data_dir": str(data), "plugins": {"dir": str(plugins)}, "freshness": {"debounce": "100ms"}}
    gw = serve_under_umask(procs, vigil_bin, tmp_path, top, [demo("alpha", demo_bin)], 0o000)
    api = ControlApi(gw.api_base)
    await api.wait_state("alpha", "running")
    loaded = await poll(lambda: plugins_by_name(api), lambda p: "good-probe" in p, "good-probe loaded")
    assert loaded["good-probe"]["state"] == "active", short(loaded)

    db = data / "vigil.db"
    cache = data / "plugin-cache"
    [artifact] = cached_files(cache)
    dirs = [data, cache, artifact.parent]
    files = [db, *companions(db), artifact]
    assert all(p.exists() for p in files), f"while vigil runs: {[str(p) for p in files if not p.exists()]}"
    want = {p.name: "0700" for p in dirs} | {p.name: "0600" for p in files}
    assert modes(dirs + files) == want
    rss = rss_mib(gw.proc.pid)
    assert rss < RSS_BOUND_MIB, f"vigil holds {rss:.0f} MiB"
    gw.proc.terminate()

    # What an older Vigil under umask 000 left behind: open to everyone.
    os.chmod(data, 0o777)
    for f in (db, *companions(db)):
        if f.exists():
            os.chmod(f, 0o666)
    again = serve_under_umask(procs, vigil_bin, tmp_path, top, [demo("alpha", demo_bin)], 0o000)
    await ControlApi(again.api_base).wait_state("alpha", "running")
    files = [db, *companions(db)]
    assert mode(data) == 0o700 and modes(files) == {p.name: "0600" for p in files}, (f"{mode(data):04o}", modes(files))
    log = again.proc.stderr()
    for p, was in ((data, "0777"), (db, "0666")):
        said = f"state store: {p} could be accessed by other users (mode {was}); restricted it to Vigil's user"
        assert said in log, f"expected {said!r} in the log:\n{log[-3000:]}"


# === item 13: the compiled-plugin cache is trusted code ===


async def test_a_plugin_cache_others_can_write_is_not_used_and_plugins_still_run(
    vigil: Gateways, demo_bin: Path, built_plugins: Path, tmp_path: Path
) -> None:
    """0777 cache: ERROR naming it and `chmod 700`, plugin active from memory, MCP serves; 0700: cached (control)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    os.chmod(cache, 0o777)
    plugins = plugin_dir(tmp_path, built_plugins, ["good-probe"])
    gw = vigil([demo("alpha", demo_bin)], api={}, plugins={"dir": str(plugins), "cache": str(cache)})

    async def loaded(gw: Vigil) -> dict[str, Any]:
        api = ControlApi(gw.api_base)
        found = await poll(lambda: plugins_by_name(api), lambda p: "good-probe" in p, "good-probe loaded")
        assert found["good-probe"]["state"] == "active", short(found)
        return found["good-probe"]

    refused = (
        f"the compiled-plugin cache is not used: {cache} can be written by its group and others (mode 0777), "
        f"so another user can change what Vigil reads from it: `chmod 700 {cache}` if only Vigil uses it, "
        "else choose a directory of Vigil's own; until then every plugin is compiled in memory at each start (slower)"
    )
    for run in range(2):
        plugin = await loaded(gw)
        assert plugin["from_cache"] is False, f"run {run}: {short(plugin)}"
        log = gw.proc.stderr()
        assert refused in log, f"run {run}: expected {refused!r} in the log:\n{log[-3000:]}"
        assert cached_files(cache) == [] and mode(cache) == 0o777, "refused: nothing written, nothing tightened"
        async with http_session(gw.url) as s:
            await wait_for_tools(s, prefixed("alpha", DEMO))
        rss = rss_mib(gw.proc.pid)
        assert rss < RSS_BOUND_MIB, f"vigil holds {rss:.0f} MiB"
        gw = vigil.serve_again(gw)

    # The control pair: the same cache made private is used.
    os.chmod(cache, 0o700)
    gw = vigil.serve_again(gw)
    assert (await loaded(gw))["from_cache"] is False, "compiled once, into the cache"
    [artifact] = cached_files(cache)
    assert (mode(artifact), mode(artifact.parent)) == (0o600, 0o700)
    assert "compiled-plugin cache is not used" not in gw.proc.stderr()
    gw = vigil.serve_again(gw)
    assert (await loaded(gw))["from_cache"] is True, "the private cache is used"

    # A cached file others can write is not loaded: compiled again, replaced.
    os.chmod(artifact, 0o666)
    gw = vigil.serve_again(gw)
    assert (await loaded(gw))["from_cache"] is False
    said = (
        f"compiled plugin not loaded from the cache: {artifact} can be written by its group and others (mode 0666), "
        f"so another user can change what Vigil reads from it: `chmod 600 {artifact}`; "
        "compiling it again and replacing the cached copy"
    )
    assert said in gw.proc.stderr(), gw.proc.stderr()[-3000:]
    assert mode(artifact) == 0o600, f"replaced by a private copy: {mode(artifact):04o}"

    if os.geteuid() == 0:  # only root can give the directory away
        os.chown(cache, 65534, -1)
        gw = vigil.serve_again(gw)
        assert (await loaded(gw))["from_cache"] is False
        said = (
            f"the compiled-plugin cache is not used: {cache} is owned by uid 65534, not by uid 0 that Vigil runs as, "
            f"so that user can change it: `chown 0 {cache}` (or choose a path uid 0 owns)"
        )
        assert said in gw.proc.stderr(), gw.proc.stderr()[-3000:]


# === item 14: one unreadable saved row costs only itself ===


async def test_an_unknown_saved_state_skips_that_backend_and_keeps_every_quarantine(
    vigil: Gateways, demo_bin: Path, tmp_path: Path
) -> None:
    """A newer Vigil's state for gamma: gamma starts fresh (WARN), alpha stays quarantined and unstarted; logs read."""
    marker = tmp_path / "alpha-started"
    data = tmp_path / "state"
    gw = vigil(
        [demo("alpha", demo_bin, marker), demo("beta", demo_bin), demo("gamma", demo_bin)],
        api={},
        data_dir=str(data),
    )
    api = ControlApi(gw.api_base)
    for name in ("alpha", "beta", "gamma"):
        await api.wait_state(name, "running")
    await api.act_ok("alpha", "quarantine", {"reason": "held for the e2e state test"})
    await poll(
        lambda: anyio.to_thread.run_sync(demo_pids, gw.proc.pid, "alpha", demo_bin), lambda p: not p, "alpha to stop"
    )
    before = await api.instance("alpha")
    assert before["state"] == "quarantined", short(before)
    audit_before = await api.audit()
    assert [e["action"] for e in audit_before] == ["quarantine"], short(audit_before)
    gw.proc.terminate()

    # What a newer Vigil could leave: a state, a transition and an audit row this build cannot read.
    with sqlite3.connect(data / "vigil.db") as db:
        db.execute("UPDATE instances SET state = 'hibernating' WHERE backend = 'gamma'")
        now = int(time.time() * 1000)
        db.execute(
            "INSERT INTO transitions (backend, from_state, to_state, reason, at) VALUES (?, ?, ?, ?, ?)",
            ("alpha", "quarantined", "hibernating", "written by a newer vigil", now),
        )
        db.execute(
            "INSERT INTO audit (principal, action, target, outcome, at) VALUES (?, ?, ?, ?, ?)",
            ("future", "hibernate", "alpha", "ok", -1),
        )
        [(bad_transition,)] = db.execute("SELECT max(id) FROM transitions").fetchall()
        [(bad_audit,)] = db.execute("SELECT max(id) FROM audit").fetchall()
    db.close()
    marker.unlink()

    gw = vigil.serve_again(gw)
    api = ControlApi(gw.api_base)
    states = await poll(
        lambda: api.instances(),
        lambda i: {r["name"]: r["state"] for r in i}.get("gamma") == "running",
        "gamma running",
    )
    [alpha] = [r for r in states if r["name"] == "alpha"]
    assert alpha["state"] == "quarantined", f"the quarantine must survive gamma's unreadable row: {short(alpha)}"
    assert not marker.exists(), "a quarantined backend must not be started"
    assert "held for the e2e state test" in (alpha["quarantine_reason"] or ""), short(alpha)
    assert alpha["restart_count"] == before["restart_count"], short(alpha)
    # The history and audit readers skip their unreadable rows too.
    after = await api.instance("alpha")
    assert after["transitions"][: len(before["transitions"])] == before["transitions"], short(after["transitions"])
    assert all(t["to"] != "hibernating" for t in after["transitions"]), short(after["transitions"])
    assert [e["action"] for e in await api.audit()] == ["quarantine"], "the audit log still reads, without the bad row"

    log = gw.proc.stderr()
    for said in (
        "saved state not restored: instances row of backend `gamma`: state `hibernating` is not a state this build "
        "knows (written by a newer Vigil?); backend `gamma` starts fresh, the other backends keep theirs",
        f"transition history: skipped transitions row {bad_transition} of backend `alpha`: to_state `hibernating` "
        "is not a state this build knows (written by a newer Vigil?)",
        f"audit log: skipped audit row {bad_audit}: at `-1` is not a time this store writes (milliseconds since 1970)",
    ):
        assert said in log, f"expected {said!r} in the log:\n{log[-4000:]}"
    async with http_session(gw.url) as s:
        await wait_for_tools(s, prefixed("beta", DEMO) | prefixed("gamma", DEMO), absent=prefixed("alpha", DEMO))
    rss = rss_mib(gw.proc.pid)
    assert rss < RSS_BOUND_MIB, f"vigil holds {rss:.0f} MiB"


# === item 15: no store, no start (unless asked) ===


def data_dir_is_a_file(data: Path) -> str:
    data.write_text("not a directory\n")
    return (
        f"error: cannot open the state store in {data}: {data} is not a directory: "
        "move it away or choose another path\n"
    )


def db_is_not_a_database(data: Path) -> str:
    data.mkdir(mode=0o700)
    db = data / "vigil.db"
    db.write_bytes(b"this is a text file where the store should be, long enough for SQLite to read its header\n" * 8)
    return (
        f"error: cannot open the state store in {data}: store at {db}: file is not a database\n"
        f"  fix: {db} is not a SQLite database: move it away (Vigil then creates a new, empty store) "
        "or restore it from a backup\n"
    )


def data_dir_is_shared_and_open_to_all(data: Path) -> str:
    data.mkdir()
    (data / "someone-elses.txt").write_text("not Vigil's\n")
    os.chmod(data, 0o1777)  # like /tmp: Vigil must not chmod it, and must not trust it
    return (
        f"error: cannot open the state store in {data}: {data} can be written by its group and others (mode 1777), "
        f"so another user can change what Vigil reads from it: `chmod 700 {data}` if only Vigil uses it, "
        "else choose a directory of Vigil's own\n"
    )


@pytest.mark.parametrize("breakage", [data_dir_is_a_file, db_is_not_a_database, data_dir_is_shared_and_open_to_all])
async def test_a_store_that_cannot_be_opened_refuses_the_start_unless_optional(
    vigil: Gateways, vigil_bin: Path, demo_bin: Path, tmp_path: Path, breakage: Any
) -> None:
    """`vigil serve` exits 1 naming what, where and the fix, starting no backend; `[store] optional = true` serves."""
    data = tmp_path / "state"
    expected = breakage(data) + OPTIONAL_HINT + "\n"
    marker = tmp_path / "alpha-started"
    config = tmp_path / "strict.toml"
    top = {"listen": f"127.0.0.1:{free_port()}", "data_dir": str(data), "api": {"listen": f"127.0.0.1:{free_port()}"}}
    config.write_text(render_config(top, [demo("alpha", demo_bin, marker)]), encoding="utf-8")

    mode_before = mode(data) if data.is_dir() else None
    t0 = time.monotonic()
    done = run_vigil(vigil_bin, ["serve", "--config", str(config)], tmp_path)  # a hang past the deadline fails
    took = time.monotonic() - t0
    assert done.returncode == 1, f"exit {done.returncode} after {took:.1f}s; stderr:\n{done.stderr}"
    assert done.stderr.endswith(expected), f"after {took:.1f}s, stderr:\n{done.stderr}\nexpected the end:\n{expected}"
    assert not marker.exists(), "no backend may start without the store that says whether it is quarantined"
    assert took < DEADLINE
    assert (mode(data) if data.is_dir() else None) == mode_before, "a refused data_dir is left as it was"

    checked = run_vigil(vigil_bin, ["check", "--config", str(config)], tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert (
        f"store: {data / 'vigil.db'} (required: serve and stdio refuse to start if it cannot be opened)"
        in checked.stdout
    )

    # The operator's choice: serve without durable state, loudly.
    gw = vigil([demo("alpha", demo_bin, marker)], api={}, data_dir=str(data), store={"optional": True})
    api = ControlApi(gw.api_base)
    await api.wait_state("alpha", "running")
    assert marker.exists()
    assert SERVING_WITHOUT in gw.proc.stderr(), gw.proc.stderr()[-3000:]
    no_audit = await api.request("GET", "/api/v1/audit")
    assert no_audit.status_code == 503, f"HTTP {no_audit.status_code} {no_audit.text[:300]}"
    async with http_session(gw.url) as s:
        await wait_for_tools(s, prefixed("alpha", DEMO))
    checked = run_vigil(vigil_bin, ["check", "--config", str(gw.config_path)], tmp_path)
    optional = f"store: {data / 'vigil.db'} (optional: serves without durable state if it cannot be opened)"
    assert optional in checked.stdout, checked.stdout
