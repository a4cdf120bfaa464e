"""The OAuth harness itself, against the real authorization server (oidc-provider), without Vigil.

A failure here is the harness's or the provider's, not Vigil's: discovery,
client-credentials JWTs (audience, issuer, scope, groups), the
authorization-code + PKCE flow driven over HTTP for a pre-registered and a
dynamically registered client, refresh, key rotation without a restart,
resources added at run time, introspection, token exchange, the forged bad
tokens, and the Python SDK's own OAuth client discovering everything from a
stand-in resource server's 401 (the flow Vigil will be tested with).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
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

from harness import DemoHttp, Procs, free_port, port_taken, wait_http
from oauth.provider import (
    MCP_SCOPE,
    SDK_REDIRECT_URI,
    MemoryTokenStorage,
    OAuthProvider,
    Pkce,
    confidential_client,
    public_client,
)
from support import DEADLINE, SDK_READ_TIMEOUT, text_of, unwrapped_failures

pytestmark = pytest.mark.anyio

RESOURCE = "http://127.0.0.1:8080/mcp"
ES_RESOURCE = "http://127.0.0.1:8081/mcp"
OPAQUE_RESOURCE = "http://127.0.0.1:8082/api"
OTHER_RESOURCE = "http://127.0.0.1:8083/mcp"
UNKNOWN = "http://127.0.0.1:8084/mcp"  # no resource the provider knows

SVC, SVC_SECRET = "svc", "svc-secret-0123456789abcdef0123456789"
RS, RS_SECRET = "resource-server", "rs-secret-0123456789abcdef0123456789"
APP = "app"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCOUNTS = {"alice": {"groups": ["admins", "staff"]}, "bob": {"groups": ["staff"]}}

STAND_IN = Path(__file__).resolve().parent / "resource_server.py"


@pytest.fixture
def idp(procs: Procs, tmp_path: Path) -> Iterator[OAuthProvider]:
    with OAuthProvider(
        tmp_path / "oauth",
        procs=procs,
        resources=[
            {"resource": RESOURCE, "scope": "mcp mcp:admin"},
            {"resource": ES_RESOURCE, "alg": "ES256"},
            {"resource": OPAQUE_RESOURCE, "format": "opaque"},
            OTHER_RESOURCE,
        ],
        clients=[
            confidential_client(SVC, SVC_SECRET, groups=["ops"], scope="mcp"),
            confidential_client(RS, RS_SECRET, grant_types=["client_credentials", TOKEN_EXCHANGE], scope="mcp"),
            public_client(APP),
        ],
        accounts=ACCOUNTS,
    ) as provider:
        yield provider


def error_of(resp: httpx.Response) -> str:
    try:
        return resp.json().get("error", "")
    except ValueError:
        return ""


# === discovery ===


def test_discovery_documents_and_jwks(idp: OAuthProvider) -> None:
    with idp.http() as http:
        oidc = http.get(f"{idp.issuer}/.well-known/openid-configuration")
        oauth = http.get(f"{idp.issuer}/.well-known/oauth-authorization-server")
    assert oidc.status_code == 200, oidc.text
    assert oauth.status_code == 200, f"RFC 8414 metadata not served: {oauth.status_code} {oauth.text[:500]}"
    meta = oidc.json()
    assert oauth.json() == meta, "the two discovery documents differ"
    assert meta["issuer"] == idp.issuer, meta
    for key in ("authorization_endpoint", "token_endpoint", "registration_endpoint", "jwks_uri"):
        assert meta.get(key, "").startswith(idp.issuer + "/"), f"{key}: {meta.get(key)!r}"
    assert meta["code_challenge_methods_supported"] == ["S256"], meta
    assert meta["authorization_response_iss_parameter_supported"] is True, meta
    grants = set(meta["grant_types_supported"])
    assert {"authorization_code", "refresh_token", "client_credentials", TOKEN_EXCHANGE} <= grants, grants
    assert MCP_SCOPE in meta["scopes_supported"], meta["scopes_supported"]
    assert meta["response_types_supported"] == ["code"], meta["response_types_supported"]

    jwks = idp.jwks()
    kids = {k["kid"]: k for k in jwks["keys"]}
    assert set(kids) == {k.kid for k in idp.keys}, f"JWKS kids {sorted(kids)} vs configured {[k.kid for k in idp.keys]}"
    assert {k["alg"] for k in jwks["keys"]} == {"RS256", "ES256"}, jwks
    for key in jwks["keys"]:
        private = {"d", "p", "q", "dp", "dq", "qi"} & set(key)
        assert not private, f"the JWKS publishes private parts {private} of {key['kid']}"


def test_oauth_metadata_route_can_be_turned_off(procs: Procs, tmp_path: Path) -> None:
    with OAuthProvider(tmp_path / "oidc-only", procs=procs, serve_oauth_metadata=False) as idp, idp.http() as http:
        assert http.get(f"{idp.issuer}/.well-known/openid-configuration").status_code == 200
        resp = http.get(f"{idp.issuer}/.well-known/oauth-authorization-server")
    assert resp.status_code == 404, f"expected 404 for RFC 8414 metadata when turned off, got {resp.status_code}"


# === client credentials ===


def test_client_credentials_token_is_a_jwt_for_the_resource(idp: OAuthProvider) -> None:
    token = idp.client_credentials_token(SVC, SVC_SECRET, resource=RESOURCE, scope="mcp")
    header = jwt.get_unverified_header(token)
    assert header["alg"] == "RS256" and header["typ"] == "at+jwt", header
    assert header["kid"] == idp.signing_key("RS256").kid, header
    claims = idp.decode(token, audience=RESOURCE)
    assert claims["iss"] == idp.issuer, claims
    assert claims["aud"] == RESOURCE, claims
    assert claims["scope"] == "mcp", claims
    assert claims["groups"] == ["ops"], claims
    assert claims["sub"] == SVC and claims["client_id"] == SVC, claims
    assert claims["exp"] > claims["iat"], claims

    es = idp.client_credentials_token(SVC, SVC_SECRET, resource=ES_RESOURCE, scope="mcp")
    assert jwt.get_unverified_header(es)["alg"] == "ES256"
    assert idp.decode(es, audience=ES_RESOURCE)["aud"] == ES_RESOURCE


def test_client_credentials_refusals(idp: OAuthProvider) -> None:
    ok = idp.token_request(
        {"grant_type": "client_credentials", "resource": RESOURCE, "scope": "mcp"}, auth=(SVC, SVC_SECRET)
    )
    assert ok.status_code == 200, ok.text  # the control: the same request without a defect
    cases = {
        "wrong secret": ({"resource": RESOURCE, "scope": "mcp"}, (SVC, "not-the-secret"), 401, "invalid_client"),
        "unknown client": ({"resource": RESOURCE, "scope": "mcp"}, ("nobody", SVC_SECRET), 401, "invalid_client"),
        "scope not allowed": ({"resource": RESOURCE, "scope": "mcp:admin"}, (SVC, SVC_SECRET), 400, "invalid_scope"),
        "unknown resource": ({"resource": UNKNOWN, "scope": "mcp"}, (SVC, SVC_SECRET), 400, "invalid_target"),
    }
    for name, (data, auth, status, error) in cases.items():
        resp = idp.token_request({"grant_type": "client_credentials", **data}, auth=auth)
        assert (resp.status_code, error_of(resp)) == (status, error), f"{name}: {resp.status_code} {resp.text}"

    # No scope asked: a real token for the resource that carries no scope at all.
    bare = idp.client_credentials_token(SVC, SVC_SECRET, resource=RESOURCE, scope=None)
    assert "scope" not in idp.decode(bare, audience=RESOURCE)


# === authorization code + PKCE ===


def test_authorization_code_with_pkce_and_refresh(idp: OAuthProvider) -> None:
    tokens = idp.authorization_code_token(APP, resource=RESOURCE, scope="mcp offline_access", account="alice")
    assert tokens["token_type"] == "Bearer", tokens
    claims = idp.decode(tokens["access_token"], audience=RESOURCE)
    assert claims["sub"] == "alice" and claims["client_id"] == APP, claims
    assert claims["groups"] == ["admins", "staff"], claims
    assert "mcp" in claims["scope"].split(), claims
    assert tokens.get("refresh_token"), f"no refresh token: {tokens}"

    again = idp.refresh(APP, tokens["refresh_token"], resource=RESOURCE)
    renewed = idp.decode(again["access_token"], audience=RESOURCE)
    assert renewed["sub"] == "alice" and renewed["groups"] == ["admins", "staff"], renewed
    assert renewed["jti"] != claims["jti"]
    assert again["refresh_token"] != tokens["refresh_token"], "a public client's refresh token is rotated"
    # Without `resource`, the refresh yields a token for the one granted.
    bare = idp.refresh(APP, again["refresh_token"])
    assert idp.decode(bare["access_token"], audience=RESOURCE)["aud"] == RESOURCE
    # A rotated-out refresh token is spent, and presenting it again revokes the whole grant
    # (reuse detection): the newest refresh token is refused too.
    for spent in (tokens["refresh_token"], bare["refresh_token"]):
        reuse = idp.token_request({"grant_type": "refresh_token", "refresh_token": spent, "client_id": APP})
        assert (reuse.status_code, error_of(reuse)) == (400, "invalid_grant"), reuse.text

    bob = idp.authorization_code_token(APP, resource=RESOURCE, account="bob")
    assert idp.decode(bob["access_token"], audience=RESOURCE)["groups"] == ["staff"]


def test_pkce_is_required_and_checked(idp: OAuthProvider) -> None:
    # No code_challenge: refused at the authorization endpoint (redirected with an error).
    url = idp.authorization_url(APP, SDK_REDIRECT_URI, resource=RESOURCE, state="s1")
    got = idp.authorize(url)
    assert got.code is None and got.error == "invalid_request", got
    assert "PKCE" in (got.error_description or ""), got

    # A wrong code_verifier: the code is refused at the token endpoint.
    pkce = Pkce.generate()
    url = idp.authorization_url(APP, SDK_REDIRECT_URI, resource=RESOURCE, pkce=pkce, state="s2")
    got = idp.authorize(url)
    assert got.code, got
    base = {"grant_type": "authorization_code", "code": got.code, "redirect_uri": SDK_REDIRECT_URI, "client_id": APP}
    wrong = idp.token_request({**base, "code_verifier": Pkce.generate().verifier, "resource": RESOURCE})
    assert (wrong.status_code, error_of(wrong)) == (400, "invalid_grant"), wrong.text

    # The control: the right verifier, on a fresh code (a code is spent by any attempt).
    got = idp.authorize(idp.authorization_url(APP, SDK_REDIRECT_URI, resource=RESOURCE, pkce=pkce, state="s3"))
    right = idp.token_request({**base, "code": got.code, "code_verifier": pkce.verifier, "resource": RESOURCE})
    assert right.status_code == 200, right.text


def test_consent_declined_is_access_denied(idp: OAuthProvider) -> None:
    url = idp.authorization_url(APP, SDK_REDIRECT_URI, resource=RESOURCE, pkce=Pkce.generate(), state="st")
    got = idp.authorize(url, consent=False)
    assert got.code is None and got.error == "access_denied", got
    assert got.state == "st" and got.iss == idp.issuer, got


def test_dynamic_registration_then_code_flow(idp: OAuthProvider) -> None:
    # What the SDK's client sends (OAuthClientMetadata's defaults), with a secret.
    client = idp.register_client(
        {
            "redirect_uris": [SDK_REDIRECT_URI],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "application_type": "native",
            "token_endpoint_auth_method": "client_secret_post",
            "client_name": "harness-dcr",
            "scope": "mcp offline_access",
        }
    )
    assert client["client_id"] and client["client_secret"], client
    assert client["token_endpoint_auth_method"] == "client_secret_post", client
    tokens = idp.authorization_code_token(
        client["client_id"], resource=RESOURCE, account="bob", secret=client["client_secret"]
    )
    claims = idp.decode(tokens["access_token"], audience=RESOURCE)
    assert claims["client_id"] == client["client_id"] and claims["sub"] == "bob", claims
    assert claims["groups"] == ["staff"], claims

    public = idp.register_client(
        {"redirect_uris": [SDK_REDIRECT_URI], "application_type": "native", "token_endpoint_auth_method": "none"}
    )
    assert "client_secret" not in public, public
    tokens = idp.authorization_code_token(public["client_id"], resource=RESOURCE, scope="mcp")
    assert idp.decode(tokens["access_token"], audience=RESOURCE)["client_id"] == public["client_id"]


# === key rotation, resources at run time ===


def test_key_rotation_without_restart(idp: OAuthProvider) -> None:
    pid = idp.proc.pid if idp.proc else None
    old_key = idp.signing_key("RS256")
    before = idp.client_credentials_token(SVC, SVC_SECRET, resource=RESOURCE)
    held = idp.authorization_code_token(APP, resource=RESOURCE)
    assert jwt.get_unverified_header(before)["kid"] == old_key.kid

    new_key = idp.rotate_keys("RS256")
    assert new_key.kid != old_key.kid
    assert idp.state()["kids"][0] == new_key.kid
    kids = [k["kid"] for k in idp.jwks()["keys"]]
    assert new_key.kid in kids and old_key.kid in kids, f"JWKS after rotation: {kids}"
    after = idp.client_credentials_token(SVC, SVC_SECRET, resource=RESOURCE)
    assert jwt.get_unverified_header(after)["kid"] == new_key.kid, "the new key does not sign"
    assert idp.decode(before, audience=RESOURCE)["sub"] == SVC, "a token of the old key no longer verifies"
    # State made before the rotation survives it: the refresh token still works.
    renewed = idp.refresh(APP, held["refresh_token"], resource=RESOURCE)
    assert jwt.get_unverified_header(renewed["access_token"])["kid"] == new_key.kid

    # Retiring the old key: it leaves the JWKS.
    idp.rotate_keys("RS256", keep_old=False)
    kids = [k["kid"] for k in idp.jwks()["keys"]]
    assert old_key.kid not in kids and new_key.kid not in kids, kids
    assert len([k for k in idp.jwks()["keys"] if k["alg"] == "RS256"]) == 1, kids
    assert idp.proc is not None and idp.proc.pid == pid and idp.proc.alive(), "the provider was restarted"


def test_resource_added_at_run_time(idp: OAuthProvider) -> None:
    late = f"http://127.0.0.1:{free_port()}/mcp"
    refused = idp.token_request(
        {"grant_type": "client_credentials", "resource": late, "scope": "mcp"}, auth=(SVC, SVC_SECRET)
    )
    assert (refused.status_code, error_of(refused)) == (400, "invalid_target"), refused.text
    idp.add_resource(late)
    token = idp.client_credentials_token(SVC, SVC_SECRET, resource=late)
    assert idp.decode(token, audience=late)["aud"] == late
    assert late in idp.state()["resources"]


# === introspection, token exchange ===


def test_introspection(idp: OAuthProvider) -> None:
    opaque = idp.client_credentials_token(SVC, SVC_SECRET, resource=OPAQUE_RESOURCE)
    assert opaque.count(".") == 0, "an opaque token was asked for"
    info = idp.introspect(opaque, RS, RS_SECRET)
    assert info["active"] is True, info
    assert info["aud"] == OPAQUE_RESOURCE and info["client_id"] == SVC and info["scope"] == "mcp", info
    assert info["groups"] == ["ops"], info
    # JWT access tokens are not kept by the provider: it refuses to introspect them.
    as_jwt = idp.client_credentials_token(SVC, SVC_SECRET, resource=RESOURCE)
    with idp.http() as http:
        resp = http.post(idp.metadata()["introspection_endpoint"], data={"token": as_jwt}, auth=(RS, RS_SECRET))
    assert (resp.status_code, error_of(resp)) == (400, "unsupported_token_type"), resp.text
    refresh = idp.authorization_code_token(APP, resource=RESOURCE)["refresh_token"]
    assert idp.introspect(refresh, RS, RS_SECRET)["active"] is True


def test_token_exchange(idp: OAuthProvider) -> None:
    user = idp.authorization_code_token(APP, resource=RESOURCE, account="alice")["access_token"]
    resp = idp.token_exchange(RS, RS_SECRET, user, OTHER_RESOURCE, scope="mcp")
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["issued_token_type"] == "urn:ietf:params:oauth:token-type:access_token", body
    claims = idp.decode(body["access_token"], audience=OTHER_RESOURCE)
    assert claims["aud"] == OTHER_RESOURCE and claims["scope"] == "mcp", claims
    assert claims["groups"] == ["admins", "staff"] and claims["subject"] == "alice", claims
    assert claims["act"] == {"sub": RS} and claims["client_id"] == RS, claims

    forged = idp.bad_tokens(RESOURCE)["unknown_key"]
    refused = idp.token_exchange(RS, RS_SECRET, forged, OTHER_RESOURCE)
    assert (refused.status_code, error_of(refused)) == (400, "invalid_grant"), refused.text
    not_allowed = idp.token_exchange(SVC, SVC_SECRET, user, OTHER_RESOURCE)
    # oidc-provider says invalid_request ("requested grant type is not allowed for this client").
    assert (not_allowed.status_code, error_of(not_allowed)) == (400, "invalid_request"), not_allowed.text


# === forged tokens ===


def test_forged_tokens_are_what_they_say(idp: OAuthProvider) -> None:
    claims = idp.decode(idp.forge(RESOURCE, groups=["admins"]), audience=RESOURCE)
    assert claims["groups"] == ["admins"] and claims["scope"] == "mcp", claims  # the control: valid
    bad = idp.bad_tokens(RESOURCE)
    expected = {
        "expired": jwt.ExpiredSignatureError,
        "not_yet_valid": jwt.ImmatureSignatureError,
        "wrong_audience": jwt.InvalidAudienceError,
        "wrong_issuer": jwt.InvalidIssuerError,
        "no_audience": jwt.MissingRequiredClaimError,
        "bad_signature": jwt.InvalidSignatureError,
        "spoofed_kid": jwt.InvalidSignatureError,
    }
    for name, error in expected.items():
        with pytest.raises(error):
            idp.decode(bad[name], audience=RESOURCE)
    for name in ("no_scope", "other_scope"):
        scope = idp.decode(bad[name], audience=RESOURCE).get("scope", "")
        assert "mcp" not in scope.split(), f"{name}: {scope!r}"
    published = {k["kid"] for k in idp.jwks()["keys"]}
    for name in ("foreign_issuer", "unknown_key"):
        assert jwt.get_unverified_header(bad[name])["kid"] not in published, name
    assert jwt.decode(bad["foreign_issuer"], options={"verify_signature": False})["iss"] != idp.issuer
    assert jwt.get_unverified_header(bad["alg_none"])["alg"] == "none"
    assert jwt.get_unverified_header(bad["alg_hs256"])["alg"] == "HS256"


# === the SDK's OAuth client against a stand-in resource server ===


def start_stand_in(procs: Procs, issuer: str) -> DemoHttp:
    for _attempt in range(3):
        port = free_port()
        proc = procs.start("stand-in-rs", [sys.executable, STAND_IN, str(port), issuer])
        server = DemoHttp("stand-in-rs", port, proc)
        try:
            wait_http(server.url, proc, "the stand-in resource server")
        except pytest.fail.Exception:
            if not proc.alive() and port_taken(proc):
                continue
            raise
        return server
    pytest.fail("no free port for the stand-in resource server", pytrace=False)


async def test_sdk_oauth_client_discovers_registers_and_logs_in(idp: OAuthProvider, procs: Procs) -> None:
    rs = start_stand_in(procs, idp.issuer)
    idp.add_resource(rs.url)

    with idp.http() as http:
        challenge = http.post(rs.url, json={})
        assert challenge.status_code == 401, challenge.text
        www = challenge.headers.get("www-authenticate", "")
        assert www.startswith("Bearer ") and "resource_metadata=" in www, www
        prm = http.get(f"http://127.0.0.1:{rs.port}/.well-known/oauth-protected-resource/mcp").json()
    assert prm["resource"] == rs.url and prm["authorization_servers"] == [idp.issuer], prm

    login = idp.sdk_login("alice")
    storage = MemoryTokenStorage()
    auth = OAuthClientProvider(
        server_url=rs.url,
        client_metadata=OAuthClientMetadata(client_name="vigil-e2e", redirect_uris=[SDK_REDIRECT_URI]),
        storage=storage,
        redirect_handler=login.redirect_handler,
        callback_handler=login.callback_handler,
    )
    for _round in range(2):  # the second session reuses the tokens: no new login
        with unwrapped_failures():
            async with (
                httpx2.AsyncClient(auth=auth, timeout=httpx2.Timeout(DEADLINE, read=SDK_READ_TIMEOUT)) as client,
                streamable_http_client(rs.url, http_client=client) as (read, write),
                ClientSession(read, write, read_timeout_seconds=SDK_READ_TIMEOUT) as session,
            ):
                await session.initialize()
                me = json.loads(text_of(await session.call_tool("whoami", {})))
        assert me["sub"] == "alice" and me["groups"] == ["admins", "staff"], me
        assert "mcp" in me["scopes"], me
    assert len(login.urls) == 1, f"logged in {len(login.urls)} times: {login.urls}"

    query = parse_qs(urlsplit(login.urls[0]).query)
    assert query["resource"] == [rs.url], query
    assert query["code_challenge_method"] == ["S256"], query
    assert "mcp" in query["scope"][0].split(), query
    assert storage.client_info is not None and storage.client_info.client_id == me["client_id"], storage.client_info
    assert storage.tokens is not None and storage.tokens.refresh_token, storage.tokens


async def test_stand_in_refuses_the_bad_tokens(idp: OAuthProvider, procs: Procs) -> None:
    rs = start_stand_in(procs, idp.issuer)
    idp.add_resource(rs.url)
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    headers = {"Accept": "application/json, text/event-stream"}

    async with httpx.AsyncClient(timeout=DEADLINE) as http:

        async def status(token: str) -> int:
            resp = await http.post(rs.url, json=init, headers={**headers, "Authorization": f"Bearer {token}"})
            return resp.status_code

        # Controls: a forged valid token and a real one are accepted.
        assert await status(idp.forge(rs.url)) == 200
        assert await status(idp.client_credentials_token(SVC, SVC_SECRET, resource=rs.url)) == 200
        got = {name: await status(token) for name, token in idp.bad_tokens(rs.url).items()}
    expected = {name: 403 if name in ("no_scope", "other_scope") else 401 for name in got}
    assert got == expected, f"statuses by bad token: {got}"
