//! Readiness of a `forward_auth` backend: an HTTP round trip to its
//! endpoint, without an MCP session.
//!
//! Why not a ping: such a backend is only ever spoken to with a client's
//! own `Authorization` header (see `gateway::pool`), and Vigil has none of
//! its own to open a session with. What Vigil can check without one is that
//! the endpoint is there and sane: any answer below 500 (a 401 for the
//! missing credentials, a 400 for the missing session) means a server is
//! listening and handling requests; a refused connection, a timeout or a
//! 5xx does not.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::error::{BackendError, HttpFailure};
use super::http_ping::probe_client;

/// Most of an answer's body the probe reads (see [`reach`]).
const MAX_BODY: usize = 64 * 1024;

/// POSTs a JSON-RPC `ping` without a session to `url` and returns the HTTP
/// status when it shows a live server.
pub async fn reach(
    backend: &Arc<str>,
    url: &str,
    headers: &BTreeMap<String, String>,
    timeout: Duration,
) -> Result<u16, BackendError> {
    let transport = |reason: String| BackendError::Transport {
        backend: backend.clone(),
        reason,
        stderr: vec![],
    };
    let client = probe_client().map_err(|e| transport(e.to_string()))?;
    let mut req = client
        .post(url)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":"vigil-reach","method":"ping"}"#);
    for (k, v) in headers {
        req = req.header(k, v);
    }
    let exchange = async {
        let mut resp = req.send().await?;
        let status = resp.status();
        // The status is the answer. A short body is read to its end so the
        // connection can go back to the pool; anything longer is dropped
        // unread with the connection (a backend may send without end).
        let mut read = 0;
        while read <= MAX_BODY {
            match resp.chunk().await {
                Ok(Some(chunk)) => read += chunk.len(),
                Ok(None) | Err(_) => break,
            }
        }
        Ok::<_, reqwest::Error>(status)
    };
    match tokio::time::timeout(timeout, exchange).await {
        Err(_) => Err(BackendError::Timeout {
            backend: backend.clone(),
            timeout,
        }),
        Ok(Err(e)) => match HttpFailure::of_send(e) {
            f @ HttpFailure::Refused(_) => Err(BackendError::Refused {
                backend: backend.clone(),
                reason: f.to_string(),
            }),
            f => Err(transport(f.to_string())),
        },
        Ok(Ok(status)) if status.is_server_error() => {
            Err(transport(format!("the endpoint answered HTTP {status}")))
        }
        Ok(Ok(status)) => Ok(status.as_u16()),
    }
}
