"""Collect the retrieval corpus: every pinned MCP server's own ``tools/list``, written verbatim.

The servers are pinned in ``servers.json`` beside this file (short name, registry, package,
exact version, and how each is started).  This script starts each server over stdio with the
official MCP Python SDK's stdio transport (``mcp.client.stdio``), performs the ``initialize``
handshake, pages through ``tools/list`` (following ``nextCursor``) and writes ``corpus.json``.

Tools are kept exactly as the server listed them: the script uses the raw JSON-RPC ``result``
object, so every member (``name``, ``title``, ``description``, ``inputSchema``,
``outputSchema``, ``annotations``, ``_meta``, ...) and its key order survive unchanged.

No server needs a credential or a network service to list its tools.  Where a server refuses
to start without a token, ``servers.json`` gives it a dummy value; any URL it is given points
at a closed port on the loopback address, so nothing outside this machine is contacted.
Each server runs in a fresh scratch folder (``{workdir}`` in servers.json; also its working
directory), with ``home/`` there as its ``HOME`` and its dummy ``files`` under ``files/``.

Installing the servers (into a cache folder OUTSIDE the repository; call it ``$CACHE``)::

    python tests/retrieval/collect.py --cache "$CACHE" --print-install   # review, then:
    python tests/retrieval/collect.py --cache "$CACHE" --print-install | sh

That installs every npm package, pinned to its exact version, into one prefix
(``$CACHE/npm``; npm 11 runs no install scripts unless approved, so puppeteer downloads no
browser), and every PyPI package into a virtual environment of its own
(``$CACHE/pypi/<name>``), with the extra pins listed under ``pip_extra`` (``mcp-server-sqlite``
predates the MCP Python SDK 2.x and needs ``mcp`` 1.x).  An npm server's ``command`` is looked
up in ``$CACHE/npm/node_modules/.bin``, a PyPI server's in ``$CACHE/pypi/<name>/bin``.
``node`` (20 or newer) and ``npm`` must be on ``PATH``.

Running it, with a Python that has the official ``mcp`` package (SDK 2.x).  Run it in a
network namespace of its own, so that no server can reach any host even by accident::

    unshare --net --map-root-user python tests/retrieval/collect.py --cache "$CACHE"
    unshare --net --map-root-user python tests/retrieval/collect.py --cache "$CACHE" --only git

The script checks that each installed package has the pinned version before it starts the
server, and fails (non-zero exit, nothing written) when a server does not list.  ``--only``
replaces those servers' entries in an existing ``corpus.json`` and keeps the others.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import mcp_types
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.message import SessionMessage

HERE = Path(__file__).resolve().parent
SERVERS_FILE = HERE / "servers.json"
CORPUS_FILE = HERE / "corpus.json"

PROTOCOL_VERSION = "2025-11-25"
CLIENT_INFO = {"name": "vigil-retrieval-collect", "version": "1.0.0"}
# Environment given to every server on top of the SDK's minimal default: no telemetry, no
# update checks, a fixed time zone.
COMMON_ENV = {
    "CI": "1",
    "DO_NOT_TRACK": "1",
    "NO_UPDATE_NOTIFIER": "1",
    "NPM_CONFIG_UPDATE_NOTIFIER": "false",
    "TZ": "UTC",
}
LIST_TIMEOUT_S = 60.0
MAX_PAGES = 100


class ListingError(RuntimeError):
    """A server did not start, did not initialize, or did not list its tools."""


def bin_dir(cache: Path, server: dict[str, Any]) -> Path:
    """Where a server's executables live in the cache."""
    if server["registry"] == "npm":
        return cache / "npm" / "node_modules" / ".bin"
    if server["registry"] == "pypi":
        return cache / "pypi" / server["name"] / "bin"
    raise ValueError(f"unknown registry {server['registry']!r}")


def install_commands(cache: Path, pinned: list[dict[str, Any]]) -> list[str]:
    """Shell commands that install every pinned server into the cache."""
    npm_specs = [f"{s['package']}@{s['version']}" for s in pinned if s["registry"] == "npm"]
    commands = [
        f"mkdir -p {shlex.quote(str(cache / 'npm'))}",
        f"test -f {shlex.quote(str(cache / 'npm' / 'package.json'))}"
        f" || echo '{{\"private\": true}}' > {shlex.quote(str(cache / 'npm' / 'package.json'))}",
        f"npm install --prefix {shlex.quote(str(cache / 'npm'))} --save-exact --no-audit --no-fund "
        + " ".join(shlex.quote(spec) for spec in npm_specs),
    ]
    for server in pinned:
        if server["registry"] != "pypi":
            continue
        venv = cache / "pypi" / server["name"]
        specs = [f"{server['package']}=={server['version']}", *server.get("pip_extra", [])]
        commands.append(f"python3 -m venv {shlex.quote(str(venv))}")
        commands.append(
            f"{shlex.quote(str(venv / 'bin' / 'pip'))} install " + " ".join(shlex.quote(spec) for spec in specs)
        )
    return commands


def installed_version(cache: Path, server: dict[str, Any]) -> str:
    """The version of a server's package installed in the cache."""
    if server["registry"] == "npm":
        manifest = cache / "npm" / "node_modules" / server["package"] / "package.json"
        return str(json.loads(manifest.read_text())["version"])
    python = bin_dir(cache, server) / "python"
    out = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.metadata, sys; print(importlib.metadata.version(sys.argv[1]))",
            server["package"],
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def prepare_workdir(server: dict[str, Any], workdir: Path) -> None:
    """Lays out a server's scratch folder.

    ``home/`` becomes the server's ``HOME`` (so nothing is written into the real one) and
    ``files/`` holds the server's dummy files (``files`` in servers.json: name -> JSON value).
    The scratch folder itself is the server's working directory.
    """
    (workdir / "home").mkdir()
    (workdir / "files").mkdir()
    for name, content in server.get("files", {}).items():
        (workdir / "files" / name).write_text(json.dumps(content, indent=2) + "\n")


def expand(value: str, workdir: Path) -> str:
    """Replaces the ``{workdir}`` placeholder of servers.json with a scratch folder."""
    return value.replace("{workdir}", str(workdir))


def parameters(cache: Path, server: dict[str, Any], workdir: Path) -> StdioServerParameters:
    """The stdio launch parameters of one pinned server."""
    directory = bin_dir(cache, server)
    command = directory / server["command"]
    if not command.exists():
        raise ListingError(f"{command.name} is not installed under the cache ({server['package']})")
    env = dict(COMMON_ENV)
    env["PATH"] = f"{directory}{os.pathsep}{os.environ.get('PATH', '')}"
    env["HOME"] = str(workdir / "home")
    env.update({key: expand(value, workdir) for key, value in server.get("env", {}).items()})
    return StdioServerParameters(
        command=str(command),
        args=[expand(arg, workdir) for arg in server.get("args", [])],
        env=env,
        cwd=str(workdir),
    )


async def request(streams: tuple[Any, Any], request_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """Sends one JSON-RPC request and returns its raw ``result`` object.

    Notifications from the server are ignored; a request from the server is refused with
    "method not found" (the client declares no capabilities, so none is expected).
    """
    read_stream, write_stream = streams
    message = mcp_types.JSONRPCRequest(jsonrpc="2.0", id=request_id, method=method, params=params)
    await write_stream.send(SessionMessage(message))
    while True:
        try:
            received = await read_stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError) as exc:
            raise ListingError(f"the server closed the connection during {method}") from exc
        if isinstance(received, Exception):
            raise ListingError(f"unparsable message during {method}: {received}")
        incoming = received.message
        if isinstance(incoming, mcp_types.JSONRPCResponse) and incoming.id == request_id:
            return incoming.result
        if isinstance(incoming, mcp_types.JSONRPCError) and incoming.id == request_id:
            raise ListingError(f"{method} failed: {incoming.error.model_dump(exclude_unset=True)}")
        if isinstance(incoming, mcp_types.JSONRPCRequest):
            refusal = mcp_types.JSONRPCError(
                jsonrpc="2.0",
                id=incoming.id,
                error=mcp_types.ErrorData(code=-32601, message="Method not found"),
            )
            await write_stream.send(SessionMessage(refusal))


async def list_tools(params: StdioServerParameters, errlog: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Starts a server, initializes it and returns its ``serverInfo`` and every listed tool."""
    with anyio.fail_after(LIST_TIMEOUT_S):
        async with stdio_client(params, errlog=errlog) as streams:
            init = await request(
                streams,
                1,
                "initialize",
                {"protocolVersion": PROTOCOL_VERSION, "capabilities": {}, "clientInfo": CLIENT_INFO},
            )
            await streams[1].send(
                SessionMessage(mcp_types.JSONRPCNotification(jsonrpc="2.0", method="notifications/initialized"))
            )
            tools: list[dict[str, Any]] = []
            cursor: str | None = None
            for page in range(MAX_PAGES):
                result = await request(streams, 2 + page, "tools/list", {"cursor": cursor} if cursor else {})
                tools.extend(result.get("tools", []))
                cursor = result.get("nextCursor")
                if not cursor:
                    return init.get("serverInfo", {}), tools
            raise ListingError(f"more than {MAX_PAGES} pages of tools")


def describe(exc: BaseException) -> str:
    """A one-line account of an exception, looking inside the task groups' exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(inner) for inner in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


def collect_one(cache: Path, server: dict[str, Any]) -> dict[str, Any]:
    """Lists one server and returns its corpus entry."""
    version = installed_version(cache, server)
    if version != server["version"]:
        raise ListingError(f"{server['package']} {version} is installed, {server['version']} is pinned")
    with tempfile.TemporaryDirectory(prefix=f"vigil-retrieval-{server['name']}-") as scratch:
        workdir = Path(scratch)
        prepare_workdir(server, workdir)
        errlog_path = workdir / "stderr.log"
        with errlog_path.open("w") as errlog:
            try:
                server_info, tools = anyio.run(list_tools, parameters(cache, server, workdir), errlog)
            except Exception as exc:  # noqa: BLE001 - reported with the server's stderr
                errlog.flush()
                tail = errlog_path.read_text(errors="replace")[-2000:]
                raise ListingError(f"{server['name']}: {describe(exc)}\n--- server stderr ---\n{tail}") from exc
    if not tools:
        raise ListingError(f"{server['name']}: listed no tools")
    names = [tool.get("name") for tool in tools]
    if len(set(names)) != len(names):
        raise ListingError(f"{server['name']}: duplicate tool names")
    print(
        f"{server['name']:<20} {server['package']}@{version}: {len(tools)} tools "
        f"(serverInfo {server_info.get('name')} {server_info.get('version')})"
    )
    return {
        "name": server["name"],
        "package": server["package"],
        "registry": server["registry"],
        "version": server["version"],
        "tools": tools,
    }


def main(argv: list[str] | None = None) -> int:
    """Lists the pinned servers and writes corpus.json; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, required=True, help="folder where the servers are installed")
    parser.add_argument("--only", nargs="*", default=None, help="short names of servers to (re)collect")
    parser.add_argument("--out", type=Path, default=CORPUS_FILE, help="where to write the corpus")
    parser.add_argument("--print-install", action="store_true", help="print the install commands and exit")
    args = parser.parse_args(argv)

    pinned = json.loads(SERVERS_FILE.read_text())["servers"]
    if args.print_install:
        print("\n".join(install_commands(args.cache.resolve(), pinned)))
        return 0
    wanted = set(args.only) if args.only else {server["name"] for server in pinned}
    unknown = wanted - {server["name"] for server in pinned}
    if unknown:
        parser.error(f"not in servers.json: {sorted(unknown)}")

    previous: dict[str, dict[str, Any]] = {}
    if args.only and args.out.exists():
        previous = {entry["name"]: entry for entry in json.loads(args.out.read_text())["servers"]}

    entries: list[dict[str, Any]] = []
    failures: list[str] = []
    for server in pinned:
        if server["name"] not in wanted:
            if server["name"] in previous:
                entries.append(previous[server["name"]])
            continue
        try:
            entries.append(collect_one(args.cache.resolve(), server))
        except (ListingError, OSError, subprocess.CalledProcessError) as exc:
            failures.append(server["name"])
            print(f"FAILED {exc}", file=sys.stderr)

    if failures:
        print(f"not written: {len(failures)} server(s) failed: {', '.join(failures)}", file=sys.stderr)
        return 1
    args.out.write_text(json.dumps({"servers": entries}, indent=2, ensure_ascii=False) + "\n")
    total = sum(len(entry["tools"]) for entry in entries)
    print(f"wrote {args.out.name}: {len(entries)} servers, {total} tools")
    return 0


if __name__ == "__main__":
    sys.exit(main())
