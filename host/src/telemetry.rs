//! Optional OpenTelemetry export of tool-call spans (`[telemetry]
//! otlp_endpoint`): every routed `tools/call` is a span (target
//! [`TOOL_CALL`]) with the backend, the tool and the outcome, sent over
//! OTLP/HTTP in batches. Off unless configured; only these spans are
//! exported, whatever the log level.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;

use crate::config::TelemetryConfig;

/// The `tracing` target of tool-call spans (trace level: only this layer
/// asks for them unless logs are at trace).
pub const TOOL_CALL: &str = "vigil::tool_call";

/// Why the exporter could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("telemetry: cannot export to {endpoint}: {reason}")]
pub struct TelemetryError {
    endpoint: String,
    reason: String,
}

/// The running exporter; [`Exporter::shutdown`] flushes what is pending.
pub struct Exporter {
    provider: SdkTracerProvider,
}

impl Exporter {
    /// Sends the spans still buffered and stops the export thread. Call
    /// once, at exit, outside async code (it blocks on the last export).
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "telemetry: the last spans may not have been exported");
        }
    }
}

/// The layer that exports tool-call spans, or `None` when telemetry is off.
///
/// # Errors
///
/// The exporter cannot be built (the endpoint is unusable).
pub fn layer<S>(
    config: &TelemetryConfig,
) -> Result<Option<(impl Layer<S>, Exporter)>, TelemetryError>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let Some(endpoint) = &config.otlp_endpoint else {
        return Ok(None);
    };
    let url = format!("{endpoint}/v1/traces");
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(&url)
        .build()
        .map_err(|e| TelemetryError {
            endpoint: url.clone(),
            reason: e.to_string(),
        })?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            Resource::builder()
                .with_service_name(config.service_name.clone())
                .build(),
        )
        .build();
    let tracer = provider.tracer("vigil");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(Targets::new().with_target(TOOL_CALL, tracing::Level::TRACE));
    Ok(Some((layer, Exporter { provider })))
}
