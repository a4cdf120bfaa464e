//! What one MCP session remembers: its log level and its resource
//! subscriptions; and what all sessions share. rmcp builds one handler, and
//! so one `Session`, per session (and per stateless 2026-07-28 request).

use std::{
    collections::{BTreeSet, VecDeque},
    sync::{Arc, Mutex},
};

use tokio::sync::broadcast;

use crate::{
    changes::{Changes, List},
    logging::LogThreshold,
    mrtr::Sealer,
    reconnect::Reconnector,
};

/// What every session shares.
#[derive(Clone)]
pub struct Shared {
    /// Closes `test_reconnection` streams.
    pub reconnector: Reconnector,
    /// List changes and their listeners.
    pub changes: Changes,
    /// Seals and opens MRTR `requestState`.
    pub sealer: Sealer,
}

#[derive(Clone)]
pub struct Session {
    pub log: LogThreshold,
    subscriptions: Arc<Mutex<BTreeSet<String>>>,
    /// Change receivers taken for `subscriptions/listen` requests between
    /// their acceptance and their acknowledgment, oldest first.
    listeners: Arc<Mutex<VecDeque<broadcast::Receiver<List>>>>,
    pub shared: Shared,
}

impl Session {
    pub fn new(shared: Shared) -> Self {
        Self {
            log: LogThreshold::default(),
            subscriptions: Arc::default(),
            listeners: Arc::default(),
            shared,
        }
    }

    fn with_subscriptions<T>(&self, f: impl FnOnce(&mut BTreeSet<String>) -> T) -> T {
        f(&mut lock(&self.subscriptions))
    }

    /// Take a change receiver for a listen request rmcp is about to
    /// acknowledge.
    pub fn prepare_listener(&self) {
        let receiver = self.shared.changes.subscribe();
        lock(&self.listeners).push_back(receiver);
    }

    /// The receiver [`Self::prepare_listener`] took for the listen request
    /// now running. When two listen requests of one session race, either
    /// gets the older receiver, which misses nothing the newer one has.
    pub fn take_listener(&self) -> broadcast::Receiver<List> {
        lock(&self.listeners)
            .pop_front()
            .unwrap_or_else(|| self.shared.changes.subscribe())
    }

    pub fn subscribe(&self, uri: &str) {
        self.with_subscriptions(|set| set.insert(uri.to_owned()));
    }

    pub fn unsubscribe(&self, uri: &str) {
        self.with_subscriptions(|set| set.remove(uri));
    }

    pub fn is_subscribed(&self, uri: &str) -> bool {
        self.with_subscriptions(|set| set.contains(uri))
    }
}

/// Lock a mutex, recovering the data if a panicking thread poisoned it.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
