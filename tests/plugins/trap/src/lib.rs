//! Hostile probe: `check` panics, which aborts the guest (a wasm trap).

wit_bindgen::generate!({
    path: "../../../wit",
    world: "probe",
    generate_all,
});

use exports::vigil::plugin::prober::Guest;
use vigil::plugin::types::Report;

struct Trap;

impl Guest for Trap {
    fn check() -> Report {
        panic!("trap plugin: deliberate panic");
    }
}

export!(Trap);
