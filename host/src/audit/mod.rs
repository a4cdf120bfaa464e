//! The audit of MCP calls: who called what, when, with which outcome.
//!
//! Every `tools/call`, `resources/read` and `prompts/get` through the
//! gateway becomes one [`CallRecord`] (time, principal, session, backend,
//! client-visible name, [`Outcome`], duration, and the arguments only with
//! `[audit] arguments = true`), kept in the state store so it survives a
//! restart, and read back with [`CallQuery`] by the control API (`GET
//! /api/v1/audit/calls`) and `vigil audit`.
//!
//! - `record.rs`: [`CallRecord`], [`Method`], [`Outcome`], [`StoredCall`];
//! - `hook.rs`: what the call paths call — [`CallAudit::begin`], then
//!   [`PendingCall::finish`] / [`PendingCall::unrouted`] /
//!   [`PendingCall::refused`];
//! - `handle.rs`: [`CallAudit`], the cheap handle with a non-blocking
//!   [`CallAudit::record`] into a bounded queue ([`QUEUE`]);
//! - `writer.rs`: the queue's sink and policy: the store's one batched
//!   writer ([`crate::store::Writer`]) takes the queue in batches, one
//!   [`CallStore`](crate::store::CallStore) transaction each, and drains
//!   it at shutdown;
//! - `prune.rs`: deletes records older than `[audit] keep`;
//! - `query.rs`: [`CallQuery`] and the API's query-string checks.
//!
//! Must not: sit in the call's way. Recording never waits; a full queue
//! drops the record and counts it (`vigil_audit_dropped_total`, a
//! rate-limited WARN) — nothing is dropped silently. Without a store the
//! audit is off and says so where it is read.
//!
//! ```no_run
//! # async fn demo(store: std::sync::Arc<dyn vigil::store::CallStore>) {
//! use vigil::audit::{CallAudit, Method, Outcome};
//! let (tracker, shutdown) = (tokio_util::task::TaskTracker::new(), tokio_util::sync::CancellationToken::new());
//! let audit = CallAudit::start(Some(store), Default::default(), Default::default(), &tracker, &shutdown);
//! let pending = audit.begin(Method::ToolsCall, "files__read", None, &Default::default());
//! // ... route and forward the call, then say how it ended:
//! pending.finish("files", Outcome::Error);
//! // At shutdown: the writer stores what is queued before the tracker is done.
//! shutdown.cancel();
//! tracker.close();
//! tracker.wait().await;
//! # }
//! ```

mod handle;
mod hook;
mod prune;
mod query;
mod record;
mod writer;

#[cfg(test)]
mod tests;

pub use handle::{CallAudit, QUEUE};
pub use hook::{CallSession, PendingCall};
pub use query::{CallQuery, DEFAULT_LIMIT, MAX_LIMIT, RawCallQuery, parse_since};
pub use record::{CallRecord, Method, Outcome, Searched, StoredCall};
