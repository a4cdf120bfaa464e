//! The streamable HTTP endpoint (`/mcp`), built on rmcp's
//! `StreamableHttpService` and mounted in axum.
//!
//! rmcp enforces the transport rules: the body size limit (413), unknown or
//! deleted session ids (404), malformed JSON (400). Vigil configures them.
//! `Host` and `Origin` validation (DNS rebinding protection) is
//! [`crate::origin`]'s, the rule the control API uses too, applied here in
//! front of rmcp with rmcp's own answers (its check is turned off, so there
//! is one rule, not two).

use std::convert::Infallible;
use std::sync::Arc;
use std::task::Poll;

use axum::Router;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::Gateway;
use super::streams::StreamSessions;
use crate::log_limit::SharedLogLimit;
use crate::origin::{HostRule, OriginRule};

/// The axum router serving MCP at `/mcp`.
pub fn router(gw: Arc<Gateway>, shutdown: CancellationToken) -> Router {
    let c = &gw.config;
    // Sessions this replica does not have are adopted (`super::adopt`).
    let adoptions = Arc::new(super::adopt::Adoptions::default());
    let mut http = StreamableHttpServerConfig::default()
        .with_cancellation_token(shutdown.clone())
        .with_max_request_body_bytes(c.max_body_bytes)
        .disable_allowed_hosts()
        .disable_allowed_origins();
    http.session_store = Some(adoptions.clone());
    let guard = Arc::new(Guard {
        hosts: HostRule::new(&c.allowed_hosts),
        origins: OriginRule::new(&c.allowed_origins, false),
    });
    let streams = Arc::new(StreamSessions::new(http.sse_retry, c.limits.max_sessions));
    let _ = gw.streams.set(streams.clone());
    crate::background::spawn(streams.clone().expire_idle(shutdown.clone()));
    let cap = Arc::new(SessionCap {
        streams: streams.clone(),
        max_body_bytes: c.max_body_bytes,
        log: SharedLogLimit::new(std::time::Duration::from_secs(10)),
    });
    let auth = Arc::new(crate::auth::mcp::McpAuth::new(gw.mcp_keys(), gw.oauth()));
    let ids = super::session_ids::SessionIds::new(
        gw.session_book.clone(),
        c.max_body_bytes,
        Some(super::session_ids::Adopt {
            streams: streams.clone(),
            adoptions,
        }),
    );
    let metadata = c
        .auth
        .oauth
        .as_ref()
        .map(crate::auth::metadata::routes)
        .unwrap_or_default();
    let factory_gw = gw.clone();
    let service = Rmcp(Arc::new(StreamableHttpService::new(
        move || Ok(factory_gw.new_session()),
        streams,
        http,
    )));
    // The middlewares, the outermost first, in one `route_layer`. Each
    // clones the stack below it per request; composed, that stack is their
    // states (`Arc`s) and one boxed `Route`, where a `route_layer` per
    // middleware boxed each one apart, a box cloned with all those below.
    let layers = tower::ServiceBuilder::new()
        .layer(axum::middleware::from_fn_with_state(guard, guard_request))
        .layer(axum::middleware::from_fn_with_state(
            auth,
            crate::auth::mcp::authenticate,
        ))
        .layer(axum::middleware::from_fn_with_state(
            ids,
            super::session_ids::seal,
        ))
        .layer(axum::middleware::from_fn_with_state(cap, session_cap))
        .layer(axum::middleware::from_fn_with_state(
            super::raw::RawPath::new(gw.clone()),
            super::raw::forward,
        ))
        .layer(axum::middleware::from_fn_with_state(
            gw.clone(),
            super::answers::layer,
        ));
    let mcp = Router::new()
        .nest_service("/mcp", service)
        .route_layer(layers)
        .layer(axum::middleware::from_fn(
            super::http_errors::jsonrpc_errors,
        ));
    mcp.merge(metadata).merge(probes(shutdown))
}

/// `GET /healthz` (alive: the listener answers) and `GET /readyz` (ready:
/// the catalog settled — this listener opens only once it did — and not
/// shutting down), for a load balancer's or Kubernetes' probes. Outside
/// the `/mcp` layers: no token, no `Host` or `Origin` check (a probe
/// comes to the pod's address). Readiness never asks the store: an outage
/// of it must not take every replica out of the balancer, since they
/// serve without it.
fn probes(shutdown: CancellationToken) -> Router {
    use axum::routing::get;
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(move || {
                let draining = shutdown.is_cancelled();
                async move {
                    if draining {
                        (http::StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
                    } else {
                        (http::StatusCode::OK, "ready\n")
                    }
                }
            }),
        )
}

/// rmcp's service behind one `Arc`. Each middleware clones the service
/// below it per request, down to this one, whose own clone (its config
/// holds a cancellation token, whose clone and drop take a lock) is
/// needed only by a request that reaches it: a call the raw path answers
/// never does.
#[derive(Clone)]
struct Rmcp(Arc<StreamableHttpService<super::session::FrontSession, StreamSessions>>);

impl tower::Service<Request> for Rmcp {
    type Response = http::Response<http_body_util::combinators::BoxBody<bytes::Bytes, Infallible>>;
    type Error = Infallible;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    /// What rmcp's own `call` does, with the `Arc` cloned instead.
    fn call(&mut self, req: Request) -> Self::Future {
        let service = self.0.clone();
        Box::pin(async move { Ok(service.handle(req).await) })
    }
}

/// What [`session_cap`] needs.
struct SessionCap {
    streams: Arc<StreamSessions>,
    max_body_bytes: usize,
    log: SharedLogLimit,
}

/// Refuses a new session (an `initialize` without `Mcp-Session-Id`) while
/// `[limits] max_sessions` are open: HTTP 503 and a JSON-RPC error that
/// names the limit. Costs nothing below the limit; at it, a request
/// without a session id is read here to tell an `initialize` from a
/// stateless (2026-07-28) request, which is served as usual.
async fn session_cap(
    axum::extract::State(cap): axum::extract::State<Arc<SessionCap>>,
    req: Request,
    next: Next,
) -> Response {
    if req.method() != http::Method::POST
        || req.headers().contains_key("mcp-session-id")
        || !cap.streams.is_full().await
    {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, cap.max_body_bytes).await {
        Ok(b) => b,
        Err(e) => return unreadable_body(e),
    };
    let Some(id) = initialize_id(&bytes) else {
        return next
            .run(Request::from_parts(parts, axum::body::Body::from(bytes)))
            .await;
    };
    crate::metrics::get().sessions_refused.inc();
    let max = cap.streams.max_sessions();
    if let Some(more) = cap.log.admit() {
        tracing::warn!(
            max_sessions = max,
            more,
            "refusing new MCP sessions: limits.max_sessions are open"
        );
    }
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": -32000,
            "message": format!(
                "{} (limits.max_sessions = {max}): close sessions you no longer use (HTTP DELETE), retry later, or raise the limit",
                super::streams::SESSIONS_FULL
            ),
        }
    });
    (
        http::StatusCode::SERVICE_UNAVAILABLE,
        [
            (http::header::CONTENT_TYPE, "application/json"),
            (http::header::RETRY_AFTER, "1"),
        ],
        body.to_string(),
    )
        .into_response()
}

/// The answer to a request body that could not be read whole, for the
/// layers that read it before rmcp does: 413 when it is larger than
/// `max_body_bytes`, 408 when it did not arrive within the listener's
/// `read_timeout` (the client's doing), 400 otherwise. Told by the error's
/// type, never its text.
pub(super) fn unreadable_body(e: axum::Error) -> Response {
    (
        body_status(&e),
        format!("could not read the request body: {e}"),
    )
        .into_response()
}

fn body_status(e: &(dyn std::error::Error + 'static)) -> http::StatusCode {
    let mut cause = Some(e);
    while let Some(err) = cause {
        if err.is::<http_body_util::LengthLimitError>() {
            return http::StatusCode::PAYLOAD_TOO_LARGE;
        }
        if err
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return http::StatusCode::REQUEST_TIMEOUT;
        }
        cause = err.source();
    }
    http::StatusCode::BAD_REQUEST
}

/// The id of a JSON-RPC `initialize` request, if `body` is one.
fn initialize_id(body: &[u8]) -> Option<serde_json::Value> {
    #[derive(serde::Deserialize)]
    struct Peek {
        method: Option<String>,
        id: Option<serde_json::Value>,
    }
    let peek: Peek = serde_json::from_slice(body).ok()?;
    (peek.method.as_deref() == Some("initialize")).then(|| peek.id.unwrap_or_default())
}

/// `allowed_hosts` and `allowed_origins` of `/mcp`.
struct Guard {
    hosts: HostRule,
    origins: OriginRule,
}

/// Refuses a foreign `Host` or `Origin` with the plain-text answer rmcp
/// gave (which [`super::http_errors`] turns into a JSON-RPC error).
async fn guard_request(
    axum::extract::State(guard): axum::extract::State<Arc<Guard>>,
    req: Request,
    next: Next,
) -> Response {
    let checked = guard
        .hosts
        .check(req.uri(), req.headers())
        .and_then(|host| guard.origins.check(req.headers(), &host));
    match checked {
        Ok(_) => next.run(req).await,
        Err(refusal) => (refusal.status(), refusal.to_string()).into_response(),
    }
}

/// Serves until `shutdown`, within `[limits]` (see [`crate::listener`])
/// and holding at most `cap` connections (`limits.connections` fitted to
/// the open-file limit, see [`crate::limits::ConnectionCaps`]).
pub async fn serve(
    gw: Arc<Gateway>,
    cap: crate::limits::Cap,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let auth = &gw.config.auth;
    if let Some(o) = &auth.oauth {
        tracing::info!(
            resource = %o.resource,
            issuers = ?o.issuers,
            metadata = %o.metadata_url(),
            "/mcp accepts access tokens of [auth.oauth] issuers"
        );
    }
    for b in gw
        .config
        .backends
        .iter()
        .filter(|b| b.passthrough && auth.oauth.is_some())
    {
        tracing::warn!(
            backend = %b.name,
            "forward_auth = \"passthrough\": clients' access tokens for Vigil are sent on to this backend as they came (token passthrough, which the MCP spec forbids); use token_exchange unless the backend is meant to accept Vigil's tokens"
        );
    }
    if !gw.config.listen.ip().is_loopback() && !auth.required() && auth.allow_anonymous {
        tracing::warn!(
            listen = %gw.config.listen,
            "serving /mcp WITHOUT AUTHENTICATION on a non-loopback address ([auth] allow_anonymous = true): anyone who can reach it may list and call every tool; add [[auth.keys]] to require credentials"
        );
    }
    let tcp = tokio::net::TcpListener::bind(gw.config.listen).await?;
    tracing::info!(address = %tcp.local_addr()?, "serving MCP over streamable HTTP at /mcp");
    let limits = crate::config::ListenerLimits {
        connections: cap.connections,
        ..gw.config.limits.mcp
    };
    let refusal = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {
            "code": -32000,
            "message": format!(
                "Vigil is at its connection limit for /mcp ({}): retry in a moment, close connections you do not use, or raise the limit",
                cap.describe("connections")
            ),
        }
    });
    let listener = crate::listener::Listener {
        name: "mcp",
        limits,
        refusal: ("application/json", refusal.to_string()),
    };
    listener
        .serve(tcp, router(gw, shutdown.clone()), shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn status_of(body: axum::body::Body, limit: usize) -> http::StatusCode {
        let e = axum::body::to_bytes(body, limit).await.unwrap_err();
        unreadable_body(e).status()
    }

    #[tokio::test]
    async fn an_unreadable_body_is_answered_by_what_went_wrong() {
        let big = axum::body::Body::from(vec![b'x'; 64]);
        assert_eq!(
            status_of(big, 16).await,
            http::StatusCode::PAYLOAD_TOO_LARGE
        );
        let late = futures::stream::once(async {
            Err::<bytes::Bytes, _>(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "did not arrive within 2s (limits.read_timeout)",
            ))
        });
        let late = axum::body::Body::from_stream(late);
        assert_eq!(
            status_of(late, 1024).await,
            http::StatusCode::REQUEST_TIMEOUT
        );
        let broken = futures::stream::once(async {
            Err::<bytes::Bytes, _>(std::io::Error::other("connection reset"))
        });
        let broken = axum::body::Body::from_stream(broken);
        assert_eq!(status_of(broken, 1024).await, http::StatusCode::BAD_REQUEST);
    }
}
