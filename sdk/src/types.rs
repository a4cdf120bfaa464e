//! Convenience methods on the WIT types `report`, `status`, `event` and
//! `severity` (generated from `vigil:plugin/types`).

use std::fmt;
use std::time::Duration;

pub use crate::bindings::probe::vigil::plugin::types::{Event, Report, Severity, Status};

impl Report {
    /// A report with `status`, no latency and no detail.
    pub fn new(status: Status) -> Report {
        Report {
            status,
            latency_ms: None,
            detail: None,
        }
    }

    /// The backend is ready.
    pub fn healthy() -> Report {
        Report::new(Status::Healthy)
    }

    /// The backend serves but is worth a look (slow, partly failing); it
    /// stays advertised. `reason` is shown to operators.
    pub fn degraded(reason: impl Into<String>) -> Report {
        Report::new(Status::Degraded(reason.into()))
    }

    /// The backend is not ready: a failed observation (enough in a row and
    /// Vigil restarts it).
    pub fn unhealthy(reason: impl Into<String>) -> Report {
        Report::new(Status::Unhealthy(reason.into()))
    }

    /// The probe could not tell (bad configuration, its own dependency
    /// failed). Never leads to a restart.
    pub fn unknown(reason: impl Into<String>) -> Report {
        Report::new(Status::Unknown(reason.into()))
    }

    /// Sets the measured latency, rounded to whole milliseconds and capped
    /// at `u32::MAX`.
    pub fn with_latency(self, latency: Duration) -> Report {
        self.with_latency_ms(duration_ms(latency))
    }

    /// Sets the measured latency in milliseconds.
    pub fn with_latency_ms(mut self, ms: u32) -> Report {
        self.latency_ms = Some(ms);
        self
    }

    /// Sets the detail shown to operators with the status.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Report {
        self.detail = Some(detail.into());
        self
    }
}

/// `d` in whole milliseconds (rounded to nearest), capped at `u32::MAX`.
pub(crate) fn duration_ms(d: Duration) -> u32 {
    let ms = (d.as_micros() + 500) / 1000;
    u32::try_from(ms).unwrap_or(u32::MAX)
}

impl Status {
    /// The status's WIT name: `healthy`, `degraded`, `unhealthy` or
    /// `unknown`.
    pub fn name(&self) -> &'static str {
        match self {
            Status::Healthy => "healthy",
            Status::Degraded(_) => "degraded",
            Status::Unhealthy(_) => "unhealthy",
            Status::Unknown(_) => "unknown",
        }
    }

    /// The reason, for every status but `healthy`.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Status::Healthy => None,
            Status::Degraded(r) | Status::Unhealthy(r) | Status::Unknown(r) => Some(r),
        }
    }
}

/// `healthy`, or `NAME: REASON`.
impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.reason() {
            None => f.write_str(self.name()),
            Some(r) => write!(f, "{}: {r}", self.name()),
        }
    }
}

impl PartialEq for Status {
    fn eq(&self, other: &Status) -> bool {
        self.name() == other.name() && self.reason() == other.reason()
    }
}

impl Eq for Status {}

impl Severity {
    /// The severity's WIT name: `info`, `warning` or `critical`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

/// The WIT name (`info`, `warning`, `critical`).
impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Parses the WIT name (`info`, `warning`, `critical`), ignoring ASCII case.
impl std::str::FromStr for Severity {
    type Err = String;

    fn from_str(s: &str) -> Result<Severity, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "info" => Ok(Severity::Info),
            "warning" => Ok(Severity::Warning),
            "critical" => Ok(Severity::Critical),
            other => Err(format!(
                "unknown severity {other:?} (expected info, warning or critical)"
            )),
        }
    }
}

impl Event {
    /// The event as a JSON object with the keys `backend`, `from`, `to`,
    /// `reason`, `at_ms`, `generation` and `severity` (its WIT name). This is
    /// the body the first-party `webhook` notifier posts.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "backend": self.backend,
            "from": self.from_state,
            "to": self.to_state,
            "reason": self.reason,
            "at_ms": self.at_ms,
            "generation": self.generation,
            "severity": self.severity.as_str(),
        })
    }

    /// One line for chat messages and logs:
    /// `[SEVERITY] BACKEND: FROM → TO (REASON)`, without the parenthesis when
    /// the reason is empty.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "[{}] {}: {} → {}",
            self.severity.as_str(),
            self.backend,
            self.from_state,
            self.to_state
        );
        if !self.reason.trim().is_empty() {
            s.push_str(&format!(" ({})", self.reason.trim()));
        }
        s
    }

    /// `at_ms` as an RFC 3339 UTC timestamp (see [`crate::time::rfc3339_from_ms`]).
    pub fn timestamp_rfc3339(&self) -> String {
        crate::time::rfc3339_from_ms(self.at_ms)
    }
}

impl PartialEq for Event {
    fn eq(&self, o: &Event) -> bool {
        self.backend == o.backend
            && self.from_state == o.from_state
            && self.to_state == o.to_state
            && self.reason == o.reason
            && self.at_ms == o.at_ms
            && self.generation == o.generation
            && self.severity == o.severity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn event() -> Event {
        Event {
            backend: "github".into(),
            from_state: "running".into(),
            to_state: "unhealthy".into(),
            reason: "probe failed".into(),
            at_ms: 1_700_000_000_123,
            generation: 7,
            severity: Severity::Critical,
        }
    }

    #[test]
    fn report_builders() {
        let r = Report::degraded("slow")
            .with_latency(Duration::from_micros(1500))
            .with_detail("d");
        assert_eq!(r.status, Status::Degraded("slow".into()));
        assert_eq!(r.latency_ms, Some(2));
        assert_eq!(r.detail.as_deref(), Some("d"));
        assert_eq!(Report::healthy().status.to_string(), "healthy");
        assert_eq!(Report::unhealthy("x").status.to_string(), "unhealthy: x");
        assert_eq!(duration_ms(Duration::from_secs(10_000_000)), u32::MAX);
    }

    #[test]
    fn severity_roundtrip() {
        for s in [Severity::Info, Severity::Warning, Severity::Critical] {
            assert_eq!(s.as_str().parse::<Severity>(), Ok(s));
        }
        assert!("Warning".parse::<Severity>().is_ok());
        assert!("loud".parse::<Severity>().is_err());
        assert!(Severity::Critical > Severity::Warning);
    }

    #[test]
    fn event_json_and_summary() {
        let e = event();
        assert_eq!(
            e.to_json(),
            serde_json::json!({
                "backend": "github", "from": "running", "to": "unhealthy",
                "reason": "probe failed", "at_ms": 1_700_000_000_123u64,
                "generation": 7, "severity": "critical"
            })
        );
        assert_eq!(
            e.summary(),
            "[critical] github: running → unhealthy (probe failed)"
        );
        assert_eq!(e.timestamp_rfc3339(), "2023-11-14T22:13:20.123Z");
    }
}
