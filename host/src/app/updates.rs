//! The update task: supervisors' updates become new generations of the
//! catalog, in order, and changes sessions must hear of go to the
//! debouncer. Also what the capability poller lists.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::backend::BackendUpdate;
use crate::backend::pool;
use crate::catalog::registry::{self, Registry};
use crate::freshness::debounce::Debouncer;
use crate::freshness::poller::Listing;
use crate::gateway::{Gateway, Refreshes};
use crate::health::advertisable;

/// Applies backend updates and refresh requests until shutdown.
pub(super) async fn run(
    front: Arc<Gateway>,
    mut registry: Registry,
    mut updates: mpsc::UnboundedReceiver<BackendUpdate>,
    mut refresh: Refreshes,
    debouncer: Debouncer,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            Some(u) = updates.recv() => {
                let batch = drain(u, &mut updates);
                apply(&front, &mut registry, batch, &debouncer);
            }
            Some(name) = refresh.recv() => {
                if let Some(b) = front.backend(&name) {
                    b.request_refresh();
                }
            }
            else => break,
        }
    }
    debouncer.stop().await;
}

/// A supervisor's update as the catalog registry takes it. The one place
/// Vigil asks [`advertisable`] whether a state shows a backend's
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
pub(super) fn drain(
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

/// Hands a batch of backend updates to the catalog `registry` (one
/// rebuild per batch, see [`Registry::apply`]), publishes the catalog it
/// returns as the next generation, and acts on what changed: a new
/// naming conflict is logged, a change that sessions must hear of goes to
/// the debouncer.
pub(super) fn apply(
    front: &Gateway,
    registry: &mut Registry,
    batch: Vec<BackendUpdate>,
    debouncer: &Debouncer,
) {
    if batch.is_empty() {
        return;
    }
    let cause = describe_batch(&batch);
    let set = front.backends();
    let listed: Vec<(Arc<str>, u64)> = batch
        .iter()
        .filter(|u| u.catalog.is_some())
        .map(|u| (u.backend.clone(), u.uid))
        .collect();
    let applied = registry.apply(set.roster(), batch.into_iter().map(registry_update));
    front.generations().publish_catalog(applied.catalog.clone());
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
pub(super) fn poll_targets(front: &Gateway) -> Vec<Arc<dyn Listing>> {
    let set = front.backends();
    let pools = match set.forwarded().next() {
        Some(_) => front.pools(),
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
