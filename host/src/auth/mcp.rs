//! The `/mcp` side of `[auth]`: credentials on every request, and sessions
//! bound to the principal that opened them.
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
//! - A session belongs to the principal whose `initialize` opened it. A
//!   request on it with another principal's credentials is answered
//!   exactly as an unknown session is (404), so a session id learnt from
//!   elsewhere is worth nothing, and logged.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use tokio::time::Instant;

use super::oauth::{OAuth, Refusal};
use super::throttle::{Client, Throttle};
use super::{Keys, Principal};
use crate::config::FailedTokens;
use crate::log_limit::LogLimit;
use crate::redact::session_tag;

/// Whether a session still exists (rmcp's session manager knows).
pub type Alive = Box<dyn Fn(&str) -> BoxFuture<'static, bool> + Send + Sync>;

/// What [`authenticate`] needs.
pub struct McpAuth {
    keys: Arc<Keys>,
    oauth: Option<Arc<OAuth>>,
    /// The `WWW-Authenticate` parameters, built once.
    challenge: Challenge,
    /// Cool-downs for addresses that keep sending unknown keys.
    throttle: Throttle,
    owners: Mutex<Owners>,
    alive: Alive,
    /// At most one WARN about a foreign session per 10 s.
    foreign_log: Mutex<LogLimit>,
}

/// Who opened each session. Sessions that expire without a DELETE are
/// forgotten by a sweep once the map doubles past its last size.
struct Owners {
    by_session: HashMap<String, Principal>,
    sweep_at: usize,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl McpAuth {
    /// `alive(id)` says whether rmcp still has session `id`; the first
    /// sweep comes at `max_sessions` entries.
    pub fn new(
        keys: Arc<Keys>,
        oauth: Option<Arc<OAuth>>,
        max_sessions: usize,
        alive: Alive,
    ) -> Self {
        McpAuth {
            keys,
            challenge: Challenge::of(oauth.as_deref()),
            oauth,
            throttle: Throttle::new(FailedTokens::default(), "/mcp"),
            owners: Mutex::new(Owners {
                by_session: HashMap::new(),
                sweep_at: max_sessions.max(16),
            }),
            alive,
            foreign_log: Mutex::new(LogLimit::new(std::time::Duration::from_secs(10))),
        }
    }

    async fn bind(&self, session: &str, principal: Principal) {
        let due = {
            let o = lock(&self.owners);
            (o.by_session.len() >= o.sweep_at)
                .then(|| o.by_session.keys().cloned().collect::<Vec<_>>())
        };
        if let Some(ids) = due {
            let mut dead = Vec::new();
            for id in ids {
                if !(self.alive)(&id).await {
                    dead.push(id);
                }
            }
            let mut o = lock(&self.owners);
            for id in dead {
                o.by_session.remove(&id);
            }
            o.sweep_at = (o.by_session.len() * 2).max(o.sweep_at);
        }
        lock(&self.owners)
            .by_session
            .insert(session.to_owned(), principal);
    }

    fn owned_by(&self, session: &str, principal: &Principal) -> bool {
        lock(&self.owners)
            .by_session
            .get(session)
            .is_some_and(|owner| owner.same_caller(principal))
    }

    fn forget(&self, session: &str) {
        lock(&self.owners).by_session.remove(session);
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
    let session = parts.headers.get("mcp-session-id").cloned();
    let session = session.as_ref().and_then(|v| v.to_str().ok());
    let delete = parts.method == Method::DELETE;
    // Kept only for a request that may open a session (no id yet).
    let opener = session.is_none().then(|| principal.clone());
    parts.extensions.insert(principal);
    let response = next.run(Request::from_parts(parts, body)).await;
    match session {
        None => {
            if let (Some(id), Some(principal)) = (
                response
                    .headers()
                    .get("mcp-session-id")
                    .and_then(|v| v.to_str().ok()),
                opener,
            ) {
                auth.bind(id, principal).await;
            }
        }
        Some(id) if delete && response.status().is_success() => auth.forget(id),
        Some(_) => {}
    }
    response
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
        let session = parts
            .headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok());
        if let Some(id) = session
            && !self.owned_by(id, &principal)
        {
            if let Some(more) = lock(&self.foreign_log).admit(Instant::now()) {
                tracing::warn!(%principal, session = %session_tag(id), more, "a request on a session another principal opened (or none did) was answered as an unknown session");
            }
            // Exactly rmcp's answer for an unknown session, headers included.
            return Err((StatusCode::NOT_FOUND, "Not Found: Session not found").into_response());
        }
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

    #[tokio::test]
    async fn sessions_belong_to_their_opener_and_the_map_forgets_dead_ones() {
        let keys = Arc::new(Keys::new(Vec::new()));
        let alive = Arc::new(Mutex::new(std::collections::HashSet::<String>::new()));
        let seen = alive.clone();
        let auth = McpAuth::new(
            keys,
            None,
            1,
            Box::new(move |id| {
                let up = lock(&seen).contains(id);
                Box::pin(async move { up })
            }),
        );
        let (a, b) = (Principal::key("a"), Principal::key("b"));
        auth.bind("s1", a.clone()).await;
        assert!(auth.owned_by("s1", &a));
        assert!(!auth.owned_by("s1", &b));
        assert!(!auth.owned_by("s2", &a), "an unbound session is nobody's");
        // 16 live sessions fill the map to its sweep size: the next bind
        // drops s1, which rmcp no longer has, and keeps the live ones.
        for i in 0..15 {
            lock(&alive).insert(format!("k{i}"));
            auth.bind(&format!("k{i}"), a.clone()).await;
        }
        auth.bind("s2", b.clone()).await;
        assert!(!auth.owned_by("s1", &a));
        assert!(auth.owned_by("s2", &b) && auth.owned_by("k3", &a));
        auth.forget("s2");
        assert!(!auth.owned_by("s2", &b));
    }
}
