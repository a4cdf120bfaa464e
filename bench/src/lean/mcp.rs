//! What the lean backend answers, whatever carries the messages: the HTTP
//! server ([`super::backend`]) and the stdio server ([`super::stdio`]) both
//! hand their bytes here and write out what comes back.
//!
//! Contract: a body (or a stdio line) is one JSON-RPC message or a batch,
//! read borrowed with the ids kept verbatim. Every request gets one answer,
//! appended to the caller's buffer (a batch's answers as an array);
//! notifications and responses get none. In either era: `ping` → `{}`;
//! `tools/list` → `echo` (`text: string`, required); `tools/call echo` →
//! its `text` as text content (arguments that are not a string `text`: a
//! tool error); an unknown tool → -32602; any other method → -32601.
//!
//! - **Handshake era** (2025-11-25 and before): `initialize` answers the
//!   client's protocol version if it is one of [`PROTOCOL_VERSIONS`], else
//!   [`LATEST_PROTOCOL_VERSION`], with `capabilities: {"tools":
//!   {"listChanged": true}}`.
//! - **2026-07-28** ([`Era::Modern`], sessionless requests over HTTP):
//!   every request must carry `io.modelcontextprotocol/protocolVersion:
//!   "2026-07-28"` in its `_meta` (else -32600); `server/discover` lists
//!   the handshake revisions and 2026-07-28 with `capabilities: {"tools":
//!   {}}` (no list changes, so nobody listens for them); every result has
//!   `resultType: "complete"` and the server's `serverInfo` in its
//!   `_meta`, as that revision asks, and the lists `ttlMs` and
//!   `cacheScope`.

use std::borrow::Cow;
use std::io::Write as _;

use serde::Deserialize;
use serde_json::value::RawValue;

/// Handshake-era protocol versions answered as asked; any other gets the
/// newest.
pub const PROTOCOL_VERSIONS: [&str; 3] = ["2025-03-26", "2025-06-18", "2025-11-25"];
pub const LATEST_PROTOCOL_VERSION: &str = "2025-11-25";
/// The revision without a handshake.
pub const MODERN_PROTOCOL_VERSION: &str = "2026-07-28";
/// Where a 2026-07-28 request's `_meta` says its revision, and a result's
/// says who made it.
const PROTOCOL_VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
const SERVER_INFO_KEY: &str = "io.modelcontextprotocol/serverInfo";

/// The era a request is answered in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// A session opened by `initialize` (HTTP), or a stdio connection.
    Handshake,
    /// A sessionless 2026-07-28 request.
    Modern,
}

/// Who answers: its `serverInfo` (name and version), written once.
pub struct Server {
    /// `{"name":…,"version":…}`.
    info: String,
}

impl Server {
    pub fn new(name: &str) -> Self {
        let mut info = Vec::new();
        info.extend_from_slice(b"{\"name\":");
        string_to(&mut info, name);
        info.extend_from_slice(b",\"version\":");
        string_to(&mut info, env!("CARGO_PKG_VERSION"));
        info.push(b'}');
        Self {
            info: String::from_utf8(info).expect("JSON is UTF-8"),
        }
    }

    /// Closes a 2026-07-28 result: `,"_meta":{serverInfo}}`.
    fn close_modern(&self, json: &mut Vec<u8>) {
        json.extend_from_slice(b",\"_meta\":{\"");
        json.extend_from_slice(SERVER_INFO_KEY.as_bytes());
        json.extend_from_slice(b"\":");
        json.extend_from_slice(self.info.as_bytes());
        json.extend_from_slice(b"}}");
    }
}

/// One JSON-RPC message as read: borrowed, with the id kept verbatim.
#[derive(Deserialize)]
pub struct Message<'a> {
    #[serde(borrow)]
    pub jsonrpc: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub id: Option<&'a RawValue>,
    #[serde(borrow)]
    pub method: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub params: Option<&'a RawValue>,
}

impl Message<'_> {
    /// A request: it has both an id and a method.
    pub fn is_request(&self) -> bool {
        self.id.is_some() && self.method.is_some()
    }
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

/// A 2026-07-28 request's `params`, as far as its revision goes.
#[derive(Deserialize)]
struct Enveloped<'a> {
    #[serde(rename = "_meta", borrow)]
    meta: Option<Envelope<'a>>,
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(rename = "io.modelcontextprotocol/protocolVersion", borrow)]
    protocol_version: Option<Cow<'a, str>>,
}

/// Reads a body or a line: whether it is a batch, and its messages
/// (`None`: not JSON-RPC, or an empty batch).
pub fn parse(body: &[u8]) -> Option<(bool, Vec<Message<'_>>)> {
    let batch = body
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'[');
    let messages: Vec<Message<'_>> = if batch {
        serde_json::from_slice(body).ok()?
    } else {
        vec![serde_json::from_slice(body).ok()?]
    };
    (!messages.is_empty()).then_some((batch, messages))
}

/// Appends the answers to the requests among `messages` to `json` (an
/// array if `batch`); returns how many (0: nothing was appended).
pub fn answer_all(
    server: &Server,
    era: Era,
    messages: &[Message<'_>],
    batch: bool,
    json: &mut Vec<u8>,
) -> usize {
    let start = json.len();
    let mut answers = 0;
    if batch {
        json.push(b'[');
    }
    for m in messages {
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
                json,
                Some(id),
                -32600,
                "invalid request: jsonrpc must be \"2.0\"",
            );
            continue;
        }
        answer(server, era, id, method, m.params, json);
    }
    if answers == 0 {
        json.truncate(start);
    } else if batch {
        json.push(b']');
    }
    answers
}

/// Appends the answer to one request to `json`.
fn answer(
    server: &Server,
    era: Era,
    id: &RawValue,
    method: &str,
    params: Option<&RawValue>,
    json: &mut Vec<u8>,
) {
    let params = params.map(RawValue::get).unwrap_or("{}");
    let modern = era == Era::Modern;
    if modern {
        let revision = serde_json::from_str::<Enveloped<'_>>(params)
            .ok()
            .and_then(|p| p.meta)
            .and_then(|m| m.protocol_version);
        if revision.as_deref() != Some(MODERN_PROTOCOL_VERSION) {
            let message = format!(
                "invalid request: a sessionless request carries {PROTOCOL_VERSION_KEY} \"{MODERN_PROTOCOL_VERSION}\" in its _meta"
            );
            return error_to(json, Some(id), -32600, &message);
        }
    }
    match method {
        "initialize" if !modern => {
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
                b",\"capabilities\":{\"tools\":{\"listChanged\":true}},\"serverInfo\":",
            );
            json.extend_from_slice(server.info.as_bytes());
            json.extend_from_slice(b"}}");
        }
        "server/discover" if modern => {
            result_start(json, id);
            json.extend_from_slice(b"{\"resultType\":\"complete\",\"supportedVersions\":[");
            for v in PROTOCOL_VERSIONS {
                string_to(json, v);
                json.push(b',');
            }
            string_to(json, MODERN_PROTOCOL_VERSION);
            json.extend_from_slice(
                br#"],"capabilities":{"tools":{}},"ttlMs":0,"cacheScope":"public""#,
            );
            server.close_modern(json);
            json.push(b'}');
        }
        "ping" => {
            result_start(json, id);
            json.extend_from_slice(b"{}}");
        }
        "tools/list" => {
            result_start(json, id);
            if modern {
                json.extend_from_slice(
                    br#"{"resultType":"complete","ttlMs":0,"cacheScope":"public","#,
                );
            } else {
                json.push(b'{');
            }
            json.extend_from_slice(
                br#""tools":[{"name":"echo","description":"Returns its text argument.","inputSchema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}}]"#,
            );
            close_result(server, modern, json);
        }
        "tools/call" => match serde_json::from_str::<CallParams<'_>>(params) {
            Err(e) => error_to(json, Some(id), -32602, &format!("invalid params: {e}")),
            Ok(p) if p.name != "echo" => {
                error_to(json, Some(id), -32602, &format!("unknown tool: {}", p.name))
            }
            Ok(p) => {
                let args = p.arguments.map(RawValue::get).unwrap_or("{}");
                result_start(json, id);
                json.extend_from_slice(if modern {
                    br#"{"resultType":"complete","content":[{"type":"text","text":"#
                } else {
                    br#"{"content":[{"type":"text","text":"#
                });
                // Bad arguments are a tool error (the model can fix them).
                let is_error = match serde_json::from_str::<EchoArguments<'_>>(args) {
                    Ok(a) => {
                        string_to(json, &a.text);
                        false
                    }
                    Err(e) => {
                        string_to(json, &format!("echo needs a string `text`: {e}"));
                        true
                    }
                };
                json.extend_from_slice(if is_error {
                    br#"}],"isError":true"#
                } else {
                    br#"}],"isError":false"#
                });
                close_result(server, modern, json);
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

/// Ends a result object and its response.
fn close_result(server: &Server, modern: bool, json: &mut Vec<u8>) {
    if modern {
        server.close_modern(json);
    } else {
        json.push(b'}');
    }
    json.push(b'}');
}

fn result_start(json: &mut Vec<u8>, id: &RawValue) {
    json.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    json.extend_from_slice(id.get().as_bytes());
    json.extend_from_slice(b",\"result\":");
}

pub fn error_to(json: &mut Vec<u8>, id: Option<&RawValue>, code: i32, message: &str) {
    json.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    json.extend_from_slice(id.map_or("null", RawValue::get).as_bytes());
    let _ = write!(json, ",\"error\":{{\"code\":{code},\"message\":");
    string_to(json, message);
    json.extend_from_slice(b"}}");
}

pub fn string_to(json: &mut Vec<u8>, s: &str) {
    // Writing a &str to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *json, s);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answers to `body` in `era`, as JSON (`Null`: none).
    fn answers(era: Era, body: &str) -> serde_json::Value {
        let server = Server::new("lean");
        let (batch, messages) = parse(body.as_bytes()).expect("JSON-RPC");
        let mut json = b"prefix".to_vec();
        let n = answer_all(&server, era, &messages, batch, &mut json);
        assert_eq!(&json[..6], b"prefix", "appended, not replaced");
        if n == 0 {
            assert_eq!(json.len(), 6, "nothing appended without answers");
            return serde_json::Value::Null;
        }
        serde_json::from_slice(&json[6..]).expect("valid JSON")
    }

    const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;

    #[test]
    fn handshake_answers() {
        let init = answers(
            Era::Handshake,
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2024-11-05"}}"#,
        );
        assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
        assert_eq!(init["result"]["serverInfo"]["name"], "lean");
        let call = answers(
            Era::Handshake,
            r#"{"jsonrpc":"2.0","id":"c","method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}"#,
        );
        assert_eq!(
            call,
            serde_json::json!({"jsonrpc":"2.0","id":"c","result":{"content":[{"type":"text","text":"hi"}],"isError":false}})
        );
        let discover = answers(
            Era::Handshake,
            r#"{"jsonrpc":"2.0","id":1,"method":"server/discover"}"#,
        );
        assert_eq!(discover["error"]["code"], -32601);
        assert_eq!(
            answers(
                Era::Handshake,
                r#"[{"jsonrpc":"2.0","method":"notifications/initialized"}]"#
            ),
            serde_json::Value::Null
        );
        assert!(parse(b"[]").is_none());
        assert!(parse(b"nope").is_none());
    }

    #[test]
    fn modern_answers() {
        let discover = answers(
            Era::Modern,
            &format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{{{META}}}}}"#
            ),
        );
        let r = &discover["result"];
        assert_eq!(r["resultType"], "complete");
        assert_eq!(
            r["supportedVersions"],
            serde_json::json!(["2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"])
        );
        assert_eq!(r["capabilities"], serde_json::json!({"tools": {}}));
        assert_eq!(r["_meta"][SERVER_INFO_KEY]["name"], "lean");

        let call = answers(
            Era::Modern,
            &format!(
                r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"a\"b"}},{META}}}}}"#
            ),
        );
        let r = &call["result"];
        assert_eq!(r["resultType"], "complete");
        assert_eq!(r["content"][0]["text"], "a\"b");
        assert_eq!(r["isError"], false);
        assert_eq!(r["_meta"][SERVER_INFO_KEY]["name"], "lean");

        let list = answers(
            Era::Modern,
            &format!(r#"{{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{{{META}}}}}"#),
        );
        assert_eq!(list["result"]["tools"][0]["name"], "echo");
        assert_eq!(list["result"]["cacheScope"], "public");
        assert_eq!(list["result"]["ttlMs"], 0);

        let bare = answers(
            Era::Modern,
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}"#,
        );
        assert_eq!(bare["error"]["code"], -32600, "no revision in _meta");
        let init = answers(
            Era::Modern,
            &format!(r#"{{"jsonrpc":"2.0","id":5,"method":"initialize","params":{{{META}}}}}"#),
        );
        assert_eq!(init["error"]["code"], -32601);
    }
}
