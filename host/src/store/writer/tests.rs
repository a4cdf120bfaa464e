//! The writer over an in-memory SQLite store behind a gate: the test holds
//! the writer on its first write (a slow disk) while more is queued, then
//! shuts down and checks that nothing queued was lost.

use std::time::{Duration, SystemTime};

use tokio::sync::{Notify, watch};

use super::*;
use crate::health::HealthState;
use crate::store::sqlite::SqliteStore;
use crate::store::{Rows, StoreError};

/// Far beyond any wait on a loaded machine; only a bug reaches it.
const PATIENCE: Duration = Duration::from_secs(30);

/// A store whose health writes wait while the gate is shut, and that says
/// when the first one is waiting.
struct Gated {
    inner: SqliteStore,
    open: watch::Sender<bool>,
    waiting: Notify,
}

impl Gated {
    fn new() -> Arc<Gated> {
        Arc::new(Gated {
            inner: SqliteStore::open_in_memory().unwrap(),
            open: watch::Sender::new(false),
            waiting: Notify::new(),
        })
    }

    async fn pass(&self) {
        let mut open = self.open.subscribe();
        if !*open.borrow_and_update() {
            self.waiting.notify_one();
            let _ = open.wait_for(|o| *o).await;
        }
    }

    fn open(&self) {
        self.open.send_replace(true);
    }
}

#[async_trait::async_trait]
impl HealthStore for Gated {
    async fn write(&self, writes: Vec<HealthWrite>) -> Result<(), StoreError> {
        self.pass().await;
        self.inner.write(writes).await
    }
    async fn transitions(&self, b: &str, limit: usize) -> Result<Rows<Transition>, StoreError> {
        self.inner.transitions(b, limit).await
    }
    async fn load_instances(&self) -> Result<Rows<InstanceRecord>, StoreError> {
        self.inner.load_instances().await
    }
}

/// The `n`th transition of a flapping backend (distinct reasons).
fn transition(n: usize) -> Transition {
    let (from, to) = if n.is_multiple_of(2) {
        (HealthState::Starting, HealthState::Restarting)
    } else {
        (HealthState::Restarting, HealthState::Starting)
    };
    Transition {
        backend: "flappy".into(),
        from,
        to,
        reason: format!("attempt {n}"),
        at: SystemTime::UNIX_EPOCH + Duration::from_millis(1_000 + n as u64),
    }
}

fn record(n: usize) -> InstanceRecord {
    InstanceRecord {
        backend: "flappy".into(),
        state: transition(n).to,
        restart_count: n as u64,
        consecutive_failures: 1,
        quarantine_reason: None,
        updated_at: SystemTime::now(),
    }
}

async fn reasons(store: &dyn HealthStore) -> Vec<String> {
    store
        .transitions("flappy", 10_000)
        .await
        .unwrap()
        .rows
        .into_iter()
        .map(|t| t.reason)
        .collect()
}

/// Cancels `shutdown` and waits (bounded) for the tracker, as `vigil
/// serve` does when it stops.
async fn shut_down(tracker: &TaskTracker, shutdown: &CancellationToken) {
    shutdown.cancel();
    tracker.close();
    tokio::time::timeout(PATIENCE, tracker.wait())
        .await
        .expect("the writer ends after shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_queued_before_shutdown_is_written_behind_a_slow_disk() {
    let store = Gated::new();
    let (tracker, shutdown) = (TaskTracker::new(), CancellationToken::new());
    let writer = StoreWriter::spawn(store.clone(), &tracker, &shutdown);

    writer.transition(transition(0));
    tokio::time::timeout(PATIENCE, store.waiting.notified())
        .await
        .expect("the first write reaches the store");
    // The writer is stuck on the disk; the supervisors keep going.
    for n in 1..500 {
        writer.transition(transition(n));
        writer.instance(record(n));
    }
    shutdown.cancel();
    tracker.close();
    store.open();
    tokio::time::timeout(PATIENCE, tracker.wait())
        .await
        .expect("the writer drains and ends after shutdown");

    let want: Vec<String> = (0..500).map(|n| transition(n).reason).collect();
    assert_eq!(reasons(&*store).await, want, "every transition, in order");
    let saved = store.load_instances().await.unwrap().rows;
    assert_eq!(saved.len(), 1);
    assert_eq!(saved[0].restart_count, 499, "the last record won");
}

#[tokio::test]
async fn a_write_after_the_shutdown_is_refused_not_lost_in_a_queue() {
    let store = Gated::new();
    store.open();
    let (tracker, shutdown) = (TaskTracker::new(), CancellationToken::new());
    let writer = StoreWriter::spawn(store.clone(), &tracker, &shutdown);
    assert!(
        writer.transition(transition(0)),
        "accepted before the shutdown"
    );
    shut_down(&tracker, &shutdown).await;

    assert!(
        !writer.transition(transition(1)),
        "refused (and logged) after it; no panic"
    );
    assert_eq!(reasons(&*store).await, ["attempt 0"]);
}

#[tokio::test]
async fn without_a_shutdown_the_writer_ends_once_every_handle_is_gone() {
    let store = Gated::new();
    store.open();
    let (tracker, shutdown) = (TaskTracker::new(), CancellationToken::new());
    let writer = StoreWriter::spawn(store.clone(), &tracker, &shutdown);
    let other = writer.clone();
    writer.transition(transition(0));
    other.transition(transition(1));
    drop((writer, other));
    tracker.close();
    tokio::time::timeout(PATIENCE, tracker.wait())
        .await
        .expect("the writer ends with its last handle");
    assert_eq!(reasons(&*store).await, ["attempt 0", "attempt 1"]);
    assert!(!shutdown.is_cancelled());
}
