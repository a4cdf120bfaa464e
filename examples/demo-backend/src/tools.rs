//! The built-in tools, and the call of a dynamic tool from the tools file.
//!
//! Tools that need the client (`ask_llm`, `ask_user`, `list_roots`) send a
//! server-to-client request on revisions up to 2025-11-25. On 2026-07-28,
//! which forbids such requests, they answer with an `InputRequiredResult`
//! and finish when the client retries the call with its `inputResponses`.
//!
//! Bad arguments never reach these functions: rmcp turns a failed
//! deserialization into a tool result with `isError: true`.

// Sampling, roots and logging are deprecated by SEP-2577 but still part of
// every revision this server speaks.
#![allow(deprecated)]

use std::{collections::BTreeMap, time::Duration};

use rmcp::{
    ErrorData as McpError, RoleServer,
    handler::server::{router::tool::ToolRouter, tool::InputResponses, wrapper::Parameters},
    model::{
        CallToolResponse, CallToolResult, ContentBlock, CreateMessageRequest,
        CreateMessageRequestParams, CreateMessageResult, ElicitRequest, ElicitRequestParams,
        ElicitResult, ElicitationSchema, InputRequest, InputRequests, InputRequiredResult,
        JsonObject, ListRootsRequest, ListRootsResult, LoggingLevel,
        LoggingMessageNotificationParam, PrimitiveSchemaDefinition, ProgressNotificationParam,
        ProtocolVersion, SamplingMessage, SamplingMessageContentBlock, StringSchema,
    },
    schemars::{self, JsonSchema},
    service::RequestContext,
    tool, tool_router,
};
use serde::{Deserialize, de::DeserializeOwned};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::{server::DemoServer, watch::DynamicTool};

/// `maxTokens` of the sampling request sent by `ask_llm`.
const ASK_LLM_MAX_TOKENS: u32 = 100;

#[derive(Debug, Deserialize, JsonSchema)]
pub struct EchoArgs {
    /// The text to send back.
    pub text: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct AddArgs {
    /// The first addend.
    pub a: f64,
    /// The second addend.
    pub b: f64,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct SlowArgs {
    /// How long to sleep, in milliseconds.
    pub ms: u64,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct CrashArgs {
    /// The exit code of the process (default 1).
    #[serde(default)]
    pub code: Option<i64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct AskLlmArgs {
    /// The text of the user message sent to the client's LLM.
    pub prompt: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct AskUserArgs {
    /// The message shown to the user.
    pub message: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ProgressArgs {
    /// How many progress notifications to send.
    pub steps: u64,
    /// After the notifications, wait until the call is cancelled instead
    /// of answering (so a client can tell progress that arrives while a
    /// call runs from progress delivered with its answer).
    #[serde(default)]
    pub hang_after: bool,
    /// After the notifications, answer only once this file exists (so a
    /// client can act while the call is surely in flight).
    #[serde(default)]
    pub wait_for: Option<std::path::PathBuf>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct LogArgs {
    /// One of debug, info, notice, warning, error, critical, alert, emergency.
    pub level: String,
    /// The message, sent as the notification's `data`.
    pub message: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct FailArgs {
    /// The error text of the result.
    pub message: String,
}

#[tool_router(router = builtin_tools, vis = "pub(crate)")]
impl DemoServer {
    #[tool(description = "Return the given text unchanged.")]
    async fn echo(&self, Parameters(args): Parameters<EchoArgs>) -> String {
        args.text
    }

    #[tool(description = "Add two numbers; integers print without a decimal point.")]
    async fn add(&self, Parameters(args): Parameters<AddArgs>) -> String {
        format_number(args.a + args.b)
    }

    #[tool(description = "Return the name of this server (its --name).")]
    async fn whoami(&self) -> String {
        self.hub().name().to_owned()
    }

    #[tool(description = "Sleep for `ms` milliseconds, then return \"slept <ms>\".")]
    async fn slow(
        &self,
        Parameters(args): Parameters<SlowArgs>,
        ct: CancellationToken,
    ) -> Result<String, McpError> {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(args.ms)) => Ok(format!("slept {}", args.ms)),
            _ = ct.cancelled() => Err(cancelled("slow")),
        }
    }

    #[tool(description = "Never return, until the request is cancelled.")]
    async fn hang(&self, ct: CancellationToken) -> Result<String, McpError> {
        ct.cancelled().await;
        Err(cancelled("hang"))
    }

    #[tool(
        description = "Exit the whole server process at once with `code` (default 1), without answering."
    )]
    async fn crash(&self, Parameters(args): Parameters<CrashArgs>) -> String {
        let code = args
            .code
            .and_then(|code| i32::try_from(code).ok())
            .unwrap_or(1);
        tracing::warn!(code, "crash tool called; exiting");
        std::process::exit(code)
    }

    #[tool(
        description = "Ask the client's LLM (sampling/createMessage) and return \"llm said: <reply>\"."
    )]
    async fn ask_llm(
        &self,
        Parameters(args): Parameters<AskLlmArgs>,
        InputResponses(responses): InputResponses,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let request = CreateMessageRequestParams::new(
            vec![SamplingMessage::user_text(args.prompt)],
            ASK_LLM_MAX_TOKENS,
        );
        let result: CreateMessageResult = if is_stateless_revision(&context) {
            match take_response(responses, "sampling") {
                None => {
                    let request = InputRequest::CreateMessage(CreateMessageRequest::new(request));
                    return Ok(input_required("sampling", request));
                }
                Some(Ok(result)) => result,
                Some(Err(error)) => return Ok(error_result(format!("sampling failed: {error}"))),
            }
        } else {
            match context.peer.create_message(request).await {
                Ok(result) => result,
                Err(error) => return Ok(error_result(format!("sampling failed: {error}"))),
            }
        };
        Ok(text_result(format!("llm said: {}", sampling_text(&result))))
    }

    #[tool(
        description = "Ask the user for a `name` (elicitation/create, form mode) and return \"user <action>: <content>\"."
    )]
    async fn ask_user(
        &self,
        Parameters(args): Parameters<AskUserArgs>,
        InputResponses(responses): InputResponses,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let mut properties = BTreeMap::new();
        properties.insert(
            "name".to_owned(),
            PrimitiveSchemaDefinition::String(StringSchema::new()),
        );
        let request = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: args.message,
            requested_schema: ElicitationSchema::new(properties),
        };
        let result: ElicitResult = if is_stateless_revision(&context) {
            match take_response(responses, "elicitation") {
                None => {
                    let request = InputRequest::Elicitation(ElicitRequest::new(request));
                    return Ok(input_required("elicitation", request));
                }
                Some(Ok(result)) => result,
                Some(Err(error)) => {
                    return Ok(error_result(format!("elicitation failed: {error}")));
                }
            }
        } else {
            match context.peer.create_elicitation(request).await {
                Ok(result) => result,
                Err(error) => return Ok(error_result(format!("elicitation failed: {error}"))),
            }
        };
        let action = match serde_json::to_value(&result.action) {
            Ok(Value::String(action)) => action,
            _ => format!("{:?}", result.action).to_lowercase(),
        };
        let content = compact_json(result.content.as_ref().unwrap_or(&Value::Null));
        Ok(text_result(format!("user {action}: {content}")))
    }

    #[tool(
        description = "Ask the client for its roots (roots/list) and return their URIs as a JSON array."
    )]
    async fn list_roots(
        &self,
        InputResponses(responses): InputResponses,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let result: ListRootsResult = if is_stateless_revision(&context) {
            match take_response(responses, "roots") {
                None => {
                    let request = InputRequest::ListRoots(ListRootsRequest::default());
                    return Ok(input_required("roots", request));
                }
                Some(Ok(result)) => result,
                Some(Err(error)) => return Ok(error_result(format!("roots/list failed: {error}"))),
            }
        } else {
            match context.peer.list_roots().await {
                Ok(result) => result,
                Err(error) => return Ok(error_result(format!("roots/list failed: {error}"))),
            }
        };
        let uris: Vec<Value> = result
            .roots
            .into_iter()
            .map(|root| Value::String(root.uri))
            .collect();
        Ok(text_result(compact_json(&Value::Array(uris))))
    }

    #[tool(
        description = "Send `steps` progress notifications (if the call has a progressToken), then return \"done <steps>\" (with `hang_after`: wait until cancelled instead; with `wait_for`: once that file exists)."
    )]
    async fn progress(
        &self,
        Parameters(args): Parameters<ProgressArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<String, McpError> {
        if let Some(token) = context.meta.get_progress_token() {
            let total = args.steps as f64;
            for step in 1..=args.steps {
                if context.ct.is_cancelled() {
                    return Err(cancelled("progress"));
                }
                let param =
                    ProgressNotificationParam::new(token.clone(), step as f64).with_total(total);
                if let Err(error) = context.peer.notify_progress(param).await {
                    tracing::debug!(%error, "could not send a progress notification");
                    break;
                }
            }
        }
        if args.hang_after {
            context.ct.cancelled().await;
            return Err(cancelled("progress"));
        }
        if let Some(path) = &args.wait_for {
            while !path.exists() {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                    _ = context.ct.cancelled() => return Err(cancelled("progress")),
                }
            }
        }
        Ok(format!("done {}", args.steps))
    }

    #[tool(
        description = "Send a notifications/message with `level` and data=`message` (logger = the server name), unless below the level set with logging/setLevel."
    )]
    async fn log(
        &self,
        Parameters(args): Parameters<LogArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let Ok(level) = serde_json::from_value::<LoggingLevel>(Value::String(args.level.clone()))
        else {
            return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "unknown log level {:?}; expected one of debug, info, notice, warning, error, critical, alert, emergency",
                args.level
            ))]));
        };
        // Up to 2025-11-25 everything is sent until logging/setLevel raises the
        // bar; from 2026-07-28 only requests that carry a logLevel get logs.
        let minimum = match context.meta.log_level() {
            Some(level) => Some(level),
            None if is_stateless_revision(&context) => None,
            None => Some(self.log_level().unwrap_or(LoggingLevel::Debug)),
        };
        if minimum.is_some_and(|minimum| severity(level) >= severity(minimum)) {
            let param = LoggingMessageNotificationParam::new(level, Value::String(args.message))
                .with_logger(self.hub().name());
            if let Err(error) = context.peer.notify_logging_message(param).await {
                tracing::debug!(%error, "could not send a log notification");
            }
        }
        Ok(CallToolResult::success(vec![ContentBlock::text("logged")]))
    }

    #[tool(
        description = "Increment the counter resource, notify its subscribers, and return the new value."
    )]
    async fn bump(&self) -> String {
        let hub = self.hub();
        let value = hub.bump_counter();
        hub.notify_resource_updated(&hub.counter_uri());
        value.to_string()
    }

    #[tool(description = "Return a tool result with isError=true and `message` as its text.")]
    async fn fail(&self, Parameters(args): Parameters<FailArgs>) -> CallToolResult {
        CallToolResult::error(vec![ContentBlock::text(args.message)])
    }
}

/// The names of the built-in tools, which the tools file may not reuse.
pub fn builtin_names() -> Vec<String> {
    DemoServer::builtin_tools()
        .list_all()
        .into_iter()
        .map(|tool| tool.name.into_owned())
        .collect()
}

/// The built-in tools, for one session.
pub fn builtin_router() -> ToolRouter<DemoServer> {
    DemoServer::builtin_tools()
}

/// Calls a dynamic tool: `"<name>: <compact json of arguments>"`, or
/// invalid params when a required argument is missing.
pub fn call_dynamic(
    tool: &DynamicTool,
    arguments: Option<JsonObject>,
) -> Result<CallToolResult, McpError> {
    let arguments = arguments.unwrap_or_default();
    let missing: Vec<&str> = tool
        .required
        .iter()
        .filter(|r| !arguments.contains_key(r.as_str()))
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        return Err(McpError::invalid_params(
            format!(
                "{}: missing required arguments: {}",
                tool.name,
                missing.join(", ")
            ),
            None,
        ));
    }
    Ok(CallToolResult::success(vec![ContentBlock::text(format!(
        "{}: {}",
        tool.name,
        compact_json(&Value::Object(arguments))
    ))]))
}

/// Prints a number the way a person would: `5`, not `5.0`.
pub fn format_number(value: f64) -> String {
    // 2^53: beyond it not every integer is representable, so print as float.
    const MAX_EXACT: f64 = 9_007_199_254_740_992.0;
    if value.is_finite() && value.fract() == 0.0 && value.abs() <= MAX_EXACT {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    }
}

/// Serializes `value` without whitespace and with object keys sorted, so the
/// output does not depend on serde_json's `preserve_order` feature.
pub fn compact_json(value: &Value) -> String {
    serde_json::to_string(&sorted(value)).unwrap_or_else(|_| "null".to_owned())
}

fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(key, value)| (key.clone(), sorted(value)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// Whether the call uses the 2026-07-28 revision or later, which forbids
/// server-to-client requests (input is gathered with `InputRequiredResult`)
/// and only logs to requests that ask for it.
fn is_stateless_revision(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|version| version >= ProtocolVersion::V_2026_07_28)
}

/// An `InputRequiredResult` asking the client for one input, under `key`.
fn input_required(key: &str, request: InputRequest) -> CallToolResponse {
    let mut requests = InputRequests::new();
    requests.insert(key.to_owned(), request);
    InputRequiredResult::from_input_requests(requests).into()
}

/// The client's answer to the input request `key`, if the call carries one.
fn take_response<T: DeserializeOwned>(
    responses: Option<rmcp::model::InputResponses>,
    key: &str,
) -> Option<Result<T, String>> {
    let response = responses?.remove(key)?;
    Some(serde_json::from_value(response).map_err(|error| format!("inputResponses.{key}: {error}")))
}

/// The text of an LLM reply (text blocks joined), or a note if it had none.
fn sampling_text(result: &CreateMessageResult) -> String {
    let texts: Vec<&str> = match &result.message.content {
        rmcp::model::SamplingContent::Single(block) => vec![block],
        rmcp::model::SamplingContent::Multiple(blocks) => blocks.iter().collect(),
    }
    .into_iter()
    .filter_map(|block| match block {
        SamplingMessageContentBlock::Text(text) => Some(text.text.as_str()),
        _ => None,
    })
    .collect();
    texts.join("")
}

fn text_result(text: String) -> CallToolResponse {
    CallToolResult::success(vec![ContentBlock::text(text)]).into()
}

fn error_result(text: String) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(text)]).into()
}

fn cancelled(tool: &str) -> McpError {
    McpError::internal_error(format!("{tool} was cancelled"), None)
}

/// The rank of a log level: higher is more severe.
fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_like_people_write_them() {
        assert_eq!(format_number(5.0), "5");
        assert_eq!(format_number(-3.0), "-3");
        assert_eq!(format_number(-0.0), "0");
        assert_eq!(format_number(2.5), "2.5");
        assert_eq!(format_number(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(format_number(1e20), "100000000000000000000");
        assert_eq!(format_number(f64::INFINITY), "inf");
    }

    #[test]
    fn compact_json_sorts_keys_and_drops_whitespace() {
        let value = serde_json::json!({"b": 1, "a": {"d": [1, 2], "c": null}});
        assert_eq!(compact_json(&value), r#"{"a":{"c":null,"d":[1,2]},"b":1}"#);
    }

    #[test]
    fn dynamic_tools_echo_their_arguments() {
        let tool = DynamicTool {
            name: "extra".into(),
            description: "d".into(),
            required: vec![],
        };
        let mut arguments = JsonObject::new();
        arguments.insert("x".into(), 1.into());
        let result = call_dynamic(&tool, Some(arguments)).unwrap();
        let text = result.content[0].as_text().map(|text| text.text.clone());
        assert_eq!(text.as_deref(), Some(r#"extra: {"x":1}"#));
        let result = call_dynamic(&tool, None).unwrap();
        let text = result.content[0].as_text().map(|text| text.text.clone());
        assert_eq!(text.as_deref(), Some("extra: {}"));
    }

    #[test]
    fn dynamic_tools_refuse_calls_without_their_required_arguments() {
        let tool = DynamicTool {
            name: "greet".into(),
            description: "d".into(),
            required: vec!["first".into(), "last".into()],
        };
        let mut arguments = JsonObject::new();
        arguments.insert("first".into(), "Ada".into());
        let e = call_dynamic(&tool, Some(arguments)).unwrap_err();
        assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        assert!(
            e.message.contains("missing required arguments: last"),
            "{}",
            e.message
        );
    }

    #[test]
    fn severities_are_ordered() {
        assert!(severity(LoggingLevel::Debug) < severity(LoggingLevel::Info));
        assert!(severity(LoggingLevel::Alert) < severity(LoggingLevel::Emergency));
    }
}
