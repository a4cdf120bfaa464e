//! Resources: three direct resources, one template, and reading them.

use rmcp::{
    ErrorData as McpError,
    model::{ListResourceTemplatesResult, ListResourcesResult, ReadResourceResult},
};
use serde_json::json;

use crate::fixtures::{PNG_BASE64, complete};

pub const STATIC_TEXT: &str = "test://static-text";
pub const STATIC_BINARY: &str = "test://static-binary";
pub const WATCHED: &str = "test://watched-resource";
const TEMPLATE: &str = "test://template/{id}/data";
const TEMPLATE_PREFIX: &str = "test://template/";
const TEMPLATE_SUFFIX: &str = "/data";

pub fn list() -> Result<ListResourcesResult, McpError> {
    complete(json!({
        "resources": [
            {
                "uri": STATIC_TEXT,
                "name": "static-text",
                "title": "Static Text Resource",
                "description": "A static text resource for testing",
                "mimeType": "text/plain"
            },
            {
                "uri": STATIC_BINARY,
                "name": "static-binary",
                "title": "Static Binary Resource",
                "description": "A static binary resource (image) for testing",
                "mimeType": "image/png"
            },
            {
                "uri": WATCHED,
                "name": "watched-resource",
                "title": "Watched Resource",
                "description": "A resource clients may subscribe to",
                "mimeType": "text/plain"
            }
        ]
    }))
}

pub fn list_templates() -> Result<ListResourceTemplatesResult, McpError> {
    complete(json!({
        "resourceTemplates": [
            {
                "uriTemplate": TEMPLATE,
                "name": "template",
                "title": "Resource Template",
                "description": "A resource template with parameter substitution",
                "mimeType": "application/json"
            }
        ]
    }))
}

/// Whether `uri` names a resource this server has (direct or templated).
pub fn exists(uri: &str) -> bool {
    matches!(uri, STATIC_TEXT | STATIC_BINARY | WATCHED) || template_id(uri).is_some()
}

/// The `{id}` of a URI matching `test://template/{id}/data`.
fn template_id(uri: &str) -> Option<&str> {
    let id = uri
        .strip_prefix(TEMPLATE_PREFIX)?
        .strip_suffix(TEMPLATE_SUFFIX)?;
    (!id.is_empty() && !id.contains('/')).then_some(id)
}

pub fn read(uri: &str) -> Result<ReadResourceResult, McpError> {
    let content = match uri {
        STATIC_TEXT => json!({
            "uri": uri,
            "mimeType": "text/plain",
            "text": "This is the content of the static text resource."
        }),
        STATIC_BINARY => json!({ "uri": uri, "mimeType": "image/png", "blob": PNG_BASE64 }),
        WATCHED => {
            json!({ "uri": uri, "mimeType": "text/plain", "text": "Watched resource content" })
        }
        _ => match template_id(uri) {
            Some(id) => json!({
                "uri": uri,
                "mimeType": "application/json",
                "text": json!({ "id": id, "templateTest": true, "data": format!("Data for ID: {id}") })
                    .to_string()
            }),
            None => return Err(not_found(uri)),
        },
    };
    complete(json!({ "contents": [content] }))
}

/// The error the 2025-11-25 protocol defines for an unknown resource URI.
pub fn not_found(uri: &str) -> McpError {
    McpError::resource_not_found(format!("no resource at {uri}"), Some(json!({ "uri": uri })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listings_fit_the_model() {
        assert!(list().is_ok());
        assert!(list_templates().is_ok());
    }

    #[test]
    fn template_substitutes_the_id() {
        let result = read("test://template/123/data").map_err(|e| e.message);
        let text = serde_json::to_string(&result.ok()).unwrap_or_default();
        assert!(text.contains(r#"\"id\":\"123\""#), "{text}");
    }

    #[test]
    fn unknown_uris_are_errors_not_panics() {
        for uri in [
            "",
            "test://template//data",
            "test://template/a/b/data",
            "nope",
        ] {
            assert!(read(uri).is_err(), "{uri}");
            assert!(!exists(uri), "{uri}");
        }
        assert!(read(STATIC_BINARY).is_ok());
    }
}
