//! Logging to Vigil's log (`vigil:plugin/host.log`).
//!
//! Vigil tags each line with the plugin's name (and for probes, the backend)
//! and cuts long messages. Off `wasm32` the lines go to stderr instead.
//! The crate-root macros [`debug!`](crate::debug), [`info!`](crate::info),
//! [`warn!`](crate::warn) and [`error!`](crate::error) take `format!`
//! arguments.

/// Severity of a log line (the WIT enum `vigil:plugin/host.level`).
pub use crate::bindings::probe::vigil::plugin::host::Level;

/// Writes `message` to Vigil's log at `level`.
pub fn log(level: Level, message: &str) {
    #[cfg(target_arch = "wasm32")]
    {
        crate::bindings::probe::vigil::plugin::host::log(level, message);
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let name = match level {
            Level::Debug => "DEBUG",
            Level::Info => "INFO",
            Level::Warn => "WARN",
            Level::Error => "ERROR",
        };
        eprintln!("[plugin {name}] {message}");
    }
}

/// Writes `message` at `debug` level.
pub fn debug(message: &str) {
    log(Level::Debug, message)
}

/// Writes `message` at `info` level.
pub fn info(message: &str) {
    log(Level::Info, message)
}

/// Writes `message` at `warn` level.
pub fn warn(message: &str) {
    log(Level::Warn, message)
}

/// Writes `message` at `error` level.
pub fn error(message: &str) {
    log(Level::Error, message)
}

/// Logs a `format!`-style message at `debug` level to Vigil's log.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)+) => { $crate::log::debug(&::std::format!($($arg)+)) };
}

/// Logs a `format!`-style message at `info` level to Vigil's log.
#[macro_export]
macro_rules! info {
    ($($arg:tt)+) => { $crate::log::info(&::std::format!($($arg)+)) };
}

/// Logs a `format!`-style message at `warn` level to Vigil's log.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)+) => { $crate::log::warn(&::std::format!($($arg)+)) };
}

/// Logs a `format!`-style message at `error` level to Vigil's log.
#[macro_export]
macro_rules! error {
    ($($arg:tt)+) => { $crate::log::error(&::std::format!($($arg)+)) };
}
