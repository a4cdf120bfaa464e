//! The readiness `ping` of an HTTP backend, sent straight on the live
//! session instead of through rmcp's client worker.
//!
//! Why: probes are the gateway's steady background load (1,000 backends at a
//! 1 s interval are 1,000 pings a second). Through rmcp each ping costs a
//! task, several channel hops and a fresh TCP connection; here it is one
//! POST on a pooled keep-alive connection shared by all probes. It is still
//! an MCP round trip on the backend's live session: the same URL,
//! `Mcp-Session-Id`, `MCP-Protocol-Version` and configured headers as the
//! shared connection's own requests (recorded from them by [`SessionTarget`]),
//! never a second `initialize`.
//!
//! Contract: only a clean answer is decided here. Anything else (no session
//! yet, a non-200 status, an unexpected body) is a [`Direct::Undecided`] and
//! the caller repeats the ping through rmcp, whose error handling (session
//! re-initialization, status classification) stays the one source of truth.
//! A timeout is decided here: repeating it would double the probe budget.
//!
//! A 2026-07-28 backend has no `ping` and no session: its probe is the
//! `server/discover` the connection itself last sent (same URL, headers and
//! `_meta` envelope), sent again with a probe id ([`discover`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage, RequestId};

use super::error::HttpFailure;

type Headers = HashMap<HeaderName, HeaderValue>;

/// Largest probe answer read; a ping result is `{}`, a discover result a
/// few KiB (a larger one is left to rmcp).
const MAX_ANSWER: usize = 64 * 1024;

/// How long an SSE answer's stream may take to end after the answer.
const DRAIN_GRACE: Duration = Duration::from_millis(50);

/// Where and how the shared connection reaches its backend session, as last
/// seen on one of its own POSTs. Written by the connection's HTTP client,
/// read by the probe.
#[derive(Default)]
pub struct SessionTarget {
    target: Mutex<Option<Arc<Target>>>,
    /// Set when the session's standing GET stream failed or ended.
    broken: tokio::sync::Notify,
    /// Set when the session id changed: the client re-initialized a session
    /// the backend forgot (rmcp does this on HTTP 404).
    reinitialized: tokio::sync::Notify,
    /// How many re-initializations happened (see `reinitialized`).
    reinits: std::sync::atomic::AtomicU64,
    /// Whether the last POST found nothing accepting the connection (told
    /// from reqwest's typed error while rmcp's wrapping still lost it).
    refused: std::sync::atomic::AtomicBool,
    /// The HTTP error status the last POST was answered with (0: none), for
    /// the error of the request it failed (rmcp's keeps only text).
    status: std::sync::atomic::AtomicU16,
    /// How many times opening the standing GET stream ended, either way.
    standing: tokio::sync::watch::Sender<u64>,
    /// The last sessionless `server/discover` the connection sent (a
    /// 2026-07-28 backend), for the probe to send again.
    discover: Mutex<Option<Arc<Discover>>>,
}

/// A recorded `server/discover` request: where it went, its headers (the
/// configured ones, `MCP-Protocol-Version` and `Mcp-Method`) and its
/// params (the `_meta` envelope).
pub(crate) struct Discover {
    url: reqwest::Url,
    auth: Option<String>,
    headers: Headers,
    /// `params` as JSON text, if the request had any.
    params: Option<String>,
    /// The same destination for any other sessionless request: the
    /// configured headers and credentials, without those of one request.
    stateless: Arc<Target>,
}

/// Whether header `name` belongs to one request rather than to the
/// connection (the 2026-07-28 standard headers, SEP-2243).
fn per_request(name: &HeaderName) -> bool {
    let n = name.as_str();
    n == "mcp-method" || n == "mcp-name" || n.starts_with("mcp-param-")
}

impl Discover {
    /// The request again, under the probe's id.
    fn request(&self, client: &reqwest::Client, id: &str) -> reqwest::RequestBuilder {
        let body = match &self.params {
            Some(params) => format!(
                r#"{{"jsonrpc":"2.0","id":"{id}","method":"server/discover","params":{params}}}"#
            ),
            None => format!(r#"{{"jsonrpc":"2.0","id":"{id}","method":"server/discover"}}"#),
        };
        let mut req = client.post(self.url.clone());
        for (k, v) in &self.headers {
            req = req.header(k, v);
        }
        if let Some(auth) = &self.auth {
            req = req.bearer_auth(auth);
        }
        req.body(body)
    }
}

/// One recorded destination: a backend session (handshake era), or a
/// 2026-07-28 backend reached without one; where it is and what its
/// requests carry.
pub(crate) struct Target {
    uri: Arc<str>,
    /// `uri`, parsed once rather than per request.
    pub(crate) url: reqwest::Url,
    /// `None`: sessionless (2026-07-28).
    session_id: Option<Arc<str>>,
    auth: Option<String>,
    headers: Headers,
}

impl Target {
    /// Whether requests to it carry no session (2026-07-28).
    pub(crate) fn sessionless(&self) -> bool {
        self.session_id.is_none()
    }

    /// `req` with the session's id, its configured headers (the negotiated
    /// `MCP-Protocol-Version` among them) and its credentials.
    pub(crate) fn request(&self, mut req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        if let Some(id) = &self.session_id {
            req = req.header("mcp-session-id", &**id);
        }
        for (k, v) in &self.headers {
            req = req.header(k, v);
        }
        if let Some(auth) = &self.auth {
            req = req.bearer_auth(auth);
        }
        req
    }
}

impl SessionTarget {
    /// Records the context of a POST of the shared connection. Cheap when
    /// nothing changed (the common case): one lock and a string compare.
    pub fn observe(
        &self,
        uri: &Arc<str>,
        session_id: Option<&Arc<str>>,
        auth: Option<&String>,
        headers: &Headers,
    ) {
        let Some(session_id) = session_id else { return };
        let Ok(mut cur) = self.target.lock() else {
            return;
        };
        let same = cur.as_ref().is_some_and(|t| {
            t.session_id.as_ref() == Some(session_id)
                && t.uri == *uri
                && t.auth.as_ref() == auth
                && t.headers == *headers
        });
        if !same {
            let Ok(url) = reqwest::Url::parse(uri) else {
                return;
            };
            if cur
                .as_ref()
                .is_some_and(|t| t.session_id.as_ref() != Some(session_id))
            {
                self.reinits
                    .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                self.reinitialized.notify_one();
            }
            *cur = Some(Arc::new(Target {
                url,
                uri: uri.clone(),
                session_id: Some(session_id.clone()),
                auth: auth.cloned(),
                headers: headers.clone(),
            }));
        }
    }

    /// Records a sessionless POST if it is a `server/discover` request (a
    /// 2026-07-28 connection's): the probe's template. Anything else costs
    /// one match.
    pub fn observe_discover(
        &self,
        uri: &str,
        auth: Option<&String>,
        headers: &Headers,
        message: &ClientJsonRpcMessage,
    ) {
        let JsonRpcMessage::Request(request) = message else {
            return;
        };
        if !matches!(request.request, ClientRequest::DiscoverRequest(_)) {
            return;
        }
        let Ok(url) = reqwest::Url::parse(uri) else {
            return;
        };
        let params = serde_json::to_value(message)
            .ok()
            .and_then(|mut v| v.get_mut("params").map(serde_json::Value::take))
            .map(|p| p.to_string());
        let stateless = Arc::new(Target {
            uri: uri.into(),
            url: url.clone(),
            session_id: None,
            auth: auth.cloned(),
            headers: headers
                .iter()
                .filter(|(k, _)| !per_request(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        });
        let recorded = Arc::new(Discover {
            url,
            auth: auth.cloned(),
            headers: headers.clone(),
            params,
            stateless,
        });
        if let Ok(mut cur) = self.discover.lock() {
            *cur = Some(recorded);
        }
    }

    /// The last recorded `server/discover`, if one was.
    fn recorded_discover(&self) -> Option<Arc<Discover>> {
        self.discover.lock().ok().and_then(|d| d.clone())
    }

    /// Where a 2026-07-28 connection sends any sessionless request, once
    /// it sent `server/discover` (as every such connection begins).
    pub(crate) fn stateless(&self) -> Option<Arc<Target>> {
        self.recorded_discover().map(|d| d.stateless.clone())
    }

    /// The session as last recorded, if one was.
    pub(crate) fn current(&self) -> Option<Arc<Target>> {
        self.target.lock().ok().and_then(|t| t.clone())
    }

    /// Records that the standing GET stream failed or ended.
    pub fn stream_broken(&self) {
        self.broken.notify_one();
    }

    /// Records that an opening of the standing GET stream ended: the
    /// backend took it (HTTP 200) or refused it.
    pub fn stream_opening_ended(&self) {
        self.standing.send_modify(|n| *n += 1);
    }

    /// Waits (at most `within`) until the first opening of the standing GET
    /// stream ended. A backend may send a request for the client (an
    /// elicitation, say) on that stream rather than on the call's own, and
    /// drop it when no stream is open: a call sent before the stream is up
    /// would lose it.
    pub async fn standing_stream_settled(&self, within: std::time::Duration) {
        let mut rx = self.standing.subscribe();
        let _ = tokio::time::timeout(within, rx.wait_for(|n| *n > 0)).await;
    }

    /// Resolves after the next re-initialization of the session.
    pub async fn reinitialized(&self) {
        self.reinitialized.notified().await
    }

    /// How many times the session was re-initialized so far.
    pub fn reinitializations(&self) -> u64 {
        self.reinits.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Resolves at the next report of a broken stream.
    pub async fn broken(&self) {
        self.broken.notified().await
    }

    /// Records how the last POST's connection went (for the supervisor's
    /// "still binding its port" retry, see [`SessionTarget::refused`]).
    pub fn record_send(&self, refused: bool) {
        self.refused
            .store(refused, std::sync::atomic::Ordering::Release);
    }

    /// Records the HTTP error status of the last POST (`None`: it had
    /// none).
    pub fn record_status(&self, status: Option<http::StatusCode>) {
        self.status.store(
            status.map_or(0, |s| s.as_u16()),
            std::sync::atomic::Ordering::Release,
        );
    }

    /// The HTTP error status the last POST was answered with, if it was.
    pub fn refused_with(&self) -> Option<http::StatusCode> {
        let s = self.status.load(std::sync::atomic::Ordering::Acquire);
        http::StatusCode::from_u16(s).ok()
    }

    /// Whether the last POST was refused at the TCP level.
    pub fn refused(&self) -> bool {
        self.refused.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// The outcome of a direct ping.
#[derive(Debug)]
pub enum Direct {
    /// The backend answered the ping with a result.
    Answered,
    /// No answer within the budget.
    TimedOut,
    /// Not decided here (why, for the debug log): ping through rmcp instead.
    Undecided(HttpFailure),
}

/// Sends `ping` on the recorded session within `timeout`.
pub async fn ping(target: &SessionTarget, timeout: Duration) -> Direct {
    let Some(t) = target.current() else {
        return Direct::Undecided(HttpFailure::Protocol("no session recorded yet".into()));
    };
    direct(timeout, |client, id| {
        let body = format!(r#"{{"jsonrpc":"2.0","id":"{id}","method":"ping"}}"#);
        t.request(client.post(t.url.clone())).body(body)
    })
    .await
}

/// Sends the recorded `server/discover` again within `timeout` (a
/// 2026-07-28 backend's probe).
pub async fn discover(target: &SessionTarget, timeout: Duration) -> Direct {
    let Some(d) = target.recorded_discover() else {
        return Direct::Undecided(HttpFailure::Protocol(
            "no server/discover recorded yet".into(),
        ));
    };
    direct(timeout, |client, id| d.request(client, id)).await
}

/// One probe request, built by `build` from the shared client and the
/// probe's id, answered within `timeout`.
async fn direct(
    timeout: Duration,
    build: impl FnOnce(&reqwest::Client, &str) -> reqwest::RequestBuilder,
) -> Direct {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let client = match probe_client() {
        Ok(c) => c,
        Err(e) => return Direct::Undecided(e),
    };
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // A string id cannot collide with rmcp's numeric ids on the same session.
    let id = format!("vigil-probe-{n}");
    let request = build(&client, &id);
    let id = RequestId::String(id.into());
    match tokio::time::timeout(timeout, exchange(request, &id)).await {
        Ok(Ok(())) => Direct::Answered,
        Ok(Err(why)) => Direct::Undecided(why),
        Err(_) => Direct::TimedOut,
    }
}

async fn exchange(request: reqwest::RequestBuilder, id: &RequestId) -> Result<(), HttpFailure> {
    let resp = request
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json, text/event-stream")
        .send()
        .await
        .map_err(HttpFailure::of_send)?;
    if resp.status() != http::StatusCode::OK {
        return Err(HttpFailure::Status(resp.status()));
    }
    let sse = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let mut body = resp.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    // JSON: the whole body is the answer. SSE: scan complete events as they
    // arrive and stop at the answer (the stream may stay open after it).
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(HttpFailure::Body)?;
        if buf.len() + chunk.len() > MAX_ANSWER {
            let read = buf.len() + chunk.len();
            return Err(HttpFailure::TooLarge {
                limit: MAX_ANSWER,
                read,
            });
        }
        buf.extend_from_slice(&chunk);
        if sse && sse_answers(&buf, id) {
            // Servers close the stream right after the answer; reading its
            // end lets the connection go back to the pool (an unfinished
            // body would cost a new connection per probe). A stream that
            // stays open is simply dropped after a moment.
            let rest = async { while let Some(Ok(_)) = body.next().await {} };
            let _ = tokio::time::timeout(DRAIN_GRACE, rest).await;
            return Ok(());
        }
    }
    if !sse && is_result(&buf, id) {
        return Ok(());
    }
    Err(HttpFailure::Protocol(
        "the response did not carry the probe's result".into(),
    ))
}

/// Whether a JSON-RPC message is a successful response to `id`.
fn is_result(data: &[u8], id: &RequestId) -> bool {
    #[derive(serde::Deserialize)]
    struct Reply {
        id: Option<RequestId>,
        result: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_slice::<Reply>(data)
        .is_ok_and(|r| r.id.as_ref() == Some(id) && r.result.is_some())
}

/// Whether the complete SSE events in `buf` include the result for `id`.
fn sse_answers(buf: &[u8], id: &RequestId) -> bool {
    let Ok(text) = std::str::from_utf8(buf) else {
        return false;
    };
    let text = if text.contains('\r') {
        std::borrow::Cow::Owned(text.replace("\r\n", "\n"))
    } else {
        std::borrow::Cow::Borrowed(text)
    };
    // Only complete events (ended by a blank line) count.
    let Some(end) = text.rfind("\n\n") else {
        return false;
    };
    text[..end].split("\n\n").any(|event| {
        let data: Vec<&str> = event
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        let data = data.join("\n");
        is_result(data.as_bytes(), id)
    })
}

/// The one HTTP client of all direct pings: keep-alive, so a probe reuses a
/// connection instead of opening one per ping; built once, so the system's
/// root certificates are loaded once. A build failure (e.g. out of file
/// descriptors) is retried on the next ping.
pub(super) fn probe_client() -> Result<reqwest::Client, HttpFailure> {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    if let Some(c) = CLIENT.get() {
        return Ok(c.clone());
    }
    let built = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .tcp_nodelay(true)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(HttpFailure::NoClient)?;
    Ok(CLIENT.get_or_init(|| built).clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> RequestId {
        RequestId::String("vigil-probe-3".into())
    }

    #[test]
    fn a_json_result_for_our_id_answers() {
        assert!(is_result(
            br#"{"jsonrpc":"2.0","id":"vigil-probe-3","result":{}}"#,
            &id()
        ));
        assert!(!is_result(
            br#"{"jsonrpc":"2.0","id":"vigil-probe-4","result":{}}"#,
            &id()
        ));
        assert!(!is_result(
            br#"{"jsonrpc":"2.0","id":"vigil-probe-3","error":{"code":-32601,"message":"x"}}"#,
            &id()
        ));
        assert!(!is_result(b"not json", &id()));
    }

    #[test]
    fn sse_answers_only_with_a_complete_result_event() {
        let priming = "id: 0\nretry: 100\ndata: \n\n";
        let answer = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"vigil-probe-3\",\"result\":{}}\n\n";
        assert!(!sse_answers(priming.as_bytes(), &id()));
        assert!(sse_answers(format!("{priming}{answer}").as_bytes(), &id()));
        // The answer event is not complete until its blank line arrives.
        let cut = &answer[..answer.len() - 1];
        assert!(!sse_answers(format!("{priming}{cut}").as_bytes(), &id()));
        assert!(sse_answers(answer.replace('\n', "\r\n").as_bytes(), &id()));
        let error = "data: {\"jsonrpc\":\"2.0\",\"id\":\"vigil-probe-3\",\"error\":{\"code\":1,\"message\":\"x\"}}\n\n";
        assert!(!sse_answers(error.as_bytes(), &id()));
    }

    #[test]
    fn a_target_is_recorded_only_with_a_session() {
        let t = SessionTarget::default();
        let uri: Arc<str> = "http://127.0.0.1:1/mcp".into();
        t.observe(&uri, None, None, &Headers::new());
        assert!(t.current().is_none());
        let sid: Arc<str> = "abc".into();
        t.observe(&uri, Some(&sid), None, &Headers::new());
        let first = t.current().unwrap();
        t.observe(&uri, Some(&sid), None, &Headers::new());
        assert!(
            Arc::ptr_eq(&first, &t.current().unwrap()),
            "unchanged: kept"
        );
        let other: Arc<str> = "def".into();
        t.observe(&uri, Some(&other), None, &Headers::new());
        assert_eq!(t.current().unwrap().session_id.as_deref(), Some("def"));
    }

    #[tokio::test]
    async fn a_new_session_id_is_reported_as_a_reinitialization() {
        use futures::FutureExt;
        let t = SessionTarget::default();
        let uri: Arc<str> = "http://127.0.0.1:1/mcp".into();
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        t.observe(&uri, Some(&a), None, &Headers::new());
        t.observe(&uri, Some(&a), None, &Headers::new());
        assert!(
            t.reinitialized().now_or_never().is_none(),
            "first session: no re-initialization"
        );
        t.observe(&uri, Some(&b), None, &Headers::new());
        assert!(t.reinitialized().now_or_never().is_some());
    }

    #[test]
    fn only_a_sessionless_discover_is_recorded_and_it_is_sent_again_as_it_was() {
        use rmcp::model::{DiscoverRequest, DiscoverRequestParams, PingRequest};
        let t = SessionTarget::default();
        let uri = "http://127.0.0.1:1/mcp";
        let mut headers = Headers::new();
        headers.insert(
            HeaderName::from_static("mcp-method"),
            HeaderValue::from_static("server/discover"),
        );
        let ping = ClientJsonRpcMessage::request(
            ClientRequest::PingRequest(PingRequest::default()),
            RequestId::Number(1),
        );
        t.observe_discover(uri, None, &headers, &ping);
        assert!(t.recorded_discover().is_none(), "a ping is no template");

        let discover = ClientJsonRpcMessage::request(
            ClientRequest::DiscoverRequest(DiscoverRequest::new(DiscoverRequestParams {})),
            RequestId::Number(2),
        );
        let token = "secret".to_owned();
        t.observe_discover(uri, Some(&token), &headers, &discover);
        let d = t.recorded_discover().expect("recorded");
        let sent = d
            .request(&reqwest::Client::new(), "vigil-probe-7")
            .build()
            .unwrap();
        assert_eq!(sent.url().as_str(), uri);
        assert_eq!(sent.headers()["mcp-method"], "server/discover");
        assert_eq!(sent.headers()["authorization"], "Bearer secret");
        let body: serde_json::Value =
            serde_json::from_slice(sent.body().unwrap().as_bytes().unwrap()).unwrap();
        let original = serde_json::to_value(&discover).unwrap();
        assert_eq!(body["id"], "vigil-probe-7");
        assert_eq!(body["method"], "server/discover");
        assert_eq!(body.get("params"), original.get("params"), "params as sent");
    }

    #[tokio::test]
    async fn without_a_recorded_discover_the_probe_is_left_to_rmcp() {
        let t = SessionTarget::default();
        assert!(matches!(
            discover(&t, Duration::from_secs(1)).await,
            Direct::Undecided(_)
        ));
    }

    #[tokio::test]
    async fn without_a_session_the_ping_is_left_to_rmcp() {
        let t = SessionTarget::default();
        assert!(matches!(
            ping(&t, Duration::from_secs(1)).await,
            Direct::Undecided(_)
        ));
    }
}
