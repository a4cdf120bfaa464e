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
//! A watch on a backend's shared connection, or on a client pool's
//! connection to it, is kept by the backend's name (and the pool), not by
//! the connection: when another instance serves the backend (a restart,
//! an update's new version), [`ResourceWatch::follow`] asks the
//! connection that reaches it now for every URI still watched (opening
//! the pool's again), lets go of the old one, and tells the watchers the
//! resource may have changed (an update due in between went with the old
//! instance). A watch on a capability set's variant ends with it.
//!
//! The updates themselves reach clients through the session registry
//! (`sessions.rs`): sessions subscribed to the URI and every listen stream
//! whose filter names it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use tokio::task::AbortHandle;

use crate::backend::pool::Pool;
use crate::backend::{Backend, BackendError, Connection};

/// How the connection a watch stands on was reached, so that it can be
/// reached again on the backend's next instance.
#[derive(Clone)]
pub enum Via {
    /// The backend's shared connection.
    Shared,
    /// A client's pool (its own backend session or instance).
    Pool(Weak<Pool>),
    /// Only this connection (a capability set's variant).
    Only,
}

/// Where a watch stands.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Slot {
    /// On the shared connection of the backend so named, whichever
    /// instance serves it.
    Shared(Arc<str>),
    /// On the connection of the pool (by address) to the backend so
    /// named.
    Pool(usize, Arc<str>),
    /// On one connection (by address; [`Watched::on`] tells a new
    /// connection at a reused address).
    Only(usize),
}

impl Slot {
    fn of(backend: &Arc<str>) -> impl Fn(&Slot) -> bool + '_ {
        move |s| match s {
            Slot::Shared(b) | Slot::Pool(_, b) => b == backend,
            Slot::Only(_) => false,
        }
    }
}

type Key = (Slot, String);

/// Tells every watcher of a URI that it may have changed.
pub type Moved = Box<dyn Fn(String) + Send + Sync>;

pub struct ResourceWatch {
    entries: Mutex<HashMap<Key, Entry>>,
    moved: Moved,
}

struct Entry {
    holders: usize,
    via: Via,
    watched: Watched,
}

/// The backend subscription of one URI on one connection.
struct Watched {
    conn: Weak<Connection>,
    /// A 2026-07-28 backend's `subscriptions/listen` task for this URI.
    task: Option<AbortHandle>,
}

impl Watched {
    /// Whether this is the subscription on `conn`, which still stands.
    fn on(&self, conn: &Arc<Connection>) -> bool {
        self.conn.strong_count() > 0 && std::ptr::eq(self.conn.as_ptr(), Arc::as_ptr(conn))
    }

    /// A second subscription of a URI already watched on the same
    /// connection: its listen task ends; a second `resources/subscribe`
    /// needs no undoing (one unsubscribe would end both).
    fn duplicate(self) {
        if let Some(task) = self.task {
            task.abort();
        }
    }

    /// Ends the backend subscription: its listen task, or an
    /// `resources/unsubscribe` if its connection is still open.
    fn let_go(self, uri: &str) {
        if let Some(task) = self.task {
            task.abort();
        } else if let Some(conn) = self.conn.upgrade()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let uri = uri.to_owned();
            runtime.spawn(async move {
                if let Err(e) = conn.unwatch_resource(&uri).await {
                    tracing::debug!(%uri, error = %e, "resources/unsubscribe not applied");
                }
            });
        }
    }
}

/// One client's watch of one resource.
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
    /// `moved` tells a URI's watchers it may have changed, when its watch
    /// moved to another connection.
    pub fn new(moved: Moved) -> Self {
        ResourceWatch {
            entries: Mutex::default(),
            moved,
        }
    }

    /// Watches `uri` on `conn` (to `backend`, reached `via`), asking the
    /// backend if nobody watched it there yet. An error (the backend
    /// refused) leaves nothing held.
    pub async fn hold(
        self: &Arc<Self>,
        conn: &Arc<Connection>,
        uri: &str,
        backend: &Arc<str>,
        via: Via,
    ) -> Result<Hold, BackendError> {
        let slot = match &via {
            Via::Shared => Slot::Shared(backend.clone()),
            Via::Pool(pool) => Slot::Pool(pool.as_ptr() as usize, backend.clone()),
            Via::Only => Slot::Only(Arc::as_ptr(conn) as usize),
        };
        let key = (slot, uri.to_owned());
        if self.join(&key, conn) {
            return Ok(self.hold_of(key));
        }
        let task = conn.watch_resource(uri).await?;
        let fresh = Watched {
            conn: Arc::downgrade(conn),
            task,
        };
        let mut entries = self.lock();
        let old = match entries.get_mut(&key) {
            // Another client asked meanwhile: one backend subscription is
            // enough (a second `resources/subscribe` is harmless).
            Some(e) if e.watched.on(conn) => {
                e.holders += 1;
                fresh.duplicate();
                None
            }
            // Watched on an instance before this one: it moves here.
            Some(e) => {
                e.holders += 1;
                Some(std::mem::replace(&mut e.watched, fresh))
            }
            None => {
                entries.insert(
                    key.clone(),
                    Entry {
                        holders: 1,
                        via,
                        watched: fresh,
                    },
                );
                None
            }
        };
        drop(entries);
        if let Some(old) = old {
            old.let_go(uri);
            (self.moved)(uri.to_owned());
        }
        Ok(self.hold_of(key))
    }

    /// Moves every watch of backend `b` that stands elsewhere (an earlier
    /// instance, an ended connection) to the connection that reaches it
    /// now (the pool's is opened again); its watchers hear the resource
    /// may have changed. A URI the new instance refuses, or a connection
    /// that cannot be opened, leaves the watch where it was (a later
    /// listing tries again).
    pub async fn follow(&self, b: &Arc<Backend>) {
        let name = &b.name;
        let watched: Vec<(Key, Via)> = self
            .lock()
            .iter()
            .filter(|((slot, _), _)| Slot::of(name)(slot))
            .map(|(k, e)| (k.clone(), e.via.clone()))
            .collect();
        for (key, via) in watched {
            let conn = match via {
                Via::Shared => b.shared(),
                Via::Pool(pool) => match pool.upgrade() {
                    Some(pool) => match pool.connection(b, false).await {
                        Ok(conn) => Some(conn),
                        Err(e) => {
                            tracing::info!(backend = %name, uri = %key.1, error = %e, "could not reach the backend's new instance for a client's watched resource");
                            None
                        }
                    },
                    None => None,
                },
                Via::Only => None,
            };
            let Some(conn) = conn else { continue };
            if self.lock().get(&key).is_none_or(|e| e.watched.on(&conn)) {
                continue;
            }
            let task = match conn.watch_resource(&key.1).await {
                Ok(task) => task,
                Err(e) => {
                    tracing::info!(backend = %name, uri = %key.1, error = %e, "the backend's new instance did not take a watched resource; its watchers get no updates of it until it does");
                    continue;
                }
            };
            let fresh = Watched {
                conn: Arc::downgrade(&conn),
                task,
            };
            let mut entries = self.lock();
            match entries.get_mut(&key) {
                Some(e) if !e.watched.on(&conn) => {
                    let old = std::mem::replace(&mut e.watched, fresh);
                    drop(entries);
                    old.let_go(&key.1);
                    tracing::debug!(backend = %name, uri = %key.1, "resource watch moved to the backend's new instance");
                    (self.moved)(key.1);
                }
                // A new watcher moved it here meanwhile.
                Some(_) => fresh.duplicate(),
                // Nobody watches it any more.
                None => {
                    drop(entries);
                    fresh.let_go(&key.1);
                }
            }
        }
    }

    /// Whether nothing is watched.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Counts one more holder of an entry watched on `conn`.
    fn join(&self, key: &Key, conn: &Arc<Connection>) -> bool {
        match self.lock().get_mut(key) {
            Some(e) if e.watched.on(conn) => {
                e.holders += 1;
                true
            }
            _ => false,
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
        e.watched.let_go(&key.1);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Entry>> {
        // Each update is one insert/remove or a counter: poisoning cannot
        // leave the map inconsistent.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}
