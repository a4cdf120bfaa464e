//! Prompts: a simple one, one with arguments, one embedding a resource and
//! one carrying an image.

use rmcp::{
    ErrorData as McpError,
    model::{GetPromptResult, ListPromptsResult},
};
use serde_json::{Map, Value, json};

use crate::{
    fixtures::{PNG_BASE64, complete, string_arg},
    mrtr::fixtures as mrtr,
};

pub const WITH_ARGUMENTS: &str = "test_prompt_with_arguments";

/// The prompts; the MRTR prompt's description carries the prompt list's
/// revision, so a change (`test_trigger_prompt_change`) shows in the list.
pub fn list(revision: u64) -> Result<ListPromptsResult, McpError> {
    complete(json!({
        "prompts": [
            {
                "name": "test_simple_prompt",
                "title": "Simple Test Prompt",
                "description": "A simple prompt without arguments"
            },
            {
                "name": WITH_ARGUMENTS,
                "title": "Prompt With Arguments",
                "description": "A prompt with required arguments",
                "arguments": [
                    { "name": "arg1", "description": "First test argument", "required": true },
                    { "name": "arg2", "description": "Second test argument", "required": true }
                ]
            },
            {
                "name": "test_prompt_with_embedded_resource",
                "title": "Prompt With Embedded Resource",
                "description": "A prompt that includes an embedded resource",
                "arguments": [
                    { "name": "resourceUri", "description": "URI of the resource to embed", "required": true }
                ]
            },
            {
                "name": "test_prompt_with_image",
                "title": "Prompt With Image",
                "description": "A prompt that includes image content"
            },
            {
                "name": mrtr::PROMPT,
                "title": "Prompt Needing Input",
                "description": format!(
                    "MRTR: asks the client's user for a context first (prompt list revision {revision})"
                )
            }
        ]
    }))
}

/// A required string argument, or the `invalid params` error naming it.
fn required<'a>(
    arguments: Option<&'a Map<String, Value>>,
    name: &str,
) -> Result<&'a str, McpError> {
    string_arg(arguments, name).ok_or_else(|| {
        McpError::invalid_params(format!("missing required string argument `{name}`"), None)
    })
}

fn user_text(text: impl Into<String>) -> Value {
    json!({ "role": "user", "content": { "type": "text", "text": text.into() } })
}

pub fn get(
    name: &str,
    arguments: Option<&Map<String, Value>>,
) -> Result<GetPromptResult, McpError> {
    let messages = match name {
        "test_simple_prompt" => vec![user_text("This is a simple prompt for testing.")],
        WITH_ARGUMENTS => {
            let arg1 = required(arguments, "arg1")?;
            let arg2 = required(arguments, "arg2")?;
            vec![user_text(format!(
                "Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"
            ))]
        }
        "test_prompt_with_embedded_resource" => {
            let uri = required(arguments, "resourceUri")?;
            vec![
                json!({
                    "role": "user",
                    "content": {
                        "type": "resource",
                        "resource": {
                            "uri": uri,
                            "mimeType": "text/plain",
                            "text": "Embedded resource content for testing."
                        }
                    }
                }),
                user_text("Please process the embedded resource above."),
            ]
        }
        mrtr::PROMPT => {
            let context = string_arg(arguments, "context").unwrap_or("(none)");
            vec![user_text(format!(
                "Write a short story set in this context: {context}"
            ))]
        }
        "test_prompt_with_image" => vec![
            json!({
                "role": "user",
                "content": { "type": "image", "data": PNG_BASE64, "mimeType": "image/png" }
            }),
            user_text("Please analyze the image above."),
        ],
        _ => {
            return Err(McpError::invalid_params(
                format!("no prompt named `{name}`"),
                None,
            ));
        }
    };
    complete(json!({ "messages": messages }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_prompt_renders() {
        let args = json!({ "arg1": "a", "arg2": "b", "resourceUri": "test://x" });
        let listed = serde_json::to_value(list(0).ok()).unwrap_or_default();
        let names: Vec<&str> = listed["prompts"]
            .as_array()
            .map(|prompts| prompts.iter().filter_map(|p| p["name"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(names.len(), 5);
        for name in names {
            assert!(get(name, args.as_object()).is_ok(), "{name}");
        }
    }

    #[test]
    fn missing_arguments_are_invalid_params() {
        let error = get(WITH_ARGUMENTS, None).err().map(|e| e.code);
        assert_eq!(error, Some(rmcp::model::ErrorCode::INVALID_PARAMS));
    }
}
