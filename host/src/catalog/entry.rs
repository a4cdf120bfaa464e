//! One listed tool, prompt, resource or resource template, as its backend
//! wrote it.
//!
//! Clients get each entry with the backend's members, member order and
//! numbers (a tool's `execution`, a schema whose `type` comes first): the
//! catalog keeps the JSON object and reads only the one member it routes
//! by. The only edit is the client-visible name of tools and prompts
//! ([`Entry::named`]), made in place so the member keeps its position.

use std::sync::Arc;

use serde_json::{Map, Value};

/// What an entry is, and so which member names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    Tool,
    Prompt,
    Resource,
    Template,
}

impl EntryKind {
    /// The member that names an entry of this kind.
    pub fn key(self) -> &'static str {
        match self {
            EntryKind::Tool | EntryKind::Prompt => "name",
            EntryKind::Resource => "uri",
            EntryKind::Template => "uriTemplate",
        }
    }

    /// The member of a list result that holds entries of this kind.
    pub fn list_member(self) -> &'static str {
        match self {
            EntryKind::Tool => "tools",
            EntryKind::Prompt => "prompts",
            EntryKind::Resource => "resources",
            EntryKind::Template => "resourceTemplates",
        }
    }
}

/// One listed item; cheap to clone (its JSON is shared).
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    key: Arc<str>,
    json: Arc<Map<String, Value>>,
}

/// Why a listed item cannot be an entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    #[error("is not a JSON object")]
    NotAnObject,
    #[error("has no string `{0}`")]
    NoKey(&'static str),
}

impl Entry {
    /// The entry of `kind` that `value` (one item of a list result) is.
    pub fn from_json(kind: EntryKind, value: Value) -> Result<Entry, EntryError> {
        let Value::Object(json) = value else {
            return Err(EntryError::NotAnObject);
        };
        let key = match json.get(kind.key()) {
            Some(Value::String(k)) => Arc::from(k.as_str()),
            _ => return Err(EntryError::NoKey(kind.key())),
        };
        Ok(Entry {
            key,
            json: Arc::new(json),
        })
    }

    /// Its name (tools, prompts), URI (resources) or URI template.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The object as the backend wrote it (after [`Entry::named`], with
    /// the name clients see).
    pub fn json(&self) -> &Map<String, Value> {
        &self.json
    }

    /// The same entry under the name `name` (a tool or prompt's
    /// client-visible name); every other member as it was, in place.
    pub fn named(&self, kind: EntryKind, name: &str) -> Entry {
        if *self.key == *name {
            return self.clone();
        }
        let mut json = (*self.json).clone();
        if let Some(slot) = json.get_mut(kind.key()) {
            *slot = Value::String(name.to_owned());
        }
        Entry {
            key: name.into(),
            json: Arc::new(json),
        }
    }

    /// A copy of the object, to put in an answer.
    pub fn to_value(&self) -> Value {
        Value::Object((*self.json).clone())
    }

    /// A member's string value (`title`, `description`, ...).
    pub fn str(&self, member: &str) -> Option<&str> {
        self.json.get(member)?.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renaming_keeps_every_member_in_place() {
        let v: Value = serde_json::from_str(
            r#"{"title":"T","name":"echo","inputSchema":{"type":"object","b":1,"a":0.5},"execution":{"taskSupport":"forbidden"}}"#,
        )
        .unwrap();
        let e = Entry::from_json(EntryKind::Tool, v).unwrap();
        assert_eq!(e.key(), "echo");
        let n = e.named(EntryKind::Tool, "files__echo");
        assert_eq!(n.key(), "files__echo");
        assert_eq!(
            serde_json::to_string(&n.to_value()).unwrap(),
            r#"{"title":"T","name":"files__echo","inputSchema":{"type":"object","b":1,"a":0.5},"execution":{"taskSupport":"forbidden"}}"#
        );
        assert_eq!(e.json()["name"], "echo", "the backend's entry is unchanged");
    }

    #[test]
    fn items_without_their_key_are_refused_by_kind() {
        let e = Entry::from_json(EntryKind::Resource, serde_json::json!({"name": "x"}));
        assert_eq!(e, Err(EntryError::NoKey("uri")));
        let e = Entry::from_json(EntryKind::Template, serde_json::json!([1]));
        assert_eq!(e, Err(EntryError::NotAnObject));
        let e = Entry::from_json(
            EntryKind::Template,
            serde_json::json!({"uriTemplate": "a/{x}"}),
        );
        assert_eq!(e.unwrap().key(), "a/{x}");
    }
}
