//! Just enough HTTP/1.1 for the lean pair: message heads parsed with
//! `httparse`, bodies delimited by `Content-Length`, chunked transfer coding
//! or the end of the connection, over one keep-alive [`TcpStream`].
//!
//! Why not hyper: the lean pair exists to cost (nearly) nothing next to
//! Vigil, and a request/response on a held connection needs no more than
//! this. Contract: one message at a time per connection (no pipelining
//! from the writer's side; bytes of a next message that arrive early stay
//! buffered for it), heads up to [`MAX_HEAD`] bytes, no `Expect`, no
//! upgrades. The decoding of framings is pure ([`BodyDecoder::decode`]) so
//! it is tested without sockets.

use std::fmt;

use anyhow::{Context as _, bail};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// Largest request or response head (start line and headers) accepted.
pub const MAX_HEAD: usize = 16 * 1024;
/// Most headers in one head.
const MAX_HEADERS: usize = 64;
/// Longest chunk-size or trailer line.
const MAX_LINE: usize = 4096;

/// A framing error: the peer did not speak HTTP/1.1 as this module reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed HTTP: {}", self.0)
    }
}

impl std::error::Error for Malformed {}

/// The HTTP method of a request, as far as the lean backend tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Delete,
    Other,
}

/// What a request head says, reduced to what the lean backend needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    pub method: Method,
    /// The request target, e.g. `/mcp` or `/mcp?x=1`.
    pub target: String,
    /// `Mcp-Session-Id`, if sent.
    pub session_id: Option<String>,
    /// The 2026-07-28 request headers, if sent: `MCP-Protocol-Version`,
    /// `Mcp-Method`, `Mcp-Name`.
    pub mcp: McpHeaders,
    /// How the body is delimited (a request without either header has none).
    pub framing: Framing,
    /// The connection ends after the answer (`Connection: close`, or
    /// HTTP/1.0 without `Connection: keep-alive`).
    pub close: bool,
}

/// What a response head says, reduced to what the lean client needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    pub status: u16,
    /// The media type of `Content-Type`, lower-cased, without parameters.
    pub media_type: Option<String>,
    /// `Mcp-Session-Id`, if sent.
    pub session_id: Option<String>,
    pub framing: Framing,
    /// The server closes the connection after this response.
    pub close: bool,
}

/// The MCP headers of a request besides `Mcp-Session-Id` (2026-07-28
/// requests carry all three; a handshake-era session's carry the first).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct McpHeaders {
    /// `MCP-Protocol-Version`.
    pub protocol_version: Option<String>,
    /// `Mcp-Method`.
    pub method: Option<String>,
    /// `Mcp-Name`.
    pub name: Option<String>,
}

/// How a message's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `Content-Length` bytes (0: no body).
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the peer closes the connection (a response with neither header).
    UntilClose,
}

/// The headers both kinds of head care about.
struct Common {
    session_id: Option<String>,
    content_length: Option<u64>,
    chunked: bool,
    connection_close: bool,
    connection_keep_alive: bool,
    media_type: Option<String>,
    mcp: McpHeaders,
}

fn common(headers: &[httparse::Header<'_>]) -> Result<Common, Malformed> {
    let mut c = Common {
        session_id: None,
        content_length: None,
        chunked: false,
        connection_close: false,
        connection_keep_alive: false,
        media_type: None,
        mcp: McpHeaders::default(),
    };
    let text = |name: &'static str, value: &[u8]| {
        std::str::from_utf8(value)
            .map(|v| v.trim().to_owned())
            .map_err(|_| Malformed(name))
    };
    for h in headers {
        let value = h.value;
        if h.name.eq_ignore_ascii_case("content-length") {
            let text = std::str::from_utf8(value).map_err(|_| Malformed("content-length"))?;
            let n: u64 = text
                .trim()
                .parse()
                .map_err(|_| Malformed("content-length"))?;
            if c.content_length.is_some_and(|m| m != n) {
                return Err(Malformed("conflicting content-length"));
            }
            c.content_length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            // The last coding decides whether the body is chunked.
            let last = value
                .rsplit(|&b| b == b',')
                .next()
                .map(trim)
                .unwrap_or_default();
            c.chunked = last.eq_ignore_ascii_case(b"chunked");
            if !c.chunked {
                return Err(Malformed("transfer coding other than chunked"));
            }
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in value.split(|&b| b == b',').map(trim) {
                c.connection_close |= token.eq_ignore_ascii_case(b"close");
                c.connection_keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if h.name.eq_ignore_ascii_case("mcp-session-id") {
            c.session_id = Some(text("mcp-session-id", value)?);
        } else if h.name.eq_ignore_ascii_case("mcp-protocol-version") {
            c.mcp.protocol_version = Some(text("mcp-protocol-version", value)?);
        } else if h.name.eq_ignore_ascii_case("mcp-method") {
            c.mcp.method = Some(text("mcp-method", value)?);
        } else if h.name.eq_ignore_ascii_case("mcp-name") {
            c.mcp.name = Some(text("mcp-name", value)?);
        } else if h.name.eq_ignore_ascii_case("content-type") {
            let mt = value.split(|&b| b == b';').next().map(trim).unwrap_or(b"");
            c.media_type = Some(String::from_utf8_lossy(mt).to_ascii_lowercase());
        }
    }
    Ok(c)
}

fn trim(s: &[u8]) -> &[u8] {
    let start = s
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &s[start..end]
}

/// Parses a request head at the start of `buf`: `Ok(None)` if it is not
/// complete yet, else the head and its length in bytes.
pub fn parse_request(buf: &[u8]) -> Result<Option<(RequestHead, usize)>, Malformed> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(Malformed("request head")),
    };
    let c = common(req.headers)?;
    let method = match req.method.unwrap_or("") {
        "GET" => Method::Get,
        "POST" => Method::Post,
        "DELETE" => Method::Delete,
        _ => Method::Other,
    };
    let http10 = req.version == Some(0);
    let framing = if c.chunked {
        Framing::Chunked
    } else {
        Framing::Length(c.content_length.unwrap_or(0))
    };
    Ok(Some((
        RequestHead {
            method,
            target: req.path.unwrap_or("").to_owned(),
            session_id: c.session_id,
            mcp: c.mcp,
            framing,
            close: c.connection_close || (http10 && !c.connection_keep_alive),
        },
        len,
    )))
}

/// Parses a response head at the start of `buf`: `Ok(None)` if it is not
/// complete yet, else the head and its length in bytes.
pub fn parse_response(buf: &[u8]) -> Result<Option<(ResponseHead, usize)>, Malformed> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut res = httparse::Response::new(&mut headers);
    let len = match res.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(Malformed("response head")),
    };
    let c = common(res.headers)?;
    let status = res.code.unwrap_or(0);
    let http10 = res.version == Some(0);
    // RFC 9112 §6.3: these never have a body, whatever the headers say.
    let bodiless = (100..200).contains(&status) || status == 204 || status == 304;
    let framing = if bodiless {
        Framing::Length(0)
    } else if c.chunked {
        Framing::Chunked
    } else if let Some(n) = c.content_length {
        Framing::Length(n)
    } else {
        Framing::UntilClose
    };
    Ok(Some((
        ResponseHead {
            status,
            media_type: c.media_type,
            session_id: c.session_id,
            close: c.connection_close
                || (http10 && !c.connection_keep_alive)
                || framing == Framing::UntilClose,
            framing,
        },
        len,
    )))
}

/// Where a chunked body's decoding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// Expecting a chunk-size line.
    Size,
    /// This many data bytes of the current chunk to go.
    Data(u64),
    /// Expecting the CRLF after a chunk's data.
    DataEnd,
    /// After the last chunk: trailer lines until an empty one.
    Trailer,
}

/// Decodes one body incrementally, whatever its [`Framing`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyDecoder {
    state: State,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Length(u64),
    Chunked(Chunk),
    UntilClose,
    Done,
}

impl BodyDecoder {
    pub fn new(framing: Framing) -> Self {
        let state = match framing {
            Framing::Length(0) => State::Done,
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => State::Chunked(Chunk::Size),
            Framing::UntilClose => State::UntilClose,
        };
        Self { state }
    }

    /// The whole body has been decoded.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Called when the peer closed the connection: fine for a body that
    /// runs until the close, an error for any other unfinished one.
    pub fn at_eof(&mut self) -> Result<(), Malformed> {
        match self.state {
            State::UntilClose | State::Done => {
                self.state = State::Done;
                Ok(())
            }
            _ => Err(Malformed("connection closed inside a body")),
        }
    }

    /// Decodes from `input`, appending body bytes to `out`; returns how many
    /// bytes of `input` it consumed. It stops at the end of the body
    /// (leaving whatever follows) or where `input` ends; an incomplete
    /// chunk-size or trailer line is left unconsumed, to be offered again
    /// with more bytes behind it.
    pub fn decode(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, Malformed> {
        match &mut self.state {
            State::Done => Ok(0),
            State::UntilClose => {
                out.extend_from_slice(input);
                Ok(input.len())
            }
            State::Length(rem) => {
                let n = (*rem).min(input.len() as u64) as usize;
                out.extend_from_slice(&input[..n]);
                *rem -= n as u64;
                if *rem == 0 {
                    self.state = State::Done;
                }
                Ok(n)
            }
            State::Chunked(chunk) => {
                let (used, done) = decode_chunked(chunk, input, out)?;
                if done {
                    self.state = State::Done;
                }
                Ok(used)
            }
        }
    }
}

/// The next line of `input` (without its CR LF or LF) and the bytes up to
/// and including its end; `None` if `input` holds no complete line.
fn line(input: &[u8]) -> Result<Option<(&[u8], usize)>, Malformed> {
    match input.iter().position(|&b| b == b'\n') {
        Some(nl) => {
            let l = &input[..nl];
            Ok(Some((l.strip_suffix(b"\r").unwrap_or(l), nl + 1)))
        }
        None if input.len() > MAX_LINE => Err(Malformed("line too long")),
        None => Ok(None),
    }
}

/// Chunked decoding; returns (bytes consumed, body finished).
fn decode_chunked(
    state: &mut Chunk,
    input: &[u8],
    out: &mut Vec<u8>,
) -> Result<(usize, bool), Malformed> {
    let mut i = 0;
    loop {
        let rest = &input[i..];
        match *state {
            Chunk::Size => {
                let Some((l, used)) = line(rest)? else {
                    return Ok((i, false));
                };
                let hex = trim(l.split(|&b| b == b';').next().unwrap_or(b""));
                if hex.is_empty() || hex.len() > 15 {
                    return Err(Malformed("chunk size"));
                }
                let mut size: u64 = 0;
                for &b in hex {
                    let d = (b as char).to_digit(16).ok_or(Malformed("chunk size"))?;
                    size = size * 16 + u64::from(d);
                }
                i += used;
                *state = if size == 0 {
                    Chunk::Trailer
                } else {
                    Chunk::Data(size)
                };
            }
            Chunk::Data(rem) => {
                if rest.is_empty() {
                    return Ok((i, false));
                }
                let n = rem.min(rest.len() as u64) as usize;
                out.extend_from_slice(&rest[..n]);
                i += n;
                *state = if rem == n as u64 {
                    Chunk::DataEnd
                } else {
                    Chunk::Data(rem - n as u64)
                };
            }
            Chunk::DataEnd => match rest {
                [] | [b'\r'] => return Ok((i, false)),
                [b'\r', b'\n', ..] => {
                    i += 2;
                    *state = Chunk::Size;
                }
                [b'\n', ..] => {
                    i += 1;
                    *state = Chunk::Size;
                }
                _ => return Err(Malformed("no CRLF after chunk data")),
            },
            Chunk::Trailer => {
                let Some((l, used)) = line(rest)? else {
                    return Ok((i, false));
                };
                i += used;
                if l.is_empty() {
                    return Ok((i, true));
                }
            }
        }
    }
}

/// One HTTP/1.1 connection with its read buffer.
pub struct Conn {
    stream: TcpStream,
    /// Bytes read; `buf[pos..]` are not consumed yet.
    buf: Vec<u8>,
    pos: usize,
}

impl Conn {
    /// Wraps a connected stream, with `TCP_NODELAY` (a message is written
    /// whole, so Nagle's algorithm could only add a delayed-ACK wait).
    pub fn new(stream: TcpStream) -> Self {
        let _ = stream.set_nodelay(true);
        Self {
            stream,
            buf: Vec::with_capacity(16 * 1024),
            pos: 0,
        }
    }

    /// Reads more bytes into the buffer; `false` at the end of the stream.
    async fn fill(&mut self) -> std::io::Result<bool> {
        if self.pos > 0 && self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos > self.buf.capacity() / 2 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        if self.buf.capacity() - self.buf.len() < 4096 {
            self.buf.reserve(16 * 1024);
        }
        Ok(self.stream.read_buf(&mut self.buf).await? > 0)
    }

    /// Bytes received but not consumed.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Reads the next request head; `Ok(None)` if the peer closed the
    /// connection before sending a byte of one.
    pub async fn read_request(&mut self) -> anyhow::Result<Option<RequestHead>> {
        loop {
            if let Some((head, len)) = parse_request(&self.buf[self.pos..])? {
                self.pos += len;
                return Ok(Some(head));
            }
            if self.buffered() > MAX_HEAD {
                bail!(Malformed("request head too large"));
            }
            if !self.fill().await? {
                if self.buffered() == 0 {
                    return Ok(None);
                }
                bail!("connection closed inside a request head");
            }
        }
    }

    /// Reads the next response head (skipping interim 1xx responses).
    pub async fn read_response_head(&mut self) -> anyhow::Result<ResponseHead> {
        loop {
            if let Some((head, len)) = parse_response(&self.buf[self.pos..])? {
                self.pos += len;
                if (100..200).contains(&head.status) {
                    continue;
                }
                return Ok(head);
            }
            if self.buffered() > MAX_HEAD {
                bail!(Malformed("response head too large"));
            }
            if !self.fill().await? {
                bail!("connection closed before a response head");
            }
        }
    }

    /// Appends the body bytes that are at hand (reading once from the
    /// socket when none are) to `out`. Returns `false` once the body is
    /// complete; `out` may have grown either way.
    pub async fn read_body_some(
        &mut self,
        body: &mut BodyDecoder,
        out: &mut Vec<u8>,
    ) -> anyhow::Result<bool> {
        loop {
            let before = out.len();
            let used = body.decode(&self.buf[self.pos..], out)?;
            self.pos += used;
            if body.is_done() {
                return Ok(false);
            }
            if out.len() > before {
                return Ok(true);
            }
            if !self.fill().await? {
                body.at_eof()?;
                return Ok(false);
            }
        }
    }

    /// Reads the whole body into `out`, failing past `limit` bytes.
    pub async fn read_body(
        &mut self,
        body: &mut BodyDecoder,
        out: &mut Vec<u8>,
        limit: usize,
    ) -> anyhow::Result<()> {
        while self.read_body_some(body, out).await? {
            if out.len() > limit {
                bail!("body larger than {limit} bytes");
            }
        }
        if out.len() > limit {
            bail!("body larger than {limit} bytes");
        }
        Ok(())
    }

    /// Writes `bytes` whole (one message: head and body together).
    pub async fn write_all(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        self.stream
            .write_all(bytes)
            .await
            .context("cannot write to the connection")
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt;

    use super::*;

    fn decode_all(framing: Framing, input: &[u8]) -> (Vec<u8>, usize, bool) {
        let mut d = BodyDecoder::new(framing);
        let mut out = Vec::new();
        let used = d.decode(input, &mut out).unwrap();
        (out, used, d.is_done())
    }

    /// Feeds `input` in pieces of `step` bytes, re-offering what a call
    /// left unconsumed, as [`Conn`] does.
    fn decode_in_steps(framing: Framing, input: &[u8], step: usize) -> (Vec<u8>, usize) {
        let mut d = BodyDecoder::new(framing);
        let mut out = Vec::new();
        let (mut pos, mut avail) = (0, 0);
        while !d.is_done() && avail < input.len() {
            avail = (avail + step).min(input.len());
            pos += d.decode(&input[pos..avail], &mut out).unwrap();
        }
        assert!(d.is_done(), "not done after {avail} bytes");
        (out, pos)
    }

    #[test]
    fn content_length_stops_at_the_end_of_the_body() {
        let (out, used, done) = decode_all(Framing::Length(5), b"helloHTTP/1.1 200");
        assert_eq!(out, b"hello");
        assert_eq!(used, 5);
        assert!(done);
        let (out, used, done) = decode_all(Framing::Length(10), b"hel");
        assert_eq!((out.as_slice(), used, done), (&b"hel"[..], 3, false));
        assert!(BodyDecoder::new(Framing::Length(0)).is_done());
    }

    #[test]
    fn chunked_whole_and_byte_by_byte() {
        let wire = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-Trailer: y\r\n\r\nNEXT";
        let (out, used, done) = decode_all(Framing::Chunked, wire);
        assert_eq!(out, b"hello, world");
        assert!(done);
        assert_eq!(&wire[used..], b"NEXT");
        for step in 1..=wire.len() {
            let (out, used) = decode_in_steps(Framing::Chunked, wire, step);
            assert_eq!(out, b"hello, world", "step {step}");
            assert_eq!(&wire[used..], b"NEXT", "step {step}");
        }
    }

    #[test]
    fn chunked_hex_sizes_and_bare_lf() {
        let data = vec![b'a'; 0x1a];
        let mut wire = b"1A\n".to_vec();
        wire.extend_from_slice(&data);
        wire.extend_from_slice(b"\n0\n\n");
        let (out, used, done) = decode_all(Framing::Chunked, &wire);
        assert_eq!(out, data);
        assert_eq!(used, wire.len());
        assert!(done);
    }

    #[test]
    fn chunked_errors() {
        let bad = |wire: &[u8]| {
            BodyDecoder::new(Framing::Chunked)
                .decode(wire, &mut Vec::new())
                .unwrap_err()
        };
        assert_eq!(bad(b"zz\r\n"), Malformed("chunk size"));
        assert_eq!(bad(b"\r\n"), Malformed("chunk size"));
        assert_eq!(bad(b"2\r\nabXY"), Malformed("no CRLF after chunk data"));
        assert_eq!(bad(&[b'1'; MAX_LINE + 1]), Malformed("line too long"));
        let mut d = BodyDecoder::new(Framing::Chunked);
        d.decode(b"5\r\nhe", &mut Vec::new()).unwrap();
        assert!(d.at_eof().is_err());
    }

    #[test]
    fn until_close_ends_at_eof() {
        let mut d = BodyDecoder::new(Framing::UntilClose);
        let mut out = Vec::new();
        assert_eq!(d.decode(b"abc", &mut out).unwrap(), 3);
        assert!(!d.is_done());
        d.at_eof().unwrap();
        assert!(d.is_done());
        assert_eq!(out, b"abc");
    }

    #[test]
    fn request_heads() {
        let wire = b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\nmcp-session-id: abc \r\n\r\n{\"a\":1}";
        let (head, len) = parse_request(wire).unwrap().unwrap();
        assert_eq!(&wire[len..], b"{\"a\":1}");
        assert_eq!(head.method, Method::Post);
        assert_eq!(head.target, "/mcp");
        assert_eq!(head.session_id.as_deref(), Some("abc"));
        assert_eq!(head.framing, Framing::Length(12));
        assert!(!head.close);
        assert_eq!(parse_request(&wire[..20]).unwrap(), None);

        let (head, _) =
            parse_request(b"DELETE /mcp HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n")
                .unwrap()
                .unwrap();
        assert_eq!(head.method, Method::Delete);
        assert_eq!(head.framing, Framing::Chunked);
        assert!(head.close);

        let (head, _) = parse_request(b"GET /mcp HTTP/1.0\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(head.framing, Framing::Length(0));
        assert!(head.close, "HTTP/1.0 closes unless keep-alive");
        assert_eq!(head.mcp, McpHeaders::default());

        let (head, _) = parse_request(
            b"POST /mcp HTTP/1.1\r\nMCP-Protocol-Version: 2026-07-28\r\nmcp-method: tools/call\r\nMcp-Name:  echo \r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            head.mcp,
            McpHeaders {
                protocol_version: Some("2026-07-28".into()),
                method: Some("tools/call".into()),
                name: Some("echo".into()),
            }
        );

        assert!(
            parse_request(b"POST /mcp HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n")
                .is_err()
        );
        assert!(parse_request(b"POST /mcp HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n").is_err());
        assert!(parse_request(b"\x00\x01 nonsense\r\n\r\n").is_err());
    }

    #[test]
    fn response_heads() {
        let (head, _) = parse_response(
            b"HTTP/1.1 200 OK\r\nContent-Type: Text/Event-Stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(head.status, 200);
        assert_eq!(head.media_type.as_deref(), Some("text/event-stream"));
        assert_eq!(head.framing, Framing::Chunked);
        assert!(!head.close);

        let (head, _) =
            parse_response(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n")
                .unwrap()
                .unwrap();
        assert_eq!(head.framing, Framing::UntilClose);
        assert!(
            head.close,
            "a body delimited by the close ends the connection"
        );

        let (head, _) = parse_response(
            b"HTTP/1.1 204 No Content\r\nContent-Length: 10\r\nMcp-Session-Id: s1\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(head.framing, Framing::Length(0));
        assert_eq!(head.session_id.as_deref(), Some("s1"));

        let (head, _) = parse_response(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((head.status, head.framing), (202, Framing::Length(0)));
    }

    /// A real socket pair: a response split across writes, a chunked SSE
    /// body, then a second response on the same connection.
    #[tokio::test]
    async fn conn_reads_split_messages() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let wire: &[&[u8]] = &[
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-",
                b"Encoding: chunked\r\n\r\n6\r\ndata: ",
                b"\r\n3\r\nhi\n\r\n1\r\n\n\r\n0\r\n\r\nHTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\nok",
            ];
            for piece in wire {
                s.write_all(piece).await.unwrap();
                s.flush().await.unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        });
        let mut conn = Conn::new(TcpStream::connect(addr).await.unwrap());
        let head = conn.read_response_head().await.unwrap();
        assert_eq!(head.framing, Framing::Chunked);
        let mut body = Vec::new();
        conn.read_body(&mut BodyDecoder::new(head.framing), &mut body, 1024)
            .await
            .unwrap();
        assert_eq!(body, b"data: hi\n\n");
        let head = conn.read_response_head().await.unwrap();
        assert_eq!(head.status, 202);
        let mut body = Vec::new();
        conn.read_body(&mut BodyDecoder::new(head.framing), &mut body, 1024)
            .await
            .unwrap();
        assert_eq!(body, b"ok");
        server.await.unwrap();
    }
}
