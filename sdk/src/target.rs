//! MCP calls to the probe's own target backend (`vigil:plugin/target`).
//!
//! Only probes may use this module: the `notifier` world does not import
//! `target`, so a notifier component that calls it fails to load. Each call
//! takes a timeout, which Vigil bounds by the probe's own deadline. Off
//! `wasm32` every call returns [`McpError::Unavailable`].

use std::fmt;
use std::time::Duration;

#[cfg(target_arch = "wasm32")]
use crate::bindings::probe::vigil::plugin::target as raw;

/// One tool the backend lists (`name`, `description`, `input_schema` as JSON
/// text).
pub use crate::bindings::probe::vigil::plugin::target::Tool;
/// The result of a tool call (`is_error`, `text`, `content`, `structured`).
pub use crate::bindings::probe::vigil::plugin::target::ToolResult;

/// Why an MCP operation did not succeed (the WIT variant `mcp-error`, with a
/// readable [`Display`](fmt::Display)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpError {
    /// No answer within the timeout.
    Timeout,
    /// The backend has no live MCP connection now; the text says why.
    Unavailable(String),
    /// The backend answered with a JSON-RPC error. Vigil itself answers
    /// code -32602 for arguments that are not a JSON object.
    Rpc {
        /// The JSON-RPC error code.
        code: i64,
        /// The error message.
        message: String,
    },
    /// The connection failed (transport error, malformed answer).
    Transport(String),
}

impl fmt::Display for McpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            McpError::Timeout => f.write_str("timed out"),
            McpError::Unavailable(why) => write!(f, "backend unavailable: {why}"),
            McpError::Rpc { code, message } => write!(f, "JSON-RPC error {code}: {message}"),
            McpError::Transport(why) => write!(f, "transport error: {why}"),
        }
    }
}

impl std::error::Error for McpError {}

#[cfg(target_arch = "wasm32")]
impl From<raw::McpError> for McpError {
    fn from(e: raw::McpError) -> McpError {
        match e {
            raw::McpError::Timeout => McpError::Timeout,
            raw::McpError::Unavailable(s) => McpError::Unavailable(s),
            raw::McpError::Rpc(r) => McpError::Rpc {
                code: r.code,
                message: r.message,
            },
            raw::McpError::Transport(s) => McpError::Transport(s),
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn off_wasm() -> McpError {
    McpError::Unavailable("not running inside a Vigil plugin component".into())
}

/// `timeout` in whole milliseconds for the WIT calls, capped at `u32::MAX`.
fn timeout_ms(timeout: Duration) -> u32 {
    u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX)
}

/// The target backend's name in Vigil's config (empty off `wasm32`).
pub fn name() -> String {
    #[cfg(target_arch = "wasm32")]
    {
        raw::name()
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        String::new()
    }
}

/// An MCP `ping` on the backend's live session.
pub fn ping(timeout: Duration) -> Result<(), McpError> {
    #[cfg(target_arch = "wasm32")]
    {
        raw::ping(timeout_ms(timeout)).map_err(McpError::from)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = timeout_ms(timeout);
        Err(off_wasm())
    }
}

/// `tools/list`, every page.
pub fn list_tools(timeout: Duration) -> Result<Vec<Tool>, McpError> {
    #[cfg(target_arch = "wasm32")]
    {
        raw::list_tools(timeout_ms(timeout)).map_err(McpError::from)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = timeout_ms(timeout);
        Err(off_wasm())
    }
}

/// `tools/call` of `name` with `arguments`, which should be a JSON object
/// (anything else is answered `Rpc { code: -32602, .. }` without a request).
pub fn call_tool(
    name: &str,
    arguments: &serde_json::Value,
    timeout: Duration,
) -> Result<ToolResult, McpError> {
    call_tool_json(name, &arguments.to_string(), timeout)
}

/// `tools/call` of `name` with `arguments` already serialized as JSON text
/// (`"{}"` for none).
pub fn call_tool_json(
    name: &str,
    arguments: &str,
    timeout: Duration,
) -> Result<ToolResult, McpError> {
    #[cfg(target_arch = "wasm32")]
    {
        raw::call_tool(name, arguments, timeout_ms(timeout)).map_err(McpError::from)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = (name, arguments, timeout_ms(timeout));
        Err(off_wasm())
    }
}

impl ToolResult {
    /// `structured` parsed as JSON: `None` when the tool returned no
    /// `structuredContent`, `Some(Err)` when it is not valid JSON.
    pub fn structured_json(&self) -> Option<Result<serde_json::Value, String>> {
        self.structured.as_deref().map(|s| {
            serde_json::from_str(s).map_err(|e| format!("structuredContent is not JSON: {e}"))
        })
    }

    /// The result as JSON: `structured` when present, else `text` parsed as
    /// JSON (many tools return a JSON document as text).
    pub fn json(&self) -> Result<serde_json::Value, String> {
        match self.structured_json() {
            Some(v) => v,
            None => serde_json::from_str(self.text.trim())
                .map_err(|e| format!("tool result text is not JSON: {e}")),
        }
    }

    /// The `content` array parsed as JSON.
    pub fn content_json(&self) -> Result<serde_json::Value, String> {
        serde_json::from_str(&self.content)
            .map_err(|e| format!("tool result content is not JSON: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(text: &str, structured: Option<&str>) -> ToolResult {
        ToolResult {
            is_error: false,
            text: text.into(),
            content: "[]".into(),
            structured: structured.map(Into::into),
        }
    }

    #[test]
    fn json_prefers_structured() {
        let r = result("{\"a\":1}", Some("{\"b\":2}"));
        assert_eq!(r.json().unwrap(), serde_json::json!({"b": 2}));
        let r = result(" {\"a\":1} ", None);
        assert_eq!(r.json().unwrap(), serde_json::json!({"a": 1}));
        assert!(result("plain", None).json().is_err());
        assert!(result("", Some("nope")).structured_json().unwrap().is_err());
    }

    #[test]
    fn display_and_off_wasm() {
        let e = McpError::Rpc {
            code: -32602,
            message: "bad".into(),
        };
        assert_eq!(e.to_string(), "JSON-RPC error -32602: bad");
        assert_eq!(McpError::Timeout.to_string(), "timed out");
        assert!(matches!(
            ping(Duration::from_secs(1)),
            Err(McpError::Unavailable(_))
        ));
        assert_eq!(timeout_ms(Duration::from_secs(u64::MAX)), u32::MAX);
    }
}
