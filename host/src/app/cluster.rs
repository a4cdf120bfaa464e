//! The cluster's parts, when the store is one several replicas share
//! (PostgreSQL, `[store] url_env`): supervision leases, the announcer and
//! the listener of the replicas' notes (`cluster::postgres`). Each runs on
//! the app's tracker until shutdown.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cluster::feed::LocalFeed;
use crate::cluster::postgres::lease::PgLeases;
use crate::cluster::postgres::listen::{Listener, announce};
use crate::config::Config;
use crate::store::Stores;
use crate::supervisor::ClusterOutlets;

/// What the app's supervisors need from the cluster.
pub(super) struct Cluster {
    pub(super) leases: PgLeases,
    pub(super) outlets: ClusterOutlets,
}

/// The feed, and the cluster's parts when `stores` is shared (else `None`:
/// one replica).
pub(super) fn start(
    config: &Config,
    stores: Option<&Stores>,
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
) -> (
    Arc<LocalFeed>,
    tokio::sync::mpsc::UnboundedReceiver<crate::backend::BackendUpdate>,
    Option<Cluster>,
) {
    let (Some(stores), Some(shared), Some(url)) = (
        stores,
        stores.and_then(|s| s.shared.clone()),
        config.store.url.as_ref(),
    ) else {
        let (feed, updates) = LocalFeed::new();
        return (feed, updates, None);
    };
    let replica = config.cluster.replica.clone();
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
    tracker.spawn(
        Listener {
            config: listen_config,
            store: shared,
            replica: replica.to_string(),
            feed: feed.clone(),
        }
        .run(shutdown.clone()),
    );
    (
        feed,
        updates,
        Some(Cluster {
            leases,
            outlets: ClusterOutlets {
                store: stores.health.clone(),
                replica,
            },
        }),
    )
}
