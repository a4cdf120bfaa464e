//! `completion/complete`: suggestions for prompt arguments and template
//! variables, filtered by the prefix the client typed.

use rmcp::{
    ErrorData as McpError,
    model::{CompleteRequestParams, CompleteResult, Reference},
};
use serde_json::json;

use crate::{fixtures, prompts};

/// The candidate values for one argument of one reference.
fn candidates(reference: &Reference, argument: &str) -> &'static [&'static str] {
    match (reference, argument) {
        (Reference::Prompt(prompt), "arg1" | "arg2") if prompt.name == prompts::WITH_ARGUMENTS => {
            &["paris", "park", "party", "test", "testValue1", "testValue2"]
        }
        (Reference::Resource(template), "id") if template.uri == "test://template/{id}/data" => {
            &["1", "123", "42"]
        }
        _ => &[],
    }
}

pub fn complete(request: &CompleteRequestParams) -> Result<CompleteResult, McpError> {
    let prefix = request.argument.value.as_str();
    let values: Vec<&str> = candidates(&request.r#ref, &request.argument.name)
        .iter()
        .copied()
        .filter(|value| value.starts_with(prefix))
        .collect();
    fixtures::complete(json!({
        "completion": { "values": values, "total": values.len(), "hasMore": false }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ArgumentInfo;

    #[test]
    fn filters_by_prefix() {
        let request = CompleteRequestParams::new(
            Reference::for_prompt(prompts::WITH_ARGUMENTS),
            ArgumentInfo::new("arg1", "par"),
        );
        let result = serde_json::to_value(complete(&request).ok()).unwrap_or_default();
        assert_eq!(
            result["completion"]["values"],
            json!(["paris", "park", "party"])
        );
    }

    #[test]
    fn unknown_references_complete_to_nothing() {
        let request =
            CompleteRequestParams::new(Reference::for_prompt("nope"), ArgumentInfo::new("x", ""));
        let result = serde_json::to_value(complete(&request).ok()).unwrap_or_default();
        assert_eq!(result["completion"]["values"], json!([]));
    }
}
