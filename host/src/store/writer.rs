//! The one writer of health state to the store: supervisors hand it
//! transitions and instance records (and the monitor's audit entries); it
//! writes them in order on the blocking pool, so a slow disk never stalls a
//! supervisor or the data plane.
//!
//! Shutdown loses no write that was handed over before it: when the
//! shutdown token fires, the writer closes its queue and writes everything
//! already in it before its task ends, so waiting for the task tracker
//! after cancelling the token (as `vigil serve` does) puts every accepted
//! transition on disk. A write handed over after the close is refused with
//! a WARN naming it, never dropped silently. Without a shutdown, the task
//! ends once every handle is gone and the queue is written out.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{AuditEntry, InstanceRecord, Store};
use crate::health::Transition;

/// The most writes handed to the blocking pool at once: a burst costs few
/// hops, and one hop stays short.
const BATCH: usize = 256;

enum Write {
    Transition(Transition),
    Instance(InstanceRecord),
    Audit(AuditEntry),
}

/// Cheap to clone; writes are queued, never awaited.
#[derive(Clone)]
pub struct StoreWriter(mpsc::UnboundedSender<Write>);

// === impl StoreWriter ===

impl StoreWriter {
    /// Starts the writer over `store` on `tracker`; it drains and ends when
    /// `shutdown` fires (see the module doc).
    pub fn spawn(
        store: Arc<dyn Store>,
        tracker: &TaskTracker,
        shutdown: &CancellationToken,
    ) -> StoreWriter {
        let (tx, rx) = mpsc::unbounded_channel();
        tracker.spawn(tracing::Instrument::instrument(
            run(rx, store, shutdown.clone()),
            tracing::info_span!("store_writer"),
        ));
        StoreWriter(tx)
    }

    /// Queues `t`; `false` when the writer has closed for shutdown (the
    /// refusal is logged). A caller that tells others of `t` does so only
    /// after `true`: what anyone heard of is on disk after the shutdown.
    pub fn transition(&self, t: Transition) -> bool {
        match self.0.send(Write::Transition(t)) {
            Ok(()) => true,
            Err(mpsc::error::SendError(w)) => {
                refused(&w);
                false
            }
        }
    }

    pub fn instance(&self, r: InstanceRecord) {
        if let Err(mpsc::error::SendError(w)) = self.0.send(Write::Instance(r)) {
            refused(&w);
        }
    }

    pub fn audit(&self, a: AuditEntry) {
        if let Err(mpsc::error::SendError(w)) = self.0.send(Write::Audit(a)) {
            refused(&w);
        }
    }
}

/// Says which write came after the writer closed.
fn refused(w: &Write) {
    let (what, backend) = match w {
        Write::Transition(t) => ("transition", t.backend.as_str()),
        Write::Instance(i) => ("instance record", i.backend.as_str()),
        Write::Audit(a) => ("audit entry", a.target.as_str()),
    };
    tracing::warn!(
        backend,
        "health state not written: a {what} came after the store writer closed for shutdown"
    );
}

/// Writes batches until shutdown (then drains the queue) or until every
/// handle is gone (then what was queued is written, too).
async fn run(
    mut rx: mpsc::UnboundedReceiver<Write>,
    store: Arc<dyn Store>,
    shutdown: CancellationToken,
) {
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            n = rx.recv_many(&mut batch, BATCH) => {
                if n == 0 {
                    return; // every handle dropped and nothing queued
                }
            }
        }
        write(&store, std::mem::take(&mut batch)).await;
    }
    rx.close();
    let mut drained = 0;
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        drained += batch.len();
        write(&store, std::mem::take(&mut batch)).await;
    }
    tracing::debug!(
        writes = drained,
        "health state: queue written out at shutdown"
    );
}

/// Writes one batch in order on the blocking pool; each failure is logged.
async fn write(store: &Arc<dyn Store>, batch: Vec<Write>) {
    let store = store.clone();
    let done = tokio::task::spawn_blocking(move || {
        for w in batch {
            let r = match &w {
                Write::Transition(t) => store.record_transition(t),
                Write::Instance(i) => store.save_instance(i),
                Write::Audit(a) => store.record_audit(a),
            };
            if let Err(e) = r {
                tracing::error!(error = %e, "could not write health state to the store");
            }
        }
    })
    .await;
    if let Err(e) = done {
        tracing::error!(error = %e, "store writer failed");
    }
}

#[cfg(test)]
mod tests;
