"""The control API cannot be driven by a web page, and guessing tokens is throttled.

- A page served from another origin (a local HTTP server on another port)
  tries, in headless Chromium, to restart and quarantine a backend of a
  tokenless Vigil with a form POST, a `no-cors` fetch and a plain fetch:
  every request reaches Vigil and is refused; the backend's state, restart
  count and the audit log do not change. The dashboard on the API's own
  origin still restarts the backend (the control pair).
- DNS rebinding: a foreign `Host` gets a JSON 403 on every route, `/ui`,
  `/metrics` and the event stream included, from raw HTTP and from a browser
  that resolves the foreign name to loopback.
- Mutating requests need a same-origin (or no) `Origin` and a header a page
  cannot send without a preflight (`X-Vigil-Request`, or a bearer token).
- Failed token attempts: after `failed_token_limit` failures one address is
  answered 429 with `Retry-After` for the cool-down, the right token too,
  while another address is served; one warning is logged, not one per try.
- Weak `[[api.tokens]]` secrets are refused by `vigil check` (exit 2) naming
  the key; a strong one is accepted.
"""

from __future__ import annotations

import http.server
import re
import secrets
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from browser import Page
from harness import Gateways, Vigil, demo_stdio_args, render_config, run_vigil, stdio_backend
from support import DEADLINE, ControlApi, poll, short

pytestmark = pytest.mark.anyio

OPERATOR = {"name": "oncall", "token": secrets.token_hex(32), "role": "operator"}

#: What every refused foreign `Host` is told.
HOST_REFUSED = (
    "Host `{host}` is not a name this control API answers to (DNS rebinding protection): "
    "connect by an allowed name, or add it to [api] allowed_hosts"
)
ORIGIN_REFUSED = (
    "Origin `{origin}` may not use this control API: it answers only pages of its own origin; "
    "add the origin to [api] allowed_origins to allow it"
)
HEADER_MISSING = (
    "POST needs the header `X-Vigil-Request: 1` or a bearer token, which a web page on another origin "
    "cannot send; e.g. curl -X POST -H 'X-Vigil-Request: 1' URL"
)


def demo(name: str, demo_bin: Path) -> dict[str, Any]:
    return stdio_backend(name, demo_bin, demo_stdio_args(name))


def error_of(resp: httpx.Response) -> tuple[int, str, str]:
    """`(status, error.code, error.message)` of a JSON error answer."""
    assert resp.headers.get("content-type", "").startswith("application/json"), (
        f"HTTP {resp.status_code} {resp.headers.get('content-type')}: {resp.text[:300]}"
    )
    error = resp.json()["error"]
    return resp.status_code, error["code"], error["message"]


def refusals(gw: Vigil, code: str) -> int:
    """Requests the control API refused with `code`, from its (debug) log."""
    return len(re.findall(rf'control API: request refused.*code="?{code}\b', gw.proc.stderr()))


async def raw(
    method: str, url: str, headers: dict[str, str] | None = None, *, local: str | None = None, **kw: Any
) -> httpx.Response:
    """One request exactly as given (no helper headers), optionally from local address `local`."""
    transport = httpx.AsyncHTTPTransport(local_address=local) if local else None
    async with httpx.AsyncClient(timeout=DEADLINE, transport=transport) as client:
        return await client.request(method, url, headers=headers or {}, **kw)


# === a hostile page ===

HOSTILE_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>free prizes</title></head><body>
<iframe name="sink" id="sink"></iframe>
<form id="form" method="POST" action="{api}/api/v1/health/instances/demo/restart" target="sink">
  <input type="hidden" name="x" value="y">
</form>
<script>
  window.report = {{ form: 0 }};
  document.getElementById("sink").addEventListener("load", () => {{ window.report.form += 1; }});
  document.getElementById("form").submit();
  fetch("{api}/api/v1/health/instances/demo/quarantine", {{
    method: "POST", mode: "no-cors", body: '{{"reason": "csrf"}}',
  }}).then((r) => {{ window.report.nocors = "answered " + r.type; }},
           (e) => {{ window.report.nocors = "error " + e; }});
  fetch("{api}/api/v1/health/instances/demo/restart", {{
    method: "POST", headers: {{ "Content-Type": "text/plain" }}, body: "restart please",
  }}).then((r) => {{ window.report.cors = "status " + r.status; }},
           (e) => {{ window.report.cors = "error " + e; }});
</script>
</body></html>
"""


class PageServer:
    """Serves one HTML page at `/` from 127.0.0.1 on its own port: another origin than Vigil's."""

    def __init__(self, html: str) -> None:
        body = html.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def card_state(page: Page, backend: str) -> str | None:
    found = page.all(f'[data-backend="{backend}"] .state[data-state]')
    return found[0].get_attribute("data-state") if found else None


async def test_a_page_on_another_origin_cannot_restart_or_quarantine(
    vigil: Gateways, demo_bin: Path, browser: Page
) -> None:
    gw = vigil([demo("demo", demo_bin)], api={}, restart={"base": "200ms", "jitter": 0.0})
    api = ControlApi(gw.api_base)
    before = await api.wait_state("demo", "running")
    page = PageServer(HOSTILE_PAGE.format(api=gw.api_base))
    try:

        def attack() -> dict[str, Any]:
            browser.open(page.url)
            # Each request got an answer (an iframe loads, a no-cors fetch
            # resolves only once a response came back); the plain fetch
            # settles either way (its answer is not readable cross-origin).
            return browser.wait(
                lambda: browser.js("return window.report;"),
                lambda r: bool(r) and r["form"] >= 1 and "nocors" in r and "cors" in r,
                "the hostile page to send its three requests",
            )

        report = await anyio.to_thread.run_sync(attack)
    finally:
        page.close()
    assert report["nocors"] == "answered opaque", report
    # Every request was answered, so an action it caused has happened.
    after = await api.instance("demo")
    assert (after["state"], after["restart_count"]) == ("running", before["restart_count"]), short(after)
    assert len(after["transitions"]) == len(before["transitions"]), short(after["transitions"])
    assert await api.audit() == [], "no action may have been attempted in the operator's name"
    # Vigil received and refused all three (the page cannot read why).
    await poll(
        lambda: anyio.to_thread.run_sync(refusals, gw, "origin_not_allowed"),
        lambda n: n >= 3,
        "three refusals of the page's origin in vigil's log",
    )
    assert "refused a request from another origin or host" in gw.proc.stderr()

    # The control pair: the same browser, on the API's own origin (the
    # dashboard, tokenless), restarts the backend.
    def restart_from_dashboard() -> None:
        browser.open(f"{gw.api_base}/ui")
        browser.wait(lambda: card_state(browser, "demo"), lambda s: s == "running", "the dashboard's card")
        [button] = browser.all('button[data-action="restart"][data-backend="demo"]')
        button.click()

    await anyio.to_thread.run_sync(restart_from_dashboard)
    restarted = await api.wait_for(
        "demo", lambda d: d["restart_count"] == before["restart_count"] + 1, "restarted from the dashboard"
    )
    assert [(e["principal"], e["action"], e["outcome"]) for e in await api.audit()] == [("local", "restart", "ok")]
    assert restarted["restart_count"] == before["restart_count"] + 1


# === DNS rebinding ===

READ_ROUTES = ["/api/v1/health/instances", "/api/v1/audit", "/ui", "/ui/app.js", "/metrics", "/api/v1/events"]


async def test_a_foreign_host_is_refused_on_every_route(vigil: Gateways, demo_bin: Path) -> None:
    gw = vigil([demo("demo", demo_bin)], api={})
    await ControlApi(gw.api_base).wait_state("demo", "running")
    assert gw.api_port is not None
    evil = f"evil.example:{gw.api_port}"
    for path in READ_ROUTES:
        resp = await raw("GET", f"{gw.api_base}{path}", {"Host": evil})
        assert error_of(resp) == (403, "host_not_allowed", HOST_REFUSED.format(host=evil)), path
        # The control: the API's own names are served.
        for own in (f"127.0.0.1:{gw.api_port}", f"localhost:{gw.api_port}"):
            if path == "/api/v1/events":
                async with httpx.AsyncClient(timeout=DEADLINE) as client:
                    async with client.stream("GET", f"{gw.api_base}{path}", headers={"Host": own}) as stream:
                        assert stream.status_code == 200, own
                        assert stream.headers["content-type"].startswith("text/event-stream")
                continue
            ok = await raw("GET", f"{gw.api_base}{path}", {"Host": own})
            assert ok.status_code == 200, f"{path} with Host {own}: HTTP {ok.status_code} {ok.text[:300]}"
    resp = await raw(
        "POST", f"{gw.api_base}/api/v1/health/instances/demo/restart", {"Host": evil, "X-Vigil-Request": "1"}
    )
    assert error_of(resp) == (403, "host_not_allowed", HOST_REFUSED.format(host=evil))
    assert await ControlApi(gw.api_base).audit() == []


async def test_a_rebound_name_in_a_browser_reads_nothing(vigil: Gateways, demo_bin: Path, browser: Page) -> None:
    gw = vigil([demo("demo", demo_bin)], api={})
    await ControlApi(gw.api_base).wait_state("demo", "running")
    assert gw.api_port is not None
    # Chromium runs with `--host-resolver-rules` mapping evil.example to
    # 127.0.0.1 (see browser.py): the page's own origin is the rebound name.
    url = f"http://evil.example:{gw.api_port}/api/v1/audit"

    def read() -> str:
        browser.open(url)
        return browser.wait(
            lambda: browser.js("return document.body ? document.body.innerText : '';"),
            lambda text: "error" in text or "entries" in text,
            "the rebound page's answer",
        )

    text = await anyio.to_thread.run_sync(read)
    assert "host_not_allowed" in text and "entries" not in text, text


# === the rules for mutating requests, without a browser ===


async def test_mutating_requests_need_their_own_origin_and_a_request_header(vigil: Gateways, demo_bin: Path) -> None:
    gw = vigil([demo("demo", demo_bin)], api={}, restart={"base": "200ms", "jitter": 0.0})
    api = ControlApi(gw.api_base)
    before = await api.wait_state("demo", "running")
    restart = f"{gw.api_base}/api/v1/health/instances/demo/restart"
    other = "http://127.0.0.1:1"

    resp = await raw("POST", restart, {"Origin": other, "X-Vigil-Request": "1"})
    assert error_of(resp) == (403, "origin_not_allowed", ORIGIN_REFUSED.format(origin=other))
    resp = await raw("POST", restart, {"Origin": "null", "X-Vigil-Request": "1"})
    assert error_of(resp) == (403, "origin_not_allowed", ORIGIN_REFUSED.format(origin="null"))
    # A browser (it says so with Sec-Fetch-*) that sent no Origin.
    resp = await raw("POST", restart, {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"})
    assert error_of(resp) == (
        403,
        "origin_required",
        "a browser request without an Origin header may not change anything: send it from the API's own origin",
    )
    # No browser signal, no request header: what a form or a no-cors fetch
    # would be if its Origin were stripped.
    resp = await raw("POST", restart, {"Content-Type": "text/plain"}, content=b"x")
    assert error_of(resp) == (403, "request_header_missing", HEADER_MISSING)
    unchanged = await api.instance("demo")
    assert unchanged["restart_count"] == before["restart_count"], short(unchanged)
    assert await api.audit() == []

    # Controls: the same POST with the header, then from the API's own origin.
    ok = await raw("POST", restart, {"X-Vigil-Request": "1"})
    assert ok.status_code == 200, ok.text
    await api.wait_for("demo", lambda d: d["restart_count"] == before["restart_count"] + 1, "the first restart")
    await api.wait_state("demo", "running")
    ok = await raw("POST", restart, {"X-Vigil-Request": "1", "Origin": gw.api_base, "Sec-Fetch-Site": "same-origin"})
    assert ok.status_code == 200, ok.text
    await api.wait_for("demo", lambda d: d["restart_count"] == before["restart_count"] + 2, "the second restart")
    assert [e["outcome"] for e in await api.audit()] == ["ok", "ok"]


# === failed token attempts ===


async def test_failed_tokens_are_throttled_per_address(vigil: Gateways, demo_bin: Path) -> None:
    limit, cooldown = 5, 3
    gw = vigil(
        [demo("demo", demo_bin)],
        api={
            "failed_token_limit": limit,
            "failed_token_window": "1m",
            "failed_token_cooldown": f"{cooldown}s",
            "tokens": [OPERATOR],
        },
    )
    good = ControlApi(gw.api_base, OPERATOR["token"])
    await good.wait_state("demo", "running")
    instances = f"{gw.api_base}/api/v1/health/instances"

    def bearer(token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    for i in range(limit):
        resp = await raw("GET", instances, bearer(f"guess-{i}-{secrets.token_hex(8)}"))
        assert error_of(resp) == (401, "unauthorized", "unknown token"), i
    locked_at = time.monotonic()
    message = "too many failed token attempts from 127.0.0.1: try again in {s} s"

    # The right token is refused during the cool-down, and so are more guesses.
    resp = await raw("GET", instances, bearer(OPERATOR["token"]))
    status, code, text = error_of(resp)
    retry = int(resp.headers["Retry-After"])
    assert (status, code) == (429, "too_many_failures") and 1 <= retry <= cooldown, (status, code, retry)
    assert text == message.format(s=retry)
    for i in range(20):
        resp = await raw("GET", instances, bearer(f"more-{i}-{secrets.token_hex(8)}"))
        assert resp.status_code == 429, resp.text

    # Another address is not locked out (loopback is all of 127/8).
    other = await raw("GET", instances, bearer(OPERATOR["token"]), local="127.0.0.2")
    assert other.status_code == 200, other.text

    # After the cool-down the right token is accepted again.
    seen: list[int] = []

    async def attempt() -> int:
        resp = await raw("GET", instances, bearer(OPERATOR["token"]))
        seen.append(resp.status_code)
        return resp.status_code

    await poll(attempt, lambda s: s == 200, "the right token to be accepted after the cool-down")
    waited = time.monotonic() - locked_at
    assert set(seen[:-1]) <= {429}, seen
    assert waited >= cooldown - 1, f"accepted after {waited:.1f}s, before the {cooldown}s cool-down ended"

    # One aggregated warning for the whole episode, naming the address and count.
    log = gw.proc.stderr()
    warnings = [line for line in log.splitlines() if "too many failed token attempts" in line and "WARN" in line]
    assert len(warnings) == 1, warnings
    assert "address=127.0.0.1" in warnings[0] and f"failures={limit}" in warnings[0], warnings[0]


# === weak tokens ===

WEAK = [
    ("a" * 32, "is one character repeated"),
    ("short-secret", "is too short (12 characters): use at least 16"),
    ("changemechangeme", "has too little entropy"),
    ("0123456789abcdefghij", "has too little entropy"),
]


@pytest.mark.parametrize(("secret", "problem"), WEAK)
def test_weak_tokens_are_refused_by_check(vigil_bin: Path, tmp_path: Path, secret: str, problem: str) -> None:
    def check(token: dict[str, Any], env: dict[str, str] | None = None) -> Any:
        config = tmp_path / "vigil.toml"
        top = {"api": {"listen": "127.0.0.1:18081", "tokens": [token]}}
        config.write_text(render_config(top, []), encoding="utf-8")
        return run_vigil(vigil_bin, ["check", "--config", str(config)], tmp_path)

    done = check({"name": "ops", "token": secret, "role": "operator"})
    assert done.returncode == 2, done
    [line] = [ln for ln in done.stderr.splitlines() if "api.tokens[0].token" in ln]
    assert problem in line and "openssl rand -hex 32" in line, line
    assert secret not in done.stderr, "the secret must not be printed"

    # The control: a strong token in the same place is accepted.
    done = check({"name": "ops", "token": secrets.token_hex(32), "role": "operator"})
    assert done.returncode == 0, done.stderr
