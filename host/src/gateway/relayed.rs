//! Answers that leave as the backend (or the catalog) wrote them, through
//! rmcp's typed server.
//!
//! rmcp's `ServerHandler` methods return typed results, and serializing
//! those would re-write what Vigil relays (members rmcp does not know
//! dropped, members reordered, numbers narrowed); its HTTP service takes
//! only a `ServerHandler`. So a handler that relays keeps the JSON result
//! in the gateway's [`Answers`] and returns a *placeholder* of its typed
//! result whose `_meta` holds only [`TOKEN_KEY`] and the answer's token.
//! Where the answer leaves Vigil as text (the HTTP front's bodies and
//! events, `answers.rs`; the stdio front's lines, `stdio.rs`),
//! [`Answers::substitute`] puts the kept JSON in the placeholder's place.
//! rmcp's own checks before the dispatch, and its errors, stay as they are.
//! Relayed progress leaves the same way, with its placeholder's rule in
//! `backend::outbox` (the queue that sends it).
//!
//! Contract: a handler that keeps an answer has adapted it to the client's
//! protocol era itself ([`for_client`]), which rmcp does only for typed
//! results. Tokens are unguessable (a random base), used once, and kept
//! at most [`KEPT`] answers or [`KEPT_FOR`] long, so an answer whose client
//! went away is dropped.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rmcp::model::MetaObject;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::time::Instant;

use super::discovery::{SERVER_INFO_KEY, server_info_stamp};

/// The `_meta` key of a placeholder.
pub const TOKEN_KEY: &str = crate::backend::outbox::PLACEHOLDER_KEY;

/// How many answers wait to leave at most.
const KEPT: usize = 4096;

/// How long an answer waits to leave at most.
const KEPT_FOR: Duration = Duration::from_secs(600);

/// Answers waiting for their placeholder to leave; see the module doc.
pub struct Answers {
    base: u64,
    next: AtomicU64,
    kept: Mutex<HashMap<u64, (Instant, Value)>>,
}

impl Default for Answers {
    fn default() -> Self {
        let mut seed = [0u8; 8];
        let _ = getrandom::fill(&mut seed);
        Answers {
            base: u64::from_le_bytes(seed),
            next: AtomicU64::new(0),
            kept: Mutex::default(),
        }
    }
}

/// The members of an outgoing message that name a kept answer.
#[derive(serde::Deserialize)]
struct Placeholder<'a> {
    #[serde(borrow)]
    id: &'a RawValue,
    result: PlaceholderResult,
}

#[derive(serde::Deserialize)]
struct PlaceholderResult {
    #[serde(rename = "_meta")]
    meta: PlaceholderMeta,
}

#[derive(serde::Deserialize)]
struct PlaceholderMeta {
    #[serde(rename = "io.vigil/relayed")]
    token: u64,
}

impl Answers {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (Instant, Value)>> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `result`; the `_meta` of its placeholder.
    pub fn keep(&self, result: Value) -> MetaObject {
        let token = self.base ^ self.next.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let mut kept = self.lock();
        if kept.len() >= KEPT {
            kept.retain(|_, (at, _)| now.duration_since(*at) < KEPT_FOR);
            if kept.len() >= KEPT {
                // Still full of live answers: drop the oldest.
                if let Some(oldest) = kept.iter().min_by_key(|(_, (at, _))| *at).map(|(t, _)| *t) {
                    kept.remove(&oldest);
                }
            }
        }
        kept.insert(token, (now, result));
        let mut meta = Map::new();
        meta.insert(TOKEN_KEY.into(), token.into());
        MetaObject(meta)
    }

    /// `text` (one outgoing JSON-RPC message) with a placeholder result
    /// replaced by its kept answer, or a progress placeholder by the
    /// progress it stands for; `None` when it holds neither.
    pub fn substitute(&self, text: &str) -> Option<String> {
        if !text.contains(TOKEN_KEY) {
            return None;
        }
        let Ok(p) = serde_json::from_str::<Placeholder<'_>>(text) else {
            return crate::backend::outbox::written_progress(text);
        };
        let (_, answer) = self.lock().remove(&p.result.meta.token)?;
        let answer = serde_json::to_string(&answer).ok()?;
        Some(format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":{answer}}}"#,
            p.id.get()
        ))
    }
}

/// What the two protocol eras disagree on in a result, adapted for the
/// client: a 2026-07-28 client gets `resultType` (`"complete"` where the
/// backend, of an earlier revision, wrote none) and a server info stamp in
/// `_meta` (Vigil's where the result has none, `discovery.rs`); an earlier client gets no
/// `resultType: "complete"`, and no non-object `structuredContent` (which
/// then goes into `content` as text, unless the first text block already
/// holds it). `call` marks a `tools/call` result. The same rules rmcp
/// applies to the typed results it serializes.
pub fn for_client(result: &mut Map<String, Value>, modern_client: bool, call: bool) {
    const RESULT_TYPE: &str = "resultType";
    if modern_client {
        if !result.contains_key(RESULT_TYPE) {
            result.insert(RESULT_TYPE.into(), Value::String("complete".into()));
        }
        let meta = result
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(meta) = meta
            && !meta.contains_key(SERVER_INFO_KEY)
        {
            meta.insert(SERVER_INFO_KEY.into(), server_info_stamp().clone());
        }
        return;
    }
    if result.get(RESULT_TYPE).and_then(Value::as_str) == Some("complete") {
        result.shift_remove(RESULT_TYPE);
    }
    if call
        && let Some(structured) = result.get("structuredContent")
        && !structured.is_object()
    {
        let Some(structured) = result.shift_remove("structuredContent") else {
            return;
        };
        let content = result
            .entry("content")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(blocks) = content {
            let first_holds_it = blocks
                .first()
                .and_then(|b| b.get("text"))
                .and_then(Value::as_str)
                .and_then(|t| serde_json::from_str::<Value>(t).ok())
                .is_some_and(|v| v == structured);
            if !first_holds_it {
                let text = serde_json::json!({"type": "text", "text": structured.to_string()});
                blocks.insert(0, text);
            }
        }
    }
}

/// Whether a result asks the client for input (a 2026-07-28 backend's
/// input-required result) rather than completing.
pub fn input_required(result: &Value) -> bool {
    result.get("resultType").and_then(Value::as_str) == Some("input_required")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_placeholder_leaves_as_the_kept_answer_once() {
        let answers = Answers::default();
        let kept: Value = serde_json::from_str(
            r#"{"tools":[{"name":"a","execution":{"taskSupport":"forbidden"}}],"t":0.7}"#,
        )
        .unwrap();
        let meta = answers.keep(kept);
        let placeholder =
            json!({"jsonrpc": "2.0", "id": "x-1", "result": {"tools": [], "_meta": meta.0}});
        let text = serde_json::to_string(&placeholder).unwrap();
        assert_eq!(
            answers.substitute(&text).as_deref(),
            Some(
                r#"{"jsonrpc":"2.0","id":"x-1","result":{"tools":[{"name":"a","execution":{"taskSupport":"forbidden"}}],"t":0.7}}"#
            )
        );
        assert_eq!(answers.substitute(&text), None, "used once");
        assert_eq!(
            answers.substitute(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            None
        );
    }

    #[test]
    fn tokens_of_other_gateways_or_guesses_name_nothing() {
        let answers = Answers::default();
        answers.keep(json!({"a": 1}));
        let guess = r#"{"jsonrpc":"2.0","id":1,"result":{"_meta":{"io.vigil/relayed":0}}}"#;
        // Token 0 is issued only if the random base is 0.
        if answers.base != 0 {
            assert_eq!(answers.substitute(guess), None);
        }
    }

    fn adapted(v: Value, modern: bool, call: bool) -> String {
        let Value::Object(mut m) = v else { panic!() };
        for_client(&mut m, modern, call);
        serde_json::to_string(&m).unwrap()
    }

    #[test]
    fn results_are_adapted_to_the_clients_era() {
        // (result, modern client, tools/call, expected)
        let cases = [
            (
                json!({"content": [], "isError": false}),
                true,
                true,
                r#"{"content":[],"isError":false,"resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"vigil","version":"VERSION"}}}"#,
            ),
            (
                json!({"resultType": "complete", "content": [], "_meta": {"k": 1}}),
                true,
                true,
                r#"{"resultType":"complete","content":[],"_meta":{"k":1,"io.modelcontextprotocol/serverInfo":{"name":"vigil","version":"VERSION"}}}"#,
            ),
            (
                // The backend's own stamp is kept.
                json!({"content": [], "resultType": "complete", "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "b", "version": "1"}}}),
                true,
                true,
                r#"{"content":[],"resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"b","version":"1"}}}"#,
            ),
            (
                json!({"content": [], "resultType": "complete", "x": 1}),
                false,
                true,
                r#"{"content":[],"x":1}"#,
            ),
            (
                json!({"resultType": "input_required"}),
                false,
                false,
                r#"{"resultType":"input_required"}"#,
            ),
            (
                json!({"content": [], "structuredContent": [1, 2]}),
                false,
                true,
                r#"{"content":[{"type":"text","text":"[1,2]"}]}"#,
            ),
            (
                json!({"content": [{"type": "text", "text": "[1, 2]"}], "structuredContent": [1, 2]}),
                false,
                true,
                r#"{"content":[{"type":"text","text":"[1, 2]"}]}"#,
            ),
            (
                json!({"structuredContent": {"a": 1}, "content": []}),
                false,
                true,
                r#"{"structuredContent":{"a":1},"content":[]}"#,
            ),
        ];
        for (v, modern, call, want) in cases {
            let want = want.replace("VERSION", env!("CARGO_PKG_VERSION"));
            assert_eq!(adapted(v.clone(), modern, call), want, "{v}");
        }
    }

    #[test]
    fn input_required_is_read_off_the_result_type() {
        assert!(input_required(&json!({"resultType": "input_required"})));
        assert!(!input_required(&json!({})));
    }
}
