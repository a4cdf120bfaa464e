//! The writer behind a gate: the test holds it on its first write (a slow
//! disk) while more is queued, then shuts down and checks that nothing
//! queued was lost; then each policy's knobs, and the health writer over a
//! real store.

use std::sync::Mutex;
use std::time::SystemTime;

use tokio::sync::{Notify, watch};

use super::*;
use crate::health::HealthState;
use crate::store::sqlite::SqliteStore;
use crate::store::{Rows, StoreError};

/// Far beyond any wait on a loaded machine; only a bug reaches it.
const PATIENCE: Duration = Duration::from_secs(30);

/// A gate a write waits at while it is shut; says when the first write is
/// waiting.
struct Gate {
    open: watch::Sender<bool>,
    waiting: Notify,
}

impl Gate {
    fn shut() -> Gate {
        Gate {
            open: watch::Sender::new(false),
            waiting: Notify::new(),
        }
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

/// A sink of numbers: keeps every batch it wrote and every refusal.
struct Recorder {
    gate: Gate,
    batches: Mutex<Vec<Vec<u32>>>,
    refused: Mutex<Vec<(u32, Refusal)>>,
}

impl Recorder {
    fn new() -> Arc<Recorder> {
        Arc::new(Recorder {
            gate: Gate::shut(),
            batches: Mutex::default(),
            refused: Mutex::default(),
        })
    }

    fn written(&self) -> Vec<u32> {
        self.batches.lock().unwrap().concat()
    }

    fn batches(&self) -> Vec<Vec<u32>> {
        self.batches.lock().unwrap().clone()
    }

    fn refusals(&self) -> Vec<(u32, Refusal)> {
        self.refused.lock().unwrap().clone()
    }
}

#[async_trait]
impl Sink for Arc<Recorder> {
    type Item = u32;

    async fn write(&self, batch: Vec<u32>) {
        self.gate.pass().await;
        self.batches.lock().unwrap().push(batch);
    }

    fn refused(&self, item: u32, why: Refusal) {
        self.refused.lock().unwrap().push((item, why));
    }
}

const UNBOUNDED: Policy = Policy {
    name: "test",
    batch: 8,
    linger: Duration::ZERO,
    capacity: None,
};

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
async fn every_item_queued_before_shutdown_is_written_in_order_behind_a_slow_sink() {
    let sink = Recorder::new();
    let (tracker, shutdown) = (TaskTracker::new(), CancellationToken::new());
    let writer = Writer::spawn(sink.clone(), UNBOUNDED, &tracker, &shutdown);

    assert!(writer.send(0));
    tokio::time::timeout(PATIENCE, sink.gate.waiting.notified())
        .await
        .expect("the first batch reaches the sink");
    // The writer is stuck on the disk; the senders keep going.
    for n in 1..500 {
        assert!(writer.send(n));
    }
    shutdown.cancel();
    sink.gate.open();
    shut_down(&tracker, &shutdown).await;

    assert_eq!(
        sink.written(),
        (0..500).collect::<Vec<_>>(),
        "all, in order"
    );
    assert!(
        sink.batches().iter().all(|b| b.len() <= UNBOUNDED.batch),
        "batches of at most {}",
        UNBOUNDED.batch
    );
    assert!(sink.refusals().is_empty());
}

#[tokio::test]
async fn an_item_after_the_shutdown_is_refused_not_lost_in_a_queue() {
    let sink = Recorder::new();
    sink.gate.open();
    let (tracker, shutdown) = (TaskTracker::new(), CancellationToken::new());
    let writer = Writer::spawn(sink.clone(), UNBOUNDED, &tracker, &shutdown);
    assert!(writer.send(0), "accepted before the shutdown");
    shut_down(&tracker, &shutdown).await;

    assert!(!writer.send(1), "refused after it; no panic");
    assert_eq!(sink.written(), [0]);
    assert_eq!(sink.refusals(), [(1, Refusal::Closed)]);
}

#[tokio::test]
async fn without_a_shutdown_the_writer_ends_once_every_handle_is_gone() {
    let sink = Recorder::new();
    sink.gate.open();
    let (tracker, shutdown) = (TaskTracker::new(), CancellationToken::new());
    let writer = Writer::spawn(sink.clone(), UNBOUNDED, &tracker, &shutdown);
    let other = writer.clone();
    writer.send(0);
    other.send(1);
    drop((writer, other));
    tracker.close();
    tokio::time::timeout(PATIENCE, tracker.wait())
        .await
        .expect("the writer ends with its last handle");
    assert_eq!(sink.written(), [0, 1]);
    assert!(!shutdown.is_cancelled());
}

/// A bounded queue refuses what does not fit, and says so; what fit is
/// written at the shutdown.
#[tokio::test]
async fn a_bounded_queue_refuses_what_does_not_fit() {
    let sink = Recorder::new();
    sink.gate.open();
    let shutdown = CancellationToken::new();
    let policy = Policy {
        capacity: Some(4),
        ..UNBOUNDED
    };
    // The task is not running yet: nothing leaves the queue.
    let (writer, task) = Writer::pair(sink.clone(), policy, &shutdown);
    let sent: Vec<bool> = (0..6).map(|n| writer.send(n)).collect();
    assert_eq!(sent, [true, true, true, true, false, false]);
    assert_eq!(sink.refusals(), [(4, Refusal::Full), (5, Refusal::Full)]);
    shutdown.cancel();
    tokio::time::timeout(PATIENCE, task).await.unwrap();
    assert_eq!(sink.written(), [0, 1, 2, 3]);
    assert!(!writer.send(9));
    assert_eq!(sink.refusals().last(), Some(&(9, Refusal::Closed)));
}

/// Linger, with time paused:
///
/// ```text
/// 0 ms   item 0 taken, the batch lingers until 50 ms
/// 10 ms  items 1, 2 join it
/// 50 ms  batch [0, 1, 2] written
/// 60 ms  item 3: a batch of its own, lingering until 110 ms
/// ```
#[tokio::test(start_paused = true)]
async fn a_lingering_batch_takes_what_comes_within_the_linger() {
    let sink = Recorder::new();
    sink.gate.open();
    let (tracker, shutdown) = (TaskTracker::new(), CancellationToken::new());
    let policy = Policy {
        linger: Duration::from_millis(50),
        ..UNBOUNDED
    };
    let writer = Writer::spawn(sink.clone(), policy, &tracker, &shutdown);
    writer.send(0);
    tokio::time::sleep(Duration::from_millis(10)).await;
    writer.send(1);
    writer.send(2);
    tokio::time::sleep(Duration::from_millis(45)).await;
    assert_eq!(sink.batches(), [vec![0, 1, 2]]);
    tokio::time::sleep(Duration::from_millis(5)).await;
    writer.send(3);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(sink.batches().len(), 1, "item 3 lingers");
    shut_down(&tracker, &shutdown).await;
    assert_eq!(
        sink.batches(),
        [vec![0, 1, 2], vec![3]],
        "a shutdown ends the linger"
    );
}

/// A lingering batch stops at the batch size.
#[tokio::test(start_paused = true)]
async fn a_full_batch_is_written_without_lingering() {
    let sink = Recorder::new();
    sink.gate.open();
    let (tracker, shutdown) = (TaskTracker::new(), CancellationToken::new());
    let policy = Policy {
        linger: Duration::from_secs(3600),
        batch: 3,
        ..UNBOUNDED
    };
    let writer = Writer::spawn(sink.clone(), policy, &tracker, &shutdown);
    for n in 0..7 {
        writer.send(n);
    }
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(sink.batches(), [vec![0, 1, 2], vec![3, 4, 5]]);
    shut_down(&tracker, &shutdown).await;
    assert_eq!(sink.written(), (0..7).collect::<Vec<_>>());
}

// === the health writer over a store ===

/// A health store whose writes wait at a gate.
struct Gated {
    inner: SqliteStore,
    gate: Gate,
}

#[async_trait]
impl HealthStore for Gated {
    async fn write(&self, writes: Vec<HealthWrite>) -> Result<(), StoreError> {
        self.gate.pass().await;
        self.inner.write(writes).await
    }
    async fn transitions(&self, b: &str, limit: usize) -> Result<Rows<Transition>, StoreError> {
        self.inner.transitions(b, limit).await
    }
    async fn load_instances(&self) -> Result<Rows<InstanceRecord>, StoreError> {
        self.inner.load_instances().await
    }
    async fn instance(&self, b: &str) -> Result<Option<InstanceRecord>, StoreError> {
        self.inner.instance(b).await
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_health_write_queued_before_shutdown_is_stored_behind_a_slow_disk() {
    let store = Arc::new(Gated {
        inner: SqliteStore::open_in_memory().unwrap(),
        gate: Gate::shut(),
    });
    let (tracker, shutdown) = (TaskTracker::new(), CancellationToken::new());
    let writer = HealthWriter::start(store.clone(), &tracker, &shutdown);

    assert!(writer.transition(transition(0)));
    tokio::time::timeout(PATIENCE, store.gate.waiting.notified())
        .await
        .expect("the first write reaches the store");
    // The writer is stuck on the disk; the supervisors keep going.
    for n in 1..500 {
        writer.transition(transition(n));
        writer.instance(record(n));
    }
    shutdown.cancel();
    tracker.close();
    store.gate.open();
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
async fn a_health_write_after_the_shutdown_is_refused() {
    let store = Arc::new(SqliteStore::open_in_memory().unwrap());
    let (tracker, shutdown) = (TaskTracker::new(), CancellationToken::new());
    let writer = HealthWriter::start(store.clone(), &tracker, &shutdown);
    assert!(
        writer.transition(transition(0)),
        "accepted before the shutdown"
    );
    shut_down(&tracker, &shutdown).await;

    assert!(
        !writer.transition(transition(1)),
        "refused (and logged) after it"
    );
    writer.instance(record(1));
    assert_eq!(reasons(&*store).await, ["attempt 0"]);
    assert!(store.load_instances().await.unwrap().rows.is_empty());
}
