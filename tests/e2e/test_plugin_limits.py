"""A hostile plugin's traffic is capped while MCP keeps serving: each cap held, and is named.

Each test drops one hostile probe (`tests/plugins/`) into a running Vigil
and asserts while the steady MCP workload of `steady.py` runs beside it:

- the workload is served (`assert_served`): zero failed client calls and
  control-API reads, each answered within the steady timeout, at least
  `WINDOW_CALLS` calls made while the hostile plugin runs; Vigil's peak RSS
  within `RSS_GROWTH` of its start. How fast they were answered is printed,
  never asserted (a busy machine moves it; `vigil-bench busy-plugins`
  measures latency beside plugins);
- `good-probe` on the same backend keeps being called, without failures, and
  stays active;
- the limit's manifest key is named in `/api/v1/plugins` (`last_limit`) and in
  the log (`plugin call hit a limit`), and the cap held, measured where it
  can be from the other side (the HTTP server, the backend, the log).
"""

from __future__ import annotations

import re
import select
import shutil
import socket
import socketserver
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from harness import Gateways, demo_stdio_args, stdio_backend
from steady import WINDOW_CALLS, Report, assert_served, steady_load
from support import ControlApi, http_session, plugin_dir, plugins_by_name, poll

pytestmark = pytest.mark.anyio

ANSI = re.compile(r"\x1b\[[0-9;]*m")

#: Most Vigil's RSS may grow over a test's steady load (from its first sample
#: to its peak). The unbounded cases grew far more (one connection per request,
#: a log line per microsecond); a busy debug build moves a few MiB.
RSS_GROWTH = 64 << 20


class ConnServer:
    """A loopback HTTP/1.1 server that answers each request with `answer(path, sock)`.

    It counts connections open at once, overall and per request path (the
    most seen is kept), and how many it accepted. A connection counts as
    open while the client holds it: when a new one arrives, those the client
    has already closed (a handler may not have noticed yet) stop counting
    first, so a client that closes one and opens the next is not seen with
    both open.
    """

    def __init__(self, answer: Callable[[str, socket.socket], None]) -> None:
        self.lock = threading.Lock()
        self.open: dict[str, int] = {}
        self.most: dict[str, int] = {}
        self.total_open = 0
        self.most_total = 0
        self.accepted = 0
        #: Connections counted open, with their path.
        self.socks: dict[socket.socket, str] = {}
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                sock: socket.socket = self.request
                sock.settimeout(30)
                head = b""
                try:
                    while b"\r\n\r\n" not in head and len(head) < 65536:
                        chunk = sock.recv(4096)
                        if not chunk:
                            return
                        head += chunk
                except OSError:
                    return
                parts = head.split(b" ", 2)
                path = parts[1].decode(errors="replace") if len(parts) > 1 else "?"
                outer._opened(path, sock)
                try:
                    answer(path, sock)
                except OSError:
                    pass
                finally:
                    outer._closed(sock)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True
            request_queue_size = 4096

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _opened(self, path: str, sock: socket.socket) -> None:
        with self.lock:
            for other in [s for s in self.socks if _peer_closed(s)]:
                self._forget(other)
            self.accepted += 1
            self.socks[sock] = path
            self.open[path] = self.open.get(path, 0) + 1
            self.most[path] = max(self.most.get(path, 0), self.open[path])
            self.total_open += 1
            self.most_total = max(self.most_total, self.total_open)

    def _closed(self, sock: socket.socket) -> None:
        with self.lock:
            self._forget(sock)

    def _forget(self, sock: socket.socket) -> None:
        path = self.socks.pop(sock, None)
        if path is not None:
            self.open[path] -= 1
            self.total_open -= 1

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _peer_closed(sock: socket.socket) -> bool:
    """Whether the client closed `sock` (its end of file or a reset is waiting to be read).

    Never waits: `select` with no timeout says whether anything is there
    (the socket's own timeout would make a plain `recv` wait for it).
    """
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


def trickle(path: str, sock: socket.socket) -> None:
    """The head at once, then a 60-byte body at one byte a second."""
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 60\r\nConnection: close\r\n\r\n")
    for _ in range(60):
        time.sleep(1)
        sock.sendall(b"x")


def hold(path: str, sock: socket.socket) -> None:
    """The head and the start of a long body, then nothing until the client hangs up."""
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n" + b"x" * 100)
    while sock.recv(4096):
        pass


def log_of(gw: Any) -> str:
    return ANSI.sub("", gw.proc.stderr())


def hit_lines(log: str, plugin: str, key: str) -> list[str]:
    """The WARN lines saying a call of `plugin` (for some backend) hit `key`."""
    return [
        line
        for line in log.splitlines()
        if "plugin call hit a limit" in line
        and f"plugin={plugin}@" in line
        and (f'limit="{key}"' in line or f"limit={key} " in f"{line} ")
    ]


async def start_plugins(vigil: Gateways, d: Path, backends: list[dict[str, Any]]) -> tuple[Any, ControlApi]:
    gw = vigil(backends, api={}, plugins={"dir": str(d)}, health={"interval": "1s", "timeout": "1s"})
    api = ControlApi(gw.api_base)
    await poll(
        lambda: plugins_by_name(api),
        lambda p: p.get("good-probe", {}).get("calls", 0) > 0,
        "good-probe loaded and called",
    )
    return gw, api


def drop_in(built: Path, d: Path, name: str) -> float:
    """Adds `name.wasm` to the watched directory (written aside, then renamed); when, monotonic."""
    tmp = d / f".{name}.wasm.tmp"
    shutil.copy(built / f"{name}.wasm", tmp)
    tmp.replace(d / f"{name}.wasm")
    return time.monotonic()


def probe(plugin: str, every: str, **args: Any) -> dict[str, Any]:
    return {"plugin": plugin, "every": every, **args}


async def assert_steady(
    report: Report, api: ControlApi, good_before: int, hostile: str, key: str, gw: Any
) -> dict[str, Any]:
    """What every test asserts on the steady load, good-probe and the named limit; the hostile plugin's entry."""
    print(f"under {hostile}: {report}")
    assert_served(report, calls=WINDOW_CALLS)
    growth = report.peak_rss - report.start_rss
    assert growth <= RSS_GROWTH, f"RSS grew {growth >> 20} MiB ({report})"
    plugins = await plugins_by_name(api)
    good = plugins["good-probe"]
    assert good["state"] == "active" and good["failures"] == 0, good
    assert good["calls"] > good_before, (good_before, good)
    bad = plugins[hostile]
    assert key in (bad.get("last_limit") or ""), bad
    assert bad["limit_hits"] > 0, bad
    assert hit_lines(log_of(gw), hostile, key), f"no WARN naming {key} for {hostile}"
    return bad


async def test_a_body_trickled_a_byte_a_second_ends_at_http_timeout(
    vigil: Gateways, demo_bin: Path, built_plugins: Path, tmp_path: Path
) -> None:
    """slow-body reads a body sent at 1 byte/s: the call ends at its 2 s `http_timeout`, not its 10 s deadline."""
    server = ConnServer(trickle)
    try:
        d = plugin_dir(tmp_path, built_plugins, ["good-probe"])
        (d / "slow-body.toml").write_text(
            '[http]\nallowed_hosts = ["127.0.0.1:*"]\n[limits]\nhttp_timeout = "2s"\ndeadline = "10s"\n'
        )
        backend = stdio_backend("demo", demo_bin, demo_stdio_args("demo"))
        url = f"http://127.0.0.1:{server.port}/slow"
        backend["probes"] = [probe("good-probe", "200ms"), probe("slow-body", "200ms", url=url)]
        gw, api = await start_plugins(vigil, d, [backend])
        good_before = (await plugins_by_name(api))["good-probe"]["calls"]

        async with steady_load(gw, api) as load:
            drop_in(built_plugins, d, "slow-body")
            done = await poll(
                lambda: plugins_by_name(api),
                lambda p: p.get("slow-body", {}).get("calls", 0) >= 3,
                "three slow-body calls",
            )
            await load.more_calls(WINDOW_CALLS)
        took = done["slow-body"]["last_duration_ms"]
        print(f"slow-body: last call {took} ms, {done['slow-body']}")
        # Not before the 2 s timeout (it counts from the request's start),
        # and ended by it, not by the 10 s deadline: what cut the call is
        # asserted by name below (the limit hit, and no failure: a call cut
        # at its deadline fails); how long past 2 s it ran depends on the
        # machine's load and is not.
        assert 1800 <= took < 10_000, f"the call took {took} ms; http_timeout is 2s, the deadline 10s"
        slow = await assert_steady(load.report(), api, good_before, "slow-body", "limits.http_timeout", gw)
        # Ending at the timeout is the limit, not the plugin's failure.
        assert slow["failures"] == 0 and slow["state"] == "active", slow
        assert "was still arriving after 2s" in slow["last_limit"], slow
    finally:
        server.close()


async def test_a_flood_of_requests_is_capped_per_call_and_per_plugin(
    vigil: Gateways, demo_bin: Path, built_plugins: Path, tmp_path: Path
) -> None:
    """http-flood fires 2,000 GETs per call and keeps them all: 4 per call, 6 per plugin reach the server."""
    server = ConnServer(hold)
    try:
        d = plugin_dir(tmp_path, built_plugins, ["good-probe"])
        (d / "http-flood.toml").write_text(
            '[http]\nallowed_hosts = ["127.0.0.1:*"]\n'
            # Room for its 2,000 pending responses (each a host resource), so
            # what stops the flood here is the cap on requests in flight; by
            # default `limits.host_resources` (256) would trap it first.
            '[limits]\ndeadline = "5s"\nhttp_concurrency = 4\nhttp_concurrency_plugin = 6\nhost_resources = 4096\n'
        )
        backends = []
        for name in ("demo", "demo2"):
            b = stdio_backend(name, demo_bin, demo_stdio_args(name))
            url = f"http://127.0.0.1:{server.port}/{name}"
            b["probes"] = [probe("http-flood", "100ms", url=url, count=2000, hold_ms=1000)]
            backends.append(b)
        backends[0]["probes"].append(probe("good-probe", "200ms"))
        gw, api = await start_plugins(vigil, d, backends)
        good_before = (await plugins_by_name(api))["good-probe"]["calls"]

        async with steady_load(gw, api) as load:
            drop_in(built_plugins, d, "http-flood")
            await poll(
                lambda: plugins_by_name(api),
                lambda p: p.get("http-flood", {}).get("calls", 0) >= 6,
                "six http-flood calls",
            )
            await load.more_calls(WINDOW_CALLS)
            most_total, most = server.most_total, dict(server.most)
        print(f"server: most open {most_total} at once, per backend {most}, accepted {server.accepted}")
        assert most_total <= 6, f"{most_total} connections at once; the plugin's cap is 6"
        assert all(n <= 4 for n in most.values()), f"per call (backend) at once: {most}"
        # The two backends' calls overlap: each cap is hit, and named.
        await poll(
            lambda: anyio.to_thread.run_sync(lambda: log_of(gw)),
            lambda log: all(
                hit_lines(log, "http-flood", k) for k in ("limits.http_concurrency", "limits.http_concurrency_plugin")
            ),
            "both caps hit (two probes overlapping)",
        )
        flood = await assert_steady(load.report(), api, good_before, "http-flood", "limits.http_concurrency", gw)
        assert flood["failures"] == 0 and flood["state"] == "active", flood
        # Every request past the cap was refused at once with the wasi:http code.
        outcomes = re.findall(
            r"http-flood sent 2000: (\d+) answered, (\d+) refused \(connection-limit-reached\)", log_of(gw)
        )
        assert len(outcomes) >= 6, outcomes
        for answered, refused in outcomes:
            assert int(answered) <= 4 and int(answered) + int(refused) == 2000, outcomes
    finally:
        server.close()


async def test_a_log_flood_is_cut_to_the_rate_and_the_drops_are_counted(
    vigil: Gateways, demo_bin: Path, built_plugins: Path, tmp_path: Path
) -> None:
    """log-flood logs as fast as it can for 2.5 s a call: at most 100 + 20/s of its lines reach the log."""
    d = plugin_dir(tmp_path, built_plugins, ["good-probe"])
    # The defaults: log_rate = 20 lines/s, log_burst = 100.
    (d / "log-flood.toml").write_text('[limits]\ndeadline = "3s"\n[config]\nfor_ms = 2500\n')
    backend = stdio_backend("demo", demo_bin, demo_stdio_args("demo"))
    backend["probes"] = [probe("good-probe", "200ms"), probe("log-flood", "200ms")]
    gw, api = await start_plugins(vigil, d, [backend])
    good_before = (await plugins_by_name(api))["good-probe"]["calls"]

    async with steady_load(gw, api) as load:
        dropped_at = drop_in(built_plugins, d, "log-flood")
        await poll(
            lambda: plugins_by_name(api),
            lambda p: p.get("log-flood", {}).get("calls", 0) >= 3,
            "three log-flood calls",
        )
        await load.more_calls(WINDOW_CALLS)
    flood = await assert_steady(load.report(), api, good_before, "log-flood", "limits.log_rate", gw)
    # Every line counted was written before this read, so before `ended_at`.
    log = log_of(gw)
    ended_at = time.monotonic()
    lines = log.count("log-flood line ")
    reported = [int(n) for n in re.findall(r"(\d+) plugin log lines dropped \(limits\.log_rate\)", log)]
    seconds = ended_at - dropped_at
    # The burst, then the rate, for as long as the plugin was there (+ 2 for rounding).
    bound = 100 + 20 * seconds + 2
    print(f"log-flood: {lines} lines in the log over {seconds:.1f} s (bound {bound:.0f}); dropped reported {reported}")
    assert lines <= bound, f"{lines} log-flood lines in {seconds:.1f} s; the cap allows {bound:.0f}"
    assert lines >= 100, f"only {lines} lines: the burst should pass"
    assert reported and sum(reported) > 10 * lines, reported
    assert flood["failures"] == 0 and flood["state"] == "active", flood


async def test_a_probe_flooding_its_target_sends_at_most_target_requests_per_check(
    vigil: Gateways, demo_bin: Path, built_plugins: Path, tmp_path: Path
) -> None:
    """target-flood calls the backend's `bump` in a loop: the backend's counter grows by at most 10 per check."""
    d = plugin_dir(tmp_path, built_plugins, ["good-probe"])
    # The default: target_requests = 10.
    (d / "target-flood.toml").write_text('[limits]\ndeadline = "2s"\n[config]\nfor_ms = 1000\ntool = "bump"\n')
    backend = stdio_backend("demo", demo_bin, demo_stdio_args("demo"))
    backend["probes"] = [probe("good-probe", "200ms"), probe("target-flood", "200ms")]
    gw, api = await start_plugins(vigil, d, [backend])
    good_before = (await plugins_by_name(api))["good-probe"]["calls"]

    async def counter() -> int:
        async with http_session(gw.url) as s:
            r = await s.read_resource("demo://demo/counter")
            return int("".join(getattr(c, "text", "") for c in r.contents))

    assert await counter() == 0
    async with steady_load(gw, api) as load:
        drop_in(built_plugins, d, "target-flood")
        await poll(
            lambda: plugins_by_name(api),
            lambda p: p.get("target-flood", {}).get("calls", 0) >= 4,
            "four target-flood calls",
        )
        await load.more_calls(WINDOW_CALLS)
    bumps = await counter()
    # The call in progress when the count was read may have bumped too.
    after = (await plugins_by_name(api))["target-flood"]["calls"]
    print(f"target-flood: backend counter {bumps} after {after} calls")
    assert 0 < bumps <= 10 * (after + 1), f"the backend got {bumps} tools/call in {after} checks; the cap is 10 each"
    flood = await assert_steady(load.report(), api, good_before, "target-flood", "limits.target_requests", gw)
    log = log_of(gw)
    outcomes = re.findall(r"target-flood (\d+) succeeded, (\d+) failed \(first failure: ([^\n]*)\)", log)
    assert outcomes, "target-flood reported nothing"
    for ok, failed, first in outcomes:
        assert int(ok) <= 10, outcomes
        if int(failed):
            assert "limits.target_requests" in first, first
    assert flood["failures"] == 0 and flood["state"] == "active", flood
    demo = await api.instance("demo")
    assert demo["restart_count"] == 0, demo
