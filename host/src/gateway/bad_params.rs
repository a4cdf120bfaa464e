//! Why the params of a known method were refused.
//!
//! rmcp parses a request whose params do not fit its method's type as a
//! custom request, so the gateway sees `tools/call` with `"name": 5` as an
//! unknown method. This tells the two apart: for a method MCP defines, the
//! client gets `-32602 Invalid params` naming the field and what was wrong
//! with it, not `-32601 Method not found`.

use rmcp::ErrorData as McpError;
use rmcp::model::*;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The `-32602` error for `params` of `method`, when `method` is one MCP
/// defines (client to server) and its params do not parse; `None` for a
/// method MCP does not define.
pub fn invalid_params(method: &str, params: Option<&Value>) -> Option<McpError> {
    let problem = match method {
        "initialize" => problem::<InitializeRequestParams>(params),
        "tools/call" => problem::<CallToolRequestParams>(params),
        "resources/read" => problem::<ReadResourceRequestParams>(params),
        "resources/subscribe" => problem::<SubscribeRequestParams>(params),
        "resources/unsubscribe" => problem::<UnsubscribeRequestParams>(params),
        "prompts/get" => problem::<GetPromptRequestParams>(params),
        "completion/complete" => problem::<CompleteRequestParams>(params),
        "logging/setLevel" => problem::<SetLevelRequestParams>(params),
        "tools/list" | "resources/list" | "resources/templates/list" | "prompts/list" => {
            problem::<Option<PaginatedRequestParams>>(params)
        }
        "ping" => None,
        _ => return None,
    };
    let (field, detail) = problem.unwrap_or_else(|| {
        (
            String::new(),
            "the params do not fit this method".to_owned(),
        )
    });
    let message = if field.is_empty() {
        format!("Invalid params for {method}: {detail}")
    } else {
        format!("Invalid params for {method}: `{field}`: {detail}")
    };
    Some(McpError::invalid_params(
        message,
        Some(json!({"method": method, "field": field})),
    ))
}

/// The field and reason `params` fail to parse as `T`, if they do.
fn problem<T: DeserializeOwned>(params: Option<&Value>) -> Option<(String, String)> {
    let value = params.cloned().unwrap_or(Value::Null);
    match serde_path_to_error::deserialize::<_, T>(value) {
        Ok(_) => None,
        Err(e) => {
            let path = e.path().to_string();
            let field = if path == "." { String::new() } else { path };
            Some((field, e.into_inner().to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrong_type_names_the_field() {
        let e = invalid_params("tools/call", Some(&json!({"name": 5}))).unwrap();
        assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
        assert_eq!(
            e.message,
            "Invalid params for tools/call: `name`: invalid type: integer `5`, expected a string"
        );
        let e = invalid_params("resources/read", Some(&json!({"uri": ["x"]}))).unwrap();
        assert!(
            e.message
                .starts_with("Invalid params for resources/read: `uri`: invalid type"),
            "{}",
            e.message
        );
    }

    #[test]
    fn a_missing_field_is_named() {
        let e = invalid_params("prompts/get", Some(&json!({}))).unwrap();
        assert_eq!(
            e.message,
            "Invalid params for prompts/get: missing field `name`"
        );
    }

    #[test]
    fn unknown_methods_are_left_alone() {
        assert!(invalid_params("tools/explode", Some(&json!({}))).is_none());
    }
}
