//! Hostile fixture: a valid component that exports `test:other/thing@0.1.0`
//! (see wit/other.wit) and nothing of `vigil:plugin`.

wit_bindgen::generate!({
    path: "wit",
    world: "other",
});

use exports::test::other::thing::Guest;

struct WrongWorld;

impl Guest for WrongWorld {
    fn run() -> u32 {
        42
    }
}

export!(WrongWorld);
