"""Bad input gets a precise answer and never takes the gateway down.

Raw HTTP (httpx) for what a well-behaved SDK would never send: malformed
JSON, unknown methods, oversized bodies, unknown or deleted sessions, foreign
Origin and Host headers. The SDK for unknown tools and for a stdio backend
that speaks garbage. `vigil serve` on invalid configs must exit non-zero at
once, naming the file and the offending key.

Where a check is "X is refused", a control next to it shows the same request
without the defect is accepted, so the refusal is about the defect.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness import (
    INITIALIZE_BODY,
    MCP_HEADERS,
    Vigil,
    demo_stdio_args,
    free_port,
    render_config,
    run_vigil,
    stdio_backend,
)
from support import (
    DEADLINE,
    DEMO_TOOLS,
    call_error,
    call_text,
    http_session,
    is_unavailable,
    prefixed,
    wait_for_tools,
)

ALPHA = prefixed("alpha", DEMO_TOOLS)
SESSION_HEADER = "Mcp-Session-Id"


# === raw HTTP helpers ===


def messages(resp: httpx.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages in a response, whether JSON or an SSE stream."""
    ctype = resp.headers.get("content-type", "")
    if "text/event-stream" in ctype:
        found = []
        for event in resp.text.replace("\r\n", "\n").split("\n\n"):
            data = "\n".join(line[5:].lstrip() for line in event.split("\n") if line.startswith("data:"))
            if data.strip():
                found.append(json.loads(data))
        return found
    body = resp.json()
    return body if isinstance(body, list) else [body]


def error_codes(resp: httpx.Response) -> list[int]:
    try:
        return [m["error"]["code"] for m in messages(resp) if isinstance(m.get("error"), dict)]
    except (ValueError, KeyError, TypeError):
        return []


def open_raw_session(client: httpx.Client, url: str) -> dict[str, str]:
    """Initialize a session by hand; return the headers that carry it."""
    resp = client.post(url, json=INITIALIZE_BODY, headers=MCP_HEADERS)
    assert resp.status_code == 200, f"initialize: HTTP {resp.status_code}: {resp.text}"
    session = resp.headers.get(SESSION_HEADER)
    assert session, f"initialize answered without {SESSION_HEADER}: {dict(resp.headers)}"
    [result] = [m["result"] for m in messages(resp) if m.get("id") == INITIALIZE_BODY["id"]]
    headers = session_headers(session, result["protocolVersion"])
    note = client.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    assert note.status_code in (200, 202), f"notifications/initialized: HTTP {note.status_code}: {note.text}"
    return headers


def session_headers(session: str, version: str = INITIALIZE_BODY["params"]["protocolVersion"]) -> dict[str, str]:
    return {**MCP_HEADERS, SESSION_HEADER: session, "Mcp-Protocol-Version": version}


def tools_list(rid: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/list"}


def padded_ping(size: int) -> bytes:
    """A valid `ping` request of exactly `size` bytes (padding in `_meta`)."""
    skeleton = {"jsonrpc": "2.0", "id": 9, "method": "ping", "params": {"_meta": {"pad": ""}}}
    base = len(json.dumps(skeleton).encode())
    skeleton["params"]["_meta"]["pad"] = "x" * (size - base)
    body = json.dumps(skeleton).encode()
    assert len(body) == size
    return body


@pytest.fixture
def gateway(vigil: Callable[..., Vigil], demo_bin: Path) -> Vigil:
    return vigil([stdio_backend("alpha", demo_bin, demo_stdio_args("alpha"))])


@pytest.fixture
def client() -> httpx.Client:
    with httpx.Client(timeout=DEADLINE) as c:
        yield c


# === HTTP ===


@pytest.mark.parametrize("with_session", [True, False], ids=["in-session", "no-session"])
def test_malformed_json_is_a_400_parse_error(gateway: Vigil, client: httpx.Client, with_session: bool) -> None:
    headers = open_raw_session(client, gateway.url) if with_session else MCP_HEADERS
    resp = client.post(gateway.url, content=b'{"jsonrpc": "2.0", "id": 1, "method": ', headers=headers)
    assert resp.status_code == 400, f"HTTP {resp.status_code}: {resp.text}"
    assert -32700 in error_codes(resp), f"no JSON-RPC parse error in: {resp.text}"


def test_unknown_method_is_method_not_found(gateway: Vigil, client: httpx.Client) -> None:
    headers = open_raw_session(client, gateway.url)
    control = client.post(gateway.url, json=tools_list(6), headers=headers)
    assert control.status_code == 200 and not error_codes(control), control.text

    resp = client.post(gateway.url, json={"jsonrpc": "2.0", "id": 7, "method": "vigil/no_such_method"}, headers=headers)
    answers = [m for m in messages(resp) if m.get("id") == 7]
    assert answers, f"no answer to request 7: HTTP {resp.status_code}: {resp.text}"
    assert answers[0].get("error", {}).get("code") == -32601, answers


def test_body_over_configured_limit_is_413(vigil: Callable[..., Vigil], demo_bin: Path, client: httpx.Client) -> None:
    gw = vigil([stdio_backend("alpha", demo_bin, demo_stdio_args("alpha"))], max_body_bytes=4096)
    headers = open_raw_session(client, gw.url)
    control = client.post(gw.url, content=padded_ping(3000), headers=headers)
    assert control.status_code == 200, f"a 3000-byte ping under a 4096-byte limit: HTTP {control.status_code}"

    resp = client.post(gw.url, content=padded_ping(16_384), headers=headers)
    assert resp.status_code == 413, f"HTTP {resp.status_code}: {resp.text[:500]}"


def test_body_over_default_limit_is_413(gateway: Vigil, client: httpx.Client) -> None:
    headers = open_raw_session(client, gateway.url)
    control = client.post(gateway.url, content=padded_ping(3 * 1024 * 1024), headers=headers)
    assert control.status_code == 200, f"a 3 MiB ping under the 4 MiB default: HTTP {control.status_code}"

    resp = client.post(gateway.url, content=padded_ping(4 * 1024 * 1024 + 1024), headers=headers)
    assert resp.status_code == 413, f"HTTP {resp.status_code}: {resp.text[:500]}"


def test_unknown_session_is_404(gateway: Vigil, client: httpx.Client) -> None:
    live = open_raw_session(client, gateway.url)
    assert client.post(gateway.url, json=tools_list(), headers=live).status_code == 200

    resp = client.post(gateway.url, json=tools_list(), headers=session_headers(f"no-such-session-{uuid.uuid4()}"))
    assert resp.status_code == 404, f"HTTP {resp.status_code}: {resp.text}"


def test_deleted_session_is_404(gateway: Vigil, client: httpx.Client) -> None:
    headers = open_raw_session(client, gateway.url)
    assert client.post(gateway.url, json=tools_list(), headers=headers).status_code == 200

    deleted = client.delete(gateway.url, headers=headers)
    assert 200 <= deleted.status_code < 300, f"DELETE: HTTP {deleted.status_code}: {deleted.text}"
    resp = client.post(gateway.url, json=tools_list(2), headers=headers)
    assert resp.status_code == 404, f"HTTP {resp.status_code}: {resp.text}"


def test_foreign_origin_is_403(gateway: Vigil, client: httpx.Client) -> None:
    own = client.post(gateway.url, json=INITIALIZE_BODY, headers={**MCP_HEADERS, "Origin": gateway.base})
    assert own.status_code == 200, f"Origin {gateway.base}: HTTP {own.status_code}: {own.text}"

    resp = client.post(gateway.url, json=INITIALIZE_BODY, headers={**MCP_HEADERS, "Origin": "http://evil.example"})
    assert resp.status_code == 403, f"HTTP {resp.status_code}: {resp.text}"


def test_foreign_host_is_refused(gateway: Vigil, client: httpx.Client) -> None:
    own = client.post(gateway.url, json=INITIALIZE_BODY, headers=MCP_HEADERS)
    assert own.status_code == 200, f"Host 127.0.0.1:{gateway.port}: HTTP {own.status_code}: {own.text}"

    resp = client.post(gateway.url, json=INITIALIZE_BODY, headers={**MCP_HEADERS, "Host": "evil.example"})
    assert resp.status_code in (403, 421), f"HTTP {resp.status_code}: {resp.text}"


# === through the SDK ===


@pytest.mark.anyio
@pytest.mark.parametrize("name", ["alpha__no_such_tool", "no_such_tool", "zeta__echo"])
async def test_unknown_tool_is_invalid_params(gateway: Vigil, name: str) -> None:
    async with http_session(gateway.url) as s:
        await wait_for_tools(s, ALPHA)
        err = await call_error(s, name)
        assert err.code == -32602, f"{err.code}: {err}"
        assert "unknown tool" in str(err).lower() and name in str(err), str(err)
        assert await call_text(s, "alpha__whoami") == "alpha"


@pytest.mark.anyio
async def test_garbage_speaking_stdio_backend_is_unavailable(vigil: Callable[..., Vigil], demo_bin: Path) -> None:
    gw = vigil(
        [
            stdio_backend("alpha", demo_bin, demo_stdio_args("alpha")),
            stdio_backend("junk", "sh", ["-c", "echo garbage; sleep 30"]),
        ]
    )
    async with http_session(gw.url) as s:
        listed = await wait_for_tools(s, ALPHA)
        assert not any(n.startswith("junk__") for n in listed), sorted(listed)
        err = await call_error(s, "junk__echo")
        assert is_unavailable(err, "junk"), f"{err.code}: {err}"
        assert await call_text(s, "alpha__echo", {"text": "still here"}) == "still here"
    assert gw.proc.alive(), "vigil exited"


# === config ===


def base_backends(demo_bin: Path) -> list[dict[str, Any]]:
    return [stdio_backend("alpha", demo_bin, demo_stdio_args("alpha"))]


def check_rejected(vigil_bin: Path, tmp_path: Path, text: str, *mentions: str) -> str:
    config = tmp_path / "bad.toml"
    config.write_text(text, encoding="utf-8")
    done = run_vigil(vigil_bin, ["serve", "--config", str(config)], tmp_path)
    assert done.returncode != 0, f"vigil accepted the config:\n{text}\nstderr:\n{done.stderr}"
    assert "bad.toml" in done.stderr, f"stderr does not name the file:\n{done.stderr}"
    for word in mentions:
        assert word in done.stderr, f"stderr does not mention {word!r}:\n{done.stderr}"
    return done.stderr


def listen() -> str:
    return f"127.0.0.1:{free_port()}"


def test_config_unknown_key(vigil_bin: Path, demo_bin: Path, tmp_path: Path) -> None:
    text = render_config({"lisen": listen(), "naming": "prefix"}, base_backends(demo_bin))
    check_rejected(vigil_bin, tmp_path, text, "lisen")


def test_config_unknown_backend_key(vigil_bin: Path, demo_bin: Path, tmp_path: Path) -> None:
    backend = {**base_backends(demo_bin)[0], "comand": "x"}
    text = render_config({"listen": listen()}, [backend])
    check_rejected(vigil_bin, tmp_path, text, "comand")


def test_config_duplicate_backend_name(vigil_bin: Path, demo_bin: Path, tmp_path: Path) -> None:
    twice = [
        stdio_backend("twin", demo_bin, demo_stdio_args("twin")),
        stdio_backend("twin", demo_bin, demo_stdio_args("twin")),
    ]
    check_rejected(vigil_bin, tmp_path, render_config({"listen": listen()}, twice), "twin")


def test_config_stdio_backend_without_command(vigil_bin: Path, tmp_path: Path) -> None:
    text = render_config({"listen": listen()}, [{"name": "alpha", "transport": "stdio"}])
    check_rejected(vigil_bin, tmp_path, text, "command")


def test_config_http_backend_without_url(vigil_bin: Path, tmp_path: Path) -> None:
    text = render_config({"listen": listen()}, [{"name": "beta", "transport": "http"}])
    check_rejected(vigil_bin, tmp_path, text, "url")


def test_config_colliding_names_without_prefix(vigil_bin: Path, demo_bin: Path, tmp_path: Path) -> None:
    backends = [
        stdio_backend("alpha", demo_bin, demo_stdio_args("alpha")),
        stdio_backend("beta", demo_bin, demo_stdio_args("beta")),
    ]
    stderr = check_rejected(vigil_bin, tmp_path, render_config({"listen": listen(), "naming": "none"}, backends))
    assert "alpha" in stderr and "beta" in stderr, stderr
    named = [t for t in DEMO_TOOLS if re.search(rf"(?<![\w]){t}(?![\w])", stderr)]
    assert named, f"no colliding tool named:\n{stderr}"


def test_check_accepts_the_base_config(vigil_bin: Path, demo_bin: Path, tmp_path: Path) -> None:
    """The control for the config cases: the configs they break are valid as written."""
    config = tmp_path / "good.toml"
    good = render_config({"listen": listen(), "naming": "prefix"}, base_backends(demo_bin))
    config.write_text(good, encoding="utf-8")
    done = run_vigil(vigil_bin, ["check", "--config", str(config)], tmp_path)
    assert done.returncode == 0, f"vigil check refused a valid config:\n{done.stderr}"
    config.write_text(render_config({"lisen": listen()}, base_backends(demo_bin)), encoding="utf-8")
    done = run_vigil(vigil_bin, ["check", "--config", str(config)], tmp_path)
    assert done.returncode != 0 and "lisen" in done.stderr, done.stderr


def test_config_missing_file(vigil_bin: Path, tmp_path: Path) -> None:
    done = run_vigil(vigil_bin, ["serve", "--config", str(tmp_path / "absent.toml")], tmp_path)
    assert done.returncode != 0
    assert "absent.toml" in done.stderr, done.stderr


def test_help_exits_zero(vigil_bin: Path, tmp_path: Path) -> None:
    top = run_vigil(vigil_bin, ["--help"], tmp_path)
    assert top.returncode == 0, top.stderr
    assert "serve" in top.stdout, top.stdout
    serve = run_vigil(vigil_bin, ["serve", "--help"], tmp_path)
    assert serve.returncode == 0, serve.stderr
    assert "--config" in serve.stdout, serve.stdout


def test_a_wildcard_origin_is_accepted_by_check_and_serve(
    vigil: Callable[..., Vigil], vigil_bin: Path, demo_bin: Path, tmp_path: Path
) -> None:
    """`allowed_origins = ["*"]` is documented; before, `vigil check` refused it (no scheme)."""
    config = tmp_path / "wild.toml"
    config.write_text(
        render_config({"listen": listen(), "allowed_origins": ["*"]}, base_backends(demo_bin)), encoding="utf-8"
    )
    done = run_vigil(vigil_bin, ["check", "--config", str(config)], tmp_path)
    assert done.returncode == 0, f'vigil check refused allowed_origins = ["*"]:\n{done.stderr}'
    # Served, any Origin is accepted (the rule the listener applies is the one check applies).
    gw = vigil(base_backends(demo_bin), allowed_origins=["*"])
    r = httpx.post(
        gw.url, json=INITIALIZE_BODY, headers={**MCP_HEADERS, "Origin": "https://anywhere.example"}, timeout=DEADLINE
    )
    assert r.status_code == 200, r.text
    # Control: an entry without a scheme is still refused, naming it.
    check_rejected(
        vigil_bin,
        tmp_path,
        render_config({"listen": listen(), "allowed_origins": ["example.com"]}, base_backends(demo_bin)),
        "allowed_origins[0]",
        "needs a scheme",
    )
