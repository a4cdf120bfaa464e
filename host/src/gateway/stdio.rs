//! The gateway over stdio, for desktop clients that launch their servers:
//! one client session on stdin/stdout (logs go to stderr).
//!
//! rmcp serves the session on an in-process pipe; Vigil copies the client's
//! lines in and rmcp's lines out, putting each relayed answer in its
//! placeholder's place on the way out (`relayed.rs`), as the HTTP front
//! does (`answers.rs`).

use std::sync::Arc;

use rmcp::ServiceExt;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use super::Gateway;

/// The pipe between the copier and rmcp, per direction.
const PIPE: usize = 256 * 1024;

/// Serves one session on stdin/stdout until the client closes it or
/// `shutdown` fires.
pub async fn serve(gw: Arc<Gateway>, shutdown: CancellationToken) -> anyhow::Result<()> {
    let session = gw.new_session();
    let (ours, theirs) = tokio::io::duplex(PIPE);
    let (from_rmcp, mut to_rmcp) = tokio::io::split(ours);
    // The copiers run first: rmcp's serve waits for the client's
    // `initialize`, which they carry.
    // Owned here: ended with the session on every way out.
    let inbound = AbortOnDropHandle::new(crate::background::spawn(async move {
        let _ = tokio::io::copy(&mut tokio::io::stdin(), &mut to_rmcp).await;
        let _ = to_rmcp.shutdown().await;
    }));
    let outbound = AbortOnDropHandle::new(crate::background::spawn(async move {
        let mut lines = tokio::io::BufReader::new(from_rmcp);
        let mut stdout = tokio::io::stdout();
        let mut line = Vec::new();
        loop {
            line.clear();
            match lines.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let replaced = std::str::from_utf8(&line)
                .ok()
                .and_then(|t| gw.answers().substitute(t.trim_end()));
            let written = match replaced {
                Some(mut text) => {
                    text.push('\n');
                    stdout.write_all(text.as_bytes()).await
                }
                None => stdout.write_all(&line).await,
            };
            if written.is_err() || stdout.flush().await.is_err() {
                break;
            }
        }
    }));
    let running = session.serve_with_ct(theirs, shutdown.child_token()).await;
    let reason = running?.waiting().await?;
    drop(inbound);
    let _ = outbound.await;
    tracing::info!(?reason, "stdio client session ended");
    Ok(())
}
