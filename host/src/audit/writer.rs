//! The one writer of call records: takes what is queued in batches of up
//! to [`BATCH`] (waiting up to [`LINGER`] for a batch to fill), masks their
//! arguments, and appends each batch in one store transaction — the call
//! paths never wait on disk.
//!
//! Shutdown: when the token fires the queue is closed (later records are
//! counted as dropped) and everything already in it is written before the
//! task ends; the caller waits for it through its `TaskTracker`.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::CallRecord;
use super::handle::{Counters, Lost};
use crate::redact::Redactor;
use crate::store::CallStore;

/// The most records written in one transaction: large enough that a burst
/// costs few commits, small enough that one commit stays short.
pub(super) const BATCH: usize = 512;

/// How long a batch waits for more records before it is written: what a
/// crash (not a shutdown, which drains) can lose at most.
const LINGER: std::time::Duration = std::time::Duration::from_millis(50);

/// Runs until `shutdown` (then drains the queue) or until every handle is
/// gone (then what was queued is written, too).
pub(super) async fn run(
    mut rx: mpsc::Receiver<CallRecord>,
    store: Arc<dyn CallStore>,
    redactor: Redactor,
    counters: Arc<Counters>,
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
        // Linger for more: calls a few milliseconds apart then cost one
        // commit per LINGER, not one each.
        let until = tokio::time::Instant::now() + LINGER;
        while batch.len() < BATCH {
            let room = BATCH - batch.len();
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep_until(until) => break,
                n = rx.recv_many(&mut batch, room) => {
                    if n == 0 {
                        break;
                    }
                }
            }
        }
        write(&*store, &redactor, &counters, std::mem::take(&mut batch)).await;
    }
    rx.close();
    let mut drained = 0;
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        drained += batch.len();
        write(&*store, &redactor, &counters, std::mem::take(&mut batch)).await;
    }
    tracing::debug!(
        records = drained,
        "call audit: queue written out at shutdown"
    );
}

/// Masks and appends one batch; a failure is logged and counted.
async fn write(
    store: &dyn CallStore,
    redactor: &Redactor,
    counters: &Counters,
    mut batch: Vec<CallRecord>,
) {
    for r in &mut batch {
        if let Some(args) = r.arguments.as_mut() {
            redactor.mask_json(args);
        }
    }
    let n = batch.len() as u64;
    if let Err(e) = store.append(batch).await {
        tracing::error!(records = n, kind = %e.kind(), error = %e, "call audit: could not store a batch of call records");
        counters.lost(n, Lost::WriteFailed);
    }
}
