//! Vigil's log: stderr, human or JSON, filtered by `log_level` (or
//! `RUST_LOG`), every line masked by the [`Redactor`] (see
//! [`crate::redact::writer`]); with `[telemetry]`, tool-call spans also go
//! to the OTLP collector.
//!
//! Whatever the filter says, the targets that log MCP session ids are kept
//! at `warn` (see [`SESSION_ID_TARGETS`]) unless the filter names them: a
//! session id is a bearer credential, and rmcp logs each new one at `info`.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::prelude::*;

use crate::config::Config;
use crate::redact::Redactor;
use crate::redact::writer::Masking;

/// rmcp's streamable HTTP session manager: logs `create new session
/// session_id=…` at `info`, and its session worker's span carries the id
/// (so every line inside it would print it).
pub const SESSION_ID_TARGETS: &str = "rmcp::transport::streamable_http_server::session";

/// The filter `directives` (a `log_level` or `RUST_LOG` value) give, with
/// [`SESSION_ID_TARGETS`] held at `warn` unless they name it themselves
/// (an operator who asks for those lines gets them).
///
/// # Errors
///
/// `directives` is not a filter.
pub fn filter(directives: &str) -> Result<EnvFilter, tracing_subscriber::filter::ParseError> {
    let filter = EnvFilter::builder().parse(directives)?;
    if directives.contains("streamable_http_server") {
        return Ok(filter);
    }
    Ok(filter.add_directive(format!("{SESSION_ID_TARGETS}=warn").parse()?))
}

/// Installs the global subscriber. Returns the telemetry exporter to shut
/// down at exit, if `[telemetry]` is on.
///
/// # Errors
///
/// The telemetry exporter cannot be built.
pub fn init(
    config: &Config,
    redactor: Redactor,
) -> Result<Option<crate::telemetry::Exporter>, crate::telemetry::TelemetryError> {
    // RUST_LOG wins over log_level; a RUST_LOG that is not a filter falls
    // back to log_level (validated with the config).
    let filter = std::env::var("RUST_LOG")
        .ok()
        .filter(|d| !d.trim().is_empty())
        .and_then(|d| filter(&d).ok())
        .or_else(|| filter(&config.log_level).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(Masking::new(redactor, std::io::stderr))
        .with_ansi(std::io::stderr().is_terminal());
    let fmt = if config.log_json {
        fmt.json().boxed()
    } else {
        fmt.boxed()
    };
    let (otel, exporter) = match crate::telemetry::layer(&config.telemetry)? {
        Some((layer, exporter)) => (Some(layer), Some(exporter)),
        None => (None, None),
    };
    tracing_subscriber::registry()
        .with(fmt.with_filter(filter))
        .with(otel)
        .init();
    Ok(exporter)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Collect(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Collect {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What gets through `filter(directives)` of a few events like rmcp's.
    fn logged(directives: &str) -> String {
        let out = Collect::default();
        let writer = out.clone();
        let fmt = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .with_filter(filter(directives).unwrap());
        let subscriber = tracing_subscriber::registry().with(fmt);
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(target: "rmcp::transport::streamable_http_server::session::local", session_id = "sid-1", "create new session");
            tracing::warn!(target: "rmcp::transport::streamable_http_server::session::local", "session warning");
            tracing::info!(target: "rmcp::service", "Service initialized as server");
        });
        String::from_utf8(out.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn session_targets_stay_at_warn_unless_named() {
        for directives in ["info", "debug", "info,vigil=debug", "rmcp=trace"] {
            let out = logged(directives);
            assert!(!out.contains("sid-1"), "{directives}: {out}");
            assert!(out.contains("session warning"), "{directives}: {out}");
            assert!(out.contains("Service initialized"), "{directives}: {out}");
        }
        let named = logged("info,rmcp::transport::streamable_http_server=info");
        assert!(named.contains("sid-1"), "{named}");
    }
}
