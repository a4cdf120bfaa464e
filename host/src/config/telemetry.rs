//! `[telemetry]`: optional OpenTelemetry export of tool-call spans.

use serde::Deserialize;

use super::Problems;

/// `[telemetry]`. Absent: nothing is exported.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TelemetryConfig {
    /// `otlp_endpoint`: an OTLP/HTTP collector's base URL, such as
    /// `http://127.0.0.1:4318`; spans go to `<endpoint>/v1/traces`.
    pub otlp_endpoint: Option<String>,
    /// `service_name`: the `service.name` resource attribute. Default `vigil`.
    pub service_name: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTelemetry {
    pub otlp_endpoint: Option<String>,
    pub service_name: Option<String>,
}

impl Problems {
    pub(super) fn telemetry(&mut self, raw: Option<RawTelemetry>) -> TelemetryConfig {
        let raw = raw.unwrap_or_default();
        let otlp_endpoint = raw.otlp_endpoint.and_then(|e| {
            let e = e.trim().trim_end_matches('/').to_owned();
            match reqwest::Url::parse(&e) {
                Ok(u) if matches!(u.scheme(), "http" | "https") && u.has_host() => Some(e),
                _ => {
                    self.add(
                        "telemetry.otlp_endpoint",
                        format!("`{e}` is not an http(s) URL: use the collector's OTLP/HTTP address, e.g. \"http://127.0.0.1:4318\""),
                    );
                    None
                }
            }
        });
        let service_name = raw.service_name.unwrap_or_else(|| "vigil".into());
        if service_name.trim().is_empty() {
            self.add(
                "telemetry.service_name",
                "must not be empty (leave it out for \"vigil\")",
            );
        }
        TelemetryConfig {
            otlp_endpoint,
            service_name,
        }
    }
}
