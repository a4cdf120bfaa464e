//! Hostile fixture: a well-formed probe built against `vigil:plugin@0.2.0`
//! (wit/plugin.wit, a copy of the real contract with the version bumped), so
//! it exports `vigil:plugin/prober@0.2.0` and imports
//! `vigil:plugin/host@0.2.0`. Vigil implements 0.1 and must refuse it,
//! naming both versions.

wit_bindgen::generate!({
    // The vendored WASI packages first, dependencies before dependents,
    // then the bumped copy of the contract, which resolves against them.
    path: [
        "../../../wit/deps/io.wit",
        "../../../wit/deps/random.wit",
        "../../../wit/deps/clocks.wit",
        "../../../wit/deps/filesystem.wit",
        "../../../wit/deps/sockets.wit",
        "../../../wit/deps/cli.wit",
        "../../../wit/deps/http.wit",
        "wit",
    ],
    world: "vigil:plugin/probe@0.2.0",
    generate_all,
});

use exports::vigil::plugin::prober::Guest;
use vigil::plugin::host::{self, Level};
use vigil::plugin::types::{Report, Status};

struct FutureVersion;

impl Guest for FutureVersion {
    fn check() -> Report {
        // Use a host import so the 0.2.0 `host` interface is really imported.
        host::log(Level::Info, "future-version: check");
        Report {
            status: Status::Healthy,
            latency_ms: None,
            detail: Some("future-version ok".to_string()),
        }
    }
}

export!(FutureVersion);
