//! One probe round: liveness from the runtime (containers), readiness as an
//! MCP round trip on the live session (`ping`, or `tools/list` when
//! configured — never a second `initialize`), the optional tool-call probe,
//! and the application signal of recent real traffic.

use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientRequest, ListToolsRequest, ServerResult,
};
use tokio::time::Instant;

use super::Supervisor;
use crate::backend::{BackendError, Connection, reach};
use crate::config::{Readiness, Transport};
use crate::health::machine::Input;
use crate::runtime::RuntimeError;

impl Supervisor {
    /// One probe round. `conn` is the shared connection; `None` for a
    /// `forward_auth` backend, whose readiness is an HTTP round trip to its
    /// endpoint (see `backend::reach`) and which has no tool probe.
    pub(super) async fn probe(&mut self, conn: Option<&Connection>) -> Input {
        let health = self.backend.config.health.clone();
        if self.runtime.kind() == "container" {
            match self.runtime.inspect().await {
                Err(RuntimeError::Infrastructure(e)) => return Input::InfraFailed(e),
                Ok(i) if !i.running => {
                    let summary = i
                        .exit
                        .map(|e| e.summary)
                        .unwrap_or_else(|| "container is not running".into());
                    self.last_exit = Some(summary.clone());
                    return Input::Exited(summary);
                }
                _ => {}
            }
        }
        let t0 = Instant::now();
        let answer = match (conn, &self.backend.config.transport) {
            (None, Transport::Http { url, headers, .. }) => {
                let serving = self.backend.serving();
                let url = serving.url().unwrap_or(url);
                reach(&self.backend.name, url, headers, health.timeout)
                    .await
                    .map(|_| ())
            }
            (None, Transport::Stdio { .. }) => Err(BackendError::Transport {
                backend: self.backend.name.clone(),
                reason: "no connection to probe".into(),
                stderr: vec![],
            }),
            (Some(conn), _) => match health.readiness {
                Readiness::Ping => conn.ping(health.timeout).await,
                Readiness::ListTools => conn
                    .probe_request(
                        ClientRequest::ListToolsRequest(ListToolsRequest::default()),
                        health.timeout,
                    )
                    .await
                    .map(|_| ()),
            },
        };
        let latency = t0.elapsed();
        crate::metrics::get().probe(&self.backend.name, answer.is_ok().then_some(latency));
        match answer {
            Ok(_) => {
                self.latency = Some(latency);
                let mut degraded = None;
                if latency > health.degraded_latency {
                    degraded = Some(format!("slow: the readiness probe took {}", ms(latency)));
                }
                if let (Some(tp), Some(conn)) = (&health.tool_probe, conn) {
                    let mut params = CallToolRequestParams::new(tp.tool.clone());
                    params.arguments = Some(tp.arguments.clone());
                    let t1 = Instant::now();
                    let r = conn
                        .probe_request(
                            ClientRequest::CallToolRequest(CallToolRequest::new(params)),
                            health.timeout,
                        )
                        .await;
                    let took = t1.elapsed();
                    match r {
                        Ok(ServerResult::CallToolResult(res)) if res.is_error == Some(true) => {
                            degraded =
                                Some(format!("tool probe `{}` returned an error result", tp.tool));
                        }
                        Ok(_) if took > health.degraded_latency => {
                            degraded =
                                Some(format!("slow: tool probe `{}` took {}", tp.tool, ms(took)));
                        }
                        Ok(_) => {}
                        Err(BackendError::Timeout { .. }) => {
                            return Input::ProbeFailed(format!(
                                "tool probe `{}` got no answer within {}",
                                tp.tool,
                                ms(health.timeout)
                            ));
                        }
                        Err(e) => degraded = Some(format!("tool probe `{}` failed: {e}", tp.tool)),
                    }
                }
                let window = self.backend.stats.summary();
                if window.calls >= u64::from(health.min_calls)
                    && let Some(rate) = window.error_rate()
                    && rate > health.error_rate
                {
                    degraded = Some(format!(
                        "{:.0}% of the last {} tool calls failed",
                        rate * 100.0,
                        window.calls
                    ));
                } else if window.calls >= u64::from(health.min_calls)
                    && let Some(p50) = window.p50
                    && p50 > health.degraded_latency
                {
                    degraded = Some(format!(
                        "slow: tool calls take {} (median of {})",
                        ms(p50),
                        window.calls
                    ));
                }
                Input::ProbeOk { degraded }
            }
            Err(BackendError::Timeout { .. }) => Input::ProbeFailed(format!(
                "no answer to the readiness probe within {}",
                ms(health.timeout)
            )),
            Err(BackendError::Status { status, .. })
                if status == http::StatusCode::TOO_MANY_REQUESTS =>
            {
                Input::ProbeOk {
                    degraded: Some("rate limited: HTTP 429 Too Many Requests".into()),
                }
            }
            Err(BackendError::Status { status, .. })
                if matches!(status.as_u16(), 401 | 403)
                    && has_credentials(&self.backend.config.transport) =>
            {
                Input::ProbeOk {
                    degraded: Some(
                        "reachable, but the configured credentials are refused (HTTP 401/403)"
                            .into(),
                    ),
                }
            }
            // Refused without configured credentials: not ready, not gone.
            Err(e @ BackendError::Status { status, .. })
                if matches!(status.as_u16(), 401 | 403) =>
            {
                Input::ProbeFailed(e.to_string())
            }
            Err(e) if e.is_connection_lost() => Input::Exited(e.to_string()),
            Err(e) => Input::ProbeFailed(e.to_string()),
        }
    }
}

fn ms(d: Duration) -> String {
    humantime::format_duration(Duration::from_millis(d.as_millis() as u64)).to_string()
}

/// Whether a backend error reports one of these HTTP statuses. Matches
/// the forms the HTTP client writes ("HTTP 429", "client error (403
/// Forbidden)"), never bare digits: a URL's port may contain them.
fn has_credentials(t: &Transport) -> bool {
    match t {
        Transport::Http { headers, .. } => headers.keys().any(|k| {
            k.eq_ignore_ascii_case("authorization")
                || k.to_ascii_lowercase().contains("key")
                || k.to_ascii_lowercase().contains("token")
        }),
        Transport::Stdio { .. } => false,
    }
}
