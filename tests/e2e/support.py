"""Helpers for Vigil's end-to-end tests: MCP client sessions, waiting, listing.

Everything here waits on *events* with a deadline (`DEADLINE` seconds). A
deadline only bounds a wait so that a broken build fails instead of hanging;
no test compares an elapsed time against a threshold.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx
import httpx2
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

#: Upper bound, in seconds, for any single wait on an event (a process to
#: listen, a notification to arrive, a backend to come back). Generous on
#: purpose: it bounds, it does not measure.
DEADLINE = float(os.environ.get("VIGIL_E2E_DEADLINE", "30"))

#: The SDK's own per-request timeout. Longer than `DEADLINE`, so a request
#: that gets no answer trips the test's deadline (a failure) rather than
#: coming back as the SDK's timeout error, which could pass for the gateway's.
SDK_READ_TIMEOUT = 2 * DEADLINE

#: First pause between two polls of a condition that has no event to wait
#: on; it grows by half each round, up to `POLL_INTERVAL_MAX`.
POLL_INTERVAL = 0.05
POLL_INTERVAL_MAX = 0.5

#: The tools every demo backend has, whatever its tools file says.
DEMO_TOOLS = frozenset(
    {
        "echo",
        "add",
        "whoami",
        "slow",
        "hang",
        "crash",
        "ask_llm",
        "ask_user",
        "list_roots",
        "progress",
        "log",
        "bump",
        "fail",
    }
)

#: A bound on pages when following list cursors; a server that never stops
#: paginating fails the test instead of looping forever.
MAX_PAGES = 100

T = TypeVar("T")


# === sessions ===


@asynccontextmanager
async def http_session(
    url: str, *, headers: dict[str, str] | None = None, **callbacks: Any
) -> AsyncIterator[ClientSession]:
    """An initialized Python SDK session over streamable HTTP to `url`.

    `headers` go on every HTTP request (say, the client's `Authorization`).
    `callbacks` are passed to `ClientSession` (`sampling_callback`,
    `elicitation_callback`, `list_roots_callback`, `logging_callback`,
    `message_handler`).
    """
    with unwrapped_failures():
        async with AsyncExitStack() as stack:
            client = None
            if headers:
                timeout = httpx2.Timeout(30.0, read=300.0)
                client = await stack.enter_async_context(httpx2.AsyncClient(headers=headers, timeout=timeout))
            read, write = await stack.enter_async_context(streamable_http_client(url, http_client=client))
            session = await stack.enter_async_context(
                ClientSession(read, write, read_timeout_seconds=SDK_READ_TIMEOUT, **callbacks)
            )
            with anyio.fail_after(DEADLINE):
                await session.initialize()
            yield session


@asynccontextmanager
async def stdio_session(command: Path, args: list[str], errlog: Path, **callbacks: Any) -> AsyncIterator[ClientSession]:
    """An initialized Python SDK session to a child process over stdio.

    The child's stderr is appended to `errlog`.
    """
    params = StdioServerParameters(command=str(command), args=args)
    with unwrapped_failures(), open(errlog, "a", encoding="utf-8") as err:
        async with stdio_client(params, errlog=err) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=SDK_READ_TIMEOUT, **callbacks) as session:
                with anyio.fail_after(DEADLINE):
                    await session.initialize()
                yield session


@contextmanager
def unwrapped_failures() -> Iterator[None]:
    """Re-raise a test failure that the SDK's task groups wrapped in exception groups.

    A failed assertion inside a session comes out as a group of a group of
    one `AssertionError`; the report should show the assertion itself.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        leaf: BaseException = group
        while isinstance(leaf, BaseExceptionGroup) and len(leaf.exceptions) == 1:
            leaf = leaf.exceptions[0]
        if isinstance(leaf, Exception | pytest.fail.Exception) and not isinstance(leaf, BaseExceptionGroup):
            raise leaf from None
        raise


def short(value: Any, limit: int = 2000) -> str:
    """`repr(value)`, cut to `limit` characters for failure messages."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more characters]"


# === waiting ===


class Inbox:
    """Records what a session's callback receives and lets a test wait for it.

    Use an instance as a `message_handler` / `logging_callback`, or call
    `put` from any callback.
    """

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._changed = anyio.Event()

    def put(self, item: Any) -> None:
        self.items.append(item)
        self._changed.set()
        self._changed = anyio.Event()

    async def __call__(self, item: Any) -> None:
        self.put(item)

    def matching(self, pred: Callable[[Any], bool]) -> list[Any]:
        return [i for i in self.items if pred(i)]

    async def wait_for(
        self, pred: Callable[[Any], bool], what: str, *, count: int = 1, timeout: float = DEADLINE
    ) -> list[Any]:
        """Wait until at least `count` recorded items satisfy `pred`; return them."""
        try:
            with anyio.fail_after(timeout):
                while True:
                    changed = self._changed
                    found = self.matching(pred)
                    if len(found) >= count:
                        return found
                    await changed.wait()
        except TimeoutError:
            seen = short(self.items)
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; received: {seen}") from None


def is_tools_list_changed(message: Any) -> bool:
    return isinstance(message, types.ToolListChangedNotification)


async def poll(
    probe: Callable[[], Awaitable[T]],
    until: Callable[[T], bool],
    what: str,
    *,
    timeout: float = DEADLINE,
) -> T:
    """Call `probe` until `until(result)` holds; fail after `timeout` seconds.

    For conditions that have no notification to wait on (a backend coming
    back, a process listening). Each probe is itself bounded by the deadline.
    Exceptions from `probe` count as "not yet" and are reported on failure.
    """
    last: Any = "<never probed>"
    pause = POLL_INTERVAL
    with anyio.move_on_after(timeout):
        while True:
            try:
                value = await probe()
            except Exception as exc:  # noqa: BLE001 - reported below
                last = exc
            else:
                last = value
                if until(value):
                    return value
            await anyio.sleep(pause)
            pause = min(pause * 1.5, POLL_INTERVAL_MAX)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last probe gave: {short(last)}")


def poll_sync(probe: Callable[[], T], until: Callable[[T], bool], what: str, *, timeout: float = DEADLINE) -> T:
    """[`poll`] for a blocking `probe` (a wire client in a test without an event loop)."""
    deadline = time.monotonic() + timeout
    last: Any = "<never probed>"
    pause = POLL_INTERVAL
    while time.monotonic() < deadline:
        last = probe()
        if until(last):
            return last
        time.sleep(pause)
        pause = min(pause * 1.5, POLL_INTERVAL_MAX)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last probe gave: {short(last)}")


# === listing and results ===


async def list_all(session: ClientSession, kind: str) -> list[Any]:
    """Every item of a list method, following `nextCursor` (bounded)."""
    method = {
        "tools": (session.list_tools, "tools"),
        "resources": (session.list_resources, "resources"),
        "resource_templates": (session.list_resource_templates, "resource_templates"),
        "prompts": (session.list_prompts, "prompts"),
    }[kind]
    call, field = method
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        with anyio.fail_after(DEADLINE):
            page = await call(params=params)
        items.extend(getattr(page, field))
        cursor = page.next_cursor
        if not cursor:
            return items
    raise AssertionError(f"{kind}/list still paginating after {MAX_PAGES} pages")


async def tool_names(session: ClientSession) -> set[str]:
    return {t.name for t in await list_all(session, "tools")}


async def wait_for_tools(session: ClientSession, names: set[str], *, absent: set[str] = frozenset()) -> set[str]:
    """Poll `tools/list` until every name in `names` is listed and none in `absent` is."""
    return await poll(
        lambda: tool_names(session),
        lambda listed: names <= listed and not (absent & listed),
        f"tools/list to contain {sorted(names)} and none of {sorted(absent)}",
    )


async def announced(
    s: ClientSession, inbox: Inbox, seen: int, check: Callable[[set[str]], bool], what: str
) -> set[str]:
    """Wait for a `tools/list_changed` (past the `seen` first) after which tools/list satisfies `check`.

    A notification left over from start-up may come first and be followed by
    an unchanged list; the change under test must still be announced by one
    later notification (bounded by the deadline), and never be visible only
    by polling.
    """
    count = seen
    for _ in range(MAX_PAGES):
        count += 1
        await inbox.wait_for(is_tools_list_changed, f"tools/list_changed {what}", count=count)
        listed = await tool_names(s)
        if check(listed):
            return listed
    raise AssertionError(f"{MAX_PAGES} list_changed notifications and tools/list never showed {what}")


def prefixed(backend: str, names: set[str] | frozenset[str], sep: str = "__") -> set[str]:
    return {f"{backend}{sep}{n}" for n in names}


def text_of(result: types.CallToolResult | types.GetPromptResult | types.ReadResourceResult) -> str:
    """The text parts of a tool result, prompt or resource, joined by newlines."""
    parts: list[str] = []
    if isinstance(result, types.CallToolResult):
        parts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    elif isinstance(result, types.GetPromptResult):
        parts = [m.content.text for m in result.messages if isinstance(m.content, types.TextContent)]
    elif isinstance(result, types.ReadResourceResult):
        parts = [c.text for c in result.contents if isinstance(c, types.TextResourceContents)]
    return "\n".join(parts)


async def call_text(session: ClientSession, name: str, arguments: dict[str, Any] | None = None, **kw: Any) -> str:
    """Call a tool that must succeed and return its text."""
    with anyio.fail_after(DEADLINE):
        result = await session.call_tool(name, arguments or {}, **kw)
    assert not result.is_error, f"{name} returned an error result: {text_of(result)!r}"
    return text_of(result)


async def call_error(session: ClientSession, name: str, arguments: dict[str, Any] | None = None) -> MCPError:
    """Call a tool that must fail with a JSON-RPC error; return the error.

    The call must come back at all within the deadline: a hang fails the test.
    """
    try:
        with anyio.fail_after(DEADLINE):
            result = await session.call_tool(name, arguments or {})
    except MCPError as err:
        return err
    except TimeoutError:
        raise AssertionError(f"{name}: no answer within {DEADLINE}s (expected a JSON-RPC error)") from None
    raise AssertionError(f"{name}: expected a JSON-RPC error, got a result: {short(result)}")


def is_unavailable(err: BaseException, backend: str) -> bool:
    """The gateway's error for a call to a backend that is down."""
    msg = str(err)
    return isinstance(err, MCPError) and f"'{backend}'" in msg and "unavailable" in msg.lower()


def write_tools_file(path: Path, tools: list[dict[str, Any]], *, notify: bool = True) -> None:
    """Replace a demo backend's tools file atomically (write, then rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"notify": notify, "tools": tools}), encoding="utf-8")
    os.replace(tmp, path)


def eprint(*args: Any) -> None:
    print(*args, file=sys.stderr)


# === the control API ===


class ControlApi:
    """Vigil's control API (`[api] listen`) as one principal: `token`, or none.

    Requests are bounded by the deadline; the JSON helpers check the status.
    """

    def __init__(self, base: str, token: str | None = None) -> None:
        self.base = base
        self.token = token

    def as_token(self, token: str | None) -> ControlApi:
        return ControlApi(self.base, token)

    async def request(self, method: str, path: str, body: Any = None) -> httpx.Response:
        # `X-Vigil-Request` is what a page on another origin cannot send
        # without a preflight; the API wants it (or a token) on every POST.
        headers = {"X-Vigil-Request": "1"}
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        async with httpx.AsyncClient(timeout=DEADLINE) as client:
            return await client.request(method, f"{self.base}{path}", headers=headers, json=body)

    async def get_json(self, path: str) -> Any:
        resp = await self.request("GET", path)
        assert resp.status_code == 200, f"GET {path}: HTTP {resp.status_code} {resp.text[:500]}"
        return resp.json()

    async def instances(self) -> list[dict[str, Any]]:
        """`GET /api/v1/health/instances`: every backend's report."""
        return (await self.get_json("/api/v1/health/instances"))["instances"]

    async def instance(self, name: str) -> dict[str, Any]:
        """`GET /api/v1/health/instances/NAME`: the report with `transitions` (oldest first) and `last_exit`."""
        return await self.get_json(f"/api/v1/health/instances/{name}")

    async def act(self, name: str, action: str, body: Any = None) -> httpx.Response:
        """`POST /api/v1/health/instances/NAME/ACTION` (`restart`, `quarantine`, `release`)."""
        return await self.request("POST", f"/api/v1/health/instances/{name}/{action}", body)

    async def act_ok(self, name: str, action: str, body: Any = None) -> dict[str, Any]:
        resp = await self.act(name, action, body)
        assert resp.status_code == 200, f"{action} {name}: HTTP {resp.status_code} {resp.text[:500]}"
        return resp.json()

    async def audit(self, limit: int = 100) -> list[dict[str, Any]]:
        """`GET /api/v1/audit?limit=N`: the newest audit entries, oldest first."""
        return (await self.get_json(f"/api/v1/audit?limit={limit}"))["entries"]

    async def wait_for(self, name: str, until: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        """Poll backend `name`'s detail until `until(detail)` holds; return that detail."""
        return await poll(lambda: self.instance(name), until, f"{name}: {what}")

    async def wait_state(self, name: str, *states: str) -> dict[str, Any]:
        return await self.wait_for(name, lambda d: d["state"] in states, f"state in {states}")


class Receiver:
    """A local HTTP server that records every POST: path, content type, body, receipt time.

    `host` is the address it listens on (`"::1"` for an IPv6 receiver),
    `port` its port (default: a free one).
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        import http.server
        import socket
        import threading

        self.posts: list[tuple[str, str, bytes, float]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                kind = self.headers.get("Content-Type", "")
                outer.posts.append((self.path, kind, body, time.monotonic()))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        class Server(http.server.ThreadingHTTPServer):
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

        self.server = Server((host, port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def on(self, path: str) -> list[tuple[Any, float]]:
        """The JSON bodies posted to `path`, with their receipt times."""
        return [(json.loads(body or b"null"), at) for p, _, body, at in list(self.posts) if p == path]

    def bodies(self, path: str) -> list[tuple[str, bytes]]:
        """The raw bodies posted to `path`, with their content types."""
        return [(kind, body) for p, kind, body, _ in list(self.posts) if p == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def plugin_dir(tmp_path: Path, built: Path, names: list[str]) -> Path:
    """`tmp_path/plugins` holding a copy of each `built/NAME.wasm`."""
    d = tmp_path / "plugins"
    d.mkdir(exist_ok=True)
    for n in names:
        shutil.copy(built / f"{n}.wasm", d / f"{n}.wasm")
    return d


async def plugins_by_name(api: ControlApi) -> dict[str, dict[str, Any]]:
    """`GET /api/v1/plugins`, keyed by plugin name."""
    body = await api.get_json("/api/v1/plugins")
    return {p["name"]: p for p in body["plugins"]}


def transition_path(transitions: list[dict[str, Any]]) -> list[str]:
    """`["running>offline", ...]` of a backend's transitions, for failure messages and comparisons."""
    return [f"{t['from']}>{t['to']}" for t in transitions]


def find_run(transitions: list[dict[str, Any]], states: list[str], start: int = 0) -> int | None:
    """Index of the first run of consecutive transitions (at or after `start`) that moves through `states`.

    `states = ["running", "offline", "restarting"]` matches
    `running>offline, offline>restarting`.
    """
    steps = list(zip(states, states[1:], strict=False))
    for i in range(start, len(transitions) - len(steps) + 1):
        if all((transitions[i + k]["from"], transitions[i + k]["to"]) == step for k, step in enumerate(steps)):
            return i
    return None


#: A control-API viewer token for tests that read `/metrics`.
METRICS_VIEWER = {"name": "watcher", "token": "viewer-token-0123456789abcdef", "role": "viewer"}


def forwarded_of(metrics: str) -> dict[tuple[str, str], float]:
    """`vigil_requests_forwarded_total` by (method, path) in a `/metrics` text."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(metrics):
        for s in family.samples:
            if s.name == "vigil_requests_forwarded_total":
                out[(s.labels["method"], s.labels["path"])] = s.value
    return out


async def forwarded(gw: Any, token: str) -> dict[tuple[str, str], float]:
    """`vigil_requests_forwarded_total` by (method, path), read from `gw`'s `/metrics` with `token`."""
    async with httpx.AsyncClient(timeout=DEADLINE) as client:
        resp = await client.get(f"{gw.api_base}/metrics", headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code == 200, resp.text[:500]
    return forwarded_of(resp.text)


def moved(before: dict[tuple[str, str], float], after: dict[tuple[str, str], float]) -> dict[tuple[str, str], float]:
    """What changed between two `forwarded` readings."""
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}
