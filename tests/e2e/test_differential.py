"""Differential suite: real MCP servers, directly and through Vigil, byte for byte.

Each case does one operation twice with the raw JSON-RPC client of
`reference/wire.py`: against the reference server run directly over stdio,
and against Vigil (`vigil serve`'s `/mcp`, or `vigil stdio`) in front of the
same server run as a stdio backend (`naming = "prefix"`). The JSON texts
that crossed the wire are compared after `wire.normalize`, which takes out
exactly `wire.DIFFERENCES` (ids, the name prefix, the progress token,
Vigil's own `_meta` keys and initialize result, the envelope's member order,
whitespace); key order and the text of every number count.

Both eras: the cases above speak the handshake era (2025-11-25); the
2026-07-28 cases use `wire.ModernHttpWire` / `wire.ModernStdioWire` (no
`initialize`, the revision's envelope in every request's `_meta`) on both
fronts, against the server's own era directly: a handshake-era session for
the servers that refuse `server/discover` (the TypeScript ones), a
2026-07-28 session for those that answer it (`mcp-server-time`,
`mcp-server-git`); `normalize(..., revision=MODERN)` also takes out what
the era adds (`resultType`, `ttlMs`, `cacheScope`).

Clients: besides the raw wire, the official Python SDK 1.x and 2.x
(`reference/sdk_client.py`: what the SDK's objects carry) and the MCP
Inspector's CLI (`@modelcontextprotocol/inspector@2.12.0 --cli`: what it
prints), each run directly and through Vigil.

The servers (`@modelcontextprotocol/server-everything`, `-filesystem`,
`-memory`, `mcp-server-time`, `mcp-server-git`) and the Inspector are
installed by `reference/setup.sh`, the SDK 1.x venv by `clients/setup.sh`;
what the servers do on the wire is written down in `reference/README.md`.
Without them these tests fail naming the script.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import types

from harness import Gateways, Proc, Procs, free_port, render_config, stdio_backend
from reference import wire
from reference.wire import (
    MODERN,
    Frame,
    HttpWire,
    ModernHttpWire,
    ModernStdioWire,
    Obj,
    Server,
    StdioWire,
    normalize,
)
from support import DEADLINE, http_session, poll_sync, short, stdio_session, wait_for_tools

FRONTS = ["http", "stdio"]

# --- client capabilities (JSON text sent in `initialize`) ---

NO_CAPABILITIES = "{}"
SAMPLING = '{"sampling":{}}'
ELICITATION_FORM = '{"elicitation":{"form":{}}}'
ELICITATION_URL = '{"elicitation":{"form":{},"url":{}}}'
ROOTS = '{"roots":{"listChanged":true}}'
TASKS = '{"tasks":{"list":{},"cancel":{},"requests":{"sampling":{"createMessage":{}},"elicitation":{"create":{}}}}}'
ALL_CAPABILITIES = (
    '{"sampling":{},"elicitation":{"form":{},"url":{}},"roots":{"listChanged":true},'
    '"tasks":{"list":{},"cancel":{},"requests":{"sampling":{"createMessage":{}},"elicitation":{"create":{}}}}}'
)
# Vigil does not relay task-augmented requests to a client, so it never declares a
# client's `tasks` to a backend (docs/gateway.md, "What a relayed answer keeps"): the
# direct baseline of a client that declares `tasks` is the same client without it.
RELAYED_ALL = '{"sampling":{},"elicitation":{"form":{},"url":{}},"roots":{"listChanged":true}}'


def relayed(capabilities: str) -> str:
    """What Vigil declares to a backend for a client that declared `capabilities` (JSON text)."""
    declared = json.loads(capabilities)
    declared.pop("tasks", None)
    return json.dumps(declared, separators=(",", ":"))


CAPABILITY_SETS = {
    "none": NO_CAPABILITIES,
    "sampling": SAMPLING,
    "elicitation-form": ELICITATION_FORM,
    "elicitation-url": ELICITATION_URL,
    "roots": ROOTS,
    "tasks": TASKS,
    "all": ALL_CAPABILITIES,
}

# --- what the client answers (JSON text, written as is) ---

SAMPLING_ANSWER = (
    '{"role":"assistant","content":{"type":"text","text":"42"},"model":"reference-model","stopReason":"endTurn"}'
)
ELICITATION_ANSWER = (
    '{"action":"accept","content":{"name":"Ada Lovelace","check":true,"email":"ada@example.com",'
    '"integer":7,"number":2.5,"untitledMultipleSelectEnum":["Piano","Violin"],"legacyTitledEnum":"pet-2"}}'
)
ROOTS_ANSWER = '{"roots":[{"uri":"file:///differential","name":"differential"}]}'

CAPABLE_HANDLERS: dict[str, wire.Handler] = {
    "sampling/createMessage": lambda _m, _p: SAMPLING_ANSWER,
    "elicitation/create": lambda _m, _p: ELICITATION_ANSWER,
    "roots/list": lambda _m, _p: ROOTS_ANSWER,
}

#: The 3 MiB text file read through `read_text_file`: ASCII and multi-byte UTF-8, quotes and backslashes.
BIG_FILE_BYTES = 3 * 1024 * 1024
BIG_LINE = 'Line with "quotes", a \\ backslash, a tab\t and UTF-8: äöü € 😀 — 0123456789\n'


@pytest.fixture(autouse=True)
def reference_servers() -> None:
    gone = wire.missing()
    if gone:
        pytest.fail(
            "reference MCP servers are not installed (missing: "
            + ", ".join(str(p) for p in gone)
            + "): run `bash tests/e2e/reference/setup.sh`",
            pytrace=False,
        )


# === starting both sides ===


class Lab:
    """Starts a reference server directly and Vigil in front of it, for one test; closes them at teardown."""

    def __init__(self, procs: Procs, gateways: Gateways, vigil_bin: Path, tmp_path: Path) -> None:
        self.procs, self.gateways, self.vigil_bin, self.dir = procs, gateways, vigil_bin, tmp_path
        self.wires: list[StdioWire | HttpWire] = []

    def _stdio(
        self, label: str, argv: list[str], env: dict[str, str], handlers: dict[str, wire.Handler] | None
    ) -> StdioWire:
        taken = sum(1 for p in self.procs.started if p.name == label or p.name.startswith(label + "."))
        label = label if taken == 0 else f"{label}.{taken}"
        log = self.dir / f"wire-{label}.log"
        w = StdioWire(
            argv,
            cwd=self.dir,
            stderr=self.dir / f"{label}.stderr",
            env=env,
            handlers=handlers,
            deadline=DEADLINE,
            log=log,
        )
        # The harness stops it (and its descendants) at teardown and attaches its logs to a failure.
        self.procs.started.append(Proc(label, argv, w.popen, log, w.stderr_path))
        self.wires.append(w)
        return w

    def spawn(self, server: Server, handlers: dict[str, wire.Handler] | None = None) -> StdioWire:
        """The server run directly, not initialized."""
        return self._stdio(f"direct-{server.name}", server.argv, server.env, handlers)

    def direct_modern(self, server: Server, capabilities: str = NO_CAPABILITIES) -> ModernStdioWire:
        """The server run directly, spoken to in 2026-07-28 (for a server that answers `server/discover`)."""
        label = f"direct-{server.name}-modern"
        w = ModernStdioWire(
            server.argv, capabilities, cwd=self.dir, stderr=self.dir / f"{label}.stderr", env=server.env,
            deadline=DEADLINE, log=self.dir / f"wire-{label}.log",
        )  # fmt: skip
        self.procs.started.append(Proc(label, server.argv, w.popen, self.dir / f"wire-{label}.log", w.stderr_path))
        self.wires.append(w)
        return w

    def direct(
        self, server: Server, capabilities: str = NO_CAPABILITIES, handlers: dict[str, wire.Handler] | None = None
    ) -> StdioWire:
        """The server run directly, initialized by a client declaring `capabilities`."""
        w = self.spawn(server, handlers)
        w.initialize(capabilities)
        return w

    def through(
        self,
        front: str,
        server: Server,
        capabilities: str = NO_CAPABILITIES,
        handlers: dict[str, wire.Handler] | None = None,
        share: str | None = None,
    ) -> StdioWire | HttpWire:
        """Vigil in front of `server` (a stdio backend, `share` if given), reached over `front`, once it lists the server's tools."""
        backend = stdio_backend(server.name, server.command, server.args)
        if server.env:
            backend["env"] = server.env
        if share is not None:
            backend["share"] = share
        if front == "http":
            gw = self.gateways([backend], naming="prefix")
            w: StdioWire | HttpWire = HttpWire(
                gw.url, handlers=handlers, deadline=DEADLINE, log=self.dir / "wire-vigil-http.log"
            )
            self.wires.append(w)
        else:
            config = self.stdio_config(server, "handshake", share)
            env = {"RUST_LOG": os.environ.get("VIGIL_E2E_RUST_LOG", "info,vigil=debug"), "RUST_BACKTRACE": "1"}
            w = self._stdio("vigil-stdio", [str(self.vigil_bin), "stdio", "--config", str(config)], env, handlers)
        w.initialize(capabilities)
        wait_listed(w, prefix(server))
        return w

    def vigil_url(self, server: Server, share: str | None = None, keys: dict[str, str] | None = None) -> str:
        """`vigil serve` in front of `server`: the URL of its `/mcp`, once it lists the server's tools.

        A capability-less handshake-era session waits for the listing (a
        2026-07-28 client has no session to be told of changes on). `share`
        goes on the backend; `keys` (name: key) make `[[auth.keys]]`, and
        the waiting session uses the first.
        """
        backend = stdio_backend(server.name, server.command, server.args)
        if server.env:
            backend["env"] = server.env
        if share is not None:
            backend["share"] = share
        extra: dict[str, Any] = {}
        if keys:
            extra["auth"] = {"keys": [{"name": n, "key_env": f"VIGIL_KEY_{n.upper()}"} for n in keys]}
            extra["env"] = {f"VIGIL_KEY_{n.upper()}": k for n, k in keys.items()}
        gw = self.gateways([backend], naming="prefix", **extra)
        headers = {"Authorization": f"Bearer {next(iter(keys.values()))}"} if keys else None
        ready = HttpWire(gw.url, deadline=DEADLINE, headers=headers, log=self.dir / "wire-vigil-http-ready.log")
        self.wires.append(ready)
        ready.initialize(NO_CAPABILITIES)
        wait_listed(ready, prefix(server))
        return gw.url

    def stdio_config(self, server: Server, label: str, share: str | None = None) -> Path:
        """A config for `vigil stdio` in front of `server` (prefix naming, `share` if given)."""
        backend = stdio_backend(server.name, server.command, server.args)
        if server.env:
            backend["env"] = server.env
        if share is not None:
            backend["share"] = share
        top = {
            "listen": f"127.0.0.1:{free_port()}",
            "naming": "prefix",
            "separator": "__",
            "freshness": {"debounce": "100ms"},
        }
        config = self.dir / f"vigil-stdio-{label}.toml"
        config.write_text(render_config(top, [backend]), encoding="utf-8")
        return config

    def modern(
        self, front: str, server: Server, capabilities: str = NO_CAPABILITIES
    ) -> ModernHttpWire | ModernStdioWire:
        """A 2026-07-28 client of Vigil (in front of `server`) over `front`, declaring `capabilities` per request."""
        if front == "http":
            w: ModernHttpWire | ModernStdioWire = ModernHttpWire(
                self.vigil_url(server), capabilities, deadline=DEADLINE, log=self.dir / "wire-vigil-modern.log"
            )
            self.wires.append(w)
            return w
        argv = [str(self.vigil_bin), "stdio", "--config", str(self.stdio_config(server, "modern"))]
        env = {"RUST_LOG": os.environ.get("VIGIL_E2E_RUST_LOG", "info,vigil=debug"), "RUST_BACKTRACE": "1"}
        label = "vigil-stdio-modern"
        w = ModernStdioWire(
            argv, capabilities, cwd=self.dir, stderr=self.dir / f"{label}.stderr", env=env, deadline=DEADLINE,
            log=self.dir / f"wire-{label}.log",
        )  # fmt: skip
        self.procs.started.append(Proc(label, argv, w.popen, self.dir / f"wire-{label}.log", w.stderr_path))
        self.wires.append(w)
        # `vigil stdio` serves once its backends' first start settled: listed at once (or announced).
        wait_listed(w, prefix(server))
        return w

    def close(self) -> None:
        for w in reversed(self.wires):
            w.close()


@pytest.fixture
def lab(procs: Procs, vigil: Gateways, vigil_bin: Path, tmp_path: Path) -> Iterator[Lab]:
    it = Lab(procs, vigil, vigil_bin, tmp_path)
    try:
        yield it
    finally:
        it.close()


def prefix(server: Server) -> str:
    return f"{server.name}__"


def names_of(frame: Frame, key: str = "tools") -> list[str]:
    msg = wire.parse(frame.text)
    assert isinstance(msg, Obj) and isinstance(msg.get("result"), Obj), f"not a result: {frame.text[:500]}"
    return [item.get("name").value for item in msg.get("result").get(key)]


def wait_listed(w: StdioWire | HttpWire, pre: str) -> None:
    """Wait until Vigil's tools/list shows the backend: listed now, or after a `tools/list_changed`."""
    wait_until_listed(
        w, "tools/list", "tools", lambda names: any(n.startswith(pre) for n in names), f"a tool named {pre}*"
    )


def wait_until_listed(
    w: StdioWire | HttpWire, method: str, key: str, check: Callable[[list[str]], bool], what: str
) -> None:
    """List with `method` until `check(names)` holds, waiting for the matching `list_changed` between two listings.

    No polling: a listing that does not satisfy `check` is followed by a wait
    for a `list_changed` that came after that listing was asked for.
    """
    changed = {
        "tools/list": "notifications/tools/list_changed",
        "resources/list": "notifications/resources/list_changed",
    }
    field = "uri" if key == "resources" else "name"
    for _ in range(20):
        seen = w.count_received()
        msg = wire.parse(w.request(method).text)
        names = [item.get(field).value for item in msg.get("result").get(key)]
        if check(names):
            return
        w.wait_for(wire.is_method(changed[method]), f"{changed[method]} before {method} shows {what}", since=seen)
    raise AssertionError(f"20 list_changed notifications and {method} never showed {what}")


def assert_same(
    direct: Frame,
    via: Frame,
    *,
    answers: str | None = None,
    pre: str = "",
    revision: str | None = None,
    direct_revision: str | None = None,
    what: str,
) -> None:
    """The two messages are the same JSON text once `wire.DIFFERENCES` are taken out.

    `revision`: the one the client spoke to Vigil when it is not the direct
    session's (`MODERN`: a 2026-07-28 client against the server's
    handshake-era baseline); `direct_revision` likewise for the direct side
    (an SDK object, which carries the era's members whatever the wire said).
    """
    expected = normalize(direct.text, answers=answers, revision=direct_revision)
    got = normalize(via.text, answers=answers, prefix=pre, revision=revision)
    diff = wire.first_difference(expected, got)
    assert diff is None, f"{what} differs through Vigil: {diff}"


def compact_json(value: Any) -> str:
    """JSON text with no whitespace, as the servers write it."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def call_params(tool: str, arguments: str, pre: str = "", meta: str | None = None) -> str:
    """`tools/call` params as JSON text (arguments given as JSON text, written as is)."""
    extra = f',"_meta":{meta}' if meta is not None else ""
    return f'{{"name":{json.dumps(pre + tool)},"arguments":{arguments}{extra}}}'


def both_call(
    lab: Lab,
    front: str,
    direct_server: Server,
    via_server: Server,
    tool: str,
    arguments: str,
    *,
    capabilities: str = NO_CAPABILITIES,
    handlers: dict[str, wire.Handler] | None = None,
) -> tuple[StdioWire, StdioWire | HttpWire, Frame, Frame]:
    d = lab.direct(direct_server, capabilities, handlers)
    v = lab.through(front, via_server, capabilities, handlers)
    direct = d.request("tools/call", call_params(tool, arguments))
    via = v.request("tools/call", call_params(tool, arguments, prefix(via_server)))
    return d, v, direct, via


# === the servers' files ===


@pytest.fixture
def fs_root(tmp_path: Path) -> Path:
    root = tmp_path / "fs-root"
    root.mkdir()
    line = BIG_LINE.encode("utf-8")
    body = line * (BIG_FILE_BYTES // len(line))
    body += b"x" * (BIG_FILE_BYTES - len(body) - 1) + b"\n"
    assert len(body) == BIG_FILE_BYTES
    (root / "big.txt").write_bytes(body)
    return root


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {
        **os.environ,
        "GIT_AUTHOR_DATE": "2026-01-02T03:04:05+00:00",
        "GIT_COMMITTER_DATE": "2026-01-02T03:04:05+00:00",
        "GIT_CONFIG_GLOBAL": "/dev/null",
    }
    for argv in (
        ["git", "init", "-q", "-b", "main"],
        [
            "git",
            "-c",
            "user.name=Reference",
            "-c",
            "user.email=ref@example.invalid",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "first",
        ],
    ):
        subprocess.run(argv, cwd=repo, env=env, check=True, timeout=DEADLINE, capture_output=True)
    (repo / "notes.txt").write_text("untracked\n", encoding="utf-8")
    return repo


# === lists ===

#: (server, list method) for every list each server supports (its capabilities say so).
LISTS = [
    ("everything", "prompts/list"),
    ("everything", "resources/list"),
    ("everything", "resources/templates/list"),
    ("filesystem", "tools/list"),
    ("memory", "tools/list"),
    ("memory", "resources/list"),
    ("memory", "resources/templates/list"),
    ("time", "tools/list"),
    ("time", "prompts/list"),
    ("time", "resources/list"),
    ("time", "resources/templates/list"),
    ("git", "tools/list"),
    ("git", "prompts/list"),
    ("git", "resources/list"),
    ("git", "resources/templates/list"),
]


def make_server(name: str, tmp_path: Path, side: str) -> Server:
    """The server `name`; `side` keeps per-side state apart (the memory server's file)."""
    if name == "everything":
        return wire.everything()
    if name == "filesystem":
        root = tmp_path / "fs-root"
        root.mkdir(exist_ok=True)
        return wire.filesystem(root)
    if name == "memory":
        return wire.memory(tmp_path / f"memory-{side}.jsonl")
    if name == "time":
        return wire.time_server()
    if name == "git":
        repo = tmp_path / "repo"
        if not repo.exists():
            subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True, timeout=DEADLINE)
        return wire.git_server(repo)
    raise KeyError(name)


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize(("server", "method"), LISTS, ids=[f"{s}-{m}" for s, m in LISTS])
def test_list_is_the_servers(lab: Lab, tmp_path: Path, front: str, server: str, method: str) -> None:
    """Each list a server supports comes through Vigil as the server wrote it (names unprefixed)."""
    d = lab.direct(make_server(server, tmp_path, "direct"))
    via = make_server(server, tmp_path, "vigil")
    v = lab.through(front, via)
    assert_same(d.request(method), v.request(method), answers=method, pre=prefix(via), what=method)


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("capabilities", ["none", "all"])
def test_everything_tools_list_is_the_servers(lab: Lab, front: str, capabilities: str) -> None:
    """server-everything's whole tools/list, for a client with no capabilities and one with all of them."""
    caps = CAPABILITY_SETS[capabilities]
    d = lab.direct(wire.everything(), relayed(caps), CAPABLE_HANDLERS)
    v = lab.through(front, wire.everything(), caps, CAPABLE_HANDLERS)
    pre = prefix(wire.everything())
    assert_same(d.request("tools/list"), v.request("tools/list"), answers="tools/list", pre=pre, what="tools/list")


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("capabilities", list(CAPABILITY_SETS))
def test_everything_tool_names_follow_client_capabilities(lab: Lab, front: str, capabilities: str) -> None:
    """The tools a client is shown depend on the capabilities *it* declared, as with the server directly."""
    caps = CAPABILITY_SETS[capabilities]
    d = lab.direct(wire.everything(), relayed(caps), CAPABLE_HANDLERS)
    v = lab.through(front, wire.everything(), caps, CAPABLE_HANDLERS)
    pre = prefix(wire.everything())
    expected = names_of(d.request("tools/list"))
    got = [n.removeprefix(pre) for n in names_of(v.request("tools/list"))]
    assert got == expected, (
        f"client capabilities {caps}: through Vigil {len(got)} tools, directly {len(expected)}; "
        f"only through Vigil: {[n for n in got if n not in expected]}, "
        f"only directly: {[n for n in expected if n not in got]}"
    )


def test_everything_two_clients_on_one_vigil_see_their_own_tools(lab: Lab, tmp_path: Path) -> None:
    """On one `vigil serve`, a capability-less and a fully capable client each see the tools the server shows them."""
    pre = prefix(wire.everything())
    expected = {}
    for label in ("none", "all"):
        d = lab.direct(wire.everything(), relayed(CAPABILITY_SETS[label]), CAPABLE_HANDLERS)
        expected[label] = names_of(d.request("tools/list"))
    assert expected["none"] != expected["all"], "the server itself shows both clients the same tools"
    first = lab.through("http", wire.everything(), CAPABILITY_SETS["none"], CAPABLE_HANDLERS)
    assert isinstance(first, HttpWire)
    second = HttpWire(first.url, handlers=CAPABLE_HANDLERS, deadline=DEADLINE, log=tmp_path / "wire-vigil-http-2.log")
    lab.wires.append(second)
    second.initialize(CAPABILITY_SETS["all"])
    got = {
        "none": [n.removeprefix(pre) for n in names_of(first.request("tools/list"))],
        "all": [n.removeprefix(pre) for n in names_of(second.request("tools/list"))],
    }
    wrong = {label: (len(got[label]), len(expected[label])) for label in got if got[label] != expected[label]}
    assert not wrong, (
        f"tools (through Vigil, directly) per client: {wrong}; capability-less client through Vigil: {got['none']}"
    )


def test_everything_tools_needing_client_tasks_are_the_only_ones_withheld(lab: Lab) -> None:
    """A client declaring `tasks` misses exactly the tools the server shows only with client tasks (documented)."""
    with_tasks = names_of(lab.direct(wire.everything(), ALL_CAPABILITIES, CAPABLE_HANDLERS).request("tools/list"))
    without = names_of(lab.direct(wire.everything(), RELAYED_ALL, CAPABLE_HANDLERS).request("tools/list"))
    v = lab.through("http", wire.everything(), ALL_CAPABILITIES, CAPABLE_HANDLERS)
    pre = prefix(wire.everything())
    got = [n.removeprefix(pre) for n in names_of(v.request("tools/list"))]
    withheld = [n for n in with_tasks if n not in got]
    assert got == without, f"through Vigil: {got}; directly without client tasks: {without}"
    assert withheld == [n for n in with_tasks if n not in without], withheld
    assert withheld, "the server shows no tool only to clients with tasks: the documented difference is moot"


def tools_by_name(frame: Frame, pre: str = "") -> dict[str, Obj]:
    msg = wire.parse(frame.text)
    assert isinstance(msg, Obj)
    return {t.get("name").value.removeprefix(pre): t for t in msg.get("result").get("tools")}


@pytest.mark.parametrize("front", FRONTS)
def test_everything_tools_keep_execution(lab: Lab, front: str) -> None:
    """Every tool's `execution` member (`taskSupport`) is passed on, as the server wrote it."""
    d = lab.direct(wire.everything(), ALL_CAPABILITIES, CAPABLE_HANDLERS)
    v = lab.through(front, wire.everything(), ALL_CAPABILITIES, CAPABLE_HANDLERS)
    expected = tools_by_name(d.request("tools/list"))
    got = tools_by_name(v.request("tools/list"), prefix(wire.everything()))
    with_execution = {n: wire.dump(t.get("execution")) for n, t in expected.items() if t.has("execution")}
    assert with_execution, "server-everything lists no tool with `execution`: the reference changed"
    wrong = {
        n: (text, wire.dump(got[n].get("execution")) if n in got and got[n].has("execution") else None)
        for n, text in with_execution.items()
        if n in got and (not got[n].has("execution") or wire.dump(got[n].get("execution")) != text)
    }
    assert not wrong, f"`execution` (direct, through Vigil) differs for {len(wrong)} tools: {wrong}"


@pytest.mark.parametrize("front", FRONTS)
def test_everything_tool_schemas_keep_key_order(lab: Lab, front: str) -> None:
    """Each tool's members and its `inputSchema` keep the server's key order and text."""
    d = lab.direct(wire.everything(), NO_CAPABILITIES)
    v = lab.through(front, wire.everything(), NO_CAPABILITIES)
    expected = tools_by_name(d.request("tools/list"))
    got = tools_by_name(v.request("tools/list"), prefix(wire.everything()))
    problems = []
    for name, tool in expected.items():
        if name not in got:
            continue
        if got[name].keys_() != tool.keys_():
            problems.append(f"{name}: members {tool.keys_()} → {got[name].keys_()}")
        diff = wire.first_difference(wire.dump(tool.get("inputSchema")), wire.dump(got[name].get("inputSchema")))
        if diff:
            problems.append(f"{name}: inputSchema {diff}")
    assert not problems, f"{len(problems)} differences, the first: {problems[0]}"


# === one call per server ===


@pytest.mark.parametrize("front", FRONTS)
def test_everything_call_structured_content(lab: Lab, front: str) -> None:
    """A call with `structuredContent` (server-everything's `get-structured-content`)."""
    _d, _v, direct, via = both_call(
        lab, front, wire.everything(), wire.everything(), "get-structured-content", '{"location":"Chicago"}'
    )
    assert_same(direct, via, answers="tools/call", what="the tools/call result")


@pytest.mark.parametrize("front", FRONTS)
def test_memory_call_create_entities(lab: Lab, tmp_path: Path, front: str) -> None:
    """server-memory's `create_entities` (each side on a fresh store)."""
    args = '{"entities":[{"name":"Ada","entityType":"person","observations":["wrote the first program"]}]}'
    _d, _v, direct, via = both_call(
        lab,
        front,
        wire.memory(tmp_path / "memory-direct.jsonl"),
        wire.memory(tmp_path / "memory-vigil.jsonl"),
        "create_entities",
        args,
    )
    assert_same(direct, via, answers="tools/call", what="the tools/call result")


@pytest.mark.parametrize("front", FRONTS)
def test_time_call_convert_time(lab: Lab, front: str) -> None:
    """mcp-server-time's `convert_time`."""
    args = '{"source_timezone":"Europe/Paris","time":"16:30","target_timezone":"Asia/Tokyo"}'
    _d, _v, direct, via = both_call(lab, front, wire.time_server(), wire.time_server(), "convert_time", args)
    assert_same(direct, via, answers="tools/call", what="the tools/call result")


@pytest.mark.parametrize("front", FRONTS)
def test_git_call_log(lab: Lab, git_repo: Path, front: str) -> None:
    """mcp-server-git's `git_log` of a one-commit repository."""
    args = compact_json({"repo_path": str(git_repo), "max_count": 1})
    _d, _v, direct, via = both_call(lab, front, wire.git_server(git_repo), wire.git_server(git_repo), "git_log", args)
    assert_same(direct, via, answers="tools/call", what="the tools/call result")


@pytest.mark.parametrize("front", FRONTS)
def test_filesystem_read_3mib_text_file(lab: Lab, fs_root: Path, front: str) -> None:
    """server-filesystem's `read_text_file` of a 3 MiB file: the ~6.5 MB answer (content and structuredContent)."""
    args = compact_json({"path": str(fs_root / "big.txt")})
    server = wire.filesystem(fs_root)
    _d, _v, direct, via = both_call(lab, front, server, server, "read_text_file", args)
    assert len(direct.data) > 2 * BIG_FILE_BYTES, f"the direct answer is only {len(direct.data)} bytes"
    assert_same(direct, via, answers="tools/call", what="the 3 MiB read_text_file result")


# === server → client requests ===


def requests_of(w: StdioWire | HttpWire, method: str) -> list[Frame]:
    return w.all_received(lambda _f, m: m.get("method") == wire.Scalar(json.dumps(method)) and m.has("id"))


@pytest.mark.parametrize("front", FRONTS)
def test_sampling_request_reaches_client_unchanged(lab: Lab, front: str) -> None:
    """`trigger-sampling-request`'s `sampling/createMessage` (temperature 0.7) reaches the client as sent."""
    args = '{"prompt":"What is 6 x 7?","maxTokens":50}'
    d, v, _direct, _via = both_call(
        lab, front, wire.everything(), wire.everything(), "trigger-sampling-request", args,
        capabilities=SAMPLING, handlers=CAPABLE_HANDLERS,
    )  # fmt: skip
    [direct] = requests_of(d, "sampling/createMessage")
    via = requests_of(v, "sampling/createMessage")
    assert len(via) == 1, f"{len(via)} sampling requests reached the client through Vigil"
    assert_same(direct, via[0], what="the sampling/createMessage request")


@pytest.mark.parametrize("front", FRONTS)
def test_sampling_answer_reaches_server_unchanged(lab: Lab, front: str) -> None:
    """The client's sampling answer reaches the server as sent (the tool's result echoes what the server got)."""
    args = '{"prompt":"What is 6 x 7?","maxTokens":50}'
    _d, _v, direct, via = both_call(
        lab, front, wire.everything(), wire.everything(), "trigger-sampling-request", args,
        capabilities=SAMPLING, handlers=CAPABLE_HANDLERS,
    )  # fmt: skip
    assert_same(direct, via, answers="tools/call", what="the trigger-sampling-request result")


@pytest.mark.parametrize("front", FRONTS)
def test_elicitation_request_reaches_client_unchanged(lab: Lab, front: str) -> None:
    """`trigger-elicitation-request`'s `elicitation/create` (its requestedSchema) reaches the client as sent."""
    d, v, _direct, _via = both_call(
        lab, front, wire.everything(), wire.everything(), "trigger-elicitation-request", "{}",
        capabilities=ELICITATION_FORM, handlers=CAPABLE_HANDLERS,
    )  # fmt: skip
    [direct] = requests_of(d, "elicitation/create")
    via = requests_of(v, "elicitation/create")
    assert len(via) == 1, f"{len(via)} elicitation requests reached the client through Vigil"
    assert_same(direct, via[0], what="the elicitation/create request")


@pytest.mark.parametrize("front", FRONTS)
def test_elicitation_accept_reaches_server_unchanged(lab: Lab, front: str) -> None:
    """An accepted elicitation's content reaches the server as sent (the tool's result echoes it)."""
    _d, _v, direct, via = both_call(
        lab, front, wire.everything(), wire.everything(), "trigger-elicitation-request", "{}",
        capabilities=ELICITATION_FORM, handlers=CAPABLE_HANDLERS,
    )  # fmt: skip
    assert_same(direct, via, answers="tools/call", what="the trigger-elicitation-request result")


# === notifications ===


@pytest.mark.parametrize("front", FRONTS)
def test_progress_notifications_unchanged(lab: Lab, front: str) -> None:
    """`trigger-long-running-operation` with a progress token: each `notifications/progress` as the server sent it."""
    assert_progress_relayed(lab.direct(wire.everything()), lab.through(front, wire.everything()), front)


def assert_progress_relayed(d: StdioWire, v: Any, front: str, revision: str | None = None) -> None:
    """server-everything's `trigger-long-running-operation` with a progress token, called directly (`d`) and
    through Vigil's `front` (`v`, spoken to in `revision`): each `notifications/progress` and the result as sent."""
    args = '{"duration":0.4,"steps":2}'
    meta = '{"progressToken":"p-1"}'
    pre = prefix(wire.everything())
    direct_answer = d.request("tools/call", call_params("trigger-long-running-operation", args, meta=meta))
    via_answer = v.request("tools/call", call_params("trigger-long-running-operation", args, pre, meta))
    direct = d.all_received(lambda _f, m: m.get("method") == wire.Scalar('"notifications/progress"'))
    via = v.all_received(lambda _f, m: m.get("method") == wire.Scalar('"notifications/progress"'))
    assert len(direct) == 2, f"the server sent {len(direct)} progress notifications directly"
    assert len(via) == len(direct), f"{len(via)} progress notifications through Vigil, {len(direct)} directly"
    for n, (a, b) in enumerate(zip(direct, via, strict=True)):
        assert_same(a, b, what=f"progress notification {n + 1} ({revision or 'handshake era'})")
    # On the call's own stream (the server is stdio; on the HTTP front that
    # is the POST's): on the GET stream a client may take the result first
    # and drop the progress of an answered call.
    own = "stdio" if front == "stdio" else "post"
    assert [f.channel for f in via] == [own] * len(via), f"progress through Vigil came on {[f.channel for f in via]}"
    assert_same(direct_answer, via_answer, answers="tools/call", revision=revision, what="the tools/call result")


@pytest.mark.parametrize("front", FRONTS)
def test_resource_subscription_updates_unchanged(lab: Lab, front: str) -> None:
    """`resources/subscribe`, then `toggle-subscriber-updates`: the subscribe result and the first update as sent."""
    uri = "demo://resource/static/document/architecture.md"
    d = lab.direct(wire.everything())
    v = lab.through(front, wire.everything())
    pre = prefix(wire.everything())
    results = []
    for w, p in ((d, ""), (v, pre)):
        sub = w.request("resources/subscribe", compact_json({"uri": uri}))
        seen = w.count_received()
        w.request("tools/call", call_params("toggle-subscriber-updates", "{}", p))
        update = w.wait_for(wire.is_method("notifications/resources/updated"), f"an update of {uri}", since=seen)
        results.append((sub, update))
    (d_sub, d_update), (v_sub, v_update) = results
    assert_same(d_sub, v_sub, answers="resources/subscribe", what="the resources/subscribe result")
    assert_same(d_update, v_update, what="notifications/resources/updated")


# === a resource made by a call ===

GZIP_INPUT = "data:text/plain;base64," + base64.b64encode(b"hello differential\n" * 10).decode()


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("output", ["resource", "resourceLink"])
def test_gzip_file_as_resource_result(lab: Lab, front: str, output: str) -> None:
    """`gzip-file-as-resource` of a `data:` URL: the embedded resource or the resource link, as the server wrote it."""
    args = compact_json({"name": "diff.txt.gz", "data": GZIP_INPUT, "outputType": output})
    _d, _v, direct, via = both_call(lab, front, wire.everything(), wire.everything(), "gzip-file-as-resource", args)
    assert_same(direct, via, answers="tools/call", what="the gzip-file-as-resource result")


@pytest.mark.parametrize("front", FRONTS)
def test_gzip_session_resource_read(lab: Lab, front: str) -> None:
    """The resource `gzip-file-as-resource` registers is listed (after `resources/list_changed`) and reads the same."""
    uri = "demo://resource/session/diff.txt.gz"
    args = compact_json({"name": "diff.txt.gz", "data": GZIP_INPUT, "outputType": "resourceLink"})
    d = lab.direct(wire.everything())
    v = lab.through(front, wire.everything())
    d.request("tools/call", call_params("gzip-file-as-resource", args))
    v.request("tools/call", call_params("gzip-file-as-resource", args, prefix(wire.everything())))
    wait_until_listed(v, "resources/list", "resources", lambda uris: uri in uris, uri)
    params = compact_json({"uri": uri})
    assert_same(d.request("resources/read", params), v.request("resources/read", params), answers="resources/read",
                what="the resources/read result")  # fmt: skip


@pytest.mark.parametrize("front", FRONTS)
def test_session_resource_of_a_per_session_server(lab: Lab, front: str) -> None:
    """With `share = "session"` the resource `gzip-file-as-resource` registers is its session's: listed to it
    after `resources/list_changed` and read as directly; another client (HTTP front) neither lists nor reads it."""
    uri = "demo://resource/session/diff.txt.gz"
    args = compact_json({"name": "diff.txt.gz", "data": GZIP_INPUT, "outputType": "resourceLink"})
    d = lab.direct(wire.everything())
    v = lab.through(front, wire.everything(), share="session")
    d.request("tools/call", call_params("gzip-file-as-resource", args))
    v.request("tools/call", call_params("gzip-file-as-resource", args, prefix(wire.everything())))
    wait_until_listed(v, "resources/list", "resources", lambda uris: uri in uris, uri)
    params = compact_json({"uri": uri})
    assert_same(d.request("resources/read", params), v.request("resources/read", params), answers="resources/read",
                what="the resources/read result")  # fmt: skip
    if front != "http":
        return
    assert isinstance(v, HttpWire)
    other = HttpWire(v.url, deadline=DEADLINE, log=lab.dir / "wire-vigil-http-other.log")
    lab.wires.append(other)
    other.initialize(NO_CAPABILITIES)
    listed = wire.parse(other.request("resources/list").text)
    uris = [item.get("uri").value for item in listed.get("result").get("resources")]
    assert uri not in uris, "another session lists the session's resource"
    read = wire.parse(other.request("resources/read", params).text)
    assert read.get("error") is not None, f"another session read the session's resource: {short(str(read))}"


# === the Python SDK over the HTTP front ===


@pytest.mark.anyio
async def test_filesystem_3mib_read_sdk_http(vigil: Gateways, fs_root: Path, tmp_path: Path) -> None:
    """The Python SDK 2.x over Vigil's streamable HTTP front reads the 3 MiB file as it does directly over stdio."""
    server = wire.filesystem(fs_root)
    path = str(fs_root / "big.txt")
    text = (fs_root / "big.txt").read_text(encoding="utf-8")
    async with stdio_session(Path(server.command), server.args, tmp_path / "direct-filesystem-sdk.log") as s:
        with anyio.fail_after(DEADLINE):
            direct = await s.call_tool("read_text_file", {"path": path})
    gw = vigil([stdio_backend(server.name, server.command, server.args)], naming="prefix")
    async with http_session(gw.url) as s:
        await wait_for_tools(s, {"filesystem__read_text_file"})
        with anyio.fail_after(DEADLINE):
            via = await s.call_tool("filesystem__read_text_file", {"path": path})
    assert not direct.is_error and direct.structured_content == {"content": text}, "the direct read is not the file"
    assert not via.is_error, f"an error result through Vigil: {str(via.content)[:500]}"
    got = [c.text for c in via.content if isinstance(c, types.TextContent)]
    assert got == [text], f"content through Vigil: {len(got)} text parts, {[len(t) for t in got]} characters"
    assert via.structured_content == {"content": text}, "structuredContent through Vigil is not the file"
    dump: Callable[[Any], Any] = lambda r: r.model_dump(mode="json", by_alias=True, exclude_none=True)  # noqa: E731
    assert dump(via) == dump(direct), "the SDK's CallToolResult differs"


# === 2026-07-28, on both fronts ===
#
# A 2026-07-28 client has no `initialize`: every request carries the revision,
# the client's info and its capabilities in `_meta` (`wire.ModernHttpWire`
# for `vigil serve`'s `/mcp`, `wire.ModernStdioWire` for `vigil stdio`). The
# TypeScript servers refuse `server/discover` (they speak the handshake era
# only), so their baseline is the same server reached directly in a
# handshake-era session declaring the same capabilities; `normalize(...,
# revision=MODERN)` takes out what the era adds (`resultType`, `ttlMs`,
# `cacheScope`: docs/gateway.md, "What a relayed answer keeps"). The Python
# servers answer `server/discover`: their baseline is a direct 2026-07-28
# session.

#: Capabilities a 2026-07-28 client declares in each request (none of them `tasks`).
MODERN_CAPABILITY_SETS = {"none": NO_CAPABILITIES, "sampling-elicitation-roots": RELAYED_ALL}

TEXT_RESOURCE = "demo://resource/static/document/architecture.md"


#: What each reference server answers to `server/discover` directly, hence its 2026-07-28 baseline:
#: the TypeScript servers refuse it (a handshake-era session is the baseline), the Python ones
#: (`mcp` 2.3.0) answer it (the server spoken to in 2026-07-28 directly is).
SPEAKS_MODERN = {"everything": False, "time": True, "git": True}


@pytest.mark.parametrize("server", list(SPEAKS_MODERN))
def test_server_discover_directly_decides_the_baseline(lab: Lab, tmp_path: Path, server: str) -> None:
    """Which reference servers speak 2026-07-28 themselves: that decides each one's 2026-07-28 baseline."""
    w = lab.spawn(make_server(server, tmp_path, "direct"))
    answer = wire.parse(w.request("server/discover", wire.modern_params(None)).text)
    assert isinstance(answer, Obj), answer
    if SPEAKS_MODERN[server]:
        result = answer.get("result")
        assert isinstance(result, Obj), f"{server} refused server/discover: {wire.dump(answer)}"
        assert MODERN in [v.value for v in result.get("supportedVersions")], wire.dump(answer)
    else:
        assert isinstance(answer.get("error"), Obj), f"{server} answered server/discover: {wire.dump(answer)}"
        assert answer.get("error").get("code") == wire.Scalar("-32601"), wire.dump(answer)


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("capabilities", list(MODERN_CAPABILITY_SETS))
def test_modern_everything_tools_list_is_the_servers(lab: Lab, front: str, capabilities: str) -> None:
    """A 2026-07-28 client's tools/list is what the server lists a handshake-era client with its capabilities."""
    caps = MODERN_CAPABILITY_SETS[capabilities]
    d = lab.direct(wire.everything(), caps, CAPABLE_HANDLERS)
    v = lab.modern(front, wire.everything(), caps)
    pre = prefix(wire.everything())
    direct, via = d.request("tools/list"), v.request("tools/list")
    expected = names_of(direct)
    got = [n.removeprefix(pre) for n in names_of(via)]
    assert got == expected, f"only through Vigil: {set(got) - set(expected)}, only directly: {set(expected) - set(got)}"
    assert_same(direct, via, answers="tools/list", pre=pre, revision=MODERN, what="tools/list (2026-07-28)")


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("method", ["prompts/list", "resources/list", "resources/templates/list"])
def test_modern_everything_list_is_the_servers(lab: Lab, front: str, method: str) -> None:
    """server-everything's prompts and resources, listed to a 2026-07-28 client as the server wrote them."""
    d = lab.direct(wire.everything())
    v = lab.modern(front, wire.everything())
    assert_same(
        d.request(method), v.request(method), answers=method, pre=prefix(wire.everything()), revision=MODERN,
        what=f"{method} (2026-07-28)",
    )  # fmt: skip


@pytest.mark.parametrize("front", FRONTS)
def test_modern_everything_call_structured_content(lab: Lab, front: str) -> None:
    """A 2026-07-28 client's `get-structured-content` call: content, structuredContent as the server wrote them."""
    args = '{"location":"Chicago"}'
    d = lab.direct(wire.everything())
    v = lab.modern(front, wire.everything())
    direct = d.request("tools/call", call_params("get-structured-content", args))
    via = v.request("tools/call", call_params("get-structured-content", args, prefix(wire.everything())))
    assert_same(direct, via, answers="tools/call", revision=MODERN, what="the tools/call result (2026-07-28)")


#: Resources read by a 2026-07-28 client: a static document, and the gzip blob
#: `gzip-file-as-resource` registers (deterministic: mtime 0). The dynamic
#: templates' contents carry the time of day, so they are not compared.
MODERN_READS = {
    "static-text": (TEXT_RESOURCE, None),
    "session-blob": (
        "demo://resource/session/diff.txt.gz",
        ("gzip-file-as-resource", compact_json({"name": "diff.txt.gz", "data": GZIP_INPUT, "outputType": "resource"})),
    ),
}


def test_modern_session_resource_stays_with_its_caller(lab: Lab) -> None:
    """Two 2026-07-28 callers (API keys) of server-everything with `share = "session"`: the resource one of them
    makes is read at once as directly and listed to it; the other caller neither lists nor reads it."""
    uri = "demo://resource/session/diff.txt.gz"
    made_by = ("gzip-file-as-resource", compact_json({"name": "diff.txt.gz", "data": GZIP_INPUT, "outputType": "resourceLink"}))
    keys = {"alice": "k-alice-" + "a1" * 16, "bob": "k-bob-" + "b2" * 16}
    d = lab.direct(wire.everything())
    url = lab.vigil_url(wire.everything(), share="session", keys=keys)
    callers: dict[str, ModernHttpWire] = {}
    for who, key in keys.items():
        w = ModernHttpWire(url, NO_CAPABILITIES, deadline=DEADLINE, log=lab.dir / f"wire-vigil-modern-{who}.log")
        w.extra_headers = {"Authorization": f"Bearer {key}"}
        lab.wires.append(w)
        callers[who] = w
    alice, bob = callers["alice"], callers["bob"]
    d.request("tools/call", call_params(*made_by))
    alice.request("tools/call", call_params(*made_by, prefix(wire.everything())))
    params = compact_json({"uri": uri})
    assert_same(
        d.request("resources/read", params), alice.request("resources/read", params), answers="resources/read",
        revision=MODERN, what="the maker's resources/read result (2026-07-28)",
    )  # fmt: skip

    def listed(w: ModernHttpWire) -> list[str]:
        msg = wire.parse(w.request("resources/list").text)
        return [item.get("uri").value for item in msg.get("result").get("resources")]

    # A 2026-07-28 client is told of no change: it lists again, within the deadline.
    poll_sync(lambda: listed(alice), lambda uris: uri in uris, "the resource listed to its maker")
    assert uri not in listed(bob), "another caller lists the resource"
    read = wire.parse(bob.request("resources/read", params).text)
    assert read.get("error") is not None, f"another caller read the resource: {short(str(read))}"


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("resource", list(MODERN_READS))
def test_modern_everything_resource_read(lab: Lab, front: str, resource: str) -> None:
    """A 2026-07-28 client's `resources/read` (text and blob contents) as the server wrote it."""
    uri, made_by = MODERN_READS[resource]
    d = lab.direct(wire.everything())
    v = lab.modern(front, wire.everything())
    if made_by is not None:
        d.request("tools/call", call_params(*made_by))
        # Vigil routes a read by the URIs it listed: the call's resource once a listing shows it.
        v.listen('{"resourcesListChanged":true}')
        v.request("tools/call", call_params(*made_by, prefix(wire.everything())))
        wait_until_listed(v, "resources/list", "resources", lambda uris: uri in uris, uri)
    params = compact_json({"uri": uri})
    assert_same(
        d.request("resources/read", params), v.request("resources/read", params), answers="resources/read",
        revision=MODERN, what="the resources/read result (2026-07-28)",
    )  # fmt: skip


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize(
    ("prompt", "arguments"),
    [("simple-prompt", None), ("args-prompt", '{"city":"Paris","state":"Île-de-France"}')],
    ids=["simple", "with-arguments"],
)
def test_modern_everything_prompt_get(lab: Lab, front: str, prompt: str, arguments: str | None) -> None:
    """A 2026-07-28 client's `prompts/get` (with and without arguments) as the server wrote it."""
    extra = f',"arguments":{arguments}' if arguments is not None else ""
    d = lab.direct(wire.everything())
    v = lab.modern(front, wire.everything())
    direct = d.request("prompts/get", f'{{"name":{json.dumps(prompt)}{extra}}}')
    via = v.request("prompts/get", f'{{"name":{json.dumps(prefix(wire.everything()) + prompt)}{extra}}}')
    assert_same(direct, via, answers="prompts/get", revision=MODERN, what="the prompts/get result (2026-07-28)")


@pytest.mark.parametrize("front", FRONTS)
def test_modern_progress_notifications_unchanged(lab: Lab, front: str) -> None:
    """A 2026-07-28 client's call with a progress token: each `notifications/progress` and the result as sent."""
    assert_progress_relayed(lab.direct(wire.everything()), lab.modern(front, wire.everything()), front, MODERN)


@pytest.mark.parametrize("front", FRONTS)
def test_modern_filesystem_read_3mib_text_file(lab: Lab, fs_root: Path, front: str) -> None:
    """A 2026-07-28 client's `read_text_file` of a 3 MiB file: the ~6.5 MB answer as the server wrote it."""
    args = compact_json({"path": str(fs_root / "big.txt")})
    server = wire.filesystem(fs_root)
    d = lab.direct(server)
    v = lab.modern(front, server)
    direct = d.request("tools/call", call_params("read_text_file", args))
    via = v.request("tools/call", call_params("read_text_file", args, prefix(server)))
    assert len(direct.data) > 2 * BIG_FILE_BYTES, f"the direct answer is only {len(direct.data)} bytes"
    assert_same(direct, via, answers="tools/call", revision=MODERN, what="the 3 MiB read_text_file result (2026-07-28)")


#: The servers that speak 2026-07-28 themselves (`SPEAKS_MODERN`): one operation each, as (method, params).
DUAL_ERA_CASES = {
    "time-tools-list": ("time", "tools/list", None),
    "time-prompts-list": ("time", "prompts/list", None),
    "time-convert-time": (
        "time", "tools/call",
        ("convert_time", '{"source_timezone":"Europe/Paris","time":"16:30","target_timezone":"Asia/Tokyo"}'),
    ),
    "git-tools-list": ("git", "tools/list", None),
}  # fmt: skip



@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("case", list(DUAL_ERA_CASES))
def test_modern_dual_era_server_is_the_servers(lab: Lab, tmp_path: Path, case: str, front: str) -> None:
    """A 2026-07-28 client gets what a server that speaks 2026-07-28 answers it directly, in that era."""
    name, method, call = DUAL_ERA_CASES[case]
    direct_server = make_server(name, tmp_path, "direct")
    via_server = make_server(name, tmp_path, "vigil")
    d = lab.direct_modern(direct_server)
    v = lab.modern(front, via_server)
    pre = prefix(via_server)
    if call is None:
        direct, via = d.request(method), v.request(method)
    else:
        direct = d.request(method, call_params(call[0], call[1]))
        via = v.request(method, call_params(call[0], call[1], pre))
    assert_same(
        direct, via, answers=method, pre=pre, revision=MODERN, direct_revision=MODERN,
        what=f"{case} (2026-07-28, the server's own era directly)",
    )  # fmt: skip


# === the official Python SDK clients, 1.x and 2.x ===
#
# `reference/sdk_client.py` runs one session of the SDK (1.x with the
# interpreter of `clients/setup.sh`'s venv, 2.x with the e2e venv's) and prints
# what the SDK gives back, `model_dump(mode="json", by_alias=True,
# exclude_none=True)`: the SDK's objects, not the wire. So these compare what
# the SDK keeps of what it read (its models' members, in its models' order),
# which differs from the server's JSON text by design on both sides alike.

CACHE = Path(os.environ.get("VIGIL_CACHE") or Path.home() / ".cache" / "vigil")
PY1_PYTHON = Path(os.environ.get("VIGIL_PY1_VENV") or CACHE / "py1-venv") / "bin" / "python"
SDK_CLIENT = Path(wire.HERE) / "sdk_client.py"
SDK_PYTHONS = {"py1": PY1_PYTHON, "py2": Path(sys.executable)}


def sdk_python(sdk: str) -> Path:
    python = SDK_PYTHONS[sdk]
    if not python.is_file():
        pytest.fail(
            f"the Python SDK 1.x venv is missing ({python}): run `bash tests/e2e/clients/setup.sh`", pytrace=False
        )
    return python


def run_to_end(procs: Procs, label: str, argv: list[str], env: dict[str, str | None] | None = None) -> Proc:
    """Run `argv` (a process of the test: stopped with its tree at teardown) to its end, within the deadline."""
    proc = procs.start(label, argv, env)
    try:
        proc.popen.wait(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        proc.stop()
        pytest.fail(f"{label} still running after {DEADLINE}s; stderr:\n{proc.stderr()[-4000:]}", pytrace=False)
    return proc


def run_sdk(
    procs: Procs,
    sdk: str,
    label: str,
    target: dict[str, Any],
    wait_for: str | None,
    ops: list[Any],
    mode: str | None = None,
) -> Any:
    """`reference/sdk_client.py` with `sdk`'s interpreter: what it printed (`sdk`, `protocolVersion`, `results`)."""
    plan = {"target": target, "wait_for": wait_for, "ops": ops, "deadline": DEADLINE, "mode": mode}
    proc = run_to_end(procs, f"{sdk}-{label}", [str(sdk_python(sdk)), str(SDK_CLIENT), json.dumps(plan)])
    assert proc.popen.returncode == 0, (
        f"the {sdk} client ({label}) exited with {proc.popen.returncode}; stderr:\n{proc.stderr()[-4000:]}"
    )
    return json.loads(proc.stdout())


def sdk_target(front: str | None, server: Server, lab: Lab, label: str) -> dict[str, Any]:
    """How the SDK reaches `server`: directly (`front` None), through `vigil serve`'s `/mcp` or `vigil stdio`."""
    if front is None:
        return {"stdio": server.argv, "env": server.env, "errlog": str(lab.dir / f"{label}.server-stderr")}
    if front == "http":
        return {"http": lab.vigil_url(server)}
    config = lab.stdio_config(server, "sdk")
    return {"stdio": [str(lab.vigil_bin), "stdio", "--config", str(config)], "errlog": str(lab.dir / f"{label}.stderr")}


def as_response(result: str) -> Frame:
    """A result a client gave back (JSON text), as a response (for `normalize`: the envelope is not compared)."""
    return Frame("in", "client", ('{"jsonrpc":"2.0","id":1,"result":' + result + "}").encode("utf-8"))


def assert_same_result(
    direct: str,
    via: str,
    *,
    answers: str,
    pre: str = "",
    revision: str | None = None,
    direct_revision: str | None = None,
    what: str,
) -> None:
    """Two results (JSON text) as a client gave them back: the same once `wire.DIFFERENCES` are taken out."""
    assert_same(
        as_response(direct), as_response(via), answers=answers, pre=pre, revision=revision,
        direct_revision=direct_revision, what=what,
    )  # fmt: skip


#: The SDK clients compared: (SDK, the era it speaks to Vigil). Directly, the
#: server speaks only the handshake era: that is the baseline of each.
SDK_CLIENTS = {"py1": ("py1", None), "py2": ("py2", None), "py2-2026-07-28": ("py2", MODERN)}


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("client", list(SDK_CLIENTS))
def test_sdk_everything_tools_list_and_structured_call(lab: Lab, procs: Procs, client: str, front: str) -> None:
    """The SDK's tools/list and `get-structured-content` results (its objects' JSON), directly and through Vigil.

    What is compared is what the SDK made of each answer (`model_dump`), not
    the wire. The 2.x SDK's objects carry `ttlMs`, `cacheScope` (and, from a
    2026-07-28 answer, `resultType`) whatever the wire said, so for its
    2026-07-28 client those era members are taken out on both sides.
    """
    sdk, mode = SDK_CLIENTS[client]
    server = wire.everything()
    pre = prefix(server)
    args = {"location": "Chicago"}
    direct = run_sdk(procs, sdk, "direct", sdk_target(None, server, lab, f"{sdk}-direct"), None,
                     [["tools/list"], ["tools/call", "get-structured-content", args]])  # fmt: skip
    via = run_sdk(procs, sdk, f"vigil-{front}", sdk_target(front, server, lab, f"{sdk}-vigil"), pre,
                  [["tools/list"], ["tools/call", pre + "get-structured-content", args]], mode)  # fmt: skip
    assert via["sdk"] == direct["sdk"] and direct["sdk"].startswith(f"mcp {sdk[-1]}."), (direct["sdk"], via["sdk"])
    assert via["protocolVersion"] == (mode or direct["protocolVersion"]), (direct["protocolVersion"], via)
    (d_list, d_call), (v_list, v_call) = direct["results"], via["results"]
    assert d_call.get("structuredContent"), f"the direct call has no structuredContent: {d_call}"
    for answers, d, v in (("tools/list", d_list, v_list), ("tools/call", d_call, v_call)):
        assert_same_result(
            compact_json(d), compact_json(v), answers=answers, pre=pre, revision=mode, direct_revision=mode,
            what=f"the {client} SDK's {answers} result",
        )  # fmt: skip


# === the MCP Inspector's CLI ===
#
# `@modelcontextprotocol/inspector@2.12.0 --cli` (the launcher of setup.sh's
# cache, on its Node 22) prints a result pretty-printed; it is compared as JSON
# text (member order and number text count, the printing's whitespace does
# not). The Inspector declares `roots` and two `extensions`: Vigil declares the
# roots to the backend (a capability set) and not the extensions
# (docs/gateway.md, "What each client is shown"), so the server shows it the
# same 14 tools, `get-roots-list` among them, either way.

# Only the Inspector's `legacy` era (the handshake) is compared: the server,
# reached directly, speaks nothing else, and the Inspector prints the same
# answer differently per era (its 2026-07-28 client drops each tool's
# `execution` and keeps `$schema` first in `inputSchema`; its handshake client
# keeps `execution` and moves `$schema` last), so an Inspector speaking
# 2026-07-28 to Vigil has no baseline of its own. Vigil's 2026-07-28 answers
# are compared on the wire above.


def inspector_run(procs: Procs, lab: Lab, label: str, *args: str) -> str:
    """`inspector --cli ARGS...` run to its end (exit status 0): what it printed."""
    entry = wire.inspector_entry()
    if not entry.is_file() or not wire.node_bin().is_file():
        pytest.fail(
            f"the MCP Inspector is not installed ({entry}): run `bash tests/e2e/reference/setup.sh`", pytrace=False
        )
    home = lab.dir / "inspector-home"  # its catalog and storage (~/.mcp-inspector), not the user's
    home.mkdir(exist_ok=True)
    argv = [str(wire.node_bin()), str(entry), "--cli", *args]
    proc = run_to_end(procs, f"inspector-{label}", argv, {"HOME": str(home)})
    assert proc.popen.returncode == 0, (
        f"the Inspector ({label}) exited with {proc.popen.returncode}; stdout:\n{proc.stdout()[-2000:]}\n"
        f"stderr:\n{proc.stderr()[-4000:]}"
    )
    return proc.stdout()


def inspector(procs: Procs, lab: Lab, label: str, target: list[str], *args: str) -> str:
    """`inspector --cli ARGS... -- TARGET...` (a command and its arguments, or a URL)."""
    return inspector_run(procs, lab, label, *args, "--", *target)


def inspector_target(front: str | None, server: Server, lab: Lab) -> tuple[list[str], list[str]]:
    """(target, transport options) for the Inspector to reach `server` directly or through Vigil's `front`."""
    if front is None:
        return server.argv, []
    if front == "http":
        return [lab.vigil_url(server)], ["--transport", "http"]
    return [str(lab.vigil_bin), "stdio", "--config", str(lab.stdio_config(server, "inspector"))], []


INSPECTOR_CASES = {
    # (how to call it directly, how through Vigil), as Inspector options, and what the result answers.
    "tools-list": (["--method", "tools/list"], ["--method", "tools/list"], "tools/list"),
    "get-sum": (
        ["--method", "tools/call", "--tool-name", "get-sum", "--tool-arg", "a=1", "--tool-arg", "b=2"],
        ["--method", "tools/call", "--tool-name", "everything__get-sum", "--tool-arg", "a=1", "--tool-arg", "b=2"],
        "tools/call",
    ),
    "get-roots-list": (
        ["--method", "tools/call", "--tool-name", "get-roots-list"],
        ["--method", "tools/call", "--tool-name", "everything__get-roots-list"],
        "tools/call",
    ),
}


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("case", list(INSPECTOR_CASES))
def test_inspector_cli_prints_the_same(lab: Lab, procs: Procs, case: str, front: str) -> None:
    """What the Inspector CLI prints for server-everything directly and through Vigil (names unprefixed)."""
    server = wire.everything()
    direct_args, via_args, answers = INSPECTOR_CASES[case]
    target, options = inspector_target(None, server, lab)
    direct = inspector(procs, lab, "direct", target, *options, "--protocol-era", "legacy", *direct_args)
    target, options = inspector_target(front, server, lab)
    via = inspector(procs, lab, f"vigil-{front}", target, *options, "--protocol-era", "legacy", *via_args)
    assert_same_result(direct, via, answers=answers, pre=prefix(server), what=f"what the Inspector printed ({case})")
    if case == "tools-list":
        names = names_of(as_response(via))
        assert prefix(server) + "get-roots-list" in names, (
            f"the Inspector declares roots but is not shown get-roots-list through Vigil: {names}"
        )


# The Inspector answers `roots/list` with the roots of its server entry (a
# `--config` file's `roots`; none on the command line, so the cases above
# answer `[]`). server-everything asks for them when its client declared
# `roots` and shows them in `get-roots-list`.

#: The roots each Inspector run answers with.
INSPECTOR_ROOTS = [{"uri": "file:///differential", "name": "differential"}, {"uri": "file:///differential/other"}]
SECOND_ROOTS = [{"uri": "file:///second-client", "name": "second client"}]


def server_entry(
    lab: Lab, front: str | None, server: Server, label: str, share: str | None = None
) -> dict[str, Any]:
    """The Inspector's config entry for `server`, reached directly (`front` None) or through Vigil's `front`
    (over HTTP with the backend's `share` if given)."""
    if front is None:
        entry: dict[str, Any] = {"command": server.command, "args": server.args}
        if server.env:
            entry["env"] = server.env
        return entry
    if front == "http":
        return {"type": "http", "url": lab.vigil_url(server, share=share)}
    return {"command": str(lab.vigil_bin), "args": ["stdio", "--config", str(lab.stdio_config(server, label))]}


def inspector_with_roots(
    procs: Procs, lab: Lab, label: str, entry: dict[str, Any], roots: list[dict[str, str]], *args: str
) -> str:
    """The Inspector run on a `--config` file whose one server is `entry`, answering `roots`."""
    config = lab.dir / f"inspector-{label}.json"
    config.write_text(json.dumps({"mcpServers": {label: {**entry, "roots": roots}}}), encoding="utf-8")
    return inspector_run(procs, lab, label, "--config", str(config), "--server", label, *args)


def roots_call(name: str) -> list[str]:
    return ["--protocol-era", "legacy", "--method", "tools/call", "--tool-name", name]


@pytest.mark.parametrize("front", FRONTS)
def test_inspector_cli_roots_reach_the_server(lab: Lab, procs: Procs, front: str) -> None:
    """The roots the Inspector answers reach the server through Vigil: `get-roots-list` prints the same."""
    server = wire.everything()
    pre = prefix(server)
    direct = inspector_with_roots(
        procs, lab, "direct", server_entry(lab, None, server, "direct"), INSPECTOR_ROOTS,
        *roots_call("get-roots-list"),
    )  # fmt: skip
    assert "file:///differential/other" in direct, f"the server did not get the Inspector's roots directly: {direct}"
    label = f"vigil-{front}"
    via = inspector_with_roots(
        procs, lab, label, server_entry(lab, front, server, label), INSPECTOR_ROOTS,
        *roots_call(pre + "get-roots-list"),
    )  # fmt: skip
    assert_same_result(direct, via, answers="tools/call", what="get-roots-list as the Inspector printed it")


def test_inspector_cli_second_client_is_shown_its_own_roots(lab: Lab, procs: Procs) -> None:
    """Two Inspector runs with different roots on one `vigil serve` of a `share = "session"` backend: the second
    is shown its own, as directly (with `share = "all"` one process serves both, and it shows the roots the
    first answered: docs/security.md)."""
    server = wire.everything()
    call = roots_call(prefix(server) + "get-roots-list")
    via = server_entry(lab, "http", server, "vigil", share="session")
    first = inspector_with_roots(procs, lab, "vigil-first", via, INSPECTOR_ROOTS, *call)
    assert "file:///differential/other" in first, f"the first client's roots did not reach the server: {first}"
    direct = inspector_with_roots(
        procs, lab, "direct", server_entry(lab, None, server, "direct"), SECOND_ROOTS, *roots_call("get-roots-list")
    )
    assert "file:///second-client" in direct, f"the server did not get the Inspector's roots directly: {direct}"
    second = inspector_with_roots(procs, lab, "vigil-second", via, SECOND_ROOTS, *call)
    assert_same_result(direct, second, answers="tools/call", what="the second client's get-roots-list")


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("capabilities", ["none", "all"])
def test_gzip_session_resource_reads_at_once(lab: Lab, front: str, capabilities: str) -> None:
    """The session resource `gzip-file-as-resource` links to is readable by its session right after the call,
    as directly: before any `resources/list_changed` was acted on."""
    caps = CAPABILITY_SETS[capabilities]
    uri = "demo://resource/session/now.txt.gz"
    args = compact_json({"name": "now.txt.gz", "data": GZIP_INPUT, "outputType": "resourceLink"})
    d = lab.direct(wire.everything(), caps)
    v = lab.through(front, wire.everything(), caps)
    d.request("tools/call", call_params("gzip-file-as-resource", args))
    v.request("tools/call", call_params("gzip-file-as-resource", args, prefix(wire.everything())))
    params = compact_json({"uri": uri})
    assert_same(d.request("resources/read", params), v.request("resources/read", params), answers="resources/read",
                what="the resources/read result right after the call")  # fmt: skip

