//! Vigil's log: stderr, human or JSON, filtered by `log_level` (or
//! `RUST_LOG`), every line masked by the [`Redactor`] (see
//! [`crate::redact::writer`]); with `[telemetry]`, tool-call spans also go
//! to the OTLP collector.
//!
//! Whatever the filter says, the targets that log MCP session ids are kept
//! at `warn` (see [`SESSION_ID_TARGETS`]) unless the filter names them: a
//! session id is a bearer credential, and rmcp logs each new one at `info`.
//! rmcp's service loop ([`NOTIFICATION_TARGET`]) is kept at `warn` too
//! unless the filter names it or a module above it (`rmcp`): it logs every
//! notification a peer sends, payload and all, at `info`, and a chatty
//! backend would write the log full (20,200 lines, 10 MiB in 10 s). Vigil
//! logs each change it acts on at `info` and what backends announce at
//! `debug`, rate-limited (see `backend::heard`).

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

/// rmcp's service loop: logs `received notification notification=…` (the
/// whole payload) for every notification at `info`, and a connection's
/// peer info when it begins.
pub const NOTIFICATION_TARGET: &str = "rmcp::service";

/// The filter `directives` (a `log_level` or `RUST_LOG` value) give, with
/// [`SESSION_ID_TARGETS`] and [`NOTIFICATION_TARGET`] held at `warn`
/// unless they name them themselves (an operator who asks for those lines
/// gets them; for rmcp's service loop, naming `rmcp` is asking).
///
/// # Errors
///
/// `directives` is not a filter.
pub fn filter(directives: &str) -> Result<EnvFilter, tracing_subscriber::filter::ParseError> {
    let mut filter = EnvFilter::builder().parse(directives)?;
    if !directives.contains("streamable_http_server") {
        filter = filter.add_directive(format!("{SESSION_ID_TARGETS}=warn").parse()?);
    }
    if !names(directives, NOTIFICATION_TARGET) {
        filter = filter.add_directive(format!("{NOTIFICATION_TARGET}=warn").parse()?);
    }
    Ok(filter)
}

/// Whether a directive of `directives` is about `target` or a module
/// above it (`rmcp` or `rmcp::service` for `rmcp::service`), as a filter
/// matches targets: by prefix.
fn names(directives: &str, target: &str) -> bool {
    directives.split(',').any(|directive| {
        let named = directive
            .split(['[', '='])
            .next()
            .unwrap_or_default()
            .trim();
        !named.is_empty() && target.starts_with(named)
    })
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
            tracing::info!(target: "rmcp::service", notification = "LoggingMessageNotification { flood }", "received notification");
            tracing::warn!(target: "rmcp::service", "response error");
            tracing::info!(target: "vigil::supervisor", "capabilities changed on re-listing");
        });
        String::from_utf8(out.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn session_targets_stay_at_warn_unless_named() {
        for directives in ["info", "debug", "info,vigil=debug", "rmcp=trace"] {
            let out = logged(directives);
            assert!(!out.contains("sid-1"), "{directives}: {out}");
            assert!(out.contains("session warning"), "{directives}: {out}");
        }
        let named = logged("info,rmcp::transport::streamable_http_server=info");
        assert!(named.contains("sid-1"), "{named}");
    }

    #[test]
    fn notification_payloads_stay_out_unless_rmcp_is_named() {
        // Before: `info` printed every notification a backend sent.
        for directives in ["info", "debug", "trace", "info,vigil=debug"] {
            let out = logged(directives);
            assert!(
                !out.contains("received notification"),
                "{directives}: {out}"
            );
            assert!(!out.contains("Service initialized"), "{directives}: {out}");
            assert!(out.contains("response error"), "{directives}: {out}");
            assert!(out.contains("capabilities changed"), "{directives}: {out}");
        }
        for directives in ["info,rmcp=info", "rmcp::service=info"] {
            let out = logged(directives);
            assert!(out.contains("received notification"), "{directives}: {out}");
        }
        assert!(!logged("info,rmcp::transport=info").contains("received notification"));
    }
}
