//! A well-behaved probe: its verdict comes from the config key `mode`.
//!
//! | `mode`               | status                      |
//! |----------------------|-----------------------------|
//! | absent / `healthy`   | healthy                     |
//! | `degraded`           | degraded("told to degrade") |
//! | `unhealthy`          | unhealthy("told to fail")   |
//! | `unknown`            | unknown("told to be unknown") |
//! | anything else        | unknown("unknown mode ...") |
//!
//! `detail` is "good-probe ok for <target name>" when healthy,
//! "good-probe mode <mode> for <target name>" otherwise. It logs one line at
//! info level per check.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "probe",
    generate_all,
});

use exports::vigil::plugin::prober::Guest;
use vigil::plugin::host::{self, Level};
use vigil::plugin::target;
use vigil::plugin::types::{Report, Status};

struct GoodProbe;

impl Guest for GoodProbe {
    fn check() -> Report {
        let mode = host::config()
            .into_iter()
            .find(|(k, _)| k == "mode")
            .map(|(_, v)| v)
            .unwrap_or_else(|| "healthy".to_string());
        let name = target::name();
        host::log(
            Level::Info,
            &format!("good-probe checking {name} (mode {mode})"),
        );
        let status = match mode.as_str() {
            "healthy" => Status::Healthy,
            "degraded" => Status::Degraded("told to degrade".to_string()),
            "unhealthy" => Status::Unhealthy("told to fail".to_string()),
            "unknown" => Status::Unknown("told to be unknown".to_string()),
            other => Status::Unknown(format!("unknown mode {other:?}")),
        };
        let detail = match status {
            Status::Healthy => format!("good-probe ok for {name}"),
            _ => format!("good-probe mode {mode} for {name}"),
        };
        Report {
            status,
            latency_ms: None,
            detail: Some(detail),
        }
    }
}

export!(GoodProbe);
