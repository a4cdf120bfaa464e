//! Lifecycle states of a backend instance and the one rule that says which
//! of them are shown to clients.

use std::fmt;
use std::str::FromStr;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// Where a backend instance stands. Only the health monitor changes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthState {
    /// Being started or connected; not yet ready.
    Starting,
    /// Ready and healthy.
    Running,
    /// Serving, but slow, rate-limited or erroring more than it should.
    Degraded,
    /// Failed liveness or readiness; hidden, a restart is due.
    Offline,
    /// Waiting out the backoff before the next start attempt.
    Restarting,
    /// An update is in progress: no automatic restarts.
    Updating,
    /// Given up on after repeated failures; left only by an operator
    /// release, a successful update, or an opt-in re-probe.
    Quarantined,
    /// The probe infrastructure itself failed; never a reason to restart.
    Unknown,
}

impl HealthState {
    pub const ALL: [HealthState; 8] = [
        HealthState::Starting,
        HealthState::Running,
        HealthState::Degraded,
        HealthState::Offline,
        HealthState::Restarting,
        HealthState::Updating,
        HealthState::Quarantined,
        HealthState::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            HealthState::Starting => "starting",
            HealthState::Running => "running",
            HealthState::Degraded => "degraded",
            HealthState::Offline => "offline",
            HealthState::Restarting => "restarting",
            HealthState::Updating => "updating",
            HealthState::Quarantined => "quarantined",
            HealthState::Unknown => "unknown",
        }
    }
}

impl fmt::Display for HealthState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for HealthState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        HealthState::ALL
            .into_iter()
            .find(|h| h.as_str() == s)
            .ok_or_else(|| format!("unknown health state `{s}`"))
    }
}

/// Whether a backend in `state` has its tools, resources and prompts shown
/// to clients and receives routed requests. The router, the catalog and the
/// change notifier all call this; none keeps its own copy of the rule.
///
/// `unknown` is served: it means Vigil's own probe machinery failed (the
/// container engine is unreachable, say), not the backend, and hiding a
/// backend that may well be working would turn a monitoring outage into a
/// serving one.
pub fn advertisable(state: HealthState) -> bool {
    matches!(
        state,
        HealthState::Running | HealthState::Degraded | HealthState::Unknown
    )
}

/// One state change, as recorded in the transition log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    pub backend: String,
    pub from: HealthState,
    pub to: HealthState,
    /// Why, sanitized (no secrets, no raw upstream payloads).
    pub reason: String,
    #[serde(with = "unix_ms")]
    pub at: SystemTime,
}

/// Serializes a `SystemTime` as milliseconds since the Unix epoch.
pub mod unix_ms {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn to_ms(t: SystemTime) -> i64 {
        t.duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }

    pub fn from_ms(ms: i64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
    }

    pub fn serialize<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i64(to_ms(*t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        Ok(from_ms(i64::deserialize(d)?))
    }
}
