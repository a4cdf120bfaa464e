//! The `greet` prompt and the completion of its `name` argument.

use rmcp::{
    ErrorData as McpError,
    model::{
        CompleteRequestParams, CompleteResult, CompletionInfo, GetPromptRequestParams,
        GetPromptResult, ListPromptsResult, Prompt, PromptArgument, PromptMessage, Role,
    },
};
use serde_json::Value;

/// The values `completion/complete` offers for `greet`'s `name`.
const NAMES: [&str; 3] = ["alice", "albert", "bob"];

/// `prompts/list`: the greet prompt.
pub fn list() -> ListPromptsResult {
    ListPromptsResult::with_all_items(vec![Prompt::new(
        "greet",
        Some("Greet someone by name"),
        Some(vec![
            PromptArgument::new("name")
                .with_description("Who to greet")
                .with_required(true),
        ]),
    )])
}

/// `prompts/get`: `Hello, <name>! (from NAME)` as one user message.
pub fn get(
    server_name: &str,
    request: &GetPromptRequestParams,
) -> Result<GetPromptResult, McpError> {
    if request.name != "greet" {
        return Err(McpError::invalid_params(
            format!("unknown prompt: {}", request.name),
            None,
        ));
    }
    let name = match request
        .arguments
        .as_ref()
        .and_then(|arguments| arguments.get("name"))
    {
        Some(Value::String(name)) => name,
        Some(_) => {
            return Err(McpError::invalid_params(
                "prompt greet: argument name must be a string",
                None,
            ));
        }
        None => {
            return Err(McpError::invalid_params(
                "prompt greet: missing required argument name",
                None,
            ));
        }
    };
    Ok(GetPromptResult::new(vec![PromptMessage::new_text(
        Role::User,
        format!("Hello, {name}! (from {server_name})"),
    )])
    .with_description("A greeting"))
}

/// `completion/complete`: names starting with the typed prefix for
/// `greet`/`name`, nothing for anything else.
pub fn complete(request: &CompleteRequestParams) -> CompleteResult {
    let values =
        if request.r#ref.as_prompt_name() == Some("greet") && request.argument.name == "name" {
            NAMES
                .iter()
                .filter(|name| name.starts_with(request.argument.value.as_str()))
                .map(|name| (*name).to_owned())
                .collect()
        } else {
            Vec::new()
        };
    // Three values never exceed the 100-value limit.
    CompleteResult::new(CompletionInfo::with_all_values(values).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use rmcp::model::{ArgumentInfo, Reference};

    use super::*;

    fn completions(prompt: &str, argument: &str, value: &str) -> Vec<String> {
        let request = CompleteRequestParams::new(
            Reference::for_prompt(prompt),
            ArgumentInfo::new(argument, value),
        );
        complete(&request).completion.values
    }

    #[test]
    fn completes_names_by_prefix() {
        assert_eq!(completions("greet", "name", "al"), ["alice", "albert"]);
        assert_eq!(completions("greet", "name", ""), ["alice", "albert", "bob"]);
        assert!(completions("greet", "name", "z").is_empty());
        assert!(completions("other", "name", "a").is_empty());
    }

    #[test]
    fn greets() {
        let mut arguments = rmcp::model::JsonObject::new();
        arguments.insert("name".into(), "Ann".into());
        let mut request = GetPromptRequestParams::new("greet");
        request.arguments = Some(arguments);
        let result = get("d", &request).expect("prompt");
        assert_eq!(result.messages.len(), 1);
        let bad = GetPromptRequestParams::new("greet");
        assert!(get("d", &bad).is_err());
    }
}
