//! Delivery of health events to notifier plugins.
//!
//! One dispatcher task reads every health transition and hands it to each
//! active notifier whose `[filter]` matches; each notifier has its own
//! worker and queue, so a slow or failing notifier never delays another, nor
//! the supervisors (which only publish on a broadcast channel). A worker
//! drops an event identical to the one it delivered last (same backend,
//! states and reason within [`DEDUP_WINDOW`]), keeps to its `rate` per
//! minute, and retries a failed delivery with exponential backoff.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::Plugins;
use super::manifest::{Filter, Severity};
use crate::health::Transition;

/// An identical event within this window is delivered once.
pub const DEDUP_WINDOW: Duration = Duration::from_secs(60);
/// Delivery attempts per event.
pub const ATTEMPTS: u32 = 5;
/// First retry delay; doubled per attempt up to [`MAX_BACKOFF`].
pub const BACKOFF: Duration = Duration::from_millis(500);
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Events waiting per notifier; older ones are dropped past it.
const QUEUE: usize = 256;

/// One health event as notifiers receive it.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthEvent {
    pub transition: Transition,
    pub generation: u64,
    pub severity: Severity,
}

impl Filter {
    /// Whether a notifier with this filter is offered `e`.
    pub fn admits(&self, e: &HealthEvent) -> bool {
        (self.backends.is_empty() || self.backends.contains(&e.transition.backend))
            && (self.states.is_empty() || self.states.contains(&e.transition.to))
            && e.severity >= self.min_severity
    }
}

/// Runs until `shutdown`: every transition on `events` to every matching
/// notifier. Each notifier's worker runs on `tracker` and stops at
/// `shutdown` too, after the delivery in flight.
pub async fn run(
    plugins: Arc<Plugins>,
    mut events: broadcast::Receiver<Transition>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
) {
    static GENERATION: AtomicU64 = AtomicU64::new(0);
    let mut workers: HashMap<String, mpsc::Sender<HealthEvent>> = HashMap::new();
    loop {
        let t = tokio::select! {
            _ = shutdown.cancelled() => return,
            got = events.recv() => match got {
                Ok(t) => t,
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(missed = n, "notifiers fell behind the health events; some were not delivered");
                    continue;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
        };
        let event = HealthEvent {
            severity: Severity::of(t.to),
            generation: GENERATION.fetch_add(1, Ordering::Relaxed) + 1,
            transition: t,
        };
        let notifiers = plugins.notifiers();
        workers.retain(|name, _| notifiers.iter().any(|(n, _)| n == name));
        for (name, filter) in notifiers {
            if !filter.admits(&event) {
                continue;
            }
            let tx = workers.entry(name.clone()).or_insert_with(|| {
                let (tx, rx) = mpsc::channel(QUEUE);
                tracker.spawn(worker(
                    plugins.clone(),
                    name.clone(),
                    filter.per_minute,
                    rx,
                    shutdown.clone(),
                ));
                tx
            });
            if tx.try_send(event.clone()).is_err() {
                tracing::warn!(plugin = %name, backend = %event.transition.backend, "notifier queue full; event dropped");
            }
        }
    }
}

/// One notifier's deliveries, in order.
async fn worker(
    plugins: Arc<Plugins>,
    name: String,
    per_minute: u32,
    mut rx: mpsc::Receiver<HealthEvent>,
    shutdown: CancellationToken,
) {
    let mut last: Option<(HealthEvent, Instant)> = None;
    // Token bucket: `per_minute` tokens, refilled continuously.
    let capacity = f64::from(per_minute.max(1));
    let mut tokens = capacity;
    let mut refilled = Instant::now();
    while let Some(event) = tokio::select! {
        _ = shutdown.cancelled() => None,
        e = rx.recv() => e,
    } {
        if let Some((prev, at)) = &last
            && same(prev, &event)
            && at.elapsed() < DEDUP_WINDOW
        {
            tracing::debug!(plugin = %name, backend = %event.transition.backend, "identical event already delivered; skipped");
            continue;
        }
        tokens = (tokens + refilled.elapsed().as_secs_f64() * capacity / 60.0).min(capacity);
        refilled = Instant::now();
        if tokens < 1.0 {
            tracing::warn!(plugin = %name, backend = %event.transition.backend, "notifier over its rate limit; event dropped");
            continue;
        }
        tokens -= 1.0;
        let mut delay = BACKOFF;
        for attempt in 1..=ATTEMPTS {
            match plugins.notify(&name, &event).await {
                Ok(()) => {
                    crate::metrics::get()
                        .notifications_sent
                        .get_or_create(&crate::metrics::PluginLabel {
                            plugin: name.to_string(),
                        })
                        .inc();
                    last = Some((event.clone(), Instant::now()));
                    break;
                }
                Err(why) if attempt < ATTEMPTS => {
                    tracing::warn!(plugin = %name, attempt, retry_in = ?delay, error = %why, "notifier failed; retrying");
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(delay) => {}
                    }
                    delay = (delay * 2).min(MAX_BACKOFF);
                }
                Err(why) => {
                    tracing::error!(plugin = %name, attempts = ATTEMPTS, error = %why, backend = %event.transition.backend, "notifier gave up on an event");
                }
            }
        }
    }
}

fn same(a: &HealthEvent, b: &HealthEvent) -> bool {
    let (a, b) = (&a.transition, &b.transition);
    a.backend == b.backend && a.from == b.from && a.to == b.to && a.reason == b.reason
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::health::HealthState;

    fn event(backend: &str, to: HealthState) -> HealthEvent {
        HealthEvent {
            transition: Transition {
                backend: backend.into(),
                from: HealthState::Running,
                to,
                reason: "r".into(),
                at: SystemTime::now(),
            },
            generation: 1,
            severity: Severity::of(to),
        }
    }

    #[test]
    fn filters_match_backend_state_and_severity() {
        let all = Filter::default();
        assert!(all.admits(&event("a", HealthState::Running)));
        let f = Filter {
            backends: vec!["db".into()],
            states: vec![],
            min_severity: Severity::Critical,
            per_minute: 60,
        };
        assert!(f.admits(&event("db", HealthState::Offline)));
        assert!(
            !f.admits(&event("db", HealthState::Degraded)),
            "below the severity"
        );
        assert!(
            !f.admits(&event("web", HealthState::Offline)),
            "another backend"
        );
        let g = Filter {
            states: vec![HealthState::Running],
            ..Filter::default()
        };
        assert!(g.admits(&event("x", HealthState::Running)));
        assert!(!g.admits(&event("x", HealthState::Offline)));
    }
}
