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
//! channel is gone leaves the registry then. Workers run on the gateway's
//! [`Background`]: each ends when its entry leaves or at shutdown.
//!
//! Each wake-up by [`Sessions::resync_all`] is numbered, and each worker
//! publishes the number of the last one it handled (a `watch` of
//! [`Progress`]): a worker that handled wake-up `n` compared a snapshot at
//! least as new as the one current when `n` was asked for. That is what the
//! tests await to prove that nothing was sent, instead of sleeping.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::service::{Peer, RoleServer, SubscriptionSink};

use tokio::sync::{Notify, watch};
use tokio_util::sync::DropGuard;

use crate::auth::{CallerKey, Principal};
use crate::backend::Generations;
use crate::backend::Outbox;
use crate::backend::capset::CapSet;
use crate::backend::pool::{self, Pool};
use crate::background::Background;
use crate::catalog::{Catalog, Changes};

pub use crate::backend::outbox::Channel;

struct Entry {
    channel: Channel,
    /// Its queue of relayed log messages and resource updates.
    outbox: Outbox,
    subscriptions: HashSet<String>,
    /// Minimum level of log messages the client asked for.
    log_level: Option<LoggingLevel>,
    /// Whose session it is.
    principal: CallerKey,
    /// Whether its calls may share its principal's lanes (see
    /// `super::fronts`): it hears what the backend says on them.
    lanes: bool,
    /// The session's own backend connections and catalogs (`None`: it
    /// sees the shared catalog as is).
    pool: Option<Arc<Pool>>,
    /// Wakes the session's resync worker.
    resync: Arc<Notify>,
    /// What the worker has done so far.
    #[cfg(test)]
    progress: watch::Receiver<Progress>,
    /// Ends the worker when the entry leaves the registry.
    _worker: DropGuard,
}

/// What one resync worker has done: published after each resync, and
/// closed when the worker ends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// The number of the last [`Sessions::resync_all`] wake-up handled.
    pub handled: u64,
    /// How many resyncs sent the session a `list_changed`.
    pub notified: u64,
}

pub struct Sessions {
    inner: Mutex<HashMap<u64, Entry>>,
    /// Where the shared catalog and what each session's principal may
    /// see (`[[policy]]`) are read: the generation in force.
    generations: Generations,
    /// The last diff computed by a worker, (older, newer, changes): in a
    /// fan-out most sessions compare the same two snapshots, and a deep
    /// compare of a large catalog is the costly part of a resync.
    last_diff: Mutex<Option<Diffed>>,
    /// The number of the last [`Sessions::resync_all`] wake-up.
    asked: AtomicU64,
    /// Where the resync workers run.
    background: Background,
    /// What each capability set sees (`backend::views`), for sessions
    /// without a pool of their own.
    context: Arc<pool::Context>,
    /// What a session lists as its tools in the modes of tool search.
    tool_search: Arc<crate::search::ToolSearch>,
}

/// Who a session's lists are for: its principal (`[[policy]]`) and its
/// capability set (`backend::views`).
#[derive(Clone)]
pub struct Viewer {
    pub principal: Principal,
    pub capset: CapSet,
}

/// Two snapshots and what differs between them: (older, newer, changes).
type Diffed = (Arc<Catalog>, Arc<Catalog>, Changes);

impl Sessions {
    pub fn new(
        generations: Generations,
        background: Background,
        context: Arc<pool::Context>,
        tool_search: Arc<crate::search::ToolSearch>,
    ) -> Arc<Self> {
        Arc::new(Self {
            context,
            tool_search,
            inner: Mutex::default(),
            generations,
            last_diff: Mutex::default(),
            asked: AtomicU64::new(0),
            background,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a session that has seen the current catalog (it lists it
    /// from now on) and starts its resync worker. With a `pool`, what the
    /// session sees is the pool's view (see `backend::pool`), and a change of its
    /// own catalogs wakes the worker too; either way it is the view of
    /// `viewer`'s capability set, filtered by its principal's
    /// `[[policy]]`. Log messages and resource updates reach it through
    /// `outbox`, which is connected to `channel` here.
    pub fn add(
        self: &Arc<Self>,
        id: u64,
        channel: Channel,
        pool: Option<Arc<Pool>>,
        outbox: Outbox,
        viewer: Viewer,
        lanes: bool,
    ) {
        let shown = self.generations.catalog();
        self.add_shown(id, channel, pool, outbox, viewer, lanes, shown);
    }

    /// [`Sessions::add`] for a client that was last shown the catalog
    /// snapshot `shown` (say, when it was told its stream is open, before
    /// this registration): a change since then reaches it at once, where
    /// registering with the current snapshot would take it as seen.
    #[allow(clippy::too_many_arguments)] // `add`'s, and what it was shown
    pub fn add_shown(
        self: &Arc<Self>,
        id: u64,
        channel: Channel,
        pool: Option<Arc<Pool>>,
        outbox: Outbox,
        viewer: Viewer,
        lanes: bool,
        shown: Arc<Catalog>,
    ) {
        let Viewer { principal, capset } = viewer;
        outbox.connect(channel.clone());
        let caller = principal.caller().clone();
        let resync = Arc::new(Notify::new());
        if !Arc::ptr_eq(&shown, &self.generations.catalog()) {
            resync.notify_one();
        }
        let stop = self.background.child_token();
        let shared = shown;
        let shared = self.context.views.built(shared, &capset);
        let base = match &pool {
            Some(p) => {
                p.on_change(&resync);
                p.current(shared)
            }
            None => shared,
        };
        let (progress, _progress) = watch::channel(Progress::default());
        let worker = Resync {
            id,
            progress,
            channel: channel.clone(),
            seen: self.listed(&self.generations.load(), &principal, pool.as_ref(), base),
            principal,
            pool: pool.clone(),
            capset,
            wake: resync.clone(),
            registry: Arc::downgrade(self),
        };
        self.background.spawn(worker.run(stop.clone()));
        self.lock().insert(
            id,
            Entry {
                channel,
                outbox,
                subscriptions: HashSet::new(),
                log_level: None,
                principal: caller,
                lanes,
                pool,
                resync,
                #[cfg(test)]
                progress: _progress,
                _worker: stop.drop_guard(),
            },
        );
    }

    /// What a session of `principal` lists, `base` being what its
    /// capability set sees: its policy's view, with the tools its mode of
    /// tool search lists (only its lists count: this is compared, never
    /// routed by).
    fn listed(
        &self,
        generation: &crate::backend::Generation,
        principal: &Principal,
        pool: Option<&Arc<Pool>>,
        base: Arc<Catalog>,
    ) -> Arc<Catalog> {
        let view = generation.policies.view(principal, base);
        let access = generation.policies.access(principal);
        match self.tool_search.tools_listed(
            &access,
            generation.backends.iter().map(|b| &b.name),
            || pool.map(|p| p.own_listings()).unwrap_or_default(),
            &view,
        ) {
            Some(tools) => Arc::new(view.listing_with_tools(tools)),
            None => view,
        }
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
    /// its session saw and notify the difference. Returns the wake-up's
    /// number (see [`Progress::handled`]).
    pub fn resync_all(&self) -> u64 {
        // Numbered before the wake: a worker that reads this number after
        // waking reads the catalog after it, too.
        let n = self.asked.fetch_add(1, Ordering::AcqRel) + 1;
        for e in self.lock().values() {
            e.resync.notify_one();
        }
        n
    }

    /// What session `id`'s worker has done (closed once it ended).
    #[cfg(test)]
    fn progress(&self, id: u64) -> Option<watch::Receiver<Progress>> {
        self.lock().get(&id).map(|e| e.progress.clone())
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

    /// The level session `id` set with `logging/setLevel`, if any.
    pub fn log_level(&self, id: u64) -> Option<LoggingLevel> {
        self.lock().get(&id).and_then(|e| e.log_level)
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
                    .is_none_or(|min| crate::backend::outbox::admits(min, params.level))
            })
        {
            e.outbox.log(params.clone());
        }
    }

    /// Relays a log message a backend sent on `principal`'s lane: to that
    /// principal's sessions that use lanes (and so set no log level).
    pub fn lane_log(&self, principal: &CallerKey, params: LoggingMessageNotificationParam) {
        for e in self
            .lock()
            .values()
            .filter(|e| e.lanes && e.log_level.is_none() && e.principal == *principal)
        {
            e.outbox.log(params.clone());
        }
    }

    /// What `caller`'s lane of some backend lists changed: that caller's
    /// sessions that use lanes see it (their pools re-derive).
    pub fn lane_listed(&self, caller: &CallerKey) {
        let pools: Vec<Arc<Pool>> = self
            .lock()
            .values()
            .filter(|e| e.lanes && e.principal == *caller)
            .filter_map(|e| e.pool.clone())
            .collect();
        for p in pools {
            p.own_changed();
        }
    }

    /// Relays a log message of an instance run for `caller` (`share =
    /// "principal"`): to that caller's sessions whose level admits it.
    pub fn caller_log(&self, caller: &CallerKey, params: LoggingMessageNotificationParam) {
        for e in self.lock().values().filter(|e| {
            e.principal == *caller
                && e.log_level
                    .is_none_or(|min| crate::backend::outbox::admits(min, params.level))
        }) {
            e.outbox.log(params.clone());
        }
    }

    /// Relays a resource update of an instance run for `caller`: to that
    /// caller's sessions subscribed to `uri` and listen streams.
    pub fn caller_resource_updated(&self, caller: &CallerKey, uri: String) {
        for e in self.lock().values().filter(|e| {
            e.principal == *caller
                && (e.subscriptions.contains(&uri) || matches!(e.channel, Channel::Listen(_)))
        }) {
            e.outbox.resource_updated(uri.clone());
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
    /// The client's capability set (what it is shown, `backend::views`).
    capset: CapSet,
    wake: Arc<Notify>,
    registry: std::sync::Weak<Sessions>,
    /// Published after each resync.
    progress: watch::Sender<Progress>,
}

impl Resync {
    async fn run(mut self, stop: tokio_util::sync::CancellationToken) {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.wake.notified() => {}
            }
            let Some(registry) = self.registry.upgrade() else {
                return;
            };
            // Before the catalog: see `Sessions::resync_all`.
            let asked = registry.asked.load(Ordering::Acquire);
            // One generation: its catalog, seen through its policies.
            let generation = registry.generations.load();
            let shared = generation.catalog.clone();
            let base = match &self.pool {
                Some(p) => p.derive_for(shared, &self.capset).await,
                None => registry.context.view(shared, &self.capset).await,
            };
            let now = registry.listed(&generation, &self.principal, self.pool.as_ref(), base);
            let changes = registry.diff(&self.seen, &now);
            drop(registry);
            self.seen = now;
            if !changes.any() {
                self.progress.send_modify(|p| p.handled = asked);
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
                    self.progress.send_modify(|p| {
                        p.handled = asked;
                        p.notified += 1;
                    });
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

#[cfg(test)]
mod tests {
    //! The registry with real rmcp peers over in-memory pipes: a server
    //! `Peer` per session, and a client that counts `tools/list_changed`.
    //! Absence is proven by awaiting the worker's [`Progress`] (it handled
    //! the wake-up and sent nothing), never by sleeping.

    use std::time::Duration;

    use rmcp::model::{ServerCapabilities, ServerInfo};
    use rmcp::service::{NotificationContext, RoleClient, RunningService, ServiceExt};
    use rmcp::{ClientHandler, ServerHandler};

    use super::*;
    use crate::catalog::BackendCatalog;
    use crate::config::Naming;

    /// Far beyond any wait on a loaded machine; only a bug reaches it.
    const PATIENCE: Duration = Duration::from_secs(10);

    #[derive(Clone)]
    struct Server;
    impl ServerHandler for Server {
        fn get_info(&self) -> ServerInfo {
            ServerInfo::new(ServerCapabilities::builder().enable_tools().build())
        }
    }

    /// Counts the `tools/list_changed` the client received.
    #[derive(Clone)]
    struct Counter(Arc<watch::Sender<usize>>);
    impl ClientHandler for Counter {
        async fn on_tool_list_changed(&self, _ctx: NotificationContext<RoleClient>) {
            self.0.send_modify(|n| *n += 1);
        }
    }

    struct Peers {
        server: RunningService<RoleServer, Server>,
        client: RunningService<RoleClient, Counter>,
        received: watch::Receiver<usize>,
    }

    impl Peers {
        /// Waits until the client has received `n` notifications.
        async fn received(&mut self, n: usize) {
            tokio::time::timeout(PATIENCE, self.received.wait_for(|got| *got >= n))
                .await
                .unwrap_or_else(|_| panic!("timed out waiting for {n} list_changed"))
                .expect("the counter lives as long as the client");
        }

        fn count(&self) -> usize {
            *self.received.borrow()
        }
    }

    async fn connect() -> Peers {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let (tx, received) = watch::channel(0);
        let (server, client) = tokio::join!(Server.serve(a), Counter(Arc::new(tx)).serve(b));
        Peers {
            server: server.unwrap(),
            client: client.unwrap(),
            received,
        }
    }

    fn catalog(tools: &[&str]) -> Arc<Catalog> {
        let entry = BackendCatalog {
            tools: tools
                .iter()
                .map(|t| {
                    crate::catalog::Entry::from_json(
                        crate::catalog::EntryKind::Tool,
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

    fn registry(current: &Generations) -> Arc<Sessions> {
        registry_on(current, Background::detached())
    }

    fn registry_on(current: &Generations, background: Background) -> Arc<Sessions> {
        let context = Arc::new(pool::Context {
            generations: Default::default(),
            naming: crate::config::Naming::Prefix {
                separator: "__".into(),
            },
            exchanger: None,
            views: Default::default(),
            instances: crate::backend::instances::Instances::new(4),
        });
        let search = Arc::new(crate::search::ToolSearch::new(
            Default::default(),
            crate::config::Naming::Prefix {
                separator: "__".into(),
            },
        ));
        Sessions::new(current.clone(), background, context, search)
    }

    /// Waits until session `id`'s worker has handled wake-up `asked`, and
    /// says what it has done by then.
    async fn handled(sessions: &Sessions, id: u64, asked: u64) -> Progress {
        let mut rx = sessions.progress(id).expect("the session is registered");
        let p = tokio::time::timeout(PATIENCE, rx.wait_for(|p| p.handled >= asked))
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for wake-up {asked}"))
            .expect("the worker is running");
        *p
    }

    /// Waits until the worker behind `rx` has ended; what it had done.
    async fn ended(mut rx: watch::Receiver<Progress>) -> Progress {
        tokio::time::timeout(PATIENCE, async { while rx.changed().await.is_ok() {} })
            .await
            .expect("timed out waiting for the worker to end");
        *rx.borrow()
    }

    /// A listen stream is acknowledged before it is registered: a change
    /// in between must reach it, not become its starting point.
    ///
    /// ```text
    /// shown ["a"] ── catalog becomes ["a","b"] ── registered: list_changed
    /// ```
    #[tokio::test]
    async fn a_change_between_being_shown_and_registering_is_heard() {
        let current = Generations::default();
        current.publish_catalog(catalog(&["a"]));
        let shown = current.catalog();
        let sessions = registry(&current);
        current.publish_catalog(catalog(&["a", "b"]));
        let mut p = connect().await;
        sessions.add_shown(
            1,
            Channel::Session(p.server.peer().clone()),
            None,
            Outbox::new(8),
            Viewer {
                principal: Principal::local(),
                capset: CapSet::none(),
            },
            false,
            shown,
        );
        p.received(1).await;

        // Registered with what it was shown now: nothing to tell.
        let shown = current.catalog();
        let q = connect().await;
        sessions.add_shown(
            2,
            Channel::Session(q.server.peer().clone()),
            None,
            Outbox::new(8),
            Viewer {
                principal: Principal::local(),
                capset: CapSet::none(),
            },
            false,
            shown,
        );
        let asked = sessions.resync_all();
        assert_eq!(handled(&sessions, 2, asked).await.notified, 0);
        assert_eq!(q.count(), 0);
        drop((p.client, q.client));
    }

    #[tokio::test]
    async fn a_session_hears_only_changes_it_has_not_seen() {
        let current = Generations::default();
        current.publish_catalog(catalog(&["a"]));
        let sessions = registry(&current);
        let mut p = connect().await;
        sessions.add(
            1,
            Channel::Session(p.server.peer().clone()),
            None,
            Outbox::new(8),
            Viewer {
                principal: Principal::local(),
                capset: CapSet::none(),
            },
            false,
        );

        let asked = sessions.resync_all();
        let done = handled(&sessions, 1, asked).await;
        assert_eq!(done.notified, 0, "nothing changed since it registered");

        current.publish_catalog(catalog(&["a", "b"]));
        let asked = sessions.resync_all();
        assert_eq!(handled(&sessions, 1, asked).await.notified, 1);
        p.received(1).await;

        // An equal snapshot (rebuilt, not the same object) is no change.
        current.publish_catalog(catalog(&["a", "b"]));
        let asked = sessions.resync_all();
        assert_eq!(handled(&sessions, 1, asked).await.notified, 1);
        assert_eq!(p.count(), 1);
        drop(p.client);
    }

    #[tokio::test]
    async fn a_removed_session_hears_nothing_more() {
        let current = Generations::default();
        let sessions = registry(&current);
        let p = connect().await;
        sessions.add(
            7,
            Channel::Session(p.server.peer().clone()),
            None,
            Outbox::new(8),
            Viewer {
                principal: Principal::local(),
                capset: CapSet::none(),
            },
            false,
        );
        assert_eq!(sessions.len(), 1);
        let progress = sessions.progress(7).unwrap();

        sessions.remove(7); // DELETE or close of the client session
        assert_eq!(sessions.len(), 0);
        current.publish_catalog(catalog(&["x"]));
        sessions.resync_all();
        let done = ended(progress).await;
        assert_eq!(done.notified, 0, "its worker ended without a resync");
        assert_eq!(p.count(), 0);
    }

    #[tokio::test]
    async fn a_session_whose_client_is_gone_leaves_at_its_next_resync() {
        let current = Generations::default();
        let sessions = registry(&current);
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
            Viewer {
                principal: Principal::local(),
                capset: CapSet::none(),
            },
            false,
        );
        assert_eq!(sessions.len(), 1, "registered (registration cannot tell)");
        let progress = sessions.progress(3).unwrap();

        current.publish_catalog(catalog(&["y"]));
        sessions.resync_all();
        let done = ended(progress).await;
        assert_eq!(done.notified, 0, "the send failed");
        assert_eq!(sessions.len(), 0, "the dead session removed");
    }

    #[tokio::test]
    async fn concurrent_changes_coalesce_per_session() {
        let current = Generations::default();
        let sessions = registry(&current);
        let mut p = connect().await;
        sessions.add(
            1,
            Channel::Session(p.server.peer().clone()),
            None,
            Outbox::new(8),
            Viewer {
                principal: Principal::local(),
                capset: CapSet::none(),
            },
            false,
        );
        // Many deliveries before the worker runs: at most one in flight and
        // one queued, each comparing against the latest snapshot.
        let mut asked = 0;
        for i in 0..50 {
            current.publish_catalog(catalog(&[&format!("t{i}")]));
            asked = sessions.resync_all();
        }
        // Once the last wake-up is handled the worker has seen the last
        // snapshot: any queued resync finds nothing new.
        let n = handled(&sessions, 1, asked).await.notified;
        assert!(
            (1..=2).contains(&n),
            "{n} notifications for 50 back-to-back deliveries"
        );
        p.received(n as usize).await;
        drop(p.client);
    }

    #[tokio::test]
    async fn shutdown_ends_every_worker() {
        let current = Generations::default();
        let (tracker, shutdown) = (
            tokio_util::task::TaskTracker::new(),
            tokio_util::sync::CancellationToken::new(),
        );
        let sessions = registry_on(&current, Background::new(tracker.clone(), shutdown.clone()));
        let p = connect().await;
        for id in [1, 2] {
            sessions.add(
                id,
                Channel::Session(p.server.peer().clone()),
                None,
                Outbox::new(8),
                Viewer {
                    principal: Principal::local(),
                    capset: CapSet::none(),
                },
                false,
            );
        }
        shutdown.cancel();
        tracker.close();
        tokio::time::timeout(PATIENCE, tracker.wait())
            .await
            .expect("the workers end at shutdown, though their sessions stay registered");
        assert_eq!(sessions.len(), 2);
    }
}
