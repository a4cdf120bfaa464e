"""A steady MCP workload beside a hostile plugin: the yardstick of the sandbox tests.

`steady_load(gw, api)` runs, until its block ends, an MCP client (the Python
SDK over streamable HTTP) calling `demo__echo` in a loop, a control-API reader
asking for `/api/v1/plugins` in a loop, and a sampler of Vigil's RSS from
`/proc`. When the block ends, the call and the read in flight are let finish
(each bounded by `CALL_TIMEOUT`), so every call started is counted: answered
or failed. `Load.report()` then gives what the tests assert on: failed
calls and API reads, how many were made, and the peak RSS.

What the tests assert is what a busy machine cannot break: no call fails,
every call and API read is answered within `CALL_TIMEOUT` (a bound that only
catches a stalled gateway: a plugin that held it up cost 11.9 s a call in
the first round), and memory. How fast the answers came (p50, p99, the
slowest) is printed with the report as information, never asserted: a busy
2-core CI machine moves it by a second. Latency beside busy plugins is
measured by `vigil-bench busy-plugins` (docs/benchmarks.md, "Plugin sandbox,
second round").

`baseline(gw, api)` runs the same workload before anything hostile runs: its
RSS is where a test's memory bound starts, its figures are for comparison.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import httpx

from harness import Gateways, rss_bytes
from support import ControlApi, http_session, poll, text_of

#: Most a single steady client call (or API read) may take before it counts
#: as failed: a plugin that stalls the gateway shows up as failures, not as a
#: hang. It catches a hang, it does not measure: load does not come near it.
CALL_TIMEOUT = 10.0
#: Pause between the steady client's calls (a busy but not saturating load).
CALL_PAUSE = 0.02
#: Pause between control-API reads and RSS samples.
SAMPLE_PAUSE = 0.1


@dataclass
class Report:
    """What the steady workload did. The latencies are information only (see the module's docstring)."""

    calls: int
    failures: list[str]
    api_reads: int
    api_failures: list[str]
    peak_rss: int
    start_rss: int
    p50: float
    p99: float
    worst_call: float
    worst_api: float

    def __str__(self) -> str:
        return (
            f"{self.calls} calls, {len(self.failures)} failed; {self.api_reads} API reads, "
            f"{len(self.api_failures)} failed; RSS {self.start_rss >> 20} -> peak {self.peak_rss >> 20} MiB; "
            f"for information: p50 {self.p50 * 1000:.1f} ms, p99 {self.p99 * 1000:.1f} ms, "
            f"worst {self.worst_call * 1000:.0f} ms, API worst {self.worst_api * 1000:.0f} ms"
        )


def assert_served(report: Report, *, calls: int = 1) -> None:
    """What load cannot break: every steady call and API read answered (within `CALL_TIMEOUT`), none failed.

    `calls`: how many calls the window must hold at least (a test that
    waited for `Load.more_calls(n)` passes `n`); one API read at least.
    """
    assert report.failures == [], f"steady calls failed: {report.failures[:5]} ({report})"
    assert report.api_failures == [], f"API reads failed: {report.api_failures[:5]} ({report})"
    assert report.calls >= calls, f"the steady client finished {report.calls} calls, expected {calls}: {report}"
    assert report.api_reads >= 1, f"no API read finished: {report}"


@dataclass
class Load:
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    api_latencies: list[float] = field(default_factory=list)
    api_failures: list[str] = field(default_factory=list)
    rss: list[int] = field(default_factory=list)

    def done(self) -> int:
        """Calls finished so far, answered or failed."""
        return len(self.latencies) + len(self.failures)

    async def more_calls(self, n: int) -> None:
        """Waits until the steady client has finished `n` more calls (bounded by the deadline).

        A window counted in calls, not seconds: on a busy machine it lasts
        longer instead of holding too few calls to say anything.
        """
        target = self.done() + n
        await poll(self._done, lambda d: d >= target, f"{n} more steady calls")

    async def _done(self) -> int:
        return self.done()

    def report(self) -> Report:
        lat = sorted(self.latencies) or [0.0]

        def pct(p: float) -> float:
            return lat[min(len(lat) - 1, int(p * len(lat)))]

        return Report(
            calls=self.done(),
            failures=self.failures,
            api_reads=len(self.api_latencies),
            api_failures=self.api_failures,
            peak_rss=max(self.rss, default=0),
            start_rss=self.rss[0] if self.rss else 0,
            p50=pct(0.50),
            p99=pct(0.99),
            worst_call=lat[-1],
            worst_api=max(self.api_latencies, default=0.0),
        )


@asynccontextmanager
async def steady_load(gw: Gateways, api: ControlApi, tool: str = "demo__echo") -> AsyncIterator[Load]:
    """Runs the steady workload against `gw` while the block runs.

    When the block ends normally, the call and the API read in flight finish
    (or fail at `CALL_TIMEOUT`) before the report is taken: a call stuck at
    the end of the window is a failure, not a call that never was.
    """
    load = Load()
    pid = gw.proc.pid
    load.rss.append(rss_bytes(pid))
    stop = anyio.Event()
    async with http_session(gw.url) as session:

        async def call_loop() -> None:
            n = 0
            while not stop.is_set():
                n += 1
                t0 = time.perf_counter()
                try:
                    with anyio.fail_after(CALL_TIMEOUT):
                        r = await session.call_tool(tool, {"text": f"steady {n}"})
                    text = text_of(r)
                    if r.is_error or text != f"steady {n}":
                        load.failures.append(f"call {n}: {text[:200]}")
                    else:
                        load.latencies.append(time.perf_counter() - t0)
                except Exception as exc:  # noqa: BLE001 - a failed call is what we count
                    load.failures.append(f"call {n}: {type(exc).__name__}: {exc}"[:300])
                await anyio.sleep(CALL_PAUSE)

        async def api_loop() -> None:
            async with httpx.AsyncClient(timeout=CALL_TIMEOUT) as client:
                while not stop.is_set():
                    t0 = time.perf_counter()
                    try:
                        with anyio.fail_after(CALL_TIMEOUT):
                            resp = await client.get(f"{api.base}/api/v1/plugins")
                        if resp.status_code != 200:
                            load.api_failures.append(f"HTTP {resp.status_code}")
                        else:
                            load.api_latencies.append(time.perf_counter() - t0)
                    except Exception as exc:  # noqa: BLE001 - counted
                        load.api_failures.append(f"{type(exc).__name__}: {exc}"[:300])
                    load.rss.append(rss_bytes(pid))
                    await anyio.sleep(SAMPLE_PAUSE)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call_loop)
            tg.start_soon(api_loop)
            try:
                yield load
            finally:
                # Normal exit: the loops end after what is in flight. An
                # exception from the block cancels them (the task group).
                stop.set()


#: Calls a measuring window holds (the baseline, and a test's window under attack).
WINDOW_CALLS = 60


async def baseline(gw: Gateways, api: ControlApi, calls: int = WINDOW_CALLS) -> Report:
    """The steady workload with nothing hostile running: its RSS, and figures for comparison.

    Asserts it was served (`assert_served`): a failure here is not the hostile plugin's.
    """
    async with steady_load(gw, api) as load:
        await load.more_calls(calls)
    report = load.report()
    assert_served(report, calls=calls)
    return report

