//! A backend's probe plugins (`probes = [...]` in its config): each runs on
//! its own schedule, and what they last said is folded into every health
//! observation, so a passing built-in ping never hides a failing plugin
//! (and the other way round).
//!
//! A plugin call runs beside the supervisor's loop ([`Calls`]), never in
//! it: a probe may take its whole deadline (up to a minute), and meanwhile
//! the loop must still notice the backend's exit and carry out operator
//! commands. Its verdict is folded in when it arrives.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

use super::Supervisor;
use crate::backend::Connection;
use crate::config::PluginProbe;
use crate::health::machine::Input;
use crate::plugins::{ProbeResult, Target, Verdict};

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

    pub(super) fn len(&self) -> usize {
        self.specs.len()
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

/// The probe plugin calls in flight for one instance: at most one per
/// spec. Owned by that instance's `serve` loop and dropped with it (the
/// instance went down, or shutdown), which aborts every call still
/// running, so a verdict can only ever reach the instance it was asked
/// about.
pub(super) struct Calls {
    set: JoinSet<(usize, ProbeResult)>,
    /// The task running each spec's call, if any.
    running: Vec<Option<tokio::task::Id>>,
}

impl Calls {
    pub(super) fn new(specs: usize) -> Self {
        Self {
            set: JoinSet::new(),
            running: vec![None; specs],
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    fn busy(&self, i: usize) -> bool {
        self.running.get(i).is_some_and(Option::is_some)
    }

    fn spawn(&mut self, i: usize, call: impl Future<Output = ProbeResult> + Send + 'static) {
        let handle = self.set.spawn(async move { (i, call.await) });
        if let Some(slot) = self.running.get_mut(i) {
            *slot = Some(handle.id());
        }
    }

    /// The next call to finish: its spec's index and its result (a task
    /// that panicked is an `Unknown` verdict saying so). Pending while
    /// none runs.
    pub(super) async fn next(&mut self) -> Option<(usize, ProbeResult)> {
        let (id, done) = match self.set.join_next_with_id().await? {
            Ok((id, done)) => (id, Ok(done)),
            Err(e) => (e.id(), Err(e)),
        };
        let i = self.running.iter().position(|r| *r == Some(id))?;
        self.running[i] = None;
        Some(match done {
            Ok((_, result)) => (i, result),
            Err(e) => (
                i,
                ProbeResult {
                    verdict: Verdict::Unknown(format!("the probe task failed: {e}")),
                    latency: None,
                    detail: None,
                },
            ),
        })
    }
}

impl Supervisor {
    /// Starts the due probe plugin against the live instance, beside the
    /// loop (its verdict comes back through `calls`, see
    /// [`Supervisor::plugin_probe_done`]). A probe whose previous call still
    /// runs is skipped this round. `Some` only when there is nothing to
    /// call (plugins are not running): that observation at once.
    pub(super) fn start_plugin_probe(
        &mut self,
        calls: &mut Calls,
        conn: Option<&Arc<Connection>>,
    ) -> Option<Input> {
        let i = self.plugin_probes.take_due()?;
        let spec = self.plugin_probes.specs[i].clone();
        let Some(plugins) = self.outlets.plugins.clone() else {
            return Some(Input::InfraFailed(format!(
                "probe plugin '{}': plugins are not running",
                spec.plugin
            )));
        };
        if calls.busy(i) {
            tracing::debug!(backend = %self.backend.name, plugin = %spec.plugin, "probe plugin still running its last check; skipping this round");
            return None;
        }
        let target = Target {
            name: self.backend.name.clone(),
            conn: conn.cloned(),
        };
        calls.spawn(i, async move {
            plugins.probe(&spec.plugin, target, &spec.args).await
        });
        None
    }

    /// Folds a finished probe call of spec `i` in: the observation to feed
    /// the machine, the plugins' verdicts over the last built-in outcome. A
    /// plugin that failed or could not tell is `InfraFailed`: never a
    /// restart.
    pub(super) fn plugin_probe_done(&mut self, i: usize, result: ProbeResult) -> Option<Input> {
        let spec = self.plugin_probes.specs.get(i)?.clone();
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
                degraded: self.builtin_degraded.clone(),
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn healthy() -> ProbeResult {
        ProbeResult {
            verdict: Verdict::Healthy,
            latency: None,
            detail: None,
        }
    }

    #[tokio::test]
    async fn calls_come_back_by_spec_and_a_running_one_is_busy() {
        let mut calls = Calls::new(2);
        assert!(calls.is_empty() && !calls.busy(0));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        calls.spawn(0, async move {
            let _ = rx.await;
            healthy()
        });
        calls.spawn(1, async { healthy() });
        assert!(calls.busy(0) && calls.busy(1));
        assert_eq!(calls.next().await.map(|(i, _)| i), Some(1));
        assert!(
            calls.busy(0) && !calls.busy(1),
            "only the finished one is free"
        );
        let _ = tx.send(());
        let (i, r) = calls.next().await.unwrap();
        assert_eq!((i, r.verdict), (0, Verdict::Healthy));
        assert!(calls.is_empty() && !calls.busy(0));
    }

    #[tokio::test]
    async fn a_panicking_call_is_an_unknown_verdict() {
        let mut calls = Calls::new(1);
        calls.spawn(0, async { panic!("boom") });
        let (i, r) = calls.next().await.unwrap();
        assert_eq!(i, 0);
        assert!(
            matches!(&r.verdict, Verdict::Unknown(why) if why.contains("the probe task failed")),
            "{:?}",
            r.verdict
        );
        assert!(!calls.busy(0));
    }

    #[tokio::test]
    async fn dropping_the_calls_aborts_them() {
        let mut calls = Calls::new(1);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        calls.spawn(0, async move {
            // Holds `tx` until aborted: it never finishes on its own.
            let _held = tx;
            std::future::pending::<()>().await;
            healthy()
        });
        tokio::task::yield_now().await;
        drop(calls);
        // The task was aborted, so `tx` is dropped and `rx` sees it.
        tokio::time::timeout(Duration::from_secs(5), rx)
            .await
            .expect("the call outlived its Calls")
            .unwrap_err();
    }
}
