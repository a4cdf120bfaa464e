//! Small rules shared by the front handlers: errors clients see, `_meta`
//! hygiene, pagination of merged lists.

use rmcp::ErrorData as McpError;
use rmcp::model::{ErrorCode, RequestMetaObject};
use serde_json::json;

use crate::dataplane::outcome::CallError;
use crate::health::HealthState;

/// A call to a backend that is not serving, naming it, its state and why.
pub fn unavailable(backend: &str, state: HealthState, reason: &str) -> McpError {
    // Backend errors name the backend themselves; don't say it twice.
    let own = format!("backend '{backend}': ");
    let reason = reason.strip_prefix(&own).unwrap_or(reason);
    // Clients get what happened, not the backend's own log lines (those
    // are for operators: API and logs).
    let reason = reason.split(" (last stderr line:").next().unwrap_or(reason);
    let why = if reason.is_empty() {
        String::new()
    } else {
        format!(": {reason}")
    };
    McpError::new(
        ErrorCode::INTERNAL_ERROR,
        format!("backend '{backend}' is unavailable ({state}){why}"),
        Some(json!({"backend": backend, "state": state.as_str()})),
    )
}

/// [`unavailable`] as the end of a call: the kind travels with the error,
/// so nothing has to read it back from the text.
pub fn unavailable_call(backend: &str, state: HealthState, reason: &str) -> CallError {
    CallError::unavailable(unavailable(backend, state, reason))
}

pub fn unknown_tool(name: &str) -> McpError {
    McpError::invalid_params(
        format!("unknown tool '{name}': list the tools with tools/list"),
        Some(json!({"tool": name})),
    )
}

pub fn unknown_prompt(name: &str) -> McpError {
    McpError::invalid_params(
        format!("unknown prompt '{name}': list the prompts with prompts/list"),
        Some(json!({"prompt": name})),
    )
}

pub fn unknown_uri(uri: &str) -> McpError {
    McpError::new(
        ErrorCode::RESOURCE_NOT_FOUND,
        format!(
            "no backend serves the resource '{uri}': list them with resources/list and resources/templates/list"
        ),
        Some(json!({"uri": uri})),
    )
}

/// A tool's arguments refused right after its backend's session was
/// recovered: the backend came back with another schema for it.
pub fn schema_changed(backend: &str, tool: &str, e: McpError) -> McpError {
    McpError::invalid_params(
        format!(
            "the tool's schema changed: backend '{backend}' was restarted and refused the arguments of `{tool}` ({}); list the tools again (tools/list) and retry with the new schema",
            e.message
        ),
        Some(
            json!({"backend": backend, "tool": tool, "reason": "schema_changed", "backendError": e.data}),
        ),
    )
}

/// Keeps the caller's own `_meta` entries but drops what belongs to the
/// client↔gateway hop: the progress token (Vigil puts its own on the backend
/// request and maps progress back) and per-request protocol metadata (each
/// hop negotiates its own revision).
pub fn forwardable_meta(meta: Option<RequestMetaObject>) -> Option<RequestMetaObject> {
    let mut meta = meta?;
    meta.0
        .0
        .retain(|k, _| k != "progressToken" && !k.starts_with("io.modelcontextprotocol/"));
    (!meta.0.0.is_empty()).then_some(meta)
}

/// One page of `items` after `cursor` (an offset written by a previous page).
pub fn page<T: Clone>(
    items: &[T],
    cursor: Option<&str>,
    size: usize,
) -> Result<(Vec<T>, Option<String>), McpError> {
    let start = match cursor {
        None => 0,
        Some(c) => c
            .parse::<usize>()
            .ok()
            .filter(|s| *s <= items.len())
            .ok_or_else(|| {
                McpError::invalid_params(
                    format!("invalid cursor '{c}': pass a nextCursor from a previous page"),
                    None,
                )
            })?,
    };
    let end = (start + size).min(items.len());
    let next = (end < items.len()).then(|| end.to_string());
    Ok((items[start..end].to_vec(), next))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_cover_everything_once() {
        let items: Vec<u32> = (0..5).collect();
        let (a, next) = page(&items, None, 2).unwrap();
        assert_eq!((a, next.as_deref()), (vec![0, 1], Some("2")));
        let (b, next) = page(&items, Some("2"), 2).unwrap();
        assert_eq!((b, next.as_deref()), (vec![2, 3], Some("4")));
        let (c, next) = page(&items, Some("4"), 2).unwrap();
        assert_eq!((c, next), (vec![4], None));
    }

    #[test]
    fn bad_cursor_is_invalid_params() {
        let e = page(&[1, 2], Some("9"), 2).unwrap_err();
        assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        assert!(e.message.contains("invalid cursor '9'"));
    }

    #[test]
    fn meta_keeps_only_the_callers_own_keys() {
        let mut m = RequestMetaObject::new();
        m.0.0.insert("progressToken".into(), json!(1));
        m.0.0.insert(
            "io.modelcontextprotocol/protocolVersion".into(),
            json!("2026-07-28"),
        );
        m.0.0.insert("traceparent".into(), json!("00-abc"));
        let kept = forwardable_meta(Some(m)).unwrap();
        assert_eq!(kept.0.0.keys().collect::<Vec<_>>(), ["traceparent"]);
        assert!(forwardable_meta(Some(RequestMetaObject::new())).is_none());
    }
}
