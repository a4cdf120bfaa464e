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
        SubscribeRequestParams, UnsubscribeRequestParams,
    },
    service::RequestContext,
};

use crate::{completion, prompts, resources, session::Session, tools};

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
        Ok(ListToolsResult::with_all_items(tools::tools()?))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        tools::call(&self.session, request, &context)
            .await
            .map(Into::into)
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
        prompts::list()
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        prompts::get(&request.name, request.arguments.as_ref()).map(Into::into)
    }
}
