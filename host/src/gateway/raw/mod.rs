//! The raw forwarding path: routed requests that carry nothing per session
//! go from the client's POST to the backend's session as bytes, without
//! rmcp's typed machinery on either hop.
//!
//! A proxy does not need to understand what it only forwards. For an
//! eligible request this layer (an axum middleware in front of rmcp's
//! `/mcp` service) reads only what routing needs ([`envelope`]), applies
//! the same admission as the typed handlers ([`super::admission`]: policy,
//! rates, audit, call statistics and metrics), rewrites the id and the
//! routed name, sends the bytes on the backend's lane ([`crate::backend`]
//! `Backend::lane`, one backend session shared by every such client) and
//! returns the backend's answer with the client's id put back, every other
//! byte as the backend wrote it.
//!
//! # Eligibility (docs/gateway.md states the same rule)
//!
//! A request takes the raw path when all of these hold; anything else goes
//! the typed way, unchanged:
//! - a POST on a session whose client finished the 2025-era handshake,
//!   accepting both JSON and SSE, with no `MCP-Protocol-Version` other
//!   than a known 2025-era one;
//! - the client declared none of `sampling`, `elicitation`, `roots` and has
//!   not sent `logging/setLevel` (so nothing per session can flow on it);
//! - one JSON-RPC request (no batch) of `tools/call`, `resources/read`,
//!   `prompts/get` or `completion/complete`, with no member the envelope
//!   does not know (a task-augmented call is typed), and no `progressToken`
//!   or `io.modelcontextprotocol/` entry in `params._meta`;
//! - the name routes (in the shared catalog) to a streamable HTTP backend
//!   that is serving and is not `forward_auth`.
//!
//! A call the backend did not take (no lane, the backend forgot the lane's
//! session, the connection was refused) goes on the typed path, already
//! admitted; once the backend may have taken it (`tools/call` is not
//! idempotent) it never runs a second time: a later failure is the
//! client's error.

mod envelope;

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
use super::route::{schema_changed, unavailable, unknown_prompt, unknown_tool, unknown_uri};
use crate::audit::{Method, Outcome};
use crate::auth::Principal;
use crate::backend::error::HttpFailure;
use crate::backend::raw_http::{self, PostError, Posted};
use crate::backend::{Backend, BackendError, Era};
use crate::catalog::Kind;
use crate::health::{HealthState, advertisable};
use envelope::{Incoming, RawMethod, Target};
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

/// The middleware: answers eligible requests itself, hands the rest on.
pub async fn forward(State(raw): State<Arc<RawPath>>, req: Request, next: Next) -> Response {
    if req.method() != http::Method::POST {
        return next.run(req).await;
    }
    let Some(id) = req
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
    else {
        return next.run(req).await;
    };
    let Some(front) = raw.gw.fronts.get(id) else {
        return next.run(req).await;
    };
    if let Some(streams) = raw.gw.streams.get() {
        streams.touch(id);
    }
    if !(front.raw() || front.busy()) || !eligible_headers(req.headers()) || large(req.headers()) {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, raw.max_body).await {
        Ok(b) => b,
        Err(e) => return super::http::unreadable_body(e),
    };
    match raw.handle(&front, &parts, &bytes).await {
        Handled::Answered(response) => response,
        Handled::Reply(messages) => answer_response(messages),
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

/// Accepts both answer formats and speaks a 2025-era revision (rmcp's own
/// checks of these stay the typed path's).
fn eligible_headers(h: &http::HeaderMap) -> bool {
    let accept = h
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let version_ok = match h.get("mcp-protocol-version") {
        None => true,
        Some(v) => v.to_str().is_ok_and(|v| {
            v < "2026"
                && rmcp::model::ProtocolVersion::KNOWN_VERSIONS
                    .iter()
                    .any(|k| k.as_str() == v)
        }),
    };
    version_ok && accept.contains("application/json") && accept.contains("text/event-stream")
}

/// What became of a request.
enum Handled {
    Answered(Response),
    /// The messages of the answer in order, the response last: JSON when
    /// it is alone, else an SSE stream.
    Reply(Vec<String>),
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

/// How a raw call ended, once the backend may have taken it.
enum Ended {
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

impl RawPath {
    async fn handle(
        self: &Arc<Self>,
        front: &Arc<Front>,
        parts: &http::request::Parts,
        bytes: &Bytes,
    ) -> Handled {
        let Ok(text) = std::str::from_utf8(bytes) else {
            return Handled::Typed(None);
        };
        if front.busy()
            && let Some(id) = cancelled_request(text)
            && front.cancel(&id)
        {
            return Handled::Answered(http::StatusCode::ACCEPTED.into_response());
        }
        if !front.raw() {
            return Handled::Typed(None);
        }
        match envelope::Request::parse(text) {
            Some(r) if r.progress.is_some() => {
                let client_id = r.id.get().to_owned();
                self.streamed(front, parts, bytes, client_id).await
            }
            Some(r) => self.call(front, parts, text, r, None).await,
            None => Handled::Typed(None),
        }
    }

    /// A call with a progress token: its progress (and log messages) reach
    /// the client while it runs. The call runs on a task of its own and
    /// relays what it hears; nothing is committed to the client until the
    /// first relayed message, which the backend sends only once it took
    /// the call, so a call it did not take still goes the typed way. From
    /// then on the answer is an SSE stream: the relayed messages as they
    /// come, then the response. A client that goes away cancels the call
    /// at the next message.
    async fn streamed(
        self: &Arc<Self>,
        front: &Arc<Front>,
        parts: &http::request::Parts,
        bytes: &Bytes,
        client_id: String,
    ) -> Handled {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let (raw, front, parts, bytes) =
            (self.clone(), front.clone(), parts.clone(), bytes.clone());
        // The task owns the body and reads its envelope again (a few µs):
        // the parse borrows from the body, and handing the borrowed one
        // to a task that outlives this request's future would need an
        // owned copy of every part instead.
        let mut task = tokio::spawn(async move {
            let text = std::str::from_utf8(&bytes).unwrap_or("");
            let Some(r) = envelope::Request::parse(text) else {
                return Handled::Typed(None);
            };
            let token = r
                .progress
                .map(|(t, _)| t.get().to_owned())
                .unwrap_or_default();
            let progress = Progress {
                token,
                tx,
                progressed: tokio::sync::Notify::new(),
            };
            raw.call(&front, &parts, text, r, Some(progress)).await
        });
        let first = tokio::select! {
            biased;
            Some(m) = rx.recv() => m,
            done = &mut task => {
                let done = done.unwrap_or_else(|_| Handled::Reply(task_failed(&client_id)));
                // What was relayed just before the end goes first.
                let mut early: Vec<String> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
                return match done {
                    Handled::Reply(mut messages) if !early.is_empty() => {
                        early.append(&mut messages);
                        Handled::Reply(early)
                    }
                    other => other,
                };
            }
        };
        let relayed = futures::stream::once(async move { first })
            .chain(tokio_stream::wrappers::UnboundedReceiverStream::new(rx));
        let end = futures::stream::once(async move {
            match task.await {
                Ok(Handled::Reply(messages)) => messages,
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
        front: &Arc<Front>,
        parts: &http::request::Parts,
        text: &str,
        r: envelope::Request<'_>,
        progress: Option<Progress>,
    ) -> Handled {
        let gw = &self.gw;
        let catalog = gw.catalog();
        let (backend, renamed) = match r.target {
            Target::Tool => match catalog.route_tool(&r.name) {
                Some(route) => (route.backend.clone(), Some(route.name.clone())),
                None => return Handled::Typed(None),
            },
            Target::Prompt => match catalog.route_prompt(&r.name) {
                Some(route) => (route.backend.clone(), Some(route.name.clone())),
                None => return Handled::Typed(None),
            },
            Target::Uri => match catalog
                .route_uri(&r.name)
                .cloned()
                .or_else(|| front.links().backend_of(&r.name))
            {
                Some(b) => (b, None),
                None => return Handled::Typed(None),
            },
        };
        drop(catalog);
        let Some(b) = gw.backend(&backend) else {
            return Handled::Typed(None);
        };
        // A 2026-07-28 backend has no session to carry a lane; its requests
        // need their `_meta` envelope, which rmcp adds on the typed path.
        if !b.per_session()
            || b.forwards_auth()
            || b.era() == Some(Era::Modern)
            || !advertisable(b.state())
        {
            return Handled::Typed(None);
        }
        let client_id = r.id.get();
        let who = parts
            .extensions
            .get::<Principal>()
            .cloned()
            .unwrap_or_else(Principal::local);
        let audit = match r.method {
            RawMethod::Complete => {
                let unknown = match r.target {
                    Target::Uri => unknown_uri,
                    _ => unknown_prompt,
                };
                if !gw.policies().access(&who).permits(&r.name) {
                    return Handled::Answered(self.refusal(client_id, unknown(&r.name)));
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
                let session = parts
                    .headers
                    .get("mcp-session-id")
                    .and_then(|v| v.to_str().ok());
                let pending = gw.audit().begin_for(
                    audited,
                    &r.name,
                    || r.arguments.and_then(|a| serde_json::from_str(a.get()).ok()),
                    &who,
                    session,
                );
                match admission::admit(gw, &who, kind, &r.name, unknown, pending) {
                    Ok(a) => a,
                    Err(e) => return Handled::Answered(self.refusal(client_id, e)),
                }
            }
        };
        let ours = next_id();
        let renamed = renamed.filter(|n| *n != r.name);
        let body = r.rewrite(text, &format!("\"{ours}\""), renamed.as_deref());
        let tool = renamed.as_deref().unwrap_or(&r.name);
        let span =
            (r.method == RawMethod::ToolsCall).then(|| admission::tool_call_span(&b.name, tool));
        let call = front.start(client_id);
        let t0 = tokio::time::Instant::now();
        let timeout = gw.config.request_timeout_for(&b.config);
        // A backend that forgot the lane's session (it was restarted) did
        // not take the call: the lane is re-initialized once and the call
        // sent once more, as on the typed path.
        let mut recovered = false;
        let (outcome, target) = loop {
            let lane = match b.lane(who.caller()).await {
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
            let outcome = {
                let exchange = self.exchange(
                    &b,
                    &target,
                    body.clone(),
                    ours.clone(),
                    client_id,
                    r.method,
                    progress.as_ref(),
                );
                // `request_timeout`, restarted by each progress
                // notification (as on the typed path).
                let deadline = tokio::time::sleep(timeout);
                tokio::pin!(deadline, exchange);
                loop {
                    tokio::select! {
                        o = &mut exchange => break o,
                        _ = &mut deadline => break Err(Failure::TimedOut),
                        _ = call.cancel.cancelled() => break Err(Failure::Cancelled),
                        _ = progressed(progress.as_ref()) => {
                            deadline.as_mut().reset(tokio::time::Instant::now() + timeout);
                        }
                    }
                }
            };
            let ended = match outcome {
                Ok(a) => Ended::Answer(a),
                Err(Failure::TimedOut) => Ended::TimedOut,
                Err(Failure::Cancelled) => Ended::Cancelled,
                // The lane's session is sound: it answered, too much.
                Err(Failure::Lost(HttpFailure::TooLarge { limit, read })) => {
                    Ended::TooLarge { limit, read }
                }
                Err(Failure::Lost(why)) => {
                    b.drop_lane(&lane);
                    Ended::Lost(why)
                }
                Err(Failure::NotAccepted(why)) => {
                    b.drop_lane(&lane);
                    if recovered {
                        tracing::debug!(backend = %b.name, %why, "the lane did not take the call twice; the call goes the typed way");
                        return Handled::Typed(Some(Admitted::new(audit)));
                    }
                    tracing::info!(backend = %b.name, %why, "the backend forgot the lane's session; opening another");
                    recovered = true;
                    continue;
                }
            };
            break (ended, target);
        };
        drop(call);
        let took = t0.elapsed();
        if recovered {
            // Back from a restart (maybe a redeploy): what it offers may
            // have changed.
            tracing::info!(backend = %b.name, "backend session recovered; listing again");
            let invalid = matches!(&outcome, Ended::Answer(Answer { error: Some(e), .. }) if e.code == ErrorCode::INVALID_PARAMS);
            if invalid {
                b.refresh_and_wait(timeout).await;
            } else {
                b.request_refresh();
            }
        }
        let (messages, ok, outcome) = match outcome {
            Ended::Answer(Answer {
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
                let message = self.error_message(client_id, e);
                (with_last(before, message), false, Outcome::Error)
            }
            Ended::Answer(Answer {
                result,
                tool_failed,
                before,
                ..
            }) => {
                let message = result.unwrap_or_default();
                if r.method == RawMethod::ToolsCall {
                    front.links().learn_text(&b.name, &message);
                }
                let outcome = if tool_failed {
                    Outcome::Error
                } else {
                    Outcome::Ok
                };
                (with_last(before, message), !tool_failed, outcome)
            }
            Ended::TooLarge { limit, read } => {
                let e = BackendError::TooLarge {
                    backend: b.name.clone(),
                    method: r.method.as_str().to_owned(),
                    bytes: read,
                    limit,
                };
                tracing::info!(backend = %b.name, error = %e, "answer not relayed");
                let message = self.error_message(client_id, e.into_mcp());
                (vec![message], false, Outcome::Error)
            }
            Ended::Lost(why) => {
                tracing::debug!(backend = %b.name, error = %why, "routed request failed");
                let e = unavailable(&b.name, HealthState::Offline, &why.to_string());
                let message = self.error_message(client_id, e);
                (vec![message], false, Outcome::Unavailable)
            }
            ended @ (Ended::TimedOut | Ended::Cancelled) => {
                let timed_out = matches!(ended, Ended::TimedOut);
                cancel_on_backend(&target, &ours, timed_out, b.keep_alive());
                let e = match timed_out {
                    true => BackendError::Timeout {
                        backend: b.name.clone(),
                        timeout,
                    },
                    false => BackendError::Cancelled {
                        backend: b.name.clone(),
                    },
                };
                let message = self.error_message(client_id, e.into_mcp());
                (vec![message], false, Outcome::Error)
            }
        };
        if let Some(span) = span {
            admission::end_tool_call_span(&span, if ok { Ok(()) } else { Err("the call failed") });
            admission::record_call(&b, ok, took);
        }
        audit.finish_as(&b.name, outcome);
        crate::metrics::get().forwarded(r.method.as_str(), "raw");
        Handled::Reply(messages)
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
    ) -> Result<Answer, Failure> {
        let posted = raw_http::post(target, body, ours.clone(), b.keep_alive(), b.max_result())
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
                Some(Incoming::Request(method, id)) => {
                    refuse_backend_request(target, method, id, b.keep_alive())
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

    /// A JSON answer carrying error `e` for the client's request.
    fn refusal(&self, client_id: &str, e: McpError) -> Response {
        json_response(self.error_message(client_id, e))
    }
}

fn json_response(message: String) -> Response {
    ([(http::header::CONTENT_TYPE, "application/json")], message).into_response()
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
fn answer_response(mut messages: Vec<String>) -> Response {
    if messages.len() <= 1 {
        return json_response(messages.pop().unwrap_or_default());
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
    tokio::spawn(async move {
        if let Err(e) = raw_http::send(&target, note, keep_alive).await {
            tracing::debug!(error = %e, "could not tell the backend of a cancellation");
        }
    });
}

/// Answers a request the backend sent on a lane call's stream: the lane
/// declared no client capabilities, so only `ping` has an answer.
fn refuse_backend_request(
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
    tokio::spawn(async move {
        if let Err(e) = raw_http::send(&target, message, keep_alive).await {
            tracing::debug!(error = %e, "could not answer a backend's request on the lane");
        }
    });
}
