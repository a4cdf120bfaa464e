//! The MCP client side of a backend connection: what Vigil does with the
//! requests and notifications a backend sends.
//!
//! Server→client requests and progress go to the client whose call caused
//! them (see [`super::inflight`] for the rule); list changes, log messages and
//! resource updates go to the [`Downstream`] the gateway provides.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::*;
use rmcp::service::{
    InboundStreamOrigin, NotificationContext, OriginatingRequestId, RequestContext, RoleClient,
    ServiceError,
};
use rmcp::{ClientHandler, ErrorData as McpError};

use super::inflight::{FrontCall, Inflight};
use super::wire::Wire;

/// Kinds of list a backend can announce as changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    Tools,
    Resources,
    Prompts,
}

/// Where a backend's unsolicited traffic goes; implemented by the gateway.
pub trait Downstream: Send + Sync + 'static {
    /// The backend says one of its lists changed.
    fn list_changed(&self, backend: &Arc<str>, kind: ListKind);
    /// A `notifications/message`; `session` is set on per-session
    /// connections. Queued for each client it goes to (see
    /// [`super::outbox`]): never waits for a client.
    fn log(
        &self,
        backend: &Arc<str>,
        session: Option<u64>,
        params: LoggingMessageNotificationParam,
    );
    /// A `notifications/resources/updated`; `session` as for [`Self::log`].
    fn resource_updated(&self, backend: &Arc<str>, session: Option<u64>, uri: String);
    /// A `notifications/message` of an instance run for `caller`
    /// (`instances.rs`): for that caller's sessions. Only the gateway's
    /// fan-out implements it: an instance's downstream wraps that
    /// directly, and no other connection sends it.
    fn caller_log(
        &self,
        _backend: &Arc<str>,
        _caller: &crate::auth::CallerKey,
        _params: LoggingMessageNotificationParam,
    ) {
    }
    /// A `notifications/resources/updated` of an instance run for
    /// `caller`: for that caller's sessions subscribed to `uri`. Only the
    /// gateway's fan-out implements it (see [`Self::caller_log`]).
    fn caller_resource_updated(
        &self,
        _backend: &Arc<str>,
        _caller: &crate::auth::CallerKey,
        _uri: String,
    ) {
    }
    /// A `notifications/message` on the lane of `principal` (see
    /// `lane.rs`): for that principal's client sessions that use lanes.
    fn lane_log(
        &self,
        backend: &Arc<str>,
        principal: &crate::auth::CallerKey,
        params: LoggingMessageNotificationParam,
    );
    /// What `caller`'s lane lists changed (`lane.rs`): that caller's
    /// sessions that use lanes re-derive their lists.
    fn lane_listed(&self, _backend: &Arc<str>, _caller: &crate::auth::CallerKey) {}
    /// What a backend session for a capability set lists changed (see
    /// `variants.rs`): the sessions of that set re-derive their lists.
    fn variant_listed(&self, _backend: &Arc<str>) {}
}

/// One backend connection's client handler.
#[derive(Clone)]
pub struct BackendClient {
    backend: Arc<str>,
    inflight: Arc<Inflight>,
    downstream: Arc<dyn Downstream>,
    /// The client session a per-session connection belongs to.
    session: Option<u64>,
    info: ClientConfig,
    /// What the connection's backend wrote (set when it connects).
    wire: Option<Arc<Wire>>,
    /// The backend's configured `roots`: the answer to a `roots/list` no
    /// client that declared roots asks through a call of its own.
    roots: Option<Arc<[Root]>>,
    /// The one client an instance of its own serves (`instances.rs`):
    /// asked `roots/list` when the server asks outside any call.
    client: Option<rmcp::Peer<rmcp::RoleServer>>,
}

/// How long a server→client request waits for its originating call to be
/// registered (the backend can answer faster than the registration lands).
const ASSOCIATION_GRACE: Duration = Duration::from_millis(200);

impl BackendClient {
    pub fn new(
        backend: Arc<str>,
        inflight: Arc<Inflight>,
        downstream: Arc<dyn Downstream>,
        session: Option<u64>,
        capabilities: Option<ClientCapabilities>,
    ) -> Self {
        // Declares nothing unless told: a backend shows a client with no
        // capabilities what it shows such a client (`capset.rs`).
        let capabilities = capabilities.unwrap_or_default();
        let mut info = ClientConfig::new(
            capabilities,
            Implementation::new("vigil", env!("CARGO_PKG_VERSION")),
        );
        info.protocol_version = ProtocolVersion::LATEST_WITH_INITIALIZE;
        Self {
            backend,
            inflight,
            downstream,
            session,
            info,
            wire: None,
            roots: None,
            client: None,
        }
    }

    /// Asks `client` (the one client this connection serves) for its
    /// roots when the server asks outside any call of it, if the client
    /// declared roots.
    pub fn with_client(mut self, client: Option<rmcp::Peer<rmcp::RoleServer>>) -> Self {
        self.client = client.filter(|p| {
            p.peer_info()
                .is_some_and(|i| i.capabilities.roots.is_some())
        });
        self
    }

    /// Answers `roots/list` with `uris` where no calling client that
    /// declared roots does (the backend's `roots` key), and so declares
    /// the `roots` capability. Nothing when `uris` is empty.
    pub fn with_roots(mut self, uris: &[String]) -> Self {
        if uris.is_empty() {
            return self;
        }
        self.roots = Some(uris.iter().map(|u| Root::new(u.clone())).collect());
        if self.info.capabilities.roots.is_none() {
            self.info.capabilities.roots = Some(RootsCapabilities::default());
        }
        self
    }

    /// Reads the params of the backend's requests from `wire` (see
    /// [`Self::forward`]).
    pub fn attach(&mut self, wire: Arc<Wire>) {
        self.wire = Some(wire);
    }

    /// Where the connection's unsolicited traffic goes.
    pub fn downstream(&self) -> Arc<dyn Downstream> {
        self.downstream.clone()
    }

    /// The client session a per-session connection belongs to.
    pub fn session(&self) -> Option<u64> {
        self.session
    }

    /// Offers `version` in `initialize` instead of the newest handshake
    /// revision (a backend's `protocol = "2025-06-18"`, say).
    pub fn offer(&mut self, version: ProtocolVersion) {
        self.info.protocol_version = version;
    }

    /// Finds the client call a server→client request belongs to.
    async fn front_call(&self, ctx: &RequestContext<RoleClient>) -> Result<FrontCall, McpError> {
        let deadline = tokio::time::Instant::now() + ASSOCIATION_GRACE;
        loop {
            if let Some(call) = self.call_of(ctx) {
                return Ok(call);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(McpError::invalid_request(
                    format!(
                        "vigil: no client request to backend '{}' is in flight, so there is no client to ask",
                        self.backend
                    ),
                    None,
                ));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The client call a server→client request belongs to, as registered
    /// now: the request whose stream it came on, else the latest call.
    fn call_of(&self, ctx: &RequestContext<RoleClient>) -> Option<FrontCall> {
        match ctx.extensions.get::<InboundStreamOrigin>() {
            Some(InboundStreamOrigin::OutboundRequest(id)) => self.inflight.by_request(id),
            _ => self.inflight.latest(),
        }
    }

    /// Whether the call a `roots/list` belongs to is of a client that
    /// declared roots (then its roots win over configured ones). Looked
    /// up without waiting: outside any call there is none.
    fn asking_client_declared_roots(&self, ctx: &RequestContext<RoleClient>) -> bool {
        self.call_of(ctx)
            .is_some_and(|c| c.declared().answers("roots/list"))
    }

    /// Sends a server→client request to the client whose call caused it.
    async fn forward(
        &self,
        ctx: &RequestContext<RoleClient>,
        mut request: ServerRequest,
    ) -> Result<ClientResult, McpError> {
        let call = self.front_call(ctx).await?;
        if let Some(method) = relayed_method(&request)
            && !call.declared().answers(method)
        {
            // A backend session shared with capable clients may ask; a
            // client that did not declare the capability is never asked
            // (its SDK would refuse, and the answer would have to stream).
            return Err(McpError::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!(
                    "vigil: the client whose call this is did not declare the capability {method} needs, so it is not asked"
                ),
                None,
            ));
        }
        // The params as the backend wrote them (rmcp's typed ones narrow
        // numbers and drop what it does not know), for either era.
        let kept = self.wire.as_ref().and_then(|w| w.take_ask(&ctx.id));
        if let (Some(params), Some(method)) = (kept, relayed_method(&request)) {
            let params = (!params.is_null()).then_some(params);
            request = ServerRequest::CustomRequest(CustomRequest::new(method, params));
        }
        if let Some(asker) = &call.ask {
            tracing::debug!(backend = %self.backend, front_request = %call.request_id, "asking a 2026-07-28 client through an input-required result");
            return asker.ask(request).await;
        }
        tracing::debug!(backend = %self.backend, front_request = %call.request_id, origin = ?ctx.extensions.get::<InboundStreamOrigin>(), "relaying a server request to the client");
        // Deliver on the originating request's stream (SEP-2260), so clients
        // that only listen there see it.
        request
            .extensions_mut()
            .insert(OriginatingRequestId(call.request_id.clone()));
        // Sent from a fresh task: rmcp tags requests sent while a handler
        // runs with *that* handler's request id (here the backend's), which
        // would overwrite the client-side id set above.
        let peer = call.peer.clone();
        let mut send = crate::background::spawn(async move { peer.send_request(request).await });
        tokio::select! {
            r = &mut send => match r {
                Ok(r) => r.map_err(|e| service_error(&self.backend, e)),
                Err(e) => Err(McpError::internal_error(format!("relaying to the client failed: {e}"), None)),
            },
            _ = ctx.ct.cancelled() => {
                send.abort();
                Err(McpError::internal_error("cancelled by the backend", None))
            }
        }
    }
}

impl BackendClient {
    /// Asks the one client of this connection for its roots, outside any
    /// call (from a task of its own, as [`Self::forward`] does).
    async fn ask_own_client(
        &self,
        client: &rmcp::Peer<rmcp::RoleServer>,
        ctx: &RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, McpError> {
        tracing::debug!(backend = %self.backend, "asking the instance's own client for its roots");
        let peer = client.clone();
        // Owned here: it ends when this request does.
        let mut send =
            tokio_util::task::AbortOnDropHandle::new(crate::background::spawn(async move {
                peer.send_request(ServerRequest::ListRootsRequest(ListRootsRequest::default()))
                    .await
            }));
        tokio::select! {
            r = &mut send => match r {
                Ok(Ok(ClientResult::ListRootsResult(r))) => Ok(r),
                Ok(Ok(_)) => unexpected("roots/list"),
                Ok(Err(e)) => Err(service_error(&self.backend, e)),
                Err(e) => Err(McpError::internal_error(format!("asking the client failed: {e}"), None)),
            },
            _ = ctx.ct.cancelled() => {
                send.abort();
                Err(McpError::internal_error("cancelled by the backend", None))
            }
        }
    }
}

/// The method of a server→client request whose params the wire keeps.
fn relayed_method(request: &ServerRequest) -> Option<&'static str> {
    Some(match request {
        ServerRequest::CreateMessageRequest(_) => "sampling/createMessage",
        ServerRequest::ElicitRequest(_) => "elicitation/create",
        ServerRequest::ListRootsRequest(_) => "roots/list",
        _ => return None,
    })
}

/// Maps a failure to reach a client into what the backend is told.
fn service_error(backend: &str, e: ServiceError) -> McpError {
    match e {
        ServiceError::McpError(e) => e,
        other => McpError::internal_error(
            format!("vigil could not relay backend '{backend}' request to the client: {other}"),
            None,
        ),
    }
}

fn unexpected<T>(what: &str) -> Result<T, McpError> {
    Err(McpError::internal_error(
        format!("the client answered {what} with an unexpected result type"),
        None,
    ))
}

impl ClientHandler for BackendClient {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        ctx: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, McpError> {
        let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
        match self.forward(&ctx, request).await? {
            ClientResult::CreateMessageResult(r) => Ok(*r),
            _ => unexpected("sampling/createMessage"),
        }
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        ctx: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
        match self.forward(&ctx, request).await? {
            ClientResult::ElicitResult(r) => Ok(r),
            _ => unexpected("elicitation/create"),
        }
    }

    async fn list_roots(
        &self,
        ctx: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, McpError> {
        if let Some(roots) = &self.roots
            && !self.asking_client_declared_roots(&ctx)
        {
            return Ok(ListRootsResult::new(roots.to_vec()));
        }
        if let Some(client) = &self.client
            && self.call_of(&ctx).is_none()
        {
            return self.ask_own_client(client, &ctx).await;
        }
        let request = ServerRequest::ListRootsRequest(ListRootsRequest::default());
        match self.forward(&ctx, request).await? {
            ClientResult::ListRootsResult(r) => Ok(r),
            _ => unexpected("roots/list"),
        }
    }

    async fn ping(&self, _ctx: RequestContext<RoleClient>) -> Result<(), McpError> {
        Ok(())
    }

    // Progress and log notifications are relayed in arrival order by the
    // transport tap (see `super::tap`), not from these per-task callbacks.

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _ctx: NotificationContext<RoleClient>,
    ) {
        self.downstream
            .resource_updated(&self.backend, self.session, params.uri);
    }

    async fn on_tool_list_changed(&self, _ctx: NotificationContext<RoleClient>) {
        self.downstream.list_changed(&self.backend, ListKind::Tools);
    }

    async fn on_resource_list_changed(&self, _ctx: NotificationContext<RoleClient>) {
        self.downstream
            .list_changed(&self.backend, ListKind::Resources);
    }

    async fn on_prompt_list_changed(&self, _ctx: NotificationContext<RoleClient>) {
        self.downstream
            .list_changed(&self.backend, ListKind::Prompts);
    }
}
