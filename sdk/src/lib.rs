//! Guest-side SDK for Vigil WebAssembly plugins.
//!
//! A Vigil plugin is a WebAssembly component built for `wasm32-wasip2` that
//! implements one of the two worlds of `wit/plugin.wit`
//! (package `vigil:plugin@0.1.0`):
//!
//! - a **probe** ([`Probe`], exported with [`export_probe!`]) checks one
//!   backend and returns a [`Report`];
//! - a **notifier** ([`Notifier`], exported with [`export_notifier!`])
//!   delivers one health [`Event`] somewhere, usually with [`http`].
//!
//! Vigil runs every call in a fresh instance, so a plugin keeps no state
//! between calls. A panic aborts (traps) the instance; Vigil counts that as
//! a failed call, so return an error or a [`Report`] instead where you can.
//!
//! ```no_run
//! use vigil_sdk::{Config, Probe, Report};
//!
//! struct Ping;
//!
//! impl Probe for Ping {
//!     fn check(cfg: &Config) -> Report {
//!         let timeout = match cfg.parse_or("timeout_ms", 2_000u64) {
//!             Ok(ms) => std::time::Duration::from_millis(ms),
//!             Err(e) => return Report::unknown(e),
//!         };
//!         let start = std::time::Instant::now();
//!         match vigil_sdk::target::ping(timeout) {
//!             Ok(()) => Report::healthy().with_latency(start.elapsed()),
//!             Err(e) => Report::unhealthy(format!("ping failed: {e}")),
//!         }
//!     }
//! }
//!
//! vigil_sdk::export_probe!(Ping);
//! ```
//!
//! Everything that talks to the host (configuration, logging, [`target`],
//! [`http`]) works only inside a component. Compiled for any other target
//! (for unit tests with `cargo test` on the build machine) the SDK still
//! builds: logging goes to stderr, [`Config::from_host`] is empty, and
//! [`target`] and [`http`] calls return an error instead of reaching a host.
//! The export macros expand to nothing there.

#![warn(missing_docs)]

// The raw generated `bindings::*::export!` macros, used without
// `with_types_in`, name this crate `vigil_sdk`; this alias makes that path
// resolve inside the SDK too. The SDK's own export macros use `$crate`.
extern crate self as vigil_sdk;

#[allow(missing_docs, clippy::all)]
pub mod bindings;
pub mod config;
pub mod crypto;
pub mod http;
pub mod log;
pub mod target;
pub mod time;
mod types;

pub use config::Config;
/// The `serde_json` the SDK uses for tool arguments and HTTP bodies,
/// re-exported so a plugin need not name it as a dependency.
pub use serde_json;
pub use types::{Event, Report, Severity, Status};

/// A probe plugin: checks its target backend once per call.
///
/// Implement it on a unit struct and export it with [`export_probe!`]. The
/// component then exports `vigil:plugin/prober@0.1.0`.
pub trait Probe {
    /// Checks the backend once and says how it is.
    ///
    /// `cfg` is the plugin's configuration: the manifest's `[config]` table
    /// overlaid with the backend's probe arguments. Return
    /// [`Report::unknown`] when the probe itself cannot tell (bad
    /// configuration, its own dependency failed): that never restarts the
    /// backend. [`Report::unhealthy`] counts as a failed observation.
    fn check(cfg: &Config) -> Report;
}

/// A notifier plugin: delivers one health event per call.
///
/// Implement it on a unit struct and export it with [`export_notifier!`].
/// The component then exports `vigil:plugin/notify-sink@0.1.0`.
pub trait Notifier {
    /// Delivers `event`.
    ///
    /// `cfg` is the manifest's `[config]` table. `Err(reason)` makes Vigil
    /// retry later with backoff; return it for transient failures (network
    /// errors, non-2xx answers). Vigil has already applied the manifest's
    /// `[filter]`, so every event that arrives is meant to be delivered.
    fn notify(cfg: &Config, event: &Event) -> Result<(), String>;
}

/// Exports a [`Probe`] implementation as the component's
/// `vigil:plugin/prober@0.1.0`.
///
/// Use it once, at the top level of a `cdylib` crate:
/// `vigil_sdk::export_probe!(MyProbe);`. Each call of `check` reads the
/// configuration with [`Config::from_host`] and calls
/// [`Probe::check`]. Off `wasm32` it expands to nothing, so the crate's unit
/// tests build on the build machine.
#[macro_export]
macro_rules! export_probe {
    ($ty:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct __VigilProbeExport;
            impl $crate::bindings::probe::exports::vigil::plugin::prober::Guest for __VigilProbeExport {
                fn check() -> $crate::Report {
                    <$ty as $crate::Probe>::check(&$crate::Config::from_host())
                }
            }
            $crate::bindings::probe::export!(__VigilProbeExport with_types_in $crate::bindings::probe);
        };
    };
}

/// Exports a [`Notifier`] implementation as the component's
/// `vigil:plugin/notify-sink@0.1.0`.
///
/// Use it once, at the top level of a `cdylib` crate:
/// `vigil_sdk::export_notifier!(MyNotifier);`. Each call of `notify` reads
/// the configuration with [`Config::from_host`] and calls
/// [`Notifier::notify`]. Off `wasm32` it expands to nothing.
#[macro_export]
macro_rules! export_notifier {
    ($ty:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct __VigilNotifierExport;
            impl $crate::bindings::notifier::exports::vigil::plugin::notify_sink::Guest
                for __VigilNotifierExport
            {
                fn notify(event: $crate::Event) -> ::core::result::Result<(), ::std::string::String> {
                    <$ty as $crate::Notifier>::notify(&$crate::Config::from_host(), &event)
                }
            }
            $crate::bindings::notifier::export!(__VigilNotifierExport with_types_in $crate::bindings::notifier);
        };
    };
}
