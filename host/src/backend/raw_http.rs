//! One JSON-RPC request sent as bytes on a backend's live HTTP session, or
//! to a 2026-07-28 backend without one, and its answer read back as
//! messages: the backend half of the gateway's raw forwarding path
//! (`gateway::raw`).
//!
//! The session is one an rmcp client opened (the backend's lane, see
//! [`super::Backend::lane`]): the same URL, `Mcp-Session-Id`,
//! `MCP-Protocol-Version` and configured headers its own POSTs carry
//! (recorded by [`SessionTarget`]). A sessionless request goes where the
//! backend's 2026-07-28 connection sends its own
//! ([`super::Backend::stateless_target`]), with the headers of that request
//! added by the caller. The POST travels on a pooled keep-alive
//! connection with `TCP_NODELAY`, shared by every raw call.
//!
//! Contract: [`PostError::NotAccepted`] means the backend did not take the
//! request (it forgot the session, or nothing accepted the connection), so
//! sending it again another way cannot run it twice; every other failure
//! after the send is [`PostError::Lost`].

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};

use super::error::HttpFailure;
pub(crate) use super::http_ping::Target;

/// How often a stream the backend closed before answering is resumed.
const MAX_RESUMES: usize = 8;

/// Longest wait before resuming that Vigil honours of a backend's `retry`.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(5);

/// Why a raw POST did not produce an answer.
#[derive(Debug, thiserror::Error)]
pub enum PostError {
    /// The backend did not take the request; sending it another way is safe.
    #[error("{0}")]
    NotAccepted(HttpFailure),
    /// The exchange broke after the request may have reached the backend.
    #[error("{0}")]
    Lost(HttpFailure),
}

/// The answer of a raw POST.
pub enum Posted {
    /// One JSON message (the response, or an error) with its HTTP status.
    Json {
        status: http::StatusCode,
        body: Bytes,
    },
    /// The request's event stream: its messages in order, the response last.
    Events(Events),
}

/// Sends `body` (one request whose id is `id`, decoded) on `t`'s session,
/// with `extra` headers of this request (a sessionless one's standard
/// headers); `keep_alive` follows the backend's setting. At most `limit`
/// bytes of the answer are read (a JSON body, or all events of the
/// request's stream: `limits.max_result_bytes`, as on the typed path).
pub async fn post(
    t: &Arc<Target>,
    body: String,
    id: Arc<str>,
    keep_alive: bool,
    limit: usize,
    extra: http::HeaderMap,
) -> Result<Posted, PostError> {
    let resp = message_post(t, body, keep_alive)
        .map_err(PostError::NotAccepted)?
        .headers(extra)
        .send()
        .await
        .map_err(|e| match HttpFailure::of_send(e) {
            f if f.before_delivery() => PostError::NotAccepted(f),
            f => PostError::Lost(f),
        })?;
    let status = resp.status();
    // Streamable HTTP: 404 is the backend saying it does not know the
    // session, so it did not run the request. Without a session
    // (2026-07-28) it is an answer: a method the backend does not have.
    if status == http::StatusCode::NOT_FOUND && !t.sessionless() {
        return Err(PostError::NotAccepted(HttpFailure::Status(status)));
    }
    let sse = status.is_success()
        && resp
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
    if sse {
        return Ok(Posted::Events(Events::new(
            t.clone(),
            id,
            resp,
            keep_alive,
            limit,
        )));
    }
    let body = read_bounded(resp, limit).await.map_err(PostError::Lost)?;
    Ok(Posted::Json { status, body })
}

/// Sends one message the backend is owed (the answer to a request of its
/// own, or a cancellation) on `t`'s session; failures are the caller's to
/// log.
pub async fn send(t: &Target, message: String, keep_alive: bool) -> Result<(), HttpFailure> {
    let resp = message_post(t, message, keep_alive)?
        .send()
        .await
        .map_err(HttpFailure::of_send)?;
    if resp.status().is_success() {
        Ok(())
    } else {
        Err(HttpFailure::Status(resp.status()))
    }
}

/// A POST of one JSON-RPC message on `t`'s session.
fn message_post(
    t: &Target,
    body: String,
    keep_alive: bool,
) -> Result<reqwest::RequestBuilder, HttpFailure> {
    let client = super::stream_watch::shared_client(keep_alive)?;
    Ok(t.request(client.post(t.url.clone()))
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json, text/event-stream")
        .body(body))
}

async fn read_bounded(resp: reqwest::Response, limit: usize) -> Result<Bytes, HttpFailure> {
    if let Some(n) = resp.content_length().filter(|&n| n > limit as u64) {
        let read = usize::try_from(n).unwrap_or(usize::MAX);
        return Err(HttpFailure::TooLarge { limit, read });
    }
    let mut body = resp.bytes_stream();
    let mut buf = bytes::BytesMut::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(HttpFailure::Body)?;
        if buf.len() + chunk.len() > limit {
            let read = buf.len() + chunk.len();
            return Err(HttpFailure::TooLarge { limit, read });
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

type SseStream = std::pin::Pin<Box<dyn Stream<Item = Result<sse_stream::Sse, HttpFailure>> + Send>>;

/// The events of `resp`'s body, bounded by `limit` bytes in all. A body
/// error keeps its kind through the event parser.
fn sse_of(resp: reqwest::Response, limit: usize) -> SseStream {
    let mut read = 0usize;
    let bytes = resp.bytes_stream().map(move |chunk| {
        let chunk = chunk.map_err(HttpFailure::Body)?;
        read += chunk.len();
        if read > limit {
            return Err(HttpFailure::TooLarge { limit, read });
        }
        Ok(chunk)
    });
    let events = sse_stream::SseStream::from_bytes_stream(bytes).map(|e| {
        e.map_err(|e| match e {
            sse_stream::Error::Body(b) => match b.downcast::<HttpFailure>() {
                Ok(f) => *f,
                Err(b) => HttpFailure::Protocol(format!("unreadable event stream: {b}")),
            },
            other => HttpFailure::Protocol(format!("unreadable event stream: {other}")),
        })
    });
    Box::pin(events)
}

/// The messages of one request's SSE stream, resumed with `Last-Event-ID`
/// when the backend closes it before answering (SEP-1699 polling).
pub struct Events {
    target: Arc<Target>,
    /// Vigil's id of the request, decoded.
    id: Arc<str>,
    stream: SseStream,
    last_event: Option<String>,
    retry: Option<Duration>,
    resumes: usize,
    answered: bool,
    keep_alive: bool,
    /// Bytes each stream (the first, and each resumption) may carry.
    limit: usize,
}

impl Events {
    fn new(
        target: Arc<Target>,
        id: Arc<str>,
        resp: reqwest::Response,
        keep_alive: bool,
        limit: usize,
    ) -> Self {
        Self {
            target,
            id,
            stream: sse_of(resp, limit),
            last_event: None,
            retry: None,
            resumes: 0,
            answered: false,
            keep_alive,
            limit,
        }
    }

    /// The next message (an event's `data`), `Ok(None)` once the response
    /// came, an error when the stream broke off without it.
    pub async fn next(&mut self) -> Result<Option<String>, HttpFailure> {
        if self.answered {
            return Ok(None);
        }
        loop {
            match self.stream.next().await {
                Some(Ok(event)) => {
                    if let Some(id) = event.id {
                        self.last_event = Some(id);
                    }
                    if let Some(ms) = event.retry {
                        self.retry = Some(Duration::from_millis(ms));
                    }
                    let Some(data) = event.data.filter(|d| !d.trim().is_empty()) else {
                        continue; // a priming event
                    };
                    if answers(&data, &self.id) {
                        self.answered = true;
                    }
                    return Ok(Some(data));
                }
                Some(Err(e)) => return Err(e),
                // Boxed: a resumption is rare, and its future (a wait
                // and a GET) would otherwise widen every call's.
                None => Box::pin(self.resume()).await?,
            }
        }
    }

    /// Opens the stream again after the backend closed it unanswered.
    async fn resume(&mut self) -> Result<(), HttpFailure> {
        let Some(last) = self.last_event.clone() else {
            return Err(HttpFailure::Protocol(
                "the backend closed the stream without answering".into(),
            ));
        };
        if self.resumes >= MAX_RESUMES {
            return Err(HttpFailure::Protocol(format!(
                "the backend closed the stream {MAX_RESUMES} times without answering"
            )));
        }
        self.resumes += 1;
        let wait = self.retry.unwrap_or_default().min(MAX_RETRY_WAIT);
        tracing::debug!(request = %self.id, last_event = %last, ?wait, "the backend closed the call's stream unanswered; resuming");
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let client = super::stream_watch::shared_client(self.keep_alive)?;
        let resp = self
            .target
            .request(client.get(self.target.url.clone()))
            .header(http::header::ACCEPT, "text/event-stream")
            .header("last-event-id", last)
            .send()
            .await
            .map_err(HttpFailure::of_send)?;
        if !resp.status().is_success() {
            return Err(HttpFailure::Status(resp.status()));
        }
        tracing::debug!(request = %self.id, "stream resumed");
        self.stream = sse_of(resp, self.limit);
        Ok(())
    }
}

/// Whether `data` is the response (a result or an error) to `id`: cheap
/// filter first.
fn answers(data: &str, id: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Reply {
        id: Option<rmcp::model::RequestId>,
        result: Option<serde::de::IgnoredAny>,
        error: Option<serde::de::IgnoredAny>,
    }
    if !(data.contains("\"result\"") || data.contains("\"error\"")) || !data.contains(id) {
        return false;
    }
    serde_json::from_str::<Reply>(data).is_ok_and(|r| {
        (r.result.is_some() || r.error.is_some())
            && matches!(r.id, Some(rmcp::model::RequestId::String(s)) if &*s == id)
    })
}
