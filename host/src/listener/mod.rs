//! Vigil's HTTP listeners (`/mcp` and the control API): hyper connections
//! with bounds a slow, idle or hostile client cannot get past.
//!
//! Per listener (`[limits]`, see [`ListenerLimits`]):
//! - at most `connections` open at once; one more is answered
//!   `503 Service Unavailable` (the body names the limit) and closed, so
//!   what a flood of connections costs is bounded, and the control API
//!   keeps its own room while `/mcp` is full. The caps are fitted to the
//!   open-file limit at start ([`crate::limits::ConnectionCaps`]), so held
//!   connections cannot take the descriptors everything else needs;
//! - a request's head and body must arrive within `read_timeout`
//!   (slowloris), and a new connection's first request must: one that
//!   sends nothing is closed then, not at `idle_timeout`;
//! - a connection with no request in flight and nothing received for
//!   `idle_timeout` is closed;
//! - a client that takes none of an answer for `write_timeout` is cut
//!   off, which frees what was buffered for it.
//!
//! Each connection is one task: hyper's connection future beside a
//! watchdog reading what the connection's I/O and its requests record
//! (`conn.rs`, `body.rs`).

mod body;
mod conn;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use crate::config::ListenerLimits;
use crate::log_limit::LogLimit;

/// How long a connection refused at the cap gets to take its 503.
const REFUSAL_WRITE: Duration = Duration::from_secs(1);
/// Refusals written at once; past this a refused connection is just closed.
/// Each holds a descriptor for up to [`REFUSAL_WRITE`]: counted in the
/// reserve the caps leave (see [`crate::limits::ConnectionCaps`]).
pub(crate) const REFUSALS_IN_FLIGHT: usize = 64;
/// How long shutdown waits for open connections to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// One HTTP listener of Vigil's: what it is called, its bounds, and how it
/// answers a connection over its cap.
pub struct Listener {
    /// `mcp` or `api`, for logs and metrics.
    pub name: &'static str,
    pub limits: ListenerLimits,
    /// Content type and body of the 503 for a connection over the cap.
    pub refusal: (&'static str, String),
}

impl Listener {
    /// Serves `app` on `tcp` until `shutdown`, then lets open connections
    /// finish (for a moment) and returns.
    ///
    /// # Errors
    ///
    /// The listener's address cannot be read.
    pub async fn serve(
        self,
        tcp: TcpListener,
        app: Router,
        shutdown: CancellationToken,
    ) -> std::io::Result<()> {
        let address = tcp.local_addr()?;
        let permits = Arc::new(Semaphore::new(self.limits.connections));
        let refusals = Arc::new(Semaphore::new(REFUSALS_IN_FLIGHT));
        let refusal = Arc::new(refusal_response(&self.refusal));
        let connections = TaskTracker::new();
        let metrics = crate::metrics::get().listener(self.name);
        let mut refused_log = LogLimit::new(Duration::from_secs(10));
        let mut accept_log = LogLimit::new(Duration::from_secs(10));
        loop {
            let accepted = tokio::select! {
                _ = shutdown.cancelled() => break,
                a = tcp.accept() => a,
            };
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors, say: wait a moment instead of spinning.
                    if let Some(more) = accept_log.admit(Instant::now()) {
                        tracing::warn!(listener = self.name, %address, error = %e, more, "cannot accept connections");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            // Small SSE writes must not wait for the client's delayed ACK (Nagle).
            let _ = stream.set_nodelay(true);
            match permits.clone().try_acquire_owned() {
                Ok(permit) => {
                    let (app, limits, shutdown, metrics) =
                        (app.clone(), self.limits, shutdown.clone(), metrics.clone());
                    connections.spawn(async move {
                        conn::serve(stream, peer, app, limits, shutdown, metrics).await;
                        drop(permit);
                    });
                }
                Err(_) => {
                    metrics.refused.inc();
                    if let Some(more) = refused_log.admit(Instant::now()) {
                        tracing::warn!(
                            listener = self.name,
                            %address,
                            connections = self.limits.connections,
                            more,
                            "refusing connections: the listener is at its limit (limits.{})",
                            connections_key(self.name)
                        );
                    }
                    if let Ok(slot) = refusals.clone().try_acquire_owned() {
                        let refusal = refusal.clone();
                        crate::background::spawn(async move {
                            let _ =
                                tokio::time::timeout(REFUSAL_WRITE, refuse(stream, &refusal)).await;
                            drop(slot);
                        });
                    }
                }
            }
        }
        connections.close();
        if tokio::time::timeout(SHUTDOWN_GRACE, connections.wait())
            .await
            .is_err()
        {
            tracing::debug!(listener = self.name, "connections still open at shutdown");
        }
        Ok(())
    }
}

/// The `[limits]` key of a listener's connection cap.
fn connections_key(listener: &str) -> &'static str {
    match listener {
        "api" => "api_connections",
        _ => "connections",
    }
}

/// A whole HTTP/1.1 503 answer with `body`.
fn refusal_response((content_type, body): &(&'static str, String)) -> Vec<u8> {
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

async fn refuse(mut stream: TcpStream, response: &[u8]) {
    if stream.write_all(response).await.is_ok() {
        let _ = stream.shutdown().await;
    }
}
