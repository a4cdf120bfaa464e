//! A new version of a backend, started beside the one serving (or after
//! it stopped, for `strategy = "recreate"`), for `app::rollouts`.
//!
//! The candidate is a supervisor of the new [`Backend`] whose machine is
//! `updating` ([`Machine::begin_update`]): never advertised, never
//! restarted. [`Candidate::start`] starts, connects and lists it;
//! [`Candidate::judge`] runs the backend's probes against it (the
//! built-in round and every probe plugin) until one round passes;
//! [`Candidate::promote`] hands the running instance to the supervisor,
//! which serves it from then on like any it started (its machine goes
//! `updating → running`); [`Candidate::discard`] stops it. The rollout
//! decides which; nothing here chooses.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::start::{self, StartFailure};
use super::{Outlets, Supervisor};
use crate::backend::{Backend, Connection};
use crate::catalog::BackendCatalog;
use crate::health::machine::Input;
use crate::health::sanitize::Sanitizer;
use crate::plugins::{Target, Verdict};
use crate::rollout::Rejected;
use crate::runtime::Runtime;
use crate::runtime::process::StderrTail;

/// How long between two readiness rounds of a candidate that failed one.
const JUDGE_PAUSE: Duration = Duration::from_millis(250);

/// A started new version, not serving yet.
pub struct Candidate {
    supervisor: Supervisor,
    conn: Option<Arc<Connection>>,
    instance: start::Instance,
    catalog: BackendCatalog,
    /// How it ended, once it did (read once from `instance.exited`).
    ended: Option<String>,
}

impl Supervisor {
    /// A supervisor for a new version of a backend (see the module docs):
    /// `backend` is the new one (not in the backend set until promoted),
    /// `runtime` runs it; `restart_count` carries on the old one's count.
    pub fn for_update(
        backend: Arc<Backend>,
        runtime: Arc<dyn Runtime>,
        stderr: Option<StderrTail>,
        outlets: Outlets,
        sanitizer: Sanitizer,
        reason: String,
        restart_count: u64,
    ) -> Supervisor {
        let mut s = Supervisor::new(backend, runtime, stderr, None, outlets, sanitizer);
        s.machine.begin_update(reason, restart_count);
        s.publish_status();
        s
    }
}

impl Candidate {
    /// Starts the new version, connects and lists it, by `deadline`.
    pub async fn start(supervisor: Supervisor, deadline: Instant) -> Result<Candidate, Rejected> {
        let start = start::Start {
            backend: supervisor.backend.clone(),
            runtime: supervisor.runtime.clone(),
            stderr: supervisor.stderr.clone(),
            owner: true,
        };
        let within = deadline.saturating_duration_since(Instant::now());
        let up = match tokio::time::timeout_at(deadline, start.run()).await {
            Ok(Ok(up)) => up,
            Ok(Err(
                StartFailure::Infrastructure(reason) | StartFailure::Backend { reason, .. },
            )) => {
                let _ = supervisor.runtime.stop().await;
                return Err(Rejected::StartFailed(supervisor.sanitizer.clean(&reason)));
            }
            Err(_) => {
                let _ = supervisor.runtime.stop().await;
                return Err(Rejected::NotReady(round_up(within)));
            }
        };
        let (conn, instance, catalog) = up;
        let conn = conn.map(Arc::new);
        supervisor.backend.instance_up(
            Some(instance.id.clone()),
            conn.clone(),
            instance.url.clone(),
        );
        Ok(Candidate {
            supervisor,
            conn,
            instance,
            catalog,
            ended: None,
        })
    }

    /// What the new version listed when it came up.
    pub fn catalog(&self) -> &BackendCatalog {
        &self.catalog
    }

    /// The new backend.
    pub fn backend(&self) -> &Arc<Backend> {
        &self.supervisor.backend
    }

    /// Runs the backend's probes against the new version until a round
    /// passes (a degraded answer passes: it serves), it ends, or
    /// `deadline`. A probe plugin that cannot tell fails the round: an
    /// update is promoted on evidence only.
    pub async fn judge(&mut self, deadline: Instant) -> Result<(), Rejected> {
        let mut last = None;
        loop {
            // A round sees an end itself (the container is not running,
            // the connection is lost).
            let round = tokio::time::timeout_at(deadline, self.round()).await;
            match round {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(Failure::Ended(why))) => {
                    self.ended = Some(why.clone());
                    return Err(Rejected::Crashed(why));
                }
                Ok(Err(Failure::Probe(why))) => last = Some(why),
                Err(_) => {}
            }
            if Instant::now() + JUDGE_PAUSE >= deadline {
                return Err(match last {
                    Some(why) => Rejected::ProbeFailed(why),
                    None => Rejected::NotReady(self.supervisor.backend.connect_timeout()),
                });
            }
            tokio::select! {
                biased;
                why = self.ended() => return Err(Rejected::Crashed(why)),
                () = tokio::time::sleep(JUDGE_PAUSE) => {}
            }
        }
    }

    /// One readiness round: the built-in probe, then each probe plugin.
    async fn round(&mut self) -> Result<(), Failure> {
        let conn = self.conn.clone();
        match self.supervisor.probe(conn.as_deref()).await {
            Input::ProbeOk { .. } => {}
            Input::Exited(why) => return Err(Failure::Ended(why)),
            Input::ProbeFailed(why) | Input::InfraFailed(why) => {
                return Err(Failure::Probe(self.supervisor.sanitizer.clean(&why)));
            }
            _ => {}
        }
        let specs = self.supervisor.backend.config.probes.clone();
        if specs.is_empty() {
            return Ok(());
        }
        let Some(plugins) = self.supervisor.outlets.plugins.clone() else {
            return Err(Failure::Probe(
                "the backend has probe plugins, but plugins are not running".into(),
            ));
        };
        for spec in specs {
            let target = Target {
                name: self.supervisor.backend.name.clone(),
                conn: conn.clone(),
            };
            let result = plugins.probe(&spec.plugin, target, &spec.args).await;
            match result.verdict {
                Verdict::Healthy | Verdict::Degraded(_) | Verdict::Silent(_) => {}
                Verdict::Unhealthy(why) | Verdict::Unknown(why) => {
                    return Err(Failure::Probe(format!(
                        "probe plugin '{}': {}",
                        spec.plugin,
                        self.supervisor.sanitizer.clean(&why)
                    )));
                }
            }
        }
        Ok(())
    }

    /// Resolves when the new version's instance ends, with how (at once
    /// if it already did). Cancel safe.
    pub async fn ended(&mut self) -> String {
        if let Some(why) = &self.ended {
            return why.clone();
        }
        let why = match (&mut self.instance.exited).await {
            Ok(exit) => exit.summary,
            Err(_) => match &self.conn {
                // A runtime that never reports an exit: the connection
                // closing is the end.
                Some(conn) if !self.supervisor.runtime.owns_lifecycle() => {
                    conn.closed().await;
                    "closed its MCP connection".to_owned()
                }
                _ => std::future::pending().await,
            },
        };
        let why = super::start::with_stderr(self.supervisor.stderr.as_ref(), why, false);
        let why = self.supervisor.sanitizer.clean(&why);
        self.ended = Some(why.clone());
        why
    }

    /// The new version serves: its machine goes `updating → running`
    /// with `reason` (recorded and announced like any transition), and
    /// the supervisor returned serves the running instance when run.
    pub fn promote(self, reason: String) -> Supervisor {
        let Candidate {
            mut supervisor,
            conn,
            instance,
            catalog,
            ..
        } = self;
        supervisor.apply(Input::Promoted(reason));
        supervisor.handed = Some((conn, instance, catalog));
        supervisor
    }

    /// Stops the new version.
    pub async fn discard(self) {
        let Candidate {
            supervisor, conn, ..
        } = self;
        supervisor.backend.instance_ended();
        if let Some(Ok(conn)) = conn.map(Arc::try_unwrap) {
            conn.close().await;
        }
        if let Err(e) = supervisor.runtime.stop().await {
            tracing::warn!(backend = %supervisor.backend.name, error = %e, "could not stop the new version of the backend");
        }
    }
}

/// Why a readiness round failed.
enum Failure {
    /// The instance ended.
    Ended(String),
    /// A probe failed; another round may pass.
    Probe(String),
}

/// `d` rounded to whole seconds at least 1 s, for a sentence.
fn round_up(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs_f64().round().max(1.0) as u64)
}
