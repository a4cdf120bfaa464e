"""Secrets never leave Vigil: configured values, URL credentials, session ids.

One gateway holds every kind of configured secret and a backend that leaks
each one:

- `dead`: an HTTP backend whose URL carries userinfo and an `api_key` query
  value, on a port nothing listens on (its failure reasons name the URL);
- `leaky` (`backends/leaky_server.py`): an HTTP backend with an `api_key` in
  its URL and configured `X-Api-Key` / `Authorization` headers, whose tools
  answer JSON-RPC errors quoting those headers and the request URL;
- `login`: a stdio backend whose env holds a token that it prints to stderr
  before failing.

None of the secret values may appear in the control API (reports and
transition histories), the event stream (`/api/v1/events`), the errors the
Python SDK client gets, or anywhere in Vigil's stderr log; the masked form
`***` appears where the values were. Session ids (bearer credentials of MCP
sessions) must not appear in Vigil's log at the default log level.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from harness import (
    Gateways,
    Procs,
    Vigil,
    demo_stdio_args,
    free_port,
    http_backend,
    render_config,
    run_vigil,
    start_python_backend,
    stdio_backend,
)
from support import (
    DEADLINE,
    SDK_READ_TIMEOUT,
    ControlApi,
    Inbox,
    call_error,
    call_text,
    http_session,
    poll,
    unwrapped_failures,
)

pytestmark = pytest.mark.anyio

USERINFO_PW = "userinfo-pw-1234"
QUERY_KEY = "query-key-5678"
LEAKY_QUERY = "leaky-key-9012"
HEADER_KEY = "header-key-3456"
BEARER = "bearer-tok-7890"
ENV_TOKEN = "env-token-2468"
RELOAD_TOKEN = "reload-token-1357"
LOG_TOKEN = "log-token-8642"
SECRETS = [USERINFO_PW, QUERY_KEY, LEAKY_QUERY, HEADER_KEY, BEARER, ENV_TOKEN, RELOAD_TOKEN, LOG_TOKEN]
SHORT_KEY_WARNING = (
    "backends.late.env.API_KEY: the value is shorter than 6 characters, so Vigil cannot mask it"
    " in logs, reasons and errors; use a longer secret"
)

LOGIN_WRAPPER = """#!/bin/sh
echo "cannot log in with $LOGIN_TOKEN" >&2
exit 3
"""


def login_wrapper(tmp_path: Path) -> Path:
    login = tmp_path / "login.sh"
    login.write_text(LOGIN_WRAPPER, encoding="utf-8")
    login.chmod(0o755)
    return login


def leaks(text: str) -> list[str]:
    """The secret values found in `text`."""
    return [s for s in SECRETS if s in text]


async def events_hello(api_base: str) -> str:
    """The data of the first event of `GET /api/v1/events` (the `hello` snapshot)."""
    async with httpx.AsyncClient(timeout=DEADLINE) as client, client.stream("GET", f"{api_base}/api/v1/events") as resp:
        assert resp.status_code == 200, resp.status_code
        event, data = None, []
        with anyio.fail_after(DEADLINE):
            async for line in resp.aiter_lines():
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].lstrip())
                elif not line and data:
                    assert event == "hello", event
                    return "\n".join(data)
    raise AssertionError("the event stream ended before its hello")


async def test_configured_secrets_and_url_credentials_never_leave_vigil(
    vigil: Gateways, procs: Procs, tmp_path: Path
) -> None:
    leaky = start_python_backend(procs, "leaky", "leaky_server.py")
    login = login_wrapper(tmp_path)
    dead_url = f"http://vigil-user:{USERINFO_PW}@127.0.0.1:{free_port()}/mcp?api_key={QUERY_KEY}&region=eu"
    gw = vigil(
        [
            # Retried after a minute: offline for the whole test.
            http_backend("dead", dead_url) | {"restart": {"base": "60s", "max": "60s", "jitter": 0.0}},
            http_backend("leaky", f"{leaky.url}?api_key={LEAKY_QUERY}")
            | {"headers": {"X-Api-Key": HEADER_KEY, "Authorization": f"Bearer {BEARER}"}},
            stdio_backend("login", login, []) | {"env": {"LOGIN_TOKEN": ENV_TOKEN}},
        ],
        api={},
        restart={"base": "200ms", "jitter": 0.0, "max_restarts": 2},
    )
    api = ControlApi(gw.api_base)
    await api.wait_state("leaky", "running")
    await api.wait_for("dead", lambda d: d["state"] == "offline" and d["reason"], "offline with a reason")
    await api.wait_state("login", "quarantined")

    # The control API: reports and every transition's reason.
    reports = json.dumps(await api.instances())
    details = {name: await api.instance(name) for name in ("dead", "leaky", "login")}
    assert leaks(reports) == [], reports
    assert leaks(json.dumps(details)) == [], details
    dead_reasons = [t["reason"] for t in details["dead"]["transitions"]] + [details["dead"]["reason"]]
    assert any("api_key=***&region=***" in r for r in dead_reasons), dead_reasons
    login_reasons = [t["reason"] for t in details["login"]["transitions"]]
    assert any("cannot log in with ***" in r for r in login_reasons), login_reasons

    # The event stream's snapshot.
    hello = await events_hello(gw.api_base)
    assert leaks(hello) == [], hello
    assert "api_key=***" in hello

    # What an MCP client is told.
    async with session_of(gw.url, []) as s:
        err = await call_error(s, "leaky__quote_headers", {"names": ["x-api-key", "authorization"]})
        assert err.error.message == "refused: x-api-key='***', authorization='***'", err.error
        assert err.error.data == {"headers": {"x-api-key": "***", "authorization": "***"}}, err.error
        err = await call_error(s, "leaky__quote_url")
        assert err.error.message == f"refused request to http://127.0.0.1:{leaky.port}/mcp?api_key=***", err.error
        err = await call_error(s, "dead__echo", {"text": "x"})
        assert err.error.message.startswith("backend 'dead' is unavailable (offline)"), err.error
        assert leaks(str(err.error)) == [], err.error
        assert "api_key=***" in err.error.message, err.error
        assert await call_text(s, "leaky__echo", {"text": "served"}) == "served"

    # Vigil's whole log, rmcp's own lines included.
    log = gw.proc.stderr()
    assert leaks(log) == [], [line for line in log.splitlines() if leaks(line)][:5]
    assert "cannot log in with ***" in log
    assert "refused: x-api-key='***', authorization='***'" in log


async def test_a_reload_masks_the_secrets_of_the_backends_it_adds(
    vigil: Gateways, vigil_bin: Path, demo_bin: Path, tmp_path: Path
) -> None:
    gw = vigil([stdio_backend("demo", demo_bin, demo_stdio_args("demo"))], api={})
    late = stdio_backend("late", login_wrapper(tmp_path), []) | {"env": {"LOGIN_TOKEN": RELOAD_TOKEN, "API_KEY": "abc"}}
    text = gw.config_path.read_text(encoding="utf-8").rstrip("\n") + "\n" + render_config({}, [late])
    # `vigil check` warns about the credential too short to be masked.
    candidate = tmp_path / "candidate.toml"
    candidate.write_text(text, encoding="utf-8")
    check = run_vigil(vigil_bin, ["check", "--config", str(candidate)], tmp_path)
    assert check.returncode == 0, check.stderr
    assert f"warning: {SHORT_KEY_WARNING}" in check.stderr.splitlines(), check.stderr

    tmp = gw.config_path.with_name("vigil.toml.new")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(gw.config_path)
    await ControlApi(gw.api_base).wait_state("late", "restarting", "quarantined")
    log = await poll(
        lambda: _read(gw), lambda t: "cannot log in with ***" in t, "the new backend's stderr line in Vigil's log"
    )
    assert leaks(log) == [], [line for line in log.splitlines() if leaks(line)][:5]
    assert SHORT_KEY_WARNING in log


async def test_a_backends_log_messages_reach_clients_masked(vigil: Gateways, demo_bin: Path) -> None:
    # The demo backend's `log` tool sends its message as an MCP log
    # notification: here, a value the config holds as the backend's secret.
    demo = stdio_backend("demo", demo_bin, demo_stdio_args("demo")) | {"env": {"DEMO_TOKEN": LOG_TOKEN}}
    gw = vigil([demo])
    logs = Inbox()
    async with http_session(gw.url, logging_callback=logs) as s:
        await call_text(s, "demo__log", {"level": "error", "message": f"calling upstream with {LOG_TOKEN}"})
        [entry] = await logs.wait_for(lambda p: "calling upstream" in json.dumps(p.data), "the log notification")
    assert entry.data == "calling upstream with ***", entry
    assert leaks(gw.proc.stderr()) == []


async def _read(gw: Vigil) -> str:
    return gw.proc.stderr()


@asynccontextmanager
async def session_of(url: str, seen: list[str]) -> AsyncIterator[ClientSession]:
    """An initialized SDK session whose HTTP client records every
    `Mcp-Session-Id` the gateway sends into `seen`."""

    async def record(response: httpx2.Response) -> None:
        sid = response.headers.get("mcp-session-id")
        if sid and sid not in seen:
            seen.append(sid)

    with unwrapped_failures():
        async with AsyncExitStack() as stack:
            client = await stack.enter_async_context(
                httpx2.AsyncClient(timeout=httpx2.Timeout(30.0, read=300.0), event_hooks={"response": [record]})
            )
            read, write = await stack.enter_async_context(streamable_http_client(url, http_client=client))
            session = await stack.enter_async_context(ClientSession(read, write, read_timeout_seconds=SDK_READ_TIMEOUT))
            with anyio.fail_after(DEADLINE):
                await session.initialize()
            yield session


@pytest.mark.parametrize("rust_log", [None, "info,vigil=debug"], ids=["default", "vigil-debug"])
async def test_session_ids_stay_out_of_the_log(vigil: Gateways, demo_bin: Path, rust_log: str | None) -> None:
    # `None` runs Vigil without RUST_LOG: its own default level (`info`).
    gw: Vigil = vigil([stdio_backend("demo", demo_bin, demo_stdio_args("demo"))], env={"RUST_LOG": rust_log})
    ids: list[str] = []
    for n in range(3):
        async with session_of(gw.url, ids) as s:
            assert await call_text(s, "demo__echo", {"text": f"session {n}"}) == f"session {n}"
    assert len(ids) == 3, ids
    log = gw.proc.stderr()
    assert "demo__echo" in log or "catalog changed" in log, "Vigil logged nothing: the check below would be empty"
    found = [sid for sid in ids if sid in log]
    lines = [line for line in log.splitlines() if any(s in line for s in found)]
    assert found == [], f"session ids in Vigil's log: {lines[:3]}"
