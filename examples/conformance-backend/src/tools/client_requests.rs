//! Tools that ask the client something in the middle of a call:
//! `sampling/createMessage` and `elicitation/create`.
//!
//! A client that did not declare the capability, or a request that fails,
//! yields a tool-level error (`isError: true`), never a protocol error.

#![allow(deprecated)] // rmcp marks sampling deprecated (SEP-2577).

use rmcp::{
    ErrorData as McpError, Peer, RoleServer,
    model::{CallToolResult, ContentBlock, CreateMessageRequestParams},
};
use serde_json::{Value, json};

use crate::{elicitation, fixtures::typed};

fn tool_error(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

/// `test_sampling`: ask the client's LLM to answer `prompt`.
pub async fn sampling(
    peer: &Peer<RoleServer>,
    prompt: Option<&str>,
) -> Result<CallToolResult, McpError> {
    let Some(prompt) = prompt else {
        return Ok(tool_error("argument `prompt` (a string) is required"));
    };
    let declared = peer
        .peer_info()
        .is_some_and(|info| info.capabilities.sampling.is_some());
    if !declared {
        return Ok(tool_error(
            "the client did not declare the sampling capability",
        ));
    }
    let params: CreateMessageRequestParams = typed(json!({
        "messages": [{ "role": "user", "content": { "type": "text", "text": prompt } }],
        "maxTokens": 100
    }))?;
    Ok(match peer.create_message(params).await {
        Ok(result) => {
            let result = serde_json::to_value(&result).unwrap_or_default();
            CallToolResult::success(vec![ContentBlock::text(format!(
                "LLM response: {}",
                response_text(&result)
            ))])
        }
        Err(error) => tool_error(format!("sampling failed: {error}")),
    })
}

/// The text of a sampling result, whose `content` is one block or a list.
fn response_text(result: &Value) -> String {
    let content = &result["content"];
    let blocks = content
        .as_array()
        .map_or_else(|| vec![content], |list| list.iter().collect());
    let texts: Vec<&str> = blocks
        .into_iter()
        .filter_map(|b| b["text"].as_str())
        .collect();
    if texts.is_empty() {
        "(no text)".to_owned()
    } else {
        texts.join("\n")
    }
}

/// Which elicitation a tool sends, and how it reports the answer.
pub enum Form<'a> {
    /// `test_elicitation`, with the caller's message.
    Basic(Option<&'a str>),
    /// `test_elicitation_sep1034_defaults`.
    Defaults,
    /// `test_elicitation_sep1330_enums`.
    Enums,
}

pub async fn elicitation(
    peer: &Peer<RoleServer>,
    form: Form<'_>,
) -> Result<CallToolResult, McpError> {
    let (message, schema, label) = match form {
        Form::Basic(Some(message)) => (message, elicitation::basic_schema(), "User response"),
        Form::Basic(None) => return Ok(tool_error("argument `message` (a string) is required")),
        Form::Defaults => (
            "Please review and update the form fields with defaults",
            elicitation::defaults_schema(),
            "Elicitation completed",
        ),
        Form::Enums => (
            "Please select options from the enum fields",
            elicitation::enums_schema(),
            "Elicitation completed",
        ),
    };
    let declared = peer
        .peer_info()
        .is_some_and(|info| info.capabilities.elicitation.is_some());
    if !declared {
        return Ok(tool_error(
            "the client did not declare the elicitation capability",
        ));
    }
    let request = elicitation::form(message, schema)?;
    Ok(match peer.create_elicitation(request).await {
        Ok(result) => {
            let result = serde_json::to_value(&result).unwrap_or_default();
            let action = result["action"].as_str().unwrap_or("unknown");
            let content = result.get("content").cloned().unwrap_or_else(|| json!({}));
            CallToolResult::success(vec![ContentBlock::text(format!(
                "{label}: action={action}, content={content}"
            ))])
        }
        Err(error) => tool_error(format!("elicitation failed: {error}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_text_is_found_in_either_shape() {
        assert_eq!(
            response_text(&json!({ "content": { "type": "text", "text": "hi" } })),
            "hi"
        );
        assert_eq!(
            response_text(
                &json!({ "content": [{ "type": "text", "text": "a" }, { "type": "text", "text": "b" }] })
            ),
            "a\nb"
        );
        assert_eq!(response_text(&json!({})), "(no text)");
    }
}
