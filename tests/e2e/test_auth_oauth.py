"""`[auth.oauth]`: Vigil as an OAuth 2.1 resource server (issue 14, acceptance 1, 2 and 4).

Real peers: `oidc-provider` (a certified OAuth 2.0 / OpenID Connect server)
issuing JWT access tokens for Vigil's `/mcp` resource; the official Python
SDK's OAuth client (`mcp.client.auth.OAuthClientProvider`), which starts
with no token and follows 401 → protected resource metadata → authorization
server metadata → dynamic registration → authorization code + PKCE; raw
HTTP for the challenges a client library hides; the demo backend over stdio.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import httpx2
import jwt
import pytest
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientMetadata
from oauth.provider import (
    MCP_SCOPE,
    SDK_REDIRECT_URI,
    MemoryTokenStorage,
    OAuthProvider,
    confidential_client,
    public_client,
)
from oauth.test_provider_harness import start_stand_in
from test_secrets import events_hello

from harness import (
    INITIALIZE_BODY,
    MCP_HEADERS,
    DemoHttp,
    Gateways,
    Procs,
    demo_stdio_args,
    http_backend,
    render_config,
    run_vigil,
    stdio_backend,
)
from support import (
    DEADLINE,
    DEMO_TOOLS,
    SDK_READ_TIMEOUT,
    ControlApi,
    Inbox,
    call_error,
    call_text,
    http_session,
    poll,
    prefixed,
    tool_names,
    unwrapped_failures,
)

pytestmark = pytest.mark.anyio

SVC, SVC_SECRET = "svc", "svc-secret-0123456789abcdef0123456789"
BOT, BOT_SECRET = "bot", "bot-secret-0123456789abcdef0123456789"
RS, RS_SECRET = "resource-server", "rs-secret-0123456789abcdef0123456789"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
APP = "app"
ACCOUNTS = {"alice": {"groups": ["ops"]}, "bob": {"groups": ["dev"]}}
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture
def idp(procs: Procs, tmp_path: Path) -> Iterator[OAuthProvider]:
    """The authorization server; Vigil's resource is added once Vigil's port is known."""
    with OAuthProvider(
        tmp_path / "oauth",
        procs=procs,
        clients=[
            confidential_client(SVC, SVC_SECRET, groups=["ops"], scope=MCP_SCOPE),
            confidential_client(BOT, BOT_SECRET, groups=["dev"], scope=MCP_SCOPE),
            confidential_client(RS, RS_SECRET, grant_types=["client_credentials", TOKEN_EXCHANGE], scope=MCP_SCOPE),
            public_client(APP),
        ],
        accounts=ACCOUNTS,
    ) as provider:
        yield provider


def protected(
    vigil: Gateways,
    demo_bin: Path,
    idp: OAuthProvider,
    *,
    env: dict[str, str] | None = None,
    resource_format: str = "jwt",
    **oauth: object,
) -> object:
    """A gateway whose /mcp takes the provider's tokens (scope `mcp`) for its own URL."""
    gw = vigil(
        [stdio_backend("demo", demo_bin, demo_stdio_args("demo"))],
        api={},
        auth={"oauth": {"issuers": [idp.issuer], "required_scopes": [MCP_SCOPE], **oauth}},
        env=env,
    )
    idp.add_resource(gw.url, format=resource_format)
    return gw


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def metadata_url(gw: object) -> str:
    return f"http://127.0.0.1:{gw.port}/.well-known/oauth-protected-resource/mcp"


async def test_the_sdk_client_discovers_registers_and_logs_in_with_pkce(
    vigil: Gateways, demo_bin: Path, idp: OAuthProvider
) -> None:
    gw = protected(vigil, demo_bin, idp)
    login = idp.sdk_login("alice")
    storage = MemoryTokenStorage()
    auth = OAuthClientProvider(
        server_url=gw.url,
        client_metadata=OAuthClientMetadata(client_name="vigil-e2e", redirect_uris=[SDK_REDIRECT_URI]),
        storage=storage,
        redirect_handler=login.redirect_handler,
        callback_handler=login.callback_handler,
    )
    for _round in range(2):  # the second session reuses the stored token: no second login
        with unwrapped_failures():
            async with (
                httpx2.AsyncClient(auth=auth, timeout=httpx2.Timeout(DEADLINE, read=SDK_READ_TIMEOUT)) as client,
                streamable_http_client(gw.url, http_client=client) as (read, write),
                ClientSession(read, write, read_timeout_seconds=SDK_READ_TIMEOUT) as session,
            ):
                await session.initialize()
                assert await tool_names(session) == prefixed("demo", DEMO_TOOLS)
                assert await call_text(session, "demo__echo", {"text": "via oauth"}) == "via oauth"
    assert len(login.urls) == 1, f"logged in {len(login.urls)} times: {login.urls}"
    query = parse_qs(urlsplit(login.urls[0]).query)
    assert query["resource"] == [gw.url], f"the client asked for another resource: {query}"
    assert query["code_challenge_method"] == ["S256"], query
    assert MCP_SCOPE in query["scope"][0].split(), query
    assert storage.client_info is not None, "the client registered dynamically"
    assert storage.tokens is not None
    claims = idp.decode(storage.tokens.access_token, audience=gw.url)
    assert claims["sub"] == "alice", claims


async def test_a_client_credentials_token_lists_and_calls(vigil: Gateways, demo_bin: Path, idp: OAuthProvider) -> None:
    gw = protected(vigil, demo_bin, idp)
    token = idp.client_credentials_token(SVC, SVC_SECRET, resource=gw.url, scope=MCP_SCOPE)
    async with http_session(gw.url, headers=bearer(token)) as svc:
        assert await tool_names(svc) == prefixed("demo", DEMO_TOOLS)
        assert await call_text(svc, "demo__echo", {"text": "machine"}) == "machine"
    log = ANSI.sub("", gw.proc.stderr())
    assert "fetched the authorization server's signing keys" in log, log[-3000:]
    assert token not in log, "the token is in the log"
    answers = [await events_hello(gw.api_base)]
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        for path in ["/api/v1/health/instances", "/api/v1/config", "/api/v1/audit", "/api/v1/audit/calls", "/metrics"]:
            answers.append((await http.get(gw.api_base + path)).text)
    assert all(token not in a for a in answers), "the token is in an API answer, the event stream or the metrics"

    async def audited() -> str:
        async with httpx.AsyncClient(timeout=DEADLINE) as http:
            return (await http.get(gw.api_base + "/api/v1/audit/calls")).text

    # The audit writer stores records in batches, a moment after the answer.
    calls = await poll(audited, lambda text: "sub:svc" in text, "the call audited under the token's principal")
    assert token not in calls


async def test_the_metadata_and_the_challenge_lead_a_client_to_the_issuer(
    vigil: Gateways, demo_bin: Path, idp: OAuthProvider
) -> None:
    gw = protected(vigil, demo_bin, idp)
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        none = await http.post(gw.url, json=INITIALIZE_BODY, headers=MCP_HEADERS)
        assert none.status_code == 401, none.text
        www = none.headers["www-authenticate"]
        assert www == f'Bearer resource_metadata="{metadata_url(gw)}", scope="{MCP_SCOPE}"', www
        assert "error=" not in www, "no credentials, no error code (RFC 6750 §3.1)"
        for url in (metadata_url(gw), f"http://127.0.0.1:{gw.port}/.well-known/oauth-protected-resource"):
            prm = await http.get(url)
            assert prm.status_code == 200, (url, prm.text)
            doc = prm.json()
            assert doc["resource"] == gw.url, doc
            assert doc["authorization_servers"] == [idp.issuer], doc
            assert doc["scopes_supported"] == [MCP_SCOPE], doc
            assert doc["bearer_methods_supported"] == ["header"], doc


async def test_each_bad_token_is_refused_with_the_right_status_and_challenge(
    vigil: Gateways, demo_bin: Path, idp: OAuthProvider
) -> None:
    gw = protected(vigil, demo_bin, idp)
    good = idp.forge(gw.url)

    async def post(token: str, source: int) -> httpx.Response:
        # Each from an address of its own (127.0.0.N): ten bad tokens from one
        # address would start its cool-down, which is tested with keys.
        transport = httpx.AsyncHTTPTransport(local_address=f"127.0.0.{source}")
        async with httpx.AsyncClient(timeout=DEADLINE, transport=transport) as http:
            return await http.post(gw.url, json=INITIALIZE_BODY, headers={**MCP_HEADERS, **bearer(token)})

    ok = await post(good, 2)  # the control: the same kind of token without a defect is accepted
    assert ok.status_code == 200, ok.text
    bad = idp.bad_tokens(gw.url)
    assert len(bad) == 14, sorted(bad)
    for source, (name, token) in enumerate(bad.items(), start=3):
        resp = await post(token, source)
        www = resp.headers.get("www-authenticate", "")
        assert f'resource_metadata="{metadata_url(gw)}"' in www, (name, www)
        assert "mcp-session-id" not in resp.headers, name
        if name in ("no_scope", "other_scope"):
            assert resp.status_code == 403, (name, resp.status_code, resp.text)
            assert 'error="insufficient_scope"' in www and f'scope="{MCP_SCOPE}"' in www, (name, www)
        else:
            assert resp.status_code == 401, (name, resp.status_code, resp.text)
            assert 'error="invalid_token"' in www, (name, www)
        assert token not in resp.text and token not in www, f"{name}: the token is echoed"
        if name == "expired":
            assert 'error_description="the token expired"' in www, www
    assert token not in ANSI.sub("", gw.proc.stderr())


async def test_a_rotated_signing_key_is_accepted_without_a_restart(
    vigil: Gateways, demo_bin: Path, idp: OAuthProvider
) -> None:
    gw = protected(vigil, demo_bin, idp)
    first = idp.client_credentials_token(SVC, SVC_SECRET, resource=gw.url, scope=MCP_SCOPE)
    async with http_session(gw.url, headers=bearer(first)) as s:
        assert await call_text(s, "demo__echo", {"text": "old key"}) == "old key"
    new_key = idp.rotate_keys("RS256", keep_old=True)
    rotated = idp.client_credentials_token(SVC, SVC_SECRET, resource=gw.url, scope=MCP_SCOPE)
    assert json.loads(httpx.get(f"{idp.jwks_uri}").text)["keys"][0]["kid"] == new_key.kid
    assert jwt.get_unverified_header(rotated)["kid"] == new_key.kid, "the provider signs with the new key"

    # The unknown kid makes Vigil fetch the keys again (at most every 5 s:
    # the request waits for that fetch rather than being refused).
    async with http_session(gw.url, headers=bearer(rotated)) as s:
        assert await call_text(s, "demo__echo", {"text": "new key"}) == "new key"


async def test_cached_keys_keep_working_while_the_issuer_is_down(
    vigil: Gateways, demo_bin: Path, idp: OAuthProvider
) -> None:
    gw = protected(vigil, demo_bin, idp)
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        first = await http.post(gw.url, json=INITIALIZE_BODY, headers={**MCP_HEADERS, **bearer(idp.forge(gw.url))})
        assert first.status_code == 200, first.text
        idp.stop()
        # A token Vigil has never seen, signed with a key it fetched before.
        fresh = idp.forge(gw.url, sub="carol")
        resp = await http.post(gw.url, json=INITIALIZE_BODY, headers={**MCP_HEADERS, **bearer(fresh)})
        assert resp.status_code == 200, resp.text


async def test_a_session_is_bound_to_its_principal_and_a_refreshed_token_continues_it(
    vigil: Gateways, demo_bin: Path, idp: OAuthProvider
) -> None:
    gw = protected(vigil, demo_bin, idp)
    alice = idp.authorization_code_token(APP, resource=gw.url, scope=f"{MCP_SCOPE} offline_access", account="alice")
    bob = idp.authorization_code_token(APP, resource=gw.url, scope=MCP_SCOPE, account="bob")
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        opened = await http.post(gw.url, json=INITIALIZE_BODY, headers={**MCP_HEADERS, **bearer(alice["access_token"])})
        assert opened.status_code == 200, opened.text
        on = {**MCP_HEADERS, "Mcp-Session-Id": opened.headers["mcp-session-id"], "Mcp-Protocol-Version": "2025-06-18"}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        sent = await http.post(gw.url, json=initialized, headers={**on, **bearer(alice["access_token"])})
        assert sent.status_code == 202, sent.text
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}

        stolen = await http.post(gw.url, json=ping, headers={**on, **bearer(bob["access_token"])})
        unknown = await http.post(
            gw.url, json=ping, headers={**on, "Mcp-Session-Id": "no-such-session", **bearer(bob["access_token"])}
        )
        assert stolen.status_code == unknown.status_code == 404, (stolen.text, unknown.text)
        assert stolen.text == unknown.text

        refreshed = idp.refresh(APP, alice["refresh_token"], resource=gw.url)
        assert refreshed["access_token"] != alice["access_token"]
        again = await http.post(gw.url, json=ping, headers={**on, **bearer(refreshed["access_token"])})
        assert again.status_code == 200 and '"result"' in again.text, again.text

        expired = idp.forge(gw.url, sub="alice", exp=1, iat=0)
        late = await http.post(gw.url, json=ping, headers={**on, **bearer(expired)})
        assert late.status_code == 401, "an expired token gets 401, so the client refreshes"
        assert 'error="invalid_token"' in late.headers["www-authenticate"]
    assert "answered as an unknown session" in ANSI.sub("", gw.proc.stderr())


async def test_a_wide_listen_with_oauth_needs_an_explicit_resource(vigil: Gateways, demo_bin: Path) -> None:
    config = vigil.dir / "wide.toml"
    config.write_text('listen = "0.0.0.0:18080"\n[auth.oauth]\nissuers = ["http://127.0.0.1:9000"]\n', encoding="utf-8")
    out = run_vigil(vigil.vigil_bin, ["check", "--config", str(config)], vigil.dir)
    assert out.returncode != 0
    assert "auth.oauth.resource: missing" in out.stderr, out.stderr
    assert "set resource to the URL of /mcp as clients reach it" in out.stderr, out.stderr


async def test_the_control_api_takes_provider_tokens_with_roles_from_their_groups(
    vigil: Gateways, demo_bin: Path, idp: OAuthProvider
) -> None:
    gw = vigil(
        [stdio_backend("demo", demo_bin, demo_stdio_args("demo"))],
        api={"roles": {"operator": ["group:ops"], "viewer": ["group:dev"]}},
        auth={"oauth": {"issuers": [idp.issuer], "required_scopes": [MCP_SCOPE]}},
    )
    idp.add_resource(gw.url)
    ops = ControlApi(gw.api_base, idp.client_credentials_token(SVC, SVC_SECRET, resource=gw.url, scope=MCP_SCOPE))
    dev = ControlApi(gw.api_base, idp.client_credentials_token(BOT, BOT_SECRET, resource=gw.url, scope=MCP_SCOPE))
    await ops.wait_state("demo", "running")

    assert (await dev.get_json("/api/v1/health/instances/demo"))["state"] == "running", "a viewer may read"
    refused = await dev.act("demo", "restart")
    assert refused.status_code == 403, refused.text
    assert "viewer" in refused.text, refused.text
    restarted = await ops.act("demo", "restart")
    assert restarted.status_code == 200, restarted.text

    anonymous = await ControlApi(gw.api_base).request("GET", "/api/v1/health/instances")
    assert anonymous.status_code == 401, "with [api] roles the API needs credentials"
    wrong = await ControlApi(gw.api_base, idp.bad_tokens(gw.url)["wrong_audience"]).request(
        "GET", "/api/v1/health/instances"
    )
    assert wrong.status_code == 401 and 'error="invalid_token"' in wrong.headers["www-authenticate"], wrong.headers

    entries = await ops.audit()
    restarts = [(e["principal"], e["action"], e["outcome"]) for e in entries if e["action"] == "restart"]
    assert (f"sub:{BOT}", "restart", restarts[0][2]) == restarts[0] and restarts[0][2].startswith("denied"), restarts
    assert (f"sub:{SVC}", "restart", "ok") in restarts, restarts


async def test_a_forward_auth_backend_gets_a_token_for_its_own_audience_by_token_exchange(
    vigil: Gateways, idp: OAuthProvider, procs: Procs
) -> None:
    backend = start_stand_in(procs, idp.issuer)  # checks every token: its own audience, the provider's keys
    idp.add_resource(backend.url)
    gw = vigil(
        [
            {
                "name": "rs",
                "transport": "http",
                "url": backend.url,
                "forward_auth": True,
                "token_exchange": {
                    "audience": backend.url,
                    "scope": MCP_SCOPE,
                    "client_id": RS,
                    "client_secret_env": "VIGIL_RS_SECRET",
                },
            }
        ],
        api={},
        auth={"oauth": {"issuers": [idp.issuer], "required_scopes": [MCP_SCOPE]}},
        env={"VIGIL_RS_SECRET": RS_SECRET},
    )
    idp.add_resource(gw.url)
    alice = idp.authorization_code_token(APP, resource=gw.url, scope=MCP_SCOPE, account="alice")["access_token"]
    async with http_session(gw.url, headers=bearer(alice)) as session:
        assert "rs__whoami" in await tool_names(session)
        me = json.loads(await call_text(session, "rs__whoami"))
    assert me["aud"] == backend.url, f"the backend got a token for another audience: {me}"
    assert me["subject"] == "alice" and me["sub"] == RS, me
    assert me["token_sha256"] != hashlib.sha256(alice.encode()).hexdigest(), "the backend got Vigil's own token"
    assert "token refused" not in backend.proc.stderr(), backend.proc.stderr()[-2000:]
    log = ANSI.sub("", gw.proc.stderr())
    assert RS_SECRET not in log and alice not in log


async def test_forward_auth_under_oauth_needs_token_exchange_or_an_explicit_passthrough(
    vigil: Gateways, idp: OAuthProvider
) -> None:
    def check(backend: dict[str, object]) -> subprocess.CompletedProcess[str]:
        config = vigil.dir / "fa.toml"
        top = {"auth": {"oauth": {"issuers": [idp.issuer]}}}
        config.write_text(render_config(top, [backend]), encoding="utf-8")
        return run_vigil(vigil.vigil_bin, ["check", "--config", str(config)], vigil.dir)

    plain = {"name": "gh", "transport": "http", "url": "http://127.0.0.1:9/mcp", "forward_auth": True}
    refused = check(plain)
    assert refused.returncode != 0
    assert "backends[0].forward_auth: with [auth.oauth] the client's token is for Vigil" in refused.stderr, (
        refused.stderr
    )
    assert "token_exchange = {" in refused.stderr and '"passthrough"' in refused.stderr, refused.stderr
    assert check({**plain, "forward_auth": "passthrough"}).returncode == 0
    odd = check({**plain, "forward_auth": "sometimes"})
    assert "`sometimes` is not a mode" in odd.stderr, odd.stderr


async def test_an_opaque_token_is_introspected_at_the_issuer(
    vigil: Gateways, demo_bin: Path, idp: OAuthProvider
) -> None:
    introspection = {"client_id": RS, "client_secret_env": "VIGIL_RS_SECRET"}
    gw = protected(
        vigil,
        demo_bin,
        idp,
        principal_claim="client_id",
        introspection=introspection,
        env={"VIGIL_RS_SECRET": RS_SECRET},
        resource_format="opaque",
    )
    token = idp.client_credentials_token(SVC, SVC_SECRET, resource=gw.url, scope=MCP_SCOPE)
    assert token.count(".") == 0, "the provider issues opaque tokens for this resource"
    async with http_session(gw.url, headers=bearer(token)) as svc:
        assert await call_text(svc, "demo__echo", {"text": "opaque"}) == "opaque"
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        made_up = await http.post(
            gw.url, json=INITIALIZE_BODY, headers={**MCP_HEADERS, **bearer("made-up-opaque-token-0123456789")}
        )
    assert made_up.status_code == 401, made_up.text
    assert "not active" in made_up.headers["www-authenticate"], made_up.headers
    assert RS_SECRET not in ANSI.sub("", gw.proc.stderr())


async def test_the_same_subject_of_two_issuers_is_two_callers(
    vigil: Gateways, demo_http: Callable[..., DemoHttp], idp: OAuthProvider, procs: Procs, tmp_path: Path
) -> None:
    """`svc` of one authorization server and `svc` of another: two callers.

    Each has its own backend session (lane) and hears only its own logs, its
    own rate bucket, and its own issuer in the audit. Keyed by the subject
    alone they shared all three."""
    with OAuthProvider(
        tmp_path / "oauth-b",
        procs=procs,
        clients=[confidential_client(SVC, SVC_SECRET, groups=["ops"], scope=MCP_SCOPE)],
        name="oauth-provider-b",
    ) as other:
        web = demo_http("web")
        gw = vigil(
            [http_backend("web", web.url)],
            api={},
            auth={"oauth": {"issuers": [idp.issuer, other.issuer], "required_scopes": [MCP_SCOPE]}},
            policy=[{"principals": ["sub:svc"], "issuer": "*", "allow": ["*"], "rate": "2/min"}],
        )
        for provider in (idp, other):
            provider.add_resource(gw.url, format="jwt")
        token_a = idp.client_credentials_token(SVC, SVC_SECRET, resource=gw.url, scope=MCP_SCOPE)
        token_b = other.client_credentials_token(SVC, SVC_SECRET, resource=gw.url, scope=MCP_SCOPE)
        logs_a, logs_b = Inbox(), Inbox()
        async with (
            http_session(gw.url, headers=bearer(token_a), logging_callback=logs_a) as a,
            http_session(gw.url, headers=bearer(token_b), logging_callback=logs_b) as b,
        ):
            secret = f"a-{uuid.uuid4()}"
            await call_text(a, "web__log", {"level": "error", "message": secret})
            await logs_a.wait_for(lambda p: secret in json.dumps(p.data), "svc of A hears its own log")
            # Two calls use up A's 2/min; B's bucket is his own.
            assert await call_text(a, "web__echo", {"text": "second"}) == "second"
            err = await call_error(a, "web__echo", {"text": "third"})
            assert err.code == -32029, f"{err.code}: {err}"
            own = f"b-{uuid.uuid4()}"
            await call_text(b, "web__log", {"level": "error", "message": own})
            await logs_b.wait_for(lambda p: own in json.dumps(p.data), "svc of B hears his own log")
            assert not any(secret in json.dumps(p.data) for p in logs_b.items), "A's log reached B"
            assert await call_text(b, "web__echo", {"text": "second"}) == "second"

        async def audited(issuer: str) -> list[dict[str, object]]:
            async with httpx.AsyncClient(timeout=DEADLINE) as http:
                resp = await http.get(gw.api_base + "/api/v1/audit/calls", params={"issuer": issuer})
            assert resp.status_code == 200, resp.text
            return resp.json()["calls"]

        mine = await poll(lambda: audited(idp.issuer), lambda c: len(c) == 3, "A's three calls audited")
        assert {(c["principal"], c["issuer"], c["outcome"]) for c in mine} == {
            ("sub:svc", idp.issuer, "ok"),
            ("sub:svc", idp.issuer, "rate_limited"),
        }, mine
        his = await poll(lambda: audited(other.issuer), lambda c: len(c) == 2, "B's two calls audited")
        assert {(c["issuer"], c["outcome"]) for c in his} == {(other.issuer, "ok")}, his
