//! The front's side of tool search (`crate::search`): the meta-tools'
//! answers, and the error of a `call_tool` naming a tool the caller
//! cannot use. The session (`session.rs`) decides when they apply; the
//! ranking and the filter are `search::service`'s.

use std::sync::Arc;

use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Map, Value, json};

use super::Gateway;
use crate::backend::Generation;
use crate::catalog::Catalog;
use crate::policy::Access;
use crate::search::meta::{self, ArgError, FindArgs};
use crate::search::{Answer, OwnListings, ToolSearch};

/// The servers the caller with `access` may use, in config order; `own`:
/// what it listed itself.
pub(super) fn servers(
    search: &ToolSearch,
    generation: &Generation,
    access: &Access,
    own: &OwnListings,
) -> Vec<meta::Server> {
    search.servers(access, generation.backends.iter().map(|b| &b.name), own)
}

/// What the caller with `access` lists as its tools, `view` being what
/// it may see and `own` what it listed itself (asked only in a mode
/// that searches).
pub(super) fn listed_tools<'v>(
    gw: &Gateway,
    generation: &Generation,
    access: &Access,
    own: impl FnOnce() -> OwnListings,
    view: &'v Catalog,
) -> std::borrow::Cow<'v, [crate::catalog::Entry]> {
    match gw.tool_search().tools_listed(
        access,
        generation.backends.iter().map(|b| &b.name),
        own,
        view,
    ) {
        Some(tools) => std::borrow::Cow::Owned(tools),
        None => std::borrow::Cow::Borrowed(&view.tools),
    }
}

/// `find_tool` with `args` for the caller with `access`, `view` and
/// `own` listings: the answer, or the refusal of its arguments.
pub(super) fn find(
    gw: &Gateway,
    generation: &Generation,
    (access, own): (&Access, &OwnListings),
    view: &Arc<Catalog>,
    args: Option<&Map<String, Value>>,
) -> Result<Answer, ArgError> {
    let search = gw.tool_search();
    let settings = search.settings();
    let args = FindArgs::parse(args, settings.limit, settings.max_query_bytes)?;
    let t0 = std::time::Instant::now();
    search.remember(view);
    if search.take_unembedded() {
        gw.fill_vectors();
    }
    let answer = search.find(
        view,
        &args,
        &servers(search, generation, access, own),
        generation.number,
    );
    crate::metrics::get().tool_search(t0.elapsed(), answer.found.len());
    tracing::debug!(
        query_bytes = args.query_bytes,
        results = answer.found.len(),
        took_us = t0.elapsed().as_micros() as u64,
        "find_tool"
    );
    Ok(answer)
}

/// A meta-tool's answer as a tool result: `structuredContent`, and the
/// same JSON as text.
pub(super) fn answer_result(answer: &Answer) -> Value {
    let structured = answer.structured();
    json!({
        "content": [{"type": "text", "text": structured.to_string()}],
        "structuredContent": structured,
        "isError": false
    })
}

/// A meta-tool's arguments refused: a tool error naming the field.
pub(super) fn refused(e: &ArgError) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(e.to_string())])
}

/// The unknown-tool error for `name`, with up to three tools the caller
/// may use whose definitions are closest to it.
pub(super) fn unknown_suggesting(search: &ToolSearch, view: &Arc<Catalog>, name: &str) -> McpError {
    let near = search.suggest(view, name);
    let mut e = super::route::unknown_tool(name);
    if !near.is_empty() {
        e.message = format!(
            "unknown tool '{name}': did you mean {}? (find tools with find_tool)",
            near.iter()
                .map(|n| format!("'{n}'"))
                .collect::<Vec<_>>()
                .join(", ")
        )
        .into();
        e.data = Some(json!({"tool": name, "suggestions": near}));
    }
    e
}
