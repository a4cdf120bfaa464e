//! The streamable HTTP endpoint (`/mcp`), built on rmcp's
//! `StreamableHttpService` and mounted in axum.
//!
//! rmcp enforces the transport rules: the body size limit (413), unknown or
//! deleted session ids (404), malformed JSON (400). Vigil configures them.
//! `Host` and `Origin` validation (DNS rebinding protection) is
//! [`crate::origin`]'s, the rule the control API uses too, applied here in
//! front of rmcp with rmcp's own answers (its check is turned off, so there
//! is one rule, not two).

use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::Gateway;
use super::streams::StreamSessions;
use crate::origin::{HostRule, OriginRule};

/// The axum router serving MCP at `/mcp`.
pub fn router(gw: Arc<Gateway>, shutdown: CancellationToken) -> Router {
    let c = &gw.config;
    let http = StreamableHttpServerConfig::default()
        .with_cancellation_token(shutdown)
        .with_max_request_body_bytes(c.max_body_bytes)
        .disable_allowed_hosts()
        .disable_allowed_origins();
    let guard = Arc::new(Guard {
        hosts: HostRule::new(&c.allowed_hosts),
        origins: OriginRule::new(&c.allowed_origins, false),
    });
    let streams = Arc::new(StreamSessions::new(http.sse_retry));
    let _ = gw.streams.set(streams.clone());
    let factory_gw = gw.clone();
    let service = StreamableHttpService::new(move || Ok(factory_gw.new_session()), streams, http);
    Router::new()
        .nest_service("/mcp", service)
        .route_layer(axum::middleware::from_fn_with_state(guard, guard_request))
        .layer(axum::middleware::from_fn(
            super::http_errors::jsonrpc_errors,
        ))
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

/// Serves until `shutdown`.
pub async fn serve(gw: Arc<Gateway>, shutdown: CancellationToken) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    let listener = tokio::net::TcpListener::bind(gw.config.listen).await?;
    tracing::info!(address = %listener.local_addr()?, "serving MCP over streamable HTTP at /mcp");
    // Small SSE writes must not wait for the client's delayed ACK (Nagle).
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let app = router(gw, shutdown.clone());
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}
