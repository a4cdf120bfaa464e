//! The host side of `vigil:plugin/host` and `vigil:plugin/target`: what a
//! plugin can ask of Vigil. A probe reaches its own target backend only
//! (the store carries that one connection, nothing else).

use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientRequest, ListToolsRequest,
    PaginatedRequestParams, ServerResult,
};

use super::bindings::probe::vigil::plugin::{host, target};
use super::log_rate::{Admit, report_dropped};
use super::sandbox::{State, bounded};
use crate::backend::BackendError;

/// Longest log line a plugin may write.
const MAX_LOG: usize = 4096;
/// Most pages of `tools/list` followed.
const MAX_PAGES: usize = 100;

impl host::Host for State {
    async fn log(&mut self, level: host::Level, message: String) {
        // Past its rate a line is dropped before anything is done with it.
        match self.budget.log.admit(tokio::time::Instant::now()) {
            Admit::Drop => {
                if !self.log_limited {
                    self.log_limited = true;
                    let l = &self.budget.log;
                    let detail = format!(
                        "it logged faster than {} lines a second (after a burst of {}); \
                         the lines past that are dropped and counted",
                        l.per_sec(),
                        l.burst()
                    );
                    self.hit_limit("limits.log_rate", detail);
                }
                return;
            }
            Admit::Write { dropped } => report_dropped(&self.label, dropped),
        }
        let message = bounded(message, MAX_LOG);
        let plugin = self.label.as_str();
        match level {
            host::Level::Debug => tracing::debug!(plugin, "{message}"),
            host::Level::Info => tracing::info!(plugin, "{message}"),
            host::Level::Warn => tracing::warn!(plugin, "{message}"),
            host::Level::Error => tracing::error!(plugin, "{message}"),
        }
    }

    async fn config(&mut self) -> Vec<(String, String)> {
        self.config.clone()
    }
}

impl State {
    /// The timeout for a target request asking for `ms`: at most what is
    /// left of the call's deadline, less a margin so the plugin can still
    /// report what it saw before the deadline stops it. The flag says
    /// whether the deadline cut the plugin's own timeout.
    fn budget(&self, ms: u32) -> (Duration, bool) {
        const MARGIN: Duration = Duration::from_millis(50);
        let asked = Duration::from_millis(u64::from(ms));
        let left = self
            .deadline
            .saturating_duration_since(tokio::time::Instant::now())
            .saturating_sub(MARGIN);
        (asked.min(left), left < asked)
    }

    /// Runs one target request of `what` under the budget for `ms`. A
    /// timeout the deadline imposed is recorded in `cut_short`: the plugin
    /// still sees `timeout`, but its verdict no longer counts.
    async fn within<T>(
        &mut self,
        what: &str,
        ms: u32,
        request: impl AsyncFnOnce(Duration) -> Result<T, BackendError>,
    ) -> Result<T, target::McpError> {
        let (budget, cut) = self.budget(ms);
        let result = request(budget).await;
        if cut && matches!(result, Err(BackendError::Timeout { .. })) {
            self.cut_short = Some(format!(
                "its {what} asked for {ms} ms but only {} ms of its deadline were left; \
                 raise `[limits] deadline` in its manifest above the timeouts it uses",
                budget.as_millis()
            ));
        }
        result.map_err(mcp_error)
    }

    /// Spends one of the call's target requests on `what`, or refuses it
    /// (nothing is sent) once `limits.target_requests` are spent. A plugin
    /// retrying in a loop holds no gateway thread: past its first slice it
    /// runs on the plugin threads and yields at every slice (`runner.rs`).
    async fn spend_target_request(&mut self, what: &str) -> Result<(), target::McpError> {
        if self.target_left == 0 {
            let cap = self.target_cap;
            self.hit_limit(
                "limits.target_requests",
                format!("its {what} was refused: one call may send {cap} requests to its target"),
            );
            return Err(target::McpError::Unavailable(format!(
                "{what} not sent: this call already sent its {cap} requests to the target \
                 (limits.target_requests)"
            )));
        }
        self.target_left -= 1;
        Ok(())
    }

    fn connection(&self) -> Result<std::sync::Arc<crate::backend::Connection>, target::McpError> {
        let t = self
            .target
            .as_ref()
            .ok_or_else(|| target::McpError::Unavailable("this plugin has no target".into()))?;
        t.conn.clone().ok_or_else(|| {
            target::McpError::Unavailable(format!(
                "backend '{}' has no live MCP connection now",
                t.name
            ))
        })
    }
}

fn mcp_error(e: BackendError) -> target::McpError {
    match e {
        BackendError::Timeout { .. } => target::McpError::Timeout,
        BackendError::Mcp(e) => target::McpError::Rpc(target::RpcError {
            code: i64::from(e.code.0),
            message: e.message.to_string(),
        }),
        other => target::McpError::Transport(other.to_string()),
    }
}

impl target::Host for State {
    async fn name(&mut self) -> String {
        self.target
            .as_ref()
            .map(|t| t.name.to_string())
            .unwrap_or_default()
    }

    async fn ping(&mut self, timeout_ms: u32) -> Result<(), target::McpError> {
        let conn = self.connection()?;
        self.spend_target_request("ping").await?;
        self.within("ping", timeout_ms, async |t| conn.ping(t).await)
            .await
    }

    async fn list_tools(&mut self, timeout_ms: u32) -> Result<Vec<target::Tool>, target::McpError> {
        let conn = self.connection()?;
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let mut req = ListToolsRequest::default();
            if let Some(c) = cursor.take() {
                req.params = Some(PaginatedRequestParams::default().with_cursor(Some(c)));
            }
            let request = ClientRequest::ListToolsRequest(req);
            self.spend_target_request("tools/list").await?;
            let page = match self
                .within("tools/list", timeout_ms, async |t| {
                    conn.probe_request(request, t).await
                })
                .await?
            {
                ServerResult::ListToolsResult(r) => r,
                _ => {
                    return Err(target::McpError::Transport(
                        "tools/list: unexpected answer".into(),
                    ));
                }
            };
            for t in page.tools {
                tools.push(target::Tool {
                    name: t.name.to_string(),
                    description: t.description.map(|d| d.to_string()),
                    input_schema: serde_json::Value::Object((*t.input_schema).clone()).to_string(),
                });
            }
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => return Ok(tools),
            }
        }
        Ok(tools)
    }

    async fn call_tool(
        &mut self,
        name: String,
        arguments: String,
        timeout_ms: u32,
    ) -> Result<target::ToolResult, target::McpError> {
        let args = match serde_json::from_str::<serde_json::Value>(&arguments) {
            Ok(serde_json::Value::Object(map)) => map,
            _ => {
                return Err(target::McpError::Rpc(target::RpcError {
                    code: -32602,
                    message: "arguments must be a JSON object, like {}".into(),
                }));
            }
        };
        let conn = self.connection()?;
        let mut params = CallToolRequestParams::new(name);
        params.arguments = Some(args);
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        self.spend_target_request("tools/call").await?;
        let answer = self
            .within("tools/call", timeout_ms, async |t| {
                conn.probe_request(request, t).await
            })
            .await?;
        let ServerResult::CallToolResult(r) = answer else {
            return Err(target::McpError::Transport(
                "tools/call: unexpected answer".into(),
            ));
        };
        let text: Vec<String> = r
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect();
        Ok(target::ToolResult {
            is_error: r.is_error == Some(true),
            text: text.join("\n"),
            content: serde_json::to_string(&r.content).unwrap_or_else(|_| "[]".into()),
            structured: r.structured_content.map(|v| v.to_string()),
        })
    }
}
