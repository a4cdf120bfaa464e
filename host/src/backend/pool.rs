//! One client session's own backend connections, and what it lists
//! through them.
//!
//! Every HTTP backend gives each registered client session its own backend
//! session: one connection per (session, backend), opened on first use. A
//! `forward_auth` backend goes further: the connection carries the client's
//! own `Authorization` header, what it lists is *this session's* catalog of
//! that backend, and the session sees the shared catalog with that entry
//! replaced ([`Pool::current`]). Nothing here is shared between sessions, so
//! no request travels with another session's credentials and one session's
//! refresh never changes another's catalog.
//!
//! A stdio backend with `share` other than `"all"` gives the client a
//! process of its own instead (`instances.rs`): the pool holds its lease,
//! routes through it and shows what it lists, and lets go of it when the
//! pool is dropped (the session ended) or it sat unused for
//! `session_idle`.
//!
//! A connection is reopened when it closed, when the backend came up as a
//! new instance, when the client's `Authorization` changed, or after a
//! reload replaced the backend. A `forward_auth` connection unused for the
//! backend's `session_idle` is closed ([`Pool::reap_idle`]); its catalog
//! stays, and the next use reopens and re-lists.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use rmcp::model::ClientCapabilities;
use tokio::sync::Notify;

use super::Era;
use super::capset::CapSet;
use super::generation::Generations;
use super::instances::{Lease, Owner};
use super::{Backend, BackendError, Connection};
use crate::auth::exchange::Exchanger;
use crate::catalog::{BackendCatalog, Catalog};
use crate::config::Naming;
use crate::freshness::poller::Listing;
use crate::health::advertisable;

/// What every pool reads of its surroundings, handed in when it is made:
/// the generation in force (for its backend set), the naming rule, the
/// token exchanger. Not a
/// reference to the gateway: a pool depends on these, nothing above.
pub struct Context {
    pub generations: Generations,
    pub naming: Naming,
    pub exchanger: Option<Arc<Exchanger>>,
    /// What each capability set sees (shared by every pool).
    pub views: super::views::Views,
    /// The instances run for one client (`share`).
    pub instances: Arc<super::instances::Instances>,
}

impl Context {
    /// What a client of `capset` sees of `shared` (before its own
    /// `forward_auth` catalogs, see [`Pool::derive`]).
    pub async fn view(&self, shared: Arc<Catalog>, capset: &CapSet) -> Arc<Catalog> {
        self.views
            .of(&self.generations, &self.naming, shared, capset)
            .await
    }
}

pub struct Pool {
    /// Itself (for what its connections call back).
    me: Weak<Pool>,
    session: u64,
    /// A sessionless caller's pool (`caller_pools`), not a session's.
    sessionless: bool,
    /// The session's calls share its caller's lanes (`lane.rs`): it sees
    /// what they list beyond the shared listing.
    lanes: std::sync::atomic::AtomicBool,
    /// The session's client (instances of its own ask it for roots).
    client: Mutex<Option<rmcp::Peer<rmcp::RoleServer>>>,
    ctx: Arc<Context>,
    /// The client's `Authorization` header as last seen on its requests
    /// (with `[auth.oauth]`: `Bearer` and the token it authenticated with).
    auth: Mutex<Option<String>>,
    /// Who the client is, as of its last request (the key of exchanged
    /// tokens).
    principal: Mutex<crate::auth::Principal>,
    capabilities: Mutex<Option<ClientCapabilities>>,
    /// The set of `capabilities` (what the client is shown and called
    /// through, see `capset.rs`).
    capset: Mutex<CapSet>,
    slots: Mutex<HashMap<Arc<str>, Arc<Slot>>>,
    /// Bumped whenever one of this session's own catalogs changes.
    version: AtomicU64,
    /// The last derived view.
    cache: Mutex<Option<Derived>>,
    /// The resync workers of the session and of its listen streams, woken
    /// when an own catalog changed.
    wakers: Mutex<Vec<Weak<Notify>>>,
}

/// What a client listed of a backend itself ([`Pool::view`]).
enum Own {
    /// Its whole catalog of the backend (`forward_auth`, its own instance).
    Replaces(Arc<BackendCatalog>),
    /// What its backend session lists, of which the extras are shown.
    Adds(Arc<BackendCatalog>),
}

/// A view and what it was derived from: (shared snapshot, version).
type Derived = (Arc<Catalog>, u64, Arc<Catalog>);

/// The connection to one backend.
struct Slot {
    /// [`Backend::uid`] it was opened for.
    uid: u64,
    state: tokio::sync::Mutex<SlotState>,
    /// `forward_auth`: what this session listed (read without waiting for
    /// a handshake or listing in progress).
    catalog: Mutex<Option<Arc<BackendCatalog>>>,
    /// `share` other than `"all"`: the client's own instance.
    lease: Mutex<Option<Arc<Lease>>>,
    /// Completed listings, for single-flight re-listing.
    listings: AtomicU64,
    /// Held by the one listing in flight. Apart from `state`, so a slow
    /// listing never holds up requests on the connection.
    listing: tokio::sync::Mutex<()>,
    last_used: Mutex<Instant>,
    /// The last failed opening: with which `Authorization`, on which
    /// instance, when. [`Pool::ensure`] does not repeat it for a while.
    failed: Mutex<Option<(Option<String>, u64, Instant)>>,
}

/// How long [`Pool::ensure`] leaves a connection that failed to open
/// (say, the backend refused the client's token) before trying again with
/// the same credentials on the same instance. A request that needs the
/// connection always tries.
const RETRY_FAILED_AFTER: Duration = Duration::from_secs(5);

#[derive(Default)]
struct SlotState {
    conn: Option<Arc<Connection>>,
    /// The `Authorization` the connection carries.
    auth: Option<String>,
    /// [`Backend::instance`] it was opened on.
    instance: u64,
    /// `forward_auth`: becomes `true` once the connection's first listing
    /// ended (either way); its opener is still listing until then.
    listed: Option<tokio::sync::watch::Receiver<bool>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Pool {
    /// A client session's pool.
    pub fn new(session: u64, ctx: Arc<Context>) -> Arc<Self> {
        Self::make(session, false, ctx)
    }

    /// A sessionless caller's pool (numbered `id`).
    pub fn for_caller(id: u64, ctx: Arc<Context>) -> Arc<Self> {
        Self::make(id, true, ctx)
    }

    fn make(session: u64, sessionless: bool, ctx: Arc<Context>) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            me: me.clone(),
            session,
            sessionless,
            lanes: Default::default(),
            client: Mutex::default(),
            ctx,
            auth: Mutex::default(),
            principal: Mutex::new(crate::auth::Principal::local()),
            capabilities: Mutex::default(),
            capset: Mutex::default(),
            slots: Mutex::default(),
            version: AtomicU64::new(0),
            cache: Mutex::default(),
            wakers: Mutex::default(),
        })
    }

    /// `waker` is notified whenever one of this session's own catalogs
    /// changes (a resync worker's wake-up).
    pub fn on_change(&self, waker: &Arc<Notify>) {
        let mut w = lock(&self.wakers);
        w.retain(|w| w.strong_count() > 0);
        w.push(Arc::downgrade(waker));
    }

    /// Records what the client sent with a request: its `Authorization`
    /// header (the latest wins: a client may refresh its token) and its
    /// capabilities (mirrored on new backend connections).
    /// Runs on every request: allocates only when the header changed, and
    /// reads the capabilities (fixed for a session) once.
    pub fn observe(
        &self,
        auth: Option<&str>,
        principal: crate::auth::Principal,
        capabilities: impl FnOnce() -> Option<ClientCapabilities>,
    ) {
        let mut cur = lock(&self.auth);
        if cur.as_deref() != auth {
            *cur = auth.map(str::to_owned);
        }
        drop(cur);
        let mut who = lock(&self.principal);
        if *who != principal {
            *who = principal;
        }
        drop(who);
        let mut caps = lock(&self.capabilities);
        if caps.is_none() {
            *caps = capabilities();
            *lock(&self.capset) = CapSet::of(caps.as_ref());
        }
    }

    /// The session's client, asked for its roots by instances of its own
    /// outside any call.
    pub fn know_client(&self, peer: &rmcp::Peer<rmcp::RoleServer>) {
        let mut c = lock(&self.client);
        if c.is_none() && !self.sessionless {
            *c = Some(peer.clone());
        }
    }

    /// Whether the session's calls share its caller's lanes (set when it
    /// is registered).
    pub fn use_lanes(&self, on: bool) {
        self.lanes.store(on, Ordering::Release);
    }

    /// What one of this pool's instances, its own backend sessions or its
    /// caller's lanes list changed: its sessions re-derive their lists.
    pub fn own_changed(&self) {
        self.version.fetch_add(1, Ordering::AcqRel);
        for w in lock(&self.wakers).iter().filter_map(Weak::upgrade) {
            w.notify_one();
        }
    }

    /// The connection to this client's own instance of `b` (`share`),
    /// started on first use.
    async fn instance_connection(
        self: &Arc<Self>,
        b: &Arc<Backend>,
    ) -> Result<Arc<Connection>, BackendError> {
        let slot = self.slot(b);
        let lease = {
            let mut held = lock(&slot.lease);
            match held.as_ref().filter(|l| l.of(b)) {
                Some(l) => l.clone(),
                None => {
                    let capset = self.capset();
                    let owner = Owner {
                        session: (!self.sessionless).then_some(self.session),
                        caller: lock(&self.principal).caller().clone(),
                        capabilities: lock(&self.capabilities).clone(),
                        for_handshake_client: !capset.is_modern(),
                        client: lock(&self.client).clone(),
                    };
                    let l = Arc::new(self.ctx.instances.acquire(b, owner, self)?);
                    *held = Some(l.clone());
                    l
                }
            }
        };
        let within = b.connect_timeout() + b.bounds.request;
        lease.connection(within).await
    }

    /// Whether this client holds an instance of its own of `b`.
    pub fn has_instance(&self, b: &Backend) -> bool {
        lock(&self.slots)
            .get(&b.name)
            .is_some_and(|s| lock(&s.lease).as_ref().is_some_and(|l| l.of(b)))
    }

    /// The client's capability set (empty until its capabilities are seen).
    pub fn capset(&self) -> CapSet {
        lock(&self.capset).clone()
    }

    fn slot(&self, b: &Backend) -> Arc<Slot> {
        let mut slots = lock(&self.slots);
        if let Some(s) = slots.get(&b.name).filter(|s| s.uid == b.uid) {
            return s.clone();
        }
        let s = Arc::new(Slot {
            uid: b.uid,
            state: Default::default(),
            catalog: Mutex::default(),
            listings: AtomicU64::new(0),
            listing: tokio::sync::Mutex::new(()),
            last_used: Mutex::new(Instant::now()),
            failed: Mutex::default(),
            lease: Mutex::default(),
        });
        slots.insert(b.name.clone(), s.clone());
        s
    }

    /// This session's connection to `b`, opened (and for a `forward_auth`
    /// backend, listed) if there is none fit for use. Concurrent callers
    /// wait for one handshake. The first listing runs after the slot is
    /// free again, so requests never wait on it; a caller that needs what
    /// it lists (`listed`) waits for it (bounded by the listing's limits).
    pub async fn connection(
        self: &Arc<Self>,
        b: &Arc<Backend>,
        listed: bool,
    ) -> Result<Arc<Connection>, BackendError> {
        if b.owns_instances() {
            return self.instance_connection(b).await;
        }
        self.session_connection(b, listed).await
    }

    /// [`Pool::connection`] to a backend that gives each client session
    /// a backend session of its own (HTTP).
    async fn session_connection(
        &self,
        b: &Arc<Backend>,
        listed: bool,
    ) -> Result<Arc<Connection>, BackendError> {
        let slot = self.slot(b);
        *lock(&slot.last_used) = Instant::now();
        let auth = self.credentials(b).await?;
        let mut st = slot.state.lock().await;
        if let Some(c) = st
            .conn
            .as_ref()
            .filter(|c| !c.is_closed() && st.instance == b.instance() && st.auth == auth)
        {
            let (c, first) = (c.clone(), st.listed.clone());
            drop(st);
            if let (true, Some(mut first)) = (listed, first) {
                // Err: the opener gave up; what it listed is what there is.
                let _ = first.wait_for(|done| *done).await;
            }
            return Ok(c);
        }
        st.conn = None;
        let instance = b.instance();
        let caps = lock(&self.capabilities).clone();
        let era = if lock(&self.capset).is_modern() {
            Era::Modern
        } else {
            Era::Handshake
        };
        // Its own list changes may be this session's alone: listed again
        // through it, they add to what the session sees (`Pool::view`).
        let downstream = (!b.forwards_auth()).then(|| {
            Arc::new(ForSession {
                inner: b.downstream.clone(),
                pool: self.me.clone(),
                backend: Arc::downgrade(b),
            }) as Arc<dyn super::Downstream>
        });
        // In a task of its own: a handshake polled at the bottom of a
        // request handler's futures can overflow a worker's stack (debug
        // builds). Dropped with the caller, it ends.
        let opening = {
            let (b, session, auth) = (b.clone(), self.session, auth.clone());
            tokio_util::task::AbortOnDropHandle::new(crate::background::spawn(async move {
                b.open_session_connection(session, caps, auth.as_deref(), era, downstream)
                    .await
            }))
        };
        let opened = opening.await.unwrap_or_else(|e| {
            Err(BackendError::Transport {
                backend: b.name.clone(),
                reason: format!("opening the session's connection failed: {e}"),
                stderr: vec![],
            })
        });
        *lock(&slot.failed) = opened
            .is_err()
            .then(|| (auth.clone(), instance, Instant::now()));
        let conn = Arc::new(opened?);
        tracing::debug!(backend = %b.name, session = self.session, "session connection opened");
        let (first_done, first) = tokio::sync::watch::channel(!b.forwards_auth());
        st.conn = Some(conn.clone());
        st.auth = auth;
        st.instance = instance;
        st.listed = Some(first);
        drop(st);
        if b.forwards_auth() {
            let _one = slot.listing.lock().await;
            let listed = conn.list_catalog().await;
            self.record_listing(b, &slot, listed);
            let _ = first_done.send(true);
        }
        Ok(conn)
    }

    /// The `Authorization` a connection to `b` carries: none unless it is a
    /// `forward_auth` backend; then the client's own (no `[auth]`, or
    /// `"passthrough"`), or with `token_exchange` a token for `b`'s own
    /// audience, traded for the client's at its issuer.
    async fn credentials(&self, b: &Arc<Backend>) -> Result<Option<String>, BackendError> {
        if !b.forwards_auth() {
            return Ok(None);
        }
        let client = lock(&self.auth).clone();
        let Some(x) = &b.config.token_exchange else {
            return Ok(client);
        };
        let (Some(client), Some(exchanger)) = (client, &self.ctx.exchanger) else {
            return Ok(None);
        };
        let subject = client.strip_prefix("Bearer ").unwrap_or(&client);
        let principal = lock(&self.principal).clone();
        exchanger
            .token_for(&principal, subject, &b.name, x)
            .await
            .map(|t| Some(format!("Bearer {t}")))
            .map_err(|reason| BackendError::Credentials {
                backend: b.name.clone(),
                reason,
            })
    }

    /// Stores a listing of `b`; a change wakes the session's resync worker.
    /// A failed listing forgets the entry: what this client may see of the
    /// backend is unknown (its token may have been refused).
    fn record_listing(
        &self,
        b: &Backend,
        slot: &Slot,
        listed: Result<BackendCatalog, BackendError>,
    ) {
        let had = lock(&slot.catalog).is_some();
        let next = match listed {
            Ok(c) => Some(c),
            Err(e) if had && b.forwards_auth() => {
                tracing::warn!(backend = %b.name, session = self.session, error = %e, "listing through the session's own connection failed; the session no longer sees the backend's tools");
                None
            }
            Err(e) => {
                tracing::debug!(backend = %b.name, session = self.session, error = %e, "listing through the session's own connection failed");
                None
            }
        };
        slot.listings.fetch_add(1, Ordering::AcqRel);
        let mut cur = lock(&slot.catalog);
        if cur.as_deref() != next.as_ref() {
            tracing::debug!(backend = %b.name, session = self.session, "session's own catalog changed");
            *cur = next.map(Arc::new);
            drop(cur);
            self.version.fetch_add(1, Ordering::AcqRel);
            for w in lock(&self.wakers).iter().filter_map(Weak::upgrade) {
                w.notify_one();
            }
        }
    }

    /// Re-lists `b` through this session's live connection, if it has one
    /// (`false` otherwise: never through anything else). Single-flight: a
    /// listing that completed while this one waited is taken instead.
    pub async fn relist(&self, b: &Arc<Backend>) -> bool {
        let Some(slot) = lock(&self.slots).get(&b.name).cloned() else {
            return false;
        };
        let seen = slot.listings.load(Ordering::Acquire);
        let _one = slot.listing.lock().await;
        if slot.listings.load(Ordering::Acquire) != seen {
            return true;
        }
        let conn = slot.state.lock().await.conn.clone();
        let Some(conn) = conn.filter(|c| !c.is_closed()) else {
            return false;
        };
        let listed = conn.list_catalog().await;
        self.record_listing(b, &slot, listed);
        true
    }

    /// Whether this session has a live connection to `b` (what the poller
    /// lists through).
    pub fn has_live(&self, b: &Backend) -> bool {
        let Some(slot) = lock(&self.slots).get(&b.name).cloned() else {
            return false;
        };
        slot.uid == b.uid
            && slot
                .state
                .try_lock()
                .map(|st| st.conn.as_ref().is_some_and(|c| !c.is_closed()))
                .unwrap_or(true) // being opened or listed right now
    }

    /// Opens (and lists) this session's connection to every `forward_auth`
    /// backend the shared catalog shows, where it has none fit for use.
    pub async fn ensure(&self, shared: &Catalog) {
        let auth = lock(&self.auth).clone();
        let due: Vec<Arc<Backend>> = self
            .ctx
            .generations
            .backends()
            .forwarded()
            .filter(|b| shared.shows(&b.name) && advertisable(b.state()))
            .filter(|b| {
                let slot = self.slot(b);
                let failed = lock(&slot.failed);
                !failed.as_ref().is_some_and(|(a, instance, at)| {
                    *a == auth && *instance == b.instance() && at.elapsed() < RETRY_FAILED_AFTER
                })
            })
            .cloned()
            .collect();
        let opens = due.iter().map(|b| async move {
            if let Err(e) = self.session_connection(b, true).await {
                tracing::debug!(backend = %b.name, session = self.session, error = %e, "could not open the session's connection");
                self.record_listing(b, &self.slot(b), Err(e));
            }
        });
        futures::future::join_all(opens).await;
    }

    /// What this session sees now: `shared` (its capability set's view)
    /// with its own `forward_auth` entries in place (`shared` itself when
    /// it has none).
    pub fn current(&self, shared: Arc<Catalog>) -> Arc<Catalog> {
        self.view(shared)
    }

    /// [`Pool::current`] after opening and listing what is due
    /// ([`Pool::ensure`]): a `forward_auth` backend that came back, or
    /// that this session has not listed yet.
    pub async fn derive(&self, shared: Arc<Catalog>) -> Arc<Catalog> {
        self.derive_for(shared, &self.capset()).await
    }

    /// [`Pool::derive`] for a request of a client of `capset` (a
    /// 2026-07-28 request declares its own).
    pub async fn derive_for(&self, shared: Arc<Catalog>, capset: &CapSet) -> Arc<Catalog> {
        let shared = self.ctx.view(shared, capset).await;
        // The common case, on every session of every fan-out: no
        // forward_auth backend, no instance of a client's own, and nothing
        // its backend sessions listed themselves: nothing more to derive.
        let set = self.ctx.generations.backends();
        if !set.has_own_catalogs() && self.version.load(Ordering::Acquire) == 0 {
            return shared;
        }
        if set.forwarded().next().is_some() {
            self.ensure(&shared).await;
        }
        self.view(shared)
    }

    /// What this client last listed itself of each backend whose catalog
    /// it sees only through its own listing (`forward_auth`, its own
    /// instance), whatever that backend's health now: the tool search
    /// names such a backend by it (`search::ToolSearch::servers`).
    pub fn own_listings(&self) -> HashMap<Arc<str>, Arc<BackendCatalog>> {
        let set = self.ctx.generations.backends();
        lock(&self.slots)
            .iter()
            .filter(|(name, slot)| {
                set.get(name)
                    .is_some_and(|b| b.uid == slot.uid && (b.forwards_auth() || b.owns_instances()))
            })
            .filter_map(|(name, slot)| {
                let listed = match &*lock(&slot.lease) {
                    Some(lease) => lease.catalog(),
                    None => lock(&slot.catalog).clone(),
                };
                Some((name.clone(), listed?))
            })
            .collect()
    }

    /// `shared` with this client's own listings in place: a
    /// `forward_auth` backend's or its own instance's replace the shared
    /// entry; what its own backend session of an HTTP backend (or its
    /// caller's lane, when its calls take lanes) listed adds its extras
    /// (`BackendCatalog::with_extras`).
    fn view(&self, shared: Arc<Catalog>) -> Arc<Catalog> {
        let version = self.version.load(Ordering::Acquire);
        if let Some((s, v, view)) = &*lock(&self.cache)
            && Arc::ptr_eq(s, &shared)
            && *v == version
        {
            return view.clone();
        }
        let set = self.ctx.generations.backends();
        let mut own: HashMap<Arc<str>, Own> = HashMap::new();
        for (name, slot) in lock(&self.slots).iter() {
            let Some(b) = set.get(name).filter(|b| b.uid == slot.uid) else {
                continue;
            };
            let listed = match &*lock(&slot.lease) {
                Some(lease) => lease.catalog(),
                None => lock(&slot.catalog).clone(),
            };
            if let Some(c) = listed {
                let mine = if b.forwards_auth() || b.owns_instances() {
                    Own::Replaces(c)
                } else {
                    Own::Adds(c)
                };
                own.insert(name.clone(), mine);
            }
        }
        if self.lanes.load(Ordering::Acquire) {
            let caller = lock(&self.principal).caller().clone();
            for b in set.iter().filter(|b| b.per_session() && !b.forwards_auth()) {
                if let Some(c) = b.lane_listing(&caller) {
                    own.entry(b.name.clone()).or_insert(Own::Adds(c));
                }
            }
        }
        if own.is_empty() {
            return shared;
        }
        let view = Arc::new(
            shared.with_own(&self.ctx.naming, |n, entry| match own.get(n)? {
                Own::Replaces(c) => Some(c.clone()),
                Own::Adds(c) => Some(Arc::new(entry.with_extras(c))),
            }),
        );
        *lock(&self.cache) = Some((shared, version, view.clone()));
        view
    }

    /// Every open connection (to tell backends of the client's roots).
    pub async fn connections(&self) -> Vec<Arc<Connection>> {
        let slots: Vec<Arc<Slot>> = lock(&self.slots).values().cloned().collect();
        let mut out = Vec::new();
        for s in slots {
            if let Some(c) = s.state.lock().await.conn.clone() {
                out.push(c);
            }
            let lease = lock(&s.lease).clone();
            if let Some(c) = lease.and_then(|l| l.shared()) {
                out.push(c);
            }
        }
        out
    }

    /// Forgets the connection to `b` (it was lost); the next use reopens.
    pub async fn drop_connection(&self, b: &str) {
        let slot = lock(&self.slots).get(b).cloned();
        if let Some(slot) = slot {
            slot.state.lock().await.conn = None;
        }
    }

    /// Closes `forward_auth` connections unused for their backend's
    /// `session_idle` and not busy now (their catalogs stay), and lets go
    /// of instances of its own unused as long, or of a backend the config
    /// no longer has as it was (the instance stops with its last lease).
    pub fn reap_idle(&self, now: Instant) {
        let set = self.ctx.generations.backends();
        for (name, slot) in lock(&self.slots).iter() {
            let mut lease = lock(&slot.lease);
            if let Some(l) = lease.as_ref() {
                let current = set.get(name).filter(|b| l.of(b));
                if current.is_none_or(|b| l.idle_for(now) >= b.config.session_idle) {
                    tracing::debug!(backend = %name, instance = %l.id(), session = self.session, "letting go of an idle instance");
                    *lease = None;
                }
            }
            drop(lease);
            let Some(b) = set.get(name).filter(|b| b.forwards_auth()) else {
                continue;
            };
            if now.duration_since(*lock(&slot.last_used)) < b.config.session_idle {
                continue;
            }
            if let Ok(mut st) = slot.state.try_lock()
                && let Some(conn) = st.conn.take()
            {
                tracing::debug!(backend = %name, session = self.session, "closing an idle session connection");
                // A request still holding it keeps it open until it ends.
                if let Ok(conn) = Arc::try_unwrap(conn) {
                    crate::background::spawn(conn.close());
                }
            }
        }
    }
}

/// Where a session's own connection to an HTTP backend sends what is not
/// an answer: as the backend's other connections do, and its list
/// changes also re-list it for the session (what a backend made for that
/// session alone shows in its lists, see [`Pool::view`]).
struct ForSession {
    inner: Arc<dyn super::Downstream>,
    pool: Weak<Pool>,
    backend: Weak<Backend>,
}

impl super::Downstream for ForSession {
    fn list_changed(&self, backend: &Arc<str>, kind: super::ListKind) {
        self.inner.list_changed(backend, kind);
        let (Some(pool), Some(b)) = (self.pool.upgrade(), self.backend.upgrade()) else {
            return;
        };
        b.background.clone().spawn(async move {
            pool.relist(&b).await;
        });
    }
    fn log(
        &self,
        backend: &Arc<str>,
        session: Option<u64>,
        params: rmcp::model::LoggingMessageNotificationParam,
    ) {
        self.inner.log(backend, session, params);
    }
    fn resource_updated(&self, backend: &Arc<str>, session: Option<u64>, uri: String) {
        self.inner.resource_updated(backend, session, uri);
    }
    fn lane_log(
        &self,
        backend: &Arc<str>,
        principal: &crate::auth::CallerKey,
        params: rmcp::model::LoggingMessageNotificationParam,
    ) {
        self.inner.lane_log(backend, principal, params);
    }
}

/// One session's own catalog of a `forward_auth` backend, for the poller.
pub struct SessionListing {
    pub pool: Arc<Pool>,
    pub backend: Arc<Backend>,
}

impl Listing for SessionListing {
    fn backend(&self) -> &str {
        &self.backend.name
    }
    fn connected(&self) -> bool {
        self.pool.has_live(&self.backend)
    }
    fn relist(&self, timeout: Duration) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            tokio::time::timeout(timeout, self.pool.relist(&self.backend))
                .await
                .unwrap_or(false)
        })
    }
}

/// Closes idle `forward_auth` connections of every session's pool (what
/// `pools` lists; `None` once the sessions are gone) until `shutdown`,
/// looking a few times per shortest `session_idle`.
pub async fn reap_idle(
    generations: Generations,
    pools: impl Fn() -> Option<Vec<Arc<Pool>>>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    loop {
        let pause = match pools() {
            None => return,
            Some(pools) => {
                let set = generations.backends();
                let shortest = set
                    .iter()
                    .filter(|b| b.forwards_auth() || b.owns_instances())
                    .map(|b| b.config.session_idle)
                    .min();
                if shortest.is_some() {
                    let now = Instant::now();
                    for pool in pools {
                        pool.reap_idle(now);
                    }
                }
                shortest.map_or(Duration::from_secs(30), |d| {
                    (d / 4).clamp(Duration::from_millis(50), Duration::from_secs(30))
                })
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
        }
    }
}
