//! The `/mcp` side of `[auth]`: credentials on every request.
//!
//! - No `[[auth.keys]]` and no `[auth.oauth]`: every request is
//!   [`Principal::local`].
//! - Otherwise a request needs `Authorization: Bearer <key or token>`.
//!   Without one it is answered 401 with `WWW-Authenticate: Bearer`
//!   naming the protected resource metadata (`resource_metadata`, RFC 9728;
//!   `realm="vigil"` with keys only); with a bad one, the same plus
//!   `error="invalid_token"` (RFC 6750); a token without a required scope
//!   gets 403 `error="insufficient_scope"` with the scopes it needs; a
//!   token whose issuer cannot be reached (and none of its keys are known)
//!   gets 503 with `Retry-After`.
//! - The credentials are Vigil's: the header is removed before the request
//!   goes on, so no backend ever sees it (passing it on would be the token
//!   passthrough the MCP spec forbids).
//! - Keys are tried first (a constant-time comparison), then tokens.
//! - An address that sends 10 unknown keys or bad tokens within a minute gets 429 for a
//!   minute, the right key's requests too (the control API's default
//!   cool-down, [`super::throttle`]).
//! - Who may use a session is the front's to check: the principal that
//!   opened it is sealed in its id (`gateway::session_ids`), which this
//!   layer's [`Principal`] is compared with.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::time::Instant;

use super::oauth::{OAuth, Refusal};
use super::throttle::{Client, Throttle};
use super::{Keys, Principal};
use crate::config::FailedTokens;

/// What [`authenticate`] needs.
pub struct McpAuth {
    keys: Arc<Keys>,
    oauth: Option<Arc<OAuth>>,
    /// The `WWW-Authenticate` parameters, built once.
    challenge: Challenge,
    /// Cool-downs for addresses that keep sending unknown keys.
    throttle: Throttle,
}

impl McpAuth {
    pub fn new(keys: Arc<Keys>, oauth: Option<Arc<OAuth>>) -> Self {
        McpAuth {
            keys,
            challenge: Challenge::of(oauth.as_deref()),
            oauth,
            throttle: Throttle::new(FailedTokens::default(), "/mcp"),
        }
    }
}

/// The `/mcp` middleware: see the module docs.
pub async fn authenticate(State(auth): State<Arc<McpAuth>>, req: Request, next: Next) -> Response {
    if auth.oauth.is_none() && !auth.keys.required() {
        let mut req = req;
        req.extensions_mut().insert(Principal::local());
        return next.run(req).await;
    }
    let (mut parts, body) = req.into_parts();
    let principal = match auth.admit(&mut parts).await {
        Ok(p) => p,
        Err(refusal) => return refusal,
    };
    parts.extensions.insert(principal);
    next.run(Request::from_parts(parts, body)).await
}

impl McpAuth {
    /// Who sent the request, or the answer that refuses it. Takes the
    /// `Authorization` header off the request (an OAuth token is kept as
    /// [`super::InboundToken`] for `forward_auth`).
    async fn admit(&self, parts: &mut axum::http::request::Parts) -> Result<Principal, Response> {
        let client = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(Client::Unknown, |ConnectInfo(peer)| Client::of(peer.ip()));
        if let Err(left) = self.throttle.check(client, Instant::now()) {
            return Err(throttled(client, left));
        }
        let challenge = &self.challenge;
        let Some(secret) = bearer(&parts.headers) else {
            return Err(challenge.unauthorized(None));
        };
        let principal = match self.keys.find(secret) {
            Some(p) => p,
            None => match &self.oauth {
                None => {
                    self.throttle.failed(client, Instant::now());
                    return Err(challenge.unauthorized(Some("the key is not one of [[auth.keys]]")));
                }
                Some(oauth) => match oauth.validate(secret).await {
                    Ok(p) => {
                        let header = super::InboundToken(format!("Bearer {secret}").into());
                        parts.extensions.insert(header);
                        p
                    }
                    Err(Refusal::Invalid { why, counts }) => {
                        if counts {
                            self.throttle.failed(client, Instant::now());
                        }
                        return Err(challenge.unauthorized(Some(&why)));
                    }
                    Err(Refusal::Scope(missing)) => return Err(challenge.forbidden(&missing)),
                    Err(Refusal::Unavailable(why)) => return Err(unavailable(&why)),
                },
            },
        };
        parts.headers.remove(header::AUTHORIZATION);
        Ok(principal)
    }
}

/// The secret of an `Authorization: Bearer` header (scheme matched without
/// regard to case, RFC 7235).
fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, secret) = value.split_once(' ')?;
    let secret = secret.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !secret.is_empty()).then_some(secret)
}

/// 429 while `client` is in its cool-down, with `Retry-After`.
fn throttled(client: Client, left: std::time::Duration) -> Response {
    let secs = left.as_secs() + u64::from(left.subsec_nanos() > 0);
    let mut response = refusal(
        StatusCode::TOO_MANY_REQUESTS,
        format!(
            "Too Many Requests: too many unknown keys or bad tokens from {client}; retry in {secs} s with valid credentials"
        ),
    );
    if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, v);
    }
    response
}

/// The `WWW-Authenticate` challenge of `/mcp`: with `[auth.oauth]` it
/// names the protected resource metadata (RFC 9728 §5.1), where clients
/// learn which authorization server to ask; with keys only, a realm.
struct Challenge {
    /// `resource_metadata="…"` or `realm="vigil"`.
    base: String,
    /// `, scope="…"`: the scopes to ask for, when some are required.
    scope: String,
    how: &'static str,
}

impl Challenge {
    fn of(oauth: Option<&OAuth>) -> Self {
        match oauth {
            Some(o) => {
                let scopes = &o.config().required_scopes;
                Challenge {
                    base: format!(r#"resource_metadata="{}""#, o.config().metadata_url()),
                    scope: if scopes.is_empty() {
                        String::new()
                    } else {
                        format!(r#", scope="{}""#, scopes.join(" "))
                    },
                    how: "an access token from one of the authorization servers its protected resource metadata names (or a key of [[auth.keys]])",
                }
            }
            None => Challenge {
                base: r#"realm="vigil""#.to_owned(),
                scope: String::new(),
                how: "a key of [[auth.keys]]",
            },
        }
    }

    /// 401; `invalid` says why the credentials given were refused (none
    /// given: no error code).
    fn unauthorized(&self, invalid: Option<&str>) -> Response {
        let (challenge, text) = match invalid {
            None => (
                format!("Bearer {}{}", self.base, self.scope),
                format!(
                    "Unauthorized: this endpoint needs credentials: send `Authorization: Bearer <token>` with {}",
                    self.how
                ),
            ),
            Some(why) => (
                format!(
                    r#"Bearer {}{}, error="invalid_token", error_description="{}""#,
                    self.base,
                    self.scope,
                    quotable(why)
                ),
                format!("Unauthorized: invalid credentials: {why}"),
            ),
        };
        with_challenge(StatusCode::UNAUTHORIZED, &challenge, text)
    }

    /// 403: a valid token without every required scope (RFC 6750 §3.1).
    fn forbidden(&self, missing: &[String]) -> Response {
        let scopes = missing.join(" ");
        let challenge = format!(
            r#"Bearer {}, error="insufficient_scope", scope="{scopes}", error_description="the token lacks the scope {scopes}""#,
            self.base
        );
        with_challenge(
            StatusCode::FORBIDDEN,
            &challenge,
            format!("Forbidden: the token lacks the scope {scopes}: request a token with it"),
        )
    }
}

/// `text` without what cannot stand in a quoted header parameter.
fn quotable(text: &str) -> String {
    text.chars()
        .filter(|c| *c != '"' && *c != '\\' && (' '..='~').contains(c))
        .collect()
}

fn with_challenge(status: StatusCode, challenge: &str, text: String) -> Response {
    let mut response = refusal(status, text);
    if let Ok(v) = HeaderValue::from_str(challenge) {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    response
}

/// A refusal of [`authenticate`]. The listener reads the body it leaves
/// unread (`listener::body`), so the client's connection stays usable for
/// its retry with other credentials.
fn refusal(status: StatusCode, text: String) -> Response {
    (status, text).into_response()
}

/// 503 while a token cannot be checked (its issuer is unreachable).
fn unavailable(why: &str) -> Response {
    let mut response = refusal(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("Service Unavailable: {why}"),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_takes_the_scheme_in_any_case_and_nothing_else() {
        let mut h = axum::http::HeaderMap::new();
        assert_eq!(bearer(&h), None);
        for (value, want) in [
            ("Bearer abc", Some("abc")),
            ("bearer  abc ", Some("abc")),
            ("BEARER abc", Some("abc")),
            ("Basic abc", None),
            ("Bearer", None),
            ("Bearer ", None),
        ] {
            h.insert(header::AUTHORIZATION, HeaderValue::from_static(value));
            assert_eq!(bearer(&h), want, "{value:?}");
        }
    }
}
