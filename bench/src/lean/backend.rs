//! The lean backend (`vigil-bench lean-backend`): a minimal MCP server over
//! streamable HTTP with one tool, `echo`, and no MCP SDK on the path; it
//! speaks both protocol eras. (`--stdio` serves the same answers over
//! stdin and stdout instead: [`super::stdio`].)
//!
//! Why: the demo backend is an rmcp server that spends a few hundred µs of
//! CPU per call itself; next to it Vigil's cost looks smaller than it is.
//! This one parses a request, writes one JSON answer and is done: tens of
//! µs per call, most of it the kernel's.
//!
//! Contract, on `/mcp` (anything else: 404); what each request is answered
//! is [`super::mcp`]'s:
//! - `POST` with one JSON-RPC message or a batch. `initialize` opens a
//!   session (`Mcp-Session-Id` on the answer). A POST without a session
//!   but with `MCP-Protocol-Version: 2026-07-28` is a sessionless
//!   2026-07-28 request (`server/discover`, `tools/list`, `tools/call`):
//!   its `Mcp-Method` must be its method and, for `tools/call`, `Mcp-Name`
//!   its tool (else 400, -32020). Every other POST needs a session this
//!   process opened (none: 400, unknown: 404). Notifications and
//!   responses → 202 with no body. Answers are `application/json`, on a
//!   kept-alive connection.
//! - `GET` → 405 (no standing SSE stream: clients then do without).
//! - `DELETE` → 200, the session is closed.
//!
//! It runs on one thread (a current-thread runtime: no cross-thread
//! wake-ups), and is started as a process of its own so its CPU is
//! measured apart from the load generator's.

use std::collections::HashSet;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context as _;
use serde::Deserialize;
use tokio::net::TcpListener;

use super::http::{BodyDecoder, Conn, Method, RequestHead};
use super::mcp::{self, Era, MODERN_PROTOCOL_VERSION, Message, error_to};

/// Largest request body read.
const MAX_BODY: usize = 4 * 1024 * 1024;

#[derive(Debug, clap::Args)]
pub struct BackendArgs {
    /// Address to listen on; port 0 picks a free one. The bound address is
    /// printed on stdout as `listening on http://ADDR/mcp`.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Server name in `serverInfo`.
    #[arg(long, default_value = "lean")]
    pub name: String,
    /// Serve MCP on stdin and stdout (newline-delimited JSON-RPC, the
    /// handshake era) instead of HTTP; `--listen` is not used.
    #[arg(long)]
    pub stdio: bool,
}

/// What all connections share: the open sessions.
struct State {
    server: mcp::Server,
    sessions: Mutex<HashSet<String>>,
    /// Session ids are `{seed:016x}{counter:08x}`: unique per process run.
    seed: u64,
    next: AtomicU64,
}

/// Serves until the process is stopped.
pub async fn run(args: &BackendArgs) -> anyhow::Result<()> {
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let local = listener.local_addr()?;
    println!("listening on http://{local}/mcp");
    serve(listener, &args.name).await
}

/// Serves MCP on `listener` until the process ends.
pub async fn serve(listener: TcpListener, name: &str) -> anyhow::Result<()> {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
        ^ (u64::from(std::process::id()) << 32);
    let state: &'static State = Box::leak(Box::new(State {
        server: mcp::Server::new(name),
        sessions: Mutex::new(HashSet::new()),
        seed,
        next: AtomicU64::new(1),
    }));
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                // Out of descriptors and the like: wait, do not spin.
                eprintln!("accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        tokio::spawn(async move {
            let _ = serve_connection(Conn::new(stream), state).await;
        });
    }
}

/// Answers requests on one connection until the client closes it (or asks
/// to, or sends what cannot be read).
async fn serve_connection(mut conn: Conn, state: &State) -> anyhow::Result<()> {
    let mut body = Vec::new();
    let mut out = Vec::with_capacity(4096);
    loop {
        let head = match conn.read_request().await {
            Ok(Some(h)) => h,
            Ok(None) => return Ok(()),
            Err(e) => {
                out.clear();
                respond(&mut out, 400, None, None, b"", true);
                conn.write_all(&out).await?;
                return Err(e);
            }
        };
        body.clear();
        if let Err(e) = conn
            .read_body(&mut BodyDecoder::new(head.framing), &mut body, MAX_BODY)
            .await
        {
            out.clear();
            respond(&mut out, 413, None, None, b"", true);
            conn.write_all(&out).await?;
            return Err(e);
        }
        out.clear();
        handle(state, &head, &body, &mut out);
        conn.write_all(&out).await?;
        if head.close {
            return Ok(());
        }
    }
}

/// Writes the whole HTTP response to `req` into `out`.
fn handle(state: &State, req: &RequestHead, body: &[u8], out: &mut Vec<u8>) {
    let path = req.target.split('?').next().unwrap_or("");
    if path != "/mcp" {
        return respond(out, 404, None, None, b"", req.close);
    }
    match req.method {
        Method::Post => post(state, req, body, out),
        Method::Delete => {
            let status = match &req.session_id {
                None => 400,
                Some(id) if lock(state).remove(id) => 200,
                Some(_) => 404,
            };
            respond(out, status, None, None, b"", req.close);
        }
        Method::Get | Method::Other => respond(out, 405, None, None, b"", req.close),
    }
}

fn lock(state: &State) -> std::sync::MutexGuard<'_, HashSet<String>> {
    state.sessions.lock().unwrap_or_else(|p| p.into_inner())
}

fn post(state: &State, req: &RequestHead, body: &[u8], out: &mut Vec<u8>) {
    let Some((batch, messages)) = mcp::parse(body) else {
        let mut json = Vec::new();
        error_to(
            &mut json,
            None,
            -32700,
            "parse error: not a JSON-RPC message",
        );
        return respond(out, 400, Some("application/json"), None, &json, req.close);
    };
    let initialize = messages
        .iter()
        .any(|m| m.method.as_deref() == Some("initialize") && m.id.is_some());
    // A 2026-07-28 request: no session, that revision's header.
    let modern = !initialize
        && req.session_id.is_none()
        && req.mcp.protocol_version.as_deref() == Some(MODERN_PROTOCOL_VERSION);
    let mut new_session = None;
    if initialize {
        let id = format!(
            "{:016x}{:08x}",
            state.seed,
            state.next.fetch_add(1, Ordering::Relaxed)
        );
        lock(state).insert(id.clone());
        new_session = Some(id);
    } else if modern {
        if let Some(why) = header_mismatch(req, &messages) {
            let mut json = Vec::new();
            error_to(&mut json, None, -32020, &why);
            return respond(out, 400, Some("application/json"), None, &json, req.close);
        }
    } else {
        let known = req.session_id.as_ref().map(|id| lock(state).contains(id));
        if known != Some(true) {
            let (status, why) = if known.is_none() {
                (400, "bad request: no Mcp-Session-Id")
            } else {
                (404, "session not found")
            };
            let mut json = Vec::new();
            error_to(&mut json, None, -32600, why);
            return respond(
                out,
                status,
                Some("application/json"),
                None,
                &json,
                req.close,
            );
        }
    }

    let era = if modern { Era::Modern } else { Era::Handshake };
    let mut json = Vec::with_capacity(256 + body.len());
    if mcp::answer_all(&state.server, era, &messages, batch, &mut json) == 0 {
        return respond(out, 202, None, None, b"", req.close);
    }
    respond(
        out,
        200,
        Some("application/json"),
        new_session.as_deref(),
        &json,
        req.close,
    );
}

/// The name a `tools/call` calls (read for the `Mcp-Name` check).
#[derive(Deserialize)]
struct Named<'a> {
    #[serde(borrow)]
    name: std::borrow::Cow<'a, str>,
}

/// Why a 2026-07-28 request's headers disagree with its body, if they do:
/// a request is one message, with `Mcp-Method` its method and, for
/// `tools/call`, `Mcp-Name` its tool. (What a gateway forwards is checked
/// here as a server of that revision checks it.)
fn header_mismatch(req: &RequestHead, messages: &[Message<'_>]) -> Option<String> {
    let requests = messages.iter().filter(|m| m.is_request()).count();
    if requests == 0 {
        return None;
    }
    let [m] = messages else {
        return Some("a 2026-07-28 request is one message, not a batch".into());
    };
    let method = m.method.as_deref().unwrap_or_default();
    if req.mcp.method.as_deref() != Some(method) {
        return Some(format!(
            "header mismatch: Mcp-Method {:?}, the body's method {method:?}",
            req.mcp.method
        ));
    }
    if method == "tools/call" {
        let name = m
            .params
            .and_then(|p| serde_json::from_str::<Named<'_>>(p.get()).ok())
            .map(|n| n.name);
        if name.is_none() || req.mcp.name.as_deref() != name.as_deref() {
            return Some(format!(
                "header mismatch: Mcp-Name {:?}, the body's name {name:?}",
                req.mcp.name
            ));
        }
    }
    None
}

/// Writes a whole response: status line, headers, body.
fn respond(
    out: &mut Vec<u8>,
    status: u16,
    content_type: Option<&str>,
    session_id: Option<&str>,
    body: &[u8],
    close: bool,
) {
    let reason = match status {
        200 => "OK",
        202 => "Accepted",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Payload Too Large",
        _ => "",
    };
    let _ = write!(out, "HTTP/1.1 {status} {reason}\r\n");
    if let Some(ct) = content_type {
        let _ = write!(out, "Content-Type: {ct}\r\n");
    }
    if let Some(id) = session_id {
        let _ = write!(out, "Mcp-Session-Id: {id}\r\n");
    }
    if status == 405 {
        out.extend_from_slice(b"Allow: POST, DELETE\r\n");
    }
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    let _ = write!(out, "Content-Length: {}\r\n\r\n", body.len());
    out.extend_from_slice(body);
}

#[cfg(test)]
mod tests {
    use super::super::http::{Framing, parse_response};
    use super::*;

    fn state() -> State {
        State {
            server: mcp::Server::new("lean"),
            sessions: Mutex::new(HashSet::new()),
            seed: 7,
            next: AtomicU64::new(1),
        }
    }

    fn post_head(session: Option<&str>) -> RequestHead {
        RequestHead {
            method: Method::Post,
            target: "/mcp".into(),
            session_id: session.map(str::to_owned),
            mcp: Default::default(),
            framing: Framing::Length(0),
            close: false,
        }
    }

    /// Status, session id and JSON body of the answer to `body`.
    fn exchange(
        state: &State,
        session: Option<&str>,
        body: &str,
    ) -> (u16, Option<String>, serde_json::Value) {
        let mut out = Vec::new();
        handle(state, &post_head(session), body.as_bytes(), &mut out);
        let (head, len) = parse_response(&out).unwrap().unwrap();
        let json = if out.len() > len {
            serde_json::from_slice(&out[len..]).unwrap()
        } else {
            serde_json::Value::Null
        };
        assert_eq!(head.framing, Framing::Length((out.len() - len) as u64));
        (head.status, head.session_id, json)
    }

    fn initialize(state: &State, version: &str) -> (String, serde_json::Value) {
        let (status, session, json) = exchange(
            state,
            None,
            &format!(
                r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{version}","capabilities":{{}},"clientInfo":{{"name":"t","version":"1"}}}}}}"#
            ),
        );
        assert_eq!(status, 200);
        (session.expect("a session id"), json)
    }

    #[test]
    fn initialize_negotiates_the_version() {
        let s = state();
        for (asked, answered) in [
            ("2025-06-18", "2025-06-18"),
            ("2025-03-26", "2025-03-26"),
            ("2025-11-25", "2025-11-25"),
            ("2024-11-05", "2025-11-25"),
        ] {
            let (_, json) = initialize(&s, asked);
            assert_eq!(json["result"]["protocolVersion"], answered);
            assert_eq!(json["id"], 0);
            assert_eq!(json["result"]["capabilities"]["tools"]["listChanged"], true);
            assert_eq!(json["result"]["serverInfo"]["name"], "lean");
        }
        assert_eq!(lock(&s).len(), 4);
    }

    #[test]
    fn session_calls() {
        let s = state();
        let (id, _) = initialize(&s, "2025-11-25");
        let sid = Some(id.as_str());
        let (status, _, json) = exchange(
            &s,
            sid,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        );
        assert_eq!((status, json), (202, serde_json::Value::Null));

        let (_, _, json) = exchange(&s, sid, r#"{"jsonrpc":"2.0","id":"p","method":"ping"}"#);
        assert_eq!(
            json,
            serde_json::json!({"jsonrpc":"2.0","id":"p","result":{}})
        );

        let (_, _, json) = exchange(&s, sid, r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#);
        let tool = &json["result"]["tools"][0];
        assert_eq!(tool["name"], "echo");
        assert_eq!(
            tool["inputSchema"],
            serde_json::json!({"type":"object","properties":{"text":{"type":"string"}},"required":["text"]})
        );

        let (_, _, json) = exchange(
            &s,
            sid,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi \"there\"\n"}}}"#,
        );
        assert_eq!(
            json,
            serde_json::json!({"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"hi \"there\"\n"}],"isError":false}})
        );

        let (_, _, json) = exchange(
            &s,
            sid,
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","arguments":{"text":5}}}"#,
        );
        assert_eq!(json["result"]["isError"], true);
        let (_, _, json) = exchange(
            &s,
            sid,
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"nope"}}"#,
        );
        assert_eq!(json["error"]["code"], -32602);
        let (_, _, json) = exchange(
            &s,
            sid,
            r#"{"jsonrpc":"2.0","id":6,"method":"resources/list"}"#,
        );
        assert_eq!(json["error"]["code"], -32601);

        let (_, _, json) = exchange(
            &s,
            sid,
            r#"[{"jsonrpc":"2.0","id":7,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/x"},{"jsonrpc":"2.0","id":8,"method":"ping"}]"#,
        );
        assert_eq!(json.as_array().map(Vec::len), Some(2));
        assert_eq!(json[1]["id"], 8);
    }

    #[test]
    fn sessions_are_required_and_deleted() {
        let s = state();
        let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        assert_eq!(exchange(&s, None, ping).0, 400);
        assert_eq!(exchange(&s, Some("nope"), ping).0, 404);
        let (id, _) = initialize(&s, "2025-11-25");
        assert_eq!(exchange(&s, Some(&id), ping).0, 200);

        let mut out = Vec::new();
        let mut head = post_head(Some(&id));
        head.method = Method::Delete;
        handle(&s, &head, b"", &mut out);
        assert_eq!(parse_response(&out).unwrap().unwrap().0.status, 200);
        assert_eq!(exchange(&s, Some(&id), ping).0, 404);

        out.clear();
        head.method = Method::Get;
        handle(&s, &head, b"", &mut out);
        assert_eq!(parse_response(&out).unwrap().unwrap().0.status, 405);
        out.clear();
        head.target = "/other".into();
        handle(&s, &head, b"", &mut out);
        assert_eq!(parse_response(&out).unwrap().unwrap().0.status, 404);
        assert_eq!(exchange(&s, Some(&id), "not json").0, 400);
    }

    /// Status and JSON body of the answer to a sessionless 2026-07-28 POST
    /// with these `Mcp-Method` and `Mcp-Name` headers.
    fn modern(
        state: &State,
        method: Option<&str>,
        name: Option<&str>,
        body: &str,
    ) -> (u16, serde_json::Value) {
        let mut head = post_head(None);
        head.mcp = super::super::http::McpHeaders {
            protocol_version: Some("2026-07-28".into()),
            method: method.map(str::to_owned),
            name: name.map(str::to_owned),
        };
        let mut out = Vec::new();
        handle(state, &head, body.as_bytes(), &mut out);
        let (head, len) = parse_response(&out).unwrap().unwrap();
        assert_eq!(head.session_id, None, "2026-07-28 opens no session");
        (head.status, serde_json::from_slice(&out[len..]).unwrap())
    }

    #[test]
    fn sessionless_2026_requests() {
        let s = state();
        let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}"#;
        let discover =
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{{{meta}}}}}"#);
        let (status, json) = modern(&s, Some("server/discover"), None, &discover);
        assert_eq!(status, 200);
        assert_eq!(json["result"]["supportedVersions"][3], "2026-07-28");

        let call = format!(
            r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"hi"}},{meta}}}}}"#
        );
        let (status, json) = modern(&s, Some("tools/call"), Some("echo"), &call);
        assert_eq!(status, 200);
        assert_eq!(json["result"]["content"][0]["text"], "hi");
        assert_eq!(json["result"]["resultType"], "complete");
        assert!(lock(&s).is_empty());

        for (method, name) in [
            (None, Some("echo")),
            (Some("tools/list"), Some("echo")),
            (Some("tools/call"), None),
            (Some("tools/call"), Some("demo__echo")),
        ] {
            let (status, json) = modern(&s, method, name, &call);
            assert_eq!(
                (status, &json["error"]["code"]),
                (400, &serde_json::json!(-32020)),
                "{method:?} {name:?}"
            );
        }
        // Without that revision's header it is a handshake-era POST
        // without a session.
        let mut out = Vec::new();
        handle(&s, &post_head(None), call.as_bytes(), &mut out);
        assert_eq!(parse_response(&out).unwrap().unwrap().0.status, 400);
    }
}
