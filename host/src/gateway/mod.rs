//! The gateway: the front MCP server that clients talk to, in front of the
//! backends.
//!
//! [`Gateway`] owns the backends, the current [`Catalog`] snapshot and the
//! session registry. One task ([`Gateway::run_updates`]) applies backend
//! updates in order: rebuild the snapshot, diff it, fan `list_changed` out to
//! sessions. Each client session is a [`session::FrontSession`] (the rmcp
//! `ServerHandler`) that reads the snapshot and routes requests; it never
//! keeps its own copy of the catalog. [`http`] and [`stdio`] expose it.

mod control;
pub mod http;
mod http_errors;
mod route;
mod session;
mod sessions;
pub mod stdio;
mod streams;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backend::{Backend, BackendUpdate, Downstream, ListKind, Timeouts};
use crate::catalog::{BackendCatalog, Catalog, Conflict, Current};
use crate::config::{BackendConfig, RuntimeKind, Transport};
use crate::config::{Config, Naming};
use crate::freshness::debounce::Debouncer;
use crate::health::sanitize::Sanitizer;
use crate::health::{HealthState, Transition, advertisable};
use crate::runtime::Runtime;
use crate::runtime::container::ContainerRuntime;
use crate::runtime::process::{ProcessRuntime, StderrTail};
use crate::runtime::remote::RemoteRuntime;
use crate::store::{Store, StoreWriter};
use crate::supervisor::{Outlets, Supervisor};
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
    pub config: Config,
    backends: Vec<Arc<Backend>>,
    by_name: HashMap<Arc<str>, usize>,
    catalog: Arc<Current>,
    sessions: Arc<Sessions>,
    next_session: AtomicU64,
    /// The HTTP endpoint's session manager, once serving over HTTP.
    streams: std::sync::OnceLock<Arc<streams::StreamSessions>>,
    /// Every health transition, for whoever listens (API stream, notifiers).
    pub events: broadcast::Sender<Transition>,
    /// Durable health state and audit log, when configured.
    pub store: Option<Arc<dyn Store>>,
}

/// What the update task knows of each backend's catalog.
#[derive(Default)]
struct Entries {
    /// The last catalog each backend listed, kept while it is down so its
    /// names can be recognised (and calls to them answered "unavailable").
    known: HashMap<Arc<str>, BackendCatalog>,
    /// Backends whose capabilities are shown (see [`advertisable`]).
    advertised: std::collections::HashSet<Arc<str>>,
}

/// Relays backend traffic that is not an answer to a request.
struct Fanout {
    sessions: Arc<Sessions>,
    refresh: mpsc::UnboundedSender<Arc<str>>,
}

impl Downstream for Fanout {
    fn list_changed(&self, backend: &Arc<str>, _kind: ListKind) {
        let _ = self.refresh.send(backend.clone());
    }
    fn log(
        &self,
        _backend: &Arc<str>,
        session: Option<u64>,
        params: rmcp::model::LoggingMessageNotificationParam,
    ) -> futures::future::BoxFuture<'static, ()> {
        self.sessions.log(session, params)
    }
    fn resource_updated(&self, _backend: &Arc<str>, session: Option<u64>, uri: String) {
        self.sessions.resource_updated(session, uri);
    }
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
        store: Option<Arc<dyn Store>>,
        tracker: &TaskTracker,
        shutdown: CancellationToken,
    ) -> Result<Arc<Gateway>, StartError> {
        Self::launch(config, store, tracker, shutdown)
            .await
            .settle(tracker)
            .await
    }

    /// Starts every backend's supervisor and returns at once; the gateway
    /// can already answer the control API (its backends report `starting`)
    /// but serves MCP only after [`Startup::settle`]. Health state that must
    /// survive a restart (quarantine, counts) is restored from `store`.
    pub async fn launch(
        config: Config,
        store: Option<Arc<dyn Store>>,
        tracker: &TaskTracker,
        shutdown: CancellationToken,
    ) -> Startup {
        let catalog = Arc::new(Current::default());
        let sessions = Sessions::new(catalog.clone());
        let (refresh_tx, refresh_rx) = mpsc::unbounded_channel();
        let downstream: Arc<dyn Downstream> = Arc::new(Fanout {
            sessions: sessions.clone(),
            refresh: refresh_tx,
        });
        let backends: Vec<Arc<Backend>> = config
            .backends
            .iter()
            .map(|b| {
                let timeouts = Timeouts {
                    connect: config.connect_timeout,
                    request: config.request_timeout_for(b),
                };
                Backend::new(b.clone(), timeouts, downstream.clone())
            })
            .collect();
        let by_name = backends
            .iter()
            .enumerate()
            .map(|(i, b)| (b.name.clone(), i))
            .collect();
        let (events, _) = broadcast::channel(1024);
        let gw = Arc::new(Gateway {
            config,
            backends,
            by_name,
            catalog,
            sessions,
            next_session: AtomicU64::new(1),
            streams: std::sync::OnceLock::new(),
            events: events.clone(),
            store: store.clone(),
        });
        let restored = match &store {
            Some(store) => {
                let store = store.clone();
                match tokio::task::spawn_blocking(move || store.load_instances()).await {
                    Ok(Ok(records)) => records,
                    Ok(Err(e)) => {
                        tracing::error!(error = %e, "could not read saved health state; starting fresh");
                        Vec::new()
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "could not read saved health state; starting fresh");
                        Vec::new()
                    }
                }
            }
            None => Vec::new(),
        };
        let (updates_tx, updates_rx) = mpsc::unbounded_channel();
        let outlets = Outlets {
            updates: updates_tx,
            events,
            store: store.map(StoreWriter::spawn),
        };
        let sanitizer = Sanitizer::new(gw.secrets());
        let supervisors: Vec<Supervisor> = gw
            .backends
            .iter()
            .map(|b| {
                let (runtime, stderr) = runtime_for(&b.config);
                let record = restored.iter().find(|r| *r.backend == *b.name);
                Supervisor::new(
                    b.clone(),
                    runtime,
                    stderr,
                    record,
                    outlets.clone(),
                    sanitizer.clone(),
                )
            })
            .collect();
        drop(outlets);
        // A backend has settled when its first start attempt ended either
        // way, or when it was restored in quarantine (no attempt comes).
        // Read before any supervisor runs: later, a state may be ahead of
        // the update that reports it.
        let reported = gw
            .backends
            .iter()
            .filter(|b| b.state() != HealthState::Starting)
            .map(|b| b.name.clone())
            .collect();
        for supervisor in supervisors {
            let span = tracing::info_span!("supervisor", backend = %supervisor.backend_name());
            tracker.spawn(tracing::Instrument::instrument(
                supervisor.run(shutdown.child_token()),
                span,
            ));
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
        let mut entries = Entries::default();
        let deadline = tokio::time::sleep(gw.config.startup_timeout);
        tokio::pin!(deadline);
        while reported.len() < gw.backends.len() {
            tokio::select! {
                u = updates_rx.recv() => match u {
                    Some(u) => {
                        let batch = drain(u, &mut updates_rx);
                        for u in &batch {
                            if u.state != HealthState::Starting {
                                reported.insert(u.backend.clone());
                            }
                        }
                        gw.apply(&mut entries, batch, &debouncer);
                    }
                    None => break,
                },
                _ = &mut deadline => {
                    tracing::warn!(waiting_for = gw.backends.len() - reported.len(), "startup timeout: serving without the backends still connecting");
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
        tracker.spawn(crate::freshness::poller::run(
            gw.backends.clone(),
            gw.config.poller.clone(),
            gw.config.request_timeout,
            shutdown.clone(),
        ));
        tracker.spawn(
            gw.clone()
                .run_updates(entries, updates_rx, refresh_rx, debouncer, shutdown),
        );
        Ok(gw)
    }
}

impl Gateway {
    /// Applies backend updates and refresh requests until shutdown.
    async fn run_updates(
        self: Arc<Self>,
        mut entries: Entries,
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
                    self.apply(&mut entries, batch, &debouncer);
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

    /// Rebuilds the snapshot once after a batch of backend updates and
    /// notifies sessions of what changed. One rebuild per batch, not per
    /// update: a rebuild walks every backend's catalog, and a thousand
    /// backends coming up send thousands of updates.
    fn apply(&self, entries: &mut Entries, batch: Vec<BackendUpdate>, debouncer: &Debouncer) {
        if batch.is_empty() {
            return;
        }
        let cause = describe_batch(&batch);
        for u in batch {
            if let Some(c) = u.catalog {
                entries.known.insert(u.backend.clone(), c);
            }
            if advertisable(u.state) {
                entries.advertised.insert(u.backend.clone());
            } else {
                entries.advertised.remove(&u.backend);
            }
        }
        let (shown, hidden): (Vec<_>, Vec<_>) = self
            .backends
            .iter()
            .filter_map(|b| entries.known.get(&b.name).map(|c| (&b.name, c)))
            .partition(|(name, _)| entries.advertised.contains(*name));
        let next = Arc::new(
            Catalog::build(&self.config.naming, shown).with_hidden(&self.config.naming, hidden),
        );
        let previous = self.catalog.replace(next.clone());
        for c in next
            .conflicts
            .iter()
            .filter(|c| !previous.conflicts.contains(c))
        {
            tracing::error!(kind = c.kind, name = %c.name, kept = %c.kept, hidden = %c.hidden, "duplicate name under naming = \"none\"; serving the first backend's");
        }
        let changes = next.diff(&previous);
        if changes.any() {
            tracing::info!(updates = %cause, tools = changes.tools, resources = changes.resources, prompts = changes.prompts, "catalog changed");
            debouncer.changed();
        }
    }

    /// The current catalog snapshot.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.get()
    }

    pub fn backend(&self, name: &str) -> Option<&Arc<Backend>> {
        self.by_name.get(name).map(|i| &self.backends[*i])
    }

    /// The backend a tool or prompt name that has no route belongs to: a
    /// backend that is down but exported it before, or (prefix naming) the
    /// configured backend its prefix names. Lets calls to a down backend
    /// fail with "unavailable" instead of "unknown tool".
    pub fn owner_of_unrouted(&self, catalog: &Catalog, name: &str) -> Option<&Arc<Backend>> {
        if let Some(b) = catalog.hidden_owner(name) {
            return self.backend(b);
        }
        match &self.config.naming {
            Naming::Prefix { separator } => self.backends.iter().find(|b| {
                name.strip_prefix(&*b.name)
                    .is_some_and(|rest| rest.starts_with(separator.as_str()))
            }),
            Naming::None => None,
        }
    }

    pub fn backends(&self) -> &[Arc<Backend>] {
        &self.backends
    }

    /// Values that must never appear in reasons: env values, header values
    /// and API tokens from the config.
    fn secrets(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self
            .config
            .api
            .tokens
            .iter()
            .map(|t| t.secret.as_str())
            .collect();
        for b in &self.config.backends {
            match &b.transport {
                Transport::Stdio { env, .. } => v.extend(env.values().map(String::as_str)),
                Transport::Http { headers, .. } => v.extend(headers.values().map(String::as_str)),
            }
            if let RuntimeKind::Container(spec) = &b.runtime {
                v.extend(spec.env.values().map(String::as_str));
            }
        }
        v
    }

    /// A new front session handler (one per client session).
    pub fn new_session(self: &Arc<Self>) -> FrontSession {
        let id = self.next_session.fetch_add(1, Ordering::Relaxed);
        FrontSession::new(self.clone(), id)
    }

    fn sessions(&self) -> &Arc<Sessions> {
        &self.sessions
    }
}

impl Gateway {
    /// A registry id for one `subscriptions/listen` stream.
    fn new_listen_id(&self) -> u64 {
        self.next_session.fetch_add(1, Ordering::Relaxed)
    }
}

/// The runtime that runs `b`, and its stderr tail for process backends.
fn runtime_for(b: &BackendConfig) -> (Arc<dyn Runtime>, Option<StderrTail>) {
    match (&b.runtime, &b.transport) {
        (
            RuntimeKind::Process,
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            },
        ) => {
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
        (RuntimeKind::Container(spec), Transport::Http { url, headers, .. }) => (
            Arc::new(ContainerRuntime::new(
                &b.name,
                spec.clone(),
                url.clone(),
                headers.clone(),
            )),
            None,
        ),
        (_, Transport::Http { url, headers, .. }) => (
            Arc::new(RemoteRuntime::new(url.clone(), headers.clone())),
            None,
        ),
        // Config validation pairs stdio with the process runtime only.
        (
            _,
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            },
        ) => {
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
    }
}
