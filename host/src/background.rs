//! Where long-lived tasks run: the process's [`TaskTracker`], which a
//! shutdown waits for, and its root [`CancellationToken`], which starts the
//! shutdown (the order is documented on `run` in `main.rs`).
//!
//! Code that spawns workers deep inside the gateway (a relay per backend
//! connection, a resync worker per session) holds a [`Background`] instead
//! of calling `tokio::spawn`, so no task outlives the shutdown unseen. What
//! runs further down, where no `Background` reaches (a child process's exit
//! watcher and stderr pump, a backend connection's stream relays, a
//! listener's refusals), is spawned with [`spawn`] on the process's
//! [`detached`] tracker, which `vigil serve` waits for too. No code calls
//! `tokio::spawn` itself (`scripts/structure.sh` checks).

use std::future::Future;
use std::sync::LazyLock;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// A tracker and the shutdown token, cloned cheaply.
#[derive(Clone, Debug)]
pub struct Background {
    tracker: TaskTracker,
    shutdown: CancellationToken,
}

// === impl Background ===

impl Background {
    pub fn new(tracker: TaskTracker, shutdown: CancellationToken) -> Self {
        Background { tracker, shutdown }
    }

    /// A fresh tracker and a token nobody cancels, for unit tests.
    #[cfg(test)]
    pub fn detached() -> Self {
        Background::new(TaskTracker::new(), CancellationToken::new())
    }

    /// Runs `task` on the tracker until it ends or the shutdown begins,
    /// whichever comes first: for workers with nothing to finish at
    /// shutdown (what they hold is dropped with them).
    pub fn spawn_until_shutdown<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let shutdown = self.shutdown.clone();
        self.tracker.spawn(async move {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => {}
                _ = task => {}
            }
        });
    }

    /// Runs `task` on the tracker and hands back its handle, for a caller
    /// that waits for its result (the shutdown waits for it too).
    pub fn spawn_joined<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tracker.spawn(task)
    }

    /// Runs `task` on the tracker; it watches [`Background::child_token`]
    /// itself to stop.
    pub fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.tracker.spawn(task);
    }

    /// A token cancelled at shutdown, or earlier by its own `cancel` (one
    /// worker's stop).
    pub fn child_token(&self) -> CancellationToken {
        self.shutdown.child_token()
    }
}

/// The tracker of the tasks [`spawn`] starts: one per process, closed and
/// waited for at shutdown (main.rs) within the same grace as the rest.
pub fn detached() -> &'static TaskTracker {
    static DETACHED: LazyLock<TaskTracker> = LazyLock::new(TaskTracker::new);
    &DETACHED
}

/// Runs `task` on the [`detached`] tracker: for tasks below the gateway,
/// which end with what they serve (a process, a connection) and watch no
/// shutdown token themselves. Wrap the handle in an `AbortOnDropHandle`
/// where the task must end with its owner.
pub fn spawn<F>(task: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    detached().spawn(task)
}
