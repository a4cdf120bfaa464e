//! A backend's health as its supervisor last decided it, published for
//! everyone else.
//!
//! One writer, many readers: the supervisor holds the only [`Publisher`]
//! (taken once from the backend), and the router, the catalog, the control
//! API and the dashboard read through [`Published`] on every request.
//! Readers take a snapshot without a lock and without copying its strings
//! (an [`ArcSwap`] load), so a probe writing a new status never stalls a
//! call, and a call never sees half of one.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;

use super::HealthState;

/// A backend's health as last decided by its supervisor. Serialized when a
/// replica answers an operator command another replica routed to it
/// (`cluster::postgres::command`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Status {
    pub state: HealthState,
    pub since: SystemTime,
    pub reason: String,
    pub restart_count: u64,
    pub consecutive_failures: u32,
    pub quarantine_reason: Option<String>,
    pub next_retry_at: Option<SystemTime>,
    /// Round trip of the last successful probe.
    pub latency: Option<Duration>,
    pub last_exit: Option<String>,
}

impl Status {
    /// Before the supervisor decided anything.
    pub fn initial() -> Self {
        Self {
            state: HealthState::Starting,
            since: SystemTime::now(),
            reason: "gateway started".into(),
            restart_count: 0,
            consecutive_failures: 0,
            quarantine_reason: None,
            next_retry_at: None,
            latency: None,
            last_exit: None,
        }
    }
}

/// The readers' side: cheap to load, never blocks the writer.
pub struct Published {
    current: Arc<ArcSwap<Status>>,
    /// The writer's end until the supervisor takes it.
    publisher: Mutex<Option<Publisher>>,
}

/// The one writer's side (the supervisor's).
pub struct Publisher(Arc<ArcSwap<Status>>);

// === impl Published ===

impl Published {
    pub fn new(initial: Status) -> Self {
        let current = Arc::new(ArcSwap::from_pointee(initial));
        Self {
            publisher: Mutex::new(Some(Publisher(current.clone()))),
            current,
        }
    }

    /// The state alone: what the routing rules ask on every call.
    pub fn state(&self) -> HealthState {
        self.current.load().state
    }

    /// The whole status as one consistent snapshot (shared, not copied).
    pub fn snapshot(&self) -> Arc<Status> {
        self.current.load_full()
    }

    /// The writer's end; `Some` once (a second supervisor gets `None`).
    pub fn take_publisher(&self) -> Option<Publisher> {
        self.publisher.lock().ok().and_then(|mut p| p.take())
    }
}

// === impl Publisher ===

impl Publisher {
    pub fn publish(&self, status: Status) {
        self.0.store(Arc::new(status));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_see_what_the_one_publisher_wrote() {
        let published = Published::new(Status::initial());
        let before = published.snapshot();
        let publisher = published.take_publisher().expect("first take");
        assert!(published.take_publisher().is_none(), "one writer only");
        publisher.publish(Status {
            state: HealthState::Running,
            reason: "probe ok".into(),
            ..Status::initial()
        });
        assert_eq!(published.state(), HealthState::Running);
        assert_eq!(published.snapshot().reason, "probe ok");
        assert_eq!(
            before.state,
            HealthState::Starting,
            "a snapshot taken earlier stays as it was"
        );
    }
}
