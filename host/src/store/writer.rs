//! [`Writer`]: the one batched writer to the store. Whoever must not wait
//! on a disk (a supervisor, a call path) hands it items without waiting;
//! its one task takes them from the queue in batches and writes each batch
//! on a [`Sink`], in the order they were handed over, so a slow disk never
//! stalls a supervisor or the data plane.
//!
//! Shutdown loses no item that was handed over before it: when the
//! shutdown token fires, the writer closes its queue and writes everything
//! already in it before its task ends, so waiting for the task tracker
//! after cancelling the token (as `vigil serve` does) puts every accepted
//! item in the store. An item handed over after the close is refused and
//! the sink says so ([`Sink::refused`]: a WARN naming it, a counter), never
//! dropped silently. Without a shutdown, the task ends once every handle is
//! gone and the queue is written out.
//!
//! What differs between users is a [`Policy`], not another writer:
//!
//! - health writes ([`HealthWriter`], policy [`HEALTH`]): an unbounded
//!   queue (a supervisor's transition is never dropped; their rate is
//!   bounded by the probes), batches of up to 256 written as soon as they
//!   are taken, each in one store transaction;
//! - the call audit (`crate::audit`): a bounded queue whose overflow is
//!   counted, larger batches that linger a few milliseconds to fill, so
//!   a stream of calls costs one commit per linger, not one each.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{HealthStore, HealthWrite, InstanceRecord};
use crate::health::Transition;

/// How a [`Writer`] queues and batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// What the writer's logs call what it writes (`health state`, `call
    /// audit`).
    pub name: &'static str,
    /// The most items written in one batch: large enough that a burst
    /// costs few writes, small enough that one write stays short.
    pub batch: usize,
    /// How long a batch waits for more items before it is written;
    /// `Duration::ZERO` writes what is queued at once. Also what a crash
    /// (not a shutdown, which drains) can lose at most beyond the batch
    /// being written.
    pub linger: Duration,
    /// The most items the queue holds; a handover beyond it is refused
    /// ([`Refusal::Full`]). `None`: unbounded, a handover is refused only
    /// after the shutdown.
    pub capacity: Option<usize>,
}

/// The health writer's policy: unbounded, batches of 256 written at once.
pub const HEALTH: Policy = Policy {
    name: "health state",
    batch: 256,
    linger: Duration::ZERO,
    capacity: None,
};

/// Why [`Writer::send`] did not queue an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The bounded queue is full: the store does not keep up.
    Full,
    /// The writer closed its queue for shutdown.
    Closed,
}

/// Where a [`Writer`]'s batches go.
#[async_trait]
pub trait Sink: Send + Sync + 'static {
    /// What is queued.
    type Item: Send + 'static;

    /// Writes one batch, its items in the order they were handed over. A
    /// failure is the sink's to report (log, count); the writer goes on
    /// with the next batch.
    async fn write(&self, batch: Vec<Self::Item>);

    /// `item` was not queued, for `why`: say so (a WARN naming it, a
    /// counter). Called on the handing-over thread; must not block.
    fn refused(&self, item: Self::Item, why: Refusal);
}

/// The handle: cheap to clone, every clone queues into the same writer.
pub struct Writer<S: Sink> {
    queue: Queue<S::Item>,
    sink: Arc<S>,
}

enum Queue<T> {
    Unbounded(mpsc::UnboundedSender<T>),
    Bounded(mpsc::Sender<T>),
}

enum Receiver<T> {
    Unbounded(mpsc::UnboundedReceiver<T>),
    Bounded(mpsc::Receiver<T>),
}

// === impl Writer ===

impl<S: Sink> Writer<S> {
    /// A writer over `sink` with `policy`, and the task that writes: run
    /// it (spawned, tracked) until it ends. It drains and ends when
    /// `shutdown` fires, or ends when every handle is gone and the queue
    /// is written (see the module doc).
    pub fn pair(
        sink: S,
        policy: Policy,
        shutdown: &CancellationToken,
    ) -> (Writer<S>, impl Future<Output = ()> + Send + 'static) {
        let sink = Arc::new(sink);
        let (queue, rx) = match policy.capacity {
            None => {
                let (tx, rx) = mpsc::unbounded_channel();
                (Queue::Unbounded(tx), Receiver::Unbounded(rx))
            }
            Some(n) => {
                let (tx, rx) = mpsc::channel(n.max(1));
                (Queue::Bounded(tx), Receiver::Bounded(rx))
            }
        };
        let task = run(rx, sink.clone(), policy, shutdown.clone());
        (Writer { queue, sink }, task)
    }

    /// [`Writer::pair`], its task spawned on `tracker` in a span named
    /// after the policy.
    pub fn spawn(
        sink: S,
        policy: Policy,
        tracker: &TaskTracker,
        shutdown: &CancellationToken,
    ) -> Writer<S> {
        let (writer, task) = Writer::pair(sink, policy, shutdown);
        tracker.spawn(tracing::Instrument::instrument(
            task,
            tracing::info_span!("store_writer", of = policy.name),
        ));
        writer
    }

    /// Queues `item`; never waits. `false` when it was refused (the queue
    /// is full, or closed for shutdown), after [`Sink::refused`] said so.
    pub fn send(&self, item: S::Item) -> bool {
        let refused = match &self.queue {
            Queue::Unbounded(tx) => match tx.send(item) {
                Ok(()) => return true,
                Err(mpsc::error::SendError(item)) => (item, Refusal::Closed),
            },
            Queue::Bounded(tx) => match tx.try_send(item) {
                Ok(()) => return true,
                Err(mpsc::error::TrySendError::Full(item)) => (item, Refusal::Full),
                Err(mpsc::error::TrySendError::Closed(item)) => (item, Refusal::Closed),
            },
        };
        self.sink.refused(refused.0, refused.1);
        false
    }
}

impl<S: Sink> Clone for Writer<S> {
    fn clone(&self) -> Self {
        let queue = match &self.queue {
            Queue::Unbounded(tx) => Queue::Unbounded(tx.clone()),
            Queue::Bounded(tx) => Queue::Bounded(tx.clone()),
        };
        Writer {
            queue,
            sink: self.sink.clone(),
        }
    }
}

impl<T> Receiver<T> {
    async fn recv_many(&mut self, buf: &mut Vec<T>, limit: usize) -> usize {
        match self {
            Receiver::Unbounded(rx) => rx.recv_many(buf, limit).await,
            Receiver::Bounded(rx) => rx.recv_many(buf, limit).await,
        }
    }

    fn close(&mut self) {
        match self {
            Receiver::Unbounded(rx) => rx.close(),
            Receiver::Bounded(rx) => rx.close(),
        }
    }
}

/// Writes batches until shutdown (then drains the queue) or until every
/// handle is gone (then what was queued is written, too).
async fn run<S: Sink>(
    mut rx: Receiver<S::Item>,
    sink: Arc<S>,
    policy: Policy,
    shutdown: CancellationToken,
) {
    let limit = policy.batch.max(1);
    let mut batch = Vec::with_capacity(limit);
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            n = rx.recv_many(&mut batch, limit) => {
                if n == 0 {
                    return; // every handle dropped and nothing queued
                }
            }
        }
        if !policy.linger.is_zero() {
            // Linger for more: items a few milliseconds apart then cost
            // one write per linger, not one each.
            let until = tokio::time::Instant::now() + policy.linger;
            while batch.len() < limit {
                let room = limit - batch.len();
                tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep_until(until) => break,
                    n = rx.recv_many(&mut batch, room) => {
                        if n == 0 {
                            break;
                        }
                    }
                }
            }
        }
        sink.write(std::mem::take(&mut batch)).await;
    }
    rx.close();
    let mut drained = 0;
    while rx.recv_many(&mut batch, limit).await > 0 {
        drained += batch.len();
        sink.write(std::mem::take(&mut batch)).await;
    }
    tracing::debug!(
        items = drained,
        "{}: queue written out at shutdown",
        policy.name
    );
}

// === an unreachable store ===

/// How long [`while_unavailable`] waits between attempts: from the first
/// to the last, doubling.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_LAST: Duration = Duration::from_secs(5);

/// Runs `attempt` until it succeeds or fails for another reason than the
/// store being out of reach ([`StoreErrorKind::Unavailable`]: a
/// PostgreSQL server down or restarting), waiting with backoff between
/// attempts, or until `shutdown` fires (then the last error). Says once
/// that it waits and once that the store is back, naming `what`.
///
/// The writer's task waits here with its batch: what is handed over
/// meanwhile queues behind it (within the queue's bound), so nothing is
/// lost to an outage shorter than the queue takes to fill.
///
/// [`StoreErrorKind::Unavailable`]: super::StoreErrorKind::Unavailable
pub(crate) async fn while_unavailable<F, Fut>(
    what: &str,
    shutdown: &CancellationToken,
    mut attempt: F,
) -> Result<(), super::StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), super::StoreError>>,
{
    let mut wait = RETRY_FIRST;
    let mut waited = false;
    loop {
        match attempt().await {
            Err(e)
                if e.kind() == super::StoreErrorKind::Unavailable && !shutdown.is_cancelled() =>
            {
                if !waited {
                    tracing::warn!(error = %e, "{what}: the store is out of reach; holding the writes and trying again");
                    waited = true;
                }
                tokio::select! {
                    _ = shutdown.cancelled() => {}
                    _ = tokio::time::sleep(wait) => {}
                }
                wait = (wait * 2).min(RETRY_LAST);
            }
            done => {
                if waited && done.is_ok() {
                    tracing::info!("{what}: the store is back; the held writes are written");
                }
                return done;
            }
        }
    }
}

// === health writes ===

/// The supervisors' writer of health state: transitions and instance
/// records, in order, on a [`HealthStore`] (policy [`HEALTH`]).
pub type HealthWriter = Writer<HealthSink>;

/// The [`Sink`] of a [`HealthWriter`]: writes each batch, waiting out
/// an unreachable store ([`while_unavailable`]) until shutdown.
pub struct HealthSink(Arc<dyn HealthStore>, CancellationToken);

impl Writer<HealthSink> {
    /// Starts the health writer over `store` on `tracker`; it drains and
    /// ends when `shutdown` fires (see the module doc).
    pub fn start(
        store: Arc<dyn HealthStore>,
        tracker: &TaskTracker,
        shutdown: &CancellationToken,
    ) -> HealthWriter {
        Writer::spawn(
            HealthSink(store, shutdown.clone()),
            HEALTH,
            tracker,
            shutdown,
        )
    }

    /// Queues `t`; `false` when the writer has closed for shutdown (the
    /// refusal is logged). A caller that tells others of `t` does so only
    /// after `true`: what anyone heard of is in the store after the
    /// shutdown.
    pub fn transition(&self, t: Transition) -> bool {
        self.send(HealthWrite::Transition(t))
    }

    /// Queues `r` (a refusal after the shutdown is logged).
    pub fn instance(&self, r: InstanceRecord) {
        self.send(HealthWrite::Instance(r));
    }
}

#[async_trait]
impl Sink for HealthSink {
    type Item = HealthWrite;

    async fn write(&self, batch: Vec<HealthWrite>) {
        let n = batch.len();
        let written =
            while_unavailable("health state", &self.1, || self.0.write(batch.clone())).await;
        if let Err(e) = written {
            tracing::error!(writes = n, kind = %e.kind(), error = %e, "could not write health state to the store");
        }
    }

    /// Says which write came after the writer closed.
    fn refused(&self, w: HealthWrite, why: Refusal) {
        let what = match &w {
            HealthWrite::Transition(_) => "transition",
            HealthWrite::Instance(_) => "instance record",
        };
        let when = match why {
            Refusal::Closed => "came after the store writer closed for shutdown",
            Refusal::Full => "found the store writer's queue full",
        };
        tracing::warn!(
            backend = w.backend(),
            "health state not written: a {what} {when}"
        );
    }
}

#[cfg(test)]
mod tests;
