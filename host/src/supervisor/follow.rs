//! Following a shared backend another replica supervises (see the
//! supervisor's module doc): mirror what the lease holder records, keep a
//! connection of this replica's own to the instance while it serves, and
//! report both here. Nothing is started, stopped, probed or recorded.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use super::{Relisting, Supervisor, start, when_connected};
use crate::backend::Connection;
use crate::cluster::feed::Heard;
use crate::health::{HealthState, advertisable};
use crate::runtime::Started;
use crate::store::HealthStore;

/// How soon a follower tries again to reach an instance the holder says
/// serves, after it could not (or its connection closed).
const RECONNECT: Duration = Duration::from_secs(1);

/// A connection of this replica's own to a followed instance.
pub(super) struct Followed {
    /// `None` for a `forward_auth` backend: sessions connect themselves.
    conn: Option<Arc<Connection>>,
    /// The instance's exit is the holder's to watch: this sender keeps
    /// the connection's "exited" side quiet.
    _exit: oneshot::Sender<crate::runtime::Exit>,
}

impl Supervisor {
    /// Follows the backend until dropped (when the lease is granted, or at
    /// shutdown); never resolves. Pending at once for a backend that is
    /// not followed (one replica, or a replica-local backend).
    ///
    /// # Cancel safety
    ///
    /// The connection it keeps is the supervisor's (`followed`): it
    /// outlives this future, so a replica granted the lease serves on over
    /// it until the instance is adopted ([`Supervisor::end_followed`]).
    pub(super) async fn follow(&mut self, heard: &mut watch::Receiver<Heard>) {
        let Some(store) = self.outlets.cluster.as_ref().map(|c| c.store.clone()) else {
            return std::future::pending().await;
        };
        if !self.follows {
            return std::future::pending().await;
        }
        let mut listing: Option<Relisting> = None;
        let mut seen = *heard.borrow_and_update();
        let mut reread = true;
        let mut retry_at: Option<Instant> = None;
        let mut reported: Option<HealthState> = None;
        loop {
            if reread {
                self.mirror_stored(&*store).await;
                reread = false;
            }
            let serving = advertisable(self.machine.state);
            if !serving && self.followed.is_some() {
                listing = None;
                self.end_followed();
            }
            if serving && self.followed.is_none() && retry_at.is_none_or(|t| t <= Instant::now()) {
                match self.follow_connect().await {
                    Ok((f, catalog)) => {
                        self.backend
                            .instance_up(Some("followed".into()), f.conn.clone(), None);
                        self.listed = Some(catalog.clone());
                        let _ = self.report(self.machine.state, Some(catalog));
                        reported = Some(self.machine.state);
                        self.followed = Some(f);
                        retry_at = None;
                    }
                    Err(reason) => {
                        tracing::warn!(backend = %self.backend.name, %reason, "the backend serves (its supervisor on another replica says so) but this replica cannot reach it; hidden here until it can");
                        retry_at = Some(Instant::now() + RECONNECT);
                    }
                }
            }
            // What routes here: the holder's state, unless this replica
            // cannot reach an instance that serves.
            let state = if serving && self.followed.is_none() {
                HealthState::Offline
            } else {
                self.machine.state
            };
            if reported != Some(state) {
                let _ = self.report(state, None);
                reported = Some(state);
            }
            let conn = self.followed.as_ref().and_then(|f| f.conn.clone());
            tokio::select! {
                changed = heard.changed() => {
                    if changed.is_err() {
                        return std::future::pending().await;
                    }
                    let now = *heard.borrow_and_update();
                    reread = now.health != seen.health;
                    if now.listing != seen.listing && conn.is_some() {
                        self.backend.request_refresh();
                    }
                    seen = now;
                }
                _ = when_connected(conn.as_deref(), |c| c.closed()) => {
                    tracing::debug!(backend = %self.backend.name, "the followed instance closed this replica's connection; its supervisor will say why");
                    listing = None;
                    self.end_followed();
                    retry_at = Some(Instant::now() + RECONNECT);
                }
                _ = tokio::time::sleep_until(retry_at.unwrap_or_else(Instant::now)), if retry_at.is_some() && self.followed.is_none() => {
                    retry_at = None;
                }
                _ = self.backend.refresh_requested(), if listing.is_none() => {
                    match conn {
                        Some(conn) => listing = Some(Relisting::start(&self.backend, conn)),
                        None => self.backend.set_listing(false, true),
                    }
                }
                listed = async { (&mut listing.as_mut().expect("guarded by is_some").task).await }, if listing.is_some() => {
                    let mut done = listing.take();
                    match listed {
                        Ok(Ok(catalog)) if self.listed.as_ref() != Some(&catalog) => {
                            tracing::info!(backend = %self.backend.name, "capabilities changed on re-listing (followed)");
                            self.listed = Some(catalog.clone());
                            let sent = self.report(self.machine.state, Some(catalog));
                            if let (Ok(()), Some(done)) = (sent, done.as_mut()) {
                                done.handed_on = true;
                            }
                        }
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => tracing::debug!(backend = %self.backend.name, error = %e, "re-listing a followed backend failed; keeping its catalog"),
                        Err(e) => tracing::debug!(backend = %self.backend.name, error = %e, "the re-listing task failed"),
                    }
                }
            }
        }
    }

    /// Takes on what the lease holder recorded last (and the reason of its
    /// last transition), and publishes it as this replica's status.
    pub(super) async fn mirror_stored(&mut self, store: &dyn HealthStore) {
        match store.instance(&self.record_name).await {
            Ok(Some(record)) => {
                let reason = store
                    .transitions(&self.record_name, 1)
                    .await
                    .ok()
                    .and_then(|mut t| t.rows.pop())
                    .map(|t| t.reason);
                self.machine.mirror(&record, reason);
                self.persisted = Some((
                    record.state,
                    record.restart_count,
                    record.consecutive_failures,
                    record.quarantine_reason.clone(),
                ));
                self.publish_status();
            }
            // Nobody supervised it yet.
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(backend = %self.backend.name, error = %e, "could not read what the backend's supervisor recorded; keeping what was read before");
            }
        }
    }

    /// Ends the connection kept to a followed instance, if any: its run
    /// ends here ([`Backend::instance_ended`](crate::backend::Backend::instance_ended)).
    pub(super) fn end_followed(&mut self) {
        if self.followed.take().is_some() {
            self.backend.instance_ended();
        }
    }

    /// Granted the lease: continue from what the previous holder recorded.
    pub(super) async fn take_over(&mut self) {
        if let Some(store) = self.outlets.cluster.as_ref().map(|c| c.store.clone()) {
            self.mirror_stored(&*store).await;
            tracing::info!(backend = %self.backend.name, state = %self.machine.state, restarts = self.machine.restart_count, "supervision lease taken; continuing from the recorded state");
        }
    }

    /// Opens this replica's connection to the followed instance and lists
    /// it.
    async fn follow_connect(&self) -> Result<(Followed, crate::catalog::BackendCatalog), String> {
        let endpoint = self
            .runtime
            .endpoint()
            .ok_or_else(|| "the runtime names no endpoint".to_owned())?;
        let (exit, exited) = oneshot::channel();
        let up = start::Start {
            backend: self.backend.clone(),
            runtime: self.runtime.clone(),
            stderr: None,
            owner: false,
        }
        .up(Started {
            endpoint,
            exited,
            id: "followed".into(),
        })
        .await;
        match up {
            Ok((conn, _, catalog)) => Ok((
                Followed {
                    conn: conn.map(Arc::new),
                    _exit: exit,
                },
                catalog,
            )),
            Err(start::StartFailure::Infrastructure(m)) => Err(m),
            Err(start::StartFailure::Backend { reason, .. }) => Err(reason),
        }
    }
}
