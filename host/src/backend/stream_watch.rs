//! An HTTP client for backend connections that notices when a backend
//! closes a request's SSE stream before answering it (SEP-1699 polling).
//!
//! rmcp's client resumes such a stream on its own, invisibly. A transparent
//! gateway shows its client the same thing — it closes the client's stream
//! too and delivers the answer when the client resumes — so this wrapper
//! reports the id of every request whose POST stream ended without that
//! request's response. Everything else is delegated to reqwest.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage, RequestId};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::Sse;
use tokio::sync::mpsc;

use super::error::{HttpFailure, is_refused};
use super::http_ping::SessionTarget;
use super::wire::{KeepJson, Wire};
use rmcp::model::GetExtensions;

type Headers = HashMap<HeaderName, HeaderValue>;
type SseStream = BoxStream<'static, Result<Sse, SseError>>;

/// A request whose stream the backend closed before answering it, and the
/// `retry` the backend set on that stream (how long its client waits before
/// resuming; rmcp's client waits that long, as the spec requires).
pub type Closed = (RequestId, Option<std::time::Duration>);

/// reqwest, plus early-close reports on a channel and the session context
/// the direct probe ping needs.
#[derive(Clone)]
pub struct WatchedHttp {
    inner: reqwest::Client,
    closed: mpsc::UnboundedSender<Closed>,
    target: Arc<SessionTarget>,
    /// Sees every event's data before rmcp decodes it.
    wire: Arc<Wire>,
}

impl WatchedHttp {
    /// `keep_alive`: reuse connections (`[[backends]] keep_alive`, on by
    /// default; a new connection per request costs a handshake and a socket
    /// in TIME_WAIT each). No redirects: one would replay session ids and
    /// configured headers to another place.
    ///
    /// `target` receives the session context of every POST.
    pub fn new(
        closed: mpsc::UnboundedSender<Closed>,
        keep_alive: bool,
        target: Arc<SessionTarget>,
        wire: Arc<Wire>,
    ) -> Result<Self, HttpFailure> {
        Ok(Self {
            inner: shared_client(keep_alive)?,
            closed,
            target,
            wire,
        })
    }

    /// `stream` with each event's data shown to the wire first.
    fn kept(&self, stream: SseStream) -> SseStream {
        let wire = self.wire.clone();
        stream
            .map(move |event| {
                event.map(|mut e| {
                    if let Some(replaced) = e.data.as_deref().and_then(|d| wire.incoming(d)) {
                        e.data = Some(replaced);
                    }
                    e
                })
            })
            .boxed()
    }

    /// Gives the session target the context of a POST: a session's, or a
    /// sessionless `server/discover` (the 2026-07-28 probe's template).
    fn observe(
        &self,
        uri: &Arc<str>,
        session_id: Option<&Arc<str>>,
        auth: Option<&String>,
        headers: &Headers,
        message: &ClientJsonRpcMessage,
    ) {
        match session_id {
            Some(_) => self.target.observe(uri, session_id, auth, headers),
            None => self.target.observe_discover(uri, auth, headers, message),
        }
    }

    /// Tells the session target whether this POST was refused at the TCP
    /// level, while reqwest's typed error is still at hand (rmcp's
    /// handshake error keeps only its text).
    fn record<T>(&self, sent: &Result<T, StreamableHttpError<reqwest::Error>>) {
        let refused = matches!(sent, Err(StreamableHttpError::Client(e)) if is_refused(e));
        self.target.record_send(refused);
        self.target
            .record_status(sent.as_ref().err().and_then(status_of));
    }
}

/// The HTTP error status a POST was answered with, from rmcp's typed error
/// (its wording is not read).
fn status_of(e: &StreamableHttpError<reqwest::Error>) -> Option<http::StatusCode> {
    match e {
        StreamableHttpError::HttpStatus(h) => http::StatusCode::from_u16(h.status).ok(),
        StreamableHttpError::AuthRequired(_) => Some(http::StatusCode::UNAUTHORIZED),
        StreamableHttpError::InsufficientScope(_) => Some(http::StatusCode::FORBIDDEN),
        StreamableHttpError::Client(e) => e.status(),
        _ => None,
    }
}

/// One reqwest client per `keep_alive` value for all backend connections:
/// each client loads the system's root certificates, which at a thousand
/// backends was a third of the heap and a sixth of start-up. Connections
/// carry no per-backend state (headers are per request), so sharing the
/// pool is safe. Building can fail (e.g. out of file descriptors while
/// loading root certificates): an error for this attempt, never a panic,
/// and the next attempt builds again. The raw path (`raw_http`) sends on
/// the same pool, so its calls and the connections' own requests reuse
/// each other's connections.
pub(super) fn shared_client(keep_alive: bool) -> Result<reqwest::Client, HttpFailure> {
    static POOLED: OnceLock<reqwest::Client> = OnceLock::new();
    static UNPOOLED: OnceLock<reqwest::Client> = OnceLock::new();
    let cell = if keep_alive { &POOLED } else { &UNPOOLED };
    if let Some(c) = cell.get() {
        return Ok(c.clone());
    }
    let built = reqwest::Client::builder()
        .pool_max_idle_per_host(if keep_alive { 256 } else { 0 })
        .tcp_nodelay(true)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(HttpFailure::NoClient)?;
    Ok(cell.get_or_init(|| built).clone())
}

/// Whether an SSE `data` payload is the response to request `id`.
fn answers(data: &str, id: &RequestId) -> bool {
    // Cheap filter first: only responses carry "result" or "error".
    if !(data.contains("\"result\"") || data.contains("\"error\"")) {
        return false;
    }
    #[derive(serde::Deserialize)]
    struct Reply {
        id: Option<RequestId>,
    }
    serde_json::from_str::<Reply>(data).is_ok_and(|r| r.id.as_ref() == Some(id))
}

/// A POST response stream that reports its request when it ends unanswered.
struct Watched {
    inner: SseStream,
    id: RequestId,
    answered: bool,
    /// The last `retry` field seen on the stream, in milliseconds.
    retry: Option<u64>,
    closed: mpsc::UnboundedSender<Closed>,
}

impl Stream for Watched {
    type Item = Result<Sse, SseError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.inner.poll_next_unpin(cx);
        match &polled {
            Poll::Ready(Some(Ok(event))) => {
                if event.retry.is_some() {
                    self.retry = event.retry;
                }
                if !self.answered && event.data.as_deref().is_some_and(|d| answers(d, &self.id)) {
                    self.answered = true;
                }
            }
            Poll::Ready(None) if !self.answered => {
                self.answered = true; // report once
                let retry = self.retry.map(std::time::Duration::from_millis);
                let _ = self.closed.send((self.id.clone(), retry));
            }
            _ => {}
        }
        polled
    }
}

impl StreamableHttpClient for WatchedHttp {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: Headers,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: Headers,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.observe(
            &uri,
            session_id.as_ref(),
            auth_header.as_ref(),
            &custom_headers,
            &message,
        );
        let id = match &message {
            JsonRpcMessage::Request(r) => Some(r.id.clone()),
            _ => None,
        };
        let keep = matches!(&message, JsonRpcMessage::Request(r)
            if r.request.extensions().get::<KeepJson>().is_some());
        let sent = if keep {
            // A JSON body's text must reach the wire (`kept_post.rs`).
            super::kept_post::post(
                &self.inner,
                &self.wire,
                &uri,
                &message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await
        } else {
            self.inner
                .post_message_with_response_limits(
                    uri,
                    message,
                    session_id,
                    auth_header,
                    custom_headers,
                    limits,
                )
                .await
        };
        self.record(&sent);
        let response = sent?;
        Ok(match (id, response) {
            (Some(id), StreamableHttpPostResponse::Sse(stream, session)) => {
                let watched = Watched {
                    inner: self.kept(stream),
                    id,
                    answered: false,
                    retry: None,
                    closed: self.closed.clone(),
                };
                StreamableHttpPostResponse::Sse(watched.boxed(), session)
            }
            (_, other) => other,
        })
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: Headers,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.inner
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: Headers,
    ) -> Result<SseStream, StreamableHttpError<Self::Error>> {
        let stream = self
            .inner
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await?;
        Ok(self.kept(stream))
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: Headers,
        max_sse_event_size: usize,
    ) -> Result<SseStream, StreamableHttpError<Self::Error>> {
        let result = self
            .inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await;
        self.target.stream_opening_ended();
        match result {
            Ok(stream) => Ok(EndWatched {
                inner: self.kept(stream),
                target: self.target.clone(),
            }
            .boxed()),
            Err(e) => {
                self.target.stream_broken();
                Err(e)
            }
        }
    }
}

/// The session's standing GET stream, reporting when it fails or ends: rmcp
/// reconnects such a stream by itself, so without this a backend that died
/// stays "connected" until the next probe.
struct EndWatched {
    inner: SseStream,
    target: Arc<SessionTarget>,
}

impl Stream for EndWatched {
    type Item = Result<Sse, SseError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.inner.poll_next_unpin(cx);
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            self.target.stream_broken();
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn recognises_only_the_answer_to_its_request() {
        let id = RequestId::Number(7);
        assert!(answers(r#"{"jsonrpc":"2.0","id":7,"result":{}}"#, &id));
        assert!(answers(
            r#"{"jsonrpc":"2.0","id":7,"error":{"code":1,"message":"x"}}"#,
            &id
        ));
        assert!(!answers(r#"{"jsonrpc":"2.0","id":8,"result":{}}"#, &id));
        assert!(!answers(
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"result":1}}"#,
            &id
        ));
        assert!(!answers("", &id));
    }

    #[tokio::test]
    async fn an_unanswered_stream_end_is_reported_once_with_its_retry() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let priming = Sse {
            event: None,
            data: Some(String::new()),
            id: Some("0".into()),
            retry: Some(10),
        };
        let inner = futures::stream::iter(vec![Ok(priming)]).boxed();
        let mut w = Watched {
            inner,
            id: RequestId::Number(1),
            answered: false,
            retry: None,
            closed: tx,
        };
        while w.next().await.is_some() {}
        assert!(w.next().await.is_none());
        assert_eq!(
            rx.try_recv().ok(),
            Some((RequestId::Number(1), Some(Duration::from_millis(10))))
        );
        assert!(rx.try_recv().is_err(), "reported once");
    }

    #[tokio::test]
    async fn an_answered_stream_is_not_reported() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let reply = Sse {
            event: None,
            data: Some(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#.into()),
            id: Some("1".into()),
            retry: None,
        };
        let inner = futures::stream::iter(vec![Ok(reply)]).boxed();
        let mut w = Watched {
            inner,
            id: RequestId::Number(1),
            answered: false,
            retry: None,
            closed: tx,
        };
        while w.next().await.is_some() {}
        assert!(rx.try_recv().is_err());
    }
}

#[cfg(test)]
mod status_tests {
    use rmcp::transport::streamable_http_client::HttpStatusError;

    use super::*;

    #[test]
    fn a_posts_status_is_read_off_the_typed_error() {
        let limited = StreamableHttpError::HttpStatus(HttpStatusError::new(429, None));
        assert_eq!(
            status_of(&limited),
            Some(http::StatusCode::TOO_MANY_REQUESTS)
        );
        let unavailable = StreamableHttpError::HttpStatus(HttpStatusError::new(503, None));
        assert_eq!(
            status_of(&unavailable),
            Some(http::StatusCode::SERVICE_UNAVAILABLE)
        );
        // Text that merely mentions a status is no status.
        let worded = StreamableHttpError::<reqwest::Error>::UnexpectedServerResponse(
            "HTTP 429 Too Many Requests".into(),
        );
        assert_eq!(status_of(&worded), None);
    }
}
