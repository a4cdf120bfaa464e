//! What the control API may read and do, answered from each backend's
//! status and carried out by its supervisor.

use futures::future::BoxFuture;

use super::App;
use super::pins::Refused;
use super::rollouts::{Decision, Target, UpdateError};
use crate::api::{Control, ControlError, InstanceDetail, InstanceReport, PinsReport};
use crate::backend::{Backend, Command};
use crate::catalog::digest::Digest;
use crate::catalog::pin::Approved;
use crate::config::{FirstSeen, OnChange};
use crate::health::Status;

/// The MCP principal a search previews: `local`, `key:NAME`, or
/// `sub:SUBJECT` with its issuer and groups.
fn principal(
    text: &str,
    request: &crate::api::SearchRequest,
) -> Result<crate::auth::Principal, ControlError> {
    use crate::auth::Principal;
    if text == "local" {
        return Ok(Principal::local());
    }
    if let Some(name) = text.strip_prefix("key:").filter(|n| !n.is_empty()) {
        return Ok(Principal::key(name));
    }
    if let Some(subject) = text.strip_prefix("sub:").filter(|n| !n.is_empty()) {
        let issuer = request.issuer.as_deref().ok_or_else(|| {
            ControlError::Invalid(
                "a `sub:` principal needs `issuer` (the [auth.oauth] issuer that vouches for it)"
                    .into(),
            )
        })?;
        let groups = request.groups.as_deref().unwrap_or_default();
        return Ok(Principal::subject(
            issuer,
            subject,
            groups.split(',').map(str::trim).filter(|g| !g.is_empty()),
            [],
        ));
    }
    Err(ControlError::Invalid(format!(
        "`{text}` is not a principal: use local, key:NAME or sub:SUBJECT (with issuer)"
    )))
}

/// Transitions shown in an instance's detail.
const HISTORY: usize = 100;

/// The status another replica recorded for its instance; `reason`: that
/// of its newest transition, when read.
fn recorded_status(record: &crate::store::InstanceRecord, reason: String) -> Status {
    Status {
        state: record.state,
        since: record.updated_at,
        reason,
        restart_count: record.restart_count,
        consecutive_failures: record.consecutive_failures,
        quarantine_reason: record.quarantine_reason.clone(),
        next_retry_at: None,
        latency: None,
        last_exit: None,
    }
}

impl App {
    fn report_of(&self, b: &Backend, s: &Status) -> InstanceReport {
        let window = b.stats.summary();
        InstanceReport {
            name: b.name.to_string(),
            instance: b.instance_id(),
            state: s.state,
            runtime: match b.config.runtime {
                crate::config::RuntimeKind::Process => "process",
                crate::config::RuntimeKind::Container(_) => "container",
                crate::config::RuntimeKind::Remote => "remote",
            },
            since: s.since,
            latency_ms: s.latency.map(|l| l.as_secs_f64() * 1000.0),
            error_rate: window.error_rate(),
            calls_in_window: window.calls,
            restart_count: s.restart_count,
            consecutive_failures: s.consecutive_failures,
            next_retry_at: s.next_retry_at,
            quarantine_reason: s.quarantine_reason.clone(),
            reason: s.reason.clone(),
            withheld: self.pins.held(&b.name).len(),
            update: self.update_brief(&b.name),
        }
    }

    /// What an API path's `{id}` names: a configured backend's name (the
    /// instance serving it in the generation in force), an instance run
    /// for one client (`NAME.s7`), or one instance by its own id
    /// (`NAME.iN`, [`Backend::instance_id`]).
    fn find(&self, id: &str) -> Result<std::sync::Arc<Backend>, ControlError> {
        let by_name = |name: &str| {
            self.front
                .backend(name)
                .or_else(|| self.front.instances().find(name))
        };
        by_name(id)
            .or_else(|| {
                let (name, _) = id.rsplit_once(".i")?;
                by_name(name).filter(|b| b.instance_id() == id)
            })
            .ok_or_else(|| ControlError::NotFound(id.to_owned()))
    }

    /// The name `b`'s records have in the store (`NAME.REPLICA` for a
    /// replica-local backend among several replicas).
    pub(super) fn record_name(&self, b: &Backend) -> std::sync::Arc<str> {
        crate::supervisor::record_name(
            &b.name,
            matches!(b.config.runtime, crate::config::RuntimeKind::Process),
            self.spawner.outlets.cluster.as_ref(),
        )
    }

    /// The newest transitions recorded under `record`, oldest first.
    async fn history(&self, record: &str) -> Result<Vec<crate::health::Transition>, ControlError> {
        Ok(match &self.store {
            Some(store) => store
                .health
                .transitions(record, HISTORY)
                .await
                .map_err(|e| ControlError::Internal(e.to_string()))?
                .logged("transition history"),
            None => Vec::new(),
        })
    }

    /// Another replica's instance of a replica-local backend, as that
    /// replica recorded it in the shared store.
    async fn instance_elsewhere(&self, id: &str) -> Result<InstanceDetail, ControlError> {
        let (Some((name, _)), Some(store)) = (self.elsewhere(id), &self.store) else {
            return Err(ControlError::NotFound(id.to_owned()));
        };
        let record = store
            .health
            .instance(id)
            .await
            .map_err(|e| ControlError::Internal(e.to_string()))?
            .ok_or_else(|| ControlError::NotFound(id.to_owned()))?;
        let transitions = self.history(id).await?;
        let reason = transitions.last().map(|t| t.reason.clone());
        let status = recorded_status(&record, reason.unwrap_or_default());
        Ok(InstanceDetail {
            report: self.report_elsewhere(id, name, &status)?,
            transitions,
            last_exit: None,
        })
    }

    /// The replica-local backend of another replica that `id` names
    /// (`NAME.REPLICA`, the name its records have in the shared store):
    /// its name here and that replica's, when `id` is one.
    fn elsewhere<'a>(&self, id: &'a str) -> Option<(&'a str, &'a str)> {
        let replicas = self.replicas.as_ref()?;
        let (name, replica) = id.rsplit_once('.')?;
        let local = self
            .front
            .backend(name)
            .is_some_and(|b| matches!(b.config.runtime, crate::config::RuntimeKind::Process));
        let known = replicas.live().iter().any(|r| r.replica == replica);
        (local && known && replica != self.config().cluster.replica.as_str())
            .then_some((name, replica))
    }

    /// An operator command for another replica's instance of a
    /// replica-local backend (`NAME.REPLICA`): carried out there.
    async fn act_elsewhere(&self, id: &str, cmd: Command) -> Result<InstanceReport, ControlError> {
        let (Some((name, _)), Some(commands)) = (self.elsewhere(id), &self.commands) else {
            return Err(ControlError::NotFound(id.to_owned()));
        };
        let status = commands.forward(id, &cmd).await.map_err(|e| match e {
            crate::backend::CommandError::Refused(why) => ControlError::Conflict(why),
            crate::backend::CommandError::NoSupervisor(why) => ControlError::Internal(why),
        })?;
        self.report_elsewhere(id, name, &status)
    }

    /// The report of another replica's instance `id` of backend `name`
    /// with `status`; its figures (latency, errors, calls) are that
    /// replica's, not read here.
    fn report_elsewhere(
        &self,
        id: &str,
        name: &str,
        status: &Status,
    ) -> Result<InstanceReport, ControlError> {
        let b = self.find(name)?;
        Ok(InstanceReport {
            name: id.to_owned(),
            instance: id.to_owned(),
            latency_ms: None,
            error_rate: None,
            calls_in_window: 0,
            ..self.report_of(&b, status)
        })
    }

    async fn act(&self, name: &str, cmd: Command) -> Result<InstanceReport, ControlError> {
        let b = match self.find(name) {
            Ok(b) => b,
            Err(ControlError::NotFound(_)) if self.elsewhere(name).is_some() => {
                return self.act_elsewhere(name, cmd).await;
            }
            Err(e) => return Err(e),
        };
        let status = b.command(cmd).await.map_err(|e| match e {
            crate::backend::CommandError::Refused(why) => ControlError::Conflict(why),
            crate::backend::CommandError::NoSupervisor(why) => ControlError::Internal(why),
        })?;
        Ok(self.report_of(&b, &status))
    }
}

impl Control for App {
    fn plugins(&self) -> (Option<String>, Vec<crate::plugins::PluginInfo>) {
        match App::plugins(self) {
            Some(p) => (Some(p.dir().display().to_string()), p.list()),
            None => (None, Vec::new()),
        }
    }

    fn report(&self, name: &str) -> Option<InstanceReport> {
        self.find(name)
            .ok()
            .map(|b| self.report_of(&b, &b.status()))
    }

    fn subscribe(&self) -> Option<tokio::sync::broadcast::Receiver<crate::health::Transition>> {
        Some(self.feed.transitions())
    }

    fn sessions(&self) -> Option<usize> {
        Some(self.front.session_count())
    }

    fn instances(&self) -> Vec<InstanceReport> {
        let own = self.front.instances().all();
        let mut reports: Vec<InstanceReport> = self
            .front
            .backends()
            .iter()
            .chain(own.iter())
            .map(|b| self.report_of(b, &b.status()))
            .collect();
        // The other replicas' instances of replica-local backends, as
        // they recorded them (read at each heartbeat).
        if let Some(replicas) = &self.replicas {
            reports.extend(replicas.instances_elsewhere().iter().filter_map(|r| {
                let (name, _) = self.elsewhere(&r.backend)?;
                let status = recorded_status(r, String::new());
                self.report_elsewhere(&r.backend, name, &status).ok()
            }));
        }
        reports
    }

    fn warnings(&self) -> Vec<String> {
        let mut warnings = self.front.isolation_warnings();
        if let Some(r) = &self.replicas {
            warnings.extend(r.warnings());
        }
        warnings
    }

    fn instance(&self, name: &str) -> BoxFuture<'_, Result<InstanceDetail, ControlError>> {
        let name = name.to_owned();
        Box::pin(async move {
            let b = match self.find(&name) {
                Ok(b) => b,
                Err(ControlError::NotFound(_)) if self.elsewhere(&name).is_some() => {
                    return self.instance_elsewhere(&name).await;
                }
                Err(e) => return Err(e),
            };
            let status = b.status();
            let transitions = self.history(&self.record_name(&b)).await?;
            Ok(InstanceDetail {
                report: self.report_of(&b, &status),
                transitions,
                last_exit: status.last_exit.clone(),
            })
        })
    }

    fn restart(
        &self,
        name: &str,
        principal: &str,
    ) -> BoxFuture<'_, Result<InstanceReport, ControlError>> {
        let (name, principal) = (name.to_owned(), principal.to_owned());
        Box::pin(async move { self.act(&name, Command::Restart { principal }).await })
    }

    fn quarantine(
        &self,
        name: &str,
        principal: &str,
        reason: Option<String>,
    ) -> BoxFuture<'_, Result<InstanceReport, ControlError>> {
        let (name, principal) = (name.to_owned(), principal.to_owned());
        Box::pin(async move {
            self.act(&name, Command::Quarantine { principal, reason })
                .await
        })
    }

    fn release(
        &self,
        name: &str,
        principal: &str,
    ) -> BoxFuture<'_, Result<InstanceReport, ControlError>> {
        let (name, principal) = (name.to_owned(), principal.to_owned());
        Box::pin(async move { self.act(&name, Command::Release { principal }).await })
    }

    fn update(
        &self,
        name: &str,
        principal: &str,
        image: String,
    ) -> BoxFuture<'_, Result<crate::rollout::UpdateRecord, ControlError>> {
        let (name, principal) = (name.to_owned(), principal.to_owned());
        Box::pin(async move {
            let me = self
                .me
                .upgrade()
                .ok_or_else(|| ControlError::Internal("the gateway is shutting down".into()))?;
            me.start_update(&name, Target::Image(image), &principal)
                .await
                .map_err(control_error)
        })
    }

    fn decide_update(
        &self,
        name: &str,
        principal: &str,
        approve: bool,
    ) -> BoxFuture<'_, Result<crate::rollout::UpdateRecord, ControlError>> {
        let (name, principal) = (name.to_owned(), principal.to_owned());
        let decision = if approve {
            Decision::Approve(principal)
        } else {
            Decision::Abort(principal)
        };
        Box::pin(async move {
            self.decide_update(&name, decision)
                .await
                .map_err(control_error)
        })
    }

    fn search(
        &self,
        request: crate::api::SearchRequest,
    ) -> BoxFuture<'_, Result<crate::api::SearchReport, ControlError>> {
        Box::pin(async move {
            let who = match request.principal.as_deref() {
                None => None,
                Some(p) => Some(principal(p, &request)?),
            };
            let front = &self.front;
            let generation = front.generation();
            let base = front
                .capset_view(generation.catalog.clone(), &Default::default())
                .await;
            let (view, access) = match &who {
                Some(p) => (
                    generation.policies.view(p, base),
                    generation.policies.access(p),
                ),
                None => (base, crate::policy::Access::Everything),
            };
            let search = front.tool_search();
            let settings = search.settings();
            let mut args = serde_json::Map::new();
            args.insert("query".into(), request.query.clone().into());
            if let Some(l) = request.limit {
                args.insert("limit".into(), l.into());
            }
            if let Some(s) = &request.server {
                args.insert("server".into(), s.clone().into());
            }
            let args = crate::search::meta::FindArgs::parse(
                Some(&args),
                settings.limit,
                settings.max_query_bytes,
            )
            .map_err(|e| ControlError::Invalid(e.to_string()))?;
            // The operator's preview has no listing of its own: a
            // `forward_auth` backend is named as its shared listing has it.
            let servers = search.servers(
                &access,
                generation.backends.iter().map(|b| &b.name),
                &Default::default(),
            );
            let answer = search.find(&view, &args, &servers, generation.number);
            Ok(crate::api::SearchReport {
                principal: who.map(|p| p.id().to_owned()),
                mode: search.mode(&access).as_str(),
                generation: generation.number,
                indexed: search.snapshot().len(),
                results: answer
                    .found
                    .iter()
                    .map(|f| crate::api::SearchResult {
                        name: f.tool.key().to_owned(),
                        server: f.server.to_string(),
                        score: f.score,
                        description: f.tool.str("description").map(str::to_owned),
                    })
                    .collect(),
                hint: answer.hint,
            })
        })
    }

    fn last_update(
        &self,
        name: &str,
    ) -> BoxFuture<'_, Result<Option<crate::rollout::UpdateRecord>, ControlError>> {
        let name = name.to_owned();
        Box::pin(async move { App::last_update(self, &name).await.map_err(control_error) })
    }

    fn pins(&self, name: &str) -> Result<PinsReport, ControlError> {
        let b = self
            .front
            .backend(name)
            .ok_or_else(|| ControlError::NotFound(name.to_owned()))?;
        Ok(self.pins_report(&b, Vec::new()))
    }

    fn approve(
        &self,
        name: &str,
        principal: &str,
        digests: Vec<Digest>,
    ) -> BoxFuture<'_, Result<PinsReport, ControlError>> {
        let (name, principal) = (name.to_owned(), principal.to_owned());
        Box::pin(async move {
            let b = self
                .front
                .backend(&name)
                .ok_or_else(|| ControlError::NotFound(name.clone()))?;
            if !b.config.pin.holds() {
                return Err(ControlError::Conflict(format!(
                    "`{name}` serves every listing as it comes: nothing is held to approve (set [backends.pin] on_change = \"hold\" to guard it)"
                )));
            }
            let approved = self
                .pins
                .approve(&b.name, &digests, &principal)
                .await
                .map_err(|e| match e {
                    Refused::Nothing | Refused::NotHeld(_) => ControlError::Conflict(e.to_string()),
                    Refused::Store(_) | Refused::NotApplied => {
                        ControlError::Internal(e.to_string())
                    }
                })?;
            Ok(self.pins_report(&b, approved))
        })
    }
}

impl App {
    /// The pin guard of `b`, with `approved` (just now).
    fn pins_report(&self, b: &Backend, approved: Vec<Approved>) -> PinsReport {
        let pin = b.config.pin;
        PinsReport {
            backend: b.name.to_string(),
            on_change: match pin.on_change {
                OnChange::Allow => "allow",
                OnChange::Hold => "hold",
            },
            first_seen: match pin.first_seen {
                FirstSeen::Trust => "trust",
                FirstSeen::Hold => "hold",
            },
            held: self.pins.held(&b.name),
            approved,
        }
    }
}

/// An update refused, as the control API says it.
fn control_error(e: UpdateError) -> ControlError {
    match e {
        UpdateError::NotFound(name) => ControlError::NotFound(name),
        UpdateError::Invalid(why) => ControlError::Invalid(why),
        UpdateError::Conflict(why) => ControlError::Conflict(why),
        UpdateError::Store(why) => ControlError::Internal(why),
    }
}
