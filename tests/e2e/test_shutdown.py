"""Shutdown loses no accepted write (issue 15, acceptance 4), against a real `vigil serve`.

24 stdio backends whose command exits at once restart every
millisecond or two, so health transitions arrive faster than the store writes
them one transaction each. The test reads the control API's event stream,
sends SIGTERM in the middle of the burst, keeps reading until the stream
ends, then serves the same config again: every transition any client saw
(the supervisor announces one only after the store writer accepted it) is
in the store, in order per backend. Three rounds.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from harness import Gateways, stdio_backend
from support import DEADLINE, ControlApi, short

pytestmark = pytest.mark.anyio

BACKENDS = 24
#: SIGTERM/restart rounds.
ROUNDS = 3
#: Transitions seen before the signal: enough that the burst is well under way.
BEFORE_SIGNAL = 400

Key = tuple[str, str, str, str, int]


def key(t: dict[str, Any]) -> Key:
    return (t["backend"], t["from"], t["to"], t["reason"], int(t["at"]))


async def read_until_closed(api_base: str, pid: int) -> tuple[list[Key], int]:
    """Every `transition` event of one `/api/v1/events` connection, and how many came before SIGTERM.

    Sends SIGTERM to `pid` once `BEFORE_SIGNAL` transitions arrived, then reads on until Vigil closes the stream.
    """
    seen: list[Key] = []
    signalled_at: int | None = None
    event = ""
    with anyio.fail_after(DEADLINE * 4):
        async with (
            httpx.AsyncClient(timeout=httpx.Timeout(DEADLINE, read=DEADLINE)) as http,
            http.stream("GET", f"{api_base}/api/v1/events") as stream,
        ):
            assert stream.status_code == 200, stream.status_code
            try:
                async for line in stream.aiter_lines():
                    if line.startswith("event:"):
                        event = line.removeprefix("event:").strip()
                    elif line.startswith("data:") and event == "transition":
                        seen.append(key(json.loads(line.removeprefix("data:"))["transition"]))
                        if signalled_at is None and len(seen) >= BEFORE_SIGNAL:
                            signalled_at = len(seen)
                            os.kill(pid, signal.SIGTERM)
            except (httpx.RemoteProtocolError, httpx.ReadError):
                pass  # the process went away mid-chunk: what was read stands
    assert signalled_at is not None, f"the burst produced only {len(seen)} transitions"
    return seen, signalled_at


def stored(db: Path) -> list[Key]:
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT backend, from_state, to_state, reason, at FROM transitions ORDER BY id").fetchall()
    c.close()
    return [(b, f, t, r, int(at)) for b, f, t, r, at in rows]


def per_backend(keys: list[Key]) -> dict[str, list[Key]]:
    out: dict[str, list[Key]] = {}
    for k in keys:
        out.setdefault(k[0], []).append(k)
    return out


async def test_sigterm_during_a_burst_of_transitions_keeps_every_announced_one(vigil: Gateways, tmp_path: Path) -> None:
    """SIGTERM mid-burst, 3 times: exit 0; after each restart every transition seen on the stream is stored in order."""
    data = tmp_path / "state"
    backends = [stdio_backend(f"flap{i}", "false", []) for i in range(BACKENDS)]
    gw = vigil(
        backends,
        api={},
        data_dir=str(data),
        restart={"base": "1ms", "max": "2ms", "jitter": 0.0, "max_restarts": 1_000_000},
    )
    # How many transitions are in flight at the signal varies from run to
    # run (the writer usually keeps up): three rounds make a lost queue
    # show in almost every run, not in some.
    for n in range(ROUNDS):
        seen, before = await read_until_closed(gw.api_base, gw.proc.pid)
        status = await anyio.to_thread.run_sync(gw.proc.terminate)
        assert status == 0, f"round {n}: vigil exited with {status} after SIGTERM:\n{gw.proc.stderr()[-3000:]}"

        gw = vigil.serve_again(gw)
        await ControlApi(gw.api_base).instances()  # the restarted gateway answers
        saved = stored(data / "vigil.db")
        missing = Counter(seen) - Counter(saved)
        assert not missing, (
            f"round {n}: {sum(missing.values())} of {len(seen)} announced transitions ({before} before SIGTERM) "
            f"are not in the store after a restart: {short(sorted(missing))}"
        )
        # In order: per backend, what was seen is a subsequence of what was
        # stored (the stream began after some, and a client that falls
        # behind gets a fresh snapshot instead of the events it missed).
        for name, keys in per_backend(seen).items():
            rest = iter(per_backend(saved).get(name, []))
            assert all(k in rest for k in keys), f"round {n}: {name}: stored order differs from the announced one"
