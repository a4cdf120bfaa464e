//! `DemoServer`, the MCP handler: one per client session (one per request
//! for stateless 2026-07-28 HTTP calls). It routes each request to `tools`,
//! `resources` or `prompts` and keeps the per-session state, the log level
//! and the resource subscriptions; everything shared lives in the `Hub`.

// Logging and `resources/subscribe` are deprecated by SEP-2577/SEP-2575 but
// still part of the revisions up to 2025-11-25.
#![allow(deprecated)]

use std::sync::{Arc, Mutex};

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    handler::server::{router::tool::ToolRouter, tool::ToolCallContext},
    model::{
        CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult,
        GetPromptRequestParams, GetPromptResponse, Implementation, InitializeRequestParams,
        InitializeResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
        ListToolsResult, LoggingLevel, PaginatedRequestParams, ReadResourceRequestParams,
        ReadResourceResponse, ServerCapabilities, ServerConfig, SetLevelRequestParams,
        SubscribeRequestParams, SubscriptionFilter, Tool, UnsubscribeRequestParams,
    },
    service::{RequestContext, SubscriptionContext},
};

use crate::{
    hub::{Hub, Subscriptions, lock},
    prompts, resources, tools,
};

/// The MCP handler of one client session.
#[derive(Debug, Clone)]
pub struct DemoServer {
    hub: Arc<Hub>,
    builtin: ToolRouter<DemoServer>,
    log_level: Arc<Mutex<Option<LoggingLevel>>>,
    subscriptions: Subscriptions,
}

// === impl DemoServer ===

impl DemoServer {
    /// A handler for a new session of the server behind `hub`.
    pub fn new(hub: Arc<Hub>) -> Self {
        Self {
            hub,
            builtin: tools::builtin_router(),
            log_level: Arc::default(),
            subscriptions: Subscriptions::default(),
        }
    }

    /// The state shared by all sessions.
    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    /// The level set with `logging/setLevel` in this session, if any.
    pub fn log_level(&self) -> Option<LoggingLevel> {
        *lock(&self.log_level)
    }
}

impl ServerHandler for DemoServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_logging()
                .enable_completions()
                .enable_prompts()
                .enable_resources()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_resources_list_changed()
                .enable_resources_subscribe()
                .build(),
        )
        .with_server_info(Implementation::new(
            self.hub.name(),
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions(format!(
            "Vigil's demo MCP server {:?}: test tools, resources and a prompt.",
            self.hub.name()
        ))
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        context.peer.set_peer_info(request.clone());
        let result = self.negotiate_initialize(&request)?;
        tracing::info!(
            client = %request.client_info.name,
            protocol = %result.protocol_version,
            "session initialized"
        );
        self.hub
            .register_session(context.peer.clone(), self.subscriptions.clone());
        Ok(result)
    }

    // --- tools ---

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let mut all = self.builtin.list_all();
        all.extend(self.hub.dynamic_tool_definitions());
        Ok(ListToolsResult::with_all_items(all))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.builtin
            .get(name)
            .cloned()
            .or_else(|| self.hub.dynamic_tool(name).map(|tool| tool.to_tool()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if self.builtin.has_route(&request.name) {
            let call = ToolCallContext::new(self, request, context);
            return self.builtin.call(call).await;
        }
        match self.hub.dynamic_tool(&request.name) {
            Some(tool) => tools::call_dynamic(&tool, request.arguments).map(Into::into),
            None => Err(McpError::invalid_params(
                format!("unknown tool: {}", request.name),
                None,
            )),
        }
    }

    // --- resources ---

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        Ok(resources::list(&self.hub))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Ok(resources::templates(&self.hub))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        resources::read(&self.hub, &request.uri).map(Into::into)
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        resources::check_exists(&self.hub, &request.uri)?;
        tracing::debug!(uri = %request.uri, "resources/subscribe");
        lock(&self.subscriptions).insert(request.uri);
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        tracing::debug!(uri = %request.uri, "resources/unsubscribe");
        lock(&self.subscriptions).remove(&request.uri);
        Ok(())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        // Called before rmcp acknowledges the stream: start remembering changes.
        self.hub.expect_stream(requested);
        Some(requested.supported_by(&self.get_info().capabilities))
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        tracing::debug!(accepted = ?context.accepted(), "subscriptions/listen opened");
        let sink = context.sink().clone();
        let (_registered, missed) = self.hub.register_stream(context.requested(), sink.clone());
        // `send` drops what the stream did not accept.
        if missed.tools_list_changed
            && let Err(error) = sink.notify_tool_list_changed().await
        {
            tracing::debug!(%error, "did not replay tools/list_changed");
        }
        for uri in missed.resources_updated {
            if let Err(error) = sink.notify_resource_updated(uri).await {
                tracing::debug!(%error, "did not replay resources/updated");
            }
        }
        context.cancelled().await;
        tracing::debug!("subscriptions/listen closed");
        Ok(())
    }

    // --- prompts and completion ---

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        Ok(prompts::list())
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        prompts::get(self.hub.name(), &request).map(Into::into)
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        Ok(prompts::complete(&request))
    }

    // --- logging ---

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        tracing::debug!(level = ?request.level, "logging/setLevel");
        *lock(&self.log_level) = Some(request.level);
        Ok(())
    }
}
