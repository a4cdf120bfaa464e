//! The diagnostic tools of the 2026-07-28 suite's `server-stateless`
//! scenario (SEP-2575): one that needs a client capability, one that logs
//! only when the request asks for it, and the two that change a list.

// Sampling, roots and logging are deprecated by SEP-2577 in rmcp, not gone
// from the revisions the suite tests.
#![allow(deprecated)]

use rmcp::{
    ErrorData as McpError, RoleServer,
    model::{CallToolResult, ClientCapabilities, ContentBlock, LoggingLevel},
    service::RequestContext,
};

use crate::{
    changes::{Changes, List},
    logging::LogThreshold,
};

pub const MISSING_CAPABILITY: &str = "test_missing_capability";
pub const LOGGING: &str = "test_logging_tool";
pub const TRIGGER_TOOL_CHANGE: &str = "test_trigger_tool_change";
pub const TRIGGER_PROMPT_CHANGE: &str = "test_trigger_prompt_change";

fn text(text: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text.into())])
}

/// `test_missing_capability`: needs `sampling`. Without it the request is
/// refused with `-32021` naming the capability, as the server must not rely
/// on what the client did not declare.
pub fn missing_capability(
    context: &RequestContext<RoleServer>,
) -> Result<CallToolResult, McpError> {
    let declared = context
        .client_capabilities()
        .is_some_and(|capabilities| capabilities.sampling.is_some());
    if !declared {
        return Err(McpError::missing_required_client_capability(
            ClientCapabilities::builder().enable_sampling().build(),
        ));
    }
    Ok(text(
        "The client declared the sampling capability this tool needs",
    ))
}

/// `test_logging_tool`: one `info` message, if the request's threshold
/// admits it (a 2026-07-28 request without `logLevel` gets none).
pub async fn logging(
    log: Option<&LogThreshold>,
    context: &RequestContext<RoleServer>,
) -> CallToolResult {
    if let Some(log) = log {
        log.log(
            &context.peer,
            LoggingLevel::Info,
            "Diagnostic trace logging activated",
        )
        .await;
    }
    text("Logging evaluated")
}

/// `test_trigger_tool_change` / `test_trigger_prompt_change`.
pub async fn trigger(changes: &Changes, list: List) -> CallToolResult {
    let revision = changes.change(list).await;
    let name = match list {
        List::Tools => "tool",
        List::Prompts => "prompt",
    };
    text(format!(
        "The {name} list changed (revision {revision}); subscribers were told"
    ))
}
