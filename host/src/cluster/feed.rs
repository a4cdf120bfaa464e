//! The feed: what supervisors report, and who hears it.
//!
//! A supervisor reports each change of its backend (state, listing) for
//! the task that publishes generations, and each health transition for
//! whoever listens (the control API's event stream, notifier plugins).
//! [`Feed`] is that seam; [`LocalFeed`] its one implementation.
//!
//! With several replicas (`cluster::postgres`), every replica builds its
//! own generations from its own connections to each backend, so updates
//! stay in their replica. What crosses replicas is what the lease holder
//! of a shared backend learns: its health transitions (announced by the
//! store when it writes them) and a change of its listing
//! ([`Feed::relisted`]). The store's listener hands what another replica
//! announced back here ([`LocalFeed::heard_elsewhere`]): transitions to
//! [`Feed::transitions`] (not to [`Feed::own_transitions`]: a notifier
//! alerts once, from the replica that saw it), and a bump of the
//! backend's [`Heard`] to the supervisor that follows it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{broadcast, mpsc, watch};

use crate::backend::BackendUpdate;
use crate::health::Transition;

/// Nobody takes updates any more (the process is shutting down).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the backend update feed is closed (shutting down)")]
pub struct Closed;

/// What other replicas said about one backend so far: counters a
/// follower compares with what it last acted on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Heard {
    /// Its stored health changed (a transition, a new instance record).
    pub health: u64,
    /// Its lease holder saw its listing change.
    pub listing: u64,
}

/// What this replica announces to the others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Announce {
    /// `backend`'s listing changed, as its lease holder here saw it.
    Relisted(Arc<str>),
}

/// Where supervisors report.
pub trait Feed: Send + Sync + 'static {
    /// A backend's state or listing changed.
    fn update(&self, update: BackendUpdate) -> Result<(), Closed>;
    /// A health transition happened here (already recorded in the store,
    /// when there is one).
    fn transition(&self, transition: Transition);
    /// Every transition from now on, this replica's and those other
    /// replicas announced.
    fn transitions(&self) -> broadcast::Receiver<Transition>;
    /// This replica's transitions from now on.
    fn own_transitions(&self) -> broadcast::Receiver<Transition>;
    /// The lease holder of `backend` here saw its listing change: the other
    /// replicas list it again.
    fn relisted(&self, backend: &str);
    /// What other replicas said about `backend` (never changes with one
    /// replica).
    fn heard(&self, backend: &str) -> watch::Receiver<Heard>;
}

/// The feed of one process: an unbounded channel of updates to its update
/// task, broadcasts of transitions, and, with several replicas, what it
/// announces and what it heard.
pub struct LocalFeed {
    updates: mpsc::UnboundedSender<BackendUpdate>,
    everyone: broadcast::Sender<Transition>,
    own: broadcast::Sender<Transition>,
    /// To the store's announcer, with several replicas.
    announce: Option<mpsc::UnboundedSender<Announce>>,
    heard: Mutex<HashMap<Arc<str>, watch::Sender<Heard>>>,
}

/// Transitions a listener may fall behind by before it is told it lagged:
/// room for a mass restart of a thousand backends (three transitions
/// each).
pub const TRANSITIONS_KEPT: usize = 16 * 1024;

impl LocalFeed {
    /// The feed, and the updates its supervisors send, in order.
    pub fn new() -> (Arc<LocalFeed>, mpsc::UnboundedReceiver<BackendUpdate>) {
        Self::with_announcer(None)
    }

    /// [`LocalFeed::new`], announcing to `announce` (the store's
    /// announcer, with several replicas).
    pub fn with_announcer(
        announce: Option<mpsc::UnboundedSender<Announce>>,
    ) -> (Arc<LocalFeed>, mpsc::UnboundedReceiver<BackendUpdate>) {
        let (updates, rx) = mpsc::unbounded_channel();
        (
            Arc::new(LocalFeed {
                updates,
                everyone: broadcast::channel(TRANSITIONS_KEPT).0,
                own: broadcast::channel(TRANSITIONS_KEPT).0,
                announce,
                heard: Mutex::default(),
            }),
            rx,
        )
    }

    fn heard_of(&self, backend: &str) -> watch::Sender<Heard> {
        let mut heard = self.heard.lock().unwrap_or_else(|e| e.into_inner());
        heard
            .entry(backend.into())
            .or_insert_with(|| watch::channel(Heard::default()).0)
            .clone()
    }

    /// Another replica announced something about `backend`: its
    /// `transitions` (as stored), a health change, a listing change.
    pub fn heard_elsewhere(
        &self,
        backend: &str,
        transitions: Vec<Transition>,
        health: bool,
        listing: bool,
    ) {
        for t in transitions {
            let _ = self.everyone.send(t);
        }
        self.heard_of(backend).send_modify(|h| {
            h.health += u64::from(health);
            h.listing += u64::from(listing);
        });
    }

    /// Everything may have been missed (the listener reconnected): every
    /// followed backend looks again.
    pub fn heard_everything(&self) {
        let heard = self.heard.lock().unwrap_or_else(|e| e.into_inner());
        for h in heard.values() {
            h.send_modify(|h| {
                h.health += 1;
                h.listing += 1;
            });
        }
    }
}

impl Feed for LocalFeed {
    fn update(&self, update: BackendUpdate) -> Result<(), Closed> {
        self.updates.send(update).map_err(|_| Closed)
    }
    fn transition(&self, transition: Transition) {
        // Nobody listening is fine: transitions are for whoever listens.
        let _ = self.own.send(transition.clone());
        let _ = self.everyone.send(transition);
    }
    fn transitions(&self) -> broadcast::Receiver<Transition> {
        self.everyone.subscribe()
    }
    fn own_transitions(&self) -> broadcast::Receiver<Transition> {
        self.own.subscribe()
    }
    fn relisted(&self, backend: &str) {
        if let Some(a) = &self.announce {
            let _ = a.send(Announce::Relisted(backend.into()));
        }
    }
    fn heard(&self, backend: &str) -> watch::Receiver<Heard> {
        self.heard_of(backend).subscribe()
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
    fn own_transitions(&self) -> broadcast::Receiver<Transition> {
        self.feed.own_transitions()
    }
    /// An instance of one client's is this replica's alone.
    fn relisted(&self, _: &str) {}
    fn heard(&self, backend: &str) -> watch::Receiver<Heard> {
        self.feed.heard(backend)
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

    #[test]
    fn what_another_replica_said_reaches_listeners_and_followers_but_not_notifiers() {
        let (tx, mut announced) = mpsc::unbounded_channel();
        let (feed, _updates) = LocalFeed::with_announcer(Some(tx));
        let (mut all, mut own) = (feed.transitions(), feed.own_transitions());
        let mut heard = feed.heard("one");
        feed.heard_elsewhere("one", vec![transition("one")], true, false);
        assert_eq!(&*all.try_recv().unwrap().backend, "one");
        assert!(own.try_recv().is_err(), "a notifier here does not alert");
        assert!(heard.has_changed().unwrap());
        assert_eq!(
            *heard.borrow_and_update(),
            Heard {
                health: 1,
                listing: 0
            }
        );
        feed.heard_everything();
        assert_eq!(
            *heard.borrow_and_update(),
            Heard {
                health: 2,
                listing: 1
            }
        );
        // Its own transitions reach both.
        feed.transition(transition("two"));
        assert_eq!(&*own.try_recv().unwrap().backend, "two");
        assert_eq!(&*all.try_recv().unwrap().backend, "two");
        feed.relisted("one");
        assert_eq!(
            announced.try_recv().unwrap(),
            Announce::Relisted("one".into())
        );
    }
}
