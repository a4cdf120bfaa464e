//! What a backend writes, kept as it wrote it, for what Vigil relays.
//!
//! rmcp decodes every message into its typed model, which drops members it
//! does not know (a tool's `execution`), reorders what it re-serializes and
//! narrows numbers (`temperature` as `f32`). A gateway must not: what it
//! relays reaches the other side with the same members, member order and
//! numbers. So each connection has a [`Wire`] that sees every message's
//! text *before* rmcp decodes it (stdio: [`WireRead`] under rmcp's line
//! codec; HTTP: the event stream and body readers of `stream_watch`) and
//! keeps two things as JSON (`serde_json` with `preserve_order`):
//!
//! - the **result** of a request sent with [`KeepJson`] in its extensions
//!   (everything Vigil relays: calls, reads, prompts, completions and the
//!   listings whose entries it shows). rmcp is handed an empty result in
//!   its place (no second, typed parse of a large answer) and the caller
//!   takes the JSON with [`Wire::take_answer`]. A result larger than
//!   `limits.max_result_bytes` is kept as [`Answer::TooLarge`], never read
//!   into memory as a value;
//! - the **params** of the requests a backend asks the client
//!   (`sampling/createMessage`, `elicitation/create`, `roots/list`), which
//!   rmcp still decodes to dispatch them; the handler relays these params
//!   instead ([`Wire::take_ask`]);
//! - the **params** of `notifications/progress`, which the relay sends on
//!   with only the token replaced ([`Wire::take_progress`]).
//!
//! Contract: [`Wire::expect`] is called before the request's bytes leave
//! (the transport's `send`), so its answer can never arrive unexpected;
//! every expected id is taken or forgotten by its caller (the guard of
//! [`Wire::expect`] forgets on drop), so the table holds at most the
//! requests in flight. Asks are bounded by [`MAX_ASKS`].

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use rmcp::model::RequestId;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::io::{AsyncRead, ReadBuf};

/// Marks a request whose result is relayed: the transport keeps it as JSON
/// (see the module doc). Put into the request's extensions.
#[derive(Debug, Clone, Copy)]
pub struct KeepJson;

/// The methods a backend asks its client whose params Vigil relays.
pub const RELAYED_ASKS: [&str; 3] = ["sampling/createMessage", "elicitation/create", "roots/list"];

/// How many asks' params are kept waiting for their handler at most (each
/// is taken at once by rmcp's dispatch; this bounds a backend that asks
/// with ids rmcp refuses).
pub const MAX_ASKS: usize = 256;

/// How many progress notifications' params are kept waiting for the relay
/// at most (each is taken as soon as rmcp has decoded it).
pub const MAX_PROGRESS: usize = 1024;

const PROGRESS: &str = "notifications/progress";

/// The longest line read from a stdio backend (rmcp's own bound): a longer
/// one is passed through untouched, for rmcp to refuse.
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// The result of a request sent with [`KeepJson`].
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Not come yet (or it came as an error, which rmcp reports).
    Waiting,
    /// The result as the backend wrote it.
    Got(Value),
    /// A result of this many bytes, over `limits.max_result_bytes`.
    TooLarge(usize),
}

/// One connection's kept JSON; see the module doc.
#[derive(Debug)]
pub struct Wire {
    answers: Mutex<HashMap<RequestId, Answer>>,
    /// Expected answers rmcp decodes too (see [`Wire::expect_decoded`]).
    decoded: Mutex<std::collections::HashSet<RequestId>>,
    asks: Mutex<VecDeque<(RequestId, Value)>>,
    /// Params of progress notifications, in arrival order.
    progress: Mutex<VecDeque<Value>>,
    max_result: usize,
}

/// Forgets an expected answer when the request ends without taking it
/// (cancelled, timed out, failed).
pub struct Expected {
    wire: Arc<Wire>,
    id: RequestId,
}

impl Drop for Expected {
    fn drop(&mut self) {
        lock(&self.wire.answers).remove(&self.id);
        lock(&self.wire.decoded).remove(&self.id);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The members of a message that decide what to keep, borrowed from it.
#[derive(serde::Deserialize)]
struct Peek<'a> {
    #[serde(default)]
    id: Option<RequestId>,
    #[serde(default, borrow)]
    method: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    result: Option<&'a RawValue>,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
}

// === impl Wire ===

impl Wire {
    /// A wire keeping results of at most `max_result` bytes as values.
    pub fn new(max_result: usize) -> Arc<Self> {
        Arc::new(Self {
            answers: Mutex::default(),
            decoded: Mutex::default(),
            asks: Mutex::default(),
            progress: Mutex::default(),
            max_result,
        })
    }

    /// The largest result kept as a value (`limits.max_result_bytes`).
    pub fn max_result(&self) -> usize {
        self.max_result
    }

    /// Expects the result of request `id` (called before it is sent).
    pub fn expect(&self, id: RequestId) {
        lock(&self.answers).insert(id, Answer::Waiting);
    }

    /// [`Wire::expect`], and rmcp gets the result as written too: a
    /// `tools/list` page, whose tools rmcp's HTTP client reads for the
    /// `Mcp-Param-*` headers of later calls (SEP-2243).
    pub fn expect_decoded(&self, id: RequestId) {
        lock(&self.decoded).insert(id.clone());
        self.expect(id);
    }

    /// A guard that forgets `id`'s answer unless it was taken.
    pub fn guard(self: &Arc<Self>, id: RequestId) -> Expected {
        Expected {
            wire: self.clone(),
            id,
        }
    }

    /// The kept result of `id`, taken: `None` if `id` was not expected.
    pub fn take_answer(&self, id: &RequestId) -> Option<Answer> {
        lock(&self.decoded).remove(id);
        lock(&self.answers).remove(id)
    }

    /// The params of the backend's request `id` as it wrote them, taken.
    pub fn take_ask(&self, id: &RequestId) -> Option<Value> {
        let mut asks = lock(&self.asks);
        let at = asks.iter().position(|(i, _)| i == id)?;
        asks.remove(at).map(|(_, v)| v)
    }

    /// The params of the oldest progress notification kept for `token` (as
    /// JSON), taken. Notifications of different requests may be decoded in
    /// another order than they were read (HTTP: one stream per request),
    /// so the token finds them; within one request the order is kept.
    pub fn take_progress(&self, token: &Value) -> Option<Value> {
        let mut kept = lock(&self.progress);
        let at = kept
            .iter()
            .position(|p| p.get("progressToken") == Some(token))?;
        kept.remove(at)
    }

    /// Looks at one incoming message's text before rmcp decodes it. Keeps
    /// what the module doc says; returns the text rmcp gets instead of
    /// `text`, if another.
    pub fn incoming(&self, text: &str) -> Option<String> {
        // Cheap filters first: most messages are neither.
        let answer = !lock(&self.answers).is_empty() && text.contains("\"result\"");
        let method = text.contains("\"method\"");
        let ask = method && RELAYED_ASKS.iter().any(|m| text.contains(m));
        let progress = method && text.contains(PROGRESS);
        if !(answer || ask || progress) {
            return None;
        }
        let peek: Peek<'_> = serde_json::from_str(text).ok()?;
        if peek.id.is_none() && peek.method.as_deref() == Some(PROGRESS) {
            let params = serde_json::from_str(peek.params?.get()).ok()?;
            let mut kept = lock(&self.progress);
            if kept.len() >= MAX_PROGRESS {
                kept.pop_front();
            }
            kept.push_back(params);
            return None;
        }
        let id = peek.id?;
        match (peek.method, peek.result) {
            (None, Some(result)) => {
                let mut answers = lock(&self.answers);
                let slot = answers.get_mut(&id)?;
                let raw = result.get();
                let too_large = raw.len() > self.max_result;
                *slot = if too_large {
                    Answer::TooLarge(raw.len())
                } else {
                    match serde_json::from_str(raw) {
                        Ok(v) => Answer::Got(v),
                        Err(_) => return None,
                    }
                };
                drop(answers);
                if !too_large && lock(&self.decoded).contains(&id) {
                    return None;
                }
                let id = serde_json::to_string(&id).ok()?;
                Some(format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#))
            }
            (Some(method), None) if RELAYED_ASKS.contains(&&*method) => {
                let params = match peek.params {
                    Some(p) => serde_json::from_str(p.get()).ok()?,
                    None => Value::Null,
                };
                let mut asks = lock(&self.asks);
                if asks.len() >= MAX_ASKS {
                    asks.pop_front();
                }
                asks.push_back((id, params));
                None
            }
            _ => None,
        }
    }
}

// === impl WireRead ===

/// A stdio backend's output as rmcp's line codec reads it, each whole line
/// shown to the [`Wire`] first (and replaced where it says). Lines over
/// [`MAX_LINE`] pass through untouched.
pub struct WireRead<R> {
    inner: R,
    wire: Arc<Wire>,
    /// The line being read.
    line: BytesMut,
    /// Bytes ready for rmcp.
    out: Bytes,
    /// Passing an overlong line through until its end.
    passing: bool,
    eof: bool,
}

impl<R> WireRead<R> {
    pub fn new(inner: R, wire: Arc<Wire>) -> Self {
        Self {
            inner,
            wire,
            line: BytesMut::new(),
            out: Bytes::new(),
            passing: false,
            eof: false,
        }
    }

    /// Hands on what is in `line` (a whole line, or the end of the stream).
    fn finish_line(&mut self) {
        let line = self.line.split().freeze();
        let text = std::str::from_utf8(&line).ok().map(|t| t.trim_end());
        self.out = match text.and_then(|t| self.wire.incoming(t)) {
            Some(mut replaced) => {
                replaced.push('\n');
                Bytes::from(replaced)
            }
            None => line,
        };
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for WireRead<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.out.is_empty() {
                let n = this.out.len().min(buf.remaining());
                buf.put_slice(&this.out.split_to(n));
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 8192];
            let mut read = ReadBuf::new(&mut chunk);
            match Pin::new(&mut this.inner).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {}
            }
            let got = read.filled();
            if got.is_empty() {
                this.eof = true;
                if !this.line.is_empty() && !this.passing {
                    this.finish_line();
                } else {
                    this.out = this.line.split().freeze();
                }
                continue;
            }
            this.take(got);
        }
    }
}

impl<R> WireRead<R> {
    /// Splits `got` into lines: whole ones are finished, the rest waits.
    fn take(&mut self, mut got: &[u8]) {
        let mut out = BytesMut::new();
        while !got.is_empty() {
            let end = memchr::memchr(b'\n', got);
            let (part, rest) = match end {
                Some(i) => got.split_at(i + 1),
                None => (got, &[][..]),
            };
            got = rest;
            if self.passing {
                out.extend_from_slice(part);
                self.passing = end.is_none();
                continue;
            }
            self.line.extend_from_slice(part);
            if end.is_some() {
                self.finish_line();
                out.extend_from_slice(&std::mem::take(&mut self.out));
            } else if self.line.len() > MAX_LINE {
                out.extend_from_slice(&self.line.split());
                self.passing = true;
            }
        }
        self.out = out.freeze();
    }
}

#[cfg(test)]
mod tests;
