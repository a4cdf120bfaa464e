//! The parts that differ between one replica and a cluster: the feed and
//! the session book, and, when the store is one several replicas share
//! (PostgreSQL, `[store] url_env`), supervision leases, the announcer and
//! the listener of the replicas' notes (`cluster::postgres`). Each task
//! runs on the app's tracker until shutdown.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cluster::book::SessionBook;
use crate::cluster::feed::LocalFeed;
use crate::cluster::postgres::book::PgBook;
use crate::cluster::postgres::command::Commands;
use crate::cluster::postgres::lease::PgLeases;
use crate::cluster::postgres::listen::{Listener, announce};
use crate::cluster::postgres::replicas::ReplicaSet;
use crate::cluster::postgres::retry::Retries;
use crate::cluster::postgres::route::Route;
use crate::cluster::rate::{LocalRates, Rates, SharedRates};
use crate::cluster::session_id::Sealer;
use crate::config::Config;
use crate::store::Stores;
use crate::supervisor::ClusterOutlets;

/// What the app's supervisors need from the cluster.
pub(super) struct Cluster {
    pub(super) leases: PgLeases,
    pub(super) outlets: ClusterOutlets,
    /// Who else is alive, and what each serves.
    pub(super) replicas: Arc<ReplicaSet>,
    retries: Arc<Retries>,
    /// Where approvals other replicas record are told.
    pub(super) approvals: Arc<crate::cluster::postgres::listen::Approvals>,
}

impl Cluster {
    /// Where routed commands find this replica's backends.
    pub(super) fn commands(&self) -> &Arc<Commands> {
        &self.outlets.commands
    }

    /// Where MRTR retries are routed to and from.
    pub(super) fn retries(&self) -> &Arc<Retries> {
        &self.retries
    }
}

/// What the app is assembled from: the feed (and the updates it
/// carries), the session book, and the cluster's parts when the store is
/// shared.
pub(super) struct Parts {
    pub(super) feed: Arc<LocalFeed>,
    pub(super) updates: tokio::sync::mpsc::UnboundedReceiver<crate::backend::BackendUpdate>,
    pub(super) book: Arc<dyn SessionBook>,
    /// Where `[[policy]]` rate buckets live.
    pub(super) rates: Arc<dyn Rates>,
    pub(super) cluster: Option<Cluster>,
}

/// How often expired rows of the shared session book are deleted.
const PRUNE_EVERY: std::time::Duration = std::time::Duration::from_secs(600);

/// The parts `config` and `stores` call for: one replica's (a local feed,
/// the session book of `cluster::book::for_config`), or, when `stores` is
/// shared, a replica's of a cluster, their tasks running until
/// `shutdown`.
pub(super) fn start(
    config: &Config,
    stores: Option<&Stores>,
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
) -> Parts {
    let (Some(stores), Some(shared), Some(url)) = (
        stores,
        stores.and_then(|s| s.shared.clone()),
        config.store.url.as_ref(),
    ) else {
        let (feed, updates) = LocalFeed::new();
        return Parts {
            feed,
            updates,
            book: crate::cluster::book::for_config(config),
            rates: Arc::new(LocalRates),
            cluster: None,
        };
    };
    let replica = config.cluster.replica.clone();
    if !shared.is_migrated() {
        tracker.spawn(shared.clone().migrate_when_up(shutdown.clone()));
    }
    if config.cluster.key.is_none() {
        tracing::warn!(
            replica = %replica,
            "several replicas share the store, but [cluster] key_env is not set: this replica seals session ids with a key of its own, so the others will not know its sessions"
        );
    }
    tracing::info!(replica = %replica, lease = ?config.cluster.lease, store = %shared.location(), "running as one replica of a cluster");
    let (announced, announcements) = tokio::sync::mpsc::unbounded_channel();
    let (feed, updates) = LocalFeed::with_announcer(Some(announced));
    let leases = PgLeases::new(
        shared.pool().clone(),
        shared.location(),
        replica.as_str(),
        config.cluster.lease,
    );
    tracker.spawn(leases.clone().run(shutdown.clone()));
    let route = Route::new(shared.clone(), replica.as_str());
    let commands = Commands::new(route.clone(), leases.clone());
    let retries = Retries::new(route.clone());
    let approvals = Arc::new(crate::cluster::postgres::listen::Approvals::default());
    let replicas = ReplicaSet::new(
        shared.clone(),
        replica.as_str(),
        &config.serving_digest(),
        config.cluster.lease,
    );
    tracker.spawn(replicas.clone().run(shutdown.clone()));
    tracker.spawn(announce(
        shared.clone(),
        replica.to_string(),
        announcements,
        shutdown.clone(),
    ));
    let mut listen_config = url.config.clone();
    listen_config.application_name(format!("vigil {replica} listener"));
    if listen_config.get_connect_timeout().is_none() {
        listen_config.connect_timeout(crate::store::postgres::CONNECT_TIMEOUT);
    }
    let book = match &config.cluster.key {
        Some(key) => {
            let sealer = Sealer::new(
                &key.key,
                config.cluster.previous_key.as_ref().map(|k| &k.key),
            );
            let book = Arc::new(PgBook::new(sealer, shared.clone(), replica.as_str()));
            tracker.spawn(prune(book.clone(), shutdown.clone()));
            Some(book)
        }
        // Ids only this replica can open: its book is its own.
        None => None,
    };
    tracker.spawn(
        Listener {
            config: listen_config,
            store: shared,
            replica: replica.to_string(),
            feed: feed.clone(),
            book: book.clone(),
            route: Some(route),
            commands: Some(commands.clone()),
            retries: Some(retries.clone()),
            approvals: approvals.clone(),
        }
        .run(shutdown.clone()),
    );
    Parts {
        feed,
        updates,
        book: match book {
            Some(b) => b,
            None => crate::cluster::book::for_config(config),
        },
        rates: {
            let replicas = replicas.clone();
            Arc::new(SharedRates::new(Arc::new(move || replicas.count())))
        },
        cluster: Some(Cluster {
            leases,
            replicas,
            retries,
            approvals,
            outlets: ClusterOutlets {
                store: stores.health.clone(),
                replica,
                commands,
            },
        }),
    }
}

/// Deletes expired rows of the shared session book now and then.
async fn prune(book: Arc<PgBook>, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(PRUNE_EVERY) => {}
        }
        match book.prune().await {
            Ok(n) => {
                crate::metrics::get().store_op("session", true);
                tracing::debug!(rows = n, "pruned expired sessions from the session book");
            }
            Err(e) => {
                crate::metrics::get().store_op("session", false);
                tracing::debug!(error = %e, "could not prune the session book");
            }
        }
    }
}
