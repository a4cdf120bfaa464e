//! The lean pair: an MCP backend and an MCP client that cost next to
//! nothing per call, so the gateway's own cost is what a run shows.
//!
//! The rmcp pair (the demo backend, rmcp's client) spends 260–520 µs of CPU
//! per call in its two peers; on a 2-CPU machine that is CPU the gateway
//! does not get, and it shrinks the gateway's share of every ratio. The
//! lean pair speaks the same protocol (MCP streamable HTTP, sessions,
//! protocol 2025-11-25) with a hand-written HTTP/1.1 layer and borrowed
//! JSON, no SDK on the hot path.
//!
//! Both speak 2026-07-28 as well (sessionless requests), and the backend
//! also serves stdio.
//!
//! - [`http`]: message heads and body framings on a kept-alive connection;
//! - [`sse`]: the event-stream parser (Vigil may answer a POST with SSE);
//! - [`mcp`]: what the backend answers, whatever the transport;
//! - [`backend`]: the server, `vigil-bench lean-backend`, a process of its own;
//! - [`stdio`]: the same server on stdin and stdout (`lean-backend --stdio`);
//! - [`client`]: one client session;
//! - [`pipe`]: the client of a stdio server, driving its pipes itself;
//! - [`load`]: N sessions in a closed loop, recorded like the rmcp load.

pub mod backend;
pub mod client;
pub mod http;
pub mod load;
pub mod mcp;
pub mod pipe;
pub mod sse;
pub mod stdio;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::client::{Endpoint, Era, Session};

    /// The lean client against the lean backend over loopback: handshake,
    /// calls on the kept connection, close; then the closed session is gone.
    #[tokio::test]
    async fn client_and_backend_talk() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        tokio::spawn(async move { super::backend::serve(listener, "t").await });
        let endpoint = Arc::new(Endpoint::parse(&url).unwrap());
        let mut s = Session::open(endpoint.clone()).await.unwrap();
        for text in ["a", "with \"quotes\" and \\ and é", ""] {
            s.call_echo("echo", text).await.unwrap();
        }
        let e = s.call_echo("nope", "x").await.unwrap_err();
        assert!(format!("{e:#}").contains("-32602"), "{e:#}");
        s.call_echo("echo", "still usable").await.unwrap();
        s.close().await;

        let mut other = Session::open(endpoint).await.unwrap();
        other.call_echo("echo", "x").await.unwrap();
        other.close().await;
    }

    /// The same in 2026-07-28: discovery, sessionless calls with their
    /// headers and `_meta`, which the backend checks.
    #[tokio::test]
    async fn sessionless_client_and_backend_talk() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        tokio::spawn(async move { super::backend::serve(listener, "t").await });
        let endpoint = Arc::new(Endpoint::parse(&url).unwrap());
        let mut s = Session::open_era(endpoint, Era::Modern, "{}")
            .await
            .unwrap();
        for text in ["a", "é \"q\""] {
            s.call_echo("echo", text).await.unwrap();
        }
        let e = s.call_echo("nope", "x").await.unwrap_err();
        assert!(format!("{e:#}").contains("-32602"), "{e:#}");
        s.call_echo("echo", "still usable").await.unwrap();
        s.close().await;
    }
}
