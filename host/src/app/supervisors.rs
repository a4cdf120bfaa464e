//! Starting and stopping supervisors: one per configured backend (at
//! launch and for each backend a reload adds or changes) and one per
//! instance run for a single client (`backend::instances`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::App;
use crate::backend::{Backend, BackendUpdate};
use crate::cluster::feed::OwnUpdates;
use crate::health::sanitize::Sanitizer;
use crate::store::InstanceRecord;
use crate::supervisor::{Outlets, Supervisor};

/// What starting and stopping supervisors after launch needs.
pub(super) struct Spawner {
    pub(super) outlets: Outlets,
    tracker: TaskTracker,
    shutdown: CancellationToken,
    /// Each running supervisor's stop token, and the token it cancels
    /// once it ended, by [`Backend::uid`].
    stops: Mutex<HashMap<u64, (CancellationToken, CancellationToken)>>,
}

impl Spawner {
    pub(super) fn new(outlets: Outlets, tracker: TaskTracker, shutdown: CancellationToken) -> Self {
        Spawner {
            outlets,
            tracker,
            shutdown,
            stops: Mutex::default(),
        }
    }

    /// Runs `supervisor` until shutdown or until [`Spawner::stop`].
    pub(super) fn spawn(&self, b: &Arc<Backend>, supervisor: Supervisor) {
        let stop = self.shutdown.child_token();
        let done = CancellationToken::new();
        if let Ok(mut stops) = self.stops.lock() {
            stops.insert(b.uid, (stop.clone(), done.clone()));
        }
        let span = tracing::info_span!("supervisor", backend = %b.name);
        self.tracker.spawn(tracing::Instrument::instrument(
            async move {
                supervisor.run(stop).await;
                done.cancel();
            },
            span,
        ));
    }

    /// Stops `b`'s supervisor (which stops its instance), if it runs.
    pub(super) fn stop(&self, b: &Backend) {
        self.take(b);
    }

    /// Stops `b`'s supervisor and waits until it ended (its instance is
    /// stopped then).
    pub(super) async fn stop_and_wait(&self, b: &Backend) {
        if let Some(done) = self.take(b) {
            done.cancelled().await;
        }
    }

    /// The gateway's shutdown.
    pub(super) fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// Runs `task` (an update) until it ends, tracked like the
    /// supervisors.
    pub(super) fn track(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.tracker.spawn(task);
    }

    fn take(&self, b: &Backend) -> Option<CancellationToken> {
        let (stop, done) = self.stops.lock().ok()?.remove(&b.uid)?;
        stop.cancel();
        Some(done)
    }
}

/// `outlets` for a supervisor of a runtime that is `replica_local` or
/// not: each replica runs its own instance of a replica-local one, under
/// a lease of its own.
pub(super) fn leased(mut outlets: Outlets, replica_local: bool) -> Outlets {
    if replica_local {
        outlets.leases = Arc::new(crate::cluster::lease::LocalLeases);
    }
    outlets
}

impl App {
    /// The reason sanitizer every supervisor uses (it masks with Vigil's
    /// current secrets).
    pub(super) fn sanitizer(&self) -> Sanitizer {
        Sanitizer::new(self.front.redactor().clone())
    }

    /// A supervisor for `b`, restoring its record among `saved`, reporting
    /// to the app's outlets; its runtime is `runtime::for_backend`'s
    /// choice.
    pub(super) fn supervisor_for(&self, b: &Arc<Backend>, saved: &[InstanceRecord]) -> Supervisor {
        self.supervisor_with(b, saved, self.spawner.outlets.clone())
    }

    fn supervisor_with(
        &self,
        b: &Arc<Backend>,
        saved: &[InstanceRecord],
        mut outlets: Outlets,
    ) -> Supervisor {
        let (runtime, stderr) = crate::runtime::for_backend(&b.config);
        let local = runtime.replica_local();
        outlets = leased(outlets, local);
        let name = crate::supervisor::record_name(&b.name, local, outlets.cluster.as_ref());
        let record = saved.iter().find(|r| *r.backend == *name);
        Supervisor::new(
            b.clone(),
            runtime,
            stderr,
            record,
            outlets,
            self.sanitizer(),
        )
    }

    /// Runs the supervisor of an instance run for one client
    /// (`backend::instances`), reporting to `updates`, on the event bus
    /// and never to the store (the instance ends with its client); the
    /// token stops it.
    pub(super) fn spawn_instance(
        &self,
        child: Arc<Backend>,
        updates: mpsc::UnboundedSender<BackendUpdate>,
    ) -> Option<CancellationToken> {
        let spawner = &self.spawner;
        if spawner.shutdown.is_cancelled() {
            return None;
        }
        let outlets = Outlets {
            feed: Arc::new(OwnUpdates {
                updates,
                feed: spawner.outlets.feed.clone(),
            }),
            store: None,
            // An instance of one client's is this replica's alone.
            cluster: None,
            ..spawner.outlets.clone()
        };
        let supervisor = self.supervisor_with(&child, &[], outlets);
        let stop = spawner.shutdown.child_token();
        let span = tracing::info_span!("supervisor", backend = %child.name);
        spawner.tracker.spawn(tracing::Instrument::instrument(
            supervisor.run(stop.clone()),
            span,
        ));
        Some(stop)
    }
}
