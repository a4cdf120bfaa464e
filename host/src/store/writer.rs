//! The one writer of health state to the store: supervisors hand it
//! transitions and instance records; it writes them in order, in batches
//! of one store transaction each, so a slow disk never stalls a supervisor
//! or the data plane.
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

use super::{HealthStore, HealthWrite, InstanceRecord};
use crate::health::Transition;

/// The most writes in one store transaction: a burst costs few commits,
/// and one commit stays short.
const BATCH: usize = 256;

/// Cheap to clone; writes are queued, never awaited.
#[derive(Clone)]
pub struct StoreWriter(mpsc::UnboundedSender<HealthWrite>);

// === impl StoreWriter ===

impl StoreWriter {
    /// Starts the writer over `store` on `tracker`; it drains and ends when
    /// `shutdown` fires (see the module doc).
    pub fn spawn(
        store: Arc<dyn HealthStore>,
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
        match self.0.send(HealthWrite::Transition(t)) {
            Ok(()) => true,
            Err(mpsc::error::SendError(w)) => {
                refused(&w);
                false
            }
        }
    }

    pub fn instance(&self, r: InstanceRecord) {
        if let Err(mpsc::error::SendError(w)) = self.0.send(HealthWrite::Instance(r)) {
            refused(&w);
        }
    }
}

/// Says which write came after the writer closed.
fn refused(w: &HealthWrite) {
    let what = match w {
        HealthWrite::Transition(_) => "transition",
        HealthWrite::Instance(_) => "instance record",
    };
    tracing::warn!(
        backend = w.backend(),
        "health state not written: a {what} came after the store writer closed for shutdown"
    );
}

/// Writes batches until shutdown (then drains the queue) or until every
/// handle is gone (then what was queued is written, too).
async fn run(
    mut rx: mpsc::UnboundedReceiver<HealthWrite>,
    store: Arc<dyn HealthStore>,
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

/// Writes one batch in order, in one transaction; a failure is logged.
async fn write(store: &Arc<dyn HealthStore>, batch: Vec<HealthWrite>) {
    let n = batch.len();
    if let Err(e) = store.write(batch).await {
        tracing::error!(writes = n, kind = %e.kind(), error = %e, "could not write health state to the store");
    }
}

#[cfg(test)]
mod tests;
