//! The tools this server lists: names, descriptions and input schemas, as
//! the conformance suite expects them.

use rmcp::{ErrorData as McpError, model::Tool};
use serde_json::{Value, json};

use super::diagnostic;
use crate::{
    changes::{Changes, List},
    fixtures::typed,
    mrtr::fixtures as mrtr,
};

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

/// SEP-1613 / SEP-2106: a JSON Schema 2020-12 input schema whose `$schema`,
/// `$defs` (with an `$anchor`), composition (`allOf`/`anyOf`), conditional
/// (`if`/`then`/`else`) and `additionalProperties` keywords must reach the
/// client untouched (the suite's canonical fixture).
fn json_schema_2020_12() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {
            "address": {
                "$anchor": "addressDef",
                "type": "object",
                "properties": {
                    "street": { "type": "string" },
                    "city": { "type": "string" }
                }
            }
        },
        "properties": {
            "name": { "type": "string" },
            "address": { "$ref": "#/$defs/address" },
            "contactMethod": { "type": "string", "enum": ["phone", "email"] },
            "phone": { "type": "string" },
            "email": { "type": "string" }
        },
        "allOf": [{ "anyOf": [{ "required": ["phone"] }, { "required": ["email"] }] }],
        "if": {
            "properties": { "contactMethod": { "const": "phone" } },
            "required": ["contactMethod"]
        },
        "then": { "required": ["phone"] },
        "else": { "required": ["email"] },
        "additionalProperties": false
    })
}

/// The tools of the 2026-07-28 suite: the MRTR fixtures and the
/// diagnostics of `server-stateless`. The tool-change trigger's description
/// carries the tool list's revision, so a change shows in the list itself.
fn modern_entries(tool_revision: u64) -> Vec<(&'static str, String, Value)> {
    let mut entries: Vec<(&'static str, String, Value)> = mrtr::TOOLS
        .iter()
        .map(|(name, description)| (*name, (*description).to_owned(), no_arguments()))
        .collect();
    entries.extend([
        (
            diagnostic::MISSING_CAPABILITY,
            "Needs the client's sampling capability; refused with -32021 without it".to_owned(),
            no_arguments(),
        ),
        (
            diagnostic::LOGGING,
            "Sends a log message only when the request's threshold admits one".to_owned(),
            no_arguments(),
        ),
        (
            diagnostic::TRIGGER_TOOL_CHANGE,
            format!(
                "Changes the tool list and tells subscribers (tool list revision {tool_revision})"
            ),
            no_arguments(),
        ),
        (
            diagnostic::TRIGGER_PROMPT_CHANGE,
            "Changes the prompt list and tells subscribers".to_owned(),
            no_arguments(),
        ),
    ]);
    entries
}

/// `(name, description, input schema)` of every tool.
fn entries(tool_revision: u64) -> Vec<(&'static str, String, Value)> {
    let fixed: Vec<(&'static str, &'static str, Value)> = vec![
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
    ];
    fixed
        .into_iter()
        .map(|(name, description, schema)| (name, description.to_owned(), schema))
        .chain(modern_entries(tool_revision))
        .collect()
}

pub fn tools(changes: &Changes) -> Result<Vec<Tool>, McpError> {
    entries(changes.revision(List::Tools))
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
        let tools = tools(&Changes::default()).unwrap_or_default();
        assert_eq!(tools.len(), entries(0).len());
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
