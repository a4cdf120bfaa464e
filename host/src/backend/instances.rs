//! Instances of a backend run for one client (`share`).
//!
//! A stdio server keeps its state per process: the roots it was given, the
//! memory it was told, the resources a tool made. Shared by everyone
//! (`share = "all"`), one client's state is every client's. With
//! `share = "session"` each client session gets a process of its own, with
//! `"principal"` each caller (`CallerKey`); a 2026-07-28 client, which has
//! no session, is served per caller either way.
//!
//! An instance is a [`Backend`] of its own (named `NAME.s7` or `NAME.p3`,
//! URL-safe, its id in the control API and in `vigil status`) with a
//! supervisor of its own: it is probed, restarted under the backend's
//! policy and quarantined like any other; its transitions are on the event
//! bus, never in the store (it ends with its client). The configured
//! backend keeps its own shared instance: it is what the catalog shows
//! before a client used the backend, and it is never called for a client.
//!
//! An instance starts on its client's first use of the backend (a call, a
//! read, a prompt: not a listing) and lives while a [`Lease`] on it does.
//! A client's pool holds the lease; dropping it (the session ended, or the
//! instance sat unused for `session_idle`) stops the process. At most
//! `[limits] max_instances` live at once: the next is refused with an error
//! that names the key.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use rmcp::RoleServer;
use rmcp::model::ClientCapabilities;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::pool::Pool;
use super::{Backend, BackendError, BackendUpdate, Connection};
use crate::auth::CallerKey;
use crate::catalog::BackendCatalog;
use crate::config::Share;
use crate::health::{HealthState, advertisable};

/// Who an instance serves, and how its connection reaches that client.
#[derive(Clone)]
pub struct Owner {
    /// The client session (`share = "session"`); `None` for a caller's
    /// instance.
    pub session: Option<u64>,
    pub caller: CallerKey,
    /// What the client declared: mirrored, so the server asks only what
    /// the client can answer.
    pub capabilities: Option<ClientCapabilities>,
    /// The client speaks the handshake era.
    pub for_handshake_client: bool,
    /// The client itself, asked `roots/list` when the server asks outside
    /// any call (a session's client only).
    pub client: Option<rmcp::Peer<RoleServer>>,
}

/// What one instance is for: a session, or a caller.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Key {
    Session(u64),
    Caller(CallerKey),
}

/// Starts a supervisor for an instance, reporting to `updates`; the token
/// stops it. `None` when the gateway runs no supervisors (shutting down).
pub type Spawn = Box<
    dyn Fn(Arc<Backend>, mpsc::UnboundedSender<BackendUpdate>) -> Option<CancellationToken>
        + Send
        + Sync,
>;

/// Every live instance, over all backends.
pub struct Instances {
    max: usize,
    spawn: OnceLock<Spawn>,
    live: Mutex<HashMap<(u64, Key), Arc<Instance>>>,
    /// Numbers the ids of callers' instances (a caller's id may hold
    /// anything; the instance id must be URL-safe).
    next_caller: AtomicU64,
}

/// One running instance.
pub struct Instance {
    pub id: Arc<str>,
    /// Its own backend: status, supervisor, connection.
    pub backend: Arc<Backend>,
    /// The configured backend it is an instance of.
    parent: Arc<str>,
    key: Key,
    stop: CancellationToken,
    leases: AtomicUsize,
    /// What it listed last (set before the state that shows it).
    catalog: Mutex<Option<Arc<BackendCatalog>>>,
    /// Its state as its supervisor reported it.
    state: watch::Sender<HealthState>,
    /// The pools that hold a lease: told when what it lists changed.
    pools: Mutex<Vec<Weak<Pool>>>,
}

/// A client's hold on an instance; the instance stops when the last one
/// is dropped.
pub struct Lease {
    instance: Arc<Instance>,
    registry: Weak<Instances>,
    last_used: Mutex<Instant>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Instances {
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            max: max.max(1),
            spawn: OnceLock::new(),
            live: Mutex::default(),
            next_caller: AtomicU64::new(1),
        })
    }

    /// How instances get their supervisors (set once by the gateway).
    pub fn set_spawn(&self, spawn: Spawn) {
        let _ = self.spawn.set(spawn);
    }

    /// The live instance with id `id`.
    pub fn find(&self, id: &str) -> Option<Arc<Backend>> {
        lock(&self.live)
            .values()
            .find(|i| &*i.id == id)
            .map(|i| i.backend.clone())
    }

    /// Every live instance, by id.
    pub fn all(&self) -> Vec<Arc<Backend>> {
        let mut all: Vec<_> = lock(&self.live)
            .values()
            .map(|i| i.backend.clone())
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// How many instances of `backend` are live.
    pub fn count_of(&self, backend: &str) -> usize {
        lock(&self.live)
            .values()
            .filter(|i| &*i.parent == backend)
            .count()
    }

    /// A lease on `owner`'s instance of `backend`, started if there is
    /// none (it may still be starting: see [`Lease::connection`]). `pool`
    /// is told when what the instance lists changes.
    pub fn acquire(
        self: &Arc<Self>,
        backend: &Arc<Backend>,
        owner: Owner,
        pool: &Arc<Pool>,
    ) -> Result<Lease, BackendError> {
        let key = match (backend.config.share, owner.session) {
            (Share::Session, Some(s)) => Key::Session(s),
            _ => Key::Caller(owner.caller.clone()),
        };
        let mut live = lock(&self.live);
        let instance = match live.get(&(backend.uid, key.clone())) {
            Some(i) => i.clone(),
            None => {
                if live.len() >= self.max {
                    return Err(BackendError::TooManyInstances {
                        backend: backend.name.clone(),
                        share: backend.config.share.as_str(),
                        limit: self.max,
                    });
                }
                let id: Arc<str> = match &key {
                    Key::Session(s) => format!("{}.s{s}", backend.name),
                    Key::Caller(_) => format!(
                        "{}.p{}",
                        backend.name,
                        self.next_caller.fetch_add(1, Ordering::Relaxed)
                    ),
                }
                .into();
                let child = backend.instance_for(&id, owner);
                let (updates, reports) = mpsc::unbounded_channel();
                let stop = self
                    .spawn
                    .get()
                    .and_then(|spawn| spawn(child.clone(), updates))
                    .ok_or_else(|| BackendError::Transport {
                        backend: backend.name.clone(),
                        reason: "the gateway is shutting down".into(),
                        stderr: vec![],
                    })?;
                let instance = Arc::new(Instance {
                    id: id.clone(),
                    backend: child,
                    parent: backend.name.clone(),
                    key: key.clone(),
                    stop,
                    leases: AtomicUsize::new(0),
                    catalog: Mutex::default(),
                    state: watch::Sender::new(HealthState::Starting),
                    pools: Mutex::default(),
                });
                tracing::info!(backend = %backend.name, instance = %id, share = backend.config.share.as_str(), "instance for one client starting");
                crate::metrics::get().instances(&backend.name, 1);
                backend
                    .background
                    .spawn_until_shutdown(follow(Arc::downgrade(&instance), reports));
                live.insert((backend.uid, key), instance.clone());
                instance
            }
        };
        instance.leases.fetch_add(1, Ordering::AcqRel);
        let mut pools = lock(&instance.pools);
        pools.retain(|p| p.strong_count() > 0);
        pools.push(Arc::downgrade(pool));
        drop(pools);
        Ok(Lease {
            instance,
            registry: Arc::downgrade(self),
            last_used: Mutex::new(Instant::now()),
        })
    }

    /// A lease was dropped: the last one stops the instance.
    fn release(&self, instance: &Arc<Instance>) {
        if instance.leases.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let mut live = lock(&self.live);
        let key = (instance.parent_uid(), instance.key.clone());
        // A new lease may have come in the meantime (it found the entry).
        if instance.leases.load(Ordering::Acquire) != 0 {
            return;
        }
        if live.get(&key).is_some_and(|i| Arc::ptr_eq(i, instance)) {
            live.remove(&key);
        }
        drop(live);
        tracing::info!(backend = %instance.parent, instance = %instance.id, "instance for one client stopping: no client holds it");
        crate::metrics::get().instances(&instance.parent, -1);
        instance.stop.cancel();
    }
}

impl Instance {
    fn parent_uid(&self) -> u64 {
        self.backend.parent_uid()
    }
}

/// Follows an instance's supervisor: what it lists goes to the pools that
/// hold it, its state to whoever waits for it to come up.
async fn follow(instance: Weak<Instance>, mut reports: mpsc::UnboundedReceiver<BackendUpdate>) {
    while let Some(update) = reports.recv().await {
        let Some(i) = instance.upgrade() else { return };
        if let Some(listed) = update.catalog {
            let listed = Arc::new(listed);
            let changed = lock(&i.catalog)
                .replace(listed.clone())
                .is_none_or(|old| *old != *listed);
            if changed {
                let pools: Vec<_> = lock(&i.pools).iter().filter_map(Weak::upgrade).collect();
                tracing::debug!(instance = %i.id, pools = pools.len(), "instance listing changed");
                for p in pools {
                    p.own_changed();
                }
            }
            i.backend.listing_applied();
        }
        i.state.send_replace(update.state);
    }
}

impl Lease {
    pub fn id(&self) -> &Arc<str> {
        &self.instance.id
    }

    /// What the instance listed last.
    pub fn catalog(&self) -> Option<Arc<BackendCatalog>> {
        lock(&self.instance.catalog).clone()
    }

    /// Whether the instance is still the one of `backend` (a reload that
    /// replaced the backend leaves it behind).
    pub fn of(&self, backend: &Backend) -> bool {
        self.instance.backend.parent_uid() == backend.uid
    }

    /// The instance's connection, if it is up now.
    pub fn shared(&self) -> Option<Arc<Connection>> {
        self.instance.backend.shared()
    }

    pub fn touch(&self) {
        *lock(&self.last_used) = Instant::now();
    }

    pub fn idle_for(&self, now: Instant) -> Duration {
        now.duration_since(*lock(&self.last_used))
    }

    /// The instance's connection, once it is up: waits while it starts
    /// (its start is bounded by `connect_timeout`, first listing included),
    /// and fails at once when it is down, saying why.
    pub async fn connection(&self, within: Duration) -> Result<Arc<Connection>, BackendError> {
        self.touch();
        let b = &self.instance.backend;
        let mut state = self.instance.state.subscribe();
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let now = *state.borrow_and_update();
            if advertisable(now)
                && let Some(conn) = b.shared()
            {
                return Ok(conn);
            }
            if !matches!(now, HealthState::Starting | HealthState::Running) {
                let status = b.status();
                return Err(BackendError::Transport {
                    backend: self.instance.parent.clone(),
                    reason: format!(
                        "its instance {} for this client is {}{}",
                        self.instance.id,
                        now.as_str(),
                        if status.reason.is_empty() {
                            String::new()
                        } else {
                            format!(": {}", status.reason)
                        }
                    ),
                    stderr: vec![],
                });
            }
            match tokio::time::timeout_at(deadline, state.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => {
                    return Err(BackendError::Timeout {
                        backend: self.instance.parent.clone(),
                        timeout: within,
                    });
                }
            }
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(r) = self.registry.upgrade() {
            r.release(&self.instance);
        } else {
            self.instance.stop.cancel();
        }
    }
}

/// Where an instance's unsolicited traffic goes: its `list_changed`
/// re-lists the instance (its supervisor reports the listing to the pools
/// that hold it); its log messages and resource updates reach its client
/// only, under the configured backend's name.
pub(super) struct ForOwner {
    pub inner: Arc<dyn super::Downstream>,
    pub parent: Arc<str>,
    pub session: Option<u64>,
    pub caller: CallerKey,
    /// The instance itself.
    pub instance: Weak<Backend>,
}

impl super::Downstream for ForOwner {
    fn list_changed(&self, _backend: &Arc<str>, kind: super::ListKind) {
        if let Some(b) = self.instance.upgrade() {
            tracing::debug!(instance = %b.name, ?kind, "instance announced a list change; re-listing it");
            b.request_refresh();
        }
    }
    fn log(
        &self,
        _backend: &Arc<str>,
        _session: Option<u64>,
        params: rmcp::model::LoggingMessageNotificationParam,
    ) {
        match self.session {
            Some(s) => self.inner.log(&self.parent, Some(s), params),
            None => self.inner.caller_log(&self.parent, &self.caller, params),
        }
    }
    fn resource_updated(&self, _backend: &Arc<str>, _session: Option<u64>, uri: String) {
        match self.session {
            Some(s) => self.inner.resource_updated(&self.parent, Some(s), uri),
            None => self
                .inner
                .caller_resource_updated(&self.parent, &self.caller, uri),
        }
    }
    fn lane_log(
        &self,
        _backend: &Arc<str>,
        _principal: &CallerKey,
        params: rmcp::model::LoggingMessageNotificationParam,
    ) {
        self.log(&self.parent, None, params);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend(share: &str) -> Arc<Backend> {
        crate::backend::testutil::stdio(&format!("share = \"{share}\""))
    }

    fn owner(session: Option<u64>, caller: &str) -> Owner {
        Owner {
            session,
            caller: crate::auth::Principal::key(caller).caller().clone(),
            capabilities: None,
            for_handshake_client: true,
            client: None,
        }
    }

    /// A registry whose supervisors are not run: each spawn is recorded
    /// by the token that would stop it.
    fn registry(max: usize) -> (Arc<Instances>, Arc<Mutex<Vec<CancellationToken>>>) {
        let r = Instances::new(max);
        let spawned: Arc<Mutex<Vec<CancellationToken>>> = Arc::default();
        let seen = spawned.clone();
        r.set_spawn(Box::new(move |_child, _updates| {
            let t = CancellationToken::new();
            lock(&seen).push(t.clone());
            Some(t)
        }));
        (r, spawned)
    }

    fn pool(r: &Arc<Instances>) -> Arc<Pool> {
        Pool::new(
            1,
            Arc::new(super::super::pool::Context {
                generations: Default::default(),
                naming: crate::config::Naming::Prefix {
                    separator: "__".into(),
                },
                exchanger: None,
                views: Default::default(),
                instances: r.clone(),
            }),
        )
    }

    #[tokio::test]
    async fn one_instance_per_session_named_by_it_and_stopped_with_its_last_lease() {
        let (r, spawned) = registry(4);
        let b = backend("session");
        let p = pool(&r);
        let first = r.acquire(&b, owner(Some(7), "alice"), &p).unwrap();
        let again = r.acquire(&b, owner(Some(7), "alice"), &p).unwrap();
        let other = r.acquire(&b, owner(Some(8), "alice"), &p).unwrap();
        assert_eq!(&**first.id(), "mem.s7");
        assert_eq!(
            first.id(),
            again.id(),
            "the same session, the same instance"
        );
        assert_eq!(&**other.id(), "mem.s8");
        assert_eq!(lock(&spawned).len(), 2);
        assert_eq!(r.count_of("mem"), 2);
        assert!(r.find("mem.s7").is_some());
        drop(first);
        assert!(!lock(&spawned)[0].is_cancelled(), "a lease is still held");
        drop(again);
        assert!(lock(&spawned)[0].is_cancelled(), "the last lease stops it");
        assert!(r.find("mem.s7").is_none());
        assert!(!lock(&spawned)[1].is_cancelled());
        drop(other);
        assert_eq!(r.count_of("mem"), 0);
    }

    #[tokio::test]
    async fn a_caller_shares_one_instance_and_the_cap_refuses_the_next() {
        let (r, spawned) = registry(2);
        let b = backend("principal");
        let p = pool(&r);
        let a1 = r.acquire(&b, owner(Some(1), "alice"), &p).unwrap();
        let a2 = r.acquire(&b, owner(Some(2), "alice"), &p).unwrap();
        assert_eq!(a1.id(), a2.id(), "share = principal: one per caller");
        assert!(a1.id().starts_with("mem.p"), "{}", a1.id());
        let _bob = r.acquire(&b, owner(Some(3), "bob"), &p).unwrap();
        let refused = r.acquire(&b, owner(Some(4), "carol"), &p).err().unwrap();
        assert!(
            matches!(refused, BackendError::TooManyInstances { limit: 2, .. }),
            "{refused}"
        );
        assert!(refused.to_string().contains("limits.max_instances"));
        assert_eq!(lock(&spawned).len(), 2);
        // A session-mode backend's sessionless client is served per caller.
        let s = backend("session");
        drop(a1);
        drop(a2);
        let sessionless = r.acquire(&s, owner(None, "alice"), &p).unwrap();
        assert!(
            sessionless.id().starts_with("mem.p"),
            "{}",
            sessionless.id()
        );
    }
}
