"""A stand-in for Vigil's MCP endpoint as an OAuth resource server, written with the Python SDK.

`python resource_server.py PORT ISSUER` serves `/mcp` on 127.0.0.1:PORT the
way the MCP authorization spec asks (and Vigil will): a request without a
valid token gets 401 with `WWW-Authenticate: Bearer ...
resource_metadata="http://127.0.0.1:PORT/.well-known/oauth-protected-resource/mcp"`,
that document (RFC 9728) names ISSUER as the authorization server, and a JWT
access token is accepted when its signature checks against ISSUER's JWKS
(fetched again for a kid it does not know), its `iss` is ISSUER, its `aud` is
`http://127.0.0.1:PORT/mcp` and its scope holds `mcp`. One tool, `whoami`,
answers with the token's `sub`, `client_id`, scopes, `groups`, `aud`, `subject`
(the user of an exchanged token) and the SHA-256 of the token itself as JSON.

It lets `test_provider_harness.py` run the SDK's OAuth client against the
provider end to end before Vigil itself is a resource server.
"""

from __future__ import annotations

import hashlib
import json
import sys

import jwt
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer


class JwtVerifier:
    """The SDK's `TokenVerifier` for the provider's RFC 9068 JWT access tokens."""

    def __init__(self, issuer: str, audience: str) -> None:
        self.issuer, self.audience = issuer, audience
        self.jwks = jwt.PyJWKClient(f"{issuer}/jwks", cache_keys=False, lifespan=1, timeout=10)

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            key = self.jwks.get_signing_key_from_jwt(token)
            claims = jwt.decode(
                token,
                key.key,
                algorithms=["RS256", "ES256"],
                audience=self.audience,
                issuer=self.issuer,
                options={"require": ["exp", "iat", "sub"]},
            )
        except jwt.PyJWTError as exc:
            print(f"token refused: {exc}", file=sys.stderr, flush=True)
            return None
        return AccessToken(
            token=token,
            client_id=claims.get("client_id", ""),
            scopes=str(claims.get("scope", "")).split(),
            expires_at=claims["exp"],
            resource=self.audience,
            subject=claims["sub"],
            claims=claims,
        )


def main() -> None:
    port, issuer = int(sys.argv[1]), sys.argv[2]
    resource = f"http://127.0.0.1:{port}/mcp"
    server = MCPServer(
        "oauth-stand-in",
        token_verifier=JwtVerifier(issuer, resource),
        auth=AuthSettings(
            issuer_url=issuer,
            resource_server_url=resource,
            required_scopes=["mcp"],
            validate_token_resource=True,
        ),
    )

    @server.tool()
    def whoami() -> str:
        """The caller, as its access token says."""
        token = get_access_token()
        assert token is not None
        claims = token.claims or {}
        return json.dumps(
            {
                "sub": token.subject,
                "client_id": token.client_id,
                "scopes": token.scopes,
                "groups": claims.get("groups"),
                "aud": claims.get("aud"),
                # A token minted by token exchange names its user here (`sub` is the client that asked).
                "subject": claims.get("subject"),
                "token_sha256": hashlib.sha256(token.token.encode()).hexdigest(),
            }
        )

    server.run("streamable-http", host="127.0.0.1", port=port)


if __name__ == "__main__":
    main()
