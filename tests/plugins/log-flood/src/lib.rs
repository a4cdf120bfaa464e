//! Hostile probe: writes log lines through `host.log` as fast as it can for
//! `for_ms` milliseconds (config key, default 800; set it just under the
//! deadline), then reports `healthy` ("wrote N lines in M ms"). Only
//! `limits.log_rate` (with `limits.log_burst`) keeps it from filling the
//! host's log, and its disk, with hundreds of thousands of lines a second.
//! Each line reads `log-flood line N`.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "probe",
    generate_all,
});

use std::time::{Duration, Instant};

use exports::vigil::plugin::prober::Guest;
use vigil::plugin::host;
use vigil::plugin::types::{Report, Status};

struct LogFlood;

impl Guest for LogFlood {
    fn check() -> Report {
        let for_ms: u64 = host::config()
            .into_iter()
            .find(|(k, _)| k == "for_ms")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(800);
        let start = Instant::now();
        let mut n: u64 = 0;
        while start.elapsed() < Duration::from_millis(for_ms) {
            n += 1;
            host::log(host::Level::Info, &format!("log-flood line {n}"));
        }
        Report {
            status: Status::Healthy,
            latency_ms: None,
            detail: Some(format!(
                "wrote {n} lines in {} ms",
                start.elapsed().as_millis()
            )),
        }
    }
}

export!(LogFlood);
