//! The raw executor: routed requests that carry nothing per session go
//! from the client's POST to the backend as bytes, without rmcp's typed
//! machinery on either hop.
//!
//! A proxy does not need to understand what it only forwards. This layer
//! (an axum middleware in front of rmcp's `/mcp` service) reads a request's
//! facts once (its headers, its envelope, its session, the generation's
//! view of the backend its name routes to) and asks the one decision,
//! [`crate::dataplane::plan`], how it travels. A [`Plan::Typed`] request is
//! handed on to rmcp unchanged. A [`Plan::Raw`] one is admitted like every
//! call ([`super::admission`]: policy, rates, audit, call statistics and
//! metrics), its id, routed name and progress token are rewritten, and it
//! is sent:
//! - [`Via::Lane`] (a handshake-era session): on the backend's lane
//!   ([`crate::backend`] `Backend::lane`, one backend session shared by the
//!   caller's plain clients);
//! - [`Via::Stateless`] (a 2026-07-28 request): as a POST of its own to the
//!   backend's 2026-07-28 destination (`Instance::stateless_target`, of the run the generation says serves), its
//!   `_meta` as the client wrote it (revision, capabilities, client info,
//!   log level) and a backend's `requestState` untouched, with the
//!   `Mcp-Method`, `Mcp-Name` (the backend's name) and `Mcp-Param-*`
//!   headers a direct client sends.
//!
//! A tool search `call_tool` in the form the raw path reads
//! (`search::meta::RawCall`), of a tool the caller may use, is first turned
//! into the call of that tool (only `params.name` and `params.arguments`
//! change) and then planned and carried like a direct call of it; any
//! other `call_tool` goes to the typed path as the client wrote it.
//!
//! The backend's answer goes back with the client's id put in, every other
//! byte as the backend wrote it (but for a 2026-07-28 `resources/read`'s
//! `cacheScope` where Vigil's own results are private, and the
//! `resultType` and `serverInfo` a result of that revision must carry, if
//! a backend left them out).
//!
//! A call the backend did not take (no lane, no 2026-07-28 destination
//! known, the backend forgot the lane's session, the connection was
//! refused) goes on the typed path, already admitted; once the backend may
//! have taken it (`tools/call` is not idempotent) it never runs a second
//! time: a later failure is the client's error.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use rmcp::ErrorData as McpError;
use rmcp::model::ErrorCode;

use super::Gateway;
use super::admission::{self, Admitted};
use super::fronts::Front;
use super::links::Links;
use super::route::{schema_changed, unavailable, unknown_prompt, unknown_tool, unknown_uri};
use crate::audit::{CallSession, Method};
use crate::auth::Principal;
use crate::backend::error::HttpFailure;
use crate::backend::raw_http::{self, PostError, Posted};
use crate::backend::{Backend, BackendError, Era, Generation, Instance};
use crate::catalog::Kind;
use crate::dataplane::envelope::{self, Incoming, RawMethod, Target};
use crate::dataplane::outcome::Ended;
use crate::dataplane::plan::{self, Client, Header, Plan, Route, Serving, Via};
use crate::dataplane::revision::Revision;
use crate::health::HealthState;
use crate::search::meta;
use futures::StreamExt as _;

/// The largest request body the raw path reads; a larger one (or one of
/// unknown length) goes the typed way unread. A call that large is
/// dominated by its payload, not by the hops saved, and reading it here as
/// well as in rmcp would hold it twice.
const MAX_RAW_BODY: usize = 256 * 1024;

/// What the middleware needs.
pub struct RawPath {
    gw: Arc<Gateway>,
    max_body: usize,
}

impl RawPath {
    pub fn new(gw: Arc<Gateway>) -> Arc<Self> {
        let max_body = gw.config.max_body_bytes;
        Arc::new(Self { gw, max_body })
    }
}

/// The middleware: answers the requests planned raw itself, hands the rest
/// on.
pub async fn forward(State(raw): State<Arc<RawPath>>, req: Request, next: Next) -> Response {
    if req.method() != http::Method::POST {
        return next.run(req).await;
    }
    let session = req
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok());
    let front = session.and_then(|id| raw.gw.fronts.get(id));
    if let (Some(id), Some(_), Some(streams)) = (session, &front, raw.gw.streams.get()) {
        streams.touch(id);
    }
    let client = match (session, &front) {
        (None, _) => Client::Sessionless,
        (Some(_), Some(f)) => Client::Session { plain: f.raw() },
        (Some(_), None) => Client::UnknownSession,
    };
    let revision = match req.headers().get("mcp-protocol-version") {
        None => Header::Absent,
        Some(v) => Revision::of_header(v).map_or(Header::Unknown, Header::Known),
    };
    // Before the body is read: whether anything here could go raw (or be
    // the cancellation of a raw call in flight).
    let may = match client {
        Client::Session { plain } => plain || front.as_ref().is_some_and(|f| f.busy()),
        Client::UnknownSession => false,
        Client::Sessionless => matches!(revision, Header::Known(r) if r.era() == Era::Modern),
    };
    if !may || large(req.headers()) {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, raw.max_body).await {
        Ok(b) => b,
        Err(e) => return super::http::unreadable_body(e),
    };
    let fact = Facts {
        front,
        client,
        revision,
    };
    match raw.handle(fact, &parts, &bytes).await {
        Handled::Answered(response) => response,
        Handled::Reply(messages, status) => answer_response(messages, status),
        Handled::Typed(admitted) => {
            let mut req = Request::from_parts(parts, Body::from(bytes));
            if let Some(a) = admitted {
                req.extensions_mut().insert(a);
            }
            next.run(req).await
        }
    }
}

/// Whether the body is larger than the raw path reads ([`MAX_RAW_BODY`]).
fn large(h: &http::HeaderMap) -> bool {
    h.get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .is_none_or(|n| n > MAX_RAW_BODY)
}

/// Whether `Mcp-Method` and `Mcp-Name` agree with the request `r`.
fn headers_agree(parts: &http::request::Parts, r: &envelope::Request<'_>) -> bool {
    let name = r.method.names_itself().then_some(&*r.name);
    crate::dataplane::headers::agree(&parts.headers, r.method.as_str(), name)
}

/// A retargeted `call_tool`'s body, read again, marked as such.
fn read_retargeted(body: &str) -> Option<envelope::Request<'_>> {
    let mut r = envelope::Request::parse(body)?;
    r.retargeted = true;
    Some(r)
}

/// Whether the client accepts both answer formats.
fn accepts_both(h: &http::HeaderMap) -> bool {
    let accept = h
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    accept.contains("application/json") && accept.contains("text/event-stream")
}

/// What was read of a request before its body.
#[derive(Clone)]
struct Facts {
    front: Option<Arc<Front>>,
    client: Client,
    revision: Header,
}

/// What a request is planned against: the generation in force (its
/// catalog and backend set, read once) and the resource links its client
/// was given.
struct Now<'a> {
    generation: &'a Generation,
    links: Option<&'a Links>,
}

impl plan::Generation for Now<'_> {
    fn route(&self, target: Target, name: &str) -> Option<Route> {
        let renamed = |r: &crate::catalog::Route| Route {
            backend: r.backend.clone(),
            name: (r.name != name).then(|| r.name.clone()),
        };
        let catalog = &self.generation.catalog;
        match target {
            Target::Tool => catalog.route_tool(name).map(renamed),
            Target::Prompt => catalog.route_prompt(name).map(renamed),
            Target::Uri => catalog
                .route_uri(name)
                .cloned()
                .or_else(|| self.links.and_then(|l| l.backend_of(name)))
                .map(|backend| Route {
                    backend,
                    name: None,
                }),
        }
    }

    fn serving(&self, backend: &str) -> Option<Serving> {
        let b = self.generation.backends.get(backend)?;
        let run = self.generation.serving.get(backend)?;
        Some(Serving {
            // Shown by this generation's catalog: advertisable when it was
            // published (a name routes only to a backend it shows; a
            // resource link may name another).
            advertisable: self.generation.catalog.shows(backend),
            http: b.per_session(),
            forwards_auth: b.forwards_auth(),
            // The run this generation says serves, as the executor will
            // find it.
            era: run.era(),
            stateless: run.stateless_target().is_some(),
        })
    }
}

/// What became of a request.
enum Handled {
    Answered(Response),
    /// The messages of the answer in order, the response last (JSON when
    /// it is alone, else an SSE stream), with its HTTP status.
    Reply(Vec<String>, http::StatusCode),
    /// For the typed path, with the admission already made, if any.
    Typed(Option<Admitted>),
}

/// How a raw exchange failed.
enum Failure {
    /// The backend did not take the request.
    NotAccepted(HttpFailure),
    /// The exchange broke after the backend may have taken it.
    Lost(HttpFailure),
    TimedOut,
    Cancelled,
}

/// How a raw exchange ended, once the backend may have taken it.
enum Finished {
    Answer(Answer),
    /// Larger than `limits.max_result_bytes`: not read to its end.
    TooLarge {
        limit: usize,
        read: usize,
    },
    Lost(HttpFailure),
    TimedOut,
    Cancelled,
}

/// The backend's answer.
struct Answer {
    /// A result: the response with the client's id, as the backend wrote it.
    result: Option<String>,
    /// A JSON-RPC error: as the backend sent it (masked when answered).
    error: Option<McpError>,
    /// A `tools/call` result with `isError: true`.
    tool_failed: bool,
    /// Notifications of the request that came before the response (and
    /// were not relayed as they came, see [`Progress`]).
    before: Vec<String>,
}

/// Where a call with a progress token relays its notifications while it
/// runs: the backend's progress with the client's token put back, and
/// log messages, in the order they came.
struct Progress {
    /// The client's token, JSON as written.
    token: String,
    tx: tokio::sync::mpsc::UnboundedSender<String>,
    /// Told of each progress notification relayed (it restarts the
    /// request's timeout).
    progressed: tokio::sync::Notify,
}

/// Resolves at the next progress of a call with a progress token; never
/// for one without.
async fn progressed(p: Option<&Progress>) {
    match p {
        Some(p) => p.progressed.notified().await,
        None => std::future::pending().await,
    }
}

/// Vigil's ids on the lanes: strings, so they never meet rmcp's numbers.
fn next_id() -> Arc<str> {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("vr-{}", NEXT.fetch_add(1, Ordering::Relaxed)).into()
}

/// A call planned raw, as the executor carries it out.
struct Planned<'a> {
    facts: &'a Facts,
    /// The generation it was planned against, held to its end.
    generation: Arc<Generation>,
    route: Route,
    via: Via,
    /// The resource links of the call's client (its session's, or its
    /// caller's without one).
    links: Arc<Links>,
}

impl Facts {
    fn client_is_sessionless(&self) -> bool {
        matches!(self.client, Client::Sessionless)
    }
}

impl RawPath {
    async fn handle(
        self: &Arc<Self>,
        facts: Facts,
        parts: &http::request::Parts,
        bytes: &Bytes,
    ) -> Handled {
        let Ok(text) = std::str::from_utf8(bytes) else {
            return Handled::Typed(None);
        };
        if let Some(front) = &facts.front
            && front.busy()
            && let Some(id) = cancelled_request(text)
            && front.cancel(&id)
        {
            return Handled::Answered(http::StatusCode::ACCEPTED.into_response());
        }
        let written = envelope::Request::parse(text);
        let generation = self.gw.generation();
        // The standard headers are the client's, for what it wrote.
        let agree = written.as_ref().is_some_and(|r| headers_agree(parts, r));
        let retargeted = written
            .as_ref()
            .and_then(|r| self.retarget(parts, r, text, &generation));
        let (text, r) = match &retargeted {
            Some(body) => (body.as_str(), read_retargeted(body)),
            None => (text, written),
        };
        let Some((route, via, links)) = self.plan(&facts, parts, r.as_ref(), agree, &generation)
        else {
            return Handled::Typed(None);
        };
        let Some(r) = r else {
            return Handled::Typed(None);
        };
        // What the client gets as it comes (its progress, and the log
        // messages a 2026-07-28 call asked for) is relayed while it runs.
        if r.progress.is_some() || (via == Via::Stateless && r.meta.log_level) {
            let client_id = r.id.get().to_owned();
            let planned = (generation, route, via, links);
            let (bytes, retargeted) = match retargeted {
                Some(body) => (Bytes::from(body), true),
                None => (bytes.clone(), false),
            };
            // Boxed: rarer than a plain call, and its future (a task, a
            // channel, a select) would otherwise widen every call's.
            return Box::pin(self.streamed(facts, parts, bytes, client_id, planned, retargeted))
                .await;
        }
        let planned = Planned {
            facts: &facts,
            generation,
            route,
            via,
            links,
        };
        self.call(&planned, parts, text, r, None).await
    }

    /// A `call_tool` of tool search as the body of the call of the tool it
    /// names, when the caller lists the meta-tools, may use that tool, and
    /// wrote the arguments in the raw form ([`meta::RawCall`]). Anything
    /// else keeps its body: the typed path answers it (a name the caller
    /// may not use gets its "did you mean" names there).
    fn retarget(
        &self,
        parts: &http::request::Parts,
        r: &envelope::Request<'_>,
        text: &str,
        generation: &Generation,
    ) -> Option<String> {
        if r.method != RawMethod::ToolsCall || r.name != meta::CALL {
            return None;
        }
        let access = generation.policies.access(&principal(parts));
        if !self.gw.tool_search().mode(&access).searches() {
            return None;
        }
        let call = meta::RawCall::read(r.arguments?)?;
        if !access.permits(&call.tool_name) {
            return None;
        }
        r.retarget(text, &call.tool_name, call.arguments.get())
    }

    /// The plan for `r`, when it goes raw: its route, how, and its
    /// client's links. `agree`: the client's standard headers agree with
    /// what it wrote.
    fn plan(
        &self,
        facts: &Facts,
        parts: &http::request::Parts,
        r: Option<&envelope::Request<'_>>,
        agree: bool,
        generation: &Generation,
    ) -> Option<(Route, Via, Arc<Links>)> {
        let links = match (&facts.front, r) {
            (Some(front), _) => Some(front.links().clone()),
            (None, Some(r)) if facts.client_is_sessionless() => Some(self.caller_links(parts, r)),
            _ => None,
        };
        let http = plan::Http {
            revision: facts.revision,
            accepts_both: accepts_both(&parts.headers),
            standard_headers_agree: agree,
        };
        let now = Now {
            generation,
            links: links.as_deref(),
        };
        match plan::plan(&http, facts.client, r, &now) {
            Plan::Raw { route, via } => Some((route, via, links?)),
            Plan::Typed(why) => {
                tracing::trace!(?why, "typed path");
                None
            }
        }
    }

    /// The links a sessionless (2026-07-28) caller's calls were given:
    /// shared by its requests with the same credentials and capabilities
    /// (`caller_pools`), as on the typed path.
    fn caller_links(&self, parts: &http::request::Parts, r: &envelope::Request<'_>) -> Arc<Links> {
        let capabilities = r
            .meta
            .capabilities
            .and_then(|c| serde_json::from_str::<serde_json::Value>(c.get()).ok())
            .map(|c| crate::backend::capset::CapSet::of_json(&c))
            .unwrap_or_default()
            .modern();
        let who = principal(parts);
        self.gw
            .caller(&who, super::session::authorization_of(parts), &capabilities)
            .links
    }

    /// A call with a progress token (or a 2026-07-28 log level): its
    /// progress and log messages reach the client while it runs. The call runs on a task of its own and
    /// relays what it hears; nothing is committed to the client until the
    /// first relayed message, which the backend sends only once it took
    /// the call, so a call it did not take still goes the typed way. From
    /// then on the answer is an SSE stream: the relayed messages as they
    /// come, then the response. A client that goes away cancels the call
    /// at the next message.
    async fn streamed(
        self: &Arc<Self>,
        facts: Facts,
        parts: &http::request::Parts,
        bytes: Bytes,
        client_id: String,
        (generation, route, via, links): (Arc<Generation>, Route, Via, Arc<Links>),
        retargeted: bool,
    ) -> Handled {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let (raw, parts) = (self.clone(), parts.clone());
        // The task owns the body and reads its envelope again (a few µs):
        // the parse borrows from the body, and handing the borrowed one
        // to a task that outlives this request's future would need an
        // owned copy of every part instead.
        let mut task = self.gw.background.spawn_joined(async move {
            let text = std::str::from_utf8(&bytes).unwrap_or("");
            let Some(mut r) = envelope::Request::parse(text) else {
                return Handled::Typed(None);
            };
            r.retargeted = retargeted;
            let token = r
                .progress
                .map(|(t, _)| t.get().to_owned())
                .unwrap_or_default();
            let progress = Progress {
                token,
                tx,
                progressed: tokio::sync::Notify::new(),
            };
            let planned = Planned {
                facts: &facts,
                generation,
                route,
                via,
                links,
            };
            raw.call(&planned, &parts, text, r, Some(progress)).await
        });
        let first = tokio::select! {
            biased;
            Some(m) = rx.recv() => m,
            done = &mut task => {
                let done = done.unwrap_or_else(|_| Handled::Reply(task_failed(&client_id), http::StatusCode::OK));
                // What was relayed just before the end goes first.
                let mut early: Vec<String> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
                return match done {
                    Handled::Reply(mut messages, status) if !early.is_empty() => {
                        early.append(&mut messages);
                        Handled::Reply(early, status)
                    }
                    other => other,
                };
            }
        };
        let relayed = futures::stream::once(async move { first })
            .chain(tokio_stream::wrappers::UnboundedReceiverStream::new(rx));
        let end = futures::stream::once(async move {
            match task.await {
                Ok(Handled::Reply(messages, _)) => messages,
                // Typed or refused once the backend took the call: cannot
                // happen (both are decided before it does).
                _ => task_failed(&client_id),
            }
        })
        .flat_map(futures::stream::iter);
        let events = relayed
            .chain(end)
            .map(|m| Ok::<_, std::convert::Infallible>(Bytes::from(sse_event(&m))));
        Handled::Answered(
            (
                [
                    (http::header::CONTENT_TYPE, "text/event-stream"),
                    (http::header::CACHE_CONTROL, "no-cache"),
                ],
                Body::from_stream(events),
            )
                .into_response(),
        )
    }

    async fn call(
        &self,
        planned: &Planned<'_>,
        parts: &http::request::Parts,
        text: &str,
        r: envelope::Request<'_>,
        progress: Option<Progress>,
    ) -> Handled {
        let gw = &self.gw;
        let (Some(b), Some(run)) = (
            planned
                .generation
                .backends
                .get(&planned.route.backend)
                .cloned(),
            planned
                .generation
                .serving
                .get(&planned.route.backend)
                .cloned(),
        ) else {
            return Handled::Typed(None);
        };
        let client_id = r.id.get();
        let who = principal(parts);
        let modern = planned.via == Via::Stateless;
        let audit = match r.method {
            RawMethod::Complete => {
                let unknown = match r.target {
                    Target::Uri => unknown_uri,
                    _ => unknown_prompt,
                };
                if !planned.generation.policies.access(&who).permits(&r.name) {
                    return Handled::Answered(self.refusal(client_id, unknown(&r.name), modern));
                }
                crate::audit::PendingCall::untracked()
            }
            method => {
                let unknown: fn(&str) -> McpError = match method {
                    RawMethod::ToolsCall => unknown_tool,
                    RawMethod::PromptsGet => unknown_prompt,
                    _ => unknown_uri,
                };
                let (audited, kind) = match method {
                    RawMethod::ToolsCall => (Method::ToolsCall, Kind::Tool),
                    RawMethod::PromptsGet => (Method::PromptsGet, Kind::Prompt),
                    _ => (Method::ResourcesRead, Kind::Resource),
                };
                // A session's calls are raw only once it is entered
                // (`Fronts`), which keeps its tag.
                let session = match &planned.facts.front {
                    Some(f) => Some(CallSession::Tagged(f.tag())),
                    None => parts
                        .headers
                        .get("mcp-session-id")
                        .and_then(|v| v.to_str().ok())
                        .map(CallSession::Id),
                };
                let pending = gw.audit().begin_for(
                    audited,
                    &r.name,
                    || r.arguments.and_then(|a| serde_json::from_str(a.get()).ok()),
                    &who,
                    session,
                );
                match admission::admit(
                    &planned.generation.policies,
                    &who,
                    kind,
                    &r.name,
                    unknown,
                    pending,
                ) {
                    Ok(a) => a,
                    Err(e) => return Handled::Answered(self.refusal(client_id, e, modern)),
                }
            }
        };
        let ours = next_id();
        let renamed = planned.route.name.as_deref();
        let body = r.rewrite(text, &format!("\"{ours}\""), renamed);
        let tool = renamed.unwrap_or(&r.name);
        let span =
            (r.method == RawMethod::ToolsCall).then(|| admission::tool_call_span(&b.name, tool));
        // A session's client cancels a call with `notifications/cancelled`;
        // a sessionless one by going away (this future is dropped).
        let call = planned.facts.front.as_ref().map(|f| f.start(client_id));
        let t0 = tokio::time::Instant::now();
        let timeout = gw.config.request_timeout_for(&b.config);
        // A backend that forgot the lane's session (it was restarted) did
        // not take the call: the lane is re-initialized once and the call
        // sent once more, as on the typed path.
        let mut recovered = false;
        let (outcome, target) = loop {
            let (target, extra) = match planned.via {
                Via::Lane => {
                    let lane = match b.lane(&run, who.caller()).await {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::debug!(backend = %b.name, error = %e, "no lane; the call goes the typed way");
                            return Handled::Typed(Some(Admitted::new(audit)));
                        }
                    };
                    recovered |= lane.recovered();
                    let Some(target) = lane.session().and_then(|s| s.current()) else {
                        return Handled::Typed(Some(Admitted::new(audit)));
                    };
                    (Carrier::Of(lane, target), http::HeaderMap::new())
                }
                Via::Stateless => {
                    let Some(target) = run.stateless_target() else {
                        return Handled::Typed(Some(Admitted::new(audit)));
                    };
                    let extra = standard_headers(&parts.headers, r.method, tool);
                    (Carrier::Stateless(target), extra)
                }
            };
            let outcome = {
                let exchange = self.exchange(
                    &b,
                    target.target(),
                    body.clone(),
                    ours.clone(),
                    client_id,
                    r.method,
                    progress.as_ref(),
                    extra,
                );
                // `request_timeout`, restarted by each progress
                // notification (as on the typed path).
                let deadline = tokio::time::sleep(timeout);
                let cancelled = async {
                    match &call {
                        Some(c) => c.cancel.cancelled().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::pin!(deadline, exchange, cancelled);
                loop {
                    tokio::select! {
                        o = &mut exchange => break o,
                        _ = &mut deadline => break Err(Failure::TimedOut),
                        _ = &mut cancelled => break Err(Failure::Cancelled),
                        _ = progressed(progress.as_ref()) => {
                            deadline.as_mut().reset(tokio::time::Instant::now() + timeout);
                        }
                    }
                }
            };
            let finished = match outcome {
                Ok(a) => Finished::Answer(a),
                Err(Failure::TimedOut) => Finished::TimedOut,
                Err(Failure::Cancelled) => Finished::Cancelled,
                // The lane's session is sound: it answered, too much.
                Err(Failure::Lost(HttpFailure::TooLarge { limit, read })) => {
                    Finished::TooLarge { limit, read }
                }
                Err(Failure::Lost(why)) => {
                    target.drop_from(&run);
                    Finished::Lost(why)
                }
                Err(Failure::NotAccepted(why)) => {
                    target.drop_from(&run);
                    if recovered || modern {
                        tracing::debug!(backend = %b.name, %why, "the backend did not take the call; the call goes the typed way");
                        return Handled::Typed(Some(Admitted::new(audit)));
                    }
                    tracing::info!(backend = %b.name, %why, "the backend forgot the lane's session; opening another");
                    recovered = true;
                    continue;
                }
            };
            break (finished, target);
        };
        drop(call);
        let took = t0.elapsed();
        if recovered {
            // Back from a restart (maybe a redeploy): what it offers may
            // have changed.
            tracing::info!(backend = %b.name, "backend session recovered; listing again");
            let invalid = matches!(&outcome, Finished::Answer(Answer { error: Some(e), .. }) if e.code == ErrorCode::INVALID_PARAMS);
            if invalid {
                b.refresh_and_wait(timeout).await;
            } else {
                b.request_refresh();
            }
        }
        let (messages, ended, code) = match outcome {
            Finished::Answer(Answer {
                error: Some(e),
                before,
                ..
            }) => {
                tracing::debug!(backend = %b.name, error = %e.message, "routed request failed");
                let e = if recovered
                    && e.code == ErrorCode::INVALID_PARAMS
                    && r.method == RawMethod::ToolsCall
                {
                    schema_changed(&b.name, tool, e)
                } else {
                    e
                };
                let code = e.code;
                let message = self.error_message(client_id, e);
                (with_last(before, message), Ended::Failed, Some(code))
            }
            Finished::Answer(Answer {
                result,
                tool_failed,
                before,
                ..
            }) => {
                let mut message = result.unwrap_or_default();
                if r.method == RawMethod::ToolsCall {
                    planned.links.learn_text(&b.name, &message);
                }
                if modern {
                    message = self.for_modern_client(message, r.method);
                }
                let ended = if tool_failed {
                    Ended::ToolFailed
                } else {
                    Ended::Answered
                };
                (with_last(before, message), ended, None)
            }
            Finished::TooLarge { limit, read } => {
                let e = BackendError::TooLarge {
                    backend: b.name.clone(),
                    method: r.method.as_str().to_owned(),
                    bytes: read,
                    limit,
                };
                tracing::info!(backend = %b.name, error = %e, "answer not relayed");
                let e = e.into_mcp();
                let code = e.code;
                let message = self.error_message(client_id, e);
                (vec![message], Ended::Failed, Some(code))
            }
            Finished::Lost(why) => {
                tracing::debug!(backend = %b.name, error = %why, "routed request failed");
                let e = unavailable(&b.name, HealthState::Offline, &why.to_string());
                let code = e.code;
                let message = self.error_message(client_id, e);
                (vec![message], Ended::Unavailable, Some(code))
            }
            finished @ (Finished::TimedOut | Finished::Cancelled) => {
                let timed_out = matches!(finished, Finished::TimedOut);
                if let Carrier::Of(_, target) = &target {
                    cancel_on_backend(&self.gw, target, &ours, timed_out, b.keep_alive());
                }
                let e = match timed_out {
                    true => BackendError::Timeout {
                        backend: b.name.clone(),
                        timeout,
                    },
                    false => BackendError::Cancelled {
                        backend: b.name.clone(),
                    },
                };
                let e = e.into_mcp();
                let code = e.code;
                let message = self.error_message(client_id, e);
                (vec![message], Ended::Failed, Some(code))
            }
        };
        let call = span.map(|span| admission::ToolCall { span, took });
        admission::settle(audit, &b.name, Some(&b), ended, call);
        crate::metrics::get().forwarded(r.method.as_str(), "raw");
        let status = match (modern, code) {
            (true, Some(code)) => modern_status(code),
            _ => http::StatusCode::OK,
        };
        Handled::Reply(messages, status)
    }

    /// A result as a 2026-07-28 client gets it: a `resources/read`'s
    /// `cacheScope` no wider than Vigil's own results', and the
    /// `resultType` and `serverInfo` that revision asks of every result
    /// where the backend left them out (the typed path's rule,
    /// `relayed::for_client`). A 2026-07-28 backend's result with a scope
    /// Vigil need not narrow passes as it came.
    fn for_modern_client(&self, mut message: String, method: RawMethod) -> String {
        if method == RawMethod::ResourcesRead {
            let theirs = envelope::cache_scope(&message)
                .and_then(|s| serde_json::from_str::<rmcp::model::CacheScope>(s).ok());
            let ours = super::discovery::scope(self.gw.views_depend_on_caller());
            if let Some(scope) = super::discovery::narrowed(theirs, ours)
                && let Ok(json) = serde_json::to_string(&scope)
                && let Some(narrowed) = envelope::with_cache_scope(&message, &json)
            {
                message = narrowed;
            }
        }
        if envelope::modern_complete(&message, super::discovery::SERVER_INFO_KEY) {
            return message;
        }
        let Ok(mut v) = serde_json::from_str::<serde_json::Value>(&message) else {
            return message;
        };
        if let Some(serde_json::Value::Object(m)) = v.get_mut("result") {
            super::relayed::for_client(m, true, method == RawMethod::ToolsCall);
        }
        v.to_string()
    }

    /// Sends the request and reads the backend's answer.
    #[allow(clippy::too_many_arguments)] // each is one part of the exchange
    async fn exchange(
        &self,
        b: &Backend,
        target: &Arc<raw_http::Target>,
        body: String,
        ours: Arc<str>,
        client_id: &str,
        method: RawMethod,
        progress: Option<&Progress>,
        extra: http::HeaderMap,
    ) -> Result<Answer, Failure> {
        let (keep_alive, limit) = (b.keep_alive(), b.max_result());
        let posted = raw_http::post(target, body, ours.clone(), keep_alive, limit, extra)
            .await
            .map_err(|e| match e {
                PostError::NotAccepted(w) => Failure::NotAccepted(w),
                PostError::Lost(w) => Failure::Lost(w),
            })?;
        let mut events = match posted {
            Posted::Json { status, body } => {
                let text = std::str::from_utf8(&body).unwrap_or("");
                return self
                    .answer(text, &ours, client_id, method, Vec::new())
                    .ok_or_else(|| {
                        Failure::Lost(HttpFailure::Protocol(format!(
                            "the backend answered HTTP {status} without a JSON-RPC answer to the call"
                        )))
                    });
            }
            Posted::Events(events) => events,
        };
        let mut before = Vec::new();
        loop {
            let data = match events.next().await {
                Ok(Some(data)) => data,
                Ok(None) => {
                    return Err(Failure::Lost(HttpFailure::Protocol(
                        "the backend's stream ended without the answer".into(),
                    )));
                }
                Err(why) => return Err(Failure::Lost(why)),
            };
            match envelope::classify(&data, &ours) {
                Some(Incoming::Response { .. }) => {
                    return self
                        .answer(&data, &ours, client_id, method, before)
                        .ok_or_else(|| {
                            Failure::Lost(HttpFailure::Protocol(
                                "the backend's answer is not JSON-RPC".into(),
                            ))
                        });
                }
                Some(Incoming::Notification("notifications/message")) => {
                    if let Some(log) = self.masked(&data) {
                        match progress {
                            // Relayed as it comes; a client that went
                            // away cancels the call.
                            Some(p) => p.tx.send(log).map_err(|_| Failure::Cancelled)?,
                            None => before.push(log),
                        }
                    }
                }
                Some(Incoming::Notification("notifications/progress")) => {
                    if let Some(p) = progress
                        && let Some(note) = envelope::progress_for(&data, &ours, &p.token)
                    {
                        p.tx.send(note).map_err(|_| Failure::Cancelled)?;
                        p.progressed.notify_one();
                    }
                }
                Some(Incoming::Notification(m)) if m.ends_with("/list_changed") => {
                    b.request_refresh();
                }
                // A request of the backend's own has a session to be
                // answered on (2026-07-28 backends ask in their results).
                Some(Incoming::Request(method, id)) if !target.sessionless() => {
                    refuse_backend_request(&self.gw, target, method, id, b.keep_alive())
                }
                _ => {}
            }
        }
    }

    /// The backend's response `text`: a result with the client's id put
    /// back, every other byte as the backend wrote it, or its error.
    fn answer(
        &self,
        text: &str,
        ours: &str,
        client_id: &str,
        method: RawMethod,
        before: Vec<String>,
    ) -> Option<Answer> {
        let Some(Incoming::Response { error }) = envelope::classify(text, ours) else {
            return None;
        };
        if error {
            #[derive(serde::Deserialize)]
            struct Failed {
                error: McpError,
            }
            let e = serde_json::from_str::<Failed>(text).ok()?.error;
            return Some(Answer {
                result: None,
                error: Some(e),
                tool_failed: false,
                before,
            });
        }
        Some(Answer {
            result: Some(envelope::with_id(text, client_id)?),
            error: None,
            tool_failed: method == RawMethod::ToolsCall && envelope::tool_failed(text),
            before,
        })
    }

    /// A backend log message with its data masked like Vigil's own logs.
    fn masked(&self, data: &str) -> Option<String> {
        let mut v: serde_json::Value = serde_json::from_str(data).ok()?;
        if let Some(d) = v.pointer_mut("/params/data") {
            self.gw.redactor().mask_json(d);
        }
        Some(v.to_string())
    }

    fn error_message(&self, client_id: &str, e: McpError) -> String {
        let e = self.gw.redactor().mask_error(e);
        let error = serde_json::to_string(&e)
            .unwrap_or_else(|_| r#"{"code":-32603,"message":"internal error"}"#.to_owned());
        format!(r#"{{"jsonrpc":"2.0","id":{client_id},"error":{error}}}"#)
    }

    /// A JSON answer carrying error `e` for the client's request (with the
    /// HTTP status of its code for a 2026-07-28 client).
    fn refusal(&self, client_id: &str, e: McpError, modern: bool) -> Response {
        let status = if modern {
            modern_status(e.code)
        } else {
            http::StatusCode::OK
        };
        json_response(self.error_message(client_id, e), status)
    }
}

/// What carries one raw call: a lane's session, or nothing (sessionless).
enum Carrier {
    Of(Arc<crate::backend::OpenLane>, Arc<raw_http::Target>),
    Stateless(Arc<raw_http::Target>),
}

impl Carrier {
    fn target(&self) -> &Arc<raw_http::Target> {
        match self {
            Carrier::Of(_, t) | Carrier::Stateless(t) => t,
        }
    }

    /// Gives up the lane after it lost a call (nothing to give up without
    /// one).
    fn drop_from(&self, run: &Instance) {
        if let Carrier::Of(lane, _) = self {
            run.drop_lane(lane);
        }
    }
}

/// The principal that sent a request (set by the auth layer).
fn principal(parts: &http::request::Parts) -> Principal {
    parts
        .extensions
        .get::<Principal>()
        .cloned()
        .unwrap_or_else(Principal::local)
}

/// The 2026-07-28 headers of one sessionless call as a direct client sends
/// them: `Mcp-Method`, `Mcp-Name` with the backend's name (a URI as it
/// is), the client's `MCP-Protocol-Version`, and the client's `Mcp-Param-*`
/// (its tool's `x-mcp-header` arguments: the schema Vigil lists is the
/// backend's).
fn standard_headers(client: &http::HeaderMap, method: RawMethod, name: &str) -> http::HeaderMap {
    let mut out = http::HeaderMap::new();
    out.insert(
        http::HeaderName::from_static("mcp-method"),
        http::HeaderValue::from_static(method.as_str()),
    );
    if method.names_itself()
        && let Ok(v) = http::HeaderValue::from_str(&crate::dataplane::headers::encode(name))
    {
        out.insert(http::HeaderName::from_static("mcp-name"), v);
    }
    for (k, v) in client {
        if k.as_str().starts_with("mcp-param-") || k == "mcp-protocol-version" {
            out.append(k.clone(), v.clone());
        }
    }
    out
}

/// The HTTP status of a JSON-RPC error to a 2026-07-28 request, as rmcp's
/// server answers it on the typed path (a handshake-era request keeps 200).
fn modern_status(code: ErrorCode) -> http::StatusCode {
    match code {
        ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
        | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
        | ErrorCode::HEADER_MISMATCH => http::StatusCode::BAD_REQUEST,
        ErrorCode::METHOD_NOT_FOUND => http::StatusCode::NOT_FOUND,
        _ => http::StatusCode::OK,
    }
}

fn json_response(message: String, status: http::StatusCode) -> Response {
    (
        status,
        [(http::header::CONTENT_TYPE, "application/json")],
        message,
    )
        .into_response()
}

/// The answer to request `id` when the task running its call failed.
fn task_failed(id: &str) -> Vec<String> {
    vec![format!(
        r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32603,"message":"Vigil could not finish the call"}}}}"#
    )]
}

/// `before`, then `last`.
fn with_last(mut before: Vec<String>, last: String) -> Vec<String> {
    before.push(last);
    before
}

/// The answer as the client gets it: JSON when the response is all there
/// is, else an SSE stream of the request's notifications and the response
/// (`messages`, the response last).
fn answer_response(mut messages: Vec<String>, status: http::StatusCode) -> Response {
    if messages.len() <= 1 {
        return json_response(messages.pop().unwrap_or_default(), status);
    }
    let body: String = messages.iter().map(|m| sse_event(m)).collect();
    (
        [
            (http::header::CONTENT_TYPE, "text/event-stream"),
            (http::header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// One SSE `message` event carrying `m`.
fn sse_event(m: &str) -> String {
    let mut event = String::with_capacity(m.len() + 24);
    event.push_str("event: message\n");
    for line in m.lines() {
        event.push_str("data: ");
        event.push_str(line);
        event.push('\n');
    }
    event.push('\n');
    event
}

/// The request id of a `notifications/cancelled`, as written.
fn cancelled_request(text: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Note<'a> {
        #[serde(borrow)]
        method: &'a str,
        #[serde(borrow)]
        params: Option<Params<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct Params<'a> {
        #[serde(borrow, rename = "requestId")]
        request_id: &'a serde_json::value::RawValue,
    }
    let note: Note<'_> = serde_json::from_str(text).ok()?;
    (note.method == "notifications/cancelled").then_some(())?;
    Some(note.params?.request_id.get().to_owned())
}

/// Tells the backend Vigil no longer waits for request `ours`.
fn cancel_on_backend(
    gw: &Gateway,
    target: &Arc<raw_http::Target>,
    ours: &str,
    timed_out: bool,
    keep_alive: bool,
) {
    let reason = if timed_out {
        "timed out"
    } else {
        "cancelled by the client"
    };
    let note = format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":"{ours}","reason":"{reason}"}}}}"#
    );
    let target = target.clone();
    gw.background.spawn(async move {
        if let Err(e) = raw_http::send(&target, note, keep_alive).await {
            tracing::debug!(error = %e, "could not tell the backend of a cancellation");
        }
    });
}

/// Answers a request the backend sent on a lane call's stream: the lane
/// declared no client capabilities, so only `ping` has an answer.
fn refuse_backend_request(
    gw: &Gateway,
    target: &Arc<raw_http::Target>,
    method: &str,
    id: &serde_json::value::RawValue,
    keep_alive: bool,
) {
    let id = id.get();
    let message = if method == "ping" {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#)
    } else {
        let e = McpError::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("the client declared no capability for {method}"),
            None,
        );
        let error = serde_json::to_string(&e).unwrap_or_default();
        format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{error}}}"#)
    };
    let target = target.clone();
    gw.background.spawn(async move {
        if let Err(e) = raw_http::send(&target, message, keep_alive).await {
            tracing::debug!(error = %e, "could not answer a backend's request on the lane");
        }
    });
}

#[cfg(test)]
mod tests;
