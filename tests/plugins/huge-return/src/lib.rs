//! Hostile probe: `check` reports healthy with a 64 MiB `detail` string, to
//! test that the host bounds (or cuts) what it copies out of a guest.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "probe",
    generate_all,
});

use exports::vigil::plugin::prober::Guest;
use vigil::plugin::types::{Report, Status};

const DETAIL_BYTES: usize = 64 * 1024 * 1024;

struct HugeReturn;

impl Guest for HugeReturn {
    fn check() -> Report {
        Report {
            status: Status::Healthy,
            latency_ms: None,
            detail: Some("x".repeat(DETAIL_BYTES)),
        }
    }
}

export!(HugeReturn);
