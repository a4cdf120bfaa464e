//! Vigil: an MCP gateway that serves many MCP servers ("backends") behind one
//! endpoint and keeps every client's view of them true.
//!
//! The crate is laid out by job (see `DESIGN.md` for the full map):
//!
//! - [`config`] parses and validates `vigil.toml`; it never touches the
//!   network.
//! - [`catalog`] holds what each backend advertises and the merged, named
//!   view with its routing tables; pure data, no I/O.
//! - [`backend`] owns MCP client connections to backends: start, handshake,
//!   reconnect with backoff, forward requests, relay what backends send;
//!   each start of a backend is a run ([`backend::Instance`]: its shared
//!   connection, era, 2026-07-28 door and lanes, replaced whole); and the
//!   [`backend::Generation`], the one snapshot (catalog, backend set, the
//!   run serving each backend, `[[policy]]` set) every request is decided
//!   against, read once and held to its end.
//! - [`dataplane`] decides, free of sockets: what a request is (its
//!   envelope, its revision), how it travels ([`dataplane::plan`]: raw over
//!   a lane, raw stateless, or typed, with the reason; typed, over which
//!   connection: [`dataplane::carrier`]), and how a call
//!   ended ([`dataplane::outcome`], the one account the audit, statistics,
//!   metrics and traces read).
//! - [`import`] turns an MCP client's server list into `[[backends]]`.
//! - [`gateway`] is the front MCP server: sessions, the two executors of a
//!   plan (the raw path and rmcp's typed handlers), fan-out of
//!   `list_changed`, over streamable HTTP or stdio.
//! - [`app`] is the composition root: start-up and settling, the update
//!   task that publishes generations, supervisor spawning, config
//!   reloads, updates of backends (`app::rollouts`, carrying out the pure
//!   rules of [`rollout`]: the catalog diff, one type for why an update is
//!   rolled back, the verdict) and the control API's adapter. [`runtime`]
//!   chooses what runs a backend (a process, a container, nothing for a
//!   remote).
//! - [`background`] is where tasks run: every spawned task is on a tracker
//!   a shutdown waits for (`scripts/structure.sh` checks).
//! - [`cluster`] holds what several replicas share, each seam with a
//!   local implementation (one replica) and, in `cluster::postgres`, one
//!   on the shared PostgreSQL store: the session book and its sealed
//!   session ids, the feed of backend updates and health transitions
//!   (and the replicas' notes), rate limiting (the buckets [`policy`]
//!   takes tokens from), supervision leases (a [`supervisor`] acts only
//!   while it holds its backend's, and follows the holder otherwise), and
//!   MRTR parked calls with the replica that parked each.
//! - [`origin`] decides which `Host` and `Origin` a listener answers (DNS
//!   rebinding and cross-origin protection), for `/mcp` and the control API.
//! - [`redact`] masks secrets (configured values, URL credentials) in every
//!   log line, reason and forwarded error.
//! - [`auth`] knows who calls `/mcp`: `[[auth.keys]]`, `[auth.oauth]`
//!   access tokens (JWKS, introspection, protected resource metadata),
//!   sessions bound to their principal, RFC 8693 token exchange toward
//!   `forward_auth` backends.
//! - [`policy`] is the one decision on what a principal sees and may call,
//!   and how fast (`[[policy]]`); both list and call paths ask it.
//! - [`audit`] records every `tools/call`, `resources/read` and
//!   `prompts/get` (who, what, outcome, duration) in the store, off the
//!   call path.
//! - [`store`] keeps what must survive a restart (quarantines, restart
//!   counts, the transition log, both audit logs) behind three async
//!   seams, one per concern (`HealthStore`, `CallStore`, `ActionLog`),
//!   with a neutral `StoreError`; the embedded SQLite store (the default)
//!   and PostgreSQL (one database shared by replicas, `[store] url_env`)
//!   implement them. Writes that must not wait go through its one batched
//!   `Writer`.
//!
//! Data flows one way: backend supervisors send updates to the app's
//! update task, which publishes a new generation and notifies sessions; requests and
//! sessions read the generation and never cache their own copy. No module
//! below the front names it (`scripts/structure.sh`).
//!
//! ```no_run
//! # async fn run() -> anyhow::Result<()> {
//! use tokio_util::{sync::CancellationToken, task::TaskTracker};
//! let config = vigil::config::Config::load("vigil.toml".as_ref())?;
//! let (tracker, shutdown) = (TaskTracker::new(), CancellationToken::new());
//! let redactor = vigil::redact::Redactor::default();
//! let app = vigil::app::App::start(config, None, redactor, &tracker, shutdown.clone()).await?;
//! let cap = vigil::limits::Cap::configured(app.config().limits.mcp.connections);
//! vigil::gateway::http::serve(app.front().clone(), cap, shutdown).await?;
//! # Ok(()) }
//! ```

// Sampling, roots, logging and resources/subscribe are deprecated by the
// 2026-07-28 revision but live in every earlier one, which clients and
// backends still speak; a gateway must relay them.
#![allow(deprecated)]

pub mod api;
pub mod app;
pub mod audit;
pub mod auth;
pub mod backend;
pub mod background;
pub mod catalog;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod dataplane;
pub mod freshness;
pub mod gateway;
pub mod health;
pub mod import;
pub mod limits;
pub mod listener;
pub(crate) mod log_limit;
pub mod logging;
pub mod metrics;
pub mod origin;
pub mod plugins;
pub mod policy;
pub mod private_fs;
pub mod redact;
pub mod rollout;
pub mod runtime;
pub mod search;
pub mod store;
pub mod supervisor;
pub mod telemetry;
