//! The gateway over stdio, for desktop clients that launch their servers:
//! one client session on stdin/stdout (logs go to stderr).

use std::sync::Arc;

use rmcp::ServiceExt;
use tokio_util::sync::CancellationToken;

use super::Gateway;

/// Serves one session on stdin/stdout until the client closes it or
/// `shutdown` fires.
pub async fn serve(gw: Arc<Gateway>, shutdown: CancellationToken) -> anyhow::Result<()> {
    let session = gw.new_session();
    let running = session
        .serve_with_ct(rmcp::transport::stdio(), shutdown.child_token())
        .await?;
    let reason = running.waiting().await?;
    tracing::info!(?reason, "stdio client session ended");
    Ok(())
}
