"""The example probes of `examples/` (Python via componentize-py, C via
clang + wit-bindgen), built from source in this test run, loaded and run by
Vigil beside the Rust probes: the plugin contract is language-neutral.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
from pathlib import Path

import pytest

from harness import Gateways, demo_pids, demo_stdio_args, stdio_backend
from support import DEADLINE, ControlApi, plugin_dir, plugins_by_name, poll

pytestmark = pytest.mark.anyio

ANSI = re.compile(r"\x1b\[[0-9;]*m")
REPO = Path(__file__).resolve().parents[2]
EXAMPLES = ["python-probe", "c-probe"]


def add_example(d: Path, built: Path, name: str, manifest: str | None = None) -> None:
    """`name`.wasm from `built` and its manifest: the example's own, or `manifest`."""
    shutil.copy(built / f"{name}.wasm", d / f"{name}.wasm")
    text = manifest if manifest is not None else (REPO / "examples" / name / f"{name}.toml").read_text()
    (d / f"{name}.toml").write_text(text)


def plugins_config(d: Path, built: Path) -> dict[str, str]:
    # One compiled-code cache for the whole run: the Python component takes
    # seconds to compile, and the cache is keyed by content.
    return {"dir": str(d), "cache": str(built / "cache")}


async def test_python_and_c_probes_run_alongside_rust_ones(
    vigil: Gateways, demo_bin: Path, built_plugins: Path, built_examples: Path, tmp_path: Path
) -> None:
    d = plugin_dir(tmp_path, built_plugins, ["good-probe"])
    for name in EXAMPLES:
        add_example(d, built_examples, name)
    every = "1s"
    # alpha: all three languages, each pinging it; beta and gamma: one
    # example each, told to fail.
    alpha = stdio_backend("alpha", demo_bin, demo_stdio_args("alpha"))
    alpha["probes"] = [{"plugin": p, "every": every} for p in ["good-probe", *EXAMPLES]]
    beta = stdio_backend("beta", demo_bin, demo_stdio_args("beta"))
    beta["probes"] = [{"plugin": "python-probe", "every": every, "mode": "unhealthy"}]
    gamma = stdio_backend("gamma", demo_bin, demo_stdio_args("gamma"))
    gamma["probes"] = [{"plugin": "c-probe", "every": every, "mode": "unhealthy"}]
    gw = vigil(
        [alpha, beta, gamma],
        api={},
        plugins=plugins_config(d, built_examples),
        # The built-in ping stays quiet; the plugins decide.
        health={"interval": "30s", "timeout": "5s"},
        restart={"base": "100ms", "max": "300ms", "jitter": 0.0},
    )
    api = ControlApi(gw.api_base)
    # Compiling the Python component takes seconds in a debug build (its
    # CPython is inside): wait for every plugin to be loaded first, with room
    # for a busy machine, then for what the plugins decide.
    await poll(
        lambda: plugins_by_name(api),
        lambda ps: all(ps.get(n, {}).get("state") == "active" for n in ["good-probe", *EXAMPLES]),
        "every plugin loaded",
        timeout=6 * DEADLINE,
    )

    # A plugin's verdict restarts its backend, whatever its language.
    for backend, plugin in [("beta", "python-probe"), ("gamma", "c-probe")]:
        failed = await api.wait_for(backend, lambda i: i["restart_count"] >= 1, "restarted by its probe")
        reasons = " | ".join(t["reason"] for t in failed["transitions"])
        assert f"probe plugin '{plugin}': told to fail" in reasons, reasons

    # Each language's probe pinged alpha through Vigil and said healthy:
    # their log lines name alpha, nothing failed, alpha was never restarted.
    def checked_alpha(log: str) -> bool:
        return (
            "good-probe checking alpha (mode healthy)" in log
            and "python-probe checked alpha (mode healthy): healthy" in log
            and "c-probe checking alpha (mode healthy)" in log
        )

    async def log() -> str:
        return ANSI.sub("", gw.proc.stderr())

    await poll(log, checked_alpha, "every probe checked alpha")
    plugins = await poll(
        lambda: plugins_by_name(api),
        lambda p: all(p.get(n, {}).get("calls", 0) >= 3 for n in ["good-probe", *EXAMPLES]),
        "three calls of each probe",
    )
    for name in ["good-probe", *EXAMPLES]:
        p = plugins[name]
        assert p["kind"] == "probe" and p["state"] == "active", p
        assert p["version"] == "0.1.0" and p["failures"] == 0 and not p.get("last_error"), p
    alpha_now = await api.instance("alpha")
    assert alpha_now["state"] == "running" and alpha_now["restart_count"] == 0, alpha_now


async def test_a_timeout_cut_by_the_deadline_is_unknown_not_a_restart(
    vigil: Gateways, demo_bin: Path, built_examples: Path, tmp_path: Path
) -> None:
    """c-probe pings with a 1000 ms timeout; an 800 ms deadline cuts it short.

    A backend that stops answering then makes the probe's ping time out only
    because of the deadline: the call counts as a plugin failure ("unknown"),
    which names the fix, and never restarts the backend.
    """
    d = tmp_path / "plugins"
    d.mkdir()
    # Shorter than the ping's own timeout, and long enough for a healthy
    # check on a busy machine.
    add_example(d, built_examples, "c-probe", '[limits]\ndeadline = "800ms"\nfailures = 1000\n')
    alpha = stdio_backend("alpha", demo_bin, demo_stdio_args("alpha"))
    alpha["probes"] = [{"plugin": "c-probe", "every": "1s"}]
    gw = vigil(
        [alpha],
        api={},
        plugins=plugins_config(d, built_examples),
        health={"interval": "30s", "timeout": "5s"},
    )
    api = ControlApi(gw.api_base)
    await poll(lambda: plugins_by_name(api), lambda p: p.get("c-probe", {}).get("calls", 0) >= 2, "probed")
    assert (await plugins_by_name(api))["c-probe"]["failures"] == 0

    [pid] = demo_pids(gw.proc.pid, "alpha", demo_bin)
    os.kill(pid, signal.SIGSTOP)
    try:
        cut = await poll(
            lambda: plugins_by_name(api),
            lambda p: "raise `[limits] deadline`" in (p["c-probe"].get("last_error") or ""),
            "the deadline-cut ping reported",
        )
        err = cut["c-probe"]["last_error"]
        assert "ping asked for 1000 ms" in err and "deadline of 800ms" in err, err
        assert cut["c-probe"]["state"] == "active", cut
    finally:
        # Gone if Vigil restarted it (the failure this test looks for).
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    calls = (await plugins_by_name(api))["c-probe"]["calls"]
    await poll(lambda: plugins_by_name(api), lambda p: p["c-probe"]["calls"] >= calls + 2, "probed again")
    alpha_now = await api.instance("alpha")
    assert alpha_now["state"] == "running" and alpha_now["restart_count"] == 0, alpha_now
    reasons = " | ".join(t["reason"] for t in alpha_now["transitions"])
    assert "ping failed" not in reasons, reasons
    # It went `unknown` for the cut ping, with the reason, and came back.
    assert "probe plugin 'c-probe': the call failed: ran into its deadline of 800ms" in reasons, reasons
