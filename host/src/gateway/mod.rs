//! The gateway: the front MCP server that clients talk to, in front of the
//! backends.
//!
//! [`Gateway`] owns the backend set, the current [`Catalog`] snapshot and
//! the session registry. One task ([`Gateway::run_updates`]) applies backend
//! updates in order: the catalog [`Registry`] rebuilds and diffs the
//! snapshot, the task installs it and tells the debouncer
//! (`freshness::debounce`), which wakes each session's resync worker
//! (`sessions.rs`). Each client session is a [`session::FrontSession`] (the
//! rmcp `ServerHandler`) that reads the snapshot and routes requests; it
//! never keeps its own copy of the catalog. Its own backend connections,
//! and its own catalogs of `forward_auth` backends (merged over the
//! snapshot), live in its [`Pool`] (`backend::pool`, handed what it reads
//! when made, never the gateway). [`http`] and [`stdio`] expose it;
//! `reload.rs` carries out what `config::diff` found changed in the config
//! file.

mod admission;
mod answers;
mod bad_params;
mod caller_pools;
mod control;
mod discovery;
mod fronts;
pub mod http;
mod http_errors;
pub mod isolation;
mod links;
mod mrtr;
mod raw;
mod relayed;
mod reload;
pub mod reload_trigger;
mod resource_watch;
mod route;
mod session;
mod session_ids;
mod sessions;
pub mod stdio;
mod streams;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rmcp::ErrorData as McpError;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backend::capset::CapSet;
use crate::backend::pool::{self, Pool};
use crate::backend::{Backend, BackendUpdate, Bounds, Downstream, ListKind};
use crate::backend::{BackendSet, Generation, Generations};
use crate::background::Background;
use crate::catalog::registry::{self, Registry};
use crate::catalog::{Catalog, Conflict};
use crate::config::{BackendConfig, RuntimeKind, Transport};
use crate::config::{Config, Naming};
use crate::freshness::debounce::Debouncer;
use crate::freshness::poller::Listing;
use crate::health::sanitize::Sanitizer;
use crate::health::{HealthState, Transition, advertisable};
use crate::redact::Redactor;
use crate::runtime::Runtime;
use crate::runtime::container::ContainerRuntime;
use crate::runtime::process::{ProcessRuntime, StderrTail};
use crate::runtime::remote::RemoteRuntime;
use crate::store::{HealthStore, HealthWriter, InstanceRecord, Stores};
use crate::supervisor::{Outlets, Supervisor};
pub use reload::{ReloadError, ReloadSummary};
pub use session::FrontSession;
use sessions::Sessions;

/// Why the gateway refused to start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{file}: naming = \"none\" but {}", describe_conflicts(.conflicts))]
    Conflicts {
        file: String,
        conflicts: Vec<Conflict>,
    },
}

fn describe_conflicts(conflicts: &[Conflict]) -> String {
    let each: Vec<String> = conflicts
        .iter()
        .map(|c| {
            format!(
                "backends '{}' and '{}' both export the {} `{}`",
                c.kept, c.hidden, c.kind, c.name
            )
        })
        .collect();
    format!(
        "{}; use naming = \"prefix\" or disable one of them",
        each.join("; ")
    )
}

pub struct Gateway {
    /// The config the gateway started with; a reload changes the backend
    /// set and the API tokens (see `reload.rs`), never this.
    pub config: Config,
    /// The generation in force: the catalog and the backend set every
    /// call reads as one snapshot (`backend::generation`); published by the
    /// update task (catalog) and by start and reloads (set).
    generations: Generations,
    /// What each session's pool is handed (shares `backends`).
    pool_context: Arc<pool::Context>,
    /// The `forward_auth` connections of sessionless (2026-07-28) requests,
    /// per caller and credentials.
    caller_pools: caller_pools::CallerPools,
    /// Starts and stops supervisors (set once at launch; used by reloads).
    spawner: OnceLock<Spawner>,
    downstream: Arc<dyn Downstream>,
    /// Serializes config reloads.
    reloading: tokio::sync::Mutex<()>,
    sessions: Arc<Sessions>,
    /// The backend subscriptions clients' resource watches need.
    resource_watch: Arc<resource_watch::ResourceWatch>,
    next_session: AtomicU64,
    /// The HTTP endpoint's session manager, once serving over HTTP.
    streams: std::sync::OnceLock<Arc<streams::StreamSessions>>,
    /// What the raw path knows of each HTTP client session.
    fronts: fronts::Fronts,
    /// Every health transition, for whoever listens (API stream, notifiers).
    pub events: broadcast::Sender<Transition>,
    /// The plugin registry, when `[plugins] dir` is set (set at launch).
    plugins: OnceLock<Option<Arc<crate::plugins::Plugins>>>,
    /// Durable health state and audit logs, when configured.
    pub store: Option<Stores>,
    /// The control API's tokens in force: `config.api.tokens` at start,
    /// replaced by each config reload that changes them.
    api_tokens: Arc<crate::api::Tokens>,
    /// `[[auth.keys]]` in force: `config.auth.keys` at start, replaced by
    /// each config reload that changes them.
    mcp_keys: Arc<crate::auth::Keys>,
    /// The validator of `[auth.oauth]` tokens, shared by `/mcp` and the
    /// control API (restart-only: a reload never replaces it).
    oauth: Option<Arc<crate::auth::oauth::OAuth>>,
    /// `[[policy]]` in force: the one decision on what each principal may
    /// see and call, replaced by each reload that changes it.
    policies: Arc<crate::policy::Policies>,
    /// Masks secrets in reasons, forwarded errors (and, shared with the log
    /// writer, logs); kept in step with the backend set.
    redactor: Redactor,
    /// The audit of MCP calls (off without a store).
    audit: crate::audit::CallAudit,
    /// Where backends run their connections' workers.
    background: Background,
    /// Relayed answers waiting for their placeholders to leave
    /// (`relayed.rs`).
    answers: relayed::Answers,
    /// Backend calls waiting for a 2026-07-28 client's answer (MRTR);
    /// `None` if the OS gave no random key.
    mrtr: Option<mrtr::Mrtr>,
    /// Client sessions by their sealed ids (`session_ids.rs`).
    session_book: Arc<dyn crate::cluster::book::SessionBook>,
}

/// Relays backend traffic that is not an answer to a request.
struct Fanout {
    sessions: Arc<Sessions>,
    refresh: mpsc::UnboundedSender<Arc<str>>,
    /// A backend's log messages are its log lines: masked like Vigil's.
    redactor: Redactor,
}

impl Downstream for Fanout {
    fn list_changed(&self, backend: &Arc<str>, _kind: ListKind) {
        let _ = self.refresh.send(backend.clone());
    }
    fn log(
        &self,
        _backend: &Arc<str>,
        session: Option<u64>,
        mut params: rmcp::model::LoggingMessageNotificationParam,
    ) {
        self.redactor.mask_json(&mut params.data);
        self.sessions.log(session, params)
    }
    fn resource_updated(&self, _backend: &Arc<str>, session: Option<u64>, uri: String) {
        self.sessions.resource_updated(session, uri);
    }
    fn lane_log(
        &self,
        _backend: &Arc<str>,
        principal: &crate::auth::CallerKey,
        mut params: rmcp::model::LoggingMessageNotificationParam,
    ) {
        self.redactor.mask_json(&mut params.data);
        self.sessions.lane_log(principal, params)
    }
    fn variant_listed(&self, _backend: &Arc<str>) {
        self.sessions.resync_all();
    }
    fn lane_listed(&self, _backend: &Arc<str>, caller: &crate::auth::CallerKey) {
        self.sessions.lane_listed(caller);
    }
    fn caller_log(
        &self,
        _backend: &Arc<str>,
        caller: &crate::auth::CallerKey,
        mut params: rmcp::model::LoggingMessageNotificationParam,
    ) {
        self.redactor.mask_json(&mut params.data);
        self.sessions.caller_log(caller, params)
    }
    fn caller_resource_updated(
        &self,
        _backend: &Arc<str>,
        caller: &crate::auth::CallerKey,
        uri: String,
    ) {
        self.sessions.caller_resource_updated(caller, uri);
    }
}

/// What starting and stopping supervisors after launch needs.
struct Spawner {
    outlets: Outlets,
    tracker: TaskTracker,
    shutdown: CancellationToken,
    /// Each running supervisor's stop token, by [`Backend::uid`].
    stops: Mutex<HashMap<u64, CancellationToken>>,
}

/// A gateway whose backends are starting; see [`Gateway::launch`].
pub struct Startup {
    pub gateway: Arc<Gateway>,
    debouncer: Debouncer,
    updates: mpsc::UnboundedReceiver<BackendUpdate>,
    refresh: mpsc::UnboundedReceiver<Arc<str>>,
    shutdown: CancellationToken,
    reported: std::collections::HashSet<Arc<str>>,
}

/// A supervisor's update as the catalog registry takes it. The one place
/// the gateway asks [`advertisable`] whether a state shows a backend's
/// capabilities.
fn registry_update(u: BackendUpdate) -> registry::Update {
    registry::Update {
        advertisable: advertisable(u.state),
        backend: u.backend,
        uid: u.uid,
        removed: u.removed,
        catalog: u.catalog,
    }
}

/// `first` and every update already queued behind it, in order.
fn drain(
    first: BackendUpdate,
    rx: &mut mpsc::UnboundedReceiver<BackendUpdate>,
) -> Vec<BackendUpdate> {
    let mut batch = vec![first];
    while let Ok(u) = rx.try_recv() {
        batch.push(u);
    }
    batch
}

/// "alpha: running, beta: offline" for the log; long batches are cut.
fn describe_batch(batch: &[BackendUpdate]) -> String {
    const SHOWN: usize = 5;
    let mut text: Vec<String> = batch
        .iter()
        .take(SHOWN)
        .map(|u| format!("{}: {}", u.backend, u.state))
        .collect();
    if batch.len() > SHOWN {
        text.push(format!("and {} more", batch.len() - SHOWN));
    }
    text.join(", ")
}

impl Gateway {
    /// [`Gateway::launch`], then [`Startup::settle`].
    pub async fn start(
        config: Config,
        store: Option<Stores>,
        redactor: Redactor,
        tracker: &TaskTracker,
        shutdown: CancellationToken,
    ) -> Result<Arc<Gateway>, StartError> {
        Self::launch(config, store, redactor, tracker, shutdown)
            .await
            .settle(tracker)
            .await
    }

    /// Starts every backend's supervisor and returns at once; the gateway
    /// can already answer the control API (its backends report `starting`)
    /// but serves MCP only after [`Startup::settle`]. Health state that must
    /// survive a restart (quarantine, counts) is restored from `store`.
    /// `redactor` gets the config's secrets now and after every reload;
    /// share it with whatever else must mask them (the log writer).
    pub async fn launch(
        config: Config,
        store: Option<Stores>,
        redactor: Redactor,
        tracker: &TaskTracker,
        shutdown: CancellationToken,
    ) -> Startup {
        let policies = Arc::new(crate::policy::Policies::new(config.policies.clone()));
        let oauth = config
            .auth
            .oauth
            .clone()
            .map(crate::auth::oauth::OAuth::new);
        let background = Background::new(tracker.clone(), shutdown.clone());
        let generations = Generations::default();
        let pool_context = Arc::new(pool::Context {
            generations: generations.clone(),
            naming: config.naming.clone(),
            // RFC 8693 token exchange for `forward_auth` backends (with OAuth).
            exchanger: oauth
                .clone()
                .map(|o| Arc::new(crate::auth::exchange::Exchanger::new(o))),
            views: Default::default(),
            instances: crate::backend::instances::Instances::new(config.limits.max_instances),
        });
        let sessions = Sessions::new(
            generations.clone(),
            policies.clone(),
            background.clone(),
            pool_context.clone(),
        );
        let (refresh_tx, refresh_rx) = mpsc::unbounded_channel();
        let downstream: Arc<dyn Downstream> = Arc::new(Fanout {
            sessions: sessions.clone(),
            refresh: refresh_tx,
            redactor: redactor.clone(),
        });
        // Room for a mass restart of a thousand backends (three transitions
        // each) before a listener counts as behind.
        let (events, _) = broadcast::channel(16 * 1024);
        let caller_pools =
            caller_pools::CallerPools::new(pool_context.clone(), config.limits.max_sessions);
        let session_book = session_book(&config.data_dir);
        let gw = Arc::new(Gateway {
            generations,
            pool_context,
            caller_pools,
            spawner: OnceLock::new(),
            downstream,
            reloading: tokio::sync::Mutex::new(()),
            sessions,
            resource_watch: Arc::default(),
            next_session: AtomicU64::new(1),
            streams: std::sync::OnceLock::new(),
            fronts: fronts::Fronts::default(),
            events: events.clone(),
            plugins: OnceLock::new(),
            store: store.clone(),
            api_tokens: Arc::new(crate::api::Tokens::new(config.api.tokens.clone())),
            mcp_keys: Arc::new(crate::auth::Keys::new(config.auth.keys.clone())),
            oauth,
            policies,
            audit: crate::audit::CallAudit::start(
                store.as_ref().map(|s| s.calls.clone()),
                config.audit.clone(),
                redactor.clone(),
                tracker,
                &shutdown,
            ),
            config,
            redactor,
            background,
            answers: relayed::Answers::default(),
            mrtr: mrtr::Mrtr::new()
                .inspect_err(|e| tracing::error!(error = %e, "no random key for MRTR request states: backends cannot ask 2026-07-28 clients"))
                .ok(),
            session_book,
        });
        let restored = match &store {
            Some(store) => restore(&*store.health, &gw.config).await,
            None => Vec::new(),
        };
        let backends: Vec<Arc<Backend>> = gw
            .config
            .backends
            .iter()
            .map(|b| gw.new_backend(b))
            .collect();
        gw.install(BackendSet::new(backends));
        gw.refresh_secrets(&[]);
        if let Some(oauth) = &gw.oauth {
            oauth.spawn_refresh(tracker, shutdown.clone());
        }
        gw.log_policies(&gw.config.policies);
        let (updates_tx, updates_rx) = mpsc::unbounded_channel();
        let plugins = gw.start_plugins(tracker, &shutdown);
        let _ = gw.plugins.set(plugins.clone());
        let outlets = Outlets {
            updates: updates_tx,
            events,
            store: store.map(|s| HealthWriter::start(s.health, tracker, &shutdown)),
            plugins,
            leases: Arc::new(crate::cluster::lease::LocalLeases),
        };
        let _ = gw.spawner.set(Spawner {
            outlets: outlets.clone(),
            tracker: tracker.clone(),
            shutdown: shutdown.clone(),
            stops: Mutex::default(),
        });
        let weak = Arc::downgrade(&gw);
        gw.pool_context
            .instances
            .set_spawn(Box::new(move |child, updates| {
                weak.upgrade()?.spawn_instance(child, updates)
            }));
        let sanitizer = gw.sanitizer();
        let supervisors: Vec<Supervisor> = gw
            .backends()
            .iter()
            .map(|b| {
                let record = restored.iter().find(|r| *r.backend == *b.name);
                gw.supervisor_for(b, record, outlets.clone(), sanitizer.clone())
            })
            .collect();
        drop(outlets);
        // A backend has settled when its first start attempt ended either
        // way, or when it was restored in quarantine (no attempt comes).
        // Read before any supervisor runs: later, a state may be ahead of
        // the update that reports it.
        let reported = gw
            .backends()
            .iter()
            .filter(|b| b.state() != HealthState::Starting)
            .map(|b| b.name.clone())
            .collect();
        for (b, supervisor) in gw.backends().iter().zip(supervisors) {
            gw.spawn_supervisor(b, supervisor);
        }
        // Catalog changes reach sessions through the debouncer, off the
        // update task: the first at once, bursts coalesced per window.
        let fanout = gw.sessions.clone();
        let debouncer = Debouncer::spawn(
            gw.config.freshness.debounce,
            Box::new(move |delivery| {
                tracing::debug!(
                    generation = delivery.generation,
                    sessions = fanout.len(),
                    "catalog change delivered to sessions"
                );
                fanout.resync_all();
                Box::pin(async {})
            }),
        );
        Startup {
            debouncer,
            gateway: gw,
            updates: updates_rx,
            refresh: refresh_rx,
            shutdown,
            reported,
        }
    }
}

/// The saved state of every backend the store can read. A record this
/// build cannot read (a state a newer Vigil wrote) is skipped with a WARN
/// naming it: that backend starts fresh, every other one keeps its
/// quarantine and counts. A store that cannot be read at all is an ERROR,
/// and every backend starts fresh.
async fn restore(store: &dyn HealthStore, config: &Config) -> Vec<InstanceRecord> {
    let read = match store.load_instances().await {
        Ok(read) => read,
        Err(e) => {
            tracing::error!(kind = %e.kind(), error = %e, "could not read saved health state; every backend starts fresh");
            return Vec::new();
        }
    };
    for s in &read.skipped {
        let backend = s.backend.as_deref().unwrap_or("?");
        let consequence = if config.backends.iter().any(|b| *b.name == *backend) {
            "starts fresh"
        } else {
            "is not in the config, so nothing else changes"
        };
        tracing::warn!(
            backend,
            column = s.column,
            value = %s.value,
            "saved state not restored: {s}; backend `{backend}` {consequence}, the other backends keep theirs"
        );
    }
    read.rows
}

impl Startup {
    /// Waits up to `startup_timeout` for each backend's first start attempt
    /// to settle, then keeps applying backend updates in the background.
    /// Under `naming = "none"`, duplicate names among the connected backends
    /// refuse the start.
    pub async fn settle(self, tracker: &TaskTracker) -> Result<Arc<Gateway>, StartError> {
        let Startup {
            debouncer,
            gateway: gw,
            updates: mut updates_rx,
            refresh: refresh_rx,
            shutdown,
            mut reported,
        } = self;
        // Apply first updates until every backend has reported once.
        let mut registry = Registry::new(gw.config.naming.clone());
        let deadline = tokio::time::sleep(gw.config.startup_timeout);
        tokio::pin!(deadline);
        let expected = gw.backends().len();
        while reported.len() < expected {
            tokio::select! {
                u = updates_rx.recv() => match u {
                    Some(u) => {
                        let batch = drain(u, &mut updates_rx);
                        for u in &batch {
                            if u.state != HealthState::Starting {
                                reported.insert(u.backend.clone());
                            }
                        }
                        gw.apply(&mut registry, batch, &debouncer);
                    }
                    None => break,
                },
                _ = &mut deadline => {
                    tracing::warn!(waiting_for = expected - reported.len(), "startup timeout: serving without the backends still connecting");
                    break;
                }
            }
        }
        if gw.config.naming == Naming::None {
            let conflicts = gw.catalog().conflicts.clone();
            if !conflicts.is_empty() {
                shutdown.cancel();
                debouncer.stop().await;
                return Err(StartError::Conflicts {
                    file: gw.config.file.display().to_string(),
                    conflicts,
                });
            }
        }
        let source = Arc::downgrade(&gw);
        let reaped = Arc::downgrade(&gw);
        tracker.spawn(pool::reap_idle(
            gw.generations.clone(),
            move || reaped.upgrade().map(|gw| gw.pools()),
            shutdown.clone(),
        ));
        tracker.spawn(crate::freshness::poller::run(
            move || {
                source
                    .upgrade()
                    .map(|gw| gw.poll_targets())
                    .unwrap_or_default()
            },
            gw.config.poller.clone(),
            gw.config.request_timeout,
            shutdown.clone(),
        ));
        tracker.spawn(
            gw.clone()
                .run_updates(registry, updates_rx, refresh_rx, debouncer, shutdown),
        );
        Ok(gw)
    }
}

impl Gateway {
    /// Applies backend updates and refresh requests until shutdown.
    async fn run_updates(
        self: Arc<Self>,
        mut registry: Registry,
        mut updates: mpsc::UnboundedReceiver<BackendUpdate>,
        mut refresh: mpsc::UnboundedReceiver<Arc<str>>,
        debouncer: Debouncer,
        shutdown: CancellationToken,
    ) {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                Some(u) = updates.recv() => {
                    let batch = drain(u, &mut updates);
                    self.apply(&mut registry, batch, &debouncer);
                }
                Some(name) = refresh.recv() => {
                    if let Some(b) = self.backend(&name) {
                        b.request_refresh();
                    }
                }
                else => break,
            }
        }
        debouncer.stop().await;
    }

    /// Hands a batch of backend updates to the catalog `registry` (one
    /// rebuild per batch, see [`Registry::apply`]), installs the snapshot
    /// it returns, and acts on what changed: a new naming conflict is
    /// logged, a change that sessions must hear of goes to the debouncer.
    fn apply(&self, registry: &mut Registry, batch: Vec<BackendUpdate>, debouncer: &Debouncer) {
        if batch.is_empty() {
            return;
        }
        let cause = describe_batch(&batch);
        let set = self.backends();
        let listed: Vec<(Arc<str>, u64)> = batch
            .iter()
            .filter(|u| u.catalog.is_some())
            .map(|u| (u.backend.clone(), u.uid))
            .collect();
        let applied = registry.apply(set.roster(), batch.into_iter().map(registry_update));
        self.generations.publish_catalog(applied.catalog.clone());
        // Who waits for a listing wants to see it in the catalog.
        for (name, uid) in listed {
            if let Some(b) = set.get(&name).filter(|b| b.uid == uid) {
                b.listing_applied();
            }
        }
        for c in &applied.new_conflicts {
            tracing::error!(kind = c.kind, name = %c.name, kept = %c.kept, hidden = %c.hidden, "duplicate name under naming = \"none\"; serving the first backend's");
        }
        if applied.must_tell() {
            let changes = applied.changes;
            tracing::info!(updates = %cause, tools = changes.tools, resources = changes.resources, prompts = changes.prompts, forwarded_moved = applied.per_session_moved, "catalog changed");
            crate::metrics::get().catalog_changes.inc();
            if applied.shown_moved {
                debouncer.changed();
            } else {
                debouncer.content_changed();
            }
        }
    }

    /// What the capability poller lists: each backend's shared catalog,
    /// and for a `forward_auth` backend each session's own, through that
    /// session's live connection (none without one).
    fn poll_targets(&self) -> Vec<Arc<dyn Listing>> {
        let set = self.backends();
        let pools = match set.forwarded().next() {
            Some(_) => self.pools(),
            None => Vec::new(),
        };
        let mut targets: Vec<Arc<dyn Listing>> = Vec::with_capacity(set.len());
        for b in set.iter() {
            if !b.forwards_auth() {
                targets.push(b.clone());
                continue;
            }
            for p in pools.iter().filter(|p| p.has_live(b)) {
                targets.push(Arc::new(pool::SessionListing {
                    pool: p.clone(),
                    backend: b.clone(),
                }));
            }
        }
        targets
    }

    /// Opens the plugin registry of `[plugins] dir` and keeps it in step
    /// with the directory until shutdown. A registry that cannot start is
    /// logged; backends' probe plugins then report "cannot tell".
    fn start_plugins(
        &self,
        tracker: &TaskTracker,
        shutdown: &CancellationToken,
    ) -> Option<Arc<crate::plugins::Plugins>> {
        let dir = self.config.plugins.dir.clone()?;
        match crate::plugins::Plugins::new(
            dir,
            Some(self.config.plugins.cache.clone()),
            self.config.plugins.threads,
            self.config.plugins.max_file_bytes,
        ) {
            Ok(p) => {
                tracker.spawn(crate::plugins::watch::run(p.clone(), shutdown.clone()));
                tracker.spawn(crate::plugins::notify::run(
                    p.clone(),
                    self.events.subscribe(),
                    tracker.clone(),
                    shutdown.clone(),
                ));
                Some(p)
            }
            Err(e) => {
                tracing::error!(error = %e, "plugins are not running");
                None
            }
        }
    }

    /// The plugin registry, if plugins run.
    pub fn plugins(&self) -> Option<Arc<crate::plugins::Plugins>> {
        self.plugins.get().cloned().flatten()
    }

    /// The generation in force: what one request is decided against,
    /// read once and held to its end.
    pub fn generation(&self) -> Arc<Generation> {
        self.generations.load()
    }

    /// The catalog of the generation in force.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.generations.catalog()
    }

    /// What a client of `capset` sees of `shared` (`backend::views`).
    pub async fn capset_view(&self, shared: Arc<Catalog>, capset: &CapSet) -> Arc<Catalog> {
        self.pool_context.view(shared, capset).await
    }

    pub fn backend(&self, name: &str) -> Option<Arc<Backend>> {
        self.backends().get(name).cloned()
    }

    /// The backend a tool or prompt name that has no route belongs to: a
    /// backend that is down but exported it before, or (prefix naming) the
    /// configured backend its prefix names. Lets calls to a down backend
    /// fail with "unavailable" instead of "unknown tool".
    pub fn owner_of_unrouted(&self, catalog: &Catalog, name: &str) -> Option<Arc<Backend>> {
        if let Some(b) = catalog.hidden_owner(name) {
            return self.backend(b);
        }
        match &self.config.naming {
            Naming::Prefix { separator } => self
                .backends()
                .iter()
                .find(|b| {
                    name.strip_prefix(&*b.name)
                        .is_some_and(|rest| rest.starts_with(separator.as_str()))
                })
                .cloned(),
            Naming::None => None,
        }
    }

    /// The backend set of the generation in force (a reload may publish
    /// another).
    pub fn backends(&self) -> Arc<BackendSet> {
        self.generations.backends()
    }

    fn install(&self, set: BackendSet) {
        self.generations.publish_backends(set);
    }

    /// A new client session's pool of backend connections.
    fn new_pool(&self, session: u64) -> Arc<Pool> {
        Pool::new(session, self.pool_context.clone())
    }

    /// Every client's pool: the sessions' and the sessionless callers'.
    fn pools(&self) -> Vec<Arc<Pool>> {
        let mut pools = self.sessions.pools();
        pools.extend(self.caller_pools.pools());
        pools
    }

    /// What a sessionless request of `principal` with `authorization`
    /// shares with that caller's others (see `caller_pools`).
    fn caller(
        &self,
        principal: &crate::auth::Principal,
        authorization: Option<&str>,
        capset: &crate::backend::capset::CapSet,
    ) -> caller_pools::Caller {
        self.caller_pools.get(principal, authorization, capset, || {
            self.next_session.fetch_add(1, Ordering::Relaxed)
        })
    }

    fn new_backend(&self, config: &BackendConfig) -> Arc<Backend> {
        let bounds = Bounds {
            connect: self.config.connect_timeout,
            request: self.config.request_timeout_for(config),
            list: self.config.limits.list,
            max_result: self.config.limits.max_result_bytes,
        };
        Backend::new(
            config.clone(),
            bounds,
            self.downstream.clone(),
            self.background.clone(),
        )
    }

    /// A supervisor for `b`, restoring `record`, reporting to `outlets`.
    fn supervisor_for(
        &self,
        b: &Arc<Backend>,
        record: Option<&InstanceRecord>,
        outlets: Outlets,
        sanitizer: Sanitizer,
    ) -> Supervisor {
        let (runtime, stderr) = runtime_for(&b.config);
        Supervisor::new(b.clone(), runtime, stderr, record, outlets, sanitizer)
    }

    /// Runs `supervisor` until shutdown or until [`Gateway::stop_supervisor`].
    fn spawn_supervisor(&self, b: &Arc<Backend>, supervisor: Supervisor) {
        let Some(spawner) = self.spawner.get() else {
            return;
        };
        let stop = spawner.shutdown.child_token();
        if let Ok(mut stops) = spawner.stops.lock() {
            stops.insert(b.uid, stop.clone());
        }
        let span = tracing::info_span!("supervisor", backend = %b.name);
        spawner
            .tracker
            .spawn(tracing::Instrument::instrument(supervisor.run(stop), span));
    }

    /// Runs the supervisor of an instance run for one client
    /// (`backend::instances`), reporting to `updates`, on the event bus
    /// and never to the store (the instance ends with its client); the
    /// token stops it.
    fn spawn_instance(
        &self,
        child: Arc<Backend>,
        updates: mpsc::UnboundedSender<BackendUpdate>,
    ) -> Option<CancellationToken> {
        let spawner = self.spawner.get()?;
        if spawner.shutdown.is_cancelled() {
            return None;
        }
        let outlets = Outlets {
            updates,
            store: None,
            ..spawner.outlets.clone()
        };
        let supervisor = self.supervisor_for(&child, None, outlets, self.sanitizer());
        let stop = spawner.shutdown.child_token();
        let span = tracing::info_span!("supervisor", backend = %child.name);
        spawner.tracker.spawn(tracing::Instrument::instrument(
            supervisor.run(stop.clone()),
            span,
        ));
        Some(stop)
    }

    /// The reason sanitizer every supervisor uses (it masks with the
    /// gateway's current secrets).
    fn sanitizer(&self) -> Sanitizer {
        Sanitizer::new(self.redactor.clone())
    }

    /// What masks secrets in text leaving the gateway.
    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// The MRTR store (see `mrtr.rs`).
    /// Relayed answers waiting to leave (`relayed.rs`).
    fn answers(&self) -> &relayed::Answers {
        &self.answers
    }

    fn mrtr(&self) -> Result<&mrtr::Mrtr, McpError> {
        self.mrtr.as_ref().ok_or_else(|| {
            McpError::internal_error(
                "vigil: this gateway has no key to seal request states (see its log)",
                None,
            )
        })
    }

    /// The audit of MCP calls, which the call paths record through.
    pub fn audit(&self) -> &crate::audit::CallAudit {
        &self.audit
    }

    /// Makes the secrets of the current backend set (and the API tokens)
    /// the ones masked everywhere, and warns about credentials too short
    /// to be masked. `retiring`: backends a reload replaced or removed,
    /// whose secrets stay masked while they shut down (their last stderr
    /// lines and logs come after the swap). Built once per backend set: it
    /// reads every backend's config.
    /// Says what `policies` let callers do: at start, and after a reload
    /// that changed them.
    fn log_policies(&self, policies: &[crate::config::PolicyConfig]) {
        if policies.is_empty() {
            if self.config.auth.required() {
                tracing::info!(
                    "no [[policy]]: every authenticated principal may list and call every tool, resource and prompt"
                );
            }
            return;
        }
        for (i, p) in policies.iter().enumerate() {
            tracing::info!(
                policy = i,
                principals = ?p.principals,
                allow = ?p.allow,
                deny = ?p.deny,
                rate = p.rate.map(|r| r.to_string()),
                rate_per_tool = p.rate_per_tool.map(|r| r.to_string()),
                "[[policy]] in force (the first entry naming a caller decides; callers no entry names may use nothing)"
            );
        }
    }

    fn refresh_secrets(&self, retiring: &[Arc<Backend>]) {
        use crate::redact::configured;
        let set = self.backends();
        let current = set.iter().map(|b| &b.config);
        // The tokens in force: a reload may have rotated them.
        let tokens = self.api_tokens.current();
        let keys = self.mcp_keys.current();
        for warning in configured::too_short(&tokens, &keys, current.clone()) {
            tracing::warn!("{warning}");
        }
        let all = current.chain(retiring.iter().map(|b| &b.config));
        let keys = configured::auth_secrets(&keys, self.config.auth.oauth.as_ref());
        self.redactor
            .replace(configured::secrets(&tokens, &keys, all));
    }

    /// The control API's live token set, which [`Gateway::reload`] replaces
    /// when the config file's `[[api.tokens]]` change; give it to
    /// [`crate::api::ApiState::new`].
    pub fn api_tokens(&self) -> Arc<crate::api::Tokens> {
        self.api_tokens.clone()
    }

    /// The live `[[auth.keys]]` the `/mcp` endpoint checks.
    pub fn mcp_keys(&self) -> Arc<crate::auth::Keys> {
        self.mcp_keys.clone()
    }

    /// Whether what a client is shown may depend on who it is: `[auth]`
    /// (then the scope of cacheable results is private, see `discovery`).
    fn views_depend_on_caller(&self) -> bool {
        self.mcp_keys.required()
            || self.oauth.is_some()
            || self.policies.configured()
            || self.backends().has_own_catalogs()
    }

    /// The `[[policy]]` set in force.
    pub fn policies(&self) -> &crate::policy::Policies {
        &self.policies
    }

    /// The `[auth.oauth]` validator, when configured.
    pub fn oauth(&self) -> Option<Arc<crate::auth::oauth::OAuth>> {
        self.oauth.clone()
    }

    /// A new front session handler (one per client session).
    pub fn new_session(self: &Arc<Self>) -> FrontSession {
        let id = self.next_session.fetch_add(1, Ordering::Relaxed);
        FrontSession::new(self.clone(), id)
    }

    fn sessions(&self) -> &Arc<Sessions> {
        &self.sessions
    }

    fn resource_watch(&self) -> &Arc<resource_watch::ResourceWatch> {
        &self.resource_watch
    }
}

impl Gateway {
    /// A registry id for one `subscriptions/listen` stream.
    fn new_listen_id(&self) -> u64 {
        self.next_session.fetch_add(1, Ordering::Relaxed)
    }
}

/// The runtime that runs `b`, and its stderr tail for process backends.
/// Config validation pairs stdio with the process runtime only, so the
/// transport decides: stdio runs a process, HTTP a container or a remote.
/// The book of client sessions: ids sealed under the key kept in
/// `data_dir` (`cluster::key`), so a restart keeps them valid. A key that
/// cannot be kept there is made for this run only (logged): ids then end
/// with the process, as the sessions behind them do anyway.
fn session_book(data_dir: &std::path::Path) -> Arc<dyn crate::cluster::book::SessionBook> {
    use crate::cluster::{book::LocalBook, key, session_id::Sealer};
    let key = key::load_or_create(data_dir).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "session ids are sealed with a key of this run only: clients reconnecting after a restart open new sessions");
        let mut k = [0u8; 32];
        if let Err(e) = getrandom::fill(&mut k) {
            // No entropy at all: the MRTR states are off too (logged).
            // A key from the clock and the process keeps ids unguessable
            // across runs only, so say it loudly.
            tracing::error!(error = %e, "no random bytes for the session key: ids are sealed with a key derived from the start time");
            use sha2::Digest as _;
            let seed = format!("{:?}{}", std::time::SystemTime::now(), std::process::id());
            k.copy_from_slice(&sha2::Sha256::digest(seed.as_bytes()));
        }
        k
    });
    Arc::new(LocalBook::new(Sealer::new(&key, None)))
}

fn runtime_for(b: &BackendConfig) -> (Arc<dyn Runtime>, Option<StderrTail>) {
    match &b.transport {
        Transport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let rt = ProcessRuntime::new(
                &b.name,
                command.clone(),
                args.clone(),
                env.clone(),
                cwd.clone(),
            );
            let tail = rt.stderr();
            (Arc::new(rt), Some(tail))
        }
        Transport::Http { url, headers, .. } => match &b.runtime {
            RuntimeKind::Container(spec) => (
                Arc::new(ContainerRuntime::new(
                    &b.name,
                    spec.clone(),
                    url.clone(),
                    headers.clone(),
                )),
                None,
            ),
            _ => (
                Arc::new(RemoteRuntime::new(url.clone(), headers.clone())),
                None,
            ),
        },
    }
}
