//! The supervisor and its lease: it acts only while it holds one.
//!
//! A runtime whose starts fail (or hang) stands in for a backend: every
//! start is an act the test can count, with no process and no socket.
//! Time is paused: waiting "an hour" is the runtime's idle clock running
//! on, so "nothing happened in an hour" is exact, not hoped for.

use std::sync::Mutex;

use futures::future::BoxFuture;
use tokio::sync::{Notify, broadcast};

use super::*;
use crate::backend::CommandError;
use crate::cluster::feed::Feed as _;
use crate::cluster::lease::{Lease, LocalLeases};
use crate::health::Transition;
use crate::runtime::{Inspection, RuntimeError, Started};

/// A supervisor of `backend` on `runtime` holding leases of `leases`, and
/// its health transitions.
fn supervisor(
    backend: &Arc<Backend>,
    runtime: &Arc<Counting>,
    leases: Arc<dyn crate::cluster::lease::Leases>,
) -> (Supervisor, broadcast::Receiver<Transition>) {
    let (feed, _updates) = crate::cluster::feed::LocalFeed::new();
    let events = feed.transitions();
    let outlets = Outlets {
        feed,
        store: None,
        plugins: None,
        leases,
        cluster: None,
    };
    let supervisor = Supervisor::new(
        backend.clone(),
        runtime.clone(),
        None,
        None,
        outlets,
        Sanitizer::new(crate::redact::Redactor::default()),
    );
    (supervisor, events)
}

fn backend() -> Arc<Backend> {
    crate::backend::testutil::stdio("")
}

/// A runtime that counts its starts; each fails at once, or, with
/// `hang`, never ends (and says when it is dropped).
#[derive(Default)]
struct Counting {
    hang: bool,
    starts: Mutex<u32>,
    started: Notify,
    /// Each hanging start holds a sender; dropping the start closes it.
    dropped: Mutex<Vec<oneshot::Receiver<()>>>,
}

impl Counting {
    fn starts(&self) -> u32 {
        *self.starts.lock().unwrap()
    }
}

impl Runtime for Counting {
    fn kind(&self) -> &'static str {
        "process"
    }
    fn start(&self) -> BoxFuture<'_, Result<Started, RuntimeError>> {
        *self.starts.lock().unwrap() += 1;
        self.started.notify_one();
        if !self.hang {
            return Box::pin(async { Err(RuntimeError::Failed("it would not start".into())) });
        }
        let (tx, rx) = oneshot::channel::<()>();
        self.dropped.lock().unwrap().push(rx);
        Box::pin(async move {
            let _held = tx;
            std::future::pending().await
        })
    }
    fn stop(&self) -> BoxFuture<'_, Result<(), RuntimeError>> {
        Box::pin(async { Ok(()) })
    }
    fn inspect(&self) -> BoxFuture<'_, Result<Inspection, RuntimeError>> {
        Box::pin(async { Err(RuntimeError::Infrastructure("not in this test".into())) })
    }
}

/// Leases the test hands out one by one, keeping the means to revoke each.
struct Granted {
    leases: tokio::sync::Mutex<mpsc::UnboundedReceiver<Lease>>,
}

#[async_trait::async_trait]
impl Leases for Granted {
    async fn acquire(&self, _: &str) -> Lease {
        match self.leases.lock().await.recv().await {
            Some(lease) => lease,
            None => std::future::pending().await,
        }
    }
}

struct Running {
    backend: Arc<Backend>,
    runtime: Arc<Counting>,
    events: broadcast::Receiver<Transition>,
    grant: mpsc::UnboundedSender<Lease>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    fn start(hang: bool) -> Running {
        let backend = backend();
        let runtime = Arc::new(Counting {
            hang,
            ..Counting::default()
        });
        let (grant, leases) = mpsc::unbounded_channel();
        let (supervisor, events) = supervisor(
            &backend,
            &runtime,
            Arc::new(Granted {
                leases: tokio::sync::Mutex::new(leases),
            }),
        );
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(supervisor.run(shutdown.clone()));
        Running {
            backend,
            runtime,
            events,
            grant,
            shutdown,
            task,
        }
    }

    /// Grants a lease; the token revokes it.
    fn grant(&self) -> CancellationToken {
        let lost = CancellationToken::new();
        let _ = self.grant.send(Lease::new("mem", lost.clone(), None));
        lost
    }

    /// Waits (at most a minute of paused time) for the next start.
    async fn next_start(&self) {
        tokio::time::timeout(Duration::from_secs(60), self.runtime.started.notified())
            .await
            .expect("a start within a minute");
    }

    /// Waits (a minute of paused time at most) until a failed start is
    /// reported: a transition out of `starting`.
    async fn failed_start(&mut self) {
        let wait = async {
            loop {
                match self.events.recv().await {
                    Ok(t) if t.from == HealthState::Starting => return,
                    Ok(_) => continue,
                    Err(e) => panic!("the event bus: {e}"),
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(60), wait)
            .await
            .expect("the failed start reported within a minute");
    }

    /// Transitions reported since last asked.
    fn reported(&mut self) -> Vec<String> {
        let mut seen = Vec::new();
        while let Ok(t) = self.events.try_recv() {
            seen.push(format!("{} -> {}", t.from, t.to));
        }
        seen
    }

    async fn shut_down(self) {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(60), self.task)
            .await
            .expect("the supervisor ends at shutdown")
            .expect("without panicking");
    }
}

const HOUR: Duration = Duration::from_secs(3600);

#[tokio::test(start_paused = true)]
async fn nothing_is_started_before_the_lease_is_granted() {
    let mut r = Running::start(false);
    tokio::time::sleep(HOUR).await;
    assert_eq!(r.runtime.starts(), 0);
    assert_eq!(r.reported(), Vec::<String>::new());
    // An operator command is refused, not left waiting.
    let answer = r
        .backend
        .command(Command::Restart {
            principal: "op".into(),
        })
        .await;
    assert_eq!(answer.err(), Some(CommandError::Refused(NOT_HOLDER.into())));
    let _lease = r.grant();
    r.next_start().await;
    r.shut_down().await;
}

#[tokio::test(start_paused = true)]
async fn a_lost_lease_stops_restarts_and_reports_until_it_is_held_again() {
    let mut r = Running::start(false);
    let lease = r.grant();
    r.next_start().await;
    // The failed start is reported; a restart is due after its backoff.
    r.failed_start().await;
    lease.cancel();
    let starts = r.runtime.starts();
    tokio::time::sleep(HOUR).await;
    assert_eq!(r.runtime.starts(), starts, "no restart after the loss");
    assert_eq!(r.reported(), Vec::<String>::new(), "nothing reported");
    let answer = r
        .backend
        .command(Command::Quarantine {
            principal: "op".into(),
            reason: None,
        })
        .await;
    assert_eq!(answer.err(), Some(CommandError::Refused(NOT_HOLDER.into())));
    // Held again: it acts again.
    let _again = r.grant();
    r.next_start().await;
    assert_eq!(r.runtime.starts(), starts + 1);
    r.shut_down().await;
}

#[tokio::test(start_paused = true)]
async fn a_lost_lease_drops_a_start_in_flight_at_once() {
    let mut r = Running::start(true);
    let lease = r.grant();
    r.next_start().await;
    r.reported();
    let mut attempt = r.runtime.dropped.lock().unwrap().pop().expect("one start");
    assert!(attempt.try_recv().is_err(), "the start is in flight");
    lease.cancel();
    // Closed when the start is dropped: no deadline, no outcome, no report.
    tokio::time::timeout(Duration::from_secs(1), &mut attempt)
        .await
        .expect("the start is dropped at once")
        .expect_err("dropped, not completed");
    tokio::time::sleep(HOUR).await;
    assert_eq!(r.runtime.starts(), 1);
    assert_eq!(r.reported(), Vec::<String>::new());
    r.shut_down().await;
}

#[tokio::test(start_paused = true)]
async fn with_local_leases_a_supervisor_acts_at_once() {
    let runtime = Arc::new(Counting::default());
    let (supervisor, _events) = supervisor(&backend(), &runtime, Arc::new(LocalLeases));
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(supervisor.run(shutdown.clone()));
    tokio::time::timeout(Duration::from_secs(60), runtime.started.notified())
        .await
        .expect("started without waiting for anyone");
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .expect("ends at shutdown")
        .expect("without panicking");
}
