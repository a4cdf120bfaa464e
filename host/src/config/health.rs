//! `[health]` and `[restart]`: how backends are judged and healed.
//! Per-backend tables override the global ones key by key.

use std::time::Duration;

use super::Problems;
use super::raw::{RawHealth, RawRestart};

/// Which MCP round trip the readiness probe makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// `ping` (default): cheapest; never a second `initialize`.
    Ping,
    /// `tools/list`: also proves the tool catalog answers.
    ListTools,
}

/// An active tool-call probe.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolProbe {
    pub tool: String,
    pub arguments: serde_json::Map<String, serde_json::Value>,
}

/// How a backend is probed and judged.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthConfig {
    /// `interval`: time between probes. Default `30s`.
    pub interval: Duration,
    /// `timeout`: budget of one probe; over it the probe failed. Default `10s`.
    pub timeout: Duration,
    /// `unhealthy_threshold`: consecutive failed probes before `offline`.
    /// Default 3.
    pub unhealthy_threshold: u32,
    /// `readiness`: `"ping"` (default) or `"tools/list"`.
    pub readiness: Readiness,
    /// `degraded_latency`: a probe or call slower than this marks the backend
    /// `degraded`. Default: half of `timeout`.
    pub degraded_latency: Duration,
    /// `error_rate`: share of failed `tools/call`s in the window above which
    /// the backend is `degraded` (0..1). Default 0.5.
    pub error_rate: f64,
    /// `window`: sliding window of real traffic for error rate and latency.
    /// Default `60s`.
    pub window: Duration,
    /// `min_calls`: calls needed in the window before the error rate counts.
    /// Default 5.
    pub min_calls: u32,
    /// `tool_probe`: an optional tool call made after each readiness probe,
    /// `{ tool = "name", arguments = { ... } }`.
    pub tool_probe: Option<ToolProbe>,
}

/// When and how often a failed backend is restarted.
#[derive(Debug, Clone, PartialEq)]
pub struct RestartPolicy {
    /// `base`: delay before the first restart. Default `1s`.
    pub base: Duration,
    /// `max`: longest delay. Default `5m`.
    pub max: Duration,
    /// `multiplier`: growth of the delay per consecutive failure. Default 2.0.
    pub multiplier: f64,
    /// `jitter`: the delay is drawn from `[d·(1−jitter), d]` (0..1). Default 0.2.
    pub jitter: f64,
    /// `max_restarts`: consecutive failed starts before `quarantined`.
    /// Default 5.
    pub max_restarts: u32,
    /// `healthy_reset`: uptime after which the failure count resets.
    /// Default `60s`.
    pub healthy_reset: Duration,
    /// `quarantine_reprobe`: if set, a quarantined backend is tried again
    /// after this long and leaves quarantine when it comes up. Default off.
    pub quarantine_reprobe: Option<Duration>,
}

impl Default for HealthConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(30),
            timeout: Duration::from_secs(10),
            unhealthy_threshold: 3,
            readiness: Readiness::Ping,
            degraded_latency: Duration::from_secs(5),
            error_rate: 0.5,
            window: Duration::from_secs(60),
            min_calls: 5,
            tool_probe: None,
        }
    }
}

impl Default for RestartPolicy {
    fn default() -> Self {
        Self {
            base: Duration::from_secs(1),
            max: Duration::from_secs(300),
            multiplier: 2.0,
            jitter: 0.2,
            max_restarts: 5,
            healthy_reset: Duration::from_secs(60),
            quarantine_reprobe: None,
        }
    }
}

impl Problems {
    /// `base` with the keys of `raw` (at `key`) applied.
    pub(super) fn health(
        &mut self,
        key: &str,
        base: &HealthConfig,
        raw: Option<RawHealth>,
    ) -> HealthConfig {
        let Some(raw) = raw else { return base.clone() };
        let mut h = base.clone();
        let d = |p: &mut Problems, k: &str, v: Option<String>, cur: Duration| {
            p.override_duration(&format!("{key}.{k}"), v, cur)
        };
        h.interval = d(self, "interval", raw.interval, h.interval);
        let timeout_set = raw.timeout.is_some();
        h.timeout = d(self, "timeout", raw.timeout, h.timeout);
        h.degraded_latency = match raw.degraded_latency {
            Some(v) => d(self, "degraded_latency", Some(v), h.degraded_latency),
            None if timeout_set => h.timeout / 2,
            None => h.degraded_latency,
        };
        h.window = d(self, "window", raw.window, h.window);
        if let Some(t) = raw.unhealthy_threshold {
            if t == 0 {
                self.add(format!("{key}.unhealthy_threshold"), "must be at least 1");
            }
            h.unhealthy_threshold = t.max(1);
        }
        if let Some(r) = raw.readiness {
            h.readiness = match r.as_str() {
                "ping" => Readiness::Ping,
                "tools/list" => Readiness::ListTools,
                other => {
                    self.add(
                        format!("{key}.readiness"),
                        format!("unknown value `{other}`: use \"ping\" or \"tools/list\""),
                    );
                    h.readiness
                }
            };
        }
        if let Some(e) = raw.error_rate {
            if !(0.0..=1.0).contains(&e) {
                self.add(format!("{key}.error_rate"), "must be between 0 and 1");
            }
            h.error_rate = e.clamp(0.0, 1.0);
        }
        if let Some(m) = raw.min_calls {
            h.min_calls = m;
        }
        if let Some(tp) = raw.tool_probe {
            if tp.tool.is_empty() {
                self.add(
                    format!("{key}.tool_probe.tool"),
                    "must name a tool of this backend (its own name, unprefixed)",
                );
            }
            let arguments = match serde_json::to_value(&tp.arguments) {
                Ok(serde_json::Value::Object(m)) => m,
                _ => serde_json::Map::new(),
            };
            h.tool_probe = Some(ToolProbe {
                tool: tp.tool,
                arguments,
            });
        }
        if h.timeout > h.interval {
            self.add(
                format!("{key}.timeout"),
                "must not be longer than the interval",
            );
        }
        h
    }

    /// `base` with the keys of `raw` (at `key`) applied.
    pub(super) fn restart(
        &mut self,
        key: &str,
        base: &RestartPolicy,
        raw: Option<RawRestart>,
    ) -> RestartPolicy {
        let Some(raw) = raw else { return base.clone() };
        let mut r = base.clone();
        let d = |p: &mut Problems, k: &str, v: Option<String>, cur: Duration| {
            p.override_duration(&format!("{key}.{k}"), v, cur)
        };
        r.base = d(self, "base", raw.base, r.base);
        r.max = d(self, "max", raw.max, r.max);
        r.healthy_reset = d(self, "healthy_reset", raw.healthy_reset, r.healthy_reset);
        if let Some(q) = raw.quarantine_reprobe {
            r.quarantine_reprobe =
                Some(self.duration(&format!("{key}.quarantine_reprobe"), Some(q), "1h"));
        }
        if let Some(m) = raw.multiplier {
            if !(m >= 1.0 && m.is_finite()) {
                self.add(
                    format!("{key}.multiplier"),
                    "must be a number of at least 1.0",
                );
            }
            r.multiplier = if m.is_finite() { m.max(1.0) } else { 2.0 };
        }
        if let Some(j) = raw.jitter {
            if !(0.0..=1.0).contains(&j) {
                self.add(format!("{key}.jitter"), "must be between 0 and 1");
            }
            r.jitter = j.clamp(0.0, 1.0);
        }
        if let Some(m) = raw.max_restarts {
            if m == 0 {
                self.add(format!("{key}.max_restarts"), "must be at least 1");
            }
            r.max_restarts = m.max(1);
        }
        if r.max < r.base {
            self.add(format!("{key}.max"), "must not be shorter than base");
        }
        r
    }
}
