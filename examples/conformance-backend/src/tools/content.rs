//! Tools whose answer is fixed content: text, image, audio, an embedded
//! resource, all of them mixed, and a tool-level error.

use rmcp::{ErrorData as McpError, model::CallToolResult};
use serde_json::{Value, json};

use crate::fixtures::{PNG_BASE64, WAV_BASE64, complete};

fn text(text: &str) -> Value {
    json!({ "type": "text", "text": text })
}

fn png() -> Value {
    json!({ "type": "image", "data": PNG_BASE64, "mimeType": "image/png" })
}

/// The fixed answer of tool `name`, or `None` if it is not such a tool.
pub fn answer(name: &str) -> Option<Result<CallToolResult, McpError>> {
    let result = match name {
        "test_simple_text" => json!({
            "content": [text("This is a simple text response for testing.")]
        }),
        "test_image_content" => json!({ "content": [png()] }),
        "test_audio_content" => json!({
            "content": [{ "type": "audio", "data": WAV_BASE64, "mimeType": "audio/wav" }]
        }),
        "test_embedded_resource" => json!({
            "content": [{
                "type": "resource",
                "resource": {
                    "uri": "test://embedded-resource",
                    "mimeType": "text/plain",
                    "text": "This is an embedded resource content."
                }
            }]
        }),
        "test_multiple_content_types" => json!({
            "content": [
                text("Multiple content types test:"),
                png(),
                {
                    "type": "resource",
                    "resource": {
                        "uri": "test://mixed-content-resource",
                        "mimeType": "application/json",
                        "text": json!({ "test": "data", "value": 123 }).to_string()
                    }
                }
            ]
        }),
        "test_error_handling" => json!({
            "isError": true,
            "content": [text("This tool intentionally returns an error for testing")]
        }),
        _ => return None,
    };
    Some(complete(result))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fixed_answer_fits_the_model() {
        for name in [
            "test_simple_text",
            "test_image_content",
            "test_audio_content",
            "test_embedded_resource",
            "test_multiple_content_types",
            "test_error_handling",
        ] {
            assert!(matches!(answer(name), Some(Ok(_))), "{name}");
        }
        assert!(answer("test_sampling").is_none());
    }

    #[test]
    fn the_error_tool_sets_is_error() {
        let result = answer("test_error_handling").and_then(Result::ok);
        assert_eq!(result.and_then(|r| r.is_error), Some(true));
    }
}
