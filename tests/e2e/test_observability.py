"""What operators read without the dashboard: `/metrics` (parsed with
Prometheus' own text-format parser) moving as a backend is killed and
restarted, `vigil status` agreeing with the API, and tool-call spans
exported over OTLP/HTTP to a collector the test runs (decoded with the
OpenTelemetry protobuf messages).
"""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client.parser import text_string_to_metric_families

from harness import Gateways, Procs, demo_pids, demo_stdio_args, run_vigil, stdio_backend
from support import DEADLINE, ControlApi, Receiver, call_text, http_session, poll

pytestmark = pytest.mark.anyio

VIEWER = {"name": "watcher", "token": "viewer-token-0123456789abcdef", "role": "viewer"}
OPERATOR = {"name": "oncall", "token": "operator-token-0123456789abcdef", "role": "operator"}

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(base: str, token: str) -> Samples:
    """Every sample of `/metrics`, keyed by (name, labels)."""
    async with httpx.AsyncClient(timeout=DEADLINE) as client:
        resp = await client.get(f"{base}/metrics", headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code == 200, resp.text[:500]
    assert resp.headers["content-type"].startswith("text/plain; version=0.0.4"), resp.headers
    samples: Samples = {}
    for family in text_string_to_metric_families(resp.text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def test_metrics_parse_and_move_as_a_backend_is_killed_and_restarted(vigil: Gateways, demo_bin: Path) -> None:
    gw = vigil(
        [stdio_backend("demo", demo_bin, demo_stdio_args("demo"))],
        api={"tokens": [VIEWER, OPERATOR]},
        health={"interval": "300ms", "timeout": "300ms"},
        restart={"base": "300ms", "jitter": 0.0},
    )
    api = ControlApi(gw.api_base, VIEWER["token"])
    await api.wait_state("demo", "running")

    async with http_session(gw.url) as session:
        assert await call_text(session, "demo__echo", {"text": "hi"}) == "hi"
        before = await poll(
            lambda: scrape(gw.api_base, VIEWER["token"]),
            lambda s: value(s, "vigil_probe_duration_seconds_count", backend="demo") >= 1,
            "a probe timed",
        )
        assert value(before, "vigil_backend_state", backend="demo", state="running") == 1
        assert value(before, "vigil_backend_state", backend="demo", state="offline") == 0
        assert value(before, "vigil_sessions") >= 1
        assert value(before, "vigil_tool_calls_total", backend="demo") >= 1
        assert value(before, "vigil_tool_call_duration_seconds_count", backend="demo") >= 1

        [pid] = await anyio.to_thread.run_sync(demo_pids, gw.proc.pid, "demo", demo_bin)
        os.kill(pid, signal.SIGKILL)
        await api.wait_for("demo", lambda d: d["restart_count"] >= 1 and d["state"] == "running", "restarted")
        # The recovery's list_changed has to reach the session before it is counted.
        after = await poll(
            lambda: scrape(gw.api_base, VIEWER["token"]),
            lambda s: value(s, "vigil_list_changed_sent_total") > value(before, "vigil_list_changed_sent_total"),
            "list_changed counted",
        )
        assert await call_text(session, "demo__echo", {"text": "again"}) == "again"
        after = await scrape(gw.api_base, VIEWER["token"])

    restarts = "vigil_backend_restarts_total"
    assert value(after, restarts, backend="demo") == value(before, restarts, backend="demo") + 1
    for to in ["offline", "restarting", "running"]:
        name = "vigil_health_transitions_total"
        assert value(after, name, backend="demo", to=to) > value(before, name, backend="demo", to=to), to
    assert value(after, "vigil_backend_state", backend="demo", state="running") == 1
    assert value(after, "vigil_tool_calls_total", backend="demo") > value(
        before, "vigil_tool_calls_total", backend="demo"
    )
    assert value(after, "vigil_catalog_changes_total") > value(before, "vigil_catalog_changes_total")

    # Quarantine is counted too.
    operator = api.as_token(OPERATOR["token"])
    await operator.act_ok("demo", "quarantine", {"reason": "metrics test"})
    held = await scrape(gw.api_base, VIEWER["token"])
    assert (
        value(held, "vigil_quarantines_total", backend="demo")
        == value(after, "vigil_quarantines_total", backend="demo") + 1
    )
    assert value(held, "vigil_backend_state", backend="demo", state="quarantined") == 1


async def test_vigil_status_shows_the_states_the_api_shows(vigil: Gateways, demo_bin: Path, vigil_bin: Path) -> None:
    gw = vigil(
        [stdio_backend(n, demo_bin, demo_stdio_args(n)) for n in ["alpha", "beta"]],
        api={"tokens": [VIEWER, OPERATOR]},
    )
    api = ControlApi(gw.api_base, OPERATOR["token"])
    await api.wait_state("alpha", "running")
    await api.wait_state("beta", "running")
    await api.act_ok("beta", "quarantine", {"reason": "status test"})

    def status(*extra: str) -> tuple[int, str]:
        done = run_vigil(
            vigil_bin,
            ["status", "--api", gw.api_base, "--token", VIEWER["token"], *extra],
            gw.config_path.parent,
        )
        return done.returncode, done.stdout

    code, table = await anyio.to_thread.run_sync(status)
    states = {r["name"]: r["state"] for r in await api.instances()}
    assert states == {"alpha": "running", "beta": "quarantined"}, states
    rows = {line.split()[0]: line.split()[1] for line in table.splitlines()[1:] if line.strip()}
    assert {n: rows.get(n) for n in states} == states, table
    assert "status test" in table, table
    assert code == 3, f"a quarantined backend is not serving: exit 3 expected, got {code}\n{table}"

    code, text = await anyio.to_thread.run_sync(status, "--json")
    assert code == 3
    assert {r["name"]: r["state"] for r in json.loads(text)["instances"]} == states


def spans(collector: Receiver) -> list[dict[str, object]]:
    """Every span exported to `collector` (OTLP/HTTP): name, attributes, status code, service name."""
    out = []
    for kind, body in collector.bodies("/v1/traces"):
        assert kind == "application/x-protobuf", kind
        req = ExportTraceServiceRequest.FromString(body)
        for rs in req.resource_spans:
            service = {a.key: a.value.string_value for a in rs.resource.attributes}.get("service.name")
            for ss in rs.scope_spans:
                for sp in ss.spans:
                    attrs = {a.key: a.value.string_value for a in sp.attributes}
                    out.append({"name": sp.name, "attrs": attrs, "status": sp.status.code, "service": service})
    return out


async def test_tool_calls_are_exported_as_spans_when_telemetry_is_on(vigil: Gateways, demo_bin: Path) -> None:
    collector = Receiver()
    try:
        gw = vigil(
            [stdio_backend("demo", demo_bin, demo_stdio_args("demo"))],
            telemetry={"otlp_endpoint": f"http://127.0.0.1:{collector.port}", "service_name": "vigil-e2e"},
            # Export batches every 100 ms instead of every 5 s.
            env={"OTEL_BSP_SCHEDULE_DELAY": "100"},
        )
        async with http_session(gw.url) as session:
            assert await call_text(session, "demo__echo", {"text": "traced"}) == "traced"
            failed = await session.call_tool("demo__fail", {})
            assert failed.is_error

        def tool_spans() -> list[dict[str, object]]:
            return [s for s in spans(collector) if s["name"] == "tools/call"]

        calls = await poll(lambda: anyio.to_thread.run_sync(tool_spans), lambda s: len(s) >= 2, "two spans")
        by_tool = {s["attrs"]["tool"]: s for s in calls}
        echo, fail = by_tool["echo"], by_tool["fail"]
        assert echo["attrs"]["backend"] == "demo" and echo["service"] == "vigil-e2e", echo
        # STATUS_CODE_OK = 1, STATUS_CODE_ERROR = 2
        assert echo["status"] == 1 and fail["status"] == 2, calls
        # Nothing but tool calls is exported.
        assert {s["name"] for s in spans(collector)} == {"tools/call"}
    finally:
        collector.close()


async def test_vigil_events_follow_prints_a_kill_and_recovery_as_they_happen(
    vigil: Gateways, demo_bin: Path, vigil_bin: Path, procs: Procs
) -> None:
    gw = vigil(
        [stdio_backend("demo", demo_bin, demo_stdio_args("demo"))],
        api={"tokens": [VIEWER, OPERATOR]},
        restart={"base": "300ms", "jitter": 0.0},
    )
    api = ControlApi(gw.api_base, VIEWER["token"])
    await api.wait_state("demo", "running")
    follow = procs.start(
        "events", [vigil_bin, "events", "--follow", "--api", gw.api_base], env={"VIGIL_TOKEN": VIEWER["token"]}
    )

    def printed(pattern: str) -> Callable[[], Awaitable[bool]]:
        async def seen() -> bool:
            return re.search(pattern, follow.stdout()) is not None

        return seen

    # The recent history first (from the stream's snapshot).
    await poll(printed(r"demo\s+starting\s+→\s+running"), bool, "the history")
    [pid] = await anyio.to_thread.run_sync(demo_pids, gw.proc.pid, "demo", demo_bin)
    os.kill(pid, signal.SIGKILL)
    await poll(printed(r"demo\s+running\s+→\s+offline\s+.*(SIGKILL|signal 9)"), bool, "the kill, live")
    await poll(
        printed(r"(?s)offline\s+→\s+restarting.*restarting\s+→\s+starting.*starting\s+→\s+running"),
        bool,
        "the recovery",
    )
    assert follow.alive(), follow.stderr()
    os.kill(follow.pid, signal.SIGINT)
    code = await anyio.to_thread.run_sync(lambda: follow.popen.wait(timeout=DEADLINE))
    assert code == 0, f"Ctrl-C ends a follow cleanly: exit {code}\n{follow.stderr()}"

    # `vigil plugins` without a plugin directory says so, and exits 0.
    done = await anyio.to_thread.run_sync(
        lambda: run_vigil(
            vigil_bin, ["plugins", "--api", gw.api_base, "--token", VIEWER["token"]], gw.config_path.parent
        )
    )
    assert done.returncode == 0 and "plugins are off" in done.stdout, (done.returncode, done.stdout, done.stderr)
