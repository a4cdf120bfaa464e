//! Sealed session ids at the HTTP edge of `/mcp`.
//!
//! Clients never see the id rmcp gives a session: the `Mcp-Session-Id` of
//! an `initialize` answer is replaced by a sealed id
//! ([`crate::cluster::session_id`]) carrying what the session is (whose,
//! which revision, the client's capabilities and info, when it was issued
//! and when it expires), opened in the session book
//! ([`crate::cluster::book`]). Every later request's id is resolved there
//! (verified, unexpired, not closed) and put back to rmcp's before anything
//! else sees it, so the raw path, the session manager and the handlers all
//! work with rmcp's id.
//!
//! A session belongs to the principal whose `initialize` opened it: a
//! request on it with another principal's credentials is answered exactly
//! as an unknown session is (404), so a session id learnt from elsewhere
//! is worth nothing, and logged. An id that was altered, forged, sealed
//! under another key, expired, or closed (HTTP DELETE) is answered the
//! same way. Because the owner is in the id, no map of sessions to
//! principals is kept, and any replica holding the key can tell.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::auth::Principal;
use crate::cluster::book::SessionBook;
use crate::cluster::session_id::{Declared, SessionFacts};
use crate::log_limit::SharedLogLimit;
use crate::redact::session_tag;

const HEADER: &str = "mcp-session-id";

/// The sealed id a request came with, in its extensions once resolved:
/// what the handlers name the session by in the book (rmcp's id is what
/// they are handed in the header).
#[derive(Clone)]
pub struct SealedId(pub Arc<str>);

/// What [`seal`] needs.
pub struct SessionIds {
    book: Arc<dyn SessionBook>,
    /// Which sessions rmcp has here, and how it adopts the others
    /// ([`super::adopt`]); `None` in tests of the ids alone.
    adopt: Option<Adopt>,
    /// The largest body read (`max_body_bytes`): an `initialize` is read
    /// to learn what the session is.
    max_body: usize,
    /// At most one WARN about a foreign session per 10 s.
    foreign_log: SharedLogLimit,
}

/// What adopting a session takes: rmcp's sessions here, and its session
/// store.
pub struct Adopt {
    pub streams: Arc<super::streams::StreamSessions>,
    pub adoptions: Arc<super::adopt::Adoptions>,
}

impl SessionIds {
    pub fn new(book: Arc<dyn SessionBook>, max_body: usize, adopt: Option<Adopt>) -> Arc<Self> {
        Arc::new(SessionIds {
            book,
            adopt,
            max_body,
            foreign_log: SharedLogLimit::new(std::time::Duration::from_secs(10)),
        })
    }
}

/// The middleware (inside authentication: it reads the [`Principal`]).
pub async fn seal(State(ids): State<Arc<SessionIds>>, req: Request, next: Next) -> Response {
    let sealed = req
        .headers()
        .get(HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    match sealed {
        Some(id) => on_session(&ids, id, req, next).await,
        None => opening(&ids, req, next).await,
    }
}

/// Exactly rmcp's answer for an unknown session.
fn unknown_session() -> Response {
    (http::StatusCode::NOT_FOUND, "Not Found: Session not found").into_response()
}

fn principal(req: &Request) -> Principal {
    req.extensions()
        .get::<Principal>()
        .cloned()
        .unwrap_or_else(Principal::local)
}

/// A request on session `sealed`: resolved to rmcp's id, or refused.
async fn on_session(ids: &SessionIds, sealed: String, mut req: Request, next: Next) -> Response {
    let who = principal(&req);
    let facts = match ids.book.resolve(&sealed).await {
        Ok(f) if f.caller.is(who.caller()) => f,
        Ok(_) => {
            if let Some(more) = ids.foreign_log.admit() {
                tracing::warn!(principal = %who, session = %session_tag(&sealed), more, "a request on a session another principal opened was answered as an unknown session");
            }
            return unknown_session();
        }
        Err(why) => {
            tracing::debug!(session = %session_tag(&sealed), %why, "a request on no session this gateway can resolve");
            return unknown_session();
        }
    };
    let Ok(local) = http::HeaderValue::from_str(&facts.local) else {
        return unknown_session();
    };
    let delete = req.method() == http::Method::DELETE;
    // A session rmcp does not have here is adopted (see `super::adopt`),
    // unless it is being closed: then there is nothing here to close.
    let adopting = match &ids.adopt {
        Some(a) if !a.streams.has(&facts.local).await => Some(a),
        _ => None,
    };
    if delete && adopting.is_some() {
        ids.book.close(&sealed).await;
        return http::StatusCode::ACCEPTED.into_response();
    }
    if adopting.is_some() && ids.book.closed_elsewhere(&facts).await {
        tracing::debug!(session = %session_tag(&sealed), "a request on a session another replica closed");
        return unknown_session();
    }
    let _expected = adopting.map(|a| {
        tracing::debug!(session = %session_tag(&sealed), "adopting a session this replica does not have");
        a.adoptions.expect(&facts)
    });
    req.headers_mut().insert(HEADER, local);
    req.extensions_mut()
        .insert(SealedId(sealed.as_str().into()));
    let response = next.run(req).await;
    if delete && response.status().is_success() {
        ids.book.close(&sealed).await;
    }
    response
}

/// What an `initialize` says of the session it opens.
#[derive(Deserialize)]
struct Initialize<'a> {
    #[serde(borrow)]
    method: &'a str,
    #[serde(borrow)]
    params: Option<InitializeParams<'a>>,
}

#[derive(Deserialize)]
struct InitializeParams<'a> {
    #[serde(rename = "protocolVersion")]
    protocol_version: Option<String>,
    #[serde(borrow)]
    capabilities: Option<&'a RawValue>,
    #[serde(borrow, rename = "clientInfo")]
    client_info: Option<&'a RawValue>,
}

/// A request without a session id: the `initialize` that may open one is
/// read first, and the id of the session it opened sealed.
async fn opening(ids: &SessionIds, req: Request, next: Next) -> Response {
    // Only a POST opens a session; a 2026-07-28 request names its method
    // in a header and opens none.
    let named = req
        .headers()
        .get("mcp-method")
        .is_some_and(|m| m.as_bytes() != b"initialize");
    if req.method() != http::Method::POST || named {
        return next.run(req).await;
    }
    let who = principal(&req);
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, ids.max_body).await {
        Ok(b) => b,
        Err(e) => return super::http::unreadable_body(e),
    };
    let facts_of = |local: String| {
        let init = serde_json::from_slice::<Initialize<'_>>(&bytes)
            .ok()
            .filter(|i| i.method == "initialize")
            .and_then(|i| i.params);
        let revision = init
            .as_ref()
            .and_then(|p| p.protocol_version.clone())
            .unwrap_or_default();
        let mut facts = SessionFacts::new(local, who.caller(), revision);
        // Parsed and written again, compact (keys in the client's order):
        // what the id carries does not depend on the client's spacing.
        let json = |v: Option<&RawValue>| {
            v.and_then(|v| serde_json::from_str(v.get()).ok())
                .map(|v| Declared::of(&v))
        };
        facts.capabilities = json(init.as_ref().and_then(|p| p.capabilities));
        facts.client = json(init.as_ref().and_then(|p| p.client_info));
        facts
    };
    let initialize_parts = ids.adopt.is_some().then(|| parts.clone());
    let mut response = next
        .run(Request::from_parts(parts, Body::from(bytes.clone())))
        .await;
    let Some(local) = response
        .headers()
        .get(HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
    else {
        return response;
    };
    let sealed = match ids.book.open(&facts_of(local.clone())).await {
        Ok(id) => id,
        Err(e) => {
            tracing::error!(error = %e, "a session was opened but its id could not be sealed; refusing it");
            return (
                http::StatusCode::SERVICE_UNAVAILABLE,
                "Service Unavailable: no session id could be issued; retry",
            )
                .into_response();
        }
    };
    let Ok(value) = http::HeaderValue::from_str(&sealed) else {
        return unknown_session();
    };
    if let (Some(adopt), Some(parts)) = (&ids.adopt, initialize_parts) {
        initialized_here(adopt, parts, &local, &sealed).await;
    }
    response.headers_mut().insert(HEADER, value);
    response
}

/// Tells the session just opened here that its client is initialized,
/// as its `notifications/initialized` would.
///
/// Behind a load balancer that notification may reach another replica
/// (which adopts the session there), and this one would never register
/// the session: never send it `list_changed`, never serve it by the raw
/// path. The client's own notification, if it comes here too, is then a
/// second one, which the session takes as already done.
async fn initialized_here(
    adopt: &Adopt,
    mut parts: http::request::Parts,
    local: &str,
    sealed: &str,
) {
    use rmcp::model::{ClientJsonRpcMessage, ClientNotification, InitializedNotification};
    use rmcp::transport::streamable_http_server::SessionManager as _;
    let Ok(id) = http::HeaderValue::from_str(local) else {
        return;
    };
    parts.headers.insert(HEADER, id);
    parts.extensions.insert(SealedId(sealed.into()));
    let mut note = ClientJsonRpcMessage::notification(ClientNotification::InitializedNotification(
        InitializedNotification::default(),
    ));
    note.insert_extension(parts);
    if let Err(e) = adopt.streams.accept_message(&local.into(), note).await {
        tracing::debug!(session = %session_tag(sealed), error = %e, "could not mark a new session initialized");
    }
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::routing::any;
    use tower::ServiceExt as _;

    use super::*;
    use crate::cluster::book::LocalBook;
    use crate::cluster::session_id::Sealer;

    /// A stand-in for rmcp behind the middleware: opens session
    /// `local-1` for a request without an id, and echoes the id it got.
    fn app() -> Router {
        let inner = Router::new().route(
            "/mcp",
            any(|req: Request| async move {
                match req.headers().get(HEADER) {
                    None => ([(HEADER, "local-1")], "opened".to_owned()).into_response(),
                    Some(id) => {
                        // The handlers name the session in the book by
                        // the id its client used.
                        let sealed = req.extensions().get::<SealedId>().map(|s| s.0.clone());
                        let by = if sealed.is_some_and(|s| s.starts_with("s1.")) {
                            "sealed"
                        } else {
                            "no sealed id"
                        };
                        format!("got {} ({by})", id.to_str().unwrap()).into_response()
                    }
                }
            }),
        );
        let book = Arc::new(LocalBook::new(Sealer::new(&[9; 32], None)));
        inner.route_layer(axum::middleware::from_fn_with_state(
            SessionIds::new(book, 1 << 20, None),
            seal,
        ))
    }

    const INIT: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"roots":{}},"clientInfo":{"name":"t","version":"1"}}}"#;

    fn request(method: &str, id: Option<&str>, who: &Principal, body: &str) -> Request {
        let mut b = http::Request::builder().method(method).uri("/mcp");
        if let Some(id) = id {
            b = b.header(HEADER, id);
        }
        let mut req = b.body(Body::from(body.to_owned())).unwrap();
        req.extensions_mut().insert(who.clone());
        req
    }

    async fn text(r: Response) -> (http::StatusCode, String) {
        let status = r.status();
        let body = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn a_client_gets_a_sealed_id_and_rmcp_keeps_its_own() {
        let app = app();
        let alice = Principal::key("alice");
        let opened = app
            .clone()
            .oneshot(request("POST", None, &alice, INIT))
            .await
            .unwrap();
        let sealed = opened.headers()[HEADER].to_str().unwrap().to_owned();
        assert!(
            sealed.starts_with("s1.") && !sealed.contains("local-1"),
            "{sealed}"
        );
        let used = app
            .clone()
            .oneshot(request("POST", Some(&sealed), &alice, "{}"))
            .await
            .unwrap();
        assert_eq!(
            text(used).await,
            (http::StatusCode::OK, "got local-1 (sealed)".into())
        );
    }

    #[tokio::test]
    async fn another_principal_a_forged_or_a_closed_id_is_an_unknown_session() {
        let app = app();
        let (alice, bob) = (Principal::key("alice"), Principal::key("bob"));
        let opened = app
            .clone()
            .oneshot(request("POST", None, &alice, INIT))
            .await
            .unwrap();
        let sealed = opened.headers()[HEADER].to_str().unwrap().to_owned();
        let not_found = (
            http::StatusCode::NOT_FOUND,
            "Not Found: Session not found".into(),
        );
        let bobs = app
            .clone()
            .oneshot(request("POST", Some(&sealed), &bob, "{}"))
            .await
            .unwrap();
        assert_eq!(text(bobs).await, not_found);
        // rmcp's own id, learnt somehow, is no id at all here.
        let raw = app
            .clone()
            .oneshot(request("POST", Some("local-1"), &alice, "{}"))
            .await
            .unwrap();
        assert_eq!(text(raw).await, not_found);
        // Closed: a DELETE that succeeded closes it for good.
        let deleted = app
            .clone()
            .oneshot(request("DELETE", Some(&sealed), &alice, ""))
            .await
            .unwrap();
        assert_eq!(deleted.status(), http::StatusCode::OK);
        let after = app
            .clone()
            .oneshot(request("POST", Some(&sealed), &alice, "{}"))
            .await
            .unwrap();
        assert_eq!(text(after).await, not_found);
    }

    #[tokio::test]
    async fn a_2026_request_is_passed_on_unread() {
        let app = app();
        let who = Principal::local();
        let mut req = request("POST", None, &who, "{}");
        req.headers_mut()
            .insert("mcp-method", http::HeaderValue::from_static("tools/call"));
        // The stand-in opens a session for it; a 2026-07-28 request is
        // never one rmcp opens a session for, so nothing is sealed.
        let r = app.oneshot(req).await.unwrap();
        assert_eq!(r.headers()[HEADER], "local-1");
    }
}
