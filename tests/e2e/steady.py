"""A steady MCP workload beside a hostile plugin: the yardstick of the sandbox tests.

`steady_load(gw, api)` runs, until its block ends, an MCP client (the Python
SDK over streamable HTTP) calling `demo__echo` in a loop, a control-API reader
asking for `/api/v1/plugins` in a loop, and a sampler of Vigil's RSS from
`/proc`. `Load.report()` then gives what each test asserts on: failed calls,
client latency percentiles, the slowest API answer and the peak RSS.

`baseline(gw, api)` measures the same workload before anything hostile runs,
so a test can bound the client p99 relative to this machine, now.

The bounds the tests assert are generous on purpose (CI is a busy 2-core
machine): they separate "a plugin stalled the gateway" (seconds, timeouts)
from "it kept serving" (milliseconds), never one fast run from a slow one.
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

#: Most a single steady client call may take before it counts as failed: a
#: plugin that stalls the gateway shows up as failures, not as a hang.
CALL_TIMEOUT = 10.0
#: Pause between the steady client's calls (a busy but not saturating load).
CALL_PAUSE = 0.02
#: Pause between control-API reads and RSS samples.
SAMPLE_PAUSE = 0.1


@dataclass
class Report:
    calls: int
    failures: list[str]
    p50: float
    p99: float
    worst_call: float
    worst_api: float
    api_failures: list[str]
    peak_rss: int
    start_rss: int

    def __str__(self) -> str:
        return (
            f"{self.calls} calls, {len(self.failures)} failed, p50 {self.p50 * 1000:.1f} ms, "
            f"p99 {self.p99 * 1000:.1f} ms, worst {self.worst_call * 1000:.0f} ms; API worst "
            f"{self.worst_api * 1000:.0f} ms ({len(self.api_failures)} failed); RSS "
            f"{self.start_rss >> 20} -> peak {self.peak_rss >> 20} MiB"
        )


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
            calls=len(self.latencies) + len(self.failures),
            failures=self.failures,
            p50=pct(0.50),
            p99=pct(0.99),
            worst_call=lat[-1],
            worst_api=max(self.api_latencies, default=0.0),
            api_failures=self.api_failures,
            peak_rss=max(self.rss, default=0),
            start_rss=self.rss[0] if self.rss else 0,
        )


@asynccontextmanager
async def steady_load(gw: Gateways, api: ControlApi, tool: str = "demo__echo") -> AsyncIterator[Load]:
    """Runs the steady workload against `gw` while the block runs."""
    load = Load()
    pid = gw.proc.pid
    load.rss.append(rss_bytes(pid))
    async with http_session(gw.url) as session:

        async def call_loop() -> None:
            n = 0
            while True:
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
                while True:
                    t0 = time.perf_counter()
                    try:
                        resp = await client.get(f"{api.base}/api/v1/plugins")
                        if resp.status_code != 200:
                            load.api_failures.append(f"HTTP {resp.status_code}")
                    except Exception as exc:  # noqa: BLE001 - counted
                        load.api_failures.append(f"{type(exc).__name__}: {exc}"[:300])
                    load.api_latencies.append(time.perf_counter() - t0)
                    load.rss.append(rss_bytes(pid))
                    await anyio.sleep(SAMPLE_PAUSE)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call_loop)
            tg.start_soon(api_loop)
            yield load
            tg.cancel_scope.cancel()


#: Calls a measuring window holds (the baseline, and a test's window under attack).
WINDOW_CALLS = 60


async def baseline(gw: Gateways, api: ControlApi, calls: int = WINDOW_CALLS) -> Report:
    """The steady workload's figures on this machine now, with nothing hostile running."""
    async with steady_load(gw, api) as load:
        await load.more_calls(calls)
    return load.report()


def p99_bound(base: Report) -> float:
    """The client p99 a sandbox test accepts: 5x the baseline p99 plus 250 ms.

    A stalled gateway costs seconds per call (the first round measured 11.9 s);
    a busy 2-core machine adds tens of milliseconds. This bound tells them apart.
    """
    return 5 * base.p99 + 0.25


#: The slowest control-API answer a sandbox test accepts, in seconds (the first
#: round measured 6.5 s behind three busy plugins).
API_BOUND = 1.5
