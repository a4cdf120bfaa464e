//! What the control API may read and do, answered from each backend's
//! status and carried out by its supervisor.

use futures::future::BoxFuture;

use super::App;
use crate::api::{Control, ControlError, InstanceDetail, InstanceReport};
use crate::backend::{Backend, Command};
use crate::health::Status;

/// Transitions shown in an instance's detail.
const HISTORY: usize = 100;

impl App {
    fn report(b: &Backend, s: &Status) -> InstanceReport {
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

    async fn act(&self, name: &str, cmd: Command) -> Result<InstanceReport, ControlError> {
        let b = self.find(name)?;
        let status = b.command(cmd).await.map_err(|e| match e {
            crate::backend::CommandError::Refused(why) => ControlError::Conflict(why),
            crate::backend::CommandError::NoSupervisor(why) => ControlError::Internal(why),
        })?;
        Ok(Self::report(&b, &status))
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
        self.find(name).ok().map(|b| Self::report(&b, &b.status()))
    }

    fn subscribe(&self) -> Option<tokio::sync::broadcast::Receiver<crate::health::Transition>> {
        Some(self.feed.transitions())
    }

    fn sessions(&self) -> Option<usize> {
        Some(self.front.session_count())
    }

    fn instances(&self) -> Vec<InstanceReport> {
        let own = self.front.instances().all();
        self.front
            .backends()
            .iter()
            .chain(own.iter())
            .map(|b| Self::report(b, &b.status()))
            .collect()
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
            let b = self.find(&name)?;
            let status = b.status();
            let transitions = match &self.store {
                Some(store) => store
                    .health
                    .transitions(&b.name, HISTORY)
                    .await
                    .map_err(|e| ControlError::Internal(e.to_string()))?
                    .logged("transition history"),
                None => Vec::new(),
            };
            Ok(InstanceDetail {
                report: Self::report(&b, &status),
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
}
