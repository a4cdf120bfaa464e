//! What one MCP session remembers: its log level and its resource
//! subscriptions. rmcp builds one handler, and so one `Session`, per session.

use std::{
    collections::BTreeSet,
    sync::{Arc, Mutex},
};

use crate::{logging::LogThreshold, reconnect::Reconnector};

#[derive(Clone)]
pub struct Session {
    pub log: LogThreshold,
    subscriptions: Arc<Mutex<BTreeSet<String>>>,
    /// Shared by all sessions: closes `test_reconnection` streams.
    pub reconnector: Reconnector,
}

impl Session {
    pub fn new(reconnector: Reconnector) -> Self {
        Self {
            log: LogThreshold::default(),
            subscriptions: Arc::default(),
            reconnector,
        }
    }

    fn with_subscriptions<T>(&self, f: impl FnOnce(&mut BTreeSet<String>) -> T) -> T {
        let mut guard = self
            .subscriptions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&mut guard)
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
