//! Hostile probe: `check` spins without yielding or calling the host, so
//! only the host's CPU deadline (epoch interruption) can stop it.
//!
//! Config key `spin_ms` (optional): spin that long by the wall clock and
//! answer healthy, a plugin that is CPU-bound but not failing (what
//! `vigil-bench busy-plugins --spin-ms` measures). Without it: forever.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "probe",
    generate_all,
});

use exports::vigil::plugin::prober::Guest;
use vigil::plugin::host;
use vigil::plugin::types::{Report, Status};
use wasi::clocks::monotonic_clock;

struct BusyLoop;

impl Guest for BusyLoop {
    fn check() -> Report {
        let spin_ns: Option<u64> = host::config()
            .into_iter()
            .find(|(k, _)| k == "spin_ms")
            .and_then(|(_, v)| v.parse::<u64>().ok())
            .map(|ms| ms * 1_000_000);
        let start = monotonic_clock::now();
        let mut n: u64 = 0;
        loop {
            // black_box makes every iteration real work the optimizer can
            // neither fold away nor prove pointless.
            for _ in 0..10_000 {
                n = std::hint::black_box(n.wrapping_add(1));
            }
            if let Some(ns) = spin_ns
                && monotonic_clock::now().saturating_sub(start) >= ns
            {
                return Report {
                    status: Status::Healthy,
                    latency_ms: None,
                    detail: Some(format!("spun {n} rounds")),
                };
            }
        }
    }
}

export!(BusyLoop);
