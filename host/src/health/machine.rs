//! The per-backend state machine: observations in, transitions and actions
//! out. Pure (no I/O, no clock, no randomness of its own), so every rule of
//! the health model is tested here; the supervisor feeds it and carries out
//! its actions.
//!
//! ```text
//!            start ok                 probe ok / slow
//! starting ─────────► running ◄──────────────────────► degraded
//!    │  ▲               │  exit, threshold of failed probes │
//!    │  │               ▼                                   ▼
//!    │  │            offline ──► restarting ──(backoff)──► starting
//!    │  └──────────────────────────┘
//!    └─ start failed ─► restarting, or quarantined after max_restarts
//! ```
//! Probe-infrastructure failures move a serving backend to `unknown` (never
//! a restart). Remote backends are never restarted: they go `offline` and
//! are retried with backoff, never quarantined.

use std::time::{Duration, SystemTime};

use super::policy::backoff;
use super::state::{HealthState, Transition};
use crate::config::RestartPolicy;

/// Whether an instance is up, so that probes judge it and its failure
/// takes it offline. Not [`super::advertisable`], though today the same
/// states: that rule decides what clients see, this one how the machine
/// moves. `unknown` must stay live whatever clients are shown, or a
/// backend whose probe machinery failed could never be probed back to
/// `running`.
fn live(state: HealthState) -> bool {
    matches!(
        state,
        HealthState::Running | HealthState::Degraded | HealthState::Unknown
    )
}

/// Something the supervisor observed or was told.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// A start attempt begins.
    Starting,
    /// Started, connected and listed: ready.
    Up,
    /// Starting, the handshake or the first listing failed.
    StartFailed(String),
    /// The running instance ended (exit, kill, lost connection).
    Exited(String),
    /// A readiness probe answered; `Some(reason)` when it or the recent
    /// traffic says the backend is degraded.
    ProbeOk {
        degraded: Option<String>,
    },
    /// A readiness probe failed (error or timeout).
    ProbeFailed(String),
    /// The probe's own machinery failed (engine unreachable, ...).
    InfraFailed(String),
    /// The instance has been up this long.
    Uptime(Duration),
    OperatorRestart {
        principal: String,
    },
    OperatorQuarantine {
        principal: String,
        reason: Option<String>,
    },
    OperatorRelease {
        principal: String,
    },
    /// A new version, started and judged ready while another served, is
    /// promoted to serve (`updating → running`, leaving any quarantine).
    Promoted(String),
}

/// What the supervisor must do next.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Nothing beyond what it is doing.
    Continue,
    /// Stop the instance (if any) and start again after the delay.
    RestartAfter(Duration),
    /// Stop the instance and stay down (quarantined or updating).
    Stop,
    /// Stop, then try one start after the delay (quarantine re-probe, or a
    /// remote backend's reconnect).
    RetryAfter(Duration),
}

/// Why an operator request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

/// One backend's health record and rules.
#[derive(Debug, Clone)]
pub struct Machine {
    pub backend: String,
    pub state: HealthState,
    pub since: SystemTime,
    pub reason: String,
    pub restart_count: u64,
    pub consecutive_failures: u32,
    pub probe_failures: u32,
    pub quarantine_reason: Option<String>,
    pub next_retry_at: Option<SystemTime>,
    policy: RestartPolicy,
    threshold: u32,
    owns_lifecycle: bool,
}

/// The result of one step.
#[derive(Debug, Default, PartialEq)]
pub struct Step {
    pub transitions: Vec<Transition>,
    pub action: Option<Action>,
}

impl Machine {
    pub fn new(
        backend: &str,
        policy: RestartPolicy,
        threshold: u32,
        owns_lifecycle: bool,
        now: SystemTime,
    ) -> Self {
        Self {
            backend: backend.to_owned(),
            state: HealthState::Starting,
            since: now,
            reason: "gateway started".into(),
            restart_count: 0,
            consecutive_failures: 0,
            probe_failures: 0,
            quarantine_reason: None,
            next_retry_at: None,
            policy,
            threshold: threshold.max(1),
            owns_lifecycle,
        }
    }

    /// Feeds one input; `now` is the wall clock, `unit` a uniform random
    /// number in `[0, 1)` for jitter.
    pub fn step(&mut self, input: Input, now: SystemTime, unit: f64) -> Result<Step, Refused> {
        let mut out = Step::default();
        match input {
            Input::Starting => {
                self.next_retry_at = None;
                if self.state != HealthState::Quarantined {
                    self.go(&mut out, HealthState::Starting, "starting".into(), now);
                }
            }
            Input::Up => {
                self.probe_failures = 0;
                self.next_retry_at = None;
                if self.state == HealthState::Quarantined {
                    self.quarantine_reason = None;
                    self.consecutive_failures = 0;
                    self.go(
                        &mut out,
                        HealthState::Running,
                        "re-probe succeeded: leaving quarantine".into(),
                        now,
                    );
                } else {
                    self.go(&mut out, HealthState::Running, "ready".into(), now);
                }
            }
            Input::StartFailed(reason) => {
                self.failure(&mut out, format!("start failed: {reason}"), now, unit)
            }
            Input::Exited(reason) => self.failure(&mut out, reason, now, unit),
            Input::ProbeOk { degraded } => {
                self.probe_failures = 0;
                if live(self.state) {
                    match degraded {
                        Some(why) => self.go(&mut out, HealthState::Degraded, why, now),
                        None => self.go(&mut out, HealthState::Running, "healthy".into(), now),
                    }
                }
            }
            Input::ProbeFailed(reason) => {
                if !live(self.state) {
                    return Ok(out);
                }
                self.probe_failures += 1;
                let n = self.probe_failures;
                if n >= self.threshold {
                    self.probe_failures = 0;
                    self.failure(
                        &mut out,
                        format!("{n} consecutive probes failed, last: {reason}"),
                        now,
                        unit,
                    );
                } else {
                    self.go(
                        &mut out,
                        HealthState::Degraded,
                        format!("probe failed ({n}/{}): {reason}", self.threshold),
                        now,
                    );
                }
            }
            Input::InfraFailed(reason) => {
                if matches!(
                    self.state,
                    HealthState::Running | HealthState::Degraded | HealthState::Starting
                ) {
                    self.go(
                        &mut out,
                        HealthState::Unknown,
                        format!("cannot tell: {reason}"),
                        now,
                    );
                }
            }
            Input::Uptime(up) => {
                if up >= self.policy.healthy_reset && self.consecutive_failures > 0 {
                    self.consecutive_failures = 0;
                }
            }
            Input::OperatorRestart { principal } => {
                if !self.owns_lifecycle {
                    return Err(Refused(format!(
                        "backend '{}' is not run by Vigil (remote): it cannot be restarted",
                        self.backend
                    )));
                }
                self.quarantine_reason = None;
                self.consecutive_failures = 0;
                self.restart_count += 1;
                self.go(
                    &mut out,
                    HealthState::Restarting,
                    format!("restart requested by {principal}"),
                    now,
                );
                out.action = Some(Action::RestartAfter(Duration::ZERO));
            }
            Input::OperatorQuarantine { principal, reason } => {
                if self.state == HealthState::Quarantined {
                    return Err(Refused(format!(
                        "backend '{}' is already quarantined",
                        self.backend
                    )));
                }
                let why = reason.unwrap_or_else(|| "no reason given".into());
                self.quarantine_reason = Some(format!("{why} (by {principal})"));
                self.next_retry_at = None;
                self.go(
                    &mut out,
                    HealthState::Quarantined,
                    format!("quarantined by {principal}: {why}"),
                    now,
                );
                out.action = Some(Action::Stop);
            }
            Input::Promoted(reason) => {
                if self.state != HealthState::Updating {
                    return Err(Refused(format!(
                        "backend '{}' is not updating (it is {})",
                        self.backend, self.state
                    )));
                }
                self.quarantine_reason = None;
                self.consecutive_failures = 0;
                self.probe_failures = 0;
                self.next_retry_at = None;
                self.go(&mut out, HealthState::Running, reason, now);
            }
            Input::OperatorRelease { principal } => {
                if self.state != HealthState::Quarantined {
                    return Err(Refused(format!(
                        "backend '{}' is not quarantined (it is {})",
                        self.backend, self.state
                    )));
                }
                self.quarantine_reason = None;
                self.consecutive_failures = 0;
                self.restart_count += 1;
                self.go(
                    &mut out,
                    HealthState::Restarting,
                    format!("released by {principal}"),
                    now,
                );
                out.action = Some(Action::RestartAfter(Duration::ZERO));
            }
        }
        Ok(out)
    }

    /// A start failed or a serving instance went down.
    fn failure(&mut self, out: &mut Step, reason: String, now: SystemTime, unit: f64) {
        let serving = live(self.state);
        if self.state == HealthState::Quarantined {
            // A re-probe that failed: stay quarantined, try again later.
            self.schedule(out, self.policy.quarantine_reprobe, now, Action::RetryAfter);
            if out.action.is_none() {
                out.action = Some(Action::Stop);
            }
            return;
        }
        if self.state == HealthState::Updating {
            self.go(out, HealthState::Offline, reason, now);
            out.action = Some(Action::Stop);
            return;
        }
        if serving {
            self.go(out, HealthState::Offline, reason.clone(), now);
        }
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        let n = self.consecutive_failures;
        if !self.owns_lifecycle {
            let delay = backoff(&self.policy, n, unit);
            if !serving {
                self.go(out, HealthState::Offline, reason, now);
            }
            self.schedule(out, Some(delay), now, Action::RetryAfter);
            return;
        }
        if n >= self.policy.max_restarts {
            self.quarantine_reason = Some(format!("{n} consecutive failures, last: {reason}"));
            self.go(
                out,
                HealthState::Quarantined,
                format!("quarantined after {n} consecutive failures: {reason}"),
                now,
            );
            out.action = Some(Action::Stop);
            self.schedule(out, self.policy.quarantine_reprobe, now, Action::RetryAfter);
            return;
        }
        let delay = backoff(&self.policy, n, unit);
        self.restart_count += 1;
        let wait = humantime::format_duration(Duration::from_millis(delay.as_millis() as u64));
        self.go(
            out,
            HealthState::Restarting,
            format!(
                "restart in {wait} (failure {n}/{}): {reason}",
                self.policy.max_restarts
            ),
            now,
        );
        self.schedule(out, Some(delay), now, Action::RestartAfter);
    }

    fn schedule(
        &mut self,
        out: &mut Step,
        delay: Option<Duration>,
        now: SystemTime,
        action: fn(Duration) -> Action,
    ) {
        if let Some(d) = delay {
            self.next_retry_at = Some(now + d);
            out.action = Some(action(d));
        }
    }

    fn go(&mut self, out: &mut Step, to: HealthState, reason: String, now: SystemTime) {
        if to == self.state && reason == self.reason {
            return;
        }
        let from = self.state;
        self.reason = reason.clone();
        if to != from {
            self.state = to;
            self.since = now;
            out.transitions.push(Transition {
                backend: self.backend.clone(),
                from,
                to,
                reason,
                at: now,
            });
        }
    }

    /// A machine for a new version started beside the one serving: it is
    /// `updating` (never advertised, never restarted: a failure stops it)
    /// until [`Input::Promoted`]. No transition: the rollout records the
    /// update's own.
    pub fn begin_update(&mut self, reason: String, restart_count: u64) {
        self.state = HealthState::Updating;
        self.reason = reason;
        self.restart_count = restart_count;
    }

    /// Restores persisted counters (and quarantine) at gateway start.
    pub fn restore(
        &mut self,
        state: HealthState,
        restart_count: u64,
        consecutive_failures: u32,
        quarantine_reason: Option<String>,
    ) {
        self.restart_count = restart_count;
        self.consecutive_failures = consecutive_failures;
        if state == HealthState::Quarantined {
            self.state = HealthState::Quarantined;
            self.quarantine_reason = quarantine_reason;
            self.reason = "quarantined before the gateway restarted".into();
        }
    }

    /// Takes on what another replica's supervisor of this backend recorded:
    /// a follower mirrors it, a replica taking over continues from it. No
    /// transition is made (the supervisor that made them recorded them).
    pub fn mirror(&mut self, record: &crate::store::InstanceRecord, reason: Option<String>) {
        self.state = record.state;
        self.since = record.updated_at;
        self.restart_count = record.restart_count;
        self.consecutive_failures = record.consecutive_failures;
        self.quarantine_reason = record.quarantine_reason.clone();
        self.probe_failures = 0;
        self.next_retry_at = None;
        if let Some(reason) = reason {
            self.reason = reason;
        }
    }

    /// The re-probe delay to use when starting in quarantine.
    pub fn reprobe_delay(&self) -> Option<Duration> {
        self.policy.quarantine_reprobe
    }
}

#[cfg(test)]
mod tests;
