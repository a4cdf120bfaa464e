//! Fixed payloads the conformance suite expects, and the helper that turns
//! wire-shaped JSON into rmcp's typed values.
//!
//! The suite describes every expected answer as JSON, so the fixtures are
//! written the same way: what this server sends is easy to compare with the
//! suite's text. Converting them never panics; a fixture that does not fit
//! rmcp's model becomes an internal error (and a unit test catches it first).

use rmcp::ErrorData as McpError;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// A 1x1 red PNG pixel, base64.
pub const PNG_BASE64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

/// A minimal (silent, one sample) WAV file, base64.
pub const WAV_BASE64: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";

/// The logger name put on every `notifications/message` this server sends.
pub const LOGGER: &str = "conformance-backend";

/// Convert wire-shaped JSON into an rmcp model type.
pub fn typed<T: DeserializeOwned>(value: Value) -> Result<T, McpError> {
    serde_json::from_value(value).map_err(|error| {
        McpError::internal_error(format!("fixture does not fit the MCP model: {error}"), None)
    })
}

/// Convert a wire-shaped *result* into an rmcp model type, marking it
/// `resultType: "complete"`. 2026-07-28 requires the field on every result;
/// rmcp removes it again for peers on older revisions, which have none.
pub fn complete<T: DeserializeOwned>(mut value: Value) -> Result<T, McpError> {
    if let Some(object) = value.as_object_mut() {
        object.insert("resultType".to_owned(), Value::from("complete"));
    }
    typed(value)
}

/// Read an optional string argument out of a tool call or prompt's arguments.
pub fn string_arg<'a>(
    arguments: Option<&'a serde_json::Map<String, Value>>,
    name: &str,
) -> Option<&'a str> {
    arguments
        .and_then(|args| args.get(name))
        .and_then(Value::as_str)
}
