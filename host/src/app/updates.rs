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

use super::pins::{Approval, Pins};

/// What the update task works with: the front it publishes to, the
/// registry it owns, where changes go, and the pin guard's desk.
pub(super) struct Updater {
    pub front: Arc<Gateway>,
    pub registry: Registry,
    pub debouncer: Debouncer,
    pub pins: Arc<Pins>,
}

/// Applies backend updates, approvals and refresh requests until
/// shutdown.
pub(super) async fn run(
    mut u: Updater,
    mut updates: mpsc::UnboundedReceiver<BackendUpdate>,
    mut approvals: mpsc::UnboundedReceiver<Approval>,
    mut refresh: Refreshes,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            Some(first) = updates.recv() => {
                let batch = drain(first, &mut updates);
                u.apply(batch);
            }
            Some(a) = approvals.recv() => u.approve(a),
            Some(name) = refresh.recv() => {
                if let Some(b) = u.front.backend(&name) {
                    b.request_refresh();
                }
            }
            else => break,
        }
    }
    u.debouncer.stop().await;
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
        approvals: None,
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

impl Updater {
    /// Hands a batch of backend updates to the catalog registry (one
    /// rebuild per batch, see [`Registry::apply`]) and publishes what it
    /// returns ([`Updater::publish`]).
    pub(super) fn apply(&mut self, batch: Vec<BackendUpdate>) {
        if batch.is_empty() {
            return;
        }
        let cause = describe_batch(&batch);
        let set = self.front.backends();
        let listed: Vec<(Arc<str>, u64)> = batch
            .iter()
            .filter(|u| u.catalog.is_some())
            .map(|u| (u.backend.clone(), u.uid))
            .collect();
        // What tool search indexes: each listing of a backend of the set
        // (a candidate of an update is not one yet), whatever its health.
        let to_index: Vec<(Arc<str>, Option<Vec<crate::catalog::Entry>>)> = batch
            .iter()
            .filter(|u| u.removed || set.get(&u.backend).is_some_and(|b| b.uid == u.uid))
            .filter_map(|u| match (&u.catalog, u.removed) {
                (_, true) => Some((u.backend.clone(), None)),
                (Some(c), false) => Some((u.backend.clone(), Some(c.tools.clone()))),
                (None, false) => None,
            })
            .collect();
        let applied = self
            .registry
            .apply(set.roster(), batch.into_iter().map(registry_update));
        self.publish(applied, &cause);
        // A listing may be a new instance's: watched resources follow it.
        self.front
            .rewatch(listed.iter().map(|(name, _)| name.clone()));
        self.reindex(to_index);
        // Who waits for a listing wants to see it in the catalog.
        for (name, uid) in listed {
            if let Some(b) = set.get(&name).filter(|b| b.uid == uid) {
                b.listing_applied();
            }
        }
    }

    /// Indexes each backend's new listing for tool search (`None`: it
    /// left the config): one new snapshot for the batch, swapped in
    /// whole; a search never waits for it.
    fn reindex(&self, listings: Vec<(Arc<str>, Option<Vec<crate::catalog::Entry>>)>) {
        let index = self.front.tool_search().index();
        let mut changed = false;
        let given: Vec<(Arc<str>, Option<&[crate::catalog::Entry]>)> = listings
            .iter()
            .map(|(backend, tools)| (backend.clone(), tools.as_deref()))
            .collect();
        let all = index.reindex_all(&given);
        let snap = index.snapshot();
        let (documents, bytes) = (snap.len(), snap.bytes());
        for ((backend, _), stats) in listings.iter().zip(all) {
            if stats.added + stats.changed + stats.removed == 0 {
                continue;
            }
            crate::metrics::get().reindexed(backend, documents, bytes);
            tracing::info!(backend = %backend, added = stats.added, changed = stats.changed, removed = stats.removed, kept = stats.kept, documents, "tool search: backend re-indexed");
            changed = true;
        }
        if changed {
            self.front.fill_vectors();
        }
    }

    /// An operator approved some of a backend's held definitions (here,
    /// or on another replica): the registry serves them from now on, and
    /// an approver here hears once the catalog does.
    fn approve(&mut self, a: Approval) {
        let (backend, approvals, applied) = match a {
            Approval::Added {
                backend,
                items,
                applied,
            } => {
                let approvals = self
                    .registry
                    .approvals(&backend)
                    .cloned()
                    .unwrap_or_default()
                    .with(items);
                (backend, approvals, Some(applied))
            }
            Approval::Read { backend, approvals } => (backend, approvals, None),
        };
        self.registry.set_approvals(backend.clone(), approvals);
        let result = self.registry.apply(self.front.backends().roster(), []);
        self.publish(result, &format!("{backend}: approved"));
        if let Some(applied) = applied {
            let _ = applied.send(());
        }
    }

    /// Publishes the catalog an apply returned as the next generation and
    /// acts on what changed: what the pin guard holds back (and first
    /// listings it trusted) goes to the desk, a new naming conflict is
    /// logged, a change that sessions must hear of goes to the debouncer.
    fn publish(&self, mut applied: registry::Applied, cause: &str) {
        self.front
            .generations()
            .publish_catalog(applied.catalog.clone());
        for (backend, approvals) in std::mem::take(&mut applied.first_use) {
            self.pins.record_first_use(backend, approvals);
        }
        self.pins.set_held(std::mem::take(&mut applied.held));
        for c in &applied.new_conflicts {
            tracing::error!(kind = c.kind, name = %c.name, kept = %c.kept, hidden = %c.hidden, "duplicate name under naming = \"none\"; serving the first backend's");
        }
        if applied.must_tell() {
            let changes = applied.changes;
            tracing::info!(updates = %cause, tools = changes.tools, resources = changes.resources, prompts = changes.prompts, forwarded_moved = applied.per_session_moved, "catalog changed");
            crate::metrics::get().catalog_changes.inc();
            if applied.shown_moved {
                self.debouncer.changed();
            } else {
                self.debouncer.content_changed();
            }
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
