//! One client session: the rmcp `ServerHandler` that answers lists from the
//! catalog snapshot and routes everything else to the right backend.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rmcp::model::*;
use rmcp::service::{NotificationContext, RequestContext, RoleServer, SubscriptionContext};
use rmcp::transport::streamable_http_server::SessionRestoreMarker;
use rmcp::{ErrorData as McpError, ServerHandler};

use serde_json::{Map, Value};

use super::Gateway;
use super::admission::{self, Admitted};
use super::mrtr::{Binding, MrtrTarget, Refused, Resumed, mrtr_target, retry_with, routed};
use super::relayed::{for_client, input_required};
use super::resource_watch::{Hold, Via};
use super::route::{
    forwardable_meta, page, schema_changed, unavailable, unavailable_call, unknown_prompt,
    unknown_tool, unknown_uri,
};
use super::session_ids::SealedId;
use super::sessions::{Channel, Viewer};
use super::streams::StreamSessions;
use crate::audit::{Method, PendingCall};
use crate::auth::Principal;
use crate::backend::ask::Asker;
use crate::backend::capset::CapSet;
use crate::backend::inflight::{CAPABILITIES_KEY, CallLog};
use crate::backend::pool::Pool;
use crate::backend::{
    Backend, BackendError, Connection, Era, FrontCall, Generation, Outbox, StreamClosed,
};
use crate::catalog::{Catalog, Entry, EntryKind, Kind};
use crate::cluster::book::Change;
use crate::dataplane::outcome::{CallError, Ended};
use crate::health::{HealthState, advertisable};
use crate::search::meta;

/// The per-session handler; dropped (and unregistered) when the session ends.
pub struct FrontSession {
    gw: Arc<Gateway>,
    id: u64,
    /// Set once the client finished the 2025-style handshake: only then
    /// does the session have a lasting identity worth its own backend
    /// connections and notifications.
    registered: AtomicBool,
    /// This session's own backend connections and, for `forward_auth`
    /// backends, its own catalogs of them.
    pool: Arc<Pool>,
    /// What backends relay to this client (progress, logs, resource
    /// updates), queued apart from every other client's.
    outbox: Outbox,
    /// Its `Mcp-Session-Id` and what the raw path knows of it, once the
    /// handshake finished over HTTP.
    front: std::sync::OnceLock<(Arc<str>, Arc<super::fronts::Front>)>,
    /// The resources this session subscribed to, by URI.
    watches: std::sync::Mutex<HashMap<String, Hold>>,
    /// A `subscriptions/listen` request's catalog when it was acknowledged.
    listen_shown: std::sync::OnceLock<Arc<Catalog>>,
    /// The resources its calls linked to (`links.rs`); the raw path's
    /// `Front` shares them.
    links: Arc<super::links::Links>,
}

/// The client's own credentials on this request, if it came over HTTP:
/// its `Authorization` header without `[auth]`; with `[auth.oauth]` (which
/// removes the header) the access token it authenticated with, for the
/// token exchange or passthrough of `forward_auth` backends.
fn authorization(extensions: &rmcp::model::Extensions) -> Option<&str> {
    authorization_of(extensions.get::<http::request::Parts>()?)
}

/// [`authorization`], from the request's parts.
pub(super) fn authorization_of(parts: &http::request::Parts) -> Option<&str> {
    if let Some(h) = parts.headers.get(http::header::AUTHORIZATION) {
        return h.to_str().ok();
    }
    parts
        .extensions
        .get::<crate::auth::InboundToken>()
        .map(|t| &*t.0)
}

/// Hands what a request (or the `initialized` notification) carries to
/// `pool`: the client's `Authorization` and capabilities.
fn observe(pool: &Pool, extensions: &rmcp::model::Extensions, peer: &rmcp::Peer<RoleServer>) {
    pool.observe(authorization(extensions), Principal::of(extensions), || {
        peer.peer_info().map(|i| i.capabilities.clone())
    });
    pool.know_client(peer);
}

impl FrontSession {
    /// Records in the session book what this session keeps (its log
    /// level, its subscriptions), for a replica that adopts it. A session
    /// without a sealed id (stdio) has nothing to record.
    async fn keep(&self, ctx: &RequestContext<RoleServer>, change: Change) {
        let Some(SealedId(id)) = ctx
            .extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.extensions.get::<SealedId>())
        else {
            return;
        };
        if let Err(why) = self.gw.session_book.update(id, change).await {
            tracing::debug!(session = %crate::redact::session_tag(id), %why, "not recorded in the session book");
        }
    }

    /// A session this replica adopted (`super::adopt`) was just
    /// registered: it takes back what it kept (its log level, its
    /// subscriptions, from the session book), and hears that every list
    /// and every subscribed resource may have changed, since a change it
    /// was due may have been lost with the replica that served it.
    async fn adopted(&self, ctx: &NotificationContext<RoleServer>) {
        crate::metrics::get().adoptions.inc();
        let sealed = ctx
            .extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.extensions.get::<SealedId>())
            .map(|s| s.0.clone());
        let kept = match &sealed {
            Some(id) => self.gw.session_book.kept(id).await.unwrap_or_default(),
            None => Default::default(),
        };
        tracing::info!(session = self.id, subscriptions = kept.subscriptions.len(), log_level = ?kept.log_level, "adopted a session opened elsewhere");
        let mut request =
            RequestContext::new(rmcp::model::NumberOrString::Number(0), ctx.peer.clone());
        request.extensions = ctx.extensions.clone();
        if let Some(level) = kept
            .log_level
            .and_then(|l| serde_json::from_value(serde_json::Value::String(l)).ok())
            && let Err(e) = self
                .set_level(SetLevelRequestParams::new(level), request.clone())
                .await
        {
            tracing::debug!(session = self.id, error = %e.message, "could not restore an adopted session's log level");
        }
        let peer = &ctx.peer;
        for uri in kept.subscriptions {
            match self
                .subscribe(SubscribeRequestParams::new(uri.clone()), request.clone())
                .await
            {
                // An update it was due may have been lost the same way.
                Ok(_) => {
                    let _ = peer
                        .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                        .await;
                }
                Err(e) => {
                    tracing::info!(session = self.id, %uri, error = %e.message, "could not restore an adopted session's subscription");
                }
            }
        }
        let _ = peer.notify_tool_list_changed().await;
        let _ = peer.notify_resource_list_changed().await;
        let _ = peer.notify_prompt_list_changed().await;
    }

    /// The backend that serves resource `uri` in `catalog`, or the
    /// "unknown resource" error.
    fn uri_backend(catalog: &Catalog, uri: &str) -> Result<Arc<str>, McpError> {
        catalog
            .route_uri(uri)
            .cloned()
            .ok_or_else(|| unknown_uri(uri))
    }

    /// Watches resource `uri` at the backend serving it, for this caller.
    async fn watch(&self, uri: &str, ctx: &RequestContext<RoleServer>) -> Result<Hold, McpError> {
        let generation = self.gw.generation();
        if !generation
            .policies
            .access(&Principal::of(&ctx.extensions))
            .permits(uri)
        {
            return Err(unknown_uri(uri));
        }
        let name = Self::uri_backend(&*self.catalog(&generation, ctx).await, uri)?;
        let b = generation
            .backends
            .get(&name)
            .cloned()
            .ok_or_else(|| unavailable(&name, HealthState::Unknown, "not configured"))?;
        if !advertisable(b.state()) {
            return Err(down(&b).error);
        }
        let (conn, via) = self.connection_via(&b, ctx).await.map_err(|e| e.error)?;
        self.gw
            .resource_watch()
            .hold(&conn, uri, &b.name, via)
            .await
            .map_err(|e| self.gw.redactor().mask_error(e.into_mcp()))
    }

    /// A `tools/call` of `p.name` as routed: admitted, audited and
    /// forwarded to the backend whose tool it names (`call_tool` of tool
    /// search comes here with the tool it names).
    async fn call_routed(
        &self,
        generation: &Arc<Generation>,
        mut p: CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let audit = self.admit(generation, ctx, Kind::Tool, &p.name, unknown_tool, || {
            self.gw.audit().begin(
                Method::ToolsCall,
                &p.name,
                p.arguments.as_ref(),
                &ctx.extensions,
            )
        })?;
        let catalog = self.catalog(generation, ctx).await;
        let Some(route) = catalog.route_tool(&p.name).cloned() else {
            self.forget_stream(ctx);
            let (e, down) = self.unrouted(&catalog, &p.name, unknown_tool);
            audit.unrouted(down.as_deref());
            return Err(e);
        };
        p.name = route.name.into();
        p.meta = forwardable_meta(p.meta);
        let span = admission::tool_call_span(&route.backend, &p.name);
        let t0 = tokio::time::Instant::now();
        let result = tracing::Instrument::instrument(
            self.forward(
                generation,
                &route.backend,
                ClientRequest::CallToolRequest(CallToolRequest::new(p)),
                ctx,
            ),
            span.clone(),
        )
        .await;
        // Application signal: real traffic's outcome and latency.
        // A question for the client (MRTR) is no failure of the backend.
        let ended = Ended::of(&result, true);
        let b = generation.backends.get(&route.backend);
        let call = admission::ToolCall {
            span,
            took: t0.elapsed(),
        };
        admission::settle(audit, &route.backend, b.map(|b| &**b), ended, Some(call));
        let result = result.map_err(|e| e.error)?;
        self.links(ctx).learn(&route.backend, &result);
        let mut r = CallToolResult::success(Vec::new());
        r.meta = Some(self.gw.answers().keep(result));
        Ok(CallToolResponse::Complete(r))
    }

    /// `find_tool` (`search` and `always_listed` modes): ranked over what
    /// this caller's passthrough `tools/list` would show, audited like a
    /// call; answered by Vigil, never by a backend.
    async fn find_tool(
        &self,
        generation: &Arc<Generation>,
        access: &crate::policy::Access,
        p: CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.forget_stream(ctx);
        let audit = self.gw.audit().begin(
            Method::ToolsCall,
            &p.name,
            p.arguments.as_ref(),
            &ctx.extensions,
        );
        let view = self.visible(generation, ctx).await;
        let own = self.own_listings(ctx);
        let found = super::tool_search::find(
            &self.gw,
            generation,
            (access, &own),
            &view,
            p.arguments.as_ref(),
        );
        let searched = |results: usize| crate::audit::Searched {
            query_bytes: u32::try_from(crate::search::meta::query_bytes(p.arguments.as_ref()))
                .unwrap_or(u32::MAX),
            results: u32::try_from(results).unwrap_or(u32::MAX),
        };
        let mut r = CallToolResult::success(Vec::new());
        match found {
            Ok(answer) => {
                audit
                    .searched(searched(answer.found.len()))
                    .finish("", crate::audit::Outcome::Ok);
                let mut result = super::tool_search::answer_result(&answer);
                if let Value::Object(m) = &mut result {
                    for_client(m, is_modern(ctx), true);
                }
                r.meta = Some(self.gw.answers().keep(result));
            }
            Err(e) => {
                audit
                    .searched(searched(0))
                    .finish("", crate::audit::Outcome::Error);
                r = super::tool_search::refused(&e);
            }
        }
        Ok(CallToolResponse::Complete(r))
    }

    /// Whether `name` is a tool the caller with `access` cannot use: not
    /// its policy's, or no backend's (as opposed to one of a backend that
    /// is not serving, which keeps its own error).
    async fn unknown_to_caller(
        &self,
        generation: &Arc<Generation>,
        access: &crate::policy::Access,
        ctx: &RequestContext<RoleServer>,
        name: &str,
    ) -> bool {
        if !access.permits(name) {
            return true;
        }
        let catalog = self.catalog(generation, ctx).await;
        catalog.route_tool(name).is_none()
            && self
                .gw
                .owner_of_unrouted(&catalog, name)
                .is_none_or(|b| advertisable(b.state()))
    }

    fn watches_lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Hold>> {
        self.watches.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn new(gw: Arc<Gateway>, id: u64) -> Self {
        Self {
            pool: gw.new_pool(id),
            outbox: Outbox::new(gw.config.limits.relay_queue),
            gw,
            id,
            registered: AtomicBool::new(false),
            front: std::sync::OnceLock::new(),
            watches: Default::default(),
            listen_shown: std::sync::OnceLock::new(),
            links: Arc::default(),
        }
    }

    /// What this session routes by: the generation's catalog, with its own
    /// catalogs of `forward_auth` backends in place once it is registered
    /// (listed through its own connections first where due). Calls are
    /// checked by [`FrontSession::admit`] first; lists show
    /// [`FrontSession::visible`].
    async fn catalog(
        &self,
        generation: &Generation,
        ctx: &RequestContext<RoleServer>,
    ) -> Arc<Catalog> {
        let shared = generation.catalog.clone();
        let capset = self.capset(ctx);
        let Some(pool) = self.own_pool(ctx) else {
            return self.gw.capset_view(shared, &capset).await;
        };
        observe(&pool, &ctx.extensions, &ctx.peer);
        pool.derive_for(shared, &capset).await
    }

    /// The capability set of the client making this request (see
    /// `backend::capset`): a 2026-07-28 request's own declaration, or the
    /// one of the session's `initialize`.
    fn capset(&self, ctx: &RequestContext<RoleServer>) -> CapSet {
        if is_modern(ctx) {
            return ctx
                .meta
                .0
                .0
                .get(CAPABILITIES_KEY)
                .map(CapSet::of_json)
                .unwrap_or_default()
                .modern();
        }
        if self.registered.load(Ordering::Acquire) {
            // Read once, when the session was registered.
            return self.pool.capset();
        }
        let info = ctx.peer.peer_info();
        CapSet::of(info.as_ref().map(|i| &i.capabilities))
    }

    /// The pool this request reaches backends through with the client's
    /// own connections: the session's once it is registered; for a
    /// sessionless (2026-07-28) request, its caller's ([`Self::modern_pool`]:
    /// what its caller's backend sessions listed is part of its view);
    /// otherwise none (shared connections only; a session's requests
    /// before it is registered, `initialize` among them).
    fn own_pool(&self, ctx: &RequestContext<RoleServer>) -> Option<Arc<Pool>> {
        if self.registered.load(Ordering::Acquire) {
            return Some(self.pool.clone());
        }
        self.modern_pool(ctx)
    }

    /// What the client of `ctx` listed itself (`Pool::own_listings`):
    /// nothing without a pool of its own.
    fn own_listings(&self, ctx: &RequestContext<RoleServer>) -> crate::search::OwnListings {
        self.own_pool(ctx)
            .map(|p| p.own_listings())
            .unwrap_or_default()
    }

    /// The pool of a 2026-07-28 request (`None` for another): over HTTP
    /// its caller's (`caller_pools`), over stdio the one client's.
    fn modern_pool(&self, ctx: &RequestContext<RoleServer>) -> Option<Arc<Pool>> {
        if !is_modern(ctx) {
            return None;
        }
        Some(match self.modern_caller(ctx) {
            Some(caller) => caller.pool,
            None => self.pool.clone(),
        })
    }

    /// What a 2026-07-28 request over HTTP shares with its caller's others.
    fn modern_caller(
        &self,
        ctx: &RequestContext<RoleServer>,
    ) -> Option<super::caller_pools::Caller> {
        if !is_modern(ctx) || self.registered.load(Ordering::Acquire) {
            return None;
        }
        ctx.extensions.get::<http::request::Parts>()?;
        Some(self.gw.caller(
            &Principal::of(&ctx.extensions),
            authorization(&ctx.extensions),
            &self.capset(ctx),
        ))
    }

    /// The resource links this request's client was given (`links.rs`):
    /// its session's, or a sessionless caller's.
    fn links(&self, ctx: &RequestContext<RoleServer>) -> Arc<super::links::Links> {
        match self.modern_caller(ctx) {
            Some(caller) => caller.links,
            None => self.links.clone(),
        }
    }

    /// What the caller of `ctx` may see of this session's catalog
    /// (`[[policy]]`).
    async fn visible(
        &self,
        generation: &Generation,
        ctx: &RequestContext<RoleServer>,
    ) -> Arc<Catalog> {
        let base = self.catalog(generation, ctx).await;
        generation
            .policies
            .view(&Principal::of(&ctx.extensions), base)
    }

    /// Whether the caller of `ctx` may call `name` now
    /// ([`admission::admit`], the one decision of every call path); a call
    /// the raw path already admitted is not admitted again.
    fn admit(
        &self,
        generation: &Generation,
        ctx: &RequestContext<RoleServer>,
        kind: Kind,
        name: &str,
        unknown: fn(&str) -> McpError,
        audit: impl FnOnce() -> PendingCall,
    ) -> Result<PendingCall, McpError> {
        if let Some(admitted) = Admitted::take(&ctx.extensions) {
            return Ok(admitted);
        }
        let who = Principal::of(&ctx.extensions);
        admission::admit(&generation.policies, &who, kind, name, unknown, audit()).inspect_err(
            |_| {
                self.forget_stream(ctx);
            },
        )
    }

    /// The connection a request from this session to `backend` travels on,
    /// as `dataplane::carrier` chooses (docs/security.md has the table):
    /// - through the client's pool: a registered session's own connection
    ///   to an HTTP backend; its own connection to a `forward_auth`
    ///   backend, or its own instance of a `share` backend (a 2026-07-28
    ///   request: its caller's);
    /// - a 2026-07-28 request to an HTTP backend that answers it only in
    ///   the handshake era: its caller's own backend session;
    /// - otherwise the backend session of the client's capability set: the
    ///   shared one for a client of the handshake era that declared none,
    ///   its set's variant (`backend::variants`) for the others, which for
    ///   a 2026-07-28 client is begun in its era where the backend speaks
    ///   both.
    async fn connection(
        &self,
        backend: &Arc<Backend>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Arc<Connection>, CallError> {
        self.connection_via(backend, ctx)
            .await
            .map(|(conn, _)| conn)
    }

    /// [`Self::connection`], and how it was reached (for a resource
    /// watch, which reaches the backend's next instance the same way).
    async fn connection_via(
        &self,
        backend: &Arc<Backend>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<(Arc<Connection>, Via), CallError> {
        use crate::dataplane::carrier::{self, Carrier, Choice};
        // The run serving the backend, read once: the choice and the
        // connection are of the same one.
        let run = backend.serving();
        let shared = run
            .shared()
            .filter(|_| crate::health::advertisable(backend.state()));
        let facts = carrier::Backend {
            per_session: backend.per_session(),
            forwards_auth: backend.forwards_auth(),
            owns_instances: backend.owns_instances(),
            shared_era: shared.as_ref().map(|c| c.era()),
        };
        let client = carrier::Client {
            registered: self.registered.load(Ordering::Acquire),
            modern: is_modern(ctx),
        };
        let mut variant = None;
        let mut looked = None;
        let chosen = loop {
            match carrier::choose(facts, client, looked) {
                Choice::Go(c) => break c,
                Choice::LookUpVariant => {
                    let v = backend.variant(&self.capset(ctx)).await;
                    looked = Some(match &v {
                        Some(Ok(v)) => carrier::Variant::Open(v.conn.era()),
                        Some(Err(_)) => carrier::Variant::Failed,
                        None => carrier::Variant::None,
                    });
                    variant = v;
                }
            }
        };
        let pool = match chosen {
            // A handshake-era request may come before the `initialized`
            // that registers the session is handled (rmcp runs each
            // notification's handler as a task of its own): the session's
            // own pool is already the one to use.
            Carrier::Pool => self.own_pool(ctx).unwrap_or_else(|| self.pool.clone()),
            Carrier::CallerSession => {
                run.note_bridged();
                self.modern_pool(ctx).unwrap_or_else(|| self.pool.clone())
            }
            Carrier::Variant | Carrier::VariantFailed => {
                return match variant {
                    Some(v) => v
                        .map(|v| (v.conn, Via::Only))
                        .map_err(|e| CallError::failed(e.into_mcp())),
                    None => Err(down(backend)),
                };
            }
            Carrier::Shared => {
                return shared
                    .map(|c| (c, Via::Shared))
                    .ok_or_else(|| down(backend));
            }
        };
        observe(&pool, &ctx.extensions, &ctx.peer);
        let conn = pool
            .connection(backend, false)
            .await
            .map_err(|e| CallError::failed(e.into_mcp()))?;
        Ok((conn, Via::Pool(Arc::downgrade(&pool))))
    }

    /// The client side of a request forwarded for `ctx`.
    fn front_call(
        &self,
        ctx: &RequestContext<RoleServer>,
        on_stream_closed: Option<StreamClosed>,
        ask: Option<Asker>,
    ) -> FrontCall {
        let log = match ctx.meta.log_level() {
            Some(level) => Some(CallLog {
                level,
                per_request: true,
            }),
            None => self.gw.sessions().log_level(self.id).map(|level| CallLog {
                level,
                per_request: false,
            }),
        };
        FrontCall {
            peer: ctx.peer.clone(),
            request_id: ctx.id.clone(),
            progress_token: ctx.meta.get_progress_token(),
            on_stream_closed,
            outbox: self.outbox.clone(),
            ask,
            log,
            caller: Principal::of(&ctx.extensions),
            capabilities: ctx.meta.0.0.get(CAPABILITIES_KEY).cloned(),
        }
    }

    /// Forwards one request to `backend` and returns its answer. Every
    /// error on this path is masked before the client gets it (the one
    /// place for that): backends quote what they were sent (headers, URLs)
    /// in their JSON-RPC errors, and connection errors name URLs.
    ///
    /// The answer is the backend's result as it wrote it (see
    /// `backend::wire`), adapted to the client's protocol era
    /// ([`for_client`]), or an input-required result Vigil made (MRTR).
    async fn forward(
        &self,
        generation: &Generation,
        backend: &Arc<str>,
        request: ClientRequest,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Value, CallError> {
        let call = matches!(request, ClientRequest::CallToolRequest(_));
        let mut result = self
            .forward_unmasked(generation, backend, request, ctx)
            .await
            .map_err(|e| e.map(|e| self.gw.redactor().mask_error(e)))?;
        if let Value::Object(m) = &mut result {
            for_client(m, is_modern(ctx), call);
        }
        Ok(result)
    }

    async fn forward_unmasked(
        &self,
        generation: &Generation,
        backend: &Arc<str>,
        request: ClientRequest,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Value, CallError> {
        let b = generation
            .backends
            .get(backend)
            .cloned()
            .ok_or_else(|| unavailable_call(backend, HealthState::Unknown, "not configured"))?;
        if !advertisable(b.state()) {
            return Err(down(&b));
        }
        let conn = self.connection(&b, ctx).await?;
        if let Some(method) = routed_method(&request) {
            crate::metrics::get().forwarded(method, "typed");
        }
        let tool = match &request {
            ClientRequest::CallToolRequest(r) => Some(r.params.name.to_string()),
            _ => None,
        };
        // A 2026-07-28 client cannot be sent the server→client requests a
        // handshake-era backend makes during a call: they become
        // input-required results (MRTR, `mrtr.rs`).
        let modern_client = is_modern(ctx);
        let (result, recovered) = match mrtr_target(&request) {
            Some(target) if modern_client && conn.era() == Era::Handshake => {
                match self.relay_mrtr(&b, conn, request, target, ctx).await? {
                    Ok((result, recovered)) => (result.map(into_json), recovered),
                    Err(question) => return Ok(question),
                }
            }
            Some(_) if !modern_client && conn.era() == Era::Modern => {
                // The other way round: a 2026-07-28 backend's questions come
                // as input-required results; this client takes requests.
                self.answer_for_client(&conn, request, ctx).await
            }
            _ => {
                let polling = self.stream_polling(ctx);
                let front = self.front_call(ctx, polling.as_ref().map(|p| p.hook()), None);
                let reinits = conn.reinitializations();
                let result = conn.relay(request, Some(front), &ctx.ct).await;
                if let Some(p) = polling {
                    p.finish().await;
                }
                // The request re-initialized a session the backend forgot (it
                // was restarted, maybe redeployed): what it offers may have
                // changed.
                (result, conn.reinitializations() != reinits)
            }
        };
        match result {
            Ok(r) => {
                if recovered {
                    self.relist_after_recovery(&b, false).await;
                }
                Ok(r)
            }
            Err(e) => {
                if e.is_connection_lost() {
                    self.pool.drop_connection(backend).await;
                    return Err(unavailable_call(
                        &b.name,
                        HealthState::Offline,
                        &e.to_string(),
                    ));
                }
                tracing::debug!(backend = %backend, error = %e, "routed request failed");
                let e = e.into_mcp();
                if recovered {
                    let invalid = e.code == ErrorCode::INVALID_PARAMS;
                    // Invalid arguments right after a recovery: the tool's
                    // schema changed. Re-list before answering, so the
                    // client's next tools/list shows the new one.
                    self.relist_after_recovery(&b, invalid).await;
                    if let (true, Some(tool)) = (invalid, tool) {
                        return Err(schema_changed(&b.name, &tool, e).into());
                    }
                }
                Err(e.into())
            }
        }
    }

    /// Sends `request` to a 2026-07-28 backend for a client that takes
    /// server→client requests (a handshake-era client): each input-required
    /// result's questions are asked as real requests on the client's
    /// session (on this request's stream), and the request is sent again
    /// with the answers and the backend's `requestState` as it came, until
    /// the backend answers (at most [`DEFAULT_MRTR_MAX_ROUNDS`] rounds).
    async fn answer_for_client(
        &self,
        conn: &Connection,
        mut request: ClientRequest,
        ctx: &RequestContext<RoleServer>,
    ) -> (Result<Value, BackendError>, bool) {
        let front = self.front_call(ctx, None, None);
        for _ in 0..DEFAULT_MRTR_MAX_ROUNDS {
            let result = conn
                .relay(request.clone(), Some(front.clone()), &ctx.ct)
                .await;
            let input = match result {
                Ok(v) if input_required(&v) => {
                    match serde_json::from_value::<InputRequiredResult>(v) {
                        Ok(input) => input,
                        Err(e) => {
                            return (
                                Err(BackendError::Mcp(McpError::internal_error(
                                    format!(
                                        "vigil: the backend's input-required result is malformed: {e}"
                                    ),
                                    None,
                                ))),
                                false,
                            );
                        }
                    }
                }
                other => return (other, false),
            };
            let mut answers = InputResponses::new();
            for (key, asked) in input.input_requests.into_iter().flatten() {
                let asked = match asked {
                    InputRequest::Elicitation(r) => ServerRequest::ElicitRequest(r),
                    InputRequest::CreateMessage(r) => ServerRequest::CreateMessageRequest(r),
                    InputRequest::ListRoots(r) => ServerRequest::ListRootsRequest(r),
                    _ => {
                        return (
                            Err(BackendError::Mcp(McpError::internal_error(
                                format!(
                                    "vigil: the backend asked '{key}' in a way this client cannot be asked"
                                ),
                                None,
                            ))),
                            false,
                        );
                    }
                };
                let answer = match ctx.peer.send_request(asked).await {
                    Ok(a) => serde_json::to_value(a).unwrap_or_default(),
                    Err(e) => {
                        return (
                            Err(BackendError::Mcp(McpError::internal_error(
                                format!(
                                    "vigil: the client did not answer the backend's question '{key}': {e}"
                                ),
                                None,
                            ))),
                            false,
                        );
                    }
                };
                answers.insert(key, answer);
            }
            retry_with(&mut request, Some(answers), input.request_state);
        }
        (
            Err(BackendError::Mcp(McpError::internal_error(
                format!(
                    "vigil: the backend still asked for input after {DEFAULT_MRTR_MAX_ROUNDS} rounds"
                ),
                None,
            ))),
            false,
        )
    }

    /// One round of an MRTR relay (see `mrtr.rs`): starts the call (or,
    /// for a retry carrying Vigil's `requestState`, hands the client's
    /// answer to the parked call) and waits for the backend's next step.
    /// `Ok(Err(_))`: the backend asks something; the client gets it as an
    /// input-required result.
    async fn relay_mrtr(
        &self,
        b: &Arc<Backend>,
        conn: Arc<Connection>,
        mut request: ClientRequest,
        target: MrtrTarget,
        ctx: &RequestContext<RoleServer>,
    ) -> super::mrtr::Round {
        let mrtr = self.gw.mrtr()?;
        let binding = Binding {
            principal: Principal::of(&ctx.extensions).caller().clone(),
            method: target.method,
            name: target.name,
        };
        let ttl = self.gw.config.request_timeout_for(&b.config);
        let resumed = match &target.state {
            Some(state) => match mrtr.resume(state, target.responses.as_ref(), &binding) {
                // Parked on another replica: that one carries out the
                // retry, if the replicas route retries (`mrtr::routed`).
                Err(Refused::Elsewhere { replica }) => {
                    let Some(route) = self.gw.retry_route.get() else {
                        return Err(Refused::Elsewhere { replica }.into());
                    };
                    let retry = routed::retry(state, target.responses.as_ref(), &binding, ttl);
                    return tokio::select! {
                        answer = route.retry(&replica, &retry) => match answer {
                            Ok(forwarded) => routed::round(forwarded),
                            Err(_) => Err(Refused::Elsewhere { replica }.into()),
                        },
                        _ = ctx.ct.cancelled() => Err(McpError::internal_error("cancelled by the client", None)),
                    };
                }
                resumed => Some(resumed?),
            },
            None => None,
        };
        let events = match resumed {
            Some(Resumed::Parked(events)) => events,
            // A first call, or one made again: its MRTR fields are Vigil's.
            Some(Resumed::Again) | None => {
                retry_with(&mut request, None, None);
                let (asker, events) = Asker::channel();
                let front = self.front_call(ctx, None, Some(asker.clone()));
                // The call outlives this request (it may wait for the
                // client's retry), so it has a token of its own.
                let call_ct = tokio_util::sync::CancellationToken::new();
                let cancel = call_ct.clone();
                crate::background::spawn(async move {
                    let reinits = conn.reinitializations();
                    let result = conn
                        .relay(request, Some(front), &call_ct)
                        .await
                        .map(|v| ServerResult::CustomResult(CustomResult(v)));
                    let recovered = conn.reinitializations() != reinits;
                    asker.done(result, recovered).await;
                });
                return tokio::select! {
                    next = mrtr.next(events, &binding, ttl) => next.into_round(),
                    _ = ctx.ct.cancelled() => {
                        cancel.cancel();
                        Err(McpError::internal_error("cancelled by the client", None))
                    }
                };
            }
        };
        tokio::select! {
            next = mrtr.next(events, &binding, ttl) => next.into_round(),
            _ = ctx.ct.cancelled() => Err(McpError::internal_error("cancelled by the client", None)),
        }
    }

    /// Re-lists `b` after one of its sessions recovered: this session's own
    /// catalog of a `forward_auth` backend, the shared one otherwise.
    /// `wait`: until the listing completed (bounded by the request timeout).
    async fn relist_after_recovery(&self, b: &Arc<Backend>, wait: bool) {
        tracing::info!(backend = %b.name, session = self.id, "backend session recovered; listing again");
        let timeout = self.gw.config.request_timeout_for(&b.config);
        if b.forwards_auth() {
            let (pool, b) = (self.pool.clone(), b.clone());
            let relist = async move { pool.relist(&b).await };
            if wait {
                let _ = tokio::time::timeout(timeout, relist).await;
            } else {
                crate::background::spawn(relist);
            }
        } else if wait {
            b.refresh_and_wait(timeout).await;
        } else {
            b.request_refresh();
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
    /// a backend that is not serving (named, for the audit), `unknown`
    /// otherwise.
    fn unrouted(
        &self,
        catalog: &Catalog,
        name: &str,
        unknown: fn(&str) -> McpError,
    ) -> (McpError, Option<Arc<str>>) {
        match self.gw.owner_of_unrouted(catalog, name) {
            Some(b) if !advertisable(b.state()) => (down(&b).error, Some(b.name.clone())),
            _ => (unknown(name), None),
        }
    }

    /// Drops the stream record of a routed request that never reached a
    /// backend (see [`StreamSessions`]).
    fn forget_stream(&self, ctx: &RequestContext<RoleServer>) {
        if let Some(p) = self.stream_polling(ctx) {
            p.streams.forget(&p.session, &p.request);
        }
    }

    /// One page of a merged list of what this session sees.
    /// Vigil's instructions for the caller of `ctx`, with those of the
    /// backends it can use something of ([`super::discovery::instructions`]).
    async fn instructions(&self, ctx: &RequestContext<RoleServer>) -> String {
        let generation = self.gw.generation();
        let view = self.visible(&generation, ctx).await;
        let set = &generation.backends;
        let texts: Vec<(&str, String)> = view
            .contributing()
            .into_iter()
            .filter_map(|name| Some((name, set.get(name)?.shared()?.instructions()?)))
            .collect();
        super::discovery::instructions(
            &self.gw.config.naming,
            texts.iter().map(|(n, t)| (*n, t.as_str())),
        )
    }

    /// The `cacheScope` of Vigil's own results ([`super::discovery::scope`]).
    fn scope(&self) -> CacheScope {
        super::discovery::scope(self.gw.views_depend_on_caller())
    }

    /// Answers with one page of a merged list of what the caller of `ctx`
    /// sees: each entry as its backend wrote it, under its client-visible
    /// name.
    async fn list(
        &self,
        kind: EntryKind,
        list: impl Fn(&Catalog) -> &Vec<Entry>,
        p: &Option<PaginatedRequestParams>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<MetaObject, McpError> {
        let cursor = p.as_ref().and_then(|p| p.cursor.as_deref());
        let generation = self.gw.generation();
        let view = self.visible(&generation, ctx).await;
        // The tools its mode of tool search lists (all of them, by default).
        let tools = (kind == EntryKind::Tool).then(|| {
            let access = generation.policies.access(&Principal::of(&ctx.extensions));
            super::tool_search::listed_tools(
                &self.gw,
                &generation,
                &access,
                || self.own_listings(ctx),
                &view,
            )
        });
        let entries = match &tools {
            Some(t) => &t[..],
            None => &list(&view)[..],
        };
        let (items, next) = page(entries, cursor, self.gw.config.page_size)?;
        let mut result = Map::new();
        let items = items.iter().map(Entry::to_value).collect();
        result.insert(kind.list_member().into(), Value::Array(items));
        if let Some(next) = next {
            result.insert("nextCursor".into(), Value::String(next));
        }
        if is_modern(ctx) {
            result.insert("ttlMs".into(), super::discovery::LIST_TTL_MS.into());
            result.insert("cacheScope".into(), scope_json(self.scope()));
        }
        for_client(&mut result, is_modern(ctx), false);
        Ok(self.gw.answers().keep(Value::Object(result)))
    }
}

/// Whether `ctx` is a request of protocol revision 2026-07-28 or later
/// (which has no handshake, and caches by hints).
fn is_modern(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.protocol_version().is_some_and(|v| !v.has_initialize())
}

/// A result's typed answer, as JSON (what Vigil makes itself).
fn into_json(result: ServerResult) -> Value {
    match result {
        ServerResult::CustomResult(CustomResult(v)) => v,
        typed => serde_json::to_value(typed).unwrap_or_default(),
    }
}

/// A `cacheScope` value as JSON.
fn scope_json(scope: CacheScope) -> Value {
    serde_json::to_value(scope).unwrap_or_default()
}

/// Methods protocol revision 2026-07-28 removed: a request of that
/// revision naming one gets "method not found" (HTTP 404), whatever its
/// params, as from a server of that revision.
const REMOVED_IN_MODERN: [&str; 5] = [
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];

fn removed(method: &str) -> McpError {
    McpError::new(
        ErrorCode::METHOD_NOT_FOUND,
        format!("Method not found: '{method}' is not part of protocol revision 2026-07-28"),
        None,
    )
}

/// The method of a request the raw path could also have taken (counted by
/// path in `vigil_requests_forwarded_total`).
fn routed_method(request: &ClientRequest) -> Option<&'static str> {
    Some(match request {
        ClientRequest::CallToolRequest(_) => "tools/call",
        ClientRequest::ReadResourceRequest(_) => "resources/read",
        ClientRequest::GetPromptRequest(_) => "prompts/get",
        ClientRequest::CompleteRequest(_) => "completion/complete",
        _ => return None,
    })
}

/// The "unavailable" error for a backend that is not serving.
fn down(b: &Backend) -> CallError {
    let s = b.status();
    unavailable_call(&b.name, s.state, &s.reason)
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
        Arc::new(move |retry| {
            let (streams, session, request) = (streams.clone(), session.clone(), request.clone());
            let task = crate::background::spawn(async move {
                streams
                    .close_and_await_resume(&session, &request, retry)
                    .await
            });
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
        if let Some((id, _)) = self.front.get() {
            self.gw.fronts.leave(id);
        }
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
        info.server_info = super::discovery::own_implementation();
        info.instructions = Some(super::discovery::OWN.into());
        info
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        ctx.peer.set_peer_info(request.clone());
        let mut result = self.negotiate_initialize(&request)?;
        result.instructions = Some(self.instructions(&ctx).await);
        Ok(result)
    }

    async fn discover(&self, ctx: RequestContext<RoleServer>) -> Result<DiscoverResult, McpError> {
        let mut info = self.get_info();
        info.instructions = Some(self.instructions(&ctx).await);
        let versions = self.supported_protocol_versions().into_owned();
        Ok(DiscoverResult::from_server_info(versions, info)
            .with_ttl_ms(super::discovery::LIST_TTL_MS)
            .with_cache_scope(self.scope()))
    }

    async fn on_initialized(&self, ctx: NotificationContext<RoleServer>) {
        if !self.registered.swap(true, Ordering::AcqRel) {
            // List forward_auth backends with this client's credentials
            // first: the session starts out seeing them.
            observe(&self.pool, &ctx.extensions, &ctx.peer);
            self.pool.derive(self.gw.catalog()).await;
            if let Some(id) = ctx
                .extensions
                .get::<http::request::Parts>()
                .and_then(|p| p.headers.get("mcp-session-id"))
                .and_then(|v| v.to_str().ok())
            {
                let caps = ctx.peer.peer_info().map(|i| i.capabilities.clone());
                let front = self.gw.fronts.enter(id, caps.as_ref(), self.links.clone());
                let _ = self.front.set((id.into(), front));
            }
            let lanes = self.front.get().is_some_and(|(_, f)| f.raw());
            self.pool.use_lanes(lanes);
            self.gw.sessions().add(
                self.id,
                Channel::Session(ctx.peer.clone()),
                Some(self.pool.clone()),
                self.outbox.clone(),
                Viewer {
                    principal: Principal::of(&ctx.extensions),
                    capset: self.pool.capset(),
                },
                lanes,
            );
            tracing::debug!(session = self.id, "client session opened");
            if ctx.extensions.get::<SessionRestoreMarker>().is_some() {
                self.adopted(&ctx).await;
            }
        }
    }

    async fn ping(&self, _ctx: RequestContext<RoleServer>) -> Result<(), McpError> {
        Ok(())
    }

    async fn list_tools(
        &self,
        p: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let mut r = ListToolsResult::with_all_items(Vec::new());
        r.meta = Some(self.list(EntryKind::Tool, |c| &c.tools, &p, &ctx).await?);
        Ok(r)
    }

    async fn list_resources(
        &self,
        p: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let mut r = ListResourcesResult::with_all_items(Vec::new());
        r.meta = Some(
            self.list(EntryKind::Resource, |c| &c.resources, &p, &ctx)
                .await?,
        );
        Ok(r)
    }

    async fn list_resource_templates(
        &self,
        p: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let mut r = ListResourceTemplatesResult::with_all_items(Vec::new());
        r.meta = Some(
            self.list(EntryKind::Template, |c| &c.templates, &p, &ctx)
                .await?,
        );
        Ok(r)
    }

    async fn list_prompts(
        &self,
        p: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let mut r = ListPromptsResult::with_all_items(Vec::new());
        r.meta = Some(
            self.list(EntryKind::Prompt, |c| &c.prompts, &p, &ctx)
                .await?,
        );
        Ok(r)
    }

    async fn call_tool(
        &self,
        mut p: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // One generation for the whole call: a name of one catalog never
        // routes to a backend of another set, nor is admitted by another
        // set of policies.
        let generation = self.gw.generation();
        // The meta-tools of tool search, for a caller that lists them.
        let access = generation.policies.access(&Principal::of(&ctx.extensions));
        let mut called_as = None;
        if self.gw.tool_search().mode(&access).searches() {
            match &*p.name {
                meta::FIND => return self.find_tool(&generation, &access, p, &ctx).await,
                meta::CALL => match meta::CallArgs::parse(p.arguments.as_ref()) {
                    Ok(call) => {
                        called_as = Some(call.tool_name.clone());
                        p.name = call.tool_name.into();
                        p.arguments = call.arguments;
                    }
                    Err(e) => {
                        self.forget_stream(&ctx);
                        return Ok(CallToolResponse::Complete(super::tool_search::refused(&e)));
                    }
                },
                _ => {}
            }
        }
        let result = self.call_routed(&generation, p, &ctx).await;
        match (result, called_as) {
            // A name this caller cannot use, through `call_tool`: the
            // unknown-tool error, with the closest names it may use.
            (Err(_), Some(name))
                if self
                    .unknown_to_caller(&generation, &access, &ctx, &name)
                    .await =>
            {
                let view = self.visible(&generation, &ctx).await;
                Err(super::tool_search::unknown_suggesting(
                    self.gw.tool_search(),
                    &view,
                    &name,
                ))
            }
            (result, _) => result,
        }
    }

    async fn read_resource(
        &self,
        mut p: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let generation = self.gw.generation();
        let audit = self.admit(
            &generation,
            &ctx,
            Kind::Resource,
            &p.uri,
            unknown_uri,
            || {
                self.gw
                    .audit()
                    .begin(Method::ResourcesRead, &p.uri, None, &ctx.extensions)
            },
        )?;
        let routed = Self::uri_backend(&*self.catalog(&generation, &ctx).await, &p.uri);
        let backend = match routed.or_else(|e| self.links(&ctx).backend_of(&p.uri).ok_or(e)) {
            Ok(b) => b,
            Err(e) => {
                self.forget_stream(&ctx);
                return Err(e);
            }
        };
        p.meta = forwardable_meta(p.meta);
        let result = self
            .forward(
                &generation,
                &backend,
                ClientRequest::ReadResourceRequest(ReadResourceRequest::new(p)),
                &ctx,
            )
            .await;
        admission::settle(audit, &backend, None, Ended::of(&result, false), None);
        let mut result = result.map_err(|e| e.error)?;
        if is_modern(&ctx)
            && !input_required(&result)
            && let Value::Object(m) = &mut result
        {
            let theirs = m
                .get("cacheScope")
                .and_then(|v| serde_json::from_value(v.clone()).ok());
            if let Some(scope) = super::discovery::narrowed(theirs, self.scope()) {
                m.insert("cacheScope".into(), scope_json(scope));
            }
        }
        let mut r = ReadResourceResult::new(Vec::new());
        r.meta = Some(self.gw.answers().keep(result));
        Ok(ReadResourceResponse::Complete(r))
    }

    async fn get_prompt(
        &self,
        mut p: GetPromptRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let generation = self.gw.generation();
        let audit = self.admit(
            &generation,
            &ctx,
            Kind::Prompt,
            &p.name,
            unknown_prompt,
            || {
                self.gw.audit().begin(
                    Method::PromptsGet,
                    &p.name,
                    p.arguments.as_ref(),
                    &ctx.extensions,
                )
            },
        )?;
        let catalog = self.catalog(&generation, &ctx).await;
        let Some(route) = catalog.route_prompt(&p.name).cloned() else {
            self.forget_stream(&ctx);
            let (e, down) = self.unrouted(&catalog, &p.name, unknown_prompt);
            audit.unrouted(down.as_deref());
            return Err(e);
        };
        p.name = route.name;
        p.meta = forwardable_meta(p.meta);
        let result = self
            .forward(
                &generation,
                &route.backend,
                ClientRequest::GetPromptRequest(GetPromptRequest::new(p)),
                &ctx,
            )
            .await;
        let ended = Ended::of(&result, false);
        admission::settle(audit, &route.backend, None, ended, None);
        let mut r = GetPromptResult::new(Vec::new());
        r.meta = Some(self.gw.answers().keep(result.map_err(|e| e.error)?));
        Ok(GetPromptResponse::Complete(r))
    }

    async fn complete(
        &self,
        mut p: CompleteRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let generation = self.gw.generation();
        let catalog = self.catalog(&generation, &ctx).await;
        let access = generation.policies.access(&Principal::of(&ctx.extensions));
        let backend = match &mut p.r#ref {
            Reference::Prompt(r) if !access.permits(&r.name) => {
                return Err(unknown_prompt(&r.name));
            }
            Reference::Resource(r) if !access.permits(&r.uri) => return Err(unknown_uri(&r.uri)),
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
        let result = self
            .forward(
                &generation,
                &backend,
                ClientRequest::CompleteRequest(CompleteRequest::new(p)),
                &ctx,
            )
            .await
            .map_err(|e| e.error)?;
        let mut r = CompleteResult::default();
        r.meta = Some(self.gw.answers().keep(result));
        Ok(r)
    }

    async fn subscribe(
        &self,
        p: SubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if is_modern(&ctx) {
            return Err(removed("resources/subscribe"));
        }
        let hold = self.watch(&p.uri, &ctx).await?;
        self.watches_lock().insert(p.uri.clone(), hold);
        self.gw.sessions().subscribe(self.id, &p.uri, true);
        self.keep(&ctx, Change::Subscribed(p.uri)).await;
        Ok(())
    }

    async fn unsubscribe(
        &self,
        p: UnsubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if is_modern(&ctx) {
            return Err(removed("resources/unsubscribe"));
        }
        Self::uri_backend(&*self.catalog(&self.gw.generation(), &ctx).await, &p.uri)?;
        self.gw.sessions().subscribe(self.id, &p.uri, false);
        // Dropping the hold ends the backend subscription if nobody else
        // watches the resource there.
        self.watches_lock().remove(&p.uri);
        self.keep(&ctx, Change::Unsubscribed(p.uri)).await;
        Ok(())
    }

    /// Applies the level to every connected backend that does logging; the
    /// gateway also filters relayed messages of shared backends by it.
    async fn set_level(
        &self,
        p: SetLevelRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if is_modern(&ctx) {
            return Err(removed("logging/setLevel"));
        }
        self.gw.sessions().set_log_level(self.id, p.level);
        if let Ok(serde_json::Value::String(level)) = serde_json::to_value(p.level) {
            self.keep(&ctx, Change::LogLevel(level)).await;
        }
        if let Some((_, front)) = self.front.get() {
            front.set_log_level();
        }
        let generation = self.gw.generation();
        for b in generation.backends.iter() {
            let Some(shared) = b.shared() else { continue };
            // 2026-07-28 removed `logging/setLevel` (a level travels with
            // each request there).
            if shared.capabilities().logging.is_none() || shared.era() == Era::Modern {
                continue;
            }
            // Not worth starting a client's own instance for (its log
            // messages reach this client filtered at its level anyway).
            if b.owns_instances() && !self.pool.has_instance(b) {
                continue;
            }
            let request = ClientRequest::SetLevelRequest(SetLevelRequest::new(
                SetLevelRequestParams::new(p.level),
            ));
            if let Err(e) = self.forward(&generation, &b.name, request, &ctx).await {
                tracing::debug!(backend = %b.name, error = %e.error.message, "logging/setLevel not applied");
            }
        }
        Ok(())
    }

    async fn on_roots_list_changed(&self, _ctx: NotificationContext<RoleServer>) {
        for c in self.pool.connections().await {
            let n = ClientNotification::RootsListChangedNotification(
                RootsListChangedNotification::default(),
            );
            let _ = c.notify(n).await;
        }
    }

    async fn on_custom_request(
        &self,
        r: CustomRequest,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        if is_modern(&ctx) && REMOVED_IN_MODERN.contains(&r.method.as_str()) {
            return Err(removed(&r.method));
        }
        // A method MCP defines lands here when its params do not parse.
        if let Some(e) = super::bad_params::invalid_params(&r.method, r.params.as_ref()) {
            return Err(e);
        }
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
        // rmcp acknowledges the stream before `listen` registers it: what
        // the catalog was at the acknowledgment is what the client knows.
        let _ = self.listen_shown.set(self.gw.catalog());
        Some(requested.clone())
    }

    async fn listen(&self, ctx: SubscriptionContext) -> Result<(), McpError> {
        // Each listen stream is its own registry entry for as long as it is open.
        let id = self.gw.new_listen_id();
        tracing::debug!(listen = id, accepted = ?ctx.accepted(), "subscriptions/listen stream opened");
        let pool = self.own_pool(ctx.request_context());
        let outbox = Outbox::new(self.gw.config.limits.relay_queue);
        let who = Principal::of(&ctx.request_context().extensions);
        // Each resource the stream names is watched at its backend while
        // the stream is open.
        let mut holds = Vec::new();
        for uri in ctx.accepted().resource_subscriptions.iter().flatten() {
            match self.watch(uri, ctx.request_context()).await {
                Ok(hold) => holds.push(hold),
                Err(e) => {
                    tracing::debug!(listen = id, %uri, error = %e.message, "resource subscription not served");
                }
            }
        }
        let shown = self
            .listen_shown
            .get()
            .cloned()
            .unwrap_or_else(|| self.gw.catalog());
        self.gw.sessions().add_shown(
            id,
            Channel::Listen(ctx.sink().clone()),
            pool,
            outbox,
            Viewer {
                principal: who,
                capset: self.capset(ctx.request_context()),
            },
            false,
            shown,
        );
        // rmcp acknowledged the stream before the backend watches stood and
        // the stream was registered: an update in between reached no one.
        // Each watched resource is reported updated once now (a client
        // re-reads it), so no change after the acknowledgment goes unseen.
        for uri in holds.iter().map(Hold::uri) {
            self.gw
                .sessions()
                .resource_updated(Some(id), uri.to_owned());
        }
        ctx.cancelled().await;
        self.gw.sessions().remove(id);
        Ok(())
    }
}
