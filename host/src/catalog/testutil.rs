//! Builders for the catalog's unit tests.

use rmcp::model::Tool;
use serde_json::json;

use super::BackendCatalog;
use crate::config::Naming;

/// A tool named `name` with an empty object schema.
pub fn tool(name: &str) -> Tool {
    serde_json::from_value(json!({"name": name, "inputSchema": {"type": "object"}})).unwrap()
}

/// A backend catalog exporting the tools `tools` and nothing else.
pub fn entry(tools: &[&str]) -> BackendCatalog {
    BackendCatalog {
        tools: tools.iter().map(|t| tool(t)).collect(),
        ..Default::default()
    }
}

/// `naming = "prefix"` with the default separator.
pub fn prefix() -> Naming {
    Naming::Prefix {
        separator: "__".into(),
    }
}
