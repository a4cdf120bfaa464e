//! Hostile probe: sends requests to its own target backend through
//! `vigil:plugin/target` in a loop for `for_ms` milliseconds (config key,
//! default 800; set it just under the deadline), counting the successes.
//! The request is a `ping`, or with config key `tool` a `call-tool` of that
//! tool with `{}` (the demo backend's `bump` counts every call it gets).
//! Only `limits.target_requests` keeps one check from sending hundreds of
//! requests to the backend it is meant to watch.
//!
//! Reports `healthy` with "N succeeded, F failed (first failure: ...)" and
//! logs the same.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "probe",
    generate_all,
});

use std::time::{Duration, Instant};

use exports::vigil::plugin::prober::Guest;
use vigil::plugin::types::{Report, Status};
use vigil::plugin::{host, target};

struct TargetFlood;

fn config(key: &str) -> Option<String> {
    host::config()
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

impl Guest for TargetFlood {
    fn check() -> Report {
        let for_ms: u64 = config("for_ms").and_then(|v| v.parse().ok()).unwrap_or(800);
        let tool = config("tool");
        let start = Instant::now();
        let (mut ok, mut failed, mut first_failure) = (0u64, 0u64, None);
        while start.elapsed() < Duration::from_millis(for_ms) {
            let outcome = match &tool {
                Some(t) => target::call_tool(t, "{}", 500).map(|_| ()),
                None => target::ping(500),
            };
            match outcome {
                Ok(()) => ok += 1,
                Err(e) => {
                    failed += 1;
                    first_failure.get_or_insert(format!("{e:?}"));
                }
            }
        }
        let detail = format!(
            "{ok} succeeded, {failed} failed (first failure: {})",
            first_failure.as_deref().unwrap_or("none")
        );
        host::log(host::Level::Info, &format!("target-flood {detail}"));
        Report {
            status: Status::Healthy,
            latency_ms: None,
            detail: Some(detail),
        }
    }
}

export!(TargetFlood);
