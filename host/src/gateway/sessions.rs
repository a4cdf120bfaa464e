//! The registry of live client sessions, and fan-out of notifications to
//! them: list changes to everyone, log messages and resource updates to the
//! sessions they concern.
//!
//! A 2025-revision client is reached through its session's peer
//! (`notifications/*/list_changed`); a 2026-07-28 client through each
//! `subscriptions/listen` stream it holds open.
//!
//! List changes are per session: each entry has a resync worker that
//! remembers the catalog snapshot its session last saw (at registration, or
//! at its last notification). On [`Sessions::resync_all`] every worker
//! compares the current snapshot with that one and notifies only the kinds
//! that differ, so a session never hears of a change it already saw, nor
//! misses one that happened before it registered. A worker has at most one
//! resync in flight and one queued (a `Notify` permit); a session whose
//! channel is gone leaves the registry then.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::service::{Peer, RoleServer, SubscriptionSink};

use tokio::sync::Notify;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::pool::Pool;
use crate::auth::Principal;
use crate::backend::Outbox;
use crate::catalog::{Catalog, Changes, Current};
use crate::policy::Policies;

pub use crate::backend::outbox::Channel;

struct Entry {
    channel: Channel,
    /// Its queue of relayed log messages and resource updates.
    outbox: Outbox,
    subscriptions: HashSet<String>,
    /// Minimum level of log messages the client asked for.
    log_level: Option<LoggingLevel>,
    /// Whose session it is (the principal's id).
    principal: Arc<str>,
    /// Whether its calls may share its principal's lanes (see
    /// `super::fronts`): it hears what the backend says on them.
    lanes: bool,
    /// The session's own backend connections and catalogs (`None`: it
    /// sees the shared catalog as is).
    pool: Option<Arc<Pool>>,
    /// Wakes the session's resync worker.
    resync: Arc<Notify>,
    /// Ends the worker when the entry leaves the registry.
    _worker: DropGuard,
}

pub struct Sessions {
    inner: Mutex<HashMap<u64, Entry>>,
    catalog: Arc<Current>,
    /// What each session's principal may see (`[[policy]]`).
    policies: Arc<Policies>,
    /// The last diff computed by a worker, (older, newer, changes): in a
    /// fan-out most sessions compare the same two snapshots, and a deep
    /// compare of a large catalog is the costly part of a resync.
    last_diff: Mutex<Option<Diffed>>,
}

/// Two snapshots and what differs between them: (older, newer, changes).
type Diffed = (Arc<Catalog>, Arc<Catalog>, Changes);

impl Sessions {
    pub fn new(catalog: Arc<Current>, policies: Arc<Policies>) -> Arc<Self> {
        Arc::new(Self {
            inner: Mutex::default(),
            catalog,
            policies,
            last_diff: Mutex::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a session that has seen the current catalog (it lists it
    /// from now on) and starts its resync worker. With a `pool`, what the
    /// session sees is the pool's view (see `pool.rs`), and a change of its
    /// own catalogs wakes the worker too; either way `principal`'s
    /// `[[policy]]` filters it. Log messages and resource updates reach it
    /// through `outbox`, which is connected to `channel` here.
    pub fn add(
        self: &Arc<Self>,
        id: u64,
        channel: Channel,
        pool: Option<Arc<Pool>>,
        outbox: Outbox,
        principal: Principal,
        lanes: bool,
    ) {
        outbox.connect(channel.clone());
        let principal_id: Arc<str> = principal.id().into();
        let resync = Arc::new(Notify::new());
        let stop = CancellationToken::new();
        let shared = self.catalog.get();
        let base = match &pool {
            Some(p) => {
                p.on_change(&resync);
                p.current(shared)
            }
            None => shared,
        };
        let worker = Resync {
            id,
            channel: channel.clone(),
            seen: self.policies.view(&principal, base),
            principal,
            pool: pool.clone(),
            wake: resync.clone(),
            registry: Arc::downgrade(self),
        };
        tokio::spawn(worker.run(stop.clone()));
        self.lock().insert(
            id,
            Entry {
                channel,
                outbox,
                subscriptions: HashSet::new(),
                log_level: None,
                principal: principal_id,
                lanes,
                pool,
                resync,
                _worker: stop.drop_guard(),
            },
        );
    }

    pub fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// The pool of every registered session, once each.
    pub fn pools(&self) -> Vec<Arc<Pool>> {
        let mut out: Vec<Arc<Pool>> = Vec::new();
        for p in self.lock().values().filter_map(|e| e.pool.as_ref()) {
            if !out.iter().any(|o| Arc::ptr_eq(o, p)) {
                out.push(p.clone());
            }
        }
        out
    }

    /// How many sessions are registered.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Asks every session's worker to compare the current catalog with what
    /// its session saw and notify the difference.
    pub fn resync_all(&self) {
        for e in self.lock().values() {
            e.resync.notify_one();
        }
    }

    /// `newer.diff(older)`, computed once for every session comparing the
    /// same two snapshots.
    fn diff(&self, older: &Arc<Catalog>, newer: &Arc<Catalog>) -> Changes {
        if Arc::ptr_eq(older, newer) {
            return Changes::default();
        }
        let mut last = self.last_diff.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((o, n, c)) = &*last
            && Arc::ptr_eq(o, older)
            && Arc::ptr_eq(n, newer)
        {
            return *c;
        }
        let c = newer.diff(older);
        *last = Some((older.clone(), newer.clone(), c));
        c
    }

    pub fn subscribe(&self, id: u64, uri: &str, on: bool) {
        if let Some(e) = self.lock().get_mut(&id) {
            if on {
                e.subscriptions.insert(uri.to_owned());
            } else {
                e.subscriptions.remove(uri);
            }
        }
    }

    pub fn set_log_level(&self, id: u64, level: LoggingLevel) {
        if let Some(e) = self.lock().get_mut(&id) {
            e.log_level = Some(level);
        }
    }

    /// Relays a backend log message: to `session` when the backend
    /// connection belongs to one, otherwise to every session-mode client
    /// whose level admits it. Only queues (see [`Outbox`]).
    pub fn log(&self, session: Option<u64>, params: LoggingMessageNotificationParam) {
        for (_, e) in self
            .lock()
            .iter()
            .filter(|(id, _)| session.is_none_or(|s| s == **id))
            .filter(|(_, e)| {
                e.log_level
                    .is_none_or(|min| level_rank(params.level) >= level_rank(min))
            })
        {
            e.outbox.log(params.clone());
        }
    }

    /// Relays a log message a backend sent on `principal`'s lane: to that
    /// principal's sessions that use lanes (and so set no log level).
    pub fn lane_log(&self, principal: &str, params: LoggingMessageNotificationParam) {
        for e in self
            .lock()
            .values()
            .filter(|e| e.lanes && e.log_level.is_none() && *e.principal == *principal)
        {
            e.outbox.log(params.clone());
        }
    }

    /// Relays `notifications/resources/updated` to `session`, or to the
    /// sessions subscribed to `uri` and every listen stream (whose sink
    /// drops URIs it did not ask for). Only queues.
    pub fn resource_updated(&self, session: Option<u64>, uri: String) {
        for (_, e) in self.lock().iter().filter(|(id, e)| match session {
            Some(s) => s == **id,
            None => e.subscriptions.contains(&uri) || matches!(e.channel, Channel::Listen(_)),
        }) {
            e.outbox.resource_updated(uri.clone());
        }
    }
}

/// One session's resync worker.
struct Resync {
    id: u64,
    channel: Channel,
    /// The snapshot the session last saw.
    seen: Arc<Catalog>,
    /// Whose view it is (the principal that opened the session).
    principal: Principal,
    pool: Option<Arc<Pool>>,
    wake: Arc<Notify>,
    registry: std::sync::Weak<Sessions>,
}

impl Resync {
    async fn run(mut self, stop: CancellationToken) {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.wake.notified() => {}
            }
            let Some(registry) = self.registry.upgrade() else {
                return;
            };
            let shared = registry.catalog.get();
            let base = match &self.pool {
                Some(p) => p.derive(shared).await,
                None => shared,
            };
            let now = registry.policies.view(&self.principal, base);
            let changes = registry.diff(&self.seen, &now);
            drop(registry);
            self.seen = now;
            if !changes.any() {
                continue;
            }
            let result = match &self.channel {
                Channel::Session(peer) => send_session_changes(peer, changes)
                    .await
                    .map_err(|e| e.to_string()),
                Channel::Listen(sink) => send_listen_changes(sink, changes).await,
            };
            match result {
                Ok(()) => {
                    tracing::debug!(
                        session = self.id,
                        tools = changes.tools,
                        resources = changes.resources,
                        prompts = changes.prompts,
                        "list_changed sent"
                    )
                }
                Err(e) => {
                    // The client is gone: the entry is stale.
                    tracing::debug!(session = self.id, error = %e, "could not send list_changed; removing the session");
                    if let Some(registry) = self.registry.upgrade() {
                        registry.remove(self.id);
                    }
                    return;
                }
            }
        }
    }
}

async fn send_session_changes(
    peer: &Peer<RoleServer>,
    c: Changes,
) -> Result<(), rmcp::service::ServiceError> {
    let sent = &crate::metrics::get().list_changed_sent;
    if c.tools {
        peer.notify_tool_list_changed().await?;
        sent.inc();
    }
    if c.resources {
        peer.notify_resource_list_changed().await?;
        sent.inc();
    }
    if c.prompts {
        peer.notify_prompt_list_changed().await?;
        sent.inc();
    }
    Ok(())
}

async fn send_listen_changes(sink: &SubscriptionSink, c: Changes) -> Result<(), String> {
    // A stream that did not ask for a kind refuses it; that is not an error.
    let mut last = Ok(());
    if c.tools {
        last = sink.notify_tool_list_changed().await;
    }
    if c.resources {
        last = last.and(sink.notify_resource_list_changed().await);
    }
    if c.prompts {
        last = last.and(sink.notify_prompt_list_changed().await);
    }
    tracing::debug!(result = ?last, "list_changed sent on a listen stream");
    match last {
        Err(rmcp::service::SubscriptionSendError::SubscriptionClosed) => {
            Err("subscription closed".into())
        }
        _ => Ok(()),
    }
}

fn level_rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

#[cfg(test)]
mod tests {
    //! The registry with real rmcp peers over in-memory pipes: a server
    //! `Peer` per session, and a client that counts `tools/list_changed`.

    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use rmcp::model::{ServerCapabilities, ServerInfo};
    use rmcp::service::{NotificationContext, RoleClient, RunningService, ServiceExt};
    use rmcp::{ClientHandler, ServerHandler};

    use super::*;
    use crate::catalog::BackendCatalog;
    use crate::config::Naming;

    #[derive(Clone)]
    struct Server;
    impl ServerHandler for Server {
        fn get_info(&self) -> ServerInfo {
            ServerInfo::new(ServerCapabilities::builder().enable_tools().build())
        }
    }

    #[derive(Clone, Default)]
    struct Counter(Arc<AtomicUsize>);
    impl ClientHandler for Counter {
        async fn on_tool_list_changed(&self, _ctx: NotificationContext<RoleClient>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    struct Peers {
        server: RunningService<RoleServer, Server>,
        client: RunningService<RoleClient, Counter>,
        count: Arc<AtomicUsize>,
    }

    async fn connect() -> Peers {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let counter = Counter::default();
        let count = counter.0.clone();
        let (server, client) = tokio::join!(Server.serve(a), counter.serve(b));
        Peers {
            server: server.unwrap(),
            client: client.unwrap(),
            count,
        }
    }

    fn catalog(tools: &[&str]) -> Arc<Catalog> {
        let entry = BackendCatalog {
            tools: tools
                .iter()
                .map(|t| {
                    serde_json::from_value(
                        serde_json::json!({"name": t, "inputSchema": {"type": "object"}}),
                    )
                    .unwrap()
                })
                .collect(),
            ..Default::default()
        };
        let name: Arc<str> = "b".into();
        Arc::new(Catalog::build(
            &Naming::Prefix {
                separator: "__".into(),
            },
            [(&name, &entry)],
        ))
    }

    async fn eventually(what: &str, cond: impl Fn() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !cond() {
            assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Lets in-flight work run, to check that nothing (more) happens.
    async fn quiet() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    #[tokio::test]
    async fn a_session_hears_only_changes_it_has_not_seen() {
        let current = Arc::new(Current::default());
        current.replace(catalog(&["a"]));
        let sessions = Sessions::new(current.clone(), Arc::new(Policies::new(Vec::new())));
        let p = connect().await;
        sessions.add(
            1,
            Channel::Session(p.server.peer().clone()),
            None,
            Outbox::new(8),
            Principal::local(),
            false,
        );

        sessions.resync_all();
        quiet().await;
        assert_eq!(
            p.count.load(Ordering::SeqCst),
            0,
            "nothing changed since it registered"
        );

        current.replace(catalog(&["a", "b"]));
        sessions.resync_all();
        eventually("one list_changed", || p.count.load(Ordering::SeqCst) == 1).await;

        // An equal snapshot (rebuilt, not the same object) is no change.
        current.replace(catalog(&["a", "b"]));
        sessions.resync_all();
        quiet().await;
        assert_eq!(p.count.load(Ordering::SeqCst), 1);
        drop(p.client);
    }

    #[tokio::test]
    async fn a_removed_session_hears_nothing_more() {
        let current = Arc::new(Current::default());
        let sessions = Sessions::new(current.clone(), Arc::new(Policies::new(Vec::new())));
        let p = connect().await;
        sessions.add(
            7,
            Channel::Session(p.server.peer().clone()),
            None,
            Outbox::new(8),
            Principal::local(),
            false,
        );
        assert_eq!(sessions.len(), 1);

        sessions.remove(7); // DELETE or close of the client session
        assert_eq!(sessions.len(), 0);
        current.replace(catalog(&["x"]));
        sessions.resync_all();
        quiet().await;
        assert_eq!(p.count.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_session_whose_client_is_gone_leaves_at_its_next_resync() {
        let current = Arc::new(Current::default());
        let sessions = Sessions::new(current.clone(), Arc::new(Policies::new(Vec::new())));
        let p = connect().await;
        let peer = p.server.peer().clone();
        // The client goes away without a goodbye (expired session).
        p.client.cancel().await.unwrap();
        let _ = p.server.cancel().await;
        sessions.add(
            3,
            Channel::Session(peer),
            None,
            Outbox::new(8),
            Principal::local(),
            false,
        );
        assert_eq!(sessions.len(), 1, "registered (registration cannot tell)");

        current.replace(catalog(&["y"]));
        sessions.resync_all();
        eventually("the dead session removed", || sessions.len() == 0).await;
    }

    #[tokio::test]
    async fn concurrent_changes_coalesce_per_session() {
        let current = Arc::new(Current::default());
        let sessions = Sessions::new(current.clone(), Arc::new(Policies::new(Vec::new())));
        let p = connect().await;
        sessions.add(
            1,
            Channel::Session(p.server.peer().clone()),
            None,
            Outbox::new(8),
            Principal::local(),
            false,
        );
        // Many deliveries before the worker runs: at most one in flight and
        // one queued, each comparing against the latest snapshot.
        for i in 0..50 {
            current.replace(catalog(&[&format!("t{i}")]));
            sessions.resync_all();
        }
        eventually("at least one list_changed", || {
            p.count.load(Ordering::SeqCst) >= 1
        })
        .await;
        quiet().await;
        let n = p.count.load(Ordering::SeqCst);
        assert!(
            (1..=2).contains(&n),
            "{n} notifications for 50 back-to-back deliveries"
        );
        drop(p.client);
    }
}
