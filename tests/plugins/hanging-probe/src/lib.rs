//! Hostile probe: `check` logs "hanging-probe: check started" and then
//! blocks in the host for `hang_ms` (config key, default 600000: ten
//! minutes) on a `wasi:clocks` timer (`monotonic-clock.subscribe-duration`
//! then `pollable.block`), so it never yields a verdict. No guest code runs
//! meanwhile, so the epoch (CPU) deadline never fires: only the wall-clock
//! side of `limits.deadline` ends the call.
//!
//! What it tests is not that deadline but the call's place: a probe call
//! waiting in the host must not hold its backend's supervisor, which has to
//! notice the backend's exit and answer operator commands meanwhile.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "probe",
    generate_all,
});

use exports::vigil::plugin::prober::Guest;
use vigil::plugin::host::{self, Level};
use vigil::plugin::types::{Report, Status};
use wasi::clocks::monotonic_clock;

struct HangingProbe;

impl Guest for HangingProbe {
    fn check() -> Report {
        let ms: u64 = host::config()
            .into_iter()
            .find(|(k, _)| k == "hang_ms")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(600_000);
        host::log(Level::Info, "hanging-probe: check started");
        monotonic_clock::subscribe_duration(ms * 1_000_000).block();
        host::log(Level::Info, "hanging-probe: check woke up");
        Report {
            status: Status::Healthy,
            latency_ms: None,
            detail: Some(format!("hanging-probe slept {ms} ms")),
        }
    }
}

export!(HangingProbe);
