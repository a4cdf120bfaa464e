//! The streamable HTTP endpoint (`/mcp`), built on rmcp's
//! `StreamableHttpService` and mounted in axum.
//!
//! rmcp enforces the transport rules: `Host` and `Origin` validation (DNS
//! rebinding protection), the body size limit (413), unknown or deleted
//! session ids (404), malformed JSON (400). Vigil configures them.

use std::sync::Arc;

use axum::Router;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::Gateway;
use super::streams::StreamSessions;

/// The axum router serving MCP at `/mcp`.
pub fn router(gw: Arc<Gateway>, shutdown: CancellationToken) -> Router {
    let c = &gw.config;
    let mut http = StreamableHttpServerConfig::default()
        .with_cancellation_token(shutdown)
        .with_max_request_body_bytes(c.max_body_bytes);
    http = if c.allowed_hosts.iter().any(|h| h == "*") {
        http.disable_allowed_hosts()
    } else {
        http.with_allowed_hosts(c.allowed_hosts.clone())
    };
    http = if c.allowed_origins.iter().any(|o| o == "*") {
        http.disable_allowed_origins()
    } else {
        http.with_allowed_origins(c.allowed_origins.clone())
            .enforce_origin_validation()
    };
    let streams = Arc::new(StreamSessions::new(http.sse_retry));
    let _ = gw.streams.set(streams.clone());
    let factory_gw = gw.clone();
    let service = StreamableHttpService::new(move || Ok(factory_gw.new_session()), streams, http);
    Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn(
            super::http_errors::jsonrpc_errors,
        ))
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
