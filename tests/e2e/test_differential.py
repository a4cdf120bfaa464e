"""Differential suite: real MCP servers, directly and through Vigil, byte for byte.

Each case does one operation twice with the raw JSON-RPC client of
`reference/wire.py`: against the reference server run directly over stdio,
and against Vigil (`vigil serve`'s `/mcp`, or `vigil stdio`) in front of the
same server run as a stdio backend (`naming = "prefix"`). The JSON texts
that crossed the wire are compared after `wire.normalize`, which takes out
exactly `wire.DIFFERENCES` (ids, the name prefix, the progress token,
Vigil's own `_meta` keys and initialize result, the envelope's member order,
whitespace); key order and the text of every number count.

The servers (`@modelcontextprotocol/server-everything`, `-filesystem`,
`-memory`, `mcp-server-time`, `mcp-server-git`) are installed by
`reference/setup.sh`; what they do on the wire is written down in
`reference/README.md`. Without them these tests fail naming the script.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import types

from harness import Gateways, Proc, Procs, free_port, render_config, stdio_backend
from reference import wire
from reference.wire import Frame, HttpWire, Obj, Server, StdioWire, normalize
from support import DEADLINE, http_session, stdio_session, wait_for_tools

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

    def direct(
        self, server: Server, capabilities: str = NO_CAPABILITIES, handlers: dict[str, wire.Handler] | None = None
    ) -> StdioWire:
        """The server run directly, initialized by a client declaring `capabilities`."""
        w = self._stdio(f"direct-{server.name}", server.argv, server.env, handlers)
        w.initialize(capabilities)
        return w

    def through(
        self,
        front: str,
        server: Server,
        capabilities: str = NO_CAPABILITIES,
        handlers: dict[str, wire.Handler] | None = None,
    ) -> StdioWire | HttpWire:
        """Vigil in front of `server` (a stdio backend), reached over `front`, once it lists the server's tools."""
        backend = stdio_backend(server.name, server.command, server.args)
        if server.env:
            backend["env"] = server.env
        if front == "http":
            gw = self.gateways([backend], naming="prefix")
            w: StdioWire | HttpWire = HttpWire(
                gw.url, handlers=handlers, deadline=DEADLINE, log=self.dir / "wire-vigil-http.log"
            )
            self.wires.append(w)
        else:
            top = {
                "listen": f"127.0.0.1:{free_port()}",
                "naming": "prefix",
                "separator": "__",
                "freshness": {"debounce": "100ms"},
            }
            config = self.dir / "vigil-stdio.toml"
            config.write_text(render_config(top, [backend]), encoding="utf-8")
            env = {"RUST_LOG": os.environ.get("VIGIL_E2E_RUST_LOG", "info,vigil=debug"), "RUST_BACKTRACE": "1"}
            w = self._stdio("vigil-stdio", [str(self.vigil_bin), "stdio", "--config", str(config)], env, handlers)
        w.initialize(capabilities)
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


def assert_same(direct: Frame, via: Frame, *, answers: str | None = None, pre: str = "", what: str) -> None:
    """The two messages are the same JSON text once `wire.DIFFERENCES` are taken out."""
    expected = normalize(direct.text, answers=answers)
    got = normalize(via.text, answers=answers, prefix=pre)
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
    args = '{"duration":0.4,"steps":2}'
    d = lab.direct(wire.everything())
    v = lab.through(front, wire.everything())
    pre = prefix(wire.everything())
    direct_answer = d.request(
        "tools/call", call_params("trigger-long-running-operation", args, meta='{"progressToken":"p-1"}')
    )
    via_answer = v.request(
        "tools/call", call_params("trigger-long-running-operation", args, pre, '{"progressToken":"p-1"}')
    )
    direct = d.all_received(lambda _f, m: m.get("method") == wire.Scalar('"notifications/progress"'))
    via = v.all_received(lambda _f, m: m.get("method") == wire.Scalar('"notifications/progress"'))
    assert len(direct) == 2, f"the server sent {len(direct)} progress notifications directly"
    assert len(via) == len(direct), f"{len(via)} progress notifications through Vigil, {len(direct)} directly"
    for n, (a, b) in enumerate(zip(direct, via, strict=True)):
        assert_same(a, b, what=f"progress notification {n + 1}")
    assert_same(direct_answer, via_answer, answers="tools/call", what="the tools/call result")


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
