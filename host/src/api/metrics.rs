//! `GET /api/v1/metrics` and `/metrics`: Prometheus text format (0.0.4).
//!
//! Two sources: the instrumented counters and histograms of
//! [`crate::metrics`], and [`StateCollector`], which reads what is current
//! (backend states, restart counts, sessions, plugin states) from the
//! [`Control`] at scrape time, so it never disagrees with the API.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use super::{ApiError, Control};
use crate::health::HealthState;

/// The registry `/metrics` encodes: built once per router.
pub(super) fn registry(control: Arc<dyn Control>) -> Registry {
    let mut registry = Registry::default();
    crate::metrics::get().register(&mut registry);
    registry.register_collector(Box::new(StateCollector { control }));
    registry
}

/// The handler: encodes `registry` on every scrape.
pub(super) async fn scrape(
    State(registry): State<Arc<Registry>>,
) -> Result<impl IntoResponse, ApiError> {
    let mut body = String::with_capacity(16 * 1024);
    prometheus_client::encoding::prometheus_text::encode(&mut body, &registry)
        .map_err(|e| ApiError::Internal(format!("encoding metrics: {e}")))?;
    Ok((
        [(
            header::CONTENT_TYPE,
            prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        )],
        body,
    ))
}

/// Current state, read from the control at scrape time.
struct StateCollector {
    control: Arc<dyn Control>,
}

impl std::fmt::Debug for StateCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StateCollector")
    }
}

impl Collector for StateCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let instances = self.control.instances();

        // One series per backend and state, 1 for the current one: the
        // usual "state set" shape, so `vigil_backend_state{state="offline"} == 1`
        // selects offline backends.
        let mut family = encoder.encode_descriptor(
            "vigil_backend_state",
            "Whether the backend is in this health state (1) or not (0)",
            None,
            MetricType::Gauge,
        )?;
        for r in &instances {
            for s in HealthState::ALL {
                let labels = [("backend", r.name.as_str()), ("state", s.as_str())];
                ConstGauge::new(i64::from(r.state == s)).encode(family.encode_family(&labels)?)?;
            }
        }

        let mut family = encoder.encode_descriptor(
            "vigil_backend_restarts",
            "Restarts of the backend since Vigil first saw it",
            None,
            MetricType::Counter,
        )?;
        for r in &instances {
            let labels = [("backend", r.name.as_str())];
            ConstCounter::new(r.restart_count).encode(family.encode_family(&labels)?)?;
        }

        let mut family = encoder.encode_descriptor(
            "vigil_backend_consecutive_failures",
            "Failed starts in a row (towards quarantine)",
            None,
            MetricType::Gauge,
        )?;
        for r in &instances {
            let labels = [("backend", r.name.as_str())];
            ConstGauge::new(i64::from(r.consecutive_failures))
                .encode(family.encode_family(&labels)?)?;
        }

        if let Some(n) = self.control.sessions() {
            let family = encoder.encode_descriptor(
                "vigil_sessions",
                "Live client sessions",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new(i64::try_from(n).unwrap_or(i64::MAX)).encode(family)?;
        }

        let (_, plugins) = self.control.plugins();
        let mut family = encoder.encode_descriptor(
            "vigil_plugin_state",
            "Whether the plugin is in this state (1) or not (0)",
            None,
            MetricType::Gauge,
        )?;
        for p in &plugins {
            for s in crate::plugins::STATES {
                let labels = [("plugin", p.name.as_str()), ("state", s)];
                ConstGauge::new(i64::from(p.state == s)).encode(family.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}
