//! Tools: the catalog, and routing a `tools/call` to the tool's code.

mod catalog;
mod client_requests;
mod content;
mod diagnostic;
mod notifying;

use rmcp::{
    ErrorData as McpError, RoleServer,
    model::{CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock},
    service::RequestContext,
};

pub use catalog::tools;

use crate::{changes::List, fixtures::string_arg, logging, mrtr, reconnect, session::Session};
use client_requests::Form;

/// The session id the client sent with this request, if any.
fn session_id(context: &RequestContext<RoleServer>) -> Option<String> {
    let parts = context.extensions.get::<http::request::Parts>()?;
    let value = parts.headers.get("mcp-session-id")?.to_str().ok()?;
    Some(value.to_owned())
}

/// Run one tool. Unknown tools are a protocol error (`invalid params`, as the
/// 2025-11-25 specification says); everything a tool itself cannot do is a
/// tool-level error. The MRTR fixtures may answer with an input-required
/// result (2026-07-28 requests only).
pub async fn call(
    session: &Session,
    request: CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> Result<CallToolResponse, McpError> {
    let name = request.name.as_ref();
    let (responses, state) = (
        request.input_responses.as_ref(),
        request.request_state.as_deref(),
    );
    if let Some(outcome) = mrtr::run(&session.shared.sealer, name, responses, state, context).await
    {
        return outcome.map(mrtr::tool_result);
    }
    call_complete(session, &request, context)
        .await
        .map(Into::into)
}

/// The tools that always finish in one round.
async fn call_complete(
    session: &Session,
    request: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> Result<CallToolResult, McpError> {
    let name = request.name.as_ref();
    if let Some(answer) = content::answer(name) {
        return answer;
    }
    let arguments = request.arguments.as_ref();
    let peer = &context.peer;
    let log = logging::for_request(&session.log, context);
    let changes = &session.shared.changes;
    match name {
        "test_tool_with_logging" => Ok(notifying::with_logging(peer, log.as_ref()).await),
        diagnostic::LOGGING => Ok(diagnostic::logging(log.as_ref(), context).await),
        diagnostic::MISSING_CAPABILITY => diagnostic::missing_capability(context),
        diagnostic::TRIGGER_TOOL_CHANGE => Ok(diagnostic::trigger(changes, List::Tools).await),
        diagnostic::TRIGGER_PROMPT_CHANGE => Ok(diagnostic::trigger(changes, List::Prompts).await),
        "test_tool_with_progress" => {
            let token = request
                .meta
                .as_ref()
                .and_then(|meta| meta.get_progress_token())
                .or_else(|| context.meta.get_progress_token());
            Ok(notifying::with_progress(peer, token).await)
        }
        "test_sampling" => client_requests::sampling(peer, string_arg(arguments, "prompt")).await,
        "test_elicitation" => {
            client_requests::elicitation(peer, Form::Basic(string_arg(arguments, "message"))).await
        }
        "test_elicitation_sep1034_defaults" => {
            client_requests::elicitation(peer, Form::Defaults).await
        }
        "test_elicitation_sep1330_enums" => client_requests::elicitation(peer, Form::Enums).await,
        "json_schema_2020_12_tool" => {
            let arguments =
                serde_json::Value::Object(request.arguments.clone().unwrap_or_default());
            Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                "JSON Schema 2020-12 tool called with: {arguments}"
            ))]))
        }
        reconnect::TOOL => {
            let closed = match session_id(context) {
                Some(id) => {
                    session
                        .shared
                        .reconnector
                        .close_and_await_resume(&id, &context.id)
                        .await
                }
                None => Err("the request carried no session id".to_owned()),
            };
            if let Err(reason) = &closed {
                tracing::warn!(%reason, "test_reconnection answered without closing its stream");
            }
            Ok(CallToolResult::success(vec![ContentBlock::text(
                "Reconnection test completed successfully. If you received this, the client \
                 properly reconnected after stream closure.",
            )]))
        }
        _ => Err(McpError::invalid_params(
            format!("no tool named `{name}`"),
            None,
        )),
    }
}
