//! The POST of a request whose result Vigil relays (`KeepJson`, see
//! `wire.rs`), made here instead of by rmcp's HTTP client.
//!
//! rmcp's reqwest client decodes a JSON response body itself, so the wire
//! never sees its text and a backend that answers `application/json` (a
//! server in JSON-response mode) would have its results decoded into typed
//! messages and written again (members dropped, numbers narrowed). This
//! POST reads the body as text and shows it to the wire first, like the
//! events of a streamed answer. Everything else follows rmcp's client: the
//! same headers, the same outcomes for each status (a session the backend
//! forgot, a challenge, 429 and 5xx with `Retry-After`, a JSON-RPC error in
//! an error body), the same limits.

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use http::header::{ACCEPT, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use http::{HeaderName, HeaderValue, StatusCode};
use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, HttpStatusError, InsufficientScopeError, SseError, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use sse_stream::{Sse, SseStream};

use super::wire::Wire;

type Error = StreamableHttpError<reqwest::Error>;
type Headers = std::collections::HashMap<HeaderName, HeaderValue>;

const SESSION_ID: &str = "mcp-session-id";
const EVENT_STREAM: &str = "text/event-stream";
const JSON: &str = "application/json";
/// The longest `Retry-After` kept (rmcp's bound).
const MAX_RETRY_AFTER: usize = 128;

/// Sends `message` (a request) and returns rmcp's view of the response,
/// with a JSON body's text shown to `wire` before it is decoded.
#[allow(clippy::too_many_arguments)] // the trait method's arguments, passed on
pub async fn post(
    client: &reqwest::Client,
    wire: &Arc<Wire>,
    uri: &str,
    message: &ClientJsonRpcMessage,
    session_id: Option<Arc<str>>,
    auth: Option<String>,
    headers: Headers,
    limits: StreamableHttpResponseLimits,
) -> Result<StreamableHttpPostResponse, Error> {
    let mut request = client
        .post(uri)
        .header(ACCEPT, format!("{EVENT_STREAM}, {JSON}"));
    if let Some(auth) = auth {
        request = request.bearer_auth(auth);
    }
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let with_session = session_id.is_some();
    if let Some(id) = session_id {
        request = request.header(SESSION_ID, id.as_ref());
    }
    let response = request
        .json(message)
        .send()
        .await
        .map_err(StreamableHttpError::Client)?;
    let status = response.status();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
            .map(str::to_owned)
    };
    if let Some(challenge) = header(WWW_AUTHENTICATE.as_str()) {
        if status == StatusCode::UNAUTHORIZED {
            return Err(StreamableHttpError::AuthRequired(AuthRequiredError::new(
                challenge,
            )));
        }
        if status == StatusCode::FORBIDDEN {
            let scope = scope_of(&challenge);
            return Err(StreamableHttpError::InsufficientScope(
                InsufficientScopeError::new(challenge, scope),
            ));
        }
    }
    if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
        return Ok(StreamableHttpPostResponse::Accepted);
    }
    if status == StatusCode::NOT_FOUND && with_session {
        return Err(StreamableHttpError::SessionExpired);
    }
    let content_type = header(CONTENT_TYPE.as_str());
    let is = |mime: &str| {
        content_type.as_deref().is_some_and(|ct| {
            ct.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case(mime)
        })
    };
    let (json, sse) = (is(JSON), is(EVENT_STREAM));
    let session = header(SESSION_ID);
    if !status.is_success() {
        let retry_after = header(RETRY_AFTER.as_str()).filter(|v| v.len() <= MAX_RETRY_AFTER);
        let http_status = (status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error())
            .then(|| HttpStatusError::new(status.as_u16(), retry_after));
        if json && status != StatusCode::TOO_MANY_REQUESTS {
            let body = read(response.bytes_stream(), limits.max_json_response_size).await;
            if let Ok(body) = &body
                && let Ok(m @ JsonRpcMessage::Error(_)) =
                    serde_json::from_slice::<ServerJsonRpcMessage>(body)
            {
                return Ok(StreamableHttpPostResponse::Json(m, session));
            }
            if let Some(e) = http_status {
                return Err(e.into());
            }
            let body = body.unwrap_or_default();
            return Err(unexpected(status, &body, limits.max_error_response_size));
        }
        if let Some(e) = http_status {
            return Err(e.into());
        }
        let body = read(response.bytes_stream(), limits.max_error_response_size)
            .await
            .unwrap_or_default();
        return Err(unexpected(status, &body, limits.max_error_response_size));
    }
    if sse {
        let events = bounded(response.bytes_stream(), limits.max_sse_event_size);
        return Ok(StreamableHttpPostResponse::Sse(events, session));
    }
    if !json {
        return Err(StreamableHttpError::UnexpectedContentType(content_type));
    }
    let body = read(response.bytes_stream(), limits.max_json_response_size).await?;
    let text = String::from_utf8(body.to_vec()).map_err(|e| {
        StreamableHttpError::UnexpectedServerResponse(Cow::Owned(format!(
            "the response body is not UTF-8: {e}"
        )))
    })?;
    if let Some(events) = several_messages(&text) {
        return Ok(StreamableHttpPostResponse::Sse(events, session));
    }
    let text = wire.incoming(&text).unwrap_or(text);
    let parsed = serde_json::from_str::<ServerJsonRpcMessage>(&text)?;
    Ok(StreamableHttpPostResponse::Json(parsed, session))
}

/// A JSON body of more than one message, one after another (the
/// conformance suite's reference server writes a call's progress and its
/// result so), as the events of a stream: each reaches the wire and rmcp
/// as a streamed message would. `None` for one message (or none readable).
fn several_messages(text: &str) -> Option<BoxStream<'static, Result<Sse, SseError>>> {
    let messages: Vec<Box<serde_json::value::RawValue>> = serde_json::Deserializer::from_str(text)
        .into_iter()
        .collect::<Result<_, _>>()
        .ok()?;
    if messages.len() < 2 {
        return None;
    }
    let events = messages
        .into_iter()
        .map(|m| Ok(Sse::default().data(m.get())));
    Some(futures::stream::iter(events).boxed())
}

/// The `scope` a `WWW-Authenticate` challenge asks for, quoted or not.
fn scope_of(challenge: &str) -> Option<String> {
    let lower = challenge.to_ascii_lowercase();
    let at = lower.find("scope=")? + "scope=".len();
    let rest = &challenge[at..];
    let value = match rest.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next()?,
        None => rest.split([',', ' ']).next()?,
    };
    (!value.is_empty()).then(|| value.to_owned())
}

fn unexpected(status: StatusCode, body: &[u8], limit: usize) -> Error {
    let shown = String::from_utf8_lossy(&body[..body.len().min(limit)]).into_owned();
    StreamableHttpError::UnexpectedServerResponse(Cow::Owned(format!("HTTP {status}: {shown}")))
}

/// The whole body, refused beyond `limit` bytes without reading further.
async fn read(
    mut body: impl Stream<Item = reqwest::Result<Bytes>> + Unpin,
    limit: usize,
) -> Result<Bytes, Error> {
    let mut out = bytes::BytesMut::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(StreamableHttpError::Client)?;
        if out.len() + chunk.len() > limit {
            return Err(StreamableHttpError::ResponseBodyTooLarge { max_size: limit });
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out.freeze())
}

/// The events of `body`, failing on one event over `limit` bytes before
/// it is buffered whole (a blank line ends an event).
fn bounded(
    body: impl Stream<Item = reqwest::Result<Bytes>> + Send + 'static,
    limit: usize,
) -> BoxStream<'static, Result<Sse, SseError>> {
    let mut pending = 0usize;
    let mut newline = false;
    let guarded = body.map(move |chunk| {
        let chunk = chunk.map_err(|e| std::io::Error::other(e.to_string()))?;
        for &b in chunk.iter() {
            match b {
                b'\r' => {}
                b'\n' => {
                    if newline {
                        pending = 0;
                    }
                    newline = true;
                }
                _ => {
                    newline = false;
                    pending += 1;
                }
            }
            if pending > limit {
                return Err(std::io::Error::other(format!(
                    "an event of the backend's stream exceeds {limit} bytes"
                )));
            }
        }
        Ok(chunk)
    });
    SseStream::from_byte_stream(guarded).boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_of_several_messages_is_read_as_their_events() {
        let one = r#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
        assert!(several_messages(one).is_none());
        let two = format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{{\"progressToken\":\"t\",\"progress\":1}}}}\n{one}\n"
        );
        let events: Vec<String> = futures::executor::block_on(
            several_messages(&two)
                .expect("two messages")
                .map(|e| e.expect("an event").data.unwrap_or_default())
                .collect(),
        );
        assert_eq!(events.len(), 2);
        assert!(events[0].contains("notifications/progress"));
        assert_eq!(events[1], one);
        assert!(several_messages("{\"a\":1} not json").is_none());
    }

    #[test]
    fn the_scope_of_a_challenge_is_read_quoted_or_not() {
        assert_eq!(
            scope_of(r#"Bearer error="insufficient_scope", scope="files:read files:write""#),
            Some("files:read files:write".into())
        );
        assert_eq!(
            scope_of("Bearer scope=read:data, realm=x"),
            Some("read:data".into())
        );
        assert_eq!(scope_of("Bearer realm=x"), None);
    }

    #[tokio::test]
    async fn events_over_the_limit_fail_and_smaller_ones_pass() {
        let ok: Vec<reqwest::Result<Bytes>> = vec![
            Ok(Bytes::from_static(b"data: 0123456789\n\ndata: ab")),
            Ok(Bytes::from_static(b"cdef\r\n\r\n")),
        ];
        let events: Vec<_> = bounded(futures::stream::iter(ok), 16).collect().await;
        let data: Vec<_> = events
            .into_iter()
            .map(|e| e.expect("within the limit").data)
            .collect();
        assert_eq!(data, vec![Some("0123456789".into()), Some("abcdef".into())]);

        let big: Vec<reqwest::Result<Bytes>> = vec![Ok(Bytes::from_static(b"data: 0123456789"))];
        let mut events = bounded(futures::stream::iter(big), 8);
        assert!(events.next().await.expect("an item").is_err());
    }
}
