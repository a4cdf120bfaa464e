"""Several replicas on PostgreSQL, measured (issue 32): in one run,

1. `tools/call` through nginx in front of three replicas against one
   replica directly (same backend, same client), and the ratio;
2. the first call on a replica adopting a session (opened on another)
   against the next calls on it;
3. failover: time from SIGKILL of a shared backend's lease holder to the
   moment another replica holds the lease (read from the store), for the
   lease given.

Runs the release build by default (`--bin-dir`), Debian's PostgreSQL and
nginx (the test setup installs both). Reuses the end-to-end tests'
helpers (tests/e2e/cluster.py, harness.py) to start them.

    CARGO_TARGET_DIR=$HOME/.cache/vigil-bench-target cargo build --release -p vigil -p vigil-demo-backend
    python3 bench/cluster.py --calls 2000

Figures and how to read them: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

import cluster  # noqa: E402
from harness import Procs, free_port, http_backend, wait_http  # noqa: E402

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
}


def open_session(http: httpx.Client, url: str) -> dict[str, str]:
    opened = http.post(url, json=INIT, headers=HEADERS)
    opened.raise_for_status()
    on = {**HEADERS, "Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
    http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=on).raise_for_status()
    return on


def call(http: httpx.Client, url: str, on: dict[str, str], n: int) -> float:
    body = {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": "alpha__echo", "arguments": {"text": "x"}}}
    t = time.perf_counter()
    r = http.post(url, json=body, headers=on)
    took = time.perf_counter() - t
    assert r.status_code == 200 and '"x"' in r.text, r.text[:200]
    return took


def figures(samples: list[float]) -> tuple[float, float, float]:
    s = sorted(samples)
    return statistics.median(s) * 1e6, s[int(len(s) * 0.99) - 1] * 1e6, len(s) / sum(s)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    target = os.environ.get("CARGO_TARGET_DIR", str(Path.home() / ".cache" / "vigil-bench-target"))
    p.add_argument("--bin-dir", default=str(Path(target) / "release"))
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--adoptions", type=int, default=30)
    p.add_argument("--lease", default="3s")
    args = p.parse_args()
    bins = Path(args.bin_dir)
    work = Path(tempfile.mkdtemp(prefix="vigil-bench-cluster-"))
    procs = Procs(work)
    pg_root = Path(tempfile.mkdtemp(prefix="vigil-pg-", dir="/tmp"))
    if os.geteuid() == 0:
        import shutil

        shutil.chown(pg_root, "postgres", "postgres")
    bindir = cluster.pg_bindir()
    import subprocess

    subprocess.run(
        [bindir / "initdb", "-D", pg_root / "data", "-U", "postgres", "--auth=trust", "--no-sync",
         "--encoding=UTF8", "--locale=C.UTF-8", "--no-instructions"],
        check=True, capture_output=True, **cluster._as_postgres(),  # noqa: SLF001 - the tests' own helper
    )
    port = free_port()
    pg = cluster.Postgres(bindir, pg_root, port, cluster._spawn(bindir, pg_root, port))  # noqa: SLF001
    try:
        db = "bench_" + uuid.uuid4().hex[:8]
        pg.psql(f"CREATE DATABASE {db}")
        demo_port = free_port()
        demo = procs.start("demo", [bins / "vigil-demo-backend", "--transport", "http", "--listen", f"127.0.0.1:{demo_port}", "--name", "alpha"])
        wait_http(f"http://127.0.0.1:{demo_port}/mcp", demo, "demo backend")
        replicas = cluster.Replicas(procs, bins / "vigil", work, pg.url(db))
        backends = [http_backend("alpha", f"http://127.0.0.1:{demo_port}/mcp")]
        env_log = {"RUST_LOG": "warn"}
        os.environ.update(env_log)
        gws = {n: replicas.start(n, backends, lease=args.lease) for n in ("vigil-a", "vigil-b", "vigil-c")}
        lb = cluster.start_nginx(procs, work / "nginx", [gw.port for gw in gws.values()])
        a = gws["vigil-a"]
        with httpx.Client(timeout=30) as http:
            # Wait until every replica serves the tools.
            deadline = time.monotonic() + 60
            for gw in gws.values():
                while True:
                    try:
                        call(http, gw.url, open_session(http, gw.url), 1)
                        break
                    except Exception:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.2)
            rows = {}
            for label, url in (("one replica, direct", a.url), ("nginx + 3 replicas", lb.url)):
                on = open_session(http, url)
                for i in range(50):
                    call(http, url, on, i)  # warm
                rows[label] = figures([call(http, url, on, i) for i in range(args.calls)])
            print(f"tools/call, one client, {args.calls} sequential calls")
            print(f"{'':24} {'p50 µs':>9} {'p99 µs':>9} {'calls/s':>9}")
            for label, (p50, p99, rate) in rows.items():
                print(f"{label:24} {p50:9.0f} {p99:9.0f} {rate:9.0f}")
            d, lbf = rows["one replica, direct"], rows["nginx + 3 replicas"]
            print(f"{'ratio (nginx+3 / direct)':24} {lbf[0] / d[0]:9.2f} {lbf[1] / d[1]:9.2f} {lbf[2] / d[2]:9.2f}")

            first, later = [], []
            b = gws["vigil-b"]
            for _ in range(args.adoptions):
                on = open_session(http, a.url)
                first.append(call(http, b.url, on, 1))
                later.extend(call(http, b.url, on, 2 + k) for k in range(5))
            print(f"\nadoption: a session opened on vigil-a, called on vigil-b ({args.adoptions} sessions)")
            print(f"first call on the adopting replica: p50 {statistics.median(first) * 1e6:.0f} µs")
            print(f"next calls there:                   p50 {statistics.median(later) * 1e6:.0f} µs")
            print(f"ratio: {statistics.median(first) / statistics.median(later):.1f}")

        holder = pg.psql("SELECT holder FROM leases WHERE backend = 'alpha'", db)
        killed_at = time.time()
        os.kill(gws[holder].proc.pid, signal.SIGKILL)
        gws[holder].proc.popen.wait()
        deadline = time.monotonic() + 60
        while True:
            row = pg.psql(
                "SELECT holder, extract(epoch FROM acquired_at), extract(epoch FROM previous_expires_at) FROM leases WHERE backend = 'alpha'",
                db,
            )
            new, acquired, expired = row.split("|")
            if new != holder:
                break
            if time.monotonic() > deadline:
                raise SystemExit("no replica took the lease over")
            time.sleep(0.05)
        print(f"\nfailover: lease = {args.lease}; the holder {holder} killed (SIGKILL)")
        print(f"its lease ran out {float(expired) - killed_at:.2f} s after the kill; {new} took it {float(acquired) - float(expired):.2f} s later")
        print(f"kill to new holder: {float(acquired) - killed_at:.2f} s")
    finally:
        procs.stop_all()
        pg.stop()


if __name__ == "__main__":
    main()
