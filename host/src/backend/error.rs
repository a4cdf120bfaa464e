//! Errors of backend connections, each naming the backend.

use std::sync::Arc;
use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::model::ErrorCode;

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("backend '{backend}': cannot start `{command}`: {source}")]
    Spawn { backend: Arc<str>, command: String, #[source] source: std::io::Error },
    #[error("backend '{backend}': MCP handshake failed: {reason}{}", stderr_suffix(.stderr))]
    Handshake { backend: Arc<str>, reason: String, stderr: Vec<String> },
    #[error("backend '{backend}': connection failed: {reason}{}", stderr_suffix(.stderr))]
    Transport { backend: Arc<str>, reason: String, stderr: Vec<String> },
    #[error("backend '{backend}' did not answer within {}", humantime::format_duration(*.timeout))]
    Timeout { backend: Arc<str>, timeout: Duration },
    #[error("backend '{backend}': request cancelled by the client")]
    Cancelled { backend: Arc<str> },
    /// The backend answered with a JSON-RPC error; passed through as is.
    #[error("{}", .0.message)]
    Mcp(McpError),
}

fn stderr_suffix(lines: &[String]) -> String {
    match lines.last() {
        Some(last) => format!(" (last stderr line: {last})"),
        None => String::new(),
    }
}

impl BackendError {
    /// Whether the connection is unusable after this error.
    pub fn is_connection_lost(&self) -> bool {
        matches!(self, BackendError::Transport { .. })
    }

    /// The JSON-RPC error a client sees.
    pub fn into_mcp(self) -> McpError {
        match self {
            BackendError::Mcp(e) => e,
            BackendError::Timeout { .. } => McpError::new(ErrorCode::INTERNAL_ERROR, self.to_string(), None),
            other => McpError::new(ErrorCode::INTERNAL_ERROR, other.to_string(), None),
        }
    }
}
