"""A stdio backend's stderr cannot bloat Vigil or get the backend killed.

Hostile backends are shell wrappers around the demo backend that share its
stderr: one writes a 300 MiB line without a newline, one an invalid UTF-8
byte. Behind the bad byte, the demo backend writes `stderr tick N` every
50 ms (`--stderr-every`) and, like a C or Go program with the default
SIGPIPE action, dies when a write to stderr fails, so a reader that gave up
shows as a dead backend.

What must hold: Vigil's peak RSS (`VmHWM` in `/proc/PID/status`) stays
within a bound while the line streams through, the line appears in Vigil's
log cut to its first 4096 bytes and marked with how many were dropped, the
reader goes on reading after the cut and after the bad byte, and the backend
stays `running`, is never restarted and answers its tools.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import Gateways, Vigil, demo_stdio_args, stdio_backend
from support import DEADLINE, ControlApi, call_text, eprint, http_session, poll

pytestmark = pytest.mark.anyio

#: The size of the line without a newline (the issue's reproduction).
FLOOD_BYTES = 300 * 1024 * 1024
#: Bytes of a stderr line Vigil keeps (runtime/stderr.rs `MAX_LINE`).
KEPT = 4096
#: Allowed growth of Vigil's peak RSS while the flood streams through:
#: far below the flood itself (before the fix the peak grew by ~700 MiB).
RSS_GROWTH_BOUND = 64 * 1024 * 1024
#: How long 300 MiB may take to stream through a debug build on a loaded
#: machine: generous, it only bounds the wait.
FLOOD_DEADLINE = 4 * DEADLINE

# The wrapper runs its hostile writer in the background, sharing the
# backend's stderr, once the test creates the trigger file; then it becomes
# the demo backend (`exec`), so the backend is the process Vigil watches.
FLOOD_WRAPPER = f"""#!/bin/sh
trigger=$1; shift
(
  while [ ! -e "$trigger" ]; do sleep 0.05; done
  head -c {FLOOD_BYTES} /dev/zero | tr '\\000' x >&2
  printf '\\nflood over\\n' >&2
) &
exec "$@"
"""

BAD_BYTE_WRAPPER = """#!/bin/sh
printf 'before \\377 after\\n' >&2
exec "$@"
"""


def wrapper(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    path.chmod(0o755)
    return path


def status_kib(pid: int, field: str) -> int:
    """A `VmRSS`/`VmHWM`-style field of `/proc/PID/status`, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"/proc/{pid}/status has no {field}")


def log_lines(path: Path, limit: int = 1 << 20) -> list[bytes]:
    """The lines of a log file, each cut to `limit` bytes (the file may hold
    a line of hundreds of MiB when Vigil does not cut it)."""
    lines: list[bytes] = []
    with open(path, "rb") as f:
        while True:
            line = f.readline(limit)
            if not line:
                return lines
            lines.append(line)
            while not line.endswith(b"\n"):
                line = f.readline(limit)
                if not line:
                    return lines


def stderr_lines(gw: Vigil, backend: str) -> list[str]:
    """Vigil's log lines carrying `backend`'s stderr."""
    return [
        raw.decode("utf-8", "replace")
        for raw in log_lines(gw.proc.stderr_path)
        if b"vigil::backend::stderr" in raw and f"backend={backend}".encode() in raw
    ]


async def test_a_line_without_newline_is_cut_and_marked_and_memory_stays_bounded(
    vigil: Gateways, demo_bin: Path, tmp_path: Path
) -> None:
    trigger = tmp_path / "flood.now"
    flood = wrapper(tmp_path, "flood.sh", FLOOD_WRAPPER)
    # No ticks here: their newlines would end the flood's line early.
    args = [str(trigger), str(demo_bin), *demo_stdio_args("flood")]
    gw = vigil([stdio_backend("flood", flood, args)], api={})
    api = ControlApi(gw.api_base)
    await api.wait_state("flood", "running")
    before = status_kib(gw.proc.pid, "VmHWM")

    trigger.touch()
    lines = await poll(
        lambda: _async(stderr_lines, gw, "flood"),
        lambda ls: any("flood over" in line for line in ls),
        "the line after the flood in Vigil's log",
        timeout=FLOOD_DEADLINE,
    )
    grown = (status_kib(gw.proc.pid, "VmHWM") - before) * 1024
    eprint(f"flood: Vigil's peak RSS {before >> 10} MiB before, grew by {grown >> 20} MiB")
    assert grown < RSS_GROWTH_BOUND, f"Vigil's peak RSS grew by {grown >> 20} MiB while a 300 MiB line streamed through"

    marker = "x" * KEPT + f"… [{FLOOD_BYTES - KEPT} bytes dropped]"
    cut = [line for line in lines if "xxxx" in line]
    assert len(cut) == 1 and marker in cut[0], f"expected one line ending in the cut marker: {[c[-200:] for c in cut]}"
    assert max(len(line) for line in lines) < 2 * KEPT, "a stderr line was logged longer than the cut"

    # The reader went on past the cut: "flood over" came after it.
    assert [i for i, line in enumerate(lines) if "flood over" in line][0] > lines.index(cut[0])
    detail = await api.instance("flood")
    assert (detail["state"], detail["restart_count"]) == ("running", 0), detail
    async with http_session(gw.url) as s:
        assert await call_text(s, "flood__echo", {"text": "still here"}) == "still here"


async def test_an_invalid_utf8_byte_does_not_end_the_reader_or_the_backend(
    vigil: Gateways, demo_bin: Path, tmp_path: Path
) -> None:
    bad = wrapper(tmp_path, "bad-byte.sh", BAD_BYTE_WRAPPER)
    args = [str(demo_bin), *demo_stdio_args("bytes"), "--stderr-every", "50"]
    gw = vigil(
        [stdio_backend("bytes", bad, args)],
        api={},
        restart={"base": "100ms", "jitter": 0.0, "max_restarts": 3},
    )
    api = ControlApi(gw.api_base)

    async def progress() -> tuple[list[str], dict]:
        return stderr_lines(gw, "bytes"), await api.instance("bytes")

    # Twenty ticks written after the bad byte reached the log, so the reader
    # kept reading and the backend kept its stderr (else it dies at the first).
    lines, detail = await poll(
        progress,
        lambda p: _last_tick(p[0]) >= 20 or p[1]["restart_count"] > 0 or p[1]["state"] == "quarantined",
        "twenty stderr ticks in Vigil's log (or a restart)",
    )
    assert "before \ufffd after" in "\n".join(lines), "the line with the bad byte is logged, decoded lossily"
    assert _last_tick(lines) >= 20, f"the backend's stderr stopped reaching the log: {lines[-5:]}"
    assert (detail["state"], detail["restart_count"]) == ("running", 0), detail
    async with http_session(gw.url) as s:
        assert await call_text(s, "bytes__echo", {"text": "still here"}) == "still here"


def _last_tick(lines: list[str]) -> int:
    """The highest N of the `stderr tick N` lines (0 for none)."""
    ticks = [int(line.split("stderr tick ", 1)[1].split()[0]) for line in lines if "stderr tick " in line]
    return max(ticks, default=0)


async def _async(f, *args):  # noqa: ANN001, ANN202 - a probe for `poll`
    return f(*args)
