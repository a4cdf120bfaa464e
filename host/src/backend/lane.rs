//! A streamable HTTP backend's *lanes*: one backend session per principal,
//! shared by that principal's client sessions whose calls carry nothing per
//! session, so a thousand such clients cost the backend one session instead
//! of a thousand (with their tasks and standing GET streams). Two principals
//! never share a backend session: nothing one caller's calls make the
//! backend say reaches another.
//!
//! A lane is an rmcp client connection like a per-session one, opened on
//! first use, but it declares no client capabilities (no sampling,
//! elicitation or roots): a backend cannot ask anything of a client through
//! it. That is why only calls of clients that declared none of those may
//! use it (the eligibility rule of `gateway::raw`). What a call's own stream
//! carries reaches the caller on the raw path; a log message the backend
//! sends on the lane's own stream reaches every client session of the
//! lane's principal that uses lanes ([`Downstream::lane_log`]), as a stdio
//! backend's reaches every client of its one session.
//!
//! What a lane lists beyond the shared listing (a resource the backend made
//! for that session) is shown to the same sessions: the lane is re-listed
//! when it announces a list change, and its extras join their view
//! ([`Backend::lane_listing`], `BackendCatalog::with_extras`).
//!
//! Lanes belong to the run of the backend they were opened on (its
//! [`Instance`]): the next run starts without any. One whose connection
//! ended is replaced on the next use; one the raw path found stale (the
//! backend forgot its session) is dropped with [`Instance::drop_lane`].

use std::sync::Arc;

use rmcp::model::ClientCapabilities;

use std::collections::HashMap;
use std::sync::RwLock;

use rmcp::model::LoggingMessageNotificationParam;

use super::client::{Downstream, ListKind};
use super::http_ping::SessionTarget;
use super::{Backend, BackendError, Connection, Instance};
use crate::auth::CallerKey;

/// A backend's lanes, by caller (see the module docs).
#[derive(Default)]
pub struct Lanes {
    open: RwLock<HashMap<CallerKey, Arc<Opened>>>,
    /// Serializes opening, so concurrent first calls open one session.
    opening: tokio::sync::Mutex<()>,
}

/// An open lane.
pub struct Opened {
    pub conn: Connection,
    /// Re-initializations of the session already reported by
    /// [`Opened::recovered`].
    reported: std::sync::atomic::AtomicU64,
    /// What the lane listed when it last announced a list change.
    listing: std::sync::Mutex<Option<Arc<crate::catalog::BackendCatalog>>>,
}

impl Opened {
    /// Whether the lane's client re-initialized a session the backend
    /// forgot (it was restarted, maybe redeployed) since the last call
    /// asked: what the backend offers may have changed.
    pub fn recovered(&self) -> bool {
        let now = self.conn.reinitializations();
        self.reported.swap(now, std::sync::atomic::Ordering::AcqRel) != now
    }

    /// The backend session the lane's requests carry.
    pub fn session(&self) -> Option<&Arc<SessionTarget>> {
        self.conn.session_target()
    }
}

impl Lanes {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<CallerKey, Arc<Opened>>> {
        self.open.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<CallerKey, Arc<Opened>>> {
        self.open.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Lets go of every lane (their run ended): each closes its backend
    /// session once no call holds it, while the backend may still be
    /// there to hear of it, rather than whenever the last holder of the
    /// run lets go (an update's old version is held by whoever still has
    /// its backend, say a poller's round).
    pub(super) fn close_all(&self) {
        let open = std::mem::take(&mut *self.write());
        drop(open);
    }
}

/// Where a lane's unsolicited traffic goes: its log messages to its
/// principal's lane users; nothing else of it is per client (it subscribes
/// to nothing).
struct ForPrincipal {
    inner: Arc<dyn Downstream>,
    principal: CallerKey,
    backend: std::sync::Weak<Backend>,
}

impl Downstream for ForPrincipal {
    fn list_changed(&self, backend: &Arc<str>, kind: ListKind) {
        self.inner.list_changed(backend, kind);
        // The change may be this session's alone: list it again, so its
        // clients see what it lists beyond the shared listing.
        let Some(b) = self.backend.upgrade() else {
            return;
        };
        let (inner, principal, name) =
            (self.inner.clone(), self.principal.clone(), backend.clone());
        b.background.clone().spawn(async move {
            let Some(open) = b.serving().usable_lane(&principal) else {
                return;
            };
            match open.conn.list_catalog().await {
                Ok(listed) => {
                    let listed = Arc::new(listed);
                    let changed = open
                        .listing
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .replace(listed.clone())
                        .is_none_or(|old| *old != *listed);
                    if changed {
                        inner.lane_listed(&name, &principal);
                    }
                }
                Err(e) => {
                    tracing::debug!(backend = %name, %principal, error = %e, "re-listing a lane failed; its last listing stays");
                }
            }
        });
    }
    fn log(&self, backend: &Arc<str>, _: Option<u64>, params: LoggingMessageNotificationParam) {
        self.inner.lane_log(backend, &self.principal, params);
    }
    fn resource_updated(&self, _: &Arc<str>, _: Option<u64>, _: String) {}
    fn lane_log(
        &self,
        backend: &Arc<str>,
        principal: &crate::auth::CallerKey,
        params: LoggingMessageNotificationParam,
    ) {
        self.inner.lane_log(backend, principal, params);
    }
}

impl Backend {
    /// `principal`'s lane on the run `on` (the one the call's generation
    /// says serves), opened (or replaced) if need be within the connect
    /// timeout.
    pub async fn lane(
        self: &Arc<Self>,
        on: &Arc<Instance>,
        principal: &CallerKey,
    ) -> Result<Arc<Opened>, BackendError> {
        if let Some(open) = on.usable_lane(principal) {
            return Ok(open);
        }
        // Boxed: opening a lane (an MCP handshake) is a future of several
        // KB, and every raw call awaits this one; inline, each call's
        // future would carry that size and be copied whole wherever it is
        // moved (axum boxes each middleware's future).
        Box::pin(self.open_lane(on, principal)).await
    }

    /// Opens `principal`'s lane on `on` (or replaces an ended one), one
    /// opening at a time.
    async fn open_lane(
        self: &Arc<Self>,
        on: &Arc<Instance>,
        principal: &CallerKey,
    ) -> Result<Arc<Opened>, BackendError> {
        let _one = on.lanes.opening.lock().await;
        if let Some(open) = on.usable_lane(principal) {
            return Ok(open);
        }
        // A lane of this run whose connection ended: the backend was
        // restarted in place (maybe redeployed) without Vigil seeing it
        // down. Its successor's first call counts as a recovery, as a
        // re-initialized session would.
        let replaces_ended = on
            .lanes
            .read()
            .get(principal)
            .is_some_and(|o| o.conn.is_closed());
        let principal = principal.clone();
        let downstream = Arc::new(ForPrincipal {
            inner: self.downstream.clone(),
            principal: principal.clone(),
            backend: Arc::downgrade(self),
        });
        // Lanes carry the raw path's calls, which handshake-era clients make.
        let own = super::Own {
            session: None,
            capabilities: Some(ClientCapabilities::default()),
            downstream,
            listen: false,
            for_handshake_client: true,
        };
        let conn = self
            .open_connection(own, None, &self.config.protocol)
            .await?;
        // Before the first call: a backend may send what belongs to a call
        // on the session's standing stream when it opens after the call.
        conn.standing_stream_settled(super::STANDING_STREAM_WAIT)
            .await;
        tracing::debug!(backend = %self.name, %principal, instance = on.number(), "lane opened");
        // `u64::MAX` differs from any count: `recovered` says so once.
        let reported = if replaces_ended {
            u64::MAX
        } else {
            conn.reinitializations()
        }
        .into();
        let open = Arc::new(Opened {
            conn,
            reported,
            listing: Default::default(),
        });
        on.lanes.write().insert(principal, open.clone());
        Ok(open)
    }

    /// What `caller`'s lane of the serving run listed when it last
    /// announced a change (none before).
    pub fn lane_listing(&self, caller: &CallerKey) -> Option<Arc<crate::catalog::BackendCatalog>> {
        let open = self.serving().usable_lane(caller)?;
        open.listing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Instance {
    fn usable_lane(&self, principal: &CallerKey) -> Option<Arc<Opened>> {
        let open = self.lanes.read().get(principal)?.clone();
        (!open.conn.is_closed()).then_some(open)
    }

    /// Forgets `stale` (if it still is a lane of this run): the next call
    /// of its principal opens another.
    pub fn drop_lane(&self, stale: &Arc<Opened>) {
        let mut lanes = self.lanes.write();
        lanes.retain(|_, open| !Arc::ptr_eq(open, stale));
    }
}
