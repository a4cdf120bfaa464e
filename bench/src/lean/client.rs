//! The lean client: one MCP session over streamable HTTP on one kept-alive
//! HTTP/1.1 connection, no MCP SDK.
//!
//! Why: rmcp's client spends a few hundred µs of CPU per call; on a
//! 2-CPU machine that CPU is taken from the gateway being measured. This
//! one writes each request with one `write` and reads the answer in place.
//!
//! Contract, in either era ([`Era`]):
//! - **2025-11-25** ([`Session::open`]): connects, sends `initialize`
//!   (protocol 2025-11-25), keeps the `Mcp-Session-Id` of the answer and
//!   sends `notifications/initialized`. Every later request carries
//!   `Mcp-Session-Id` and `MCP-Protocol-Version`.
//! - **2026-07-28** ([`Session::open_era`]): no session. It asks
//!   `server/discover` and checks that 2026-07-28 is among the server's
//!   `supportedVersions`; every request carries that revision, the
//!   declared capabilities and the client's info in its `_meta`, and the
//!   headers `MCP-Protocol-Version`, `Mcp-Method` and (`tools/call`)
//!   `Mcp-Name`.
//!
//! An answer may be `application/json` or `text/event-stream` (events are
//! read until the response with the request's id; the rest of the stream
//! is read to its end so the connection can carry the next request). A
//! connection the server closes (or that breaks mid-answer) is replaced on
//! the next request; a request whose connection turned out to be closed
//! before any answer byte arrived is sent again once on a new one.

use std::borrow::Cow;
use std::io::Write as _;
use std::sync::Arc;

use anyhow::{Context as _, anyhow, bail};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::net::TcpStream;

use super::http::{BodyDecoder, Conn, ResponseHead};
use super::sse::SseParser;

/// The protocol version the client asks for in `initialize`.
pub const PROTOCOL_VERSION: &str = "2025-11-25";
/// The revision of a sessionless client.
pub const MODERN_PROTOCOL_VERSION: &str = "2026-07-28";

/// The protocol era a session speaks, named by its revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Era {
    /// `initialize`, a session (2025-11-25).
    #[value(name = "2025-11-25")]
    Handshake,
    /// `server/discover`, then self-contained requests (2026-07-28).
    #[value(name = "2026-07-28")]
    Modern,
}

impl std::fmt::Display for Era {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Handshake => PROTOCOL_VERSION,
            Self::Modern => MODERN_PROTOCOL_VERSION,
        })
    }
}
/// Largest JSON answer read.
const MAX_ANSWER: usize = 16 * 1024 * 1024;

/// Where an MCP endpoint is: `http://HOST:PORT/PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `HOST:PORT`, to connect to and for the `Host` header.
    pub authority: String,
    /// The request target, e.g. `/mcp`.
    pub path: String,
}

impl Endpoint {
    /// Parses a plain `http://` URL (no TLS, no user info).
    pub fn parse(url: &str) -> anyhow::Result<Self> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| anyhow!("{url}: only http:// URLs are supported"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.is_empty() || authority.contains('@') {
            bail!("{url}: no host, or user info");
        }
        let authority = if authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
            && !authority.ends_with(']')
        {
            authority.to_owned()
        } else {
            format!("{authority}:80")
        };
        Ok(Self {
            authority,
            path: path.to_owned(),
        })
    }
}

/// One MCP session.
pub struct Session {
    endpoint: Arc<Endpoint>,
    conn: Option<Conn>,
    session_id: Option<String>,
    /// 2026-07-28: the `_meta` object every request carries (`None`: a
    /// handshake-era session).
    meta: Option<String>,
    /// Each call goes through tool search's `call_tool`
    /// ([`Session::through_call_tool`]).
    call_tool: bool,
    next_id: u64,
    /// A request was started and not finished (its future was dropped, e.g.
    /// by a timeout): the connection is mid-message and must be replaced.
    in_flight: bool,
    /// Reused buffers: the request being written, the JSON-RPC body, the
    /// decoded answer body.
    request: Vec<u8>,
    json: Vec<u8>,
    body: Vec<u8>,
}

/// A JSON-RPC message as received; only what tells our answer apart.
#[derive(Deserialize)]
struct Incoming<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    method: Option<&'a RawValue>,
    #[serde(borrow)]
    result: Option<&'a RawValue>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct InitializeResult<'a> {
    #[serde(rename = "protocolVersion", borrow)]
    protocol_version: Cow<'a, str>,
}

#[derive(Deserialize)]
struct DiscoverResult<'a> {
    #[serde(rename = "supportedVersions", borrow)]
    supported_versions: Vec<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct CallResult<'a> {
    #[serde(borrow)]
    content: Vec<Content<'a>>,
    #[serde(rename = "isError")]
    is_error: Option<bool>,
}

#[derive(Deserialize)]
struct Content<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    text: Option<Cow<'a, str>>,
}

/// What a POST got.
enum Answer {
    /// 202 / 204: accepted, no message.
    Accepted,
    /// The response to the request, its `result` (raw JSON) in `Session::body`
    /// at this range.
    Result(std::ops::Range<usize>),
}

impl Session {
    /// Connects and completes the MCP handshake.
    pub async fn open(endpoint: Arc<Endpoint>) -> anyhow::Result<Self> {
        Self::open_declaring(endpoint, "{}").await
    }

    /// [`Session::open`] declaring `capabilities` (a JSON object, e.g.
    /// `{"sampling":{}}`) in `initialize`.
    pub async fn open_declaring(
        endpoint: Arc<Endpoint>,
        capabilities: &str,
    ) -> anyhow::Result<Self> {
        Self::open_era(endpoint, Era::Handshake, capabilities).await
    }

    /// A session of `era` declaring `capabilities`: the handshake, or
    /// `server/discover` (2026-07-28).
    pub async fn open_era(
        endpoint: Arc<Endpoint>,
        era: Era,
        capabilities: &str,
    ) -> anyhow::Result<Self> {
        let mut s = Self {
            endpoint,
            conn: None,
            session_id: None,
            meta: None,
            call_tool: false,
            next_id: 0,
            in_flight: false,
            request: Vec::with_capacity(1024),
            json: Vec::with_capacity(512),
            body: Vec::with_capacity(4096),
        };
        let client_info = concat!(
            r#"{"name":"vigil-bench-lean","version":""#,
            env!("CARGO_PKG_VERSION"),
            r#""}"#
        );
        if era == Era::Modern {
            let meta = format!(
                r#"{{"io.modelcontextprotocol/protocolVersion":"{MODERN_PROTOCOL_VERSION}","io.modelcontextprotocol/clientCapabilities":{capabilities},"io.modelcontextprotocol/clientInfo":{client_info}}}"#
            );
            s.json.clear();
            s.json.extend_from_slice(
                br#"{"jsonrpc":"2.0","id":0,"method":"server/discover","params":{"_meta":"#,
            );
            s.json.extend_from_slice(meta.as_bytes());
            s.json.extend_from_slice(b"}}");
            s.meta = Some(meta);
            let range = match s
                .post(Some(0), "server/discover", None)
                .await
                .context("server/discover")?
            {
                (Answer::Result(r), _) => r,
                (Answer::Accepted, _) => bail!("server/discover was answered with no message"),
            };
            let found: DiscoverResult<'_> = serde_json::from_slice(&s.body[range])
                .context("the server/discover result has no supportedVersions")?;
            if !found
                .supported_versions
                .iter()
                .any(|v| v == MODERN_PROTOCOL_VERSION)
            {
                bail!(
                    "the server does not speak {MODERN_PROTOCOL_VERSION}: it supports {:?}",
                    found.supported_versions
                );
            }
            return Ok(s);
        }
        s.json.clear();
        s.json.extend_from_slice(
            br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":""#,
        );
        s.json.extend_from_slice(PROTOCOL_VERSION.as_bytes());
        s.json.extend_from_slice(br#"","capabilities":"#);
        s.json.extend_from_slice(capabilities.as_bytes());
        s.json.extend_from_slice(br#","clientInfo":"#);
        s.json.extend_from_slice(client_info.as_bytes());
        s.json.extend_from_slice(b"}}");
        let (range, session_id) = match s
            .post(Some(0), "initialize", None)
            .await
            .context("initialize")?
        {
            (Answer::Result(r), sid) => (r, sid),
            (Answer::Accepted, _) => bail!("initialize was answered with no message"),
        };
        let init: InitializeResult<'_> = serde_json::from_slice(&s.body[range])
            .context("the initialize result has no protocolVersion")?;
        if init.protocol_version != PROTOCOL_VERSION {
            bail!(
                "the server answered protocol version {}, not {PROTOCOL_VERSION}",
                init.protocol_version
            );
        }
        s.session_id = Some(session_id.ok_or_else(|| anyhow!("initialize: no Mcp-Session-Id"))?);
        s.json.clear();
        s.json
            .extend_from_slice(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        match s
            .post(None, "notifications/initialized", None)
            .await
            .context("notifications/initialized")?
            .0
        {
            Answer::Accepted => Ok(s),
            Answer::Result(_) => bail!("notifications/initialized was answered with a message"),
        }
    }

    /// From now on, calls `tool` as `call_tool` of a gateway's tool search
    /// (`{"tool_name": tool, "arguments": {...}}`).
    pub fn through_call_tool(mut self) -> Self {
        self.call_tool = true;
        self
    }

    /// Calls `tool` with `{"text": text}` and checks that `text` comes back
    /// as the first content item, not as a tool error.
    pub async fn call_echo(&mut self, tool: &str, text: &str) -> anyhow::Result<()> {
        self.next_id += 1;
        let id = self.next_id;
        self.json.clear();
        let _ = write!(
            self.json,
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"#
        );
        let called = if self.call_tool {
            self.json
                .extend_from_slice(br#""call_tool","arguments":{"tool_name":"#);
            serde_json::to_writer(&mut self.json, tool)?;
            "call_tool"
        } else {
            serde_json::to_writer(&mut self.json, tool)?;
            tool
        };
        self.json.extend_from_slice(br#","arguments":{"text":"#);
        serde_json::to_writer(&mut self.json, text)?;
        self.json.push(b'}');
        if self.call_tool {
            self.json.push(b'}');
        }
        if let Some(meta) = &self.meta {
            self.json.extend_from_slice(br#","_meta":"#);
            self.json.extend_from_slice(meta.as_bytes());
        }
        self.json.extend_from_slice(b"}}");
        let range = match self.post(Some(id), "tools/call", Some(called)).await?.0 {
            Answer::Result(r) => r,
            Answer::Accepted => bail!("tools/call was answered with no message"),
        };
        check_echo(&self.body[range], text)
    }

    /// Closes the connection but leaves the session open on the server
    /// (an idle client: no socket, no `DELETE`).
    pub fn detach(mut self) {
        self.session_id = None;
        self.conn = None;
    }

    /// Ends the session (`DELETE`), best effort.
    pub async fn close(self) {
        let _ = self.end().await;
    }

    /// Ends the session (`DELETE`, at most 2 s) and fails unless the server
    /// answered 2xx: for a bench that counts on the server having heard it.
    pub async fn end(mut self) -> anyhow::Result<()> {
        let Some(id) = self.session_id.take() else {
            return Ok(());
        };
        if self.in_flight {
            self.conn = None;
        }
        self.request.clear();
        let _ = write!(
            self.request,
            "DELETE {} HTTP/1.1\r\nHost: {}\r\nMcp-Session-Id: {id}\r\nMCP-Protocol-Version: {PROTOCOL_VERSION}\r\nContent-Length: 0\r\n\r\n",
            self.endpoint.path, self.endpoint.authority,
        );
        let request = std::mem::take(&mut self.request);
        let work = async {
            let conn = self.connection().await?;
            conn.write_all(&request).await?;
            let head = conn.read_response_head().await?;
            let mut sink = Vec::new();
            conn.read_body(&mut BodyDecoder::new(head.framing), &mut sink, MAX_ANSWER)
                .await?;
            anyhow::Ok(head.status)
        };
        let status = tokio::time::timeout(std::time::Duration::from_secs(2), work)
            .await
            .map_err(|_| anyhow!("DELETE: no answer within 2 s"))??;
        if !(200..300).contains(&status) {
            bail!("DELETE answered HTTP {status}");
        }
        Ok(())
    }

    async fn connection(&mut self) -> anyhow::Result<&mut Conn> {
        if self.conn.is_none() {
            let stream = TcpStream::connect(&self.endpoint.authority)
                .await
                .with_context(|| format!("cannot connect to {}", self.endpoint.authority))?;
            self.conn = Some(Conn::new(stream));
        }
        Ok(self.conn.as_mut().expect("connected above"))
    }

    /// POSTs `self.json` (a `method` request, naming `name`) and reads the
    /// answer: for a request (`id`), its result; for a notification, the
    /// acceptance. Also returns the answer's `Mcp-Session-Id`.
    async fn post(
        &mut self,
        id: Option<u64>,
        method: &str,
        name: Option<&str>,
    ) -> anyhow::Result<(Answer, Option<String>)> {
        if self.in_flight {
            self.conn = None;
        }
        self.in_flight = true;
        self.request.clear();
        let _ = write!(
            self.request,
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
            self.endpoint.path,
            self.endpoint.authority,
            self.json.len()
        );
        if let Some(sid) = &self.session_id {
            let _ = write!(
                self.request,
                "Mcp-Session-Id: {sid}\r\nMCP-Protocol-Version: {PROTOCOL_VERSION}\r\n"
            );
        } else if self.meta.is_some() {
            let _ = write!(
                self.request,
                "MCP-Protocol-Version: {MODERN_PROTOCOL_VERSION}\r\nMcp-Method: {method}\r\n"
            );
            if let Some(name) = name {
                let _ = write!(self.request, "Mcp-Name: {name}\r\n");
            }
        }
        self.request.extend_from_slice(b"\r\n");
        self.request.extend_from_slice(&self.json);

        let reused = self.conn.is_some();
        let head = match self.send().await {
            Ok(h) => h,
            // A kept-alive connection the server had closed: once more on a
            // new one (nothing of the request was processed).
            Err(_) if reused => {
                self.conn = None;
                self.send().await?
            }
            Err(e) => {
                self.conn = None;
                return Err(e);
            }
        };
        let result = self.read_answer(&head, id).await;
        if result.is_err() || head.close {
            self.conn = None;
        }
        self.in_flight = false;
        Ok((result?, head.session_id))
    }

    /// Writes the request and reads the answer's head.
    async fn send(&mut self) -> anyhow::Result<ResponseHead> {
        let request = std::mem::take(&mut self.request);
        let result = async {
            let conn = self.connection().await?;
            conn.write_all(&request).await?;
            conn.read_response_head().await
        }
        .await;
        self.request = request;
        result
    }

    async fn read_answer(
        &mut self,
        head: &ResponseHead,
        id: Option<u64>,
    ) -> anyhow::Result<Answer> {
        let conn = self.conn.as_mut().expect("send connected");
        let mut decoder = BodyDecoder::new(head.framing);
        self.body.clear();
        let media = head.media_type.as_deref();
        if head.status == 202 || head.status == 204 {
            conn.read_body(&mut decoder, &mut self.body, MAX_ANSWER)
                .await?;
            return match id {
                None => Ok(Answer::Accepted),
                Some(_) => bail!("HTTP {} to a request", head.status),
            };
        }
        if head.status != 200 {
            conn.read_body(&mut decoder, &mut self.body, MAX_ANSWER)
                .await?;
            let text = String::from_utf8_lossy(&self.body[..self.body.len().min(300)]).into_owned();
            bail!("HTTP {}: {text}", head.status);
        }
        let Some(id) = id else {
            bail!("HTTP 200 to a notification");
        };
        match media {
            Some("application/json") => {
                conn.read_body(&mut decoder, &mut self.body, MAX_ANSWER)
                    .await?;
                find_result(&self.body, id, 0)?
                    .ok_or_else(|| anyhow!("the JSON answer is not the response to request {id}"))
                    .map(Answer::Result)
            }
            Some("text/event-stream") => {
                // Decoded bytes go to `raw`; each complete event's data is
                // copied to the end of `self.body` only if it is our answer.
                let mut raw = Vec::with_capacity(1024);
                let mut parser = SseParser::new();
                let mut found: Option<std::ops::Range<usize>> = None;
                let mut bad: Option<anyhow::Error> = None;
                let body = &mut self.body;
                loop {
                    raw.clear();
                    let more = conn.read_body_some(&mut decoder, &mut raw).await?;
                    parser
                        .feed(&raw, |data| {
                            if found.is_some() || bad.is_some() {
                                return;
                            }
                            let start = body.len();
                            match find_result(data, id, start) {
                                Ok(Some(r)) => {
                                    body.extend_from_slice(data);
                                    found = Some(r);
                                }
                                Ok(None) => {}
                                Err(e) => bad = Some(e),
                            }
                        })
                        .map_err(|e| anyhow!(e))?;
                    if !more {
                        break;
                    }
                }
                if let Some(e) = bad {
                    return Err(e);
                }
                found.map(Answer::Result).ok_or_else(|| {
                    anyhow!("the event stream ended without the response to request {id}")
                })
            }
            other => bail!("unexpected Content-Type {other:?}"),
        }
    }
}

/// Checks a `tools/call` result (raw JSON): `text` must come back as its
/// first content item, not as a tool error.
pub(super) fn check_echo(result: &[u8], text: &str) -> anyhow::Result<()> {
    let result: CallResult<'_> =
        serde_json::from_slice(result).context("not a tools/call result")?;
    let first = result.content.first();
    let echoed = first.and_then(|c| (c.kind == "text").then_some(c.text.as_deref()).flatten());
    if result.is_error == Some(true) {
        bail!("tool error: {:?}", echoed);
    }
    if echoed != Some(text) {
        bail!("echo returned {:?}, expected the payload", echoed);
    }
    Ok(())
}

/// If `json` is the response to request `id`: the range of its `result`
/// in `json` shifted by `offset` (or its error, as an error). `Ok(None)`
/// for any other message (a notification, a request to the client).
pub(super) fn find_result(
    json: &[u8],
    id: u64,
    offset: usize,
) -> anyhow::Result<Option<std::ops::Range<usize>>> {
    let msg: Incoming<'_> =
        serde_json::from_slice(json).context("an answer that is not a JSON-RPC message")?;
    let ours = msg.method.is_none() && msg.id.is_some_and(|raw| raw.get().parse() == Ok(id));
    if !ours {
        return Ok(None);
    }
    if let Some(error) = msg.error {
        bail!("JSON-RPC error: {}", error.get());
    }
    let result = msg
        .result
        .ok_or_else(|| anyhow!("a response with neither result nor error"))?;
    // The raw value borrows from `json`: its place in it.
    let start = result.get().as_ptr() as usize - json.as_ptr() as usize;
    Ok(Some(offset + start..offset + start + result.get().len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        let e = Endpoint::parse("http://127.0.0.1:3901/mcp").unwrap();
        assert_eq!(
            (e.authority.as_str(), e.path.as_str()),
            ("127.0.0.1:3901", "/mcp")
        );
        let e = Endpoint::parse("http://localhost").unwrap();
        assert_eq!(
            (e.authority.as_str(), e.path.as_str()),
            ("localhost:80", "/")
        );
        let e = Endpoint::parse("http://[::1]:8/a/b?c").unwrap();
        assert_eq!(
            (e.authority.as_str(), e.path.as_str()),
            ("[::1]:8", "/a/b?c")
        );
        assert!(Endpoint::parse("https://x/mcp").is_err());
        assert!(Endpoint::parse("http://u@x/mcp").is_err());
    }

    #[test]
    fn results_are_found_by_id() {
        let json = br#"{"jsonrpc":"2.0","id":12,"result":{"ok":true}}"#;
        let r = find_result(json, 12, 0).unwrap().unwrap();
        assert_eq!(&json[r], br#"{"ok":true}"#);
        assert!(find_result(json, 1, 0).unwrap().is_none());
        let note = br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#;
        assert!(find_result(note, 12, 0).unwrap().is_none());
        let request = br#"{"jsonrpc":"2.0","id":12,"method":"ping"}"#;
        assert!(
            find_result(request, 12, 0).unwrap().is_none(),
            "a request to the client is not our answer"
        );
        let err = br#"{"jsonrpc":"2.0","id":12,"error":{"code":-32601,"message":"no"}}"#;
        assert!(find_result(err, 12, 0).is_err());
        assert!(find_result(b"nope", 12, 0).is_err());
    }
}
