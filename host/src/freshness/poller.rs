//! The capability poller: re-lists every connected backend once per
//! `[poller] interval`, so a backend redeployed with other tools and no
//! `list_changed` is noticed within one interval.
//!
//! Backends are spread evenly over the interval (backend *i* of *n* at
//! `i·interval/n` into each round) with at most `concurrency` listings in
//! flight. A listing goes through the backend's supervisor, the same
//! single-flight path as a backend's own `list_changed`: a poll that
//! overlaps a running listing waits for it instead of fetching again. The
//! supervisor compares the result with the last listing and reports only a
//! difference; a failed listing keeps the cached catalog and counts as a
//! failed health observation.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::backend::Backend;
use crate::config::PollerConfig;

/// Runs until `shutdown`. Does nothing with a zero interval or no backends.
pub async fn run(
    backends: Vec<Arc<Backend>>,
    config: PollerConfig,
    listing_timeout: Duration,
    shutdown: CancellationToken,
) {
    if config.interval.is_zero() || backends.is_empty() {
        return;
    }
    let slots = Arc::new(Semaphore::new(config.concurrency));
    let step = config.interval / backends.len() as u32;
    tracing::debug!(interval = ?config.interval, backends = backends.len(), "capability poller started");
    let mut next = tokio::time::Instant::now() + step;
    loop {
        for backend in &backends {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep_until(next) => {}
            }
            next += step;
            // Only connected backends are listed; the others are listed when
            // they connect.
            if backend.shared().is_none() {
                continue;
            }
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            let backend = backend.clone();
            tokio::spawn(async move {
                if !backend.refresh_and_wait(listing_timeout).await {
                    tracing::debug!(backend = %backend.name, "poll: no listing completed in time");
                }
                drop(slot);
            });
        }
    }
}
