//! Builders for the catalog's unit tests.

use serde_json::json;

use super::{BackendCatalog, Entry, EntryKind};
use crate::config::Naming;

/// A tool named `name` with an empty object schema.
pub fn tool(name: &str) -> Entry {
    Entry::from_json(
        EntryKind::Tool,
        json!({"name": name, "inputSchema": {"type": "object"}}),
    )
    .unwrap()
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
