//! Which resources clients watch, per backend connection, and the one
//! backend subscription each needs.
//!
//! A client watches a resource with `resources/subscribe` (handshake era) or
//! by naming it in `subscriptions/listen` (2026-07-28). On a shared backend
//! connection many clients may watch the same URI: the backend is asked once,
//! by the first watcher ([`Connection::watch_resource`]), and told to stop
//! once, when the last one is gone. One client's unsubscribe never ends
//! another's updates. A watch is a [`Hold`]; dropping it releases.
//!
//! The updates themselves reach clients through the session registry
//! (`sessions.rs`): sessions subscribed to the URI and every listen stream
//! whose filter names it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use tokio::task::AbortHandle;

use crate::backend::{BackendError, Connection};

/// A connection (by address, checked alive through `Entry::conn`) and a URI.
type Key = (usize, String);

#[derive(Default)]
pub struct ResourceWatch {
    entries: Mutex<HashMap<Key, Entry>>,
}

struct Entry {
    holders: usize,
    conn: Weak<Connection>,
    /// A 2026-07-28 backend's `subscriptions/listen` task for this URI.
    task: Option<AbortHandle>,
}

/// One client's watch of one resource on one connection.
pub struct Hold {
    watch: Arc<ResourceWatch>,
    key: Key,
}

impl Hold {
    /// The watched resource.
    pub fn uri(&self) -> &str {
        &self.key.1
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.watch.release(&self.key);
    }
}

impl ResourceWatch {
    /// Watches `uri` on `conn`, asking the backend if nobody watched it
    /// there yet. An error (the backend refused) leaves nothing held.
    pub async fn hold(
        self: &Arc<Self>,
        conn: &Arc<Connection>,
        uri: &str,
    ) -> Result<Hold, BackendError> {
        let key = (Arc::as_ptr(conn) as usize, uri.to_owned());
        if self.join(&key) {
            return Ok(self.hold_of(key));
        }
        let task = conn.watch_resource(uri).await?;
        let mut entries = self.lock();
        match entries.get_mut(&key) {
            // Another client asked meanwhile: one backend subscription is
            // enough (a second `resources/subscribe` is harmless).
            Some(e) if e.conn.strong_count() > 0 => {
                e.holders += 1;
                if let Some(t) = task {
                    t.abort();
                }
            }
            _ => {
                entries.insert(
                    key.clone(),
                    Entry {
                        holders: 1,
                        conn: Arc::downgrade(conn),
                        task,
                    },
                );
            }
        }
        drop(entries);
        Ok(self.hold_of(key))
    }

    /// Counts one more holder of an entry whose connection is alive.
    fn join(&self, key: &Key) -> bool {
        let mut entries = self.lock();
        match entries.get_mut(key) {
            Some(e) if e.conn.strong_count() > 0 => {
                e.holders += 1;
                true
            }
            // The connection ended (the backend restarted): its
            // subscriptions went with it; a new connection at the same
            // address starts afresh.
            Some(_) => {
                entries.remove(key);
                false
            }
            None => false,
        }
    }

    fn hold_of(self: &Arc<Self>, key: Key) -> Hold {
        Hold {
            watch: self.clone(),
            key,
        }
    }

    fn release(&self, key: &Key) {
        let mut entries = self.lock();
        let Some(e) = entries.get_mut(key) else {
            return;
        };
        e.holders = e.holders.saturating_sub(1);
        if e.holders > 0 {
            return;
        }
        let Some(e) = entries.remove(key) else { return };
        drop(entries);
        if let Some(task) = e.task {
            task.abort();
        } else if let Some(conn) = e.conn.upgrade()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let uri = key.1.clone();
            runtime.spawn(async move {
                if let Err(e) = conn.unwatch_resource(&uri).await {
                    tracing::debug!(%uri, error = %e, "resources/unsubscribe not applied");
                }
            });
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Entry>> {
        // Each update is one insert/remove or a counter: poisoning cannot
        // leave the map inconsistent.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}
