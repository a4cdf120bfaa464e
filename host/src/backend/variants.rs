//! A backend's sessions for capability sets: what a client that declared
//! sampling, elicitation, roots or tasks is shown and called through (see
//! `capset.rs` for why).
//!
//! The shared connection declares no capabilities; a client whose set is
//! not empty is served by this backend's *variant* for its set, opened on
//! first use and shared by every client of that set:
//! - a **stdio** backend runs one more process per set (the server's
//!   session is its process). The client's calls go through it too: the
//!   tools the server shows such a client exist only there. Usually one or
//!   two sets are in use (capability-less agents, and one kind of IDE).
//! - an **HTTP** backend gets one more backend session per set, used for
//!   listing (a client's calls go through its own connection, which
//!   mirrors its capabilities).
//!
//! A **2026-07-28** client's set ([`CapSet::is_modern`]) gets a variant
//! begun with `server/discover` under `protocol = "auto"`: for a stdio
//! backend one more process, for an HTTP one a stateless connection. A
//! handshake-era set's variant of the same backend asks `initialize` first
//! even where `auto` found only 2026-07-28 (`lifecycle::begin`), so the two
//! eras' sets never share one. Its clients
//! list *and* call through it, so the backend answers them in their era as
//! it would directly (its own `_meta`, its 2026-07-28 schemas, its own
//! input-required results). A backend that refuses is asked again only on
//! its next instance; meanwhile those clients are served by the
//! handshake-era variant of the same members (or the shared session), with
//! Vigil translating between the eras.
//!
//! A variant follows its backend: it is re-listed when the shared
//! connection is (the backend's `list_changed`, the poller, a recovery),
//! and on its own `list_changed`; one opened on an earlier instance of the
//! backend is reopened on its next use. It is not supervised: the health
//! of the backend is its shared session's, and a variant that died is
//! reopened when next used. At most [`MAX_SETS`] sets per backend; a client
//! beyond that is served as one that declared nothing (logged).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::{Duration, Instant};

use rmcp::model::{LoggingMessageNotificationParam, ProtocolVersion};
use tokio_util::task::AbortOnDropHandle;

use super::capset::CapSet;
use super::client::{Downstream, ListKind};
use super::{Backend, BackendError, Connection, Era};
use crate::background::Background;
use crate::catalog::BackendCatalog;
use crate::config::Protocol;
use crate::runtime::process::ProcessRuntime;
use crate::runtime::{Endpoint, Runs, Runtime};

/// The most capability sets one backend serves with variants.
pub const MAX_SETS: usize = 8;

/// The protocol of a 2026-07-28 set's session: that revision,
/// `server/discover` only.
static MODERN: LazyLock<Protocol> = LazyLock::new(|| Protocol::Modern(ProtocolVersion::LATEST));

/// A backend's variants, by capability set.
#[derive(Default)]
pub struct Variants {
    open: Mutex<HashMap<CapSet, Arc<Variant>>>,
    /// Whether "too many sets" was logged already.
    refused: std::sync::atomic::AtomicBool,
}

/// One capability set's backend session.
pub struct Variant {
    capset: CapSet,
    state: tokio::sync::Mutex<State>,
    /// The last listing, read without waiting for an opening in progress.
    catalog: Mutex<Option<Arc<BackendCatalog>>>,
    /// The last failed opening. Not tried again for a while
    /// ([`Variant::still_failed`]): every list and call of the set's
    /// clients would start a process that fails.
    failed: Mutex<Option<Failed>>,
    /// Whether a re-listing was asked for and none began since.
    relist_wanted: std::sync::atomic::AtomicBool,
    /// One re-listing at a time: two at once could finish out of order and
    /// leave the older listing in place, with no change announced.
    relisting: tokio::sync::Mutex<()>,
}

/// How long a variant that failed to open is left before the next try.
const RETRY_FAILED_AFTER: Duration = Duration::from_secs(5);

/// A failed opening: when, on which instance of the backend, and why.
struct Failed {
    at: Instant,
    instance: u64,
    reason: String,
}

#[derive(Default)]
struct State {
    conn: Option<Arc<Connection>>,
    /// [`Backend::instance`] it was opened on.
    instance: u64,
    /// The process of a stdio backend's variant (dropping it ends it).
    process: Option<ProcessRuntime>,
}

/// An open variant: its connection and what it listed.
pub struct Ready {
    pub conn: Arc<Connection>,
    pub catalog: Arc<BackendCatalog>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Variants {
    fn get(&self, backend: &str, capset: &CapSet) -> Option<Arc<Variant>> {
        let mut open = lock(&self.open);
        if let Some(v) = open.get(capset) {
            return Some(v.clone());
        }
        if open.len() >= MAX_SETS {
            if !self
                .refused
                .swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                tracing::warn!(%backend, capabilities = capset.as_str(), limit = MAX_SETS, "too many distinct client capability sets: further clients see and call the backend as clients that declared none");
            }
            return None;
        }
        let v = Arc::new(Variant {
            capset: capset.clone(),
            state: tokio::sync::Mutex::default(),
            catalog: Mutex::default(),
            failed: Mutex::default(),
            relist_wanted: Default::default(),
            relisting: Default::default(),
        });
        open.insert(capset.clone(), v.clone());
        Some(v)
    }

    fn all(&self) -> Vec<Arc<Variant>> {
        lock(&self.open).values().cloned().collect()
    }
}

impl Backend {
    /// The backend session of `capset`, opened and listed if there is none
    /// of the current instance (within the connect and list bounds).
    /// `None` when the set is empty (the shared connection serves it) or
    /// beyond [`MAX_SETS`].
    ///
    /// A 2026-07-28 client's set is served in its era where the backend
    /// may speak it (see [`Backend::may_speak_modern`]); where it refused
    /// `server/discover` on this instance, or `protocol` is pinned, by the
    /// handshake-era session of the same members.
    pub async fn variant(self: &Arc<Self>, capset: &CapSet) -> Option<Result<Ready, BackendError>> {
        if capset.is_modern()
            && self.may_speak_modern()
            && let Some(variant) = self.variants.get(&self.name, capset)
            && let Ok(ready) = variant.ready(self).await
        {
            return Some(Ok(ready));
        }
        let capset = &capset.handshake();
        if capset.is_none() {
            return None;
        }
        let variant = self.variants.get(&self.name, capset)?;
        Some(variant.ready(self).await)
    }

    /// What `capset`'s variant listed last, without opening one (for a
    /// 2026-07-28 set without its own, its handshake-era one's).
    pub fn variant_catalog(&self, capset: &CapSet) -> Option<Arc<BackendCatalog>> {
        let listed = |c: &CapSet| {
            let v = lock(&self.variants.open).get(c).cloned()?;
            lock(&v.catalog).clone()
        };
        listed(capset).or_else(|| listed(&capset.handshake()))
    }

    /// Whether a 2026-07-28 client is worth a backend session of its era:
    /// `protocol = "auto"` (a pinned revision serves every set in its own),
    /// connections not per caller (`forward_auth`), an instance up. Found in
    /// the handshake era, the backend may speak both; whether it does is
    /// learnt by asking once per instance. Found in 2026-07-28, it does, and
    /// the handshake-era variant of the same members cannot stand in: it
    /// asks `initialize` first (`lifecycle::begin`), and some servers take
    /// it, showing their handshake-era tools.
    fn may_speak_modern(&self) -> bool {
        matches!(self.config.protocol, Protocol::Auto)
            && !self.forwards_auth()
            && self.shared().is_some()
    }

    /// Re-lists every open variant in the background (the shared
    /// connection is being re-listed: what changed there may have changed
    /// for every set).
    pub fn relist_variants(self: &Arc<Self>) {
        for v in self.variants.all() {
            let backend = Arc::downgrade(self);
            self.background.spawn(async move {
                if let Some(b) = backend.upgrade() {
                    v.relist(&b).await;
                }
            });
        }
    }

    /// Ends every variant (the backend's instance ended: theirs are of
    /// it); the next use opens them again.
    pub(super) fn close_variants(&self) {
        for v in self.variants.all() {
            self.background.spawn(async move { v.close().await });
        }
    }

    /// Opens `capset`'s backend session: a process of its own for a stdio
    /// backend, one more session for an HTTP one.
    async fn open_variant(
        self: &Arc<Self>,
        variant: &Arc<Variant>,
    ) -> Result<(Connection, Option<ProcessRuntime>), BackendError> {
        let capset = &variant.capset;
        let (endpoint, process, stderr) = match crate::runtime::runs(&self.config) {
            // The command the supervisor runs.
            Runs::Process(rt) => {
                let started = rt.start().await.map_err(|e| BackendError::Transport {
                    backend: self.name.clone(),
                    reason: format!(
                        "starting a process for clients with capabilities {}: {e}",
                        capset.as_str()
                    ),
                    stderr: vec![],
                })?;
                let tail = rt.stderr();
                (started.endpoint, Some(rt), Some(tail))
            }
            Runs::Http { url, headers } => (
                Endpoint::Http {
                    url: url.to_owned(),
                    headers: headers.clone(),
                },
                None,
                None,
            ),
        };
        let downstream: Arc<dyn Downstream> = Arc::new(ForVariant {
            inner: self.downstream.clone(),
            backend: Arc::downgrade(self),
            variant: Arc::downgrade(variant),
            background: self.background.clone(),
        });
        let own = super::Own {
            session: None,
            capabilities: Some(capset.capabilities()),
            downstream,
            listen: true,
            for_handshake_client: !capset.is_modern(),
        };
        let protocol = if capset.is_modern() {
            &*MODERN
        } else {
            &self.config.protocol
        };
        let conn = self.connect_own(endpoint, stderr, own, protocol).await?;
        Ok((conn, process))
    }
}

impl Variant {
    async fn ready(self: &Arc<Self>, backend: &Arc<Backend>) -> Result<Ready, BackendError> {
        let mut st = self.state.lock().await;
        if let Some(failed) = &*lock(&self.failed)
            && st.conn.is_none()
            && self.still_failed(failed, backend.instance())
        {
            return Err(BackendError::Transport {
                backend: backend.name.clone(),
                reason: format!(
                    "a backend session for this capability set failed to open: {}",
                    failed.reason
                ),
                stderr: vec![],
            });
        }
        let opened = self.open(backend, &mut st).await;
        let mut failed = lock(&self.failed);
        match &opened {
            Ok(_) => *failed = None,
            Err(e) if self.capset.is_modern() => {
                tracing::debug!(backend = %backend.name, capabilities = self.capset.as_str(), error = %e, "the backend does not speak 2026-07-28 (asked once per instance): its 2026-07-28 clients are served through a handshake-era session");
            }
            Err(e) => {
                if failed.is_none() {
                    tracing::warn!(backend = %backend.name, capabilities = self.capset.as_str(), error = %e, "no backend session for a capability set: its clients see the last listing, and their calls fail until it opens");
                }
            }
        }
        if let Err(e) = &opened {
            *failed = Some(Failed {
                at: Instant::now(),
                instance: backend.instance(),
                reason: e.to_string(),
            });
        }
        opened
    }

    /// Whether an opening that failed is not tried again yet: a
    /// 2026-07-28 set's until the backend's next instance (the backend
    /// refused that era, or cannot serve it), another's for
    /// [`RETRY_FAILED_AFTER`].
    fn still_failed(&self, failed: &Failed, instance: u64) -> bool {
        if self.capset.is_modern() {
            failed.instance == instance
        } else {
            failed.at.elapsed() < RETRY_FAILED_AFTER
        }
    }

    /// [`Variant::ready`] with its state locked: the open connection of
    /// the current instance, or a new one, listed.
    async fn open(
        self: &Arc<Self>,
        backend: &Arc<Backend>,
        st: &mut State,
    ) -> Result<Ready, BackendError> {
        let instance = backend.instance();
        if let Some(conn) = st
            .conn
            .as_ref()
            .filter(|c| !c.is_closed() && st.instance == instance)
            && let Some(catalog) = lock(&self.catalog).clone()
        {
            return Ok(Ready {
                conn: conn.clone(),
                catalog,
            });
        }
        // Stale (an earlier instance) or ended: replace it.
        st.conn = None;
        if let Some(old) = st.process.take() {
            let _ = old.stop().await;
        }
        // In a task of its own: a handshake polled at the bottom of a
        // request handler's futures can overflow a worker's stack (debug
        // builds). Dropped with the caller, it ends (the process with it).
        let opening = {
            let (backend, variant) = (backend.clone(), self.clone());
            AbortOnDropHandle::new(crate::background::spawn(async move {
                let (conn, process) = backend.open_variant(&variant).await?;
                match conn.list_catalog().await {
                    Ok(c) => Ok((conn, process, Arc::new(c))),
                    Err(e) => {
                        conn.close().await;
                        if let Some(p) = process {
                            let _ = p.stop().await;
                        }
                        Err(e)
                    }
                }
            }))
        };
        let (conn, process, catalog) = opening.await.map_err(|e| BackendError::Transport {
            backend: backend.name.clone(),
            reason: format!("opening a session for a capability set failed: {e}"),
            stderr: vec![],
        })??;
        let conn = Arc::new(conn);
        if self.capset.is_modern()
            && conn.era() == Era::Modern
            && let Some(target) = conn.session_target()
        {
            // The door of the run it was opened on, if that still serves.
            let serving = backend.serving();
            if serving.number() == instance {
                serving.open_door(target.clone());
            }
        }
        st.process = process;
        st.instance = instance;
        st.conn = Some(conn.clone());
        tracing::debug!(backend = %backend.name, capabilities = self.capset.as_str(), tools = catalog.tools.len(), "backend session for a capability set opened");
        let changed = lock(&self.catalog)
            .replace(catalog.clone())
            .is_some_and(|old| *old != *catalog);
        if changed {
            backend.downstream.variant_listed(&backend.name);
        }
        Ok(Ready { conn, catalog })
    }

    async fn close(&self) {
        let mut st = self.state.lock().await;
        st.conn = None;
        if let Some(p) = st.process.take() {
            let _ = p.stop().await;
        }
    }

    /// Lists again through the open connection; sessions are told when
    /// what it lists changed. Nothing to do when none is open (the next
    /// use opens and lists). Re-listings asked for while one runs make one
    /// more after it, which sees every change announced before it began.
    async fn relist(&self, backend: &Backend) {
        use std::sync::atomic::Ordering;
        self.relist_wanted.store(true, Ordering::Release);
        let _one = self.relisting.lock().await;
        if !self.relist_wanted.swap(false, Ordering::AcqRel) {
            // A re-listing that began after this was asked covered it.
            return;
        }
        let conn = {
            let st = self.state.lock().await;
            match st.conn.as_ref() {
                Some(c) if !c.is_closed() && st.instance == backend.instance() => c.clone(),
                _ => return,
            }
        };
        match conn.list_catalog().await {
            Ok(listed) => {
                let listed = Arc::new(listed);
                let changed = lock(&self.catalog)
                    .replace(listed.clone())
                    .is_none_or(|old| *old != *listed);
                if changed {
                    backend.downstream.variant_listed(&backend.name);
                }
            }
            Err(e) => {
                tracing::debug!(backend = %backend.name, capabilities = self.capset.as_str(), error = %e, "re-listing a capability set's backend session failed; its last listing stays");
            }
        }
    }
}

/// Where a variant's unsolicited traffic goes: its `list_changed`
/// re-lists the variant; the rest is the backend's (log messages and
/// resource updates reach clients as the shared session's do).
struct ForVariant {
    inner: Arc<dyn Downstream>,
    backend: Weak<Backend>,
    variant: Weak<Variant>,
    background: Background,
}

impl Downstream for ForVariant {
    fn list_changed(&self, _backend: &Arc<str>, _kind: ListKind) {
        let (backend, variant) = (self.backend.clone(), self.variant.clone());
        self.background.spawn(async move {
            if let (Some(b), Some(v)) = (backend.upgrade(), variant.upgrade()) {
                v.relist(&b).await;
            }
        });
    }
    fn log(
        &self,
        backend: &Arc<str>,
        session: Option<u64>,
        params: LoggingMessageNotificationParam,
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
        params: LoggingMessageNotificationParam,
    ) {
        self.inner.lane_log(backend, principal, params);
    }
    fn variant_listed(&self, backend: &Arc<str>) {
        self.inner.variant_listed(backend);
    }
}
