"""Updates of a container backend, measured (issue 33): in one run,

1. `vigil serve` with one container backend (`runtime = "container"`, its
   port published) and `[backends.update]` (blue-green, short `drain` and
   `bake`), on a release of the demo backend that listens only
   `--start-delay-ms` (1,000) after it starts: "ready in 1 s";
2. `--updates` blue-green updates in a row (`POST .../update {"image"}`),
   alternating between two such releases, so each update changes the image
   (and the name `whoami` answers); per update, the time from the request to
   the promotion (the `updating -> running` transition "updated to IMAGE"
   in the backend's history, recorded at the switch of the backend set),
   to the first call answered by the new version, and to `succeeded`
   (after `bake`, the old container stopped); and where the time to the
   promotion goes (the engine's `Created` and `State.StartedAt` of the new
   container, the demo's own log lines when it starts and when it listens);
3. all along, one client session (raw JSON-RPC over httpx, a process of its
   own, so the bench's polling never holds its interpreter) calls the
   demo's `whoami` in a loop: latency p50/p99/max of the calls before each
   update, during it (request to `succeeded`, split at the promotion), around
   the switch (+-250 ms) and after it, the ratios against before, and every
   failed call.

It prints tables and, with `--json FILE`, writes every figure. It never
fails on a threshold (failed calls are counted, not asserted); it exits
non-zero only when it cannot run.

Needs the container engine the end-to-end tests use (`DOCKER_HOST`, default
unix:///run/vigil-podman.sock; `eval "$(bash scripts/container-engine.sh)"`)
and the demo image (`bash scripts/container-image.sh`); it builds its two
releases FROM that image the way tests/e2e/release_images.py does (and
reuses them while they are current). Reuses the end-to-end tests' helpers
(tests/e2e/harness.py, containers.py, release_images.py), so run it with
the tests' venv:

    CARGO_TARGET_DIR=$HOME/.cache/vigil-bench-target cargo build --release -p vigil
    CARGO_TARGET_DIR=$HOME/.cache/vigil-bench-target ~/.cache/vigil/venv/bin/python bench/updates.py --updates 5

Figures and how to read them: docs/benchmarks.md, "Updates (issue 33)".
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import re
import shutil
import struct
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

import pytest  # noqa: E402 - the helpers fail with pytest.fail; caught below
from containers import IMAGE, Engine  # noqa: E402
from harness import Gateways, Procs, free_port  # noqa: E402
from release_images import (  # noqa: E402
    RELEASE_LABEL,
    SEARCH,
    Release,
    ReleaseBox,
    build,
    containers_of,
    content_hash,
    context_files,
    inspect_image,
    label_of,
    release_image,
)

OPERATOR = {"name": "bench", "token": "bench-operator-token-0123456789abcdef", "role": "operator"}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
PROTOCOL = "2025-11-25"
FINAL = ("succeeded", "rolled_back")
#: Calls started this close to the promotion are "the switch".
SWITCH_HALF_WIDTH = 0.25
#: A call without an answer this long is failed (it catches a hang; it does not measure).
CALL_TIMEOUT = 10.0


# === time ===


_STAMP = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:?\d{2})?$")


def epoch(stamp: str | int | float) -> float:
    """An RFC 3339 time (any number of fraction digits, as engines write nanoseconds), or milliseconds since
    the epoch (a transition's `at`), as Unix seconds."""
    if isinstance(stamp, int | float):
        return stamp / 1e3
    m = _STAMP.match(stamp.strip())
    if not m:
        raise ValueError(f"not an RFC 3339 time: {stamp!r}")
    whole, frac, zone = m.groups()
    zone = "+00:00" if zone in (None, "Z") else zone
    base = datetime.fromisoformat(whole + zone).timestamp()
    return base + (float("0." + frac) if frac else 0.0)


# === the client, a process of its own ===


def mcp_answer(resp: httpx.Response, want_id: int) -> dict[str, Any]:
    """The JSON-RPC response with id `want_id`, from a JSON body or an SSE stream."""
    if resp.headers.get("content-type", "").startswith("text/event-stream"):
        for line in resp.text.splitlines():
            if line.startswith("data:"):
                try:
                    msg = json.loads(line[5:].strip())
                except ValueError:
                    continue
                if isinstance(msg, dict) and msg.get("id") == want_id:
                    return msg
        raise ValueError(f"no response with id {want_id} in the stream: {resp.text[:200]!r}")
    return resp.json()


def open_session(http: httpx.Client, url: str) -> dict[str, str]:
    body = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": "bench-updates", "version": "1"},
        },
    }
    opened = http.post(url, json=body, headers=HEADERS)
    opened.raise_for_status()
    on = {**HEADERS, "Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": PROTOCOL}
    http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=on).raise_for_status()
    return on


def call_once(http: httpx.Client, url: str, on: dict[str, str], tool: str, n: int) -> tuple[str | None, str | None]:
    """One `tools/call`: (the text answered, None) or (None, what failed)."""
    body = {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": tool, "arguments": {}}}
    try:
        resp = http.post(url, json=body, headers=on)
        if resp.status_code != 200:
            return None, f"HTTP {resp.status_code}: {resp.text[:200]}"
        msg = mcp_answer(resp, n)
    except Exception as exc:  # noqa: BLE001 - any failure of a call is counted, with its words
        return None, repr(exc)[:300]
    if "error" in msg:
        return None, f"JSON-RPC error {json.dumps(msg['error'])[:200]}"
    result = msg.get("result") or {}
    texts = [c.get("text", "") for c in result.get("content", []) if isinstance(c, dict)]
    if result.get("isError"):
        return None, f"isError result: {' '.join(texts)[:200]}"
    return "".join(texts), None


def caller(url: str, tool: str, pause: float, ready: Any, stop: Any, out: Any) -> None:
    """Calls `tool` over one session until `stop`; sends back (start wall time, seconds, answer, error) per call."""
    samples: list[tuple[float, float, str | None, str | None]] = []
    try:
        with httpx.Client(timeout=CALL_TIMEOUT) as http:
            on = open_session(http, url)
            n = 0
            while not stop.is_set():
                n += 1
                wall = time.time()
                t = time.perf_counter()
                answer, error = call_once(http, url, on, tool, n)
                took = time.perf_counter() - t
                samples.append((wall, took, answer, error))
                if answer is not None:
                    ready.set()
                if pause > 0:
                    time.sleep(pause)
    except Exception as exc:  # noqa: BLE001 - reported by the parent
        samples.append((time.time(), 0.0, None, f"the calling loop stopped: {exc!r}"))
    out.send(samples)
    out.close()


# === figures ===


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest rank."""
    if not sorted_values:
        return math.nan
    return sorted_values[max(0, math.ceil(p * len(sorted_values)) - 1)]


def stats(latencies: list[float]) -> dict[str, Any]:
    s = sorted(latencies)
    return {
        "calls": len(s),
        "p50_ms": percentile(s, 0.50) * 1e3,
        "p99_ms": percentile(s, 0.99) * 1e3,
        "max_ms": (s[-1] * 1e3) if s else math.nan,
    }


def in_window(samples: list[tuple[float, float, str | None, str | None]], lo: float, hi: float) -> list[Any]:
    return [s for s in samples if lo <= s[0] < hi]


def cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat", encoding="ascii") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


# === the engine ===


def engine_from_env() -> Engine:
    host = os.environ.setdefault("DOCKER_HOST", "unix:///run/vigil-podman.sock").strip()
    if not host.startswith("unix://"):
        raise SystemExit(f"DOCKER_HOST={host}: the bench reaches the engine over a unix socket")
    eng = Engine(Path(host.removeprefix("unix://")))
    try:
        ping = eng.request("GET", "/_ping")
    except httpx.HTTPError as exc:
        raise SystemExit(f"the container engine at {host} does not answer ({exc!r}): "
                         'run `eval "$(bash scripts/container-engine.sh)"`') from exc
    if ping.status_code != 200:
        raise SystemExit(f"the container engine at {host} answers /_ping with HTTP {ping.status_code}")
    if inspect_image(eng, IMAGE) is None:
        raise SystemExit(f"{IMAGE} is not in the engine: run `bash scripts/container-image.sh`")
    return eng


def ensure_bench_releases(engine: Engine, delay_ms: int) -> list[str]:
    """Two releases that listen `delay_ms` after they start, naming themselves apart; built where not current."""
    base = inspect_image(engine, IMAGE)
    assert base is not None
    images = []
    for side in ("a", "b"):
        tag = f"bench-ready{delay_ms}ms-{side}"
        files = context_files(tag, Release([SEARCH], {"VIGIL_DEMO_START_DELAY_MS": str(delay_ms)}))
        digest = content_hash(base["Id"], files)
        image = release_image(tag)
        before = inspect_image(engine, image)
        if label_of(before, RELEASE_LABEL) != digest:
            print(f"building {image} FROM {IMAGE}", flush=True)
            build(engine, image, files, digest)
            if before is not None:
                engine.request("DELETE", f"/images/{before['Id']}")
        images.append(image)
    return images


def demux(raw: bytes) -> str:
    """A container's log as the Docker API sends it: 8-byte frame headers unless it has a TTY."""
    out, i = [], 0
    while i + 8 <= len(raw) and raw[i] in (0, 1, 2) and raw[i + 1 : i + 4] == b"\0\0\0":
        (size,) = struct.unpack(">I", raw[i + 4 : i + 8])
        out.append(raw[i + 8 : i + 8 + size])
        i += 8 + size
    return (b"".join(out) if out and i == len(raw) else raw).decode("utf-8", "replace")


_LOG_STAMP = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2}))\s+(.*)$")


def error_lines(stderr: Path) -> dict[str, int]:
    """vigil's ERROR log lines, counted by their target and first words."""
    counts: dict[str, int] = {}
    try:
        text = stderr.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return counts
    for line in text.splitlines():
        m = re.match(r"^\S+\s+ERROR\s+(.*)$", line)
        if m:
            key = re.sub(r"\d+", "N", m.group(1))[:90]
            counts[key] = counts.get(key, 0) + 1
    return counts


_VIGIL_STARTED = re.compile(r"^(\S+)\s+INFO .*container started .*container=(\S+)")


def vigil_container_started(stderr: Path, container: str) -> float | None:
    """When vigil's engine calls (remove, create, start) for `container` had returned: its log line."""
    try:
        text = stderr.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        m = _VIGIL_STARTED.match(line)
        if m and m.group(2) == container:
            return epoch(m.group(1))
    return None


def container_times(engine: Engine, backend: str, image: str) -> dict[str, float | None]:
    """When the running container of `image` was created and started (the engine's words), and when the
    demo in it began its start delay and began to listen (its own log lines, else the engine's stamps)."""
    found = [c for c in containers_of(engine, backend) if c["Image"] == image and c["State"] == "running"]
    times: dict[str, float | None] = {"created": None, "started": None, "delay_began": None, "listening": None}
    if len(found) != 1:
        return times
    cid = found[0]["Id"]
    info = engine.request("GET", f"/containers/{cid}/json").json()
    times["created"] = epoch(info["Created"])
    times["started"] = epoch(info["State"]["StartedAt"])
    logs = engine.request("GET", f"/containers/{cid}/logs", stdout="true", stderr="true", timestamps="true")
    for line in demux(logs.content).splitlines():
        m = _LOG_STAMP.match(line.strip())
        if not m:
            continue
        stamp, rest = m.groups()
        # The demo's tracing line carries its own time after the engine's; prefer it.
        inner = _LOG_STAMP.match(rest.strip())
        at = epoch(inner.group(1)) if inner else epoch(stamp)
        text = inner.group(2) if inner else rest
        if "before serving" in text and times["delay_began"] is None:
            times["delay_began"] = at
        if "serving MCP over" in text and times["listening"] is None:
            times["listening"] = at
    return times


# === the control API ===


class Api:
    def __init__(self, base: str) -> None:
        self.http = httpx.Client(
            base_url=base,
            timeout=30,
            headers={"Authorization": f"Bearer {OPERATOR['token']}", "X-Vigil-Request": "1"},
        )

    def instance(self, name: str) -> dict[str, Any]:
        r = self.http.get(f"/api/v1/health/instances/{name}")
        r.raise_for_status()
        return r.json()

    def update(self, name: str) -> dict[str, Any] | None:
        r = self.http.get(f"/api/v1/health/instances/{name}/update")
        r.raise_for_status()
        return r.json()["update"]

    def start_update(self, name: str, image: str) -> dict[str, Any]:
        r = self.http.post(f"/api/v1/health/instances/{name}/update", json={"image": image})
        if r.status_code != 202:
            raise SystemExit(f"update of {name} to {image}: HTTP {r.status_code} {r.text[:500]}")
        return r.json()["update"]


def wait(probe: Any, until: Any, what: str, timeout: float, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if until(value):
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}; last: {str(value)[:500]}")
        time.sleep(every)


# === the run ===


def pick_bin_dir(given: str | None) -> Path:
    if given:
        return Path(given)
    target = Path(os.environ.get("CARGO_TARGET_DIR", str(Path.home() / ".cache" / "vigil-bench-target")))
    for profile in ("release", "debug"):
        if (target / profile / "vigil").is_file():
            return target / profile
    raise SystemExit(f"no vigil under {target}/release or {target}/debug: build it, or give --bin-dir")


def no_nan(v: Any) -> Any:
    """`v` with NaN as None (JSON has no NaN)."""
    if isinstance(v, float) and math.isnan(v):
        return None
    if isinstance(v, dict):
        return {k: no_nan(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [no_nan(x) for x in v]
    return v


def fmt(v: float | None, digits: int = 2) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin-dir", help="where vigil is (default: $CARGO_TARGET_DIR/release, else .../debug; "
                   "CARGO_TARGET_DIR defaults to ~/.cache/vigil-bench-target)")
    p.add_argument("--updates", type=int, default=5, help="blue-green updates in a row")
    p.add_argument("--start-delay-ms", type=int, default=1000, help="how long after its start each release listens")
    p.add_argument("--bake", default="2s", help="[backends.update] bake")
    p.add_argument("--drain", default="1s", help="[backends.update] drain")
    p.add_argument("--ready-timeout", default="30s", help="[backends.update] ready_timeout")
    p.add_argument("--window", type=float, default=3.0, help="seconds of calls measured before and after each update")
    p.add_argument("--pause-ms", type=float, default=10.0, help="the client's pause between calls")
    p.add_argument("--warmup", type=float, default=2.0, help="seconds of unrecorded calls before the first window")
    p.add_argument("--log-dir", help="keep vigil.toml and vigil's logs here (default: a scratch dir, removed)")
    p.add_argument("--json", help="also write every figure to this file")
    args = p.parse_args()

    bins = pick_bin_dir(args.bin_dir)
    source = bins / "vigil"
    if not source.is_file():
        raise SystemExit(f"no vigil at {source}")
    profile = bins.name if bins.name in ("release", "debug") else "unknown profile"
    engine = engine_from_env()
    images = ensure_bench_releases(engine, args.start_delay_ms)
    base_id = (inspect_image(engine, IMAGE) or {}).get("Id", "?")

    work = Path(args.log_dir) if args.log_dir else Path(tempfile.mkdtemp(prefix="vigil-bench-updates-"))
    work.mkdir(parents=True, exist_ok=True)
    # A copy, so that a rebuild of the target dir during the run does not swap the binary.
    bin_copy_dir = Path(tempfile.mkdtemp(prefix="vigil-bench-updates-bin-"))
    vigil_bin = bin_copy_dir / "vigil"
    shutil.copy2(source, vigil_bin)
    print(f"vigil: {source} ({profile} build), run from a copy")
    print(f"backend images: {images[0]}, {images[1]} (FROM {IMAGE}, {base_id[:19]}; each listens "
          f"{args.start_delay_ms} ms after it starts)")
    load = Path("/proc/loadavg").read_text(encoding="ascii").split()[:3]
    print(f"engine: {os.environ['DOCKER_HOST']}; machine: {os.cpu_count()} CPUs, load average {' '.join(load)}")

    procs = Procs(work)
    box = ReleaseBox(f"bench-{uuid.uuid4().hex[:8]}", free_port())
    policy = {"strategy": "blue-green", "ready_timeout": args.ready_timeout, "drain": args.drain, "bake": args.bake}
    ctx = multiprocessing.get_context("spawn")
    stop, ready = ctx.Event(), ctx.Event()
    theirs, ours = ctx.Pipe(duplex=False)
    client = None
    rows: list[dict[str, Any]] = []
    samples: list[tuple[float, float, str | None, str | None]] = []
    busy: list[tuple[int, int]] = []
    try:
        gw = Gateways(procs, vigil_bin, work)(
            [box.config(images[0], update=policy)],
            api={"tokens": [OPERATOR]},
            env={"RUST_LOG": os.environ.get("VIGIL_BENCH_RUST_LOG", "info")},
        )
        api = Api(gw.api_base)
        wait(lambda: api.instance(box.name)["state"], lambda s: s == "running", f"{box.name} running", 60)
        client = ctx.Process(target=caller, args=(gw.url, box.tool("whoami"), args.pause_ms / 1e3, ready, stop, ours))
        client.start()
        if not ready.wait(60):
            raise SystemExit("the client got no answer from whoami within 60 s")
        time.sleep(args.warmup)
        busy.append(cpu_times())
        current = images[0]
        for i in range(args.updates):
            target = images[(i + 1) % 2]
            time.sleep(args.window)  # the "before" window
            t0 = time.time()
            started = api.start_update(box.name, target)
            u = wait(
                lambda: api.update(box.name),
                lambda u, want=started["id"]: u is not None and u["id"] == want and u["state"] in FINAL,
                f"update {started['id']} to end",
                120,
                every=0.05,
            )
            detail = api.instance(box.name)
            # The promotion: the new version's `updating -> running`, "updated to IMAGE", at the switch.
            since = epoch(u["started_at"]) - 0.001
            promoted = [
                t for t in detail["transitions"]
                if t["to"] == "running" and t["reason"] == f"updated to {target}" and epoch(t["at"]) >= since
            ]
            rolled = [t for t in detail["transitions"] if "rolled back" in t["reason"] and epoch(t["at"]) >= since]
            times = container_times(engine, box.name, target) if u["state"] == "succeeded" else {}
            times["vigil_started"] = vigil_container_started(gw.proc.stderr_path, f"vigil-{box.name}-{u['id']}")
            row = {
                "n": i + 1,
                "from": current,
                "to": target,
                "state": u["state"],
                "reason": u.get("reason"),
                "posted": t0,
                "started_at": epoch(u["started_at"]),
                "ended_at": epoch(u["ended_at"]) if u.get("ended_at") else None,
                "promoted_at": epoch(promoted[-1]["at"]) if promoted else None,
                "rollback_at": epoch(rolled[-1]["at"]) if rolled else None,
                **{f"container_{k}": v for k, v in times.items()},
            }
            rows.append(row)
            print(f"update {i + 1}: {current.rsplit(':', 1)[-1]} -> {target.rsplit(':', 1)[-1]}: {u['state']}"
                  + (f" ({u['reason']})" if u.get("reason") else ""), flush=True)
            if u["state"] == "succeeded":
                current = target
            time.sleep(args.window)  # the "after" window
        busy.append(cpu_times())
        stop.set()
        if theirs.poll(60):
            samples = theirs.recv()
        client.join(30)
    except pytest.fail.Exception as exc:  # a harness helper could not start something
        raise SystemExit(f"could not run: {exc}") from None
    finally:
        stop.set()
        if client is not None and client.is_alive():
            client.terminate()
        procs.stop_all()
        vigil_errors = error_lines(work / "vigil.stderr")
        for c in containers_of(engine, box.name):
            engine.remove(c["Id"])
        shutil.rmtree(bin_copy_dir, ignore_errors=True)
        if not args.log_dir:
            shutil.rmtree(work, ignore_errors=True)
    (b0, t0), (b1, t1) = busy
    machine_busy = (b1 - b0) / max(1, t1 - t0) * (os.cpu_count() or 1)

    report(args, rows, samples, images, str(source), profile, machine_busy, vigil_errors)


def report(
    args: argparse.Namespace,
    rows: list[dict[str, Any]],
    samples: list[tuple[float, float, str | None, str | None]],
    images: list[str],
    source: str,
    profile: str,
    machine_busy: float,
    vigil_errors: dict[str, int],
) -> None:
    names = {img: img.rsplit(":", 1)[-1] for img in images}
    failures = [s for s in samples if s[3] is not None]
    windows: dict[str, list[float]] = {k: [] for k in ("before", "during", "starting", "baking", "switch", "after")}
    per_update = []
    for r in rows:
        t0, end, at = r["posted"], r["ended_at"], r["promoted_at"]
        lat = lambda lo, hi: [s[1] for s in in_window(samples, lo, hi) if s[3] is None]  # noqa: E731
        windows["before"] += lat(t0 - args.window, t0)
        if end is not None:
            windows["during"] += lat(t0, end)
            windows["after"] += lat(end, end + args.window)
        if at is not None and end is not None:
            windows["starting"] += lat(t0, at)
            windows["baking"] += lat(at, end)
            windows["switch"] += lat(at - SWITCH_HALF_WIDTH, at + SWITCH_HALF_WIDTH)
        # The first call answered by the new version: its start bounds the switch from above.
        want = names[r["to"]]
        firsts = [s for s in samples if s[0] >= t0 and s[2] == want]
        first_new = firsts[0] if firsts else None
        old_after = [
            s for s in samples if at is not None and at < s[0] < (end or math.inf) and s[2] not in (None, want)
        ]
        during_failed = [s for s in failures if t0 <= s[0] < (end or math.inf)]
        ms = lambda a, b: None if a is None or b is None else (b - a) * 1e3  # noqa: E731
        d = {
            "n": r["n"],
            "to": want,
            "state": r["state"],
            "reason": r["reason"],
            "post_to_promotion_ms": ms(t0, at),
            "post_to_first_new_answer_ms": ms(t0, first_new[0] + first_new[1]) if first_new else None,
            "first_new_call_started_after_promotion_ms": ms(at, first_new[0]) if first_new else None,
            "first_new_call_latency_ms": first_new[1] * 1e3 if first_new else None,
            "post_to_succeeded_ms": ms(t0, end) if r["state"] == "succeeded" else None,
            "post_to_started_at_ms": ms(t0, r["started_at"]),
            "post_to_container_created_ms": ms(t0, r.get("container_created")),
            "created_to_started_ms": ms(r.get("container_created"), r.get("container_started")),
            "post_to_vigil_saw_started_ms": ms(t0, r.get("container_vigil_started")),
            "started_to_process_ms": ms(r.get("container_started"), r.get("container_delay_began")),
            "process_to_listening_ms": ms(r.get("container_delay_began"), r.get("container_listening")),
            "listening_to_promotion_ms": ms(r.get("container_listening"), at),
            "promotion_to_succeeded_ms": ms(at, end) if r["state"] == "succeeded" else None,
            "old_version_answers_after_promotion": len(old_after),
            "failed_calls_during": len(during_failed),
        }
        per_update.append(d)

    w = {k: stats(v) for k, v in windows.items()}
    before = w["before"]
    for k, v in w.items():
        v["p50_ratio"] = v["p50_ms"] / before["p50_ms"] if before["calls"] else math.nan
        v["p99_ratio"] = v["p99_ms"] / before["p99_ms"] if before["calls"] else math.nan

    print(f"\nvigil {profile} build ({source}); {len(rows)} blue-green updates, bake {args.bake}, drain {args.drain}; "
          f"releases listen {args.start_delay_ms} ms after they start")
    print(f"client: one session, tools/call whoami in a loop with {args.pause_ms:g} ms pauses; "
          f"{len(samples)} calls, {len(failures)} failed;\nthe whole machine busy {machine_busy:.2f} CPUs on average "
          "over the updates and their windows (vigil, the engine, the containers, the bench, and anything else)\n")
    print("per update (ms from the POST; promotion = the updating -> running transition's `at`)")
    cols = [
        ("to", "to", 20), ("state", "state", 10),
        ("promotion", "post_to_promotion_ms", 9), ("1st new", "post_to_first_new_answer_ms", 8),
        ("its lat", "first_new_call_latency_ms", 7),
        ("succeeded", "post_to_succeeded_ms", 9),
        ("created", "post_to_container_created_ms", 8), ("cr->st", "created_to_started_ms", 7),
        ("started", "post_to_vigil_saw_started_ms", 8),
        ("st->proc", "started_to_process_ms", 8), ("proc->lis", "process_to_listening_ms", 9),
        ("lis->prom", "listening_to_promotion_ms", 9), ("failed", "failed_calls_during", 6),
    ]
    print(" ".join(f"{h:>{wd}}" for h, _, wd in cols))
    for d in per_update:
        print(" ".join(f"{(d[k] if isinstance(d[k], str) else fmt(d[k], 0)):>{wd}}" for _, k, wd in cols))
    numeric = [k for _, k, _ in cols if k not in ("to", "state")]
    med = {k: sorted(x for x in (d[k] for d in per_update) if x is not None) for k in numeric}
    print(" ".join(f"{h:>{wd}}" if k in ("to", "state") else f"{fmt(percentile(med[k], 0.5), 0):>{wd}}"
                   for h, k, wd in [("median", "to", 20), ("", "state", 10), *cols[2:]]))
    print("\ncolumns: 1st new = POST to the first answer by the new version; its lat = that call's latency;"
          " created = POST to the new"
          "\ncontainer's Created (engine); cr->st = Created to State.StartedAt;"
          "\nstarted = POST to vigil's 'container started' log line (its remove, create and start calls returned);"
          "\nst->proc = StartedAt to the demo's first log line (its start delay begins); proc->lis = to its"
          "\n'serving' line (it listens); lis->prom = to the promotion (vigil connects, initializes, lists, probes,"
          "\nswitches)")
    for d in per_update:
        if d["old_version_answers_after_promotion"]:
            print(f"update {d['n']}: {d['old_version_answers_after_promotion']} calls started after the promotion "
                  "were answered by the old version")

    print("\nlatency of the client's calls (ms), all updates together")
    print(f"{'window':44} {'calls':>6} {'p50':>7} {'p99':>7} {'max':>7} {'p50/before':>10} {'p99/before':>10}")
    labels = {
        "before": f"before ({args.window:g} s before each POST)",
        "during": "during (POST to succeeded)",
        "starting": "  POST to promotion (new version starting)",
        "baking": "  promotion to succeeded (bake, old stopped)",
        "switch": f"  switch (promotion +-{SWITCH_HALF_WIDTH * 1e3:.0f} ms)",
        "after": f"after ({args.window:g} s after succeeded)",
    }
    for k, label in labels.items():
        v = w[k]
        print(f"{label:44} {v['calls']:6d} {fmt(v['p50_ms']):>7} {fmt(v['p99_ms']):>7} {fmt(v['max_ms']):>7} "
              f"{fmt(v['p50_ratio']):>10} {fmt(v['p99_ratio']):>10}")
    print(f"\nfailed calls: {len(failures)}" + (" (blue-green should fail none)" if failures else ""))
    for s in failures[:10]:
        print(f"  at {datetime.fromtimestamp(s[0]).isoformat(timespec='milliseconds')}: {s[3]}")
    # The warm-up's calls (the first one opens the session's lane to the backend) are not measured.
    measured_from = rows[0]["posted"] - args.window if rows else math.inf
    slow = sorted((s for s in samples if s[3] is None and s[0] >= measured_from), key=lambda s: -s[1])[:5]
    if slow and rows:
        print("slowest measured calls (when they started, from the nearest promotion: latency)")
        for s in slow:
            ats = [r["promoted_at"] for r in rows if r["promoted_at"] is not None]
            near = min(ats, key=lambda a: abs(a - s[0])) if ats else None
            rel = f"{(s[0] - near) * 1e3:+.0f} ms" if near else "?"
            print(f"  {rel}: {s[1] * 1e3:.2f} ms ({s[2]})")

    print(f"\nERROR lines in vigil's log: {sum(vigil_errors.values())}")
    for what, n in sorted(vigil_errors.items(), key=lambda kv: -kv[1]):
        print(f"  {n:5d} x {what}")

    if args.json:
        Path(args.json).write_text(
            json.dumps(
                no_nan({
                    "vigil": source,
                    "profile": profile,
                    "images": images,
                    "settings": {k: getattr(args, k) for k in ("updates", "start_delay_ms", "bake", "drain",
                                                               "ready_timeout", "window", "pause_ms", "warmup")},
                    "machine": {"cpus": os.cpu_count(), "busy_cpus": machine_busy},
                    "calls": len(samples),
                    "failed_calls": len(failures),
                    "failures": [{"at": s[0], "error": s[3]} for s in failures],
                    "updates": per_update,
                    "update_times": rows,
                    "windows": w,
                    "vigil_error_lines": vigil_errors,
                }),
                indent=2,
                default=str,
            )
            + "\n",
            encoding="utf-8",
        )
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
