//! Hostile notifier, slow rather than broken: `notify` waits `hold_ms`
//! (config, default 20000) on a `wasi:clocks` timer, holding its instance
//! the whole time, then reports success. Dozens of copies blocking on one
//! event once took every instance slot of the plugin engine, so other
//! plugins' calls failed ("maximum concurrent limit"), were counted as
//! *their* failures, and the innocent were disabled.
//!
//! What must hold: admission (a call waits for a slot; slots are reserved
//! for plugins with nothing running; a call that waited its whole deadline
//! is shed and never counted as a failure).

wit_bindgen::generate!({
    path: "../../../wit",
    world: "notifier",
    generate_all,
});

use exports::vigil::plugin::notify_sink::Guest;
use vigil::plugin::host;
use vigil::plugin::types::Event;

struct SlowNotifier;

impl Guest for SlowNotifier {
    fn notify(_event: Event) -> Result<(), String> {
        let hold_ms: u64 = host::config()
            .into_iter()
            .find(|(k, _)| k == "hold_ms")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(20_000);
        wasi::clocks::monotonic_clock::subscribe_duration(hold_ms * 1_000_000).block();
        Ok(())
    }
}

export!(SlowNotifier);
