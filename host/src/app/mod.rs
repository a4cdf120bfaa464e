//! The composition root: what makes a running Vigil out of a config.
//!
//! [`App::launch`] builds the front (`gateway::Gateway`), publishes the
//! first backend set, restores saved health state and starts a supervisor
//! per backend; [`Startup::settle`] waits for their first start attempts
//! and leaves the update task running (`updates.rs`: supervisor updates
//! become new generations, changes wake the sessions). Reloads
//! (`reload.rs`, triggered by `reload_trigger.rs`) and the control API's
//! adapter (`control.rs`) act here, on the supervisors (`supervisors.rs`);
//! the front only serves what they publish. Which runtime runs a backend
//! is `runtime::for_backend`'s choice.

mod cluster;
mod control;
pub mod pins;
mod reload;
pub mod reload_trigger;
pub mod rollouts;
mod secrets;
mod supervisors;
mod updates;

use std::collections::HashSet;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backend::{Backend, BackendSet, BackendUpdate};
use crate::catalog::Conflict;
use crate::catalog::registry::Registry;
use crate::cluster::feed::Feed;
use crate::config::{Config, Naming};
use crate::freshness::debounce::Debouncer;
use crate::gateway::{Gateway, Refreshes};
use crate::health::HealthState;
use crate::redact::Redactor;
use crate::store::{HealthStore, HealthWriter, InstanceRecord, Stores};
use crate::supervisor::{Outlets, Supervisor};
pub use reload::{ReloadError, ReloadSummary};
use supervisors::Spawner;

/// Why Vigil refused to start.
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

/// A running Vigil: the front, and what keeps it in step with the
/// backends and the config file.
pub struct App {
    /// Itself, for what runs on after a call into it (an update).
    me: std::sync::Weak<App>,
    front: Arc<Gateway>,
    /// Starts and stops supervisors.
    spawner: Spawner,
    /// Serializes config reloads.
    reloading: tokio::sync::Mutex<()>,
    /// What supervisors report: backend updates (to the update task) and
    /// health transitions (to whoever listens: API stream, notifiers).
    feed: Arc<dyn Feed>,
    /// The plugin registry, when `[plugins] dir` is set.
    plugins: Option<Arc<crate::plugins::Plugins>>,
    /// Durable health state and audit logs, when configured.
    store: Option<Stores>,
    /// The replicas sharing the store, with several.
    replicas: Option<Arc<crate::cluster::postgres::replicas::ReplicaSet>>,
    /// Operator commands routed between replicas, with several.
    commands: Option<Arc<crate::cluster::postgres::command::Commands>>,
    /// The control API's tokens in force: `config.api.tokens` at start,
    /// replaced by each config reload that changes them.
    api_tokens: Arc<crate::api::Tokens>,
    /// The pin guard's desk: what is held back, and approvals.
    pins: Arc<pins::Pins>,
    /// Updates in progress, and the images they kept.
    rollouts: rollouts::Rollouts,
}

/// An app whose backends are starting; see [`App::launch`].
pub struct Startup {
    pub app: Arc<App>,
    debouncer: Debouncer,
    updates: mpsc::UnboundedReceiver<BackendUpdate>,
    approvals: mpsc::UnboundedReceiver<pins::Approval>,
    refresh: Refreshes,
    shutdown: CancellationToken,
    reported: HashSet<Arc<str>>,
}

impl App {
    /// [`App::launch`], then [`Startup::settle`].
    pub async fn start(
        config: Config,
        store: Option<Stores>,
        redactor: Redactor,
        tracker: &TaskTracker,
        shutdown: CancellationToken,
    ) -> Result<Arc<App>, StartError> {
        Self::launch(config, store, redactor, tracker, shutdown)
            .await
            .settle(tracker)
            .await
    }

    /// Starts every backend's supervisor and returns at once; the app can
    /// already answer the control API (its backends report `starting`)
    /// but serves MCP only after [`Startup::settle`]. Health state that
    /// must survive a restart (quarantine, counts) is restored from
    /// `store`. `redactor` gets the config's secrets now and after every
    /// reload; share it with whatever else must mask them (the log writer).
    pub async fn launch(
        config: Config,
        store: Option<Stores>,
        redactor: Redactor,
        tracker: &TaskTracker,
        shutdown: CancellationToken,
    ) -> Startup {
        let api_tokens = Arc::new(crate::api::Tokens::new(config.api.tokens.clone()));
        let cluster::Parts {
            feed,
            updates: updates_rx,
            book,
            rates,
            cluster,
        } = cluster::start(&config, store.as_ref(), tracker, &shutdown);
        let (front, refresh) = Gateway::new(
            config,
            store.as_ref().map(|s| s.calls.clone()),
            book,
            rates,
            redactor,
            tracker,
            &shutdown,
        );
        let config = &front.config;
        let feed: Arc<dyn Feed> = feed;
        let restored = match &store {
            Some(store) => restore(&*store.health, config).await,
            None => Vec::new(),
        };
        let rollouts = rollouts::Rollouts::load(
            store.as_ref().map(|s| &s.updates),
            &config.backends,
            cluster
                .as_ref()
                .map(|c| c.outlets.replica.to_string())
                .as_deref(),
        )
        .await;
        let mut configs = config.backends.clone();
        rollouts.with_kept_images(&mut configs);
        let backends: Vec<Arc<Backend>> = configs.iter().map(|b| front.new_backend(b)).collect();
        front
            .generations()
            .publish_backends(BackendSet::new(backends));
        if let Some(oauth) = front.oauth() {
            oauth.spawn_refresh(tracker, shutdown.clone());
        }
        let plugins = start_plugins(config, feed.as_ref(), tracker, &shutdown);
        let outlets = Outlets {
            feed: feed.clone(),
            store: store
                .as_ref()
                .map(|s| HealthWriter::start(s.health.clone(), tracker, &shutdown)),
            plugins: plugins.clone(),
            // One replica: every lease is granted at once, never lost.
            // Several: shared backends' leases are the cluster's
            // (`App::supervisor_with` keeps replica-local ones local).
            leases: match &cluster {
                Some(c) => Arc::new(c.leases.clone()),
                None => Arc::new(crate::cluster::lease::LocalLeases),
            },
            cluster: cluster.as_ref().map(|c| c.outlets.clone()),
        };
        let (pins, approvals) = pins::Pins::new(store.as_ref().map(|s| s.pins.clone()));
        let app = Arc::new_cyclic(|me| App {
            me: me.clone(),
            spawner: Spawner::new(outlets, tracker.clone(), shutdown.clone()),
            front,
            reloading: tokio::sync::Mutex::new(()),
            feed,
            plugins,
            store,
            replicas: cluster.as_ref().map(|c| c.replicas.clone()),
            commands: cluster.as_ref().map(|c| c.commands().clone()),
            api_tokens,
            pins,
            rollouts,
        });
        app.refresh_secrets(&[]);
        secrets::log_policies(&app.front.config, &app.front.config.policies);
        if let Some(c) = &cluster {
            let front = Arc::downgrade(&app.front);
            c.commands()
                .set_backends(Box::new(move |name| front.upgrade()?.backend(name)));
            let front = Arc::downgrade(&app.front);
            c.retries().set_here(Box::new(move |retry| {
                let front = front.clone();
                Box::pin(async move {
                    match front.upgrade() {
                        Some(gw) => gw.carry_out(retry).await,
                        None => crate::cluster::retry::Forwarded::Failed(
                            rmcp::ErrorData::internal_error("vigil: shutting down", None),
                        ),
                    }
                })
            }));
            app.front.set_retry_route(c.retries().clone());
            let pins = Arc::downgrade(&app.pins);
            c.approvals.set(Box::new(move |backend| {
                if let Some(pins) = pins.upgrade() {
                    pins.heard(backend);
                }
            }));
        }
        let weak = Arc::downgrade(&app);
        app.front
            .instances()
            .set_spawn(Box::new(move |child, updates| {
                weak.upgrade()?.spawn_instance(child, updates)
            }));
        let set = app.front.backends();
        let supervisors: Vec<Supervisor> = set
            .iter()
            .map(|b| app.supervisor_for(b, &restored))
            .collect();
        // A backend has settled when its first start attempt ended either
        // way, or when it was restored in quarantine (no attempt comes).
        // Read before any supervisor runs: later, a state may be ahead of
        // the update that reports it.
        let reported = set
            .iter()
            .filter(|b| b.state() != HealthState::Starting)
            .map(|b| b.name.clone())
            .collect();
        for (b, supervisor) in set.iter().zip(supervisors) {
            app.spawner.spawn(b, supervisor);
        }
        // Catalog changes reach sessions through the debouncer, off the
        // update task: the first at once, bursts coalesced per window.
        let fanout = app.front.clone();
        let debouncer = Debouncer::spawn(
            app.front.config.freshness.debounce,
            Box::new(move |delivery| {
                tracing::debug!(
                    generation = delivery.generation,
                    sessions = fanout.session_count(),
                    "catalog change delivered to sessions"
                );
                fanout.resync_all();
                Box::pin(async {})
            }),
        );
        Startup {
            debouncer,
            app,
            updates: updates_rx,
            approvals,
            refresh,
            shutdown,
            reported,
        }
    }

    /// The front every client talks to.
    pub fn front(&self) -> &Arc<Gateway> {
        &self.front
    }

    /// The config Vigil started with.
    pub fn config(&self) -> &Config {
        &self.front.config
    }

    /// The control API's live token set, which [`App::reload`] replaces
    /// when the config file's `[[api.tokens]]` change; give it to
    /// [`crate::api::ApiState::new`].
    pub fn api_tokens(&self) -> Arc<crate::api::Tokens> {
        self.api_tokens.clone()
    }

    /// The plugin registry, if plugins run.
    pub fn plugins(&self) -> Option<&Arc<crate::plugins::Plugins>> {
        self.plugins.as_ref()
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

/// Opens the plugin registry of `[plugins] dir` and keeps it in step
/// with the directory until shutdown. A registry that cannot start is
/// logged; backends' probe plugins then report "cannot tell".
fn start_plugins(
    config: &Config,
    feed: &dyn Feed,
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
) -> Option<Arc<crate::plugins::Plugins>> {
    let dir = config.plugins.dir.clone()?;
    match crate::plugins::Plugins::new(
        dir,
        Some(config.plugins.cache.clone()),
        config.plugins.threads,
        config.plugins.max_file_bytes,
    ) {
        Ok(p) => {
            tracker.spawn(crate::plugins::watch::run(p.clone(), shutdown.clone()));
            tracker.spawn(crate::plugins::notify::run(
                p.clone(),
                feed.own_transitions(),
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

impl Startup {
    /// Waits up to `startup_timeout` for each backend's first start attempt
    /// to settle, then keeps applying backend updates in the background.
    /// Under `naming = "none"`, duplicate names among the connected backends
    /// refuse the start.
    pub async fn settle(self, tracker: &TaskTracker) -> Result<Arc<App>, StartError> {
        let Startup {
            debouncer,
            app,
            updates: mut updates_rx,
            approvals,
            refresh,
            shutdown,
            mut reported,
        } = self;
        let front = app.front.clone();
        let mut registry = Registry::new(front.config.naming.clone());
        // What operators approved of held backends, before their first
        // listing is guarded by it.
        let pinned: Vec<Arc<str>> = front
            .backends()
            .iter()
            .filter(|b| b.config.pin.holds())
            .map(|b| b.name.clone())
            .collect();
        if !pinned.is_empty() {
            for (backend, approved) in app.pins.load(&pinned).await {
                registry.set_approvals(backend, approved);
            }
        }
        let mut updater = updates::Updater {
            front: front.clone(),
            registry,
            debouncer,
            pins: app.pins.clone(),
        };
        // Apply first updates until every backend has reported once.
        let deadline = tokio::time::sleep(front.config.startup_timeout);
        tokio::pin!(deadline);
        let expected = front.backends().len();
        while reported.len() < expected {
            tokio::select! {
                u = updates_rx.recv() => match u {
                    Some(u) => {
                        let batch = updates::drain(u, &mut updates_rx);
                        for u in &batch {
                            if u.state != HealthState::Starting {
                                reported.insert(u.backend.clone());
                            }
                        }
                        updater.apply(batch);
                    }
                    None => break,
                },
                _ = &mut deadline => {
                    tracing::warn!(waiting_for = expected - reported.len(), "startup timeout: serving without the backends still connecting");
                    break;
                }
            }
        }
        if front.config.naming == Naming::None {
            let conflicts = front.catalog().conflicts.clone();
            if !conflicts.is_empty() {
                shutdown.cancel();
                updater.debouncer.stop().await;
                return Err(StartError::Conflicts {
                    file: front.config.file.display().to_string(),
                    conflicts,
                });
            }
        }
        let source = Arc::downgrade(&front);
        let reaped = Arc::downgrade(&front);
        tracker.spawn(crate::backend::pool::reap_idle(
            front.generations().clone(),
            move || reaped.upgrade().map(|gw| gw.pools()),
            shutdown.clone(),
        ));
        tracker.spawn(crate::freshness::poller::run(
            move || {
                source
                    .upgrade()
                    .map(|gw| updates::poll_targets(&gw))
                    .unwrap_or_default()
            },
            front.config.poller.clone(),
            front.config.request_timeout,
            shutdown.clone(),
        ));
        tracker.spawn(updates::run(
            updater, updates_rx, approvals, refresh, shutdown,
        ));
        Ok(app)
    }
}
