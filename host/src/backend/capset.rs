//! A client's *capability set*: what it declared that a server may show
//! different tools, prompts or resources for.
//!
//! A server decides what it lists from the capabilities its client
//! declared (server-everything shows `trigger-sampling-request` only to a
//! client that declared `sampling`). Vigil's shared backend session
//! declares none; a client that declared some is served by a backend
//! session that declares exactly those (`variants.rs`), so it sees what the
//! server shows such a client. Two clients that declared the same members
//! share that session, so the cost is one backend session per *distinct*
//! set, never per client.
//!
//! The set is the client's `sampling`, `elicitation` and `roots` members
//! as it wrote them (sub-members included: `sampling.tools` or
//! `elicitation.url` may change what a server offers). Not part of it, so
//! never declared to a backend: `tasks` (Vigil does not relay task-augmented
//! requests to a client, and rmcp's client capabilities have no such
//! member), `experimental` and `extensions`.
//!
//! A 2026-07-28 client's set also says so ([`CapSet::modern`]): where a
//! backend speaks that era as well, such a client is served by a backend
//! session begun in it (`variants.rs`), so it sees and calls the server as
//! it would directly.

use std::sync::Arc;

use rmcp::model::ClientCapabilities;
use serde_json::{Map, Value};

/// The members of a client's capabilities that make a capability set.
const MEMBERS: [&str; 3] = ["elicitation", "roots", "sampling"];

/// One capability set, compared by its canonical JSON (sorted members)
/// and its era.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CapSet {
    json: Arc<str>,
    /// Declared by a 2026-07-28 client.
    modern: bool,
}

impl Default for CapSet {
    fn default() -> Self {
        Self::none()
    }
}

impl CapSet {
    /// Declares nothing: what the shared backend session declares.
    pub fn none() -> Self {
        Self {
            json: Arc::from("{}"),
            modern: false,
        }
    }

    /// The set of a client that declared `caps` in `initialize`.
    pub fn of(caps: Option<&ClientCapabilities>) -> Self {
        match caps.and_then(|c| serde_json::to_value(c).ok()) {
            Some(v) => Self::of_json(&v),
            None => Self::none(),
        }
    }

    /// The set of capabilities written as JSON (a 2026-07-28 request's
    /// `io.modelcontextprotocol/clientCapabilities`); anything but an
    /// object declares nothing.
    pub fn of_json(caps: &Value) -> Self {
        let Value::Object(caps) = caps else {
            return Self::none();
        };
        let kept: Map<String, Value> = MEMBERS
            .iter()
            .filter_map(|m| Some(((*m).to_owned(), sorted(caps.get(*m)?))))
            .filter(|(_, v)| !v.is_null())
            .collect();
        Self {
            json: Value::Object(kept).to_string().into(),
            modern: false,
        }
    }

    /// This set as a 2026-07-28 client declared it.
    pub fn modern(self) -> Self {
        Self {
            modern: true,
            ..self
        }
    }

    /// Whether a 2026-07-28 client declared it.
    pub fn is_modern(&self) -> bool {
        self.modern
    }

    /// The same members, declared by a client of the handshake era (what a
    /// 2026-07-28 client is served by where its backend speaks only that).
    pub fn handshake(&self) -> Self {
        Self {
            json: self.json.clone(),
            modern: false,
        }
    }

    /// Whether the shared backend session serves it: nothing declared, in
    /// the handshake era.
    pub fn is_none(&self) -> bool {
        !self.modern && self.declares_nothing()
    }

    /// Whether no member is declared (whatever the era).
    pub fn declares_nothing(&self) -> bool {
        &*self.json == "{}"
    }

    /// The capabilities a backend session of this set declares.
    pub fn capabilities(&self) -> ClientCapabilities {
        serde_json::from_str(&self.json).unwrap_or_default()
    }

    /// Whether the set declares the capability a server→client request of
    /// `method` needs (`sampling/createMessage`: `sampling`, and so on).
    /// Methods that need none are declared.
    pub fn answers(&self, method: &str) -> bool {
        let member = match method {
            "sampling/createMessage" => "sampling",
            "elicitation/create" => "elicitation",
            "roots/list" => "roots",
            _ => return true,
        };
        serde_json::from_str::<Map<String, Value>>(&self.json).is_ok_and(|m| m.contains_key(member))
    }

    /// The canonical JSON (for logs and reports).
    pub fn as_str(&self) -> &str {
        &self.json
    }
}

/// `v` with every object's members in sorted order, so two declarations
/// that differ only in member order are one set.
fn sorted(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut members: Vec<(&String, &Value)> = m.iter().collect();
            members.sort_by(|a, b| a.0.cmp(b.0));
            Value::Object(
                members
                    .into_iter()
                    .map(|(k, v)| (k.clone(), sorted(v)))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nothing_declared_is_the_empty_set() {
        assert!(CapSet::of(None).is_none());
        assert!(CapSet::of_json(&json!({})).is_none());
        assert!(CapSet::of_json(&json!("sampling")).is_none());
        // Members Vigil does not relay are not part of a set.
        assert!(
            CapSet::of_json(
                &json!({"experimental": {"x": {}}, "extensions": {"y": {}}, "tasks": {"list": {}}})
            )
            .is_none()
        );
        assert_eq!(CapSet::default(), CapSet::none());
    }

    #[test]
    fn member_order_does_not_make_another_set() {
        let a = CapSet::of_json(&json!({"sampling": {}, "elicitation": {"url": {}, "form": {}}}));
        let b = CapSet::of_json(&json!({"elicitation": {"form": {}, "url": {}}, "sampling": {}}));
        assert_eq!(a, b);
        assert_eq!(
            a.as_str(),
            r#"{"elicitation":{"form":{},"url":{}},"sampling":{}}"#
        );
    }

    #[test]
    fn sub_members_make_another_set() {
        let form = CapSet::of_json(&json!({"elicitation": {"form": {}}}));
        let url = CapSet::of_json(&json!({"elicitation": {"form": {}, "url": {}}}));
        assert_ne!(form, url);
        assert_ne!(form, CapSet::none());
    }

    #[test]
    fn a_set_declares_what_its_client_declared() {
        let declared = json!({"sampling": {}, "roots": {"listChanged": true}});
        let set = CapSet::of_json(&declared);
        let caps = serde_json::to_value(set.capabilities()).unwrap();
        assert_eq!(caps["sampling"], json!({}));
        assert_eq!(caps["roots"], json!({"listChanged": true}));
        assert!(caps.get("elicitation").is_none());
        // Read back from typed capabilities, it is the same set.
        assert_eq!(CapSet::of(Some(&set.capabilities())), set);
    }

    #[test]
    fn a_modern_clients_set_is_its_own() {
        let set = CapSet::of_json(&json!({"sampling": {}}));
        let modern = set.clone().modern();
        assert_ne!(modern, set, "served apart from handshake-era clients");
        assert_eq!(modern.handshake(), set);
        assert!(modern.is_modern() && !set.is_modern());
        // A 2026-07-28 client that declared nothing is not the shared
        // session's: its backend may speak its era.
        assert!(!CapSet::none().modern().is_none());
        assert!(CapSet::none().modern().declares_nothing());
    }

    #[test]
    fn a_set_answers_only_the_asks_it_declared() {
        let set = CapSet::of_json(&json!({"sampling": {}}));
        assert!(set.answers("sampling/createMessage"));
        assert!(!set.answers("elicitation/create"));
        assert!(!set.answers("roots/list"));
        assert!(set.answers("ping"));
        assert!(!CapSet::none().answers("sampling/createMessage"));
    }
}
