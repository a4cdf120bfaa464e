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

use futures::future::BoxFuture;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::backend::Backend;
use crate::config::PollerConfig;

/// What the poller re-lists: a backend's shared catalog, or one session's
/// own catalog of a `forward_auth` backend (listed through that session's
/// connection only).
pub trait Listing: Send + Sync {
    /// The backend, for the log.
    fn backend(&self) -> &str;
    /// Whether there is a connection to list through now.
    fn connected(&self) -> bool;
    /// Re-lists, single-flight with other listings of the same catalog;
    /// `false` if none completed within `timeout`.
    fn relist(&self, timeout: Duration) -> BoxFuture<'_, bool>;
}

impl Listing for Backend {
    fn backend(&self) -> &str {
        &self.name
    }
    fn connected(&self) -> bool {
        self.shared().is_some()
    }
    fn relist(&self, timeout: Duration) -> BoxFuture<'_, bool> {
        Box::pin(self.refresh_and_wait(timeout))
    }
}

/// Runs until `shutdown`. `targets` gives what to list at the start of
/// each round (a config reload or new sessions may change it). Does
/// nothing with a zero interval.
pub async fn run(
    backends: impl Fn() -> Vec<Arc<dyn Listing>>,
    config: PollerConfig,
    listing_timeout: Duration,
    shutdown: CancellationToken,
) {
    if config.interval.is_zero() {
        return;
    }
    let slots = Arc::new(Semaphore::new(config.concurrency));
    // The listings in flight: they never outlive the poller (dropping the
    // set at shutdown aborts them).
    let mut listings = JoinSet::new();
    tracing::debug!(interval = ?config.interval, "capability poller started");
    let mut next = tokio::time::Instant::now();
    loop {
        let round = backends();
        // An empty set still waits out the interval before looking again.
        let step = config.interval / u32::try_from(round.len().max(1)).unwrap_or(u32::MAX);
        if round.is_empty() {
            next += step;
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep_until(next) => {}
            }
            continue;
        }
        for backend in round {
            next += step;
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep_until(next) => {}
            }
            // Only connected backends are listed; the others are listed when
            // they connect.
            if !backend.connected() {
                continue;
            }
            let slot = tokio::select! {
                _ = shutdown.cancelled() => return,
                slot = slots.clone().acquire_owned() => match slot {
                    Ok(slot) => slot,
                    Err(_) => return,
                },
            };
            while listings.try_join_next().is_some() {}
            listings.spawn(async move {
                let m = crate::metrics::get();
                let label = crate::metrics::BackendLabel {
                    backend: backend.backend().to_owned(),
                };
                m.poller_listings.get_or_create(&label).inc();
                if !backend.relist(listing_timeout).await {
                    m.poller_timeouts.get_or_create(&label).inc();
                    tracing::debug!(
                        backend = backend.backend(),
                        "poll: no listing completed in time"
                    );
                }
                drop(slot);
            });
        }
    }
}
