//! Tools: the catalog, and routing a `tools/call` to the tool's code.

mod catalog;
mod client_requests;
mod content;
mod notifying;

use rmcp::{
    ErrorData as McpError, RoleServer,
    model::{CallToolRequestParams, CallToolResult, ContentBlock},
    service::RequestContext,
};

pub use catalog::tools;

use crate::{fixtures::string_arg, reconnect, session::Session};
use client_requests::Form;

/// The session id the client sent with this request, if any.
fn session_id(context: &RequestContext<RoleServer>) -> Option<String> {
    let parts = context.extensions.get::<http::request::Parts>()?;
    let value = parts.headers.get("mcp-session-id")?.to_str().ok()?;
    Some(value.to_owned())
}

/// Run one tool. Unknown tools are a protocol error (`invalid params`, as the
/// 2025-11-25 specification says); everything a tool itself cannot do is a
/// tool-level error.
pub async fn call(
    session: &Session,
    request: CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> Result<CallToolResult, McpError> {
    let name = request.name.as_ref();
    if let Some(answer) = content::answer(name) {
        return answer;
    }
    let arguments = request.arguments.as_ref();
    let peer = &context.peer;
    match name {
        "test_tool_with_logging" => Ok(notifying::with_logging(peer, &session.log).await),
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
