//! The front: the MCP server clients talk to, in front of the backends.
//!
//! [`Gateway`] is what a request reads: the generation in force (catalog
//! and backend set, `backend::generation`), the session registry, the
//! caller's keys and policies, the audit. Each client session is a
//! [`session::FrontSession`] (the rmcp `ServerHandler`) that reads the
//! generation and routes requests; it never keeps its own copy of the
//! catalog. Its own backend connections, and its own catalogs of
//! `forward_auth` backends (merged over the snapshot), live in its
//! [`Pool`] (`backend::pool`, handed what it reads when made, never the
//! gateway). [`http`] and [`stdio`] expose it; `raw` and rmcp's typed
//! handlers are the two executors of a `dataplane::plan`.
//!
//! What composes the front with the backends' supervisors, the update
//! task, reloads and the control API is `crate::app` (the composition
//! root); the front never names it (`scripts/structure.sh`).
mod admission;
mod adopt;
mod answers;
mod bad_params;
mod caller_pools;
mod discovery;
mod fanout;
mod fronts;
pub mod http;
mod http_errors;
pub mod isolation;
mod links;
mod mrtr;
mod raw;
mod relayed;
mod resource_watch;
mod route;
mod session;
mod session_ids;
mod sessions;
pub mod stdio;
mod streams;
mod tool_search;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rmcp::ErrorData as McpError;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backend::capset::CapSet;
use crate::backend::pool::{self, Pool};
use crate::backend::{Backend, Bounds, Downstream};
use crate::backend::{BackendSet, Generation, Generations};
use crate::background::Background;
use crate::catalog::Catalog;
use crate::config::{BackendConfig, Config, Naming};
use crate::redact::Redactor;
use crate::store::CallStore;
pub use session::FrontSession;
use sessions::Sessions;

/// The front: what every request and session reads. Built by the
/// composition root (`crate::app`), which also publishes its generations.
pub struct Gateway {
    /// The config the gateway started with; a reload changes the backend
    /// set, the keys, policies and audit settings (see `app::reload`),
    /// never this.
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
    downstream: Arc<dyn Downstream>,
    sessions: Arc<Sessions>,
    /// The backend subscriptions clients' resource watches need.
    resource_watch: Arc<resource_watch::ResourceWatch>,
    next_session: AtomicU64,
    /// The HTTP endpoint's session manager, once serving over HTTP.
    streams: std::sync::OnceLock<Arc<streams::StreamSessions>>,
    /// What the raw path knows of each HTTP client session.
    fronts: fronts::Fronts,
    /// `[[auth.keys]]` in force: `config.auth.keys` at start, replaced by
    /// each config reload that changes them.
    mcp_keys: Arc<crate::auth::Keys>,
    /// The validator of `[auth.oauth]` tokens, shared by `/mcp` and the
    /// control API (restart-only: a reload never replaces it).
    oauth: Option<Arc<crate::auth::oauth::OAuth>>,
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
    /// Where an MRTR retry for a call parked on another replica is sent
    /// (a cluster's; set once at assembly).
    retry_route: std::sync::OnceLock<Arc<dyn crate::cluster::retry::RetryRoute>>,
    /// Client sessions by their sealed ids (`session_ids.rs`).
    session_book: Arc<dyn crate::cluster::book::SessionBook>,
    /// `find_tool` / `call_tool` and the index behind them
    /// (`crate::search`).
    tool_search: Arc<crate::search::ToolSearch>,
}

/// A backend's ask to be listed again (its `list_changed`), by name: the
/// update task carries it out.
pub type Refreshes = mpsc::UnboundedReceiver<Arc<str>>;

impl Gateway {
    /// The front of `config`, serving no backend yet (the composition
    /// root publishes the first backend set), and the stream of its
    /// backends' asks to be listed again. `calls`: where the audit
    /// writes (none: audit off); `session_book`: where client sessions
    /// are opened, resolved and closed; `rates`: where `[[policy]]` rate
    /// buckets live.
    pub fn new(
        config: Config,
        calls: Option<Arc<dyn CallStore>>,
        session_book: Arc<dyn crate::cluster::book::SessionBook>,
        rates: Arc<dyn crate::cluster::rate::Rates>,
        redactor: Redactor,
        tracker: &TaskTracker,
        shutdown: &CancellationToken,
    ) -> (Arc<Gateway>, Refreshes) {
        let oauth = config
            .auth
            .oauth
            .clone()
            .map(crate::auth::oauth::OAuth::new);
        let background = Background::new(tracker.clone(), shutdown.clone());
        let generations = Generations::default();
        generations.publish_policies(crate::policy::Policies::with_rates(
            config.policies.clone(),
            rates,
        ));
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
        let tool_search = Arc::new(crate::search::ToolSearch::new(
            config.tool_search.clone(),
            config.naming.clone(),
        ));
        #[cfg(feature = "semantic")]
        if let Some(dir) = &config.tool_search.model_dir {
            match crate::search::semantic::Model::load(dir) {
                Ok(model) => {
                    tracing::info!(model_dir = %dir.display(), "tool search: the semantic arm is on");
                    tool_search.set_vectors(Arc::new(crate::search::vectors::Vectors::new(
                        Arc::new(model),
                    )));
                }
                Err(e) => {
                    tracing::error!(error = %e, "tool search: the semantic model did not load; find_tool ranks by keywords alone")
                }
            }
        }
        let sessions = Sessions::new(
            generations.clone(),
            background.clone(),
            pool_context.clone(),
            tool_search.clone(),
        );
        let (refresh_tx, refresh_rx) = mpsc::unbounded_channel();
        let downstream: Arc<dyn Downstream> = Arc::new(fanout::Fanout {
            sessions: sessions.clone(),
            refresh: refresh_tx,
            redactor: redactor.clone(),
        });
        let resource_watch = {
            let sessions = sessions.clone();
            Arc::new(resource_watch::ResourceWatch::new(Box::new(move |uri| {
                sessions.resource_updated(None, uri)
            })))
        };
        let caller_pools =
            caller_pools::CallerPools::new(pool_context.clone(), config.limits.max_sessions);
        let mrtr = mrtr::Mrtr::new(&config.cluster)
            .inspect_err(|e| tracing::error!(error = %e, "no random key for MRTR request states: backends cannot ask 2026-07-28 clients"))
            .ok();
        let gw = Arc::new(Gateway {
            generations,
            pool_context,
            caller_pools,
            downstream,
            sessions,
            resource_watch,
            next_session: AtomicU64::new(1),
            streams: std::sync::OnceLock::new(),
            fronts: fronts::Fronts::default(),
            mcp_keys: Arc::new(crate::auth::Keys::new(config.auth.keys.clone())),
            oauth,
            audit: crate::audit::CallAudit::start(
                calls,
                config.audit.clone(),
                redactor.clone(),
                tracker,
                shutdown,
            ),
            config,
            redactor,
            background,
            answers: relayed::Answers::default(),
            mrtr,
            retry_route: std::sync::OnceLock::new(),
            session_book,
            tool_search,
        });
        (gw, refresh_rx)
    }

    /// The generation in force: what one request is decided against,
    /// read once and held to its end.
    pub fn generation(&self) -> Arc<Generation> {
        self.generations.load()
    }

    /// Who publishes generations (the composition root) writes through
    /// this; requests only [`load`](Generations::load).
    pub fn generations(&self) -> &Generations {
        &self.generations
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

    /// The instances run for one client (`backend::instances`).
    pub fn instances(&self) -> &crate::backend::instances::Instances {
        &self.pool_context.instances
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

    /// A new client session's pool of backend connections.
    fn new_pool(&self, session: u64) -> Arc<Pool> {
        Pool::new(session, self.pool_context.clone())
    }

    /// Every client's pool: the sessions' and the sessionless callers'.
    pub fn pools(&self) -> Vec<Arc<Pool>> {
        let mut pools = self.sessions.pools();
        pools.extend(self.caller_pools.pools());
        pools
    }

    /// Tells every session to compare its view with the generation in
    /// force (a catalog or policy change): those whose view changed hear
    /// `list_changed`.
    pub fn resync_all(&self) {
        self.sessions.resync_all();
    }

    /// `backends` were listed by a new instance (or listed again): the
    /// resources clients watch on them move to the instance serving each
    /// now, if another served them before (see `resource_watch`). Runs in
    /// the background.
    pub fn rewatch(&self, backends: impl IntoIterator<Item = Arc<str>>) {
        if self.resource_watch.is_empty() {
            return;
        }
        let set = self.backends();
        let serving: Vec<Arc<Backend>> = backends
            .into_iter()
            .filter_map(|name| set.get(&name).cloned())
            .filter(|b| crate::health::advertisable(b.state()))
            .collect();
        if serving.is_empty() {
            return;
        }
        let watch = self.resource_watch.clone();
        self.background.spawn_until_shutdown(async move {
            for b in serving {
                watch.follow(&b).await;
            }
        });
    }

    /// Tool search (`crate::search`): its index follows every backend's
    /// listing (the update task re-indexes), its settings each reload.
    pub fn tool_search(&self) -> &Arc<crate::search::ToolSearch> {
        &self.tool_search
    }

    /// Embeds, in the background, what the index holds that the semantic
    /// arm has no vector of yet (after a re-indexing); nothing without a
    /// model.
    pub fn fill_vectors(&self) {
        if self.tool_search.vectors().is_none() {
            return;
        }
        let search = self.tool_search.clone();
        self.background.spawn_until_shutdown(async move {
            let filled = tokio::task::spawn_blocking(move || search.fill_vectors()).await;
            match filled {
                Ok(Ok(n)) if n > 0 => {
                    tracing::info!(embedded = n, "tool search: documents embedded for the semantic arm")
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "tool search: could not embed documents; they are ranked by keywords alone")
                }
                Err(e) => tracing::warn!(error = %e, "tool search: the embedding task failed"),
            }
        });
    }

    /// Live client sessions.
    pub fn session_count(&self) -> usize {
        self.sessions.len()
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

    /// A backend of `config` that relays what it hears to this front's
    /// sessions; not yet supervised nor published.
    pub fn new_backend(&self, config: &BackendConfig) -> Arc<Backend> {
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

    /// What masks secrets in text leaving the gateway.
    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// Relayed answers waiting to leave (`relayed.rs`).
    fn answers(&self) -> &relayed::Answers {
        &self.answers
    }

    /// The MRTR store (see `mrtr.rs`).
    fn mrtr(&self) -> Result<&mrtr::Mrtr, McpError> {
        self.mrtr.as_ref().ok_or_else(|| {
            McpError::internal_error(
                "vigil: this gateway has no key to seal request states (see its log)",
                None,
            )
        })
    }

    /// Routes MRTR retries for calls parked on other replicas through
    /// `route` (set once, by the composition root of a cluster).
    pub fn set_retry_route(&self, route: Arc<dyn crate::cluster::retry::RetryRoute>) {
        let _ = self.retry_route.set(route);
    }

    /// Carries out `retry`, which another replica routed here; see
    /// `mrtr::routed`.
    pub async fn carry_out(
        &self,
        retry: crate::cluster::retry::Retry,
    ) -> crate::cluster::retry::Forwarded {
        match self.mrtr() {
            Ok(m) => m.carry_out(retry).await,
            Err(e) => crate::cluster::retry::Forwarded::Failed(e),
        }
    }

    /// The audit of MCP calls, which the call paths record through.
    pub fn audit(&self) -> &crate::audit::CallAudit {
        &self.audit
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
            || self.generation().policies.configured()
            || self.backends().has_own_catalogs()
    }

    /// The `[auth.oauth]` validator, when configured.
    pub fn oauth(&self) -> Option<Arc<crate::auth::oauth::OAuth>> {
        self.oauth.clone()
    }

    /// Where clients would share a backend's per-session state for want of
    /// `[auth]` (`isolation.rs`).
    pub fn isolation_warnings(&self) -> Vec<String> {
        let authenticated = self.mcp_keys.required() || self.oauth.is_some();
        isolation::running(authenticated, self.backends().iter())
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

    /// A registry id for one `subscriptions/listen` stream.
    fn new_listen_id(&self) -> u64 {
        self.next_session.fetch_add(1, Ordering::Relaxed)
    }
}
