//! Updates of backends: a new version is started, judged ready, and then
//! serves, or is rolled back (see docs/updates.md). The rules are
//! `rollout` (pure); this carries them out with the backend set, the
//! supervisors and the store.
//!
//! An update makes a new [`Backend`] from the new configuration (same
//! name) and a candidate supervisor for it (`supervisor::Candidate`),
//! outside the backend set: no client reaches it. Blue-green starts it
//! beside the old one (a container under another name and host port, a
//! second process); recreate stops the old one first, leaving the backend
//! unavailable in between. Once the candidate is ready and the verdict is
//! to promote, one new backend set is published with the new backend in
//! the old one's place: calls from that generation on go to the new
//! version, calls begun before finish on the old one, which is kept
//! (retired: it records nothing) for `bake` and at least `drain`. A crash
//! of the new version within `bake` switches back. Every step is recorded
//! in the store, so a Vigil stopped in the middle resolves it at start
//! ([`App::resolve_interrupted_updates`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::App;
use crate::backend::{Backend, BackendUpdate};
use crate::catalog::BackendCatalog;
use crate::config::{BackendConfig, RuntimeKind, Strategy, Transport, UpdatePolicy};
use crate::health::{HealthState, Transition};
use crate::rollout::{CatalogDiff, Phase, Rejected, Spec, UpdateRecord, Verdict};
use crate::runtime::Runtime;
use crate::store::UpdateStore;
use crate::supervisor::{Candidate, Supervisor};

/// Updates of a backend kept when reading its last one.
const LAST: usize = 20;
/// How long an operator's decision waits to be taken in before it is
/// answered.
const DECIDED: Duration = Duration::from_secs(2);
/// Who starts an update a config edit asked for.
pub(super) const RELOAD: &str = "config reload";
/// How often the new version's state is read while it bakes.
const BAKE_LOOK: Duration = Duration::from_millis(100);
/// How long reading the old version's listing (for the diff) may take.
const LIST_OLD: Duration = Duration::from_secs(10);

/// What an update changes a backend to.
#[derive(Debug, Clone)]
pub enum Target {
    /// Another image for a container backend (the API, the CLI).
    Image(String),
    /// The backend's new configuration (a config reload).
    Config(Box<BackendConfig>),
}

/// An operator's word on an update in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Approve(String),
    Abort(String),
}

/// Why an update request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpdateError {
    #[error("no backend named '{0}'")]
    NotFound(String),
    /// The request does not fit the backend (an image for a process).
    #[error("{0}")]
    Invalid(String),
    /// Not in this state (an update already runs, nothing is held).
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Store(String),
}

/// The updates in progress and what survives them.
#[derive(Default)]
pub(super) struct Rollouts {
    /// The update in progress of each backend.
    running: Mutex<HashMap<String, Running>>,
    /// The last update of each backend, when no store keeps them.
    last: Mutex<HashMap<String, UpdateRecord>>,
    /// Images an update through the API put in place of the configured
    /// one: backend → (the image the config named then, the image now).
    /// The config file wins once it names another image.
    kept: Mutex<HashMap<String, (String, String)>>,
}

impl Rollouts {
    /// Reads what earlier runs left: the images updates kept, and any
    /// update a stop of Vigil interrupted, which is resolved (and, with
    /// one replica, the candidate containers any update left are
    /// removed): one interrupted before its switch is rolled back, one
    /// interrupted while baking succeeded (the new version was serving).
    /// Exactly one version of each backend runs afterwards: the one its
    /// supervisor starts. Before any supervisor starts.
    pub(super) async fn load(
        store: Option<&Arc<dyn UpdateStore>>,
        configs: &[BackendConfig],
        replica: Option<&str>,
    ) -> Rollouts {
        let alone = replica.is_none();
        let rollouts = Rollouts::default();
        let Some(store) = store else {
            return rollouts;
        };
        match store.unfinished_updates().await {
            Ok(rows) => {
                // Among several replicas, each resolves its own processes'
                // (`NAME.REPLICA`); the others are theirs.
                let own = |u: &UpdateRecord| {
                    replica
                        .is_none_or(|r| u.backend.rsplit_once('.').is_some_and(|(_, of)| of == r))
                };
                for mut u in rows.rows.into_iter().filter(own) {
                    u.interrupted(SystemTime::now());
                    tracing::warn!(backend = %u.backend, update = %u.id, to = %u.to.label(), outcome = u.phase.as_str(), "an update was interrupted by a stop of Vigil: {}", u.reason.as_deref().unwrap_or_default());
                    if let Err(e) = store.save_update(&u).await {
                        tracing::error!(backend = %u.backend, error = %e, "could not record how the interrupted update ended");
                    }
                    crate::metrics::get().update_ended(&u.backend, u.phase.as_str());
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "could not read unfinished updates");
            }
        }
        for cfg in configs {
            let RuntimeKind::Container(spec) = &cfg.runtime else {
                continue;
            };
            if let Ok(rows) = store.updates(&cfg.name, LAST).await
                && let Some(u) = rows.rows.iter().find(|u| u.phase == Phase::Succeeded)
                && let (Some(declared), Some(image)) = (&u.declared, &u.to.image)
                && declared != image
            {
                rollouts
                    .kept
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(cfg.name.clone(), (declared.clone(), image.clone()));
            }
            // With several replicas another one may be updating right now.
            let Transport::Http { url, headers, .. } = &cfg.transport else {
                continue;
            };
            if !alone {
                continue;
            }
            let rt = crate::runtime::container::ContainerRuntime::new(
                &cfg.name,
                spec.clone(),
                url.clone(),
                headers.clone(),
            );
            match rt.sweep().await {
                Ok(removed) if !removed.is_empty() => {
                    tracing::info!(backend = %cfg.name, containers = ?removed, "removed the containers of an interrupted update");
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(backend = %cfg.name, error = %e, "could not look for containers an update left")
                }
            }
        }
        rollouts
    }

    /// The configs with the images updates kept in place of the
    /// configured ones (at start and at each reload).
    pub(super) fn with_kept_images(&self, configs: &mut [BackendConfig]) {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        for cfg in configs {
            kept_image(cfg, &kept);
        }
    }
}

struct Running {
    /// The update as it goes (its task writes, readers watch).
    record: watch::Sender<UpdateRecord>,
    decisions: mpsc::UnboundedSender<Decision>,
}

/// `cfg` with the image an update put in place of its configured one, if
/// the config still names the image it replaced.
fn kept_image(cfg: &mut BackendConfig, kept: &HashMap<String, (String, String)>) {
    if let (RuntimeKind::Container(spec), Some((declared, image))) =
        (&mut cfg.runtime, kept.get(&cfg.name))
        && spec.image == *declared
    {
        spec.image = image.clone();
    }
}

/// `url` with `port`.
fn with_port(url: &str, port: u16) -> Option<String> {
    let mut u = url::Url::parse(url).ok()?;
    u.set_port(Some(port)).ok()?;
    Some(u.to_string())
}

/// A free port on the loopback interface, for a candidate container.
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl App {
    /// The store of updates, if any.
    fn update_store(&self) -> Option<Arc<dyn UpdateStore>> {
        self.store.as_ref().map(|s| s.updates.clone())
    }

    /// Starts an update of backend `name` to `target`, by `principal`;
    /// answers with its record as it starts (the rest runs on its own).
    pub async fn start_update(
        self: &Arc<Self>,
        name: &str,
        target: Target,
        principal: &str,
    ) -> Result<UpdateRecord, UpdateError> {
        let old = self
            .front
            .backend(name)
            .ok_or_else(|| UpdateError::NotFound(name.to_owned()))?;
        // A process runs on each replica, and each updates its own (a
        // config edit on each); a container is shared by all of them.
        if self.replicas.is_some() && !matches!(old.config.transport, Transport::Stdio { .. }) {
            return Err(UpdateError::Invalid(format!(
                "backend '{name}' is shared by several replicas: updating it through one of them is not supported yet; update it with one replica running"
            )));
        }
        let (next, declared) = match target {
            Target::Image(image) => {
                let image = image.trim().to_owned();
                let mut cfg = old.config.clone();
                let RuntimeKind::Container(spec) = &mut cfg.runtime else {
                    return Err(UpdateError::Invalid(format!(
                        "backend '{name}' is not a container: an image update applies to runtime = \"container\"; change a process backend's command, args or env in the config file and reload"
                    )));
                };
                if image.is_empty() || image.chars().any(char::is_whitespace) {
                    return Err(UpdateError::Invalid(
                        "`image` must name an image, like \"localhost/my-mcp:2\"".into(),
                    ));
                }
                // The file's image, which this one stands in for until the
                // file names another.
                let declared = self
                    .config()
                    .backends
                    .iter()
                    .find(|b| b.name == name)
                    .and_then(|b| match &b.runtime {
                        RuntimeKind::Container(s) => Some(s.image.clone()),
                        _ => None,
                    });
                spec.image = image;
                (cfg, declared)
            }
            Target::Config(cfg) => {
                let declared = match &cfg.runtime {
                    RuntimeKind::Container(s) => Some(s.image.clone()),
                    _ => None,
                };
                (*cfg, declared)
            }
        };
        if matches!(next.runtime, RuntimeKind::Remote) {
            return Err(UpdateError::Invalid(format!(
                "backend '{name}' is a remote server: Vigil does not run it, so it is updated where it runs"
            )));
        }
        let policy = next.update.clone().unwrap_or_default();
        let now = SystemTime::now();
        let record = UpdateRecord {
            id: crate::rollout::record::new_id(now),
            // Its name in the store: `NAME.REPLICA` for a replica's own
            // process among several.
            backend: self.record_name(&old).to_string(),
            strategy: policy.strategy.as_str().to_owned(),
            from: Spec::of(&old.config),
            to: Spec::of(&next),
            phase: Phase::Starting,
            reason: None,
            diff: None,
            principal: principal.to_owned(),
            approved_by: None,
            declared,
            started_at: now,
            ended_at: None,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = watch::Sender::new(record.clone());
        {
            let mut running = self
                .rollouts
                .running
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if let Some(r) = running.get(name) {
                let phase = r.record.borrow().phase;
                return Err(UpdateError::Conflict(format!(
                    "an update of '{name}' is in progress ({}): approve it, abort it, or wait for it to end",
                    phase.as_str()
                )));
            }
            running.insert(
                name.to_owned(),
                Running {
                    record: shared.clone(),
                    decisions: tx,
                },
            );
        }
        let run = Update {
            app: self.clone(),
            old,
            next,
            policy,
            record: shared,
            decisions: rx,
            candidate_runtime: None,
        };
        run.save().await;
        run.announce(
            run.old.state(),
            HealthState::Updating,
            format!("update to {} started by {principal}", record.to.label()),
        );
        tracing::info!(backend = %name, update = %record.id, from = %record.from.label(), to = %record.to.label(), strategy = %record.strategy, %principal, "update started");
        if principal == RELOAD {
            run.audit(
                "update",
                format!(
                    "ok: update {} from {} to {} (starting)",
                    record.id,
                    record.from.label(),
                    record.to.label()
                ),
            )
            .await;
        }
        self.spawner.track(run.run());
        Ok(record)
    }

    /// Hands an operator's decision to the update of `name` in progress.
    pub async fn decide_update(
        &self,
        name: &str,
        decision: Decision,
    ) -> Result<UpdateRecord, UpdateError> {
        if self.front.backend(name).is_none() {
            return Err(UpdateError::NotFound(name.to_owned()));
        }
        let (record, mut changes) = self.hand_over(name, decision)?;
        // Answer with the update as the decision left it (approved: going
        // on; aborted: rolled back), or as it is after a moment.
        let taken =
            |now: &UpdateRecord| now.phase != record.phase || now.approved_by != record.approved_by;
        let _ = tokio::time::timeout(DECIDED, changes.wait_for(taken)).await;
        let now = changes.borrow().clone();
        Ok(now)
    }

    /// Hands `decision` to the update of `name` in progress, if it
    /// applies to its phase; the update as it was, and as it goes on.
    fn hand_over(
        &self,
        name: &str,
        decision: Decision,
    ) -> Result<(UpdateRecord, watch::Receiver<UpdateRecord>), UpdateError> {
        let running = self
            .rollouts
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let Some(r) = running.get(name) else {
            return Err(UpdateError::Conflict(format!(
                "no update of '{name}' is in progress"
            )));
        };
        let changes = r.record.subscribe();
        let record = changes.borrow().clone();
        match (&decision, record.phase) {
            (Decision::Approve(_), Phase::Held) => {}
            (Decision::Approve(_), phase) => {
                return Err(UpdateError::Conflict(format!(
                    "the update of '{name}' is not waiting for an approval (it is {})",
                    phase.as_str()
                )));
            }
            (Decision::Abort(_), Phase::Starting | Phase::Held | Phase::Baking) => {}
            (Decision::Abort(_), phase) => {
                return Err(UpdateError::Conflict(format!(
                    "the update of '{name}' has ended ({})",
                    phase.as_str()
                )));
            }
        }
        r.decisions
            .send(decision)
            .map_err(|_| UpdateError::Conflict(format!("the update of '{name}' has ended")))?;
        Ok((record, changes))
    }

    /// The update of `name` in progress, else its last one.
    pub async fn last_update(&self, name: &str) -> Result<Option<UpdateRecord>, UpdateError> {
        if self.front.backend(name).is_none() {
            return Err(UpdateError::NotFound(name.to_owned()));
        }
        if let Some(r) = self
            .rollouts
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
        {
            return Ok(Some(r.record.borrow().clone()));
        }
        let record = self
            .front
            .backend(name)
            .map_or_else(|| name.into(), |b| self.record_name(&b));
        match self.update_store() {
            Some(store) => store
                .updates(&record, 1)
                .await
                .map(|rows| rows.rows.into_iter().next())
                .map_err(|e| UpdateError::Store(e.to_string())),
            None => Ok(self
                .rollouts
                .last
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(name)
                .cloned()),
        }
    }

    /// The update of `name` in progress, briefly, for its report.
    pub(super) fn update_brief(&self, name: &str) -> Option<crate::api::UpdateBrief> {
        let running = self
            .rollouts
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let r = running.get(name)?.record.borrow();
        Some(crate::api::UpdateBrief {
            id: r.id.clone(),
            state: r.phase,
        })
    }

    /// Whether an update of `name` is in progress (a reload leaves such a
    /// backend alone).
    pub(super) fn updating(&self, name: &str) -> bool {
        self.rollouts
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(name)
    }

    /// Publishes the backend set with `b` in its name's place; under the
    /// reload lock, so a reload and a switch never publish over each other.
    async fn switch_to(&self, b: &Arc<Backend>) {
        let _one = self.reloading.lock().await;
        let set = self.front.backends().replacing(b.clone());
        self.front.generations().publish_backends(set);
    }
}

/// One update, run to its end.
struct Update {
    app: Arc<App>,
    old: Arc<Backend>,
    next: BackendConfig,
    policy: UpdatePolicy,
    record: watch::Sender<UpdateRecord>,
    decisions: mpsc::UnboundedReceiver<Decision>,
    /// What runs the new version, once made.
    candidate_runtime: Option<Arc<dyn Runtime>>,
}

impl Update {
    fn name(&self) -> &str {
        &self.old.name
    }

    fn label(&self) -> String {
        self.snapshot().to.label()
    }

    fn snapshot(&self) -> UpdateRecord {
        self.record.borrow().clone()
    }

    fn set(&self, f: impl FnOnce(&mut UpdateRecord)) {
        self.record.send_modify(f);
    }

    /// Records the update as it is now.
    async fn save(&self) {
        let record = self.snapshot();
        match self.app.update_store() {
            Some(store) => {
                if let Err(e) = store.save_update(&record).await {
                    tracing::error!(backend = %record.backend, update = %record.id, error = %e, "could not record the update");
                }
            }
            None => {
                self.app
                    .rollouts
                    .last
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(record.backend.clone(), record);
            }
        }
    }

    /// An entry of the action audit: how the update ended (`update_ended`,
    /// by the principal who started it), or that a config reload started
    /// it (an operator's start is audited by the API).
    async fn audit(&self, action: &str, outcome: String) {
        let Some(store) = &self.app.store else {
            return;
        };
        let record = self.snapshot();
        let entry = crate::store::AuditEntry {
            principal: record.principal.clone(),
            action: action.to_owned(),
            target: record.backend.clone(),
            outcome,
            at: SystemTime::now(),
        };
        if let Err(e) = store.actions.record(entry).await {
            tracing::warn!(backend = %record.backend, error = %e, "could not audit the update");
        }
    }

    /// A transition of the backend for its history and the notifiers: the
    /// update's own start and end (the new version's machine records the
    /// switch itself).
    fn announce(&self, from: HealthState, to: HealthState, reason: String) {
        let t = Transition {
            // Its record name (`UpdateRecord::backend`).
            backend: self.snapshot().backend,
            from,
            to,
            reason,
            at: SystemTime::now(),
        };
        let outlets = &self.app.spawner.outlets;
        if outlets
            .store
            .as_ref()
            .is_none_or(|s| s.transition(t.clone()))
        {
            outlets.feed.transition(t);
        }
    }

    async fn run(mut self) {
        let shutdown = self.app.spawner.shutdown().clone();
        let strategy = self.policy.strategy;
        let outcome = tokio::select! {
            o = async {
                match strategy {
                    Strategy::BlueGreen => self.blue_green().await,
                    Strategy::Recreate => self.recreate().await,
                }
            } => Some(o),
            () = shutdown.cancelled() => None,
        };
        let Some(outcome) = outcome else {
            return self.interrupted().await;
        };
        let (phase, reason) = match outcome {
            Ok(()) => (Phase::Succeeded, None),
            Err(r) => (Phase::RolledBack, Some(r.to_string())),
        };
        let label = self.label();
        match &reason {
            Some(why) => {
                tracing::warn!(backend = %self.name(), to = %label, reason = %why, "update rolled back");
                // Into the state of the version that serves again.
                let now = self
                    .app
                    .front
                    .backend(self.name())
                    .map_or(HealthState::Running, |b| b.state());
                self.announce(
                    HealthState::Updating,
                    now,
                    format!("update to {label} rolled back: {why}"),
                );
            }
            None => tracing::info!(backend = %self.name(), to = %label, "update succeeded"),
        }
        self.set(|r| {
            r.phase = phase;
            r.reason = reason;
            r.ended_at = Some(SystemTime::now());
        });
        if phase == Phase::Succeeded {
            self.keep_image();
        }
        self.save().await;
        self.audit("update_ended", self.outcome()).await;
        crate::metrics::get().update_pending(self.name(), false);
        crate::metrics::get().update_ended(self.name(), phase.as_str());
        self.app
            .rollouts
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(self.name());
    }

    /// Vigil is stopping: the update ends as a restart would resolve it
    /// ([`Rollouts::load`]): before the switch it is rolled back (the new
    /// version is stopped: a candidate container here, a process as its
    /// runtime drops), while baking it succeeded (the new version serves;
    /// both stop with the other supervisors).
    async fn interrupted(self) {
        let record = self.snapshot();
        let succeeded = record.phase == Phase::Baking;
        if !succeeded && let Some(rt) = &self.candidate_runtime {
            let _ = rt.stop().await;
        }
        self.set(|r| r.interrupted(SystemTime::now()));
        if succeeded {
            self.keep_image();
        }
        self.save().await;
        self.audit("update_ended", self.outcome()).await;
        tracing::warn!(backend = %self.name(), update = %record.id, "Vigil is stopping during an update: {}", self.snapshot().reason.unwrap_or_default());
    }

    /// How it ended, for the audit: "update ID from A to B: succeeded"
    /// (or "rolled_back: REASON"), with the diff when there was one.
    fn outcome(&self) -> String {
        let r = self.snapshot();
        let mut text = format!(
            "update {} from {} to {}: {}",
            r.id,
            r.from.label(),
            r.to.label(),
            r.phase.as_str()
        );
        if let Some(why) = &r.reason {
            text.push_str(&format!(": {why}"));
        }
        if let Some(diff) = r.diff.as_ref().filter(|d| !d.is_empty()) {
            text.push_str(&format!(" ({})", diff.summary()));
        }
        if let Some(by) = &r.approved_by {
            text.push_str(&format!(", approved by {by}"));
        }
        text
    }

    /// An image update that succeeded stands in for the configured image.
    fn keep_image(&self) {
        let record = self.snapshot();
        if let (Some(declared), Some(image)) = (&record.declared, &record.to.image) {
            self.app
                .rollouts
                .kept
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(self.name().to_owned(), (declared.clone(), image.clone()));
        }
    }

    /// The candidate supervisor of the new version, and its runtime.
    fn candidate(&mut self, beside: bool) -> Result<(Supervisor, Arc<dyn Runtime>), Rejected> {
        let app = &self.app;
        let b = app.front.new_backend(&self.next);
        let (runtime, stderr): (Arc<dyn Runtime>, _) =
            match (&self.next.runtime, &self.next.transport, beside) {
                (RuntimeKind::Container(spec), Transport::Http { url, headers, .. }, true) => {
                    let port = free_port().map_err(|e| {
                        Rejected::StartFailed(format!(
                            "no free host port for the new container: {e}"
                        ))
                    })?;
                    let url = with_port(url, port).ok_or_else(|| {
                        Rejected::StartFailed(format!("the backend's url `{url}` takes no port"))
                    })?;
                    let id = self.snapshot().id;
                    (
                        Arc::new(crate::runtime::container::ContainerRuntime::candidate(
                            &self.next.name,
                            spec.clone(),
                            url,
                            headers.clone(),
                            &id,
                            port,
                        )),
                        None,
                    )
                }
                _ => crate::runtime::for_backend(&self.next),
            };
        let reason = format!("update to {} starting", self.label());
        let outlets =
            super::supervisors::leased(app.spawner.outlets.clone(), runtime.replica_local());
        let supervisor = Supervisor::for_update(
            b,
            runtime.clone(),
            stderr,
            outlets,
            app.sanitizer(),
            reason,
            self.old.status().restart_count,
        );
        self.candidate_runtime = Some(runtime.clone());
        Ok((supervisor, runtime))
    }

    /// Starts and judges the new version; whether it may serve. An abort
    /// meanwhile stops it.
    async fn ready(
        &mut self,
        supervisor: Supervisor,
        runtime: Arc<dyn Runtime>,
    ) -> Result<Candidate, Rejected> {
        let deadline = Instant::now() + self.policy.ready_timeout;
        let started = tokio::select! {
            c = Candidate::start(supervisor, deadline) => c,
            by = aborted(&mut self.decisions) => {
                let _ = runtime.stop().await;
                return Err(Rejected::Aborted(by));
            }
        };
        let mut candidate = match started {
            Ok(c) => c,
            Err(Rejected::NotReady(_)) => {
                return Err(Rejected::NotReady(self.policy.ready_timeout));
            }
            Err(r) => return Err(r),
        };
        let judged = tokio::select! {
            r = candidate.judge(deadline) => r,
            by = aborted(&mut self.decisions) => Err(Rejected::Aborted(by)),
        };
        if let Err(r) = judged {
            candidate.discard().await;
            let r = match r {
                Rejected::NotReady(_) => Rejected::NotReady(self.policy.ready_timeout),
                r => r,
            };
            return Err(r);
        }
        Ok(candidate)
    }

    /// Compares the ready new version with the old one's listing, and
    /// waits for an operator when the verdict says so. `old`: the old
    /// version's listing, if known.
    async fn verdict(
        &mut self,
        candidate: &mut Candidate,
        old: Option<&BackendCatalog>,
    ) -> Result<(), Rejected> {
        let diff = old.map(|o| CatalogDiff::of(o, candidate.catalog()));
        self.set(|r| r.diff = diff.clone());
        self.save().await;
        match crate::rollout::verdict(&self.policy, candidate.catalog(), diff.as_ref()) {
            Verdict::Promote => Ok(()),
            Verdict::Reject(r) => Err(r),
            Verdict::Hold => {
                self.set(|r| r.phase = Phase::Held);
                self.save().await;
                // The notifiers hear of it with the diff, like the history.
                self.announce(
                    HealthState::Updating,
                    HealthState::Updating,
                    format!(
                        "update to {} held for an operator's approval: {}",
                        self.label(),
                        diff.as_ref()
                            .map_or_else(|| "nothing".into(), CatalogDiff::summary)
                    ),
                );
                crate::metrics::get().update_pending(self.name(), true);
                tracing::info!(backend = %self.name(), "update held: its catalog change waits for an operator's approval");
                let decided = loop {
                    tokio::select! {
                        why = candidate.ended() => break Err(Rejected::Crashed(why)),
                        d = self.decisions.recv() => match d {
                            Some(Decision::Approve(by)) => break Ok(by),
                            Some(Decision::Abort(by)) => break Err(Rejected::Aborted(by)),
                            None => {}
                        },
                    }
                };
                crate::metrics::get().update_pending(self.name(), false);
                let by = decided?;
                tracing::info!(backend = %self.name(), approved_by = %by, "update approved");
                self.set(|r| {
                    r.approved_by = Some(by);
                    r.phase = Phase::Starting;
                });
                self.save().await;
                Ok(())
            }
        }
    }

    /// Start the new version beside the old; switch; bake; stop the old.
    async fn blue_green(&mut self) -> Result<(), Rejected> {
        let old_listing = self.old_listing().await;
        let (supervisor, runtime) = self.candidate(true)?;
        let mut candidate = self.ready(supervisor, runtime).await?;
        if let Err(why) = self.verdict(&mut candidate, old_listing.as_ref()).await {
            candidate.discard().await;
            return Err(why);
        }
        let new = candidate.backend().clone();
        // From here the name is the new version's.
        self.old.retire(true);
        let supervisor = candidate.promote(format!("updated to {}", self.label()));
        self.app.switch_to(&new).await;
        self.app.spawner.spawn(&new, supervisor);
        self.app.refresh_secrets(std::slice::from_ref(&self.old));
        self.set(|r| r.phase = Phase::Baking);
        self.save().await;
        let switched = Instant::now();
        if let Err(why) = self.bake(&new).await {
            // Back to the old version, which served its calls throughout.
            new.retire(true);
            self.old.retire(false);
            self.app.switch_to(&self.old).await;
            if let Some(listing) = old_listing {
                let _ = self.app.spawner.outlets.feed.update(BackendUpdate {
                    backend: self.old.name.clone(),
                    uid: self.old.uid,
                    removed: false,
                    state: self.old.state(),
                    catalog: Some(listing),
                });
            }
            self.old.request_refresh();
            self.app.spawner.stop_and_wait(&new).await;
            return Err(why);
        }
        self.drain(switched).await;
        self.app.spawner.stop_and_wait(&self.old).await;
        self.app.refresh_secrets(&[]);
        Ok(())
    }

    /// Stop the old version; start the new one; roll back by starting the
    /// old one again.
    async fn recreate(&mut self) -> Result<(), Rejected> {
        let old_listing = self.old_listing().await;
        let (supervisor, runtime) = self.candidate(false)?;
        let new = supervisor.backend_arc();
        // Calls from now on get the unavailable error (the new backend is
        // `updating`), and sessions stop listing its tools.
        self.old.retire(true);
        self.app.switch_to(&new).await;
        let _ = self.app.spawner.outlets.feed.update(BackendUpdate {
            backend: new.name.clone(),
            uid: new.uid,
            removed: false,
            state: HealthState::Updating,
            catalog: None,
        });
        self.app.spawner.stop_and_wait(&self.old).await;
        let ready = self.ready(supervisor, runtime).await;
        let promoted = match ready {
            Ok(mut candidate) => match self.verdict(&mut candidate, old_listing.as_ref()).await {
                Ok(()) => {
                    let supervisor = candidate.promote(format!("updated to {}", self.label()));
                    self.app.spawner.spawn(&new, supervisor);
                    self.set(|r| r.phase = Phase::Baking);
                    self.save().await;
                    self.bake(&new).await
                }
                Err(why) => {
                    candidate.discard().await;
                    Err(why)
                }
            },
            Err(why) => Err(why),
        };
        let Err(why) = promoted else {
            self.app.refresh_secrets(&[]);
            return Ok(());
        };
        // The old version again, as it was configured.
        new.retire(true);
        self.app.spawner.stop_and_wait(&new).await;
        let again = self.app.front.new_backend(&self.old.config);
        let supervisor = self.app.supervisor_for(&again, &[]);
        self.app.switch_to(&again).await;
        self.app.spawner.spawn(&again, supervisor);
        self.app.refresh_secrets(&[]);
        Err(why)
    }

    /// What the old version lists now (for the diff), if it serves.
    async fn old_listing(&self) -> Option<BackendCatalog> {
        let conn = self.old.shared()?;
        match tokio::time::timeout(LIST_OLD, conn.list_catalog()).await {
            Ok(Ok(c)) => Some(c),
            Ok(Err(e)) => {
                tracing::warn!(backend = %self.name(), error = %e, "could not list the old version for the update's diff");
                None
            }
            Err(_) => None,
        }
    }

    /// Watches the new version for `bake`: a crash (it leaves running or
    /// degraded) or an abort rolls back. Its state is read every
    /// [`BAKE_LOOK`].
    async fn bake(&mut self, new: &Arc<Backend>) -> Result<(), Rejected> {
        let until = Instant::now() + self.policy.bake;
        let mut look = tokio::time::interval(BAKE_LOOK);
        loop {
            let state = new.state();
            if !matches!(state, HealthState::Running | HealthState::Degraded) {
                let why = new.status().reason.clone();
                return Err(Rejected::Crashed(format!(
                    "went {state} within the bake time: {why}"
                )));
            }
            tokio::select! {
                () = tokio::time::sleep_until(until) => return Ok(()),
                _ = look.tick() => {}
                by = aborted(&mut self.decisions) => return Err(Rejected::Aborted(by)),
            }
        }
    }

    /// Lets calls begun on the old version finish: until `drain` after
    /// the switch, or sooner once none is in flight on its shared
    /// connection.
    async fn drain(&self, switched: Instant) {
        let until = switched + self.policy.drain;
        while Instant::now() < until && !self.old.idle() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Resolves with the principal of an abort (approvals are not expected
/// here and are dropped).
async fn aborted(decisions: &mut mpsc::UnboundedReceiver<Decision>) -> String {
    loop {
        match decisions.recv().await {
            Some(Decision::Abort(by)) => return by,
            Some(Decision::Approve(_)) => {}
            None => std::future::pending::<()>().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_image_applies_while_the_config_names_the_one_it_replaced() {
        let text = "[[backends]]\nname = \"svc\"\ntransport = \"http\"\nruntime = \"container\"\nurl = \"http://127.0.0.1:9000/mcp\"\nimage = \"i:1\"\nport = 9000\n";
        let config = crate::config::Config::parse(text, std::path::Path::new("vigil.toml"))
            .unwrap_or_else(|e| panic!("{e}"));
        let image = |c: &BackendConfig| match &c.runtime {
            RuntimeKind::Container(s) => s.image.clone(),
            _ => unreachable!(),
        };
        let mut cfg = config.backends[0].clone();
        let kept = HashMap::from([("svc".to_owned(), ("i:1".to_owned(), "i:2".to_owned()))]);
        kept_image(&mut cfg, &kept);
        assert_eq!(image(&cfg), "i:2");
        // The file names another image now: it wins.
        let kept = HashMap::from([("svc".to_owned(), ("i:0".to_owned(), "i:2".to_owned()))]);
        let mut cfg = config.backends[0].clone();
        kept_image(&mut cfg, &kept);
        assert_eq!(image(&cfg), "i:1");
        assert_eq!(
            with_port("http://127.0.0.1:9000/mcp", 9123).as_deref(),
            Some("http://127.0.0.1:9123/mcp")
        );
    }
}
