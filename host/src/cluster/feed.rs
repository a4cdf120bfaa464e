//! The feed: what supervisors report, and who hears it.
//!
//! A supervisor reports each change of its backend (state, listing) for
//! the task that publishes generations, and each health transition for
//! whoever listens (the control API's event stream, notifier plugins).
//! [`Feed`] is that seam: [`LocalFeed`] is today's two channels of one
//! process. With several replicas, every replica builds its own
//! generations from every backend's updates, so a cluster feed delivers
//! each update and transition to all of them, whichever replica's
//! supervisor (the lease holder) sent it.

use std::sync::Arc;

use tokio::sync::{broadcast, mpsc};

use crate::backend::BackendUpdate;
use crate::health::Transition;

/// Nobody takes updates any more (the process is shutting down).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the backend update feed is closed (shutting down)")]
pub struct Closed;

/// Where supervisors report.
pub trait Feed: Send + Sync + 'static {
    /// A backend's state or listing changed.
    fn update(&self, update: BackendUpdate) -> Result<(), Closed>;
    /// A health transition happened (already recorded in the store, when
    /// there is one).
    fn transition(&self, transition: Transition);
    /// Every transition from now on.
    fn transitions(&self) -> broadcast::Receiver<Transition>;
}

/// One process's feed: an unbounded channel of updates to its update
/// task, and a broadcast of transitions.
pub struct LocalFeed {
    updates: mpsc::UnboundedSender<BackendUpdate>,
    transitions: broadcast::Sender<Transition>,
}

/// Transitions a listener may fall behind by before it is told it lagged:
/// room for a mass restart of a thousand backends (three transitions
/// each).
pub const TRANSITIONS_KEPT: usize = 16 * 1024;

impl LocalFeed {
    /// The feed, and the updates its supervisors send, in order.
    pub fn new() -> (Arc<LocalFeed>, mpsc::UnboundedReceiver<BackendUpdate>) {
        let (updates, rx) = mpsc::unbounded_channel();
        let (transitions, _) = broadcast::channel(TRANSITIONS_KEPT);
        (
            Arc::new(LocalFeed {
                updates,
                transitions,
            }),
            rx,
        )
    }
}

impl Feed for LocalFeed {
    fn update(&self, update: BackendUpdate) -> Result<(), Closed> {
        self.updates.send(update).map_err(|_| Closed)
    }
    fn transition(&self, transition: Transition) {
        // Nobody listening is fine: transitions are for whoever listens.
        let _ = self.transitions.send(transition);
    }
    fn transitions(&self) -> broadcast::Receiver<Transition> {
        self.transitions.subscribe()
    }
}

/// A feed whose updates go to a channel of their own, its transitions to
/// `feed`: an instance run for one client reports its updates to that
/// client's pool (`backend::instances`), its health to everyone.
pub struct OwnUpdates {
    pub updates: mpsc::UnboundedSender<BackendUpdate>,
    pub feed: Arc<dyn Feed>,
}

impl Feed for OwnUpdates {
    fn update(&self, update: BackendUpdate) -> Result<(), Closed> {
        self.updates.send(update).map_err(|_| Closed)
    }
    fn transition(&self, transition: Transition) {
        self.feed.transition(transition)
    }
    fn transitions(&self) -> broadcast::Receiver<Transition> {
        self.feed.transitions()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::HealthState;

    fn update(backend: &str) -> BackendUpdate {
        BackendUpdate {
            backend: backend.into(),
            uid: 1,
            removed: false,
            state: HealthState::Running,
            catalog: None,
        }
    }

    fn transition(backend: &str) -> Transition {
        Transition {
            backend: backend.into(),
            from: HealthState::Starting,
            to: HealthState::Running,
            reason: "ready".into(),
            at: std::time::SystemTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn updates_arrive_in_order_and_transitions_reach_every_listener() {
        let (feed, mut updates) = LocalFeed::new();
        let (mut a, mut b) = (feed.transitions(), feed.transitions());
        feed.update(update("one")).unwrap();
        feed.update(update("two")).unwrap();
        feed.transition(transition("one"));
        assert_eq!(&*updates.try_recv().unwrap().backend, "one");
        assert_eq!(&*updates.try_recv().unwrap().backend, "two");
        assert_eq!(&*a.try_recv().unwrap().backend, "one");
        assert_eq!(&*b.try_recv().unwrap().backend, "one");
        drop(updates);
        assert_eq!(feed.update(update("three")), Err(Closed));
    }

    #[test]
    fn own_updates_go_to_their_channel_and_transitions_to_everyone() {
        let (feed, mut shared) = LocalFeed::new();
        let mut listener = feed.transitions();
        let (tx, mut own) = mpsc::unbounded_channel();
        let instance = OwnUpdates {
            updates: tx,
            feed: feed.clone(),
        };
        instance.update(update("demo.s1")).unwrap();
        instance.transition(transition("demo.s1"));
        assert_eq!(&*own.try_recv().unwrap().backend, "demo.s1");
        assert!(shared.try_recv().is_err(), "not the shared update task's");
        assert_eq!(&*listener.try_recv().unwrap().backend, "demo.s1");
    }
}
