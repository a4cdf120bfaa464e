"""`[auth]` with static API keys on `/mcp` (issue 14, first part).

Real peers: the official Python SDK as the client (with `Authorization:
Bearer <key>` on every request), the demo backend over stdio, and raw
HTTP for what a client library hides (the 401 challenge, a session id
tried with another key).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
from pathlib import Path

import anyio
import httpx
import pytest

from harness import INITIALIZE_BODY, MCP_HEADERS, Gateways, demo_stdio_args, free_port, run_vigil, stdio_backend
from support import DEADLINE, DEMO_TOOLS, ControlApi, call_text, http_session, poll, prefixed, tool_names
from test_secrets import events_hello

pytestmark = pytest.mark.anyio

ALICE_KEY = "a1ice-7c1f0e8b4f9c2b7e1a0d8c3f6b5e9a2d"
BOB_KEY = "b0b-4f9c2b7e1a0d8c3f6b5e9a2d7c1f0e8b"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def keyed(vigil: Gateways, demo_bin: Path) -> object:
    """A gateway whose /mcp needs one of two keys (alice from the environment, bob from a private file)."""
    key_file = vigil.dir / "bob.key"
    key_file.write_text(BOB_KEY + "\n", encoding="utf-8")
    key_file.chmod(0o600)
    return vigil(
        [stdio_backend("demo", demo_bin, demo_stdio_args("demo"))],
        api={},
        auth={"keys": [{"name": "alice", "key_env": "VIGIL_KEY_ALICE"}, {"name": "bob", "key_file": str(key_file)}]},
        env={"VIGIL_KEY_ALICE": ALICE_KEY},
    )


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_a_key_opens_a_session_and_no_key_or_a_wrong_one_gets_the_challenge(
    vigil: Gateways, demo_bin: Path
) -> None:
    gw = keyed(vigil, demo_bin)
    async with http_session(gw.url, headers=bearer(ALICE_KEY)) as alice:
        assert await tool_names(alice) == prefixed("demo", DEMO_TOOLS)
        assert await call_text(alice, "demo__echo", {"text": "hi"}) == "hi"
    async with http_session(gw.url, headers=bearer(BOB_KEY)) as bob:
        assert await call_text(bob, "demo__echo", {"text": "from a file"}) == "from a file"

    async with httpx.AsyncClient(timeout=10) as http:
        none = await http.post(gw.url, json=INITIALIZE_BODY, headers=MCP_HEADERS)
        assert none.status_code == 401, none.text
        assert none.headers["www-authenticate"] == 'Bearer realm="vigil"', none.headers
        assert "Authorization: Bearer" in none.json()["error"]["message"], none.text
        assert "mcp-session-id" not in none.headers

        wrong = await http.post(gw.url, json=INITIALIZE_BODY, headers={**MCP_HEADERS, **bearer("x" * 40)})
        assert wrong.status_code == 401, wrong.text
        assert 'error="invalid_token"' in wrong.headers["www-authenticate"], wrong.headers

        basic = await http.post(
            gw.url, json=INITIALIZE_BODY, headers={**MCP_HEADERS, "Authorization": f"Basic {ALICE_KEY}"}
        )
        assert basic.status_code == 401, "only the Bearer scheme carries a key"


async def test_a_session_answers_only_the_key_that_opened_it(vigil: Gateways, demo_bin: Path) -> None:
    gw = keyed(vigil, demo_bin)
    async with httpx.AsyncClient(timeout=10) as http:
        opened = await http.post(gw.url, json=INITIALIZE_BODY, headers={**MCP_HEADERS, **bearer(ALICE_KEY)})
        assert opened.status_code == 200, opened.text
        session = opened.headers["mcp-session-id"]
        on = {**MCP_HEADERS, "Mcp-Session-Id": session, "Mcp-Protocol-Version": "2025-06-18"}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await http.post(gw.url, json=initialized, headers={**on, **bearer(ALICE_KEY)})).status_code == 202
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}

        # Bob's key on Alice's session: exactly what an unknown session gets.
        stolen = await http.post(gw.url, json=ping, headers={**on, **bearer(BOB_KEY)})
        unknown = await http.post(
            gw.url, json=ping, headers={**on, "Mcp-Session-Id": "no-such-session", **bearer(BOB_KEY)}
        )
        assert stolen.status_code == unknown.status_code == 404, (stolen.text, unknown.text)
        assert stolen.json() == unknown.json(), (stolen.text, unknown.text)
        no_key = await http.post(gw.url, json=ping, headers=on)
        assert no_key.status_code == 401

        # Alice's key still continues it, and she can close it.
        again = await http.post(gw.url, json=ping, headers={**on, **bearer(ALICE_KEY)})
        assert again.status_code == 200 and '"result"' in again.text, again.text
        closed = await http.delete(gw.url, headers={**on, **bearer(ALICE_KEY)})
        assert closed.status_code == 200, closed.text
        gone = await http.post(gw.url, json=ping, headers={**on, **bearer(ALICE_KEY)})
        assert gone.status_code == 404, gone.text

    assert "answered as an unknown session" in ANSI.sub("", gw.proc.stderr())


async def test_no_key_shows_up_in_logs_api_answers_or_metrics(vigil: Gateways, demo_bin: Path) -> None:
    gw = keyed(vigil, demo_bin)
    async with http_session(gw.url, headers=bearer(ALICE_KEY)) as alice:
        assert await call_text(alice, "demo__echo", {"text": "hi"}) == "hi"
    async with httpx.AsyncClient(timeout=10) as http:
        await http.post(gw.url, json=INITIALIZE_BODY, headers={**MCP_HEADERS, **bearer(BOB_KEY + "-wrong")})
    api = ControlApi(gw.api_base)
    await poll(lambda: api.instance("demo"), lambda i: i["state"] == "running", "demo running")
    answers = []
    async with httpx.AsyncClient(timeout=10) as http:
        for path in [
            "/api/v1/health/instances",
            "/api/v1/backends",
            "/api/v1/config",
            "/api/v1/audit",
            "/api/v1/audit/calls",
            "/metrics",
        ]:
            answers.append((await http.get(gw.api_base + path)).text)
    answers.append(await events_hello(gw.api_base))
    log = gw.proc.stderr()
    for secret in (ALICE_KEY, BOB_KEY):
        assert secret not in log, "a key is in the log"
        for text in answers:
            assert secret not in text, "a key is in an API answer"


def test_a_wide_listen_without_auth_is_refused_and_allow_anonymous_starts_with_a_warning(
    vigil: Gateways, tmp_path: Path
) -> None:
    port = free_port()
    config = tmp_path / "open.toml"
    config.write_text(f'listen = "0.0.0.0:{port}"\n', encoding="utf-8")
    refused = run_vigil(vigil.vigil_bin, ["check", "--config", str(config)], tmp_path)
    assert refused.returncode != 0
    err = ANSI.sub("", refused.stderr)
    assert "is not a loopback address" in err and "[[auth.keys]]" in err and "allow_anonymous = true" in err, err

    def write(p: int, api_port: int) -> Path:
        config.write_text(
            f'listen = "0.0.0.0:{p}"\n[auth]\nallow_anonymous = true\n[api]\nlisten = "127.0.0.1:{api_port}"\n',
            encoding="utf-8",
        )
        return config

    gw = vigil.serve_file(write)
    assert "WITHOUT AUTHENTICATION" in ANSI.sub("", gw.proc.stderr())


async def test_a_rotated_key_file_is_applied_by_a_reload_and_the_old_key_refused(
    vigil: Gateways, demo_bin: Path
) -> None:
    gw = keyed(vigil, demo_bin)
    new_bob = "n3w-b0b-1a0d8c3f6b5e9a2d7c1f0e8b4f9c2b7e"
    async with http_session(gw.url, headers=bearer(ALICE_KEY)) as alice:
        key_file = vigil.dir / "bob.key"
        key_file.write_text(new_bob + "\n", encoding="utf-8")
        key_file.chmod(0o600)
        os.kill(gw.proc.pid, signal.SIGHUP)

        async def status(key: str) -> int:
            async with httpx.AsyncClient(timeout=10) as http:
                r = await http.post(gw.url, json=INITIALIZE_BODY, headers={**MCP_HEADERS, **bearer(key)})
                return r.status_code

        await poll(lambda: status(BOB_KEY), lambda s: s == 401, "the old key refused after the reload")
        assert await status(new_bob) == 200
        # Alice's key did not change: her open session goes on.
        assert await call_text(alice, "demo__echo", {"text": "still here"}) == "still here"
    assert "[[auth.keys]] replaced" in ANSI.sub("", gw.proc.stderr())
    assert new_bob not in gw.proc.stderr()


async def test_an_address_guessing_keys_gets_a_cool_down_the_right_key_too(vigil: Gateways, demo_bin: Path) -> None:
    gw = keyed(vigil, demo_bin)
    async with httpx.AsyncClient(timeout=10) as http:

        async def attempt(key: str) -> httpx.Response:
            return await http.post(gw.url, json=INITIALIZE_BODY, headers={**MCP_HEADERS, **bearer(key)})

        for i in range(10):
            r = await attempt(f"guess-{i:02}-4f9c2b7e1a0d8c3f6b5e9a2d")
            assert r.status_code == 401, (i, r.status_code, r.text)
        locked = await attempt(ALICE_KEY)
        assert locked.status_code == 429, locked.text
        assert 0 < int(locked.headers["retry-after"]) <= 60, locked.headers
        assert "too many unknown keys" in locked.json()["error"]["message"], locked.text
    assert "/mcp: too many failed token attempts" in ANSI.sub("", gw.proc.stderr())


class OneConnection:
    """HTTP/1.1 requests on one TCP connection, answers read to their end: what keep-alive clients do."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE)
        self.buf = b""

    def _fill(self) -> None:
        more = self.sock.recv(65536)
        if not more:
            raise ConnectionError("Vigil closed the connection")
        self.buf += more

    def _take(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def post(self, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.sock.sendall(
            f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}Content-Length: {len(body)}\r\n\r\n".encode() + body
        )
        status = int(self._line().split()[1])
        got: dict[str, str] = {}
        while line := self._line():
            k, v = line.decode().split(":", 1)
            got[k.strip().lower()] = v.strip()
        if "content-length" in got:
            return status, got, self._take(int(got["content-length"]))
        out = b""
        while size := int(self._line(), 16):  # chunked
            out += self._take(size)
            self._take(2)
        self._take(2)
        return status, got, out

    def close(self) -> None:
        self.sock.close()


async def test_a_refused_request_leaves_the_connection_usable_for_the_next(vigil: Gateways, demo_bin: Path) -> None:
    """One connection: 401 (wrong key), 200 (right key), 404 (another's session), 200; a big refused body: close."""
    gw = keyed(vigil, demo_bin)
    init = json.dumps(INITIALIZE_BODY).encode()
    ping = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'

    def on_one_connection() -> list[tuple[int, dict[str, str], bytes]]:
        c = OneConnection(gw.port)
        try:
            answers = [c.post(init, {**MCP_HEADERS, **bearer("x" * 40)})]
            answers.append(c.post(init, {**MCP_HEADERS, **bearer(ALICE_KEY)}))
            on = {
                **MCP_HEADERS,
                "Mcp-Session-Id": answers[1][1]["mcp-session-id"],
                "Mcp-Protocol-Version": "2025-06-18",
            }
            c.post(b'{"jsonrpc":"2.0","method":"notifications/initialized"}', {**on, **bearer(ALICE_KEY)})
            answers.append(c.post(ping, {**on, **bearer(BOB_KEY)}))
            answers.append(c.post(ping, {**on, **bearer(ALICE_KEY)}))
            return answers
        finally:
            c.close()

    wrong, opened, stolen, again = await anyio.to_thread.run_sync(on_one_connection)
    assert wrong[0] == 401 and "connection" not in wrong[1], wrong
    assert opened[0] == 200 and b'"protocolVersion"' in opened[2], opened
    assert stolen[0] == 404, stolen
    assert again[0] == 200 and b'"result"' in again[2], again

    # A refused body too long to read whole is not read: the answer says so.
    def big_refused() -> tuple[int, dict[str, str], bytes]:
        c = OneConnection(gw.port)
        try:
            padding = b" " * (256 * 1024)
            return c.post(ping[:-1] + padding + b"}", {**MCP_HEADERS, **bearer("y" * 40)})
        finally:
            c.close()

    big = await anyio.to_thread.run_sync(big_refused)
    assert big[0] == 401 and big[1].get("connection") == "close", big[:2]
