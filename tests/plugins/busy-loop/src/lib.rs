//! Hostile probe: `check` spins forever without yielding or calling the host,
//! so only the host's CPU deadline (epoch interruption or fuel) can stop it.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "probe",
    generate_all,
});

use exports::vigil::plugin::prober::Guest;
use vigil::plugin::types::Report;

struct BusyLoop;

impl Guest for BusyLoop {
    fn check() -> Report {
        let mut n: u64 = 0;
        loop {
            // black_box makes every iteration real work the optimizer can
            // neither fold away nor prove pointless.
            n = std::hint::black_box(n.wrapping_add(1));
        }
    }
}

export!(BusyLoop);
