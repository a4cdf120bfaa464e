//! A backend's probe plugins (`probes = [...]` in its config): each runs on
//! its own schedule, and what they last said is folded into every health
//! observation, so a passing built-in ping never hides a failing plugin
//! (and the other way round).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Supervisor;
use crate::backend::Connection;
use crate::config::PluginProbe;
use crate::health::machine::Input;
use crate::plugins::{Target, Verdict};

pub(super) struct PluginProbes {
    specs: Vec<PluginProbe>,
    /// When each runs next.
    due: Vec<Instant>,
    /// What each said last (`None`: not run on this instance yet).
    last: Vec<Option<Verdict>>,
    default_every: Duration,
}

impl PluginProbes {
    pub(super) fn new(specs: Vec<PluginProbe>, default_every: Duration) -> Self {
        let n = specs.len();
        let mut p = Self {
            specs,
            due: vec![Instant::now(); n],
            last: vec![None; n],
            default_every,
        };
        p.restart();
        p
    }

    /// A new instance is up: forget old verdicts, first runs one interval on.
    pub(super) fn restart(&mut self) {
        let now = Instant::now();
        for (i, s) in self.specs.iter().enumerate() {
            self.due[i] = now + s.every.unwrap_or(self.default_every);
            self.last[i] = None;
        }
    }

    /// When the next probe is due (`None`: no probe plugins).
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.due.iter().min().copied()
    }

    /// The due probe, rescheduled.
    fn take_due(&mut self) -> Option<usize> {
        let (i, _) = self.due.iter().enumerate().min_by_key(|(_, d)| **d)?;
        self.due[i] = Instant::now() + self.specs[i].every.unwrap_or(self.default_every);
        Some(i)
    }

    /// `input`, the outcome of a probe round, made worse by what the
    /// plugins last said: an unhealthy verdict fails it, a degraded one
    /// degrades it. Unknown verdicts change nothing.
    pub(super) fn fold(&self, input: Input) -> Input {
        let Input::ProbeOk { degraded } = input else {
            return input;
        };
        let verdicts = self.specs.iter().zip(&self.last);
        for (s, v) in verdicts.clone() {
            if let Some(Verdict::Unhealthy(r)) = v {
                return Input::ProbeFailed(format!("probe plugin '{}': {r}", s.plugin));
            }
        }
        let degraded = degraded.or_else(|| {
            verdicts
                .filter_map(|(s, v)| match v {
                    Some(Verdict::Degraded(r)) => Some(format!("probe plugin '{}': {r}", s.plugin)),
                    _ => None,
                })
                .next()
        });
        Input::ProbeOk { degraded }
    }
}

impl Supervisor {
    /// Runs the due probe plugin against the live instance and returns the
    /// observation to feed the machine: the plugins' verdicts folded over
    /// the last built-in outcome (`builtin_degraded`). A plugin that failed
    /// or could not tell is `InfraFailed`: never a restart.
    pub(super) async fn run_plugin_probe(
        &mut self,
        conn: Option<&Arc<Connection>>,
        builtin_degraded: Option<String>,
    ) -> Option<Input> {
        let i = self.plugin_probes.take_due()?;
        let spec = self.plugin_probes.specs[i].clone();
        let Some(plugins) = self.outlets.plugins.clone() else {
            return Some(Input::InfraFailed(format!(
                "probe plugin '{}': plugins are not running",
                spec.plugin
            )));
        };
        let target = Target {
            name: self.backend.name.clone(),
            conn: conn.cloned(),
        };
        let result = plugins.probe(&spec.plugin, target, &spec.args).await;
        if let Some(latency) = result.latency {
            tracing::debug!(backend = %self.backend.name, plugin = %spec.plugin, ?latency, verdict = ?result.verdict, "probe plugin answered");
        }
        let unknown = match &result.verdict {
            Verdict::Unknown(r) => Some(r.clone()),
            Verdict::Silent(_) => {
                self.plugin_probes.last[i] = None;
                return None;
            }
            _ => None,
        };
        self.plugin_probes.last[i] = Some(result.verdict);
        Some(match unknown {
            Some(r) => Input::InfraFailed(format!("probe plugin '{}': {r}", spec.plugin)),
            None => self.plugin_probes.fold(Input::ProbeOk {
                degraded: builtin_degraded,
            }),
        })
    }
}
