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
//! - [`http`]: message heads and body framings on a kept-alive connection;
//! - [`sse`]: the event-stream parser (Vigil may answer a POST with SSE);
//! - [`backend`]: the server, `vigil-bench lean-backend`, a process of its own;
//! - [`client`]: one client session;
//! - [`load`]: N sessions in a closed loop, recorded like the rmcp load.

pub mod backend;
pub mod client;
pub mod http;
pub mod load;
pub mod sse;
