//! The resources a client session was *linked* to.
//!
//! A tool result's `resource_link` may name a resource the backend made for
//! that session alone (server-everything's `gzip-file-as-resource` links
//! `demo://resource/session/NAME`). The backend lists it, if ever, only on
//! that session and only after its `resources/list_changed`, so the catalog
//! cannot route a read of it made right after the call. Each session keeps
//! the links its calls returned (URI → backend), and a read of a URI no
//! catalog serves goes to the backend that linked it, through the same
//! backend session the call went through (the raw path's lane, or the
//! typed path's connection). Nothing here is shared between sessions.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// Links kept per session; the oldest is forgotten first.
const KEPT: usize = 256;

/// One session's links (see the module docs).
#[derive(Default)]
pub struct Links(Mutex<VecDeque<(String, Arc<str>)>>);

impl Links {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(String, Arc<str>)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps the `resource_link` URIs of a tool result `backend` returned.
    pub fn learn(&self, backend: &Arc<str>, result: &Value) {
        let Some(content) = result.get("content").and_then(Value::as_array) else {
            return;
        };
        let uris = content
            .iter()
            .filter(|c| c.get("type").and_then(Value::as_str) == Some("resource_link"))
            .filter_map(|c| c.get("uri").and_then(Value::as_str));
        let mut kept = self.lock();
        for uri in uris {
            kept.retain(|(u, _)| u != uri);
            if kept.len() == KEPT {
                kept.pop_front();
            }
            kept.push_back((uri.to_owned(), backend.clone()));
        }
    }

    /// [`Links::learn`] from a JSON-RPC response as the backend wrote it
    /// (the raw path); text that names no `resource_link` is not parsed.
    pub fn learn_text(&self, backend: &Arc<str>, response: &str) {
        if !response.contains("resource_link") {
            return;
        }
        if let Ok(v) = serde_json::from_str::<Value>(response)
            && let Some(result) = v.get("result")
        {
            self.learn(backend, result);
        }
    }

    /// The backend that linked `uri` to this session.
    pub fn backend_of(&self, uri: &str) -> Option<Arc<str>> {
        self.lock()
            .iter()
            .rev()
            .find(|(u, _)| u == uri)
            .map(|(_, b)| b.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_link_routes_to_its_backend_and_the_oldest_is_forgotten() {
        let links = Links::default();
        let everything: Arc<str> = "everything".into();
        links.learn(
            &everything,
            &json!({"content": [
                {"type": "text", "text": "made it"},
                {"type": "resource_link", "uri": "demo://resource/session/a.gz", "name": "a.gz"}
            ]}),
        );
        assert_eq!(
            links.backend_of("demo://resource/session/a.gz").as_deref(),
            Some("everything")
        );
        assert_eq!(links.backend_of("demo://resource/session/b.gz"), None);
        let other: Arc<str> = "other".into();
        for n in 0..KEPT {
            links.learn_text(
                &other,
                &format!(
                    r#"{{"jsonrpc":"2.0","id":1,"result":{{"content":[{{"type":"resource_link","uri":"x://{n}","name":"n"}}]}}}}"#
                ),
            );
        }
        assert_eq!(links.backend_of("x://0").as_deref(), Some("other"));
        assert_eq!(
            links.backend_of("demo://resource/session/a.gz"),
            None,
            "the oldest went first"
        );
        links.learn_text(
            &other,
            r#"{"jsonrpc":"2.0","id":2,"result":{"content":[]}}"#,
        );
        assert_eq!(links.lock().len(), KEPT);
    }
}
