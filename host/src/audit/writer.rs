//! Where call records go: the store's one batched writer
//! ([`crate::store::Writer`]) with the audit's [`policy`] — a bounded
//! queue ([`QUEUE`](super::QUEUE) records in `vigil serve`), batches of
//! up to [`BATCH`] that wait up to [`LINGER`] to fill — over [`Records`],
//! the sink that masks each batch's arguments and appends it in one
//! [`CallStore`] transaction. The call paths never wait on disk.
//!
//! Shutdown: when the token fires the queue is closed (later records are
//! counted as dropped) and everything already in it is written before the
//! task ends; the caller waits for it through its `TaskTracker`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::CallRecord;
use super::handle::{Counters, Lost};
use crate::redact::Redactor;
use crate::store::{CallStore, Policy, Refusal, Sink};

/// The most records written in one transaction: large enough that a burst
/// costs few commits, small enough that one commit stays short.
pub(super) const BATCH: usize = 512;

/// How long a batch waits for more records before it is written: what a
/// crash (not a shutdown, which drains) can lose at most.
const LINGER: Duration = Duration::from_millis(50);

/// The call audit's writer policy, with a queue of `capacity` records.
pub(super) const fn policy(capacity: usize) -> Policy {
    Policy {
        name: "call audit",
        batch: BATCH,
        linger: LINGER,
        capacity: Some(capacity),
    }
}

/// The sink of call records: masks, appends, and counts what it could not
/// store.
pub(super) struct Records {
    pub(super) store: Arc<dyn CallStore>,
    pub(super) redactor: Redactor,
    pub(super) counters: Arc<Counters>,
    /// Until it fires, a batch waits out an unreachable store.
    pub(super) shutdown: tokio_util::sync::CancellationToken,
}

#[async_trait]
impl Sink for Records {
    type Item = CallRecord;

    /// Masks and appends one batch, waiting out an unreachable store
    /// (records handed over meanwhile queue behind it, up to the queue's
    /// bound); a failure is logged and counted.
    async fn write(&self, mut batch: Vec<CallRecord>) {
        for r in &mut batch {
            if let Some(args) = r.arguments.as_mut() {
                self.redactor.mask_json(args);
            }
        }
        let n = batch.len() as u64;
        let written = crate::store::writer::while_unavailable("call audit", &self.shutdown, || {
            self.store.append(batch.clone())
        })
        .await;
        crate::metrics::get().audit_queued.dec_by(n as i64);
        if let Err(e) = written {
            tracing::error!(records = n, kind = %e.kind(), error = %e, "call audit: could not store a batch of call records");
            self.counters.lost(n, Lost::WriteFailed);
        }
    }

    /// A full queue or a closed writer: counted, never silent.
    fn refused(&self, _: CallRecord, why: Refusal) {
        let lost = match why {
            Refusal::Full => Lost::QueueFull,
            Refusal::Closed => Lost::ShutDown,
        };
        self.counters.lost(1, lost);
    }
}
