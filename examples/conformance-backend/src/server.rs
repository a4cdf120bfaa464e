//! The MCP server handler: declares the capabilities and routes each request
//! to the module that answers it.

// resources/subscribe, logging/setLevel and sampling are marked deprecated in
// rmcp (SEP-2577 / 2026-07-28), but the 2025-11-25 protocol the suite speaks
// has them.
#![allow(deprecated)]

use std::time::Duration;

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult,
        GetPromptRequestParams, GetPromptResponse, Implementation, ListPromptsResult,
        ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, LoggingLevel,
        PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
        ResourceUpdatedNotificationParam, ServerCapabilities, ServerConfig, SetLevelRequestParams,
        SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams,
    },
    service::{NotificationContext, RequestContext, SubscriptionContext},
};
use serde_json::{Map, Value};

use crate::{
    changes::{Changes, List},
    completion,
    mrtr::{self, Outcome},
    prompts, resources,
    session::Session,
    tools,
};

/// Delay before the one `notifications/resources/updated` that follows a
/// subscription, so that it comes after the subscription's answer.
const UPDATE_AFTER_SUBSCRIBE: Duration = Duration::from_millis(100);

#[derive(Clone)]
pub struct ConformanceServer {
    session: Session,
}

impl ConformanceServer {
    pub fn new(session: Session) -> Self {
        Self { session }
    }
}

impl ServerHandler for ConformanceServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_resources_list_changed()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_logging()
            .enable_completions()
            .build();
        let mut config = ServerConfig::new(capabilities);
        config.server_info = Implementation::new(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION"));
        config.instructions =
            Some("Implements what the MCP conformance suite's server scenarios expect.".to_owned());
        config
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.session.log.set(request.level);
        let level = serde_json::to_value(request.level).unwrap_or_default();
        let message = format!("Log level set to: {}", level.as_str().unwrap_or("?"));
        self.session
            .log
            .log(&context.peer, LoggingLevel::Info, message)
            .await;
        Ok(())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        completion::complete(&request)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tools::tools(
            &self.session.shared.changes,
        )?))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        tools::call(&self.session, request, &context).await
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        resources::list()
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        resources::list_templates()
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        resources::read(&request.uri).map(Into::into)
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let uri = request.uri;
        if !resources::exists(&uri) {
            return Err(resources::not_found(&uri));
        }
        self.session.subscribe(&uri);
        let message = format!("Subscribed to resource: {uri}");
        self.session
            .log
            .log(&context.peer, LoggingLevel::Info, message)
            .await;
        // Tell the subscriber once that the resource changed, so a client (or a
        // gateway in front) sees a `notifications/resources/updated` flow.
        let (session, peer) = (self.session.clone(), context.peer.clone());
        tokio::spawn(async move {
            tokio::time::sleep(UPDATE_AFTER_SUBSCRIBE).await;
            if session.is_subscribed(&uri) {
                let update = ResourceUpdatedNotificationParam::new(uri);
                if let Err(error) = peer.notify_resource_updated(update).await {
                    tracing::debug!(%error, "could not send a resource update");
                }
            }
        });
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.session.unsubscribe(&request.uri);
        let message = format!("Unsubscribed from resource: {}", request.uri);
        self.session
            .log
            .log(&context.peer, LoggingLevel::Info, message)
            .await;
        Ok(())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        prompts::list(self.session.shared.changes.revision(List::Prompts))
    }

    /// The MRTR prompt first gathers its context from the client (an
    /// input-required result in 2026-07-28, a real elicitation before).
    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let (responses, state) = (
            request.input_responses.as_ref(),
            request.request_state.as_deref(),
        );
        let sealer = &self.session.shared.sealer;
        let outcome = mrtr::run(sealer, &request.name, responses, state, &context).await;
        match outcome.transpose()? {
            None => prompts::get(&request.name, request.arguments.as_ref()).map(Into::into),
            Some(Outcome::Done(text)) => {
                let arguments = Map::from_iter([("context".to_owned(), Value::String(text))]);
                prompts::get(&request.name, Some(&arguments)).map(Into::into)
            }
            Some(Outcome::InputRequired(result)) => Ok(result.into()),
            Some(Outcome::Failed(reason)) => Err(McpError::internal_error(reason, None)),
        }
    }

    /// Every list change and resource update the capabilities advertise;
    /// rmcp narrows this to what the client asked for. Called just before
    /// rmcp acknowledges the stream, so the stream's change receiver is
    /// taken here: nothing changed after the acknowledgment is missed.
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        self.session.prepare_listener();
        Some(requested.clone())
    }

    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), McpError> {
        Changes::listen(subscription, self.session.take_listener()).await
    }

    /// A handshake-era session hears of list changes on its own stream.
    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.session.shared.changes.register_session(context.peer);
    }
}
