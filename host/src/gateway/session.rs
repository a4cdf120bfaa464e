//! One client session: the rmcp `ServerHandler` that answers lists from the
//! catalog snapshot and routes everything else to the right backend.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rmcp::model::*;
use rmcp::service::{NotificationContext, RequestContext, RoleServer, SubscriptionContext};
use rmcp::{ErrorData as McpError, ServerHandler};

use super::Gateway;
use super::route::{
    forwardable_meta, mark_complete, page, unavailable, unknown_prompt, unknown_tool, unknown_uri,
};
use super::sessions::Channel;
use super::streams::StreamSessions;
use crate::backend::{Backend, Connection, FrontCall, StreamClosed};
use crate::health::{HealthState, advertisable};

/// The per-session handler; dropped (and unregistered) when the session ends.
pub struct FrontSession {
    gw: Arc<Gateway>,
    id: u64,
    /// Set once the client finished the 2025-style handshake: only then
    /// does the session have a lasting identity worth its own backend
    /// connections and notifications.
    registered: AtomicBool,
    /// This session's own connections to per-session (HTTP) backends.
    /// This session's own backend connections, with the [`Backend::uid`]
    /// they were opened for (a reload that edits a backend replaces it).
    conns: tokio::sync::Mutex<HashMap<Arc<str>, (u64, Arc<Connection>)>>,
}

impl FrontSession {
    /// The backend that serves resource `uri`, or the "unknown resource" error.
    fn uri_backend(&self, uri: &str) -> Result<Arc<str>, McpError> {
        self.gw
            .catalog()
            .route_uri(uri)
            .cloned()
            .ok_or_else(|| unknown_uri(uri))
    }

    pub(super) fn new(gw: Arc<Gateway>, id: u64) -> Self {
        Self {
            gw,
            id,
            registered: AtomicBool::new(false),
            conns: Default::default(),
        }
    }

    /// The connection a request from this session to `backend` travels on.
    async fn connection(
        &self,
        backend: &Arc<Backend>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Arc<Connection>, McpError> {
        let shared = backend.shared().ok_or_else(|| down(backend))?;
        if !backend.per_session() || !self.registered.load(Ordering::Acquire) {
            return Ok(shared);
        }
        let mut conns = self.conns.lock().await;
        if let Some((_, c)) = conns
            .get(&backend.name)
            .filter(|(uid, c)| *uid == backend.uid && !c.is_closed())
        {
            return Ok(c.clone());
        }
        let caps = ctx.peer.peer_info().map(|i| i.capabilities.clone());
        let conn = Arc::new(
            backend
                .open_session_connection(self.id, caps)
                .await
                .map_err(|e| e.into_mcp())?,
        );
        conns.insert(backend.name.clone(), (backend.uid, conn.clone()));
        Ok(conn)
    }

    /// Forwards one request to `backend` and returns its answer.
    async fn forward(
        &self,
        backend: &Arc<str>,
        request: ClientRequest,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<ServerResult, McpError> {
        let b = self
            .gw
            .backend(backend)
            .ok_or_else(|| unavailable(backend, HealthState::Unknown, "not configured"))?;
        if !advertisable(b.state()) {
            return Err(down(&b));
        }
        let conn = self.connection(&b, ctx).await?;
        let polling = self.stream_polling(ctx);
        let front = FrontCall {
            peer: ctx.peer.clone(),
            request_id: ctx.id.clone(),
            progress_token: ctx.meta.get_progress_token(),
            on_stream_closed: polling.as_ref().map(|p| p.hook()),
        };
        let result = conn.request(request, Some(front), &ctx.ct).await;
        if let Some(p) = polling {
            p.finish().await;
        }
        match result {
            Ok(mut r) => {
                mark_complete(&mut r);
                Ok(r)
            }
            Err(e) => {
                if e.is_connection_lost() {
                    self.conns.lock().await.remove(backend);
                    return Err(unavailable(&b.name, HealthState::Offline, &e.to_string()));
                }
                tracing::debug!(backend = %backend, error = %e, "routed request failed");
                Err(e.into_mcp())
            }
        }
    }

    /// SSE polling pass-through for this request, when the client is an
    /// HTTP session whose stream Vigil can close.
    fn stream_polling(&self, ctx: &RequestContext<RoleServer>) -> Option<Polling> {
        let streams = self.gw.streams.get()?.clone();
        let parts = ctx.extensions.get::<http::request::Parts>()?;
        let session = parts
            .headers
            .get("mcp-session-id")?
            .to_str()
            .ok()?
            .to_owned();
        Some(Polling {
            streams,
            session,
            request: ctx.id.clone(),
            closing: Default::default(),
        })
    }

    /// The error for a name with no route: "unavailable" when it belongs to
    /// a backend that is not serving, `unknown` otherwise.
    fn unrouted(
        &self,
        catalog: &crate::catalog::Catalog,
        name: &str,
        unknown: fn(&str) -> McpError,
    ) -> McpError {
        match self.gw.owner_of_unrouted(catalog, name) {
            Some(b) if !advertisable(b.state()) => down(&b),
            _ => unknown(name),
        }
    }

    /// Drops the stream record of a routed request that never reached a
    /// backend (see [`StreamSessions`]).
    fn forget_stream(&self, ctx: &RequestContext<RoleServer>) {
        if let Some(p) = self.stream_polling(ctx) {
            p.streams.forget(&p.session, &p.request);
        }
    }

    fn unexpected(backend: &str, method: &str) -> McpError {
        McpError::internal_error(
            format!("backend '{backend}' answered {method} with a result of the wrong type"),
            None,
        )
    }

    /// One page of a merged list of the current catalog.
    fn page_of<T: Clone>(
        &self,
        list: impl Fn(&crate::catalog::Catalog) -> &Vec<T>,
        p: &Option<PaginatedRequestParams>,
    ) -> Result<(Vec<T>, Option<String>), McpError> {
        let cursor = p.as_ref().and_then(|p| p.cursor.as_deref());
        page(list(&self.gw.catalog()), cursor, self.gw.config.page_size)
    }
}

/// The "unavailable" error for a backend that is not serving.
fn down(b: &Backend) -> McpError {
    let s = b.status();
    unavailable(&b.name, s.state, &s.reason)
}

/// One request's SSE polling pass-through (see `super::streams`).
struct Polling {
    streams: Arc<StreamSessions>,
    session: String,
    request: RequestId,
    /// The close-and-wait-for-resume task, once the backend closed its stream.
    closing: Arc<std::sync::Mutex<Option<tokio::task::JoinHandle<bool>>>>,
}

impl Polling {
    /// Called by the backend connection when the backend closed the stream.
    fn hook(&self) -> StreamClosed {
        let (streams, session, request, closing) = (
            self.streams.clone(),
            self.session.clone(),
            self.request.clone(),
            self.closing.clone(),
        );
        Arc::new(move || {
            let (streams, session, request) = (streams.clone(), session.clone(), request.clone());
            let task =
                tokio::spawn(
                    async move { streams.close_and_await_resume(&session, &request).await },
                );
            if let Ok(mut slot) = closing.lock() {
                slot.get_or_insert(task);
            }
        })
    }

    /// Before answering: if the client's stream was closed, wait until the
    /// client resumed (bounded), so the answer has a stream to go to.
    async fn finish(self) {
        let task = self.closing.lock().ok().and_then(|mut t| t.take());
        if let Some(task) = task {
            let _ = task.await;
        }
        self.streams.forget(&self.session, &self.request);
    }
}

impl Drop for FrontSession {
    fn drop(&mut self) {
        if self.registered.load(Ordering::Acquire) {
            self.gw.sessions().remove(self.id);
            tracing::debug!(session = self.id, "client session closed");
        }
    }
}

impl ServerHandler for FrontSession {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_resources_list_changed()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_completions()
            .enable_logging()
            .build();
        let mut info = ServerConfig::new(capabilities);
        info.server_info = Implementation::new("vigil", env!("CARGO_PKG_VERSION"));
        info.instructions = Some("Vigil MCP gateway: tools, resources and prompts of several MCP servers behind one endpoint.".into());
        info
    }

    async fn on_initialized(&self, ctx: NotificationContext<RoleServer>) {
        if !self.registered.swap(true, Ordering::AcqRel) {
            self.gw
                .sessions()
                .add(self.id, Channel::Session(ctx.peer.clone()));
            tracing::debug!(session = self.id, "client session opened");
        }
    }

    async fn ping(&self, _ctx: RequestContext<RoleServer>) -> Result<(), McpError> {
        Ok(())
    }

    async fn list_tools(
        &self,
        p: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let (items, next) = self.page_of(|c| &c.tools, &p)?;
        let mut r = ListToolsResult::with_all_items(items);
        r.next_cursor = next;
        Ok(r)
    }

    async fn list_resources(
        &self,
        p: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let (items, next) = self.page_of(|c| &c.resources, &p)?;
        let mut r = ListResourcesResult::with_all_items(items);
        r.next_cursor = next;
        Ok(r)
    }

    async fn list_resource_templates(
        &self,
        p: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let (items, next) = self.page_of(|c| &c.templates, &p)?;
        let mut r = ListResourceTemplatesResult::with_all_items(items);
        r.next_cursor = next;
        Ok(r)
    }

    async fn list_prompts(
        &self,
        p: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let (items, next) = self.page_of(|c| &c.prompts, &p)?;
        let mut r = ListPromptsResult::with_all_items(items);
        r.next_cursor = next;
        Ok(r)
    }

    async fn call_tool(
        &self,
        mut p: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // The route is taken from one snapshot, so a call never mixes a
        // name from one catalog generation with a backend from another.
        let catalog = self.gw.catalog();
        let Some(route) = catalog.route_tool(&p.name).cloned() else {
            self.forget_stream(&ctx);
            return Err(self.unrouted(&catalog, &p.name, unknown_tool));
        };
        p.name = route.name.into();
        p.meta = forwardable_meta(p.meta);
        let t0 = tokio::time::Instant::now();
        let result = self
            .forward(
                &route.backend,
                ClientRequest::CallToolRequest(CallToolRequest::new(p)),
                &ctx,
            )
            .await;
        if let Some(b) = self.gw.backend(&route.backend) {
            // Application signal: real traffic's outcome and latency.
            let ok =
                matches!(&result, Ok(ServerResult::CallToolResult(r)) if r.is_error != Some(true));
            b.stats.record(ok, t0.elapsed());
        }
        match result? {
            ServerResult::CallToolResult(r) => Ok(CallToolResponse::Complete(r)),
            ServerResult::InputRequiredResult(r) => Ok(CallToolResponse::InputRequired(r)),
            ServerResult::CreateTaskResult(r) => Ok(CallToolResponse::Task(r)),
            _ => Err(Self::unexpected(&route.backend, "tools/call")),
        }
    }

    async fn read_resource(
        &self,
        mut p: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let backend = match self.uri_backend(&p.uri) {
            Ok(b) => b,
            Err(e) => {
                self.forget_stream(&ctx);
                return Err(e);
            }
        };
        p.meta = forwardable_meta(p.meta);
        match self
            .forward(
                &backend,
                ClientRequest::ReadResourceRequest(ReadResourceRequest::new(p)),
                &ctx,
            )
            .await?
        {
            ServerResult::ReadResourceResult(r) => Ok(ReadResourceResponse::Complete(r)),
            ServerResult::InputRequiredResult(r) => Ok(ReadResourceResponse::InputRequired(r)),
            _ => Err(Self::unexpected(&backend, "resources/read")),
        }
    }

    async fn get_prompt(
        &self,
        mut p: GetPromptRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let catalog = self.gw.catalog();
        let Some(route) = catalog.route_prompt(&p.name).cloned() else {
            self.forget_stream(&ctx);
            return Err(self.unrouted(&catalog, &p.name, unknown_prompt));
        };
        p.name = route.name;
        p.meta = forwardable_meta(p.meta);
        match self
            .forward(
                &route.backend,
                ClientRequest::GetPromptRequest(GetPromptRequest::new(p)),
                &ctx,
            )
            .await?
        {
            ServerResult::GetPromptResult(r) => Ok(GetPromptResponse::Complete(r)),
            ServerResult::InputRequiredResult(r) => Ok(GetPromptResponse::InputRequired(r)),
            _ => Err(Self::unexpected(&route.backend, "prompts/get")),
        }
    }

    async fn complete(
        &self,
        mut p: CompleteRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let catalog = self.gw.catalog();
        let backend = match &mut p.r#ref {
            Reference::Prompt(r) => {
                let route = catalog
                    .route_prompt(&r.name)
                    .cloned()
                    .ok_or_else(|| unknown_prompt(&r.name))?;
                r.name = route.name;
                route.backend
            }
            Reference::Resource(r) => catalog
                .route_uri(&r.uri)
                .cloned()
                .ok_or_else(|| unknown_uri(&r.uri))?,
            _ => {
                return Err(McpError::invalid_params(
                    "unsupported completion reference type",
                    None,
                ));
            }
        };
        p.meta = forwardable_meta(p.meta);
        match self
            .forward(
                &backend,
                ClientRequest::CompleteRequest(CompleteRequest::new(p)),
                &ctx,
            )
            .await?
        {
            ServerResult::CompleteResult(r) => Ok(r),
            _ => Err(Self::unexpected(&backend, "completion/complete")),
        }
    }

    async fn subscribe(
        &self,
        mut p: SubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let backend = self.uri_backend(&p.uri)?;
        let uri = p.uri.clone();
        p.meta = forwardable_meta(p.meta);
        self.forward(
            &backend,
            ClientRequest::SubscribeRequest(SubscribeRequest::new(p)),
            &ctx,
        )
        .await?;
        self.gw.sessions().subscribe(self.id, &uri, true);
        Ok(())
    }

    async fn unsubscribe(
        &self,
        mut p: UnsubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let backend = self.uri_backend(&p.uri)?;
        let uri = p.uri.clone();
        p.meta = forwardable_meta(p.meta);
        self.gw.sessions().subscribe(self.id, &uri, false);
        self.forward(
            &backend,
            ClientRequest::UnsubscribeRequest(UnsubscribeRequest::new(p)),
            &ctx,
        )
        .await?;
        Ok(())
    }

    /// Applies the level to every connected backend that does logging; the
    /// gateway also filters relayed messages of shared backends by it.
    async fn set_level(
        &self,
        p: SetLevelRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.gw.sessions().set_log_level(self.id, p.level);
        for b in self.gw.backends().iter() {
            let Some(shared) = b.shared() else { continue };
            if shared.capabilities().logging.is_none() {
                continue;
            }
            let request = ClientRequest::SetLevelRequest(SetLevelRequest::new(
                SetLevelRequestParams::new(p.level),
            ));
            if let Err(e) = self.forward(&b.name, request, &ctx).await {
                tracing::debug!(backend = %b.name, error = %e.message, "logging/setLevel not applied");
            }
        }
        Ok(())
    }

    async fn on_roots_list_changed(&self, _ctx: NotificationContext<RoleServer>) {
        let conns: Vec<Arc<Connection>> = self
            .conns
            .lock()
            .await
            .values()
            .map(|(_, c)| c.clone())
            .collect();
        for c in conns {
            let n = ClientNotification::RootsListChangedNotification(
                RootsListChangedNotification::default(),
            );
            let _ = c.notify(n).await;
        }
    }

    async fn on_custom_request(
        &self,
        r: CustomRequest,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        Err(McpError::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!(
                "Method not found: '{}' is not an MCP method this gateway serves",
                r.method
            ),
            None,
        ))
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.clone())
    }

    async fn listen(&self, ctx: SubscriptionContext) -> Result<(), McpError> {
        // Each listen stream is its own registry entry for as long as it is open.
        let id = self.gw.new_listen_id();
        tracing::debug!(listen = id, accepted = ?ctx.accepted(), "subscriptions/listen stream opened");
        self.gw
            .sessions()
            .add(id, Channel::Listen(ctx.sink().clone()));
        ctx.cancelled().await;
        self.gw.sessions().remove(id);
        Ok(())
    }
}
