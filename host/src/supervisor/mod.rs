//! The supervisor: one worker per backend that carries out what the health
//! [`Machine`] decides. It owns the backend's runtime (the only caller of
//! start/stop), opens the shared MCP connection over the runtime's endpoint,
//! watches the instance's exit, runs the probes on schedule, executes
//! operator commands, and reports every state change to the gateway (for
//! routing and `list_changed`), the event bus and the store.
//!
//! Shape: `Supervisor::new(..)` then `run(shutdown)` returns a future; the
//! gateway spawns it into its task tracker.
//!
//! It acts only while it holds the backend's supervision lease
//! ([`crate::cluster::lease`], from [`Outlets::leases`]): it waits for the
//! lease before anything, and when the lease is lost it drops whatever it
//! was doing at once (a start, a probe, a stop) and reports nothing more;
//! the instance is left to the lease's new holder. It then waits for the
//! lease again, answering operator commands with a refusal meanwhile.
//!
//! With several replicas, a shared backend (a container, a remote HTTP
//! server) has one supervisor per replica, and the lease decides which one
//! acts. The others *follow* (`follow.rs`): they mirror the state the
//! holder records, keep a connection of their own to the instance while
//! it serves, and report both to their replica. A follower that is granted
//! the lease (its holder died, or shut down) continues from the recorded
//! state, and adopts the running instance instead of starting another
//! ([`Runtime::adopt`]): one failure, one restart, whichever replica sees
//! it. A replica-local backend (a process) has a lease of its own on
//! each replica, and its records are named `NAME.REPLICA`.

mod candidate;
mod follow;
mod plugin_probes;
mod probe;
mod start;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

pub use candidate::Candidate;
use start::StartFailure;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use crate::backend::{Backend, BackendError, BackendUpdate, Command, CommandReply, Connection};
use crate::catalog::BackendCatalog;
use crate::cluster::lease::Leases;
use crate::health::machine::{Action, Input, Machine, Step};
use crate::health::policy::jitter_unit;
use crate::health::published::Publisher;
use crate::health::sanitize::Sanitizer;
use crate::health::{HealthState, Status};
use crate::runtime::process::StderrTail;
use crate::runtime::{Exit, Runtime};
use crate::store::{HealthWriter, InstanceRecord};

/// Where the supervisor is in its loop.
enum Phase {
    /// Start an instance now.
    Start,
    /// Continue with the instance another replica supervised (after a
    /// takeover), starting one only if it is not running.
    Adopt,
    /// Wait until the deadline, then start (backoff, re-probe, reconnect).
    Wait(Instant),
    /// Stay down until an operator acts (quarantine without re-probe).
    Idle,
    /// Serve the instance an update started and promoted
    /// ([`Candidate::promote`]).
    Handed,
}

/// Where the supervisor reports.
#[derive(Clone)]
pub struct Outlets {
    /// Backend updates and health transitions (`cluster::feed`).
    pub feed: Arc<dyn crate::cluster::feed::Feed>,
    pub store: Option<HealthWriter>,
    /// Runs probe plugins (none without `[plugins] dir`).
    pub plugins: Option<Arc<crate::plugins::Plugins>>,
    /// Who may supervise which backend (one replica: always this one).
    pub leases: Arc<dyn Leases>,
    /// With several replicas: the shared store, where a follower reads
    /// what the lease holder recorded, and this replica's name (in the
    /// record names of replica-local backends).
    pub cluster: Option<ClusterOutlets>,
}

/// What a supervisor among several replicas needs besides [`Outlets`].
#[derive(Clone)]
pub struct ClusterOutlets {
    pub store: Arc<dyn crate::store::HealthStore>,
    pub replica: crate::cluster::replica::ReplicaId,
    /// Where a follower sends the operator commands it is given.
    pub commands: Arc<crate::cluster::postgres::command::Commands>,
}

/// The name `backend`'s records and transitions have in the store: its
/// own, or `NAME.REPLICA` for a replica-local backend among several
/// replicas (each runs its own instance).
pub fn record_name(
    backend: &str,
    replica_local: bool,
    cluster: Option<&ClusterOutlets>,
) -> Arc<str> {
    match cluster {
        Some(c) if replica_local => format!("{backend}.{}", c.replica).into(),
        _ => backend.into(),
    }
}

/// The answer to an operator command while another replica holds the
/// backend's lease and the command cannot be routed to it.
const NOT_HOLDER: &str = "this gateway does not supervise the backend now (another replica holds its lease): ask again shortly";

pub struct Supervisor {
    backend: Arc<Backend>,
    /// Its name in the store and in transitions ([`record_name`]).
    record_name: Arc<str>,
    /// Whether it follows another replica's supervisor while it does not
    /// hold the lease (a shared backend among several replicas).
    follows: bool,
    /// The backend's status, written here only; `None` if another
    /// supervisor took it (a bug: logged in `run`).
    publisher: Option<Publisher>,
    runtime: Arc<dyn Runtime>,
    stderr: Option<StderrTail>,
    machine: Machine,
    outlets: Outlets,
    sanitizer: Sanitizer,
    latency: Option<Duration>,
    last_exit: Option<String>,
    /// What was last written to the store (state, restarts, failures, quarantine).
    persisted: Option<(HealthState, u64, u32, Option<String>)>,
    /// What the backend listed last (compared with each re-listing).
    listed: Option<BackendCatalog>,
    plugin_probes: plugin_probes::PluginProbes,
    /// The last built-in probe's degraded reason, folded with plugin results.
    builtin_degraded: Option<String>,
    /// An instance an update started and promoted, to serve first.
    handed: Option<(Option<Arc<Connection>>, start::Instance, BackendCatalog)>,
    /// This replica's connection to the instance it followed, kept past
    /// the lease's grant: calls go on over it until the adopted
    /// instance's connection replaces it ([`Supervisor::end_followed`]).
    followed: Option<follow::Followed>,
}

/// Least time between two probes triggered by a broken event stream.
const EARLY_PROBE_GAP: Duration = Duration::from_millis(250);

/// How long after its event stream broke a backend is probed: a backend
/// restarted in place (a redeploy on the same address) is given this long
/// to listen again before a refused probe takes it offline; a crash is
/// still seen this soon instead of at the next tick.
const STREAM_BREAK_GRACE: Duration = Duration::from_millis(500);

impl Supervisor {
    pub fn backend_name(&self) -> &Arc<str> {
        &self.backend.name
    }

    /// The backend it supervises.
    pub fn backend_arc(&self) -> Arc<Backend> {
        self.backend.clone()
    }

    pub fn new(
        backend: Arc<Backend>,
        runtime: Arc<dyn Runtime>,
        stderr: Option<StderrTail>,
        restored: Option<&InstanceRecord>,
        outlets: Outlets,
        sanitizer: Sanitizer,
    ) -> Self {
        let cfg = &backend.config;
        let record_name = record_name(
            &backend.name,
            runtime.replica_local(),
            outlets.cluster.as_ref(),
        );
        let follows = outlets.cluster.is_some() && !runtime.replica_local();
        let mut machine = Machine::new(
            &record_name,
            cfg.restart.clone(),
            cfg.health.unhealthy_threshold,
            runtime.owns_lifecycle(),
            SystemTime::now(),
        );
        if let Some(r) = restored {
            machine.restore(
                r.state,
                r.restart_count,
                r.consecutive_failures,
                r.quarantine_reason.clone(),
            );
        }
        let plugin_probes =
            plugin_probes::PluginProbes::new(cfg.probes.clone(), cfg.health.interval);
        let s = Self {
            publisher: backend.take_status_publisher(),
            backend,
            record_name,
            follows,
            runtime,
            stderr,
            machine,
            outlets,
            sanitizer,
            latency: None,
            last_exit: None,
            persisted: None,
            listed: None,
            plugin_probes,
            builtin_degraded: None,
            handed: None,
            followed: None,
        };
        s.publish_status();
        s
    }

    /// Runs until `shutdown`, then stops the instance (unless the lease
    /// was lost: the instance is then another replica's to stop).
    pub async fn run(mut self, shutdown: CancellationToken) {
        let (Some(mut commands), true) = (self.backend.take_commands(), self.publisher.is_some())
        else {
            tracing::error!(backend = %self.backend.name, "supervisor started twice");
            return;
        };
        let leases = self.outlets.leases.clone();
        let name = self.backend.name.clone();
        let mut first = true;
        let held = 'leased: loop {
            // A standby until the lease is granted: nothing is started,
            // probed or recorded; a shared backend is followed, and
            // commands are routed to the holder (or refused).
            let lease = {
                let record = self.record_name.clone();
                let mut acquiring = leases.acquire(&record);
                let mut heard = self.outlets.feed.heard(&self.record_name);
                let router = self.router();
                let follow = self.follow(&mut heard);
                tokio::pin!(follow);
                loop {
                    tokio::select! {
                        biased;
                        _ = shutdown.cancelled() => break 'leased false,
                        lease = &mut acquiring => break lease,
                        Some((cmd, reply)) = commands.recv() => route(router.clone(), record.clone(), cmd, reply),
                        () = &mut follow => {}
                    }
                }
            };
            if self.follows {
                // The follower's connection stays in service until the
                // instance is adopted (or found gone): a call arriving
                // meanwhile is not refused.
                self.take_over().await;
            }
            if !first {
                tracing::info!(backend = %name, "supervision lease held again; supervising");
            }
            // `biased`: a loss wins over whatever the supervisor would do
            // next; dropping `supervise` drops that at its await point.
            tokio::select! {
                biased;
                _ = lease.lost() => {}
                () = self.supervise(&mut commands, &shutdown, first) => break 'leased true,
            }
            first = false;
            tracing::warn!(backend = %name, "supervision lease lost; no longer acting for the backend");
            // Lost while adopting, the followed connection may be kept yet.
            self.followed = None;
            self.backend.instance_ended();
        };
        self.backend.instance_ended();
        if held && let Err(e) = self.runtime.stop().await {
            tracing::warn!(backend = %self.backend.name, error = %e, "could not stop the backend at shutdown");
        }
    }

    /// Where operator commands go while another replica holds the lease:
    /// the lease holder, when the backend is followed.
    fn router(&self) -> Option<Arc<crate::cluster::postgres::command::Commands>> {
        self.outlets
            .cluster
            .as_ref()
            .filter(|_| self.follows)
            .map(|c| c.commands.clone())
    }

    /// Acts for the backend until `shutdown` (the caller stops it sooner
    /// when the lease is lost). `first`: the first time since the
    /// supervisor was made (a quarantine is then one from before the
    /// restart).
    async fn supervise(
        &mut self,
        commands: &mut mpsc::UnboundedReceiver<(Command, CommandReply)>,
        shutdown: &CancellationToken,
        first: bool,
    ) {
        let mut phase = if self.handed.is_some() {
            Phase::Handed
        } else if self.machine.state == HealthState::Quarantined {
            if first {
                tracing::warn!(backend = %self.backend.name, reason = ?self.machine.quarantine_reason, "still quarantined from before the restart");
            }
            match self.machine.reprobe_delay() {
                Some(d) => Phase::Wait(Instant::now() + d),
                None => Phase::Idle,
            }
        } else if self.follows && crate::health::advertisable(self.machine.state) {
            Phase::Adopt
        } else {
            Phase::Start
        };
        if !matches!(phase, Phase::Adopt) {
            self.end_followed();
        }
        loop {
            phase = match phase {
                Phase::Start | Phase::Adopt => {
                    let adopt = matches!(phase, Phase::Adopt);
                    let Some(next) = self.start_and_serve(adopt, commands, shutdown).await else {
                        return;
                    };
                    next
                }
                // `biased`: a shutdown wins over a due restart, so no
                // `restarting → starting` follows the signal.
                Phase::Wait(deadline) => tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep_until(deadline) => Phase::Start,
                    Some((cmd, reply)) = commands.recv() => self.command(cmd, reply).await.unwrap_or(Phase::Wait(deadline)),
                },
                Phase::Idle => tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => return,
                    Some((cmd, reply)) = commands.recv() => self.command(cmd, reply).await.unwrap_or(Phase::Idle),
                },
                Phase::Handed => {
                    let Some((conn, instance, catalog)) = self.handed.take() else {
                        continue;
                    };
                    self.listed = Some(catalog.clone());
                    let _ = self.report(self.machine.state, Some(catalog));
                    tracing::info!(backend = %self.backend.name, instance = %instance.id, "serving the new version");
                    match self.serve(conn, instance.exited, commands, shutdown).await {
                        Some(next) => next,
                        None => return,
                    }
                }
            };
        }
    }

    /// One start attempt (with `adopt`, of continuing with the running
    /// instance, see [`Phase::Adopt`]) and, if it comes up, serving until
    /// it goes down. `None` on shutdown.
    async fn start_and_serve(
        &mut self,
        adopt: bool,
        commands: &mut mpsc::UnboundedReceiver<(Command, CommandReply)>,
        shutdown: &CancellationToken,
    ) -> Option<Phase> {
        if shutdown.is_cancelled() {
            return None;
        }
        if !adopt {
            self.apply(Input::Starting);
        }
        // The attempt runs beside the loop, like a re-listing: an operator
        // command is answered while a backend takes its time to start, and
        // one that ends the attempt (restart, quarantine) drops it before
        // the instance is stopped.
        let start = start::Start {
            backend: self.backend.clone(),
            runtime: self.runtime.clone(),
            stderr: self.stderr.clone(),
            owner: true,
        };
        let mut attempt = Box::pin(async move {
            if !adopt {
                return start.run().await.map(Some);
            }
            match start.runtime.adopt().await {
                Ok(Some(started)) => start.up(started).await.map(Some),
                Ok(None) => Ok(None),
                Err(e) => Err(start::StartFailure::from(e)),
            }
        });
        let attempt = loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return None,
                r = &mut attempt => break r,
                Some((cmd, reply)) = commands.recv() => {
                    if let Some(action) = self.answer(cmd, reply) {
                        drop(attempt);
                        self.end_followed();
                        return Some(self.act(Some(action)).await);
                    }
                }
            }
        };
        if !matches!(attempt, Ok(Some(_))) {
            self.end_followed();
        }
        match attempt {
            Ok(None) => {
                let step = self.apply(Input::Exited(
                    "the instance was not running when this replica took over its supervision"
                        .into(),
                ));
                Some(self.act(step.action).await)
            }
            Ok(Some((conn, instance, catalog))) => {
                let conn = conn.map(Arc::new);
                // Replaces the followed connection, if any, in one step.
                self.backend.instance_up(
                    Some(instance.id.clone()),
                    conn.clone(),
                    instance.url.clone(),
                );
                self.followed = None;
                self.listed = Some(catalog.clone());
                // The catalog first (known, not yet shown), then the state
                // change that shows it: the gateway never sees a serving
                // backend without its catalog.
                let _ = self.report(self.machine.state, Some(catalog));
                if adopt {
                    tracing::info!(backend = %self.backend.name, instance = %instance.id, "continuing with the running instance");
                } else {
                    let step = self.apply(Input::Up);
                    tracing::info!(backend = %self.backend.name, instance = %instance.id, "backend up");
                    debug_assert!(step.action.is_none());
                }
                self.serve(conn, instance.exited, commands, shutdown).await
            }
            Err(StartFailure::Infrastructure(reason)) => {
                let _ = self.runtime.stop().await;
                self.apply(Input::InfraFailed(reason));
                // Not the backend's fault: try again at the probe interval,
                // without counting a failure.
                Some(Phase::Wait(
                    Instant::now() + self.backend.config.health.interval,
                ))
            }
            Err(StartFailure::Backend { reason, exit }) => {
                if exit.is_some() {
                    self.last_exit = exit;
                }
                let step = self.apply(if adopt {
                    Input::Exited(format!("the running instance did not answer when this replica took over its supervision: {reason}"))
                } else {
                    Input::StartFailed(reason)
                });
                Some(self.act(step.action).await)
            }
        }
    }

    /// Serves a ready instance until it goes down (returns the next phase)
    /// or shutdown (`None`).
    async fn serve(
        &mut self,
        conn: Option<Arc<Connection>>,
        mut exited: oneshot::Receiver<Exit>,
        commands: &mut mpsc::UnboundedReceiver<(Command, CommandReply)>,
        shutdown: &CancellationToken,
    ) -> Option<Phase> {
        let up_since = Instant::now();
        self.plugin_probes.restart();
        self.builtin_degraded = None;
        let interval = self.backend.config.health.interval;
        let mut tick = tokio::time::interval_at(Instant::now() + interval, interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut watching_exit = true;
        let mut last_probe = Instant::now()
            .checked_sub(EARLY_PROBE_GAP)
            .unwrap_or_else(Instant::now);
        let mut probe_soon: Option<Instant> = None;
        // The re-listing in flight, if any; dropped (and aborted) with the
        // instance when it goes down.
        let mut listing: Option<Relisting> = None;
        // The probe plugin calls in flight, likewise.
        let mut calls = plugin_probes::Calls::new(self.plugin_probes.len());
        loop {
            let input = tokio::select! {
                biased;
                _ = shutdown.cancelled() => {
                    // Close the backend session cleanly (an HTTP backend gets
                    // its DELETE) unless a request still holds the connection.
                    self.backend.instance_ended();
                    if let Some(Ok(conn)) = conn.map(Arc::try_unwrap) {
                        conn.close().await;
                    }
                    return None;
                }
                exit = &mut exited, if watching_exit => {
                    watching_exit = false;
                    match exit {
                        Ok(exit) => {
                            self.last_exit = Some(exit.summary.clone());
                            Input::Exited(self.with_stderr(exit.summary, false))
                        }
                        // Remote runtimes never send; containers drop the
                        // sender when they lose the engine's event stream.
                        Err(_) if self.runtime.owns_lifecycle() => Input::InfraFailed("lost track of the instance (runtime event stream ended)".into()),
                        Err(_) => continue,
                    }
                }
                _ = when_connected(conn.as_deref(), |c| c.closed()) => {
                    // The process exit usually explains a closed stdio pipe:
                    // give it a moment to arrive.
                    let reason = match tokio::time::timeout(Duration::from_millis(300), &mut exited).await {
                        Ok(Ok(exit)) if watching_exit => {
                            self.last_exit = Some(exit.summary.clone());
                            exit.summary
                        }
                        _ => "MCP connection closed".into(),
                    };
                    watching_exit = false;
                    Input::Exited(self.with_stderr(reason, false))
                }
                Some((cmd, reply)) = commands.recv() => {
                    match self.command(cmd, reply).await {
                        Some(next) => {
                            self.backend.instance_ended();
                            return Some(next);
                        }
                        None => continue,
                    }
                }
                // One listing at a time, beside the loop: probes, exits and
                // operator commands are still handled while a backend takes
                // its time (bounded by `[limits]` and the request timeout).
                // A request made meanwhile stays pending until it ends.
                _ = self.backend.refresh_requested(), if listing.is_none() => {
                    // Sessions list a forward_auth backend themselves.
                    let Some(conn) = conn.clone() else {
                        self.backend.set_listing(false, true);
                        continue;
                    };
                    listing = Some(Relisting::start(&self.backend, conn));
                    continue;
                }
                listed = async { (&mut listing.as_mut().expect("guarded by is_some").task).await }, if listing.is_some() => {
                    // Dropping it marks the listing finished for waiters
                    // (when it changed something, once the gateway applied
                    // it: they want to see what it listed).
                    let mut done = listing.take();
                    let listed = listed.unwrap_or_else(|e| Err(BackendError::Transport {
                        backend: self.backend.name.clone(),
                        reason: format!("the listing task failed: {e}"),
                        stderr: vec![],
                    }));
                    match listed {
                        Ok(catalog) => {
                            // Deep compare with what this backend listed last:
                            // only a difference reaches the gateway.
                            if self.listed.as_ref() != Some(&catalog) {
                                tracing::info!(backend = %self.backend.name, "capabilities changed on re-listing");
                                self.listed = Some(catalog.clone());
                                // The other replicas list it again too.
                                self.outlets.feed.relisted(&self.record_name);
                                let sent = self.report(self.machine.state, Some(catalog));
                                if let (Ok(()), Some(done)) = (sent, done.as_mut()) {
                                    done.handed_on = true;
                                }
                            }
                            drop(done);
                            continue;
                        }
                        Err(e) if e.is_connection_lost() => Input::Exited(self.with_stderr(e.to_string(), e.quotes_stderr())),
                        Err(e) => {
                            // A failed listing keeps the cached catalog and counts as a failed observation.
                            tracing::warn!(backend = %self.backend.name, error = %e, "re-listing failed; keeping the cached catalog");
                            Input::ProbeFailed(format!("listing failed: {e}"))
                        }
                    }
                }
                _ = tick.tick() => {
                    self.apply(Input::Uptime(up_since.elapsed()));
                    last_probe = Instant::now();
                    let input = self.probe(conn.as_deref()).await;
                    self.builtin_degraded = match &input {
                        Input::ProbeOk { degraded } => degraded.clone(),
                        _ => None,
                    };
                    self.plugin_probes.fold(input)
                }
                // Probe plugin calls run beside the loop, like the listing:
                // a probe taking its whole deadline holds up no exit, probe
                // or command. Its verdict is folded in when it comes.
                _ = tokio::time::sleep_until(self.plugin_probes.next_due().unwrap_or_else(Instant::now)), if self.plugin_probes.next_due().is_some() => {
                    match self.start_plugin_probe(&mut calls, conn.as_ref()) {
                        Some(input) => input,
                        None => continue,
                    }
                }
                Some((i, result)) = calls.next(), if !calls.is_empty() => {
                    match self.plugin_probe_done(i, result) {
                        Some(input) => input,
                        None => continue,
                    }
                }
                // The backend forgot our session and it was re-initialized:
                // it may have been redeployed with other capabilities.
                _ = when_connected(conn.as_deref(), |c| c.reinitialized()) => {
                    tracing::info!(backend = %self.backend.name, "backend session re-initialized; listing again");
                    self.backend.request_refresh();
                    continue;
                }
                // The backend's event stream broke: probe soon rather than at
                // the next tick (at most one probe per EARLY_PROBE_GAP).
                _ = when_connected(conn.as_deref(), |c| c.stream_broken()) => {
                    tracing::debug!(backend = %self.backend.name, "event stream broke; probing soon");
                    probe_soon.get_or_insert(
                        (last_probe + EARLY_PROBE_GAP).max(Instant::now() + STREAM_BREAK_GRACE),
                    );
                    continue;
                }
                _ = tokio::time::sleep_until(probe_soon.unwrap_or_else(Instant::now)), if probe_soon.is_some() => {
                    probe_soon = None;
                    last_probe = Instant::now();
                    let input = self.probe(conn.as_deref()).await;
                    self.plugin_probes.fold(input)
                }
            };
            let step = self.apply(input);
            if step.action.is_some() {
                self.backend.instance_ended();
                return Some(self.act(step.action).await);
            }
        }
    }

    /// Executes an operator command; `Some(phase)` when it changes what the
    /// supervisor does next.
    async fn command(&mut self, cmd: Command, reply: CommandReply) -> Option<Phase> {
        let action = self.answer(cmd, reply)?;
        Some(self.act(Some(action)).await)
    }

    /// Feeds an operator command to the machine and answers it; the action
    /// it calls for, if any (not yet carried out: see [`Self::act`]).
    fn answer(&mut self, cmd: Command, reply: CommandReply) -> Option<Action> {
        let input = match cmd {
            Command::Restart { principal } => Input::OperatorRestart { principal },
            Command::Quarantine { principal, reason } => Input::OperatorQuarantine {
                principal,
                reason: reason.map(|r| self.sanitizer.clean(&r)),
            },
            Command::Release { principal } => Input::OperatorRelease { principal },
        };
        match self.machine.step(input, SystemTime::now(), jitter_unit()) {
            Ok(step) => {
                self.after_step(&step);
                let _ = reply.send(Ok(self.status()));
                step.action
            }
            Err(refused) => {
                let _ = reply.send(Err(refused.0));
                None
            }
        }
    }

    /// Carries out an action of the machine: stop the instance when the
    /// backend is going down, then pick the next phase.
    async fn act(&mut self, action: Option<Action>) -> Phase {
        match action {
            None | Some(Action::Continue) => Phase::Start,
            Some(Action::RestartAfter(d)) | Some(Action::RetryAfter(d)) => {
                self.stop_instance().await;
                Phase::Wait(Instant::now() + d)
            }
            Some(Action::Stop) => {
                self.stop_instance().await;
                Phase::Idle
            }
        }
    }

    async fn stop_instance(&mut self) {
        self.backend.instance_ended();
        if let Err(e) = self.runtime.stop().await {
            tracing::warn!(backend = %self.backend.name, error = %e, "could not stop the backend");
        }
    }

    /// Feeds the machine (reasons sanitized) and reports what changed.
    fn apply(&mut self, input: Input) -> Step {
        let input = self.sanitize(input);
        match self.machine.step(input, SystemTime::now(), jitter_unit()) {
            Ok(step) => {
                self.after_step(&step);
                step
            }
            Err(refused) => {
                tracing::debug!(backend = %self.backend.name, reason = %refused.0, "input refused");
                Step::default()
            }
        }
    }

    /// Reports a step: status, log, event bus, store, gateway. A backend
    /// an update replaced (kept for its drain and bake) records nothing:
    /// its name is the new version's now.
    fn after_step(&mut self, step: &Step) {
        self.publish_status();
        if self.backend.retired() {
            return;
        }
        for t in &step.transitions {
            tracing::info!(backend = %t.backend, from = %t.from, to = %t.to, reason = %t.reason, "health transition");
            crate::metrics::get().transition(&t.backend, t.to.as_str());
            // Queued for the store before anyone hears of it: a transition
            // seen on the event bus is one the store writer accepted, and
            // a shutdown writes it (see `store::writer`). One the closed
            // writer refused (a step racing the shutdown) is not announced.
            let stored = self
                .outlets
                .store
                .as_ref()
                .is_none_or(|s| s.transition(t.clone()));
            if stored {
                self.outlets.feed.transition(t.clone());
            }
        }
        // The durable record changes only with these fields; probes that
        // change nothing must not write (they run every interval).
        let key = (
            self.machine.state,
            self.machine.restart_count,
            self.machine.consecutive_failures,
            self.machine.quarantine_reason.clone(),
        );
        if let Some(store) = &self.outlets.store
            && self.persisted.as_ref() != Some(&key)
        {
            store.instance(InstanceRecord {
                backend: self.record_name.to_string(),
                state: key.0,
                restart_count: key.1,
                consecutive_failures: key.2,
                quarantine_reason: key.3.clone(),
                updated_at: SystemTime::now(),
            });
            self.persisted = Some(key);
        }
        if !step.transitions.is_empty() {
            let _ = self.report(self.machine.state, None);
        }
    }

    /// Tells this replica that the backend is in `state`, with `catalog`
    /// when it listed one (the gateway never shows a serving backend
    /// without its catalog).
    fn report(
        &self,
        state: HealthState,
        catalog: Option<BackendCatalog>,
    ) -> Result<(), crate::cluster::feed::Closed> {
        self.outlets.feed.update(BackendUpdate {
            backend: self.backend.name.clone(),
            uid: self.backend.uid,
            removed: false,
            state,
            catalog,
        })
    }

    fn status(&self) -> Status {
        let m = &self.machine;
        Status {
            state: m.state,
            since: m.since,
            reason: m.reason.clone(),
            restart_count: m.restart_count,
            consecutive_failures: m.consecutive_failures,
            quarantine_reason: m.quarantine_reason.clone(),
            next_retry_at: m.next_retry_at,
            latency: self.latency,
            last_exit: self.last_exit.clone(),
        }
    }

    fn publish_status(&self) {
        if let Some(p) = &self.publisher {
            p.publish(self.status());
        }
    }

    fn sanitize(&self, input: Input) -> Input {
        let c = |s: String| self.sanitizer.clean(&s);
        match input {
            Input::StartFailed(r) => Input::StartFailed(c(r)),
            Input::Exited(r) => Input::Exited(c(r)),
            Input::ProbeFailed(r) => Input::ProbeFailed(c(r)),
            Input::InfraFailed(r) => Input::InfraFailed(c(r)),
            Input::ProbeOk { degraded } => Input::ProbeOk {
                degraded: degraded.map(c),
            },
            other => other,
        }
    }

    /// Adds the last stderr line of a process backend to a reason.
    fn with_stderr(&self, reason: String, quoted: bool) -> String {
        start::with_stderr(self.stderr.as_ref(), reason, quoted)
    }
}

/// Answers an operator command while another replica holds the lease:
/// routed to that replica by `router` (`cluster::postgres::command`), or
/// refused without one.
fn route(
    router: Option<Arc<crate::cluster::postgres::command::Commands>>,
    backend: Arc<str>,
    cmd: Command,
    reply: CommandReply,
) {
    let Some(commands) = router else {
        let _ = reply.send(Err(NOT_HOLDER.into()));
        return;
    };
    crate::background::spawn(async move {
        let answer = commands.forward(&backend, &cmd).await.map_err(|e| match e {
            crate::backend::CommandError::Refused(why)
            | crate::backend::CommandError::NoSupervisor(why) => why,
        });
        let _ = reply.send(answer);
    });
}

/// A re-listing running beside the supervisor's loop. Dropping it aborts
/// the listing and tells waiters ([`Backend::refresh_and_wait`]) it ended.
struct Relisting {
    task: AbortOnDropHandle<Result<BackendCatalog, BackendError>>,
    backend: Arc<Backend>,
    /// What it listed went to the gateway, which tells waiters once it is
    /// applied ([`Backend::listing_applied`]).
    handed_on: bool,
}

impl Relisting {
    fn start(backend: &Arc<Backend>, conn: Arc<Connection>) -> Self {
        backend.set_listing(true, false);
        // What changed for clients that declared nothing may have changed
        // for the others too.
        backend.relist_variants();
        Self {
            task: AbortOnDropHandle::new(crate::background::spawn(async move {
                conn.list_catalog().await
            })),
            backend: backend.clone(),
            handed_on: false,
        }
    }
}

impl Drop for Relisting {
    fn drop(&mut self) {
        self.backend.set_listing(false, !self.handed_on);
    }
}

/// `f(conn)` with a connection; never resolves without one (a
/// `forward_auth` backend's supervisor holds none).
async fn when_connected<'a, F>(conn: Option<&'a Connection>, f: impl FnOnce(&'a Connection) -> F)
where
    F: Future<Output = ()>,
{
    match conn {
        Some(c) => f(c).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
