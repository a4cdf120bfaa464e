//! How an answer of rmcp's HTTP service leaves `/mcp`: each message with
//! its relayed JSON in place (`relayed.rs`), and as `application/json`
//! when JSON will do.
//!
//! rmcp answers every request of a session with an SSE stream (its JSON
//! mode works only without sessions). A client that accepts JSON gets JSON
//! here when the first message of the answer is the response itself:
//! nothing (no progress, log message or server→client request) came
//! before it, so a stream adds nothing but a limit (the Python SDK 2.x
//! caps one event at 1 MiB, and no JSON body). The choice is made when the
//! first message is ready; only what precedes it (priming events, keep-
//! alive comments) is held until then, never the call.
//!
//! Contract: every event and JSON body of `/mcp` passes
//! [`Answers::substitute`](super::relayed::Answers::substitute), the one
//! place a placeholder becomes its answer on the HTTP front.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};

use super::Gateway;

/// The largest JSON body of rmcp's read back here to put answers in place.
const MAX_JSON_BODY: usize = 64 * 1024 * 1024;

/// The middleware; see the module doc.
pub async fn layer(State(gw): State<Arc<Gateway>>, req: Request, next: Next) -> Response {
    let post = req.method() == http::Method::POST;
    let accepts_json = req
        .headers()
        .get_all(http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/json") || v.contains("*/*"));
    let response = next.run(req).await;
    let content_type = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if content_type.starts_with("application/json") {
        return json_in_place(&gw, response).await;
    }
    if !content_type.starts_with("text/event-stream") {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let mut events = Events::new(body.into_data_stream(), gw.clone());
    if !(post && accepts_json) {
        return Response::from_parts(parts, Body::from_stream(events.into_stream(Vec::new())));
    }
    // Hold what precedes the first message; decide on that message.
    let mut held = Vec::new();
    loop {
        match events.next_event().await {
            Some(Ok(event)) => match event.message() {
                Some(data) if is_response(data) => {
                    let data = Bytes::copy_from_slice(data.as_bytes());
                    parts.headers.remove(http::header::CONTENT_LENGTH);
                    parts.headers.remove(http::header::CACHE_CONTROL);
                    parts.headers.insert(
                        http::header::CONTENT_TYPE,
                        http::HeaderValue::from_static("application/json"),
                    );
                    return Response::from_parts(parts, Body::from(data));
                }
                Some(_) => {
                    held.push(Ok(event.bytes()));
                    break;
                }
                None => held.push(Ok(event.bytes())),
            },
            Some(Err(e)) => {
                held.push(Err(e));
                break;
            }
            None => break,
        }
    }
    Response::from_parts(parts, Body::from_stream(events.into_stream(held)))
}

/// A JSON body of rmcp's with its answer in place.
async fn json_in_place(gw: &Gateway, response: Response) -> Response {
    let (parts, body) = response.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_JSON_BODY).await {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(error = %e, "an answer could not be read back to relay it");
            return http::StatusCode::INTERNAL_SERVER_ERROR.into_response();
        }
    };
    let replaced = std::str::from_utf8(&bytes)
        .ok()
        .and_then(|t| gw.answers().substitute(t));
    let mut parts = parts;
    match replaced {
        Some(text) => {
            parts.headers.remove(http::header::CONTENT_LENGTH);
            Response::from_parts(parts, Body::from(text))
        }
        None => Response::from_parts(parts, Body::from(bytes)),
    }
}

/// Whether `data` (one message) is a response: a result or an error, not
/// a request or a notification.
fn is_response(data: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Peek {
        method: Option<serde::de::IgnoredAny>,
        result: Option<serde::de::IgnoredAny>,
        error: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_str::<Peek>(data)
        .is_ok_and(|p| p.method.is_none() && (p.result.is_some() || p.error.is_some()))
}

/// One SSE event as rmcp wrote it (its lines, without the blank line that
/// ends it), with its data replaced where an answer is kept for it.
struct Event {
    lines: Vec<String>,
    /// The joined `data` of the event, when it has some.
    data: Option<String>,
}

impl Event {
    fn parse(block: &str, gw: &Gateway) -> Event {
        let mut lines = Vec::new();
        let mut data: Option<String> = None;
        for line in block.lines() {
            if let Some(d) = line.strip_prefix("data:") {
                let d = d.strip_prefix(' ').unwrap_or(d);
                match &mut data {
                    Some(all) => {
                        all.push('\n');
                        all.push_str(d);
                    }
                    None => data = Some(d.to_owned()),
                }
            } else {
                lines.push(line.to_owned());
            }
        }
        if let Some(replaced) = data.as_deref().and_then(|d| gw.answers().substitute(d)) {
            data = Some(replaced);
        }
        Event { lines, data }
    }

    /// The message it carries, if any (not a priming event or comment).
    fn message(&self) -> Option<&str> {
        self.data.as_deref().filter(|d| !d.trim().is_empty())
    }

    fn bytes(&self) -> Bytes {
        let mut out = String::new();
        for line in &self.lines {
            out.push_str(line);
            out.push('\n');
        }
        if let Some(data) = &self.data {
            for line in data.split('\n') {
                out.push_str("data: ");
                out.push_str(line);
                out.push('\n');
            }
        }
        out.push('\n');
        Bytes::from(out)
    }
}

type Chunks = std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, axum::Error>> + Send>>;

/// The events of an SSE body, split at blank lines.
struct Events {
    body: Chunks,
    buf: BytesMut,
    gw: Arc<Gateway>,
}

impl Events {
    fn new(
        body: impl Stream<Item = Result<Bytes, axum::Error>> + Send + 'static,
        gw: Arc<Gateway>,
    ) -> Self {
        Events {
            body: Box::pin(body),
            buf: BytesMut::new(),
            gw,
        }
    }

    /// The next whole event; what is left at the end of the body is one too.
    async fn next_event(&mut self) -> Option<Result<Event, axum::Error>> {
        loop {
            if let Some((end, next)) = find_blank_line(&self.buf) {
                let block = self.buf.split_to(end);
                let _ = self.buf.split_to(next - end);
                let text = String::from_utf8_lossy(&block);
                return Some(Ok(Event::parse(&text, &self.gw)));
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.buf.extend_from_slice(&chunk),
                Some(Err(e)) => return Some(Err(e)),
                None if self.buf.is_empty() => return None,
                None => {
                    let block = self.buf.split();
                    let text = String::from_utf8_lossy(&block);
                    return Some(Ok(Event::parse(&text, &self.gw)));
                }
            }
        }
    }

    /// `first`, then every further event with its answer in place.
    fn into_stream(
        self,
        first: Vec<Result<Bytes, axum::Error>>,
    ) -> impl Stream<Item = Result<Bytes, axum::Error>> + Send + 'static {
        let rest = futures::stream::unfold(self, |mut events| async move {
            let next = events.next_event().await?;
            Some((next.map(|e| e.bytes()), events))
        });
        futures::stream::iter(first).chain(rest)
    }
}

/// Where the first blank line of `buf` starts, and where the event after
/// it starts.
fn find_blank_line(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = memchr::memmem::find(buf, b"\n\n").map(|i| (i, i + 2));
    let crlf = memchr::memmem::find(buf, b"\r\n\r\n").map(|i| (i, i + 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_are_told_from_requests_and_notifications() {
        assert!(is_response(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#));
        assert!(is_response(
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m"}}"#
        ));
        assert!(!is_response(
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"result":1}}"#
        ));
        assert!(!is_response(
            r#"{"jsonrpc":"2.0","id":3,"method":"sampling/createMessage","params":{}}"#
        ));
        assert!(!is_response(""));
    }

    #[test]
    fn blank_lines_end_events() {
        assert_eq!(find_blank_line(b"data: a\n\ndata: b"), Some((7, 9)));
        assert_eq!(find_blank_line(b"data: a\r\n\r\n"), Some((7, 11)));
        assert_eq!(find_blank_line(b"data: a\n"), None);
    }
}
