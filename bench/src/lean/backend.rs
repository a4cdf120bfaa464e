//! The lean backend (`vigil-bench lean-backend`): a minimal MCP server over
//! streamable HTTP with one tool, `echo`, and no MCP SDK on the path.
//!
//! Why: the demo backend is an rmcp server that spends a few hundred µs of
//! CPU per call itself; next to it Vigil's cost looks smaller than it is.
//! This one parses a request, writes one JSON answer and is done: tens of
//! µs per call, most of it the kernel's.
//!
//! Contract, on `/mcp` (anything else: 404):
//! - `POST` with one JSON-RPC message or a batch. `initialize` opens a
//!   session (`Mcp-Session-Id` on the answer) and answers the client's
//!   protocol version if it is 2025-03-26, 2025-06-18 or 2025-11-25, else
//!   2025-11-25, with `capabilities: {"tools": {"listChanged": true}}`.
//!   Every other POST needs a session this process opened (none: 400,
//!   unknown: 404). `ping` → `{}`; `tools/list` → `echo`; `tools/call`
//!   `echo` → its `text` as text content; unknown tool → -32602; other
//!   methods → -32601. Notifications and responses → 202 with no body.
//!   Answers are `application/json`, on a kept-alive connection.
//! - `GET` → 405 (no standing SSE stream: clients then do without).
//! - `DELETE` → 200, the session is closed.
//!
//! It runs on one thread (a current-thread runtime: no cross-thread
//! wake-ups), and is started as a process of its own so its CPU is
//! measured apart from the load generator's.

use std::borrow::Cow;
use std::collections::HashSet;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context as _;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::net::TcpListener;

use super::http::{BodyDecoder, Conn, Method, RequestHead};

/// Protocol versions answered as asked; any other gets the newest.
pub const PROTOCOL_VERSIONS: [&str; 3] = ["2025-03-26", "2025-06-18", "2025-11-25"];
pub const LATEST_PROTOCOL_VERSION: &str = "2025-11-25";
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
    name: String,
}

/// What all connections share: the open sessions.
struct State {
    name: String,
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
        name: name.to_owned(),
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

/// One JSON-RPC message as read: borrowed, with the id kept verbatim.
#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    jsonrpc: Option<Cow<'a, str>>,
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow)]
    params: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct InitializeParams<'a> {
    #[serde(rename = "protocolVersion", borrow)]
    protocol_version: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct CallParams<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow)]
    arguments: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct EchoArguments<'a> {
    #[serde(borrow)]
    text: Cow<'a, str>,
}

fn post(state: &State, req: &RequestHead, body: &[u8], out: &mut Vec<u8>) {
    let batch = body
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'[');
    let messages: Vec<Message<'_>> = if batch {
        serde_json::from_slice(body).unwrap_or_default()
    } else {
        serde_json::from_slice(body)
            .map(|m| vec![m])
            .unwrap_or_default()
    };
    if messages.is_empty() {
        let mut json = Vec::new();
        error_to(
            &mut json,
            None,
            -32700,
            "parse error: not a JSON-RPC message",
        );
        return respond(out, 400, Some("application/json"), None, &json, req.close);
    }
    let initialize = messages
        .iter()
        .any(|m| m.method.as_deref() == Some("initialize") && m.id.is_some());
    let mut new_session = None;
    if initialize {
        let id = format!(
            "{:016x}{:08x}",
            state.seed,
            state.next.fetch_add(1, Ordering::Relaxed)
        );
        lock(state).insert(id.clone());
        new_session = Some(id);
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

    let mut json = Vec::with_capacity(256 + body.len());
    let mut answers = 0;
    if batch {
        json.push(b'[');
    }
    for m in &messages {
        // Notifications and responses (no method, or no id) get no answer.
        let (Some(id), Some(method)) = (m.id, m.method.as_deref()) else {
            continue;
        };
        if answers > 0 {
            json.push(b',');
        }
        answers += 1;
        if m.jsonrpc.as_deref() != Some("2.0") {
            error_to(
                &mut json,
                Some(id),
                -32600,
                "invalid request: jsonrpc must be \"2.0\"",
            );
            continue;
        }
        answer(state, id, method, m.params, &mut json);
    }
    if answers == 0 {
        return respond(out, 202, None, None, b"", req.close);
    }
    if batch {
        json.push(b']');
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

/// Appends the answer to one request to `json`.
fn answer(
    state: &State,
    id: &RawValue,
    method: &str,
    params: Option<&RawValue>,
    json: &mut Vec<u8>,
) {
    let params = params.map(RawValue::get).unwrap_or("{}");
    match method {
        "initialize" => {
            let asked = serde_json::from_str::<InitializeParams<'_>>(params)
                .ok()
                .and_then(|p| p.protocol_version);
            let version = asked
                .as_deref()
                .filter(|v| PROTOCOL_VERSIONS.contains(v))
                .unwrap_or(LATEST_PROTOCOL_VERSION);
            result_start(json, id);
            json.extend_from_slice(b"{\"protocolVersion\":");
            string_to(json, version);
            json.extend_from_slice(
                b",\"capabilities\":{\"tools\":{\"listChanged\":true}},\"serverInfo\":{\"name\":",
            );
            string_to(json, &state.name);
            json.extend_from_slice(b",\"version\":");
            string_to(json, env!("CARGO_PKG_VERSION"));
            json.extend_from_slice(b"}}}");
        }
        "ping" => {
            result_start(json, id);
            json.extend_from_slice(b"{}}");
        }
        "tools/list" => {
            result_start(json, id);
            json.extend_from_slice(
                br#"{"tools":[{"name":"echo","description":"Returns its text argument.","inputSchema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}}]}}"#,
            );
        }
        "tools/call" => match serde_json::from_str::<CallParams<'_>>(params) {
            Err(e) => error_to(json, Some(id), -32602, &format!("invalid params: {e}")),
            Ok(p) if p.name != "echo" => {
                error_to(json, Some(id), -32602, &format!("unknown tool: {}", p.name))
            }
            Ok(p) => {
                let args = p.arguments.map(RawValue::get).unwrap_or("{}");
                result_start(json, id);
                match serde_json::from_str::<EchoArguments<'_>>(args) {
                    Ok(a) => {
                        json.extend_from_slice(br#"{"content":[{"type":"text","text":"#);
                        string_to(json, &a.text);
                        json.extend_from_slice(br#"}],"isError":false}}"#);
                    }
                    // Bad arguments are a tool error (the model can fix them).
                    Err(e) => {
                        json.extend_from_slice(br#"{"content":[{"type":"text","text":"#);
                        string_to(json, &format!("echo needs a string `text`: {e}"));
                        json.extend_from_slice(br#"}],"isError":true}}"#);
                    }
                }
            }
        },
        _ => error_to(
            json,
            Some(id),
            -32601,
            &format!("method not found: {method}"),
        ),
    }
}

fn result_start(json: &mut Vec<u8>, id: &RawValue) {
    json.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    json.extend_from_slice(id.get().as_bytes());
    json.extend_from_slice(b",\"result\":");
}

fn error_to(json: &mut Vec<u8>, id: Option<&RawValue>, code: i32, message: &str) {
    json.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    json.extend_from_slice(id.map_or("null", RawValue::get).as_bytes());
    let _ = write!(json, ",\"error\":{{\"code\":{code},\"message\":");
    string_to(json, message);
    json.extend_from_slice(b"}}");
}

fn string_to(json: &mut Vec<u8>, s: &str) {
    // Writing a &str to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *json, s);
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
            name: "lean".into(),
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
}
