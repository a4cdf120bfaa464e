"""`vigil import`: the MCP server list a desktop client already uses becomes a Vigil config.

Realistic files of each shape (`fixtures/import/`: Claude Desktop's
`claude_desktop_config.json`, Cursor's `.cursor/mcp.json`, VS Code's
`.vscode/mcp.json` and `settings.json`, Claude Code's `.mcp.json`) go through
the real `vigil import`; its stderr is compared line by line with what a user
must be told (every field not carried over, with its JSON path), and
`vigil check` accepts what it wrote. Two imported files are served by
`vigil serve` with real backends behind them (the stdio demo backend, an HTTP
demo backend, and a backend that answers only with the right
`Authorization`), and the Python MCP SDK lists and calls their tools: the
`${...}` references the files held reach the backends expanded from Vigil's
environment, while the generated file holds only the references. A missing
variable makes `vigil check` and `vigil serve` fail naming the key and the
variable; unusable input exits 2 saying where and what was expected; hostile
input (an endless file, a nesting bomb) is refused in bounded time and memory.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from harness import DemoHttp, Gateways, Procs, run_vigil, start_python_backend
from support import DEADLINE, DEMO_TOOLS, call_text, http_session, prefixed, tool_names

FIXTURES = Path(__file__).parent / "fixtures" / "import"

SSE_SKIPPED = (
    'not imported: it uses the legacy HTTP+SSE transport ("type": "sse"), and Vigil reaches HTTP servers '
    'over streamable HTTP only: if the server also serves streamable HTTP (often at /mcp), set "type" to '
    '"http" with that URL and import again'
)


def unset(name: str) -> str:
    """The text `vigil check` prints for an unset variable referenced by `key`'s value."""
    return (
        f"environment variable `{name}` is not set (referenced as `${{{name}}}`): "
        f"set it in Vigil's environment, or give a default like `${{{name}:-value}}`"
    )


# === running vigil import ===


def import_file(vigil_bin: Path, cwd: Path, file: str, *args: str, env: dict[str, str] | None = None):
    return run_vigil(vigil_bin, ["import", file, *args], cwd, env=env)


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def backends_of(toml_text: str) -> list[tuple[str, str, bool]]:
    """(name, transport, enabled) of each [[backends]] entry."""
    doc = tomllib.loads(toml_text)
    return [(b["name"], b["transport"], b.get("enabled", True)) for b in doc.get("backends", [])]


def check(vigil_bin: Path, cwd: Path, config: Path, env: dict[str, str] | None = None):
    return run_vigil(vigil_bin, ["check", "--config", str(config)], cwd, env=env)


# === each shape ===


class Shape(NamedTuple):
    #: The fixture, relative to fixtures/import (copied into the test's directory).
    file: str
    #: (name, transport, enabled) of the generated backends.
    backends: list[tuple[str, str, bool]]
    #: Variables the config reads, and what `vigil check` gets for them.
    env: dict[str, str]
    #: Every line `vigil import` writes on stderr (`{ws}`: the workspace folder).
    stderr: list[str]


def secret(var: str) -> str:
    """A value for `var` that must never appear in a generated file."""
    return f"sentinel-value-of-{var}-3f9c"


SHAPES = [
    Shape(
        "claude_desktop_config.json",
        [
            ("filesystem", "stdio", True),
            ("github", "stdio", True),
            ("brave-search", "stdio", True),
            ("Linear-remote", "stdio", True),
            ("sqlite", "stdio", False),
        ],
        {"BRAVE_API_KEY": secret("BRAVE_API_KEY")},
        [
            "note: claude_desktop_config.json: (top level): not imported: globalShortcut (not MCP servers)",
            "warning: claude_desktop_config.json: mcpServers.github.env.GITHUB_PERSONAL_ACCESS_TOKEN: holds a literal "
            "value that looks like a secret, and so does the imported file: replace it with "
            "`${GITHUB_PERSONAL_ACCESS_TOKEN}` and set GITHUB_PERSONAL_ACCESS_TOKEN in Vigil's environment",
            'note: claude_desktop_config.json: mcpServers["Linear (remote)"]: named `Linear-remote`: a Vigil name '
            "holds only letters, digits, `-` and `_`",
            "note: claude_desktop_config.json: mcpServers.sqlite.disabled: imported as enabled = false "
            "(kept in the file, not started)",
            "imported 5 backend(s) from claude_desktop_config.json to stdout: filesystem, github, brave-search, "
            "Linear-remote, sqlite",
            "it reads BRAVE_API_KEY from the environment: set it for `vigil check` and `vigil serve`",
            "it holds literal values that look like secrets: keep it out of shared places, or replace them with "
            "${NAME} references",
        ],
    ),
    Shape(
        "cursor-project/.cursor/mcp.json",
        [
            ("postgres", "stdio", True),
            ("notes", "stdio", True),
            ("sentry", "http", True),
            ("figma", "http", True),
            ("crm", "http", True),
        ],
        {
            "DATABASE_URL": secret("DATABASE_URL"),
            "OPENAI_API_KEY": secret("OPENAI_API_KEY"),
            "SENTRY_TOKEN": secret("SENTRY_TOKEN"),
        },
        [
            "note: cursor-project/.cursor/mcp.json: mcpServers.notes.args[0]: `${workspaceFolder}` is written as "
            '"{ws}"',
            "warning: cursor-project/.cursor/mcp.json: mcpServers.notes.envFile: not imported (Vigil reads no env "
            "files; a stdio backend inherits Vigil's environment, so export the file's variables before "
            "`vigil serve`, e.g. `set -a; . ./.env; set +a`)",
            "warning: cursor-project/.cursor/mcp.json: mcpServers.figma.url: ends in /sse, the usual endpoint of the "
            "legacy HTTP+SSE transport, which Vigil does not speak: imported as streamable HTTP; if `vigil serve` "
            "cannot connect, use the server's streamable HTTP endpoint (often /mcp)",
            "warning: cursor-project/.cursor/mcp.json: mcpServers.crm.auth: not imported (Vigil does not sign in to "
            'backends with OAuth: put a token in "headers" as a `${NAME}` reference, or set forward_auth = true to '
            "pass on each client's own Authorization (see docs/freshness.md))",
            "imported 5 backend(s) from cursor-project/.cursor/mcp.json to stdout: postgres, notes, sentry, figma, crm",
            "it reads DATABASE_URL, HOME, OPENAI_API_KEY, SENTRY_TOKEN from the environment: set them for "
            "`vigil check` and `vigil serve`",
        ],
    ),
    Shape(
        "vscode-project/.vscode/mcp.json",
        [("Perplexity", "stdio", True), ("github", "http", True), ("fetch", "stdio", True)],
        {"PERPLEXITY_KEY": secret("PERPLEXITY_KEY")},
        [
            "note: vscode-project/.vscode/mcp.json: servers.Perplexity.env.PERPLEXITY_API_KEY: "
            '`${input:perplexity-key}` (VS Code asks for it: "Perplexity API Key", a password) is now '
            "`${PERPLEXITY_KEY}`: set PERPLEXITY_KEY in Vigil's environment",
            'note: vscode-project/.vscode/mcp.json: servers.fetch.cwd: `${workspaceFolder}` is written as "{ws}"',
            "warning: vscode-project/.vscode/mcp.json: servers.fetch.dev: not imported (VS Code's development mode "
            "(watch and debug) has no Vigil equivalent)",
            "warning: vscode-project/.vscode/mcp.json: servers.legacy-events: " + SSE_SKIPPED,
            "imported 3 backend(s) from vscode-project/.vscode/mcp.json to stdout: Perplexity, github, fetch; "
            "1 not imported (see the warnings)",
            "it reads PERPLEXITY_KEY from the environment: set it for `vigil check` and `vigil serve`",
        ],
    ),
    Shape(
        "settings.json",
        [("memory", "stdio", True), ("my-local-server-2", "stdio", True), ("my-local-server", "stdio", True)],
        {},
        [
            'note: settings.json: (top level): not imported: ["editor.fontSize"], ["workbench.colorTheme"], '
            '["chat.mcp.discovery.enabled"] (not MCP servers)',
            'note: settings.json: mcp.servers["my.local server"]: named `my-local-server-2`: `my-local-server` '
            "(its name made valid) is taken by mcp.servers.my-local-server",
            'note: settings.json: mcp.servers["my.local server"].args[2]: written as the string "8765"',
            "imported 3 backend(s) from settings.json to stdout: memory, my-local-server-2, my-local-server",
            "it reads HOME from the environment: set it for `vigil check` and `vigil serve`",
        ],
    ),
    Shape(
        "claude-code-project/.mcp.json",
        [("api-server", "http", True), ("airtable", "stdio", True)],
        {"API_KEY": secret("API_KEY"), "AIRTABLE_API_KEY": secret("AIRTABLE_API_KEY")},
        [
            "warning: claude-code-project/.mcp.json: mcpServers.asana: " + SSE_SKIPPED,
            "imported 2 backend(s) from claude-code-project/.mcp.json to stdout: api-server, airtable; "
            "1 not imported (see the warnings)",
            "it reads API_BASE_URL, API_KEY, AIRTABLE_API_KEY from the environment: set them for `vigil check` "
            "and `vigil serve`",
        ],
    ),
]


@pytest.fixture
def fixtures(tmp_path: Path) -> Path:
    """The fixture files, copied into the test's own directory (the working directory of the runs)."""
    shutil.copytree(FIXTURES, tmp_path / "in")
    return tmp_path / "in"


@pytest.mark.parametrize("shape", SHAPES, ids=[s.file for s in SHAPES])
def test_each_shape_is_imported_reported_and_checked(vigil_bin: Path, fixtures: Path, shape: Shape) -> None:
    # The variables the file refers to are set while importing: none of
    # their values may end up in the generated file.
    done = import_file(vigil_bin, fixtures, shape.file, env=shape.env)
    assert done.returncode == 0, done.stderr
    workspace = (fixtures / shape.file).resolve().parent.parent
    expected = [line.replace("{ws}", str(workspace)) for line in shape.stderr]
    assert lines(done.stderr) == expected
    assert backends_of(done.stdout) == shape.backends
    assert done.stdout.startswith(f"# Imported by `vigil import` from {shape.file},\n"), done.stdout
    for var, value in shape.env.items():
        assert value not in done.stdout, f"{var}'s value was inlined:\n{done.stdout}"
        assert f"${{{var}" in done.stdout, f"{var} is no longer referenced:\n{done.stdout}"

    config = fixtures / "vigil.toml"
    config.write_text(done.stdout, encoding="utf-8")
    checked = check(vigil_bin, fixtures, config, env=shape.env)
    assert checked.returncode == 0, f"vigil check refused the imported config:\n{checked.stderr}\n{done.stdout}"
    enabled = [(n, t) for n, t, on in shape.backends if on]
    # The backends come first; what follows (the store line) is not the import's.
    listed = lines(checked.stdout)[: len(enabled) + 1]
    assert listed == [f"{config}: ok, {len(enabled)} backend(s)"] + [f"  {n} ({t})" for n, t in enabled]


def test_references_stay_references_in_the_generated_file(vigil_bin: Path, fixtures: Path) -> None:
    done = import_file(vigil_bin, fixtures, "cursor-project/.cursor/mcp.json")
    assert done.returncode == 0, done.stderr
    doc = tomllib.loads(done.stdout)
    by_name = {b["name"]: b for b in doc["backends"]}
    assert by_name["postgres"]["args"][-1] == "${DATABASE_URL}"
    assert by_name["notes"]["env"] == {"NOTES_DIR": "${HOME}/notes", "OPENAI_API_KEY": "${OPENAI_API_KEY}"}
    assert by_name["sentry"]["headers"] == {"Authorization": "Bearer ${SENTRY_TOKEN}"}
    done = import_file(vigil_bin, fixtures, "vscode-project/.vscode/mcp.json")
    doc = tomllib.loads(done.stdout)
    assert doc["backends"][0]["env"] == {"PERPLEXITY_API_KEY": "${PERPLEXITY_KEY}"}
    done = import_file(vigil_bin, fixtures, "claude-code-project/.mcp.json")
    doc = tomllib.loads(done.stdout)
    assert doc["backends"][0]["url"] == "${API_BASE_URL:-https://api.example.com}/mcp"
    assert doc["backends"][0]["headers"] == {"Authorization": "Bearer ${API_KEY}"}


# === serving what was imported ===


def start_per_user(procs: Procs, tmp_path: Path, tools: dict[str, list[str]]) -> DemoHttp:
    """The backend that serves only requests with an `Authorization` it knows (tests/e2e/backends)."""
    state = tmp_path / "per-user"
    state.mkdir()
    (state / "tools.json").write_text(json.dumps(tools), encoding="utf-8")
    return start_python_backend(procs, "per-user", "per_user_server.py", [str(state)])


def serve_imported(vigil: Gateways, tmp_path: Path, imported: str, env: dict[str, str]):
    """`vigil serve` on the imported text, with the listen addresses a user would add on top."""

    def write(port: int, api_port: int) -> Path:
        config = tmp_path / "vigil.toml"
        head = (
            f'listen = "127.0.0.1:{port}"\n'
            'startup_timeout = "20s"\n'
            f'[api]\nlisten = "127.0.0.1:{api_port}"\n'
            '[freshness]\ndebounce = "100ms"\n\n'
        )
        config.write_text(head + imported, encoding="utf-8")
        return config

    return vigil.serve_file(write, env=env)


@pytest.mark.anyio
async def test_an_imported_cursor_config_serves_with_its_references_expanded(
    vigil: Gateways, vigil_bin: Path, demo_bin: Path, demo_http, procs: Procs, tmp_path: Path
) -> None:
    remote = demo_http("remote")
    per_user = start_per_user(procs, tmp_path, {"Bearer e2e-user-token-5d1e": ["alpha"]})
    project = tmp_path / "proj" / ".cursor"
    project.mkdir(parents=True)
    source = {
        "mcpServers": {
            "files": {
                "command": str(demo_bin),
                "args": ["--transport", "stdio"],
                "env": {"VIGIL_DEMO_NAME": "${env:E2E_DEMO_NAME}"},
                "autoApprove": ["echo"],
            },
            "remote": {"url": remote.url},
            "per user": {"url": per_user.url, "headers": {"Authorization": "Bearer ${env:E2E_USER_TOKEN}"}},
        }
    }
    (project / "mcp.json").write_text(json.dumps(source, indent=2), encoding="utf-8")
    done = import_file(vigil_bin, tmp_path, "proj/.cursor/mcp.json", "--out", "imported.toml")
    assert done.returncode == 0, done.stderr
    assert lines(done.stderr) == [
        "warning: proj/.cursor/mcp.json: mcpServers.files.autoApprove: not imported (which calls need approval "
        "is for the client to decide, not Vigil)",
        'note: proj/.cursor/mcp.json: mcpServers["per user"]: named `per-user`: a Vigil name holds only letters, '
        "digits, `-` and `_`",
        "imported 3 backend(s) from proj/.cursor/mcp.json to imported.toml: files, remote, per-user",
        "it reads E2E_DEMO_NAME, E2E_USER_TOKEN from the environment: set them for `vigil check` and `vigil serve`",
        "next: vigil check --config imported.toml",
    ]
    imported = (tmp_path / "imported.toml").read_text(encoding="utf-8")

    env = {"E2E_DEMO_NAME": "name-from-the-environment-7f3a", "E2E_USER_TOKEN": "e2e-user-token-5d1e"}
    gw = serve_imported(vigil, tmp_path, imported, env)
    async with http_session(gw.url) as session:
        expected = prefixed("files", DEMO_TOOLS) | prefixed("remote", DEMO_TOOLS) | {"per-user__alpha"}
        assert await tool_names(session) == expected
        # The stdio backend got the variable's value in its environment ...
        assert await call_text(session, "files__whoami", {}) == env["E2E_DEMO_NAME"]
        assert await call_text(session, "remote__echo", {"text": "through vigil"}) == "through vigil"
        # ... and the HTTP backend the header with the token in it.
        assert await call_text(session, "per-user__alpha", {}) == "alpha for Bearer e2e-user-token-5d1e"
    written = (tmp_path / "vigil.toml").read_text(encoding="utf-8")
    for value in env.values():
        assert value not in written, f"a secret was written into the config:\n{written}"


@pytest.mark.anyio
async def test_an_imported_vscode_input_is_a_variable_at_serve_time(
    vigil: Gateways, vigil_bin: Path, demo_bin: Path, tmp_path: Path
) -> None:
    vscode = tmp_path / "proj" / ".vscode"
    vscode.mkdir(parents=True)
    (vscode / "mcp.json").write_text(
        "{\n"
        "  // VS Code asks for the name the first time the server starts.\n"
        '  "inputs": [{"type": "promptString", "id": "demo-name", "description": "Name of the demo",\n'
        '              "password": true}],\n'
        '  "servers": {\n'
        f'    "demo": {{"type": "stdio", "command": {json.dumps(str(demo_bin))}, "args": ["--transport", "stdio"],\n'
        '             "env": {"VIGIL_DEMO_NAME": "${input:demo-name}"}},\n'
        "  },\n"
        "}\n",
        encoding="utf-8",
    )
    done = import_file(vigil_bin, tmp_path, "proj/.vscode/mcp.json")
    assert done.returncode == 0, done.stderr
    assert lines(done.stderr)[0] == (
        "note: proj/.vscode/mcp.json: servers.demo.env.VIGIL_DEMO_NAME: `${input:demo-name}` (VS Code asks for it: "
        '"Name of the demo", a password) is now `${DEMO_NAME}`: set DEMO_NAME in Vigil\'s environment'
    )
    gw = serve_imported(vigil, tmp_path, done.stdout, {"DEMO_NAME": "asked-by-vscode-9b2c"})
    async with http_session(gw.url) as session:
        assert await call_text(session, "demo__whoami", {}) == "asked-by-vscode-9b2c"


def test_a_missing_variable_fails_check_and_serve_naming_the_key_and_the_variable(
    vigil_bin: Path, demo_bin: Path, tmp_path: Path
) -> None:
    source = {
        "mcpServers": {
            "files": {"command": str(demo_bin), "env": {"VIGIL_DEMO_NAME": "${env:E2E_DEMO_NAME}"}},
            "remote": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer ${E2E_USER_TOKEN}"}},
        }
    }
    (tmp_path / "mcp.json").write_text(json.dumps(source), encoding="utf-8")
    done = import_file(vigil_bin, tmp_path, "mcp.json", "--out", "vigil.toml")
    assert done.returncode == 0, done.stderr
    config = tmp_path / "vigil.toml"
    for var in ("E2E_DEMO_NAME", "E2E_USER_TOKEN"):
        assert var not in os.environ, f"{var} must not be set for this test"

    refused = check(vigil_bin, tmp_path, config, env={"E2E_DEMO_NAME": "here"})
    assert refused.returncode == 2, refused.stdout
    assert lines(refused.stderr) == [
        "error: invalid config",
        f"{config}: backends[1].headers.Authorization: {unset('E2E_USER_TOKEN')}",
    ]
    refused = run_vigil(vigil_bin, ["serve", "--config", str(config)], tmp_path)
    assert refused.returncode == 2, refused.stderr
    assert lines(refused.stderr) == [
        "error: invalid config",
        f"{config}: backends[0].env.VIGIL_DEMO_NAME: {unset('E2E_DEMO_NAME')}",
        f"{config}: backends[1].headers.Authorization: {unset('E2E_USER_TOKEN')}",
    ]
    # The control: with both set, the same file is accepted.
    accepted = check(vigil_bin, tmp_path, config, env={"E2E_DEMO_NAME": "here", "E2E_USER_TOKEN": "t"})
    assert accepted.returncode == 0, accepted.stderr


# === what cannot be imported ===


@pytest.mark.parametrize(
    ("text", "stderr"),
    [
        (
            '{\n  "mcpServers": {\n    "a": {"command": "x"}\n    "b": {}\n  }\n}\n',
            ["error: bad.json:3:26: not valid JSON: Expected comma"],
        ),
        (
            '{"servers_": {"a": {"command": "x"}}, "theme": "dark"}',
            [
                'error: bad.json: no MCP servers in it: expected a top-level "mcpServers" (Claude Desktop, Cursor, '
                'Claude Code), "servers" (VS Code\'s .vscode/mcp.json) or "mcp": {"servers"} (VS Code\'s '
                "settings.json) object; the file has servers_, theme"
            ],
        ),
        (
            "",
            [
                'error: bad.json: no MCP servers in it: expected a top-level "mcpServers" (Claude Desktop, Cursor, '
                'Claude Code), "servers" (VS Code\'s .vscode/mcp.json) or "mcp": {"servers"} (VS Code\'s '
                "settings.json) object; the file is empty"
            ],
        ),
        (
            '{"mcpServers": ["a", "b"]}',
            ["error: bad.json: mcpServers: expected an object of servers by name, found an array"],
        ),
        ('{"mcp": {"servers": {}}}', ["error: bad.json: mcp.servers: holds no servers: nothing to import"]),
        (
            '{"mcpServers": {"old": {"type": "sse", "url": "http://127.0.0.1:9/sse"}, "odd": {"command": 3}}}',
            [
                "warning: bad.json: mcpServers.old: " + SSE_SKIPPED,
                "warning: bad.json: mcpServers.odd: not imported: mcpServers.odd.command must be a string, "
                "found a number",
                "error: bad.json: none of its 2 server(s) could be imported (the warnings say why)",
            ],
        ),
    ],
    ids=["not-json", "no-servers-block", "empty", "servers-not-an-object", "no-servers", "nothing-runnable"],
)
def test_unusable_input_exits_2_saying_where_and_what_was_expected(
    vigil_bin: Path, tmp_path: Path, text: str, stderr: list[str]
) -> None:
    (tmp_path / "bad.json").write_text(text, encoding="utf-8")
    done = import_file(vigil_bin, tmp_path, "bad.json")
    assert done.returncode == 2, done.stdout
    assert done.stdout == ""
    assert lines(done.stderr) == stderr


def test_a_file_that_is_not_utf8_or_not_there_exits_2(vigil_bin: Path, tmp_path: Path) -> None:
    (tmp_path / "latin1.json").write_bytes(b'{\n  "mcpServers": {\n    "caf\xe9": {}\n  }\n}\n')
    done = import_file(vigil_bin, tmp_path, "latin1.json")
    assert done.returncode == 2
    assert lines(done.stderr) == ["error: latin1.json:3: not UTF-8 text: save the file as UTF-8"]
    done = import_file(vigil_bin, tmp_path, "absent.json")
    assert done.returncode == 2
    assert lines(done.stderr) == ["error: absent.json: cannot read: No such file or directory (os error 2)"]


# === --out ===


def test_out_refuses_to_overwrite_without_force(vigil_bin: Path, fixtures: Path) -> None:
    out = fixtures / "vigil.toml"
    out.write_text("# my own config\n", encoding="utf-8")
    done = import_file(vigil_bin, fixtures, "claude_desktop_config.json", "--out", "vigil.toml")
    assert done.returncode == 2
    assert lines(done.stderr)[-1] == (
        "error: vigil.toml: already exists: pass --force to replace it, or choose another --out"
    )
    assert out.read_text(encoding="utf-8") == "# my own config\n", "the existing file was touched"

    done = import_file(vigil_bin, fixtures, "claude_desktop_config.json", "--out", "vigil.toml", "--force")
    assert done.returncode == 0, done.stderr
    assert backends_of(out.read_text(encoding="utf-8"))[0] == ("filesystem", "stdio", True)
    # It holds the literal GitHub token of the source: readable by its owner only.
    assert out.stat().st_mode & 0o077 == 0, oct(out.stat().st_mode)
    assert lines(done.stderr)[-2:] == [
        "it holds literal values that look like secrets (written readable by you only): keep it out of shared "
        "places, or replace them with ${NAME} references",
        "next: vigil check --config vigil.toml",
    ]
    assert sorted(p.name for p in fixtures.iterdir() if p.name.startswith(".")) == [], "a temporary file was left"


# === hostile input ===


class Measured(NamedTuple):
    returncode: int
    stderr: str
    #: Peak resident set size of the process, KiB.
    max_rss_kib: int


#: Runs argv[1:] and prints its exit status and peak RSS. The kernel's
#: figure for a process (ru_maxrss; VmHWM in /proc/PID/status while it
#: lives) starts from the RSS of the process it was forked from: forked
#: from pytest it would count pytest's own ~100 MiB, so it is forked from
#: this small interpreter instead.
MEASURE = """
import json, os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(json.dumps({"status": os.waitstatus_to_exitcode(status), "max_rss_kib": usage.ru_maxrss}))
"""


def run_measured(vigil_bin: Path, args: list[str], cwd: Path) -> Measured:
    """Run vigil to its end (bounded by the deadline) and measure its peak RSS."""
    proc = subprocess.Popen(
        [sys.executable, "-c", MEASURE, str(vigil_bin), *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"`vigil {' '.join(args)}` still running after {DEADLINE}s", pytrace=False)
    assert proc.returncode == 0, f"the measuring helper failed:\n{err}"
    figures = json.loads(out.splitlines()[-1])
    return Measured(figures["status"], err, figures["max_rss_kib"])


#: What an import may hold at its peak, whatever the input: a debug
#: build's baseline (about 22 MiB) plus the 8 MiB file limit, with room to
#: spare; reading an endless file whole would pass it within a second.
RSS_BOUND_KIB = 64 * 1024


@pytest.mark.parametrize("hostile", ["endless", "nesting-bomb", "huge"])
def test_hostile_files_are_refused_in_bounded_time_and_memory(vigil_bin: Path, tmp_path: Path, hostile: str) -> None:
    if hostile == "endless":
        target, expected = (
            "/dev/zero",
            ("error: /dev/zero: larger than 8 MiB, which no MCP client config is: is it the right file?"),
        )
    elif hostile == "nesting-bomb":
        (tmp_path / "deep.json").write_text('{"mcpServers": ' + "[" * 500_000, encoding="utf-8")
        target, expected = "deep.json", "error: deep.json:1:527: not valid JSON: Maximum nesting depth exceeded"
    else:
        # 8 MiB + 1 of one JSON string: over the limit by a byte.
        (tmp_path / "huge.json").write_text('{"mcpServers": {"a": {"command": "' + "x" * (8 * 2**20 - 37) + '"}}}')
        target, expected = (
            "huge.json",
            ("error: huge.json: larger than 8 MiB, which no MCP client config is: is it the right file?"),
        )
    got = run_measured(vigil_bin, ["import", target], tmp_path)
    assert (got.returncode, lines(got.stderr)) == (2, [expected])
    assert got.max_rss_kib < RSS_BOUND_KIB, f"peak RSS {got.max_rss_kib} KiB"


def test_a_large_real_file_is_imported_in_bounded_memory(vigil_bin: Path, tmp_path: Path) -> None:
    """The control for the limit: 2,000 servers (a third of a MiB) are imported whole."""
    servers: dict[str, Any] = {
        f"server {i}": {"command": "npx", "args": ["-y", f"@acme/mcp-{i}"], "env": {"TOKEN": f"${{env:TOKEN_{i}}}"}}
        for i in range(2000)
    }
    text = json.dumps({"mcpServers": servers}, indent=2)
    assert 2**18 < len(text) < 8 * 2**20
    (tmp_path / "many.json").write_text(text, encoding="utf-8")
    got = run_measured(vigil_bin, ["import", "many.json", "--out", "many.toml"], tmp_path)
    assert got.returncode == 0, got.stderr
    assert len(backends_of((tmp_path / "many.toml").read_text(encoding="utf-8"))) == 2000
    assert got.max_rss_kib < RSS_BOUND_KIB, f"peak RSS {got.max_rss_kib} KiB"
