//! The tools this server lists: names, descriptions and input schemas, as
//! the conformance suite expects them.

use rmcp::{ErrorData as McpError, model::Tool};
use serde_json::{Value, json};

use crate::fixtures::typed;

fn no_arguments() -> Value {
    json!({ "type": "object", "properties": {} })
}

fn one_string(name: &str, description: &str) -> Value {
    json!({
        "type": "object",
        "properties": { name: { "type": "string", "description": description } },
        "required": [name]
    })
}

/// SEP-1613: a JSON Schema 2020-12 input schema whose `$schema`, `$defs` and
/// `additionalProperties` must reach the client untouched.
fn json_schema_2020_12() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {
            "address": {
                "type": "object",
                "properties": {
                    "street": { "type": "string" },
                    "city": { "type": "string" }
                }
            }
        },
        "properties": {
            "name": { "type": "string" },
            "address": { "$ref": "#/$defs/address" }
        },
        "additionalProperties": false
    })
}

/// `(name, description, input schema)` of every tool.
fn entries() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        (
            "test_simple_text",
            "Tests simple text content response",
            no_arguments(),
        ),
        (
            "test_image_content",
            "Tests image content response",
            no_arguments(),
        ),
        (
            "test_audio_content",
            "Tests audio content response",
            no_arguments(),
        ),
        (
            "test_embedded_resource",
            "Tests embedded resource content response",
            no_arguments(),
        ),
        (
            "test_multiple_content_types",
            "Tests response with multiple content types (text, image, resource)",
            no_arguments(),
        ),
        (
            "test_tool_with_logging",
            "Tests tool that emits log messages during execution",
            no_arguments(),
        ),
        (
            "test_tool_with_progress",
            "Tests tool that reports progress notifications",
            no_arguments(),
        ),
        (
            "test_error_handling",
            "Tests error response handling",
            no_arguments(),
        ),
        (
            crate::reconnect::TOOL,
            "Tests SSE stream disconnection and client reconnection (SEP-1699): closes the \
             stream mid-call and answers after the client reconnects",
            no_arguments(),
        ),
        (
            "test_sampling",
            "Tests server-initiated sampling (LLM completion request)",
            one_string("prompt", "The prompt to send to the LLM"),
        ),
        (
            "test_elicitation",
            "Tests server-initiated elicitation (user input request)",
            one_string("message", "The message to show the user"),
        ),
        (
            "test_elicitation_sep1034_defaults",
            "Tests elicitation with default values per SEP-1034",
            no_arguments(),
        ),
        (
            "test_elicitation_sep1330_enums",
            "Tests elicitation with enum schema improvements per SEP-1330",
            no_arguments(),
        ),
        (
            "json_schema_2020_12_tool",
            "Tool with JSON Schema 2020-12 features for conformance testing (SEP-1613)",
            json_schema_2020_12(),
        ),
    ]
}

pub fn tools() -> Result<Vec<Tool>, McpError> {
    entries()
        .into_iter()
        .map(|(name, description, schema)| {
            typed(json!({ "name": name, "description": description, "inputSchema": schema }))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_fits_the_model_and_keeps_its_schema() {
        let tools = tools().unwrap_or_default();
        assert_eq!(tools.len(), entries().len());
        let listed = serde_json::to_value(&tools).unwrap_or_default();
        let special = listed
            .as_array()
            .and_then(|tools| {
                tools
                    .iter()
                    .find(|t| t["name"] == "json_schema_2020_12_tool")
            })
            .cloned()
            .unwrap_or_default();
        assert_eq!(special["inputSchema"], json_schema_2020_12());
    }
}
