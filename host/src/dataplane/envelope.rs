//! What the data path reads of a JSON-RPC message, and the splices the raw
//! executor makes, without a typed parse.
//!
//! A request is read only as far as the plan ([`super::plan`]) and routing
//! need: `method`, `id`, the routed name (`params.name`, `params.uri`,
//! `params.ref`), the keys of `params._meta` and whether it carries a
//! 2026-07-28 retry's `requestState`. Every value is a slice of the original bytes
//! ([`RawValue`]), so the message leaves as it came, but for the spans
//! replaced: the id (Vigil's own toward the backend, the client's back) and
//! the name (the backend's, under prefix naming). Anything this module does
//! not expect (a batch, an escaped method, a field it does not know) makes
//! the message unreadable here: the typed path then takes it, whose parser
//! is the one that answers malformed input. Whether what it read may go
//! raw is the plan's to say, not this module's.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

/// The request methods the raw path can forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RawMethod {
    ToolsCall,
    ResourcesRead,
    PromptsGet,
    Complete,
}

impl RawMethod {
    fn of(method: &str) -> Option<Self> {
        Some(match method {
            "tools/call" => Self::ToolsCall,
            "resources/read" => Self::ResourcesRead,
            "prompts/get" => Self::PromptsGet,
            "completion/complete" => Self::Complete,
            _ => return None,
        })
    }

    /// Whether the method's `Mcp-Name` header (2026-07-28) names what it
    /// routes by: a tool, a prompt, a URI (a completion's reference is not).
    pub fn names_itself(self) -> bool {
        self != Self::Complete
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::ToolsCall => "tools/call",
            Self::ResourcesRead => "resources/read",
            Self::PromptsGet => "prompts/get",
            Self::Complete => "completion/complete",
        }
    }
}

/// What a routed name is: a tool or prompt name, or a resource URI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    Tool,
    Prompt,
    Uri,
}

/// A request the raw path may forward, borrowed from its body.
#[derive(Debug)]
pub struct Request<'a> {
    pub method: RawMethod,
    /// The client's id, as written.
    pub id: &'a RawValue,
    /// What the request names, decoded.
    pub name: Cow<'a, str>,
    pub target: Target,
    /// Where the name's JSON string sits in the body.
    name_span: (usize, usize),
    id_span: (usize, usize),
    /// `params.arguments`, as written (for the audit).
    pub arguments: Option<&'a RawValue>,
    /// Whether this is a `call_tool` the executor turned into the call of
    /// the tool it names ([`Request::retarget`]): set by the executor,
    /// never read from a body.
    pub retargeted: bool,
    /// `params._meta.progressToken`, as written, and where it sits.
    pub progress: Option<(&'a RawValue, (usize, usize))>,
    /// What `params._meta` says of the client↔gateway hop.
    pub meta: Meta<'a>,
    /// `params.requestState` (a 2026-07-28 retry), as written.
    pub request_state: Option<&'a RawValue>,
    /// Whether `params.inputResponses` is present (a 2026-07-28 retry).
    pub input_responses: bool,
}

/// The per-hop part of `params._meta`: the `io.modelcontextprotocol/`
/// entries a 2026-07-28 request carries (its revision, capabilities, client
/// info, log level), which a 2025-era request has none of.
#[derive(Debug, Default)]
pub struct Meta<'a> {
    /// Whether any `io.modelcontextprotocol/` entry is present.
    pub hop_keys: bool,
    /// `io.modelcontextprotocol/protocolVersion`, when it is a string.
    pub protocol_version: Option<Cow<'a, str>>,
    /// `io.modelcontextprotocol/clientCapabilities`, as written.
    pub capabilities: Option<&'a RawValue>,
    /// Whether `io.modelcontextprotocol/logLevel` is present: the call's
    /// log messages are the client's to get, as they come.
    pub log_level: bool,
}

/// The `_meta` key of a 2026-07-28 request's revision.
const PROTOCOL_VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
/// The `_meta` key of a 2026-07-28 request's client capabilities.
const CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";

/// The prefix of every `requestState` Vigil seals itself (MRTR across the
/// eras); any other state is a backend's and passes untouched.
pub const VIGIL_STATE_PREFIX: &str = "vigil1.";

impl Request<'_> {
    /// Whether the request is the retry of a call Vigil bridged across the
    /// eras (its `requestState` is Vigil's own).
    pub fn resumes_bridged_call(&self) -> bool {
        self.request_state.is_some_and(|s| {
            serde_json::from_str::<&str>(s.get()).is_ok_and(|s| s.starts_with(VIGIL_STATE_PREFIX))
        })
    }
}

/// The byte range of `part` inside `whole`; `part` must be borrowed from it.
fn span(whole: &str, part: &str) -> Option<(usize, usize)> {
    let start = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    let end = start + part.len();
    (end <= whole.len()).then_some((start, end))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope<'a> {
    #[serde(borrow)]
    jsonrpc: &'a str,
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    method: &'a str,
    #[serde(borrow)]
    params: Option<&'a RawValue>,
}

/// `params` of `tools/call` and `prompts/get`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NamedParams<'a> {
    #[serde(borrow)]
    name: &'a RawValue,
    #[serde(borrow)]
    arguments: Option<&'a RawValue>,
    #[serde(borrow, rename = "_meta")]
    meta: Option<&'a RawValue>,
    #[serde(borrow, rename = "requestState")]
    request_state: Option<&'a RawValue>,
    #[serde(borrow, rename = "inputResponses")]
    input_responses: Option<&'a RawValue>,
}

/// `params` of `resources/read`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UriParams<'a> {
    #[serde(borrow)]
    uri: &'a RawValue,
    #[serde(borrow, rename = "_meta")]
    meta: Option<&'a RawValue>,
    #[serde(borrow, rename = "requestState")]
    request_state: Option<&'a RawValue>,
    #[serde(borrow, rename = "inputResponses")]
    input_responses: Option<&'a RawValue>,
}

/// `params` of `completion/complete`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CompleteParams<'a> {
    #[serde(borrow, rename = "ref")]
    reference: &'a RawValue,
    #[serde(borrow)]
    argument: &'a RawValue,
    #[serde(borrow)]
    context: Option<&'a RawValue>,
    #[serde(borrow, rename = "_meta")]
    meta: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Reference<'a> {
    #[serde(borrow, rename = "type")]
    kind: &'a str,
    #[serde(borrow)]
    name: Option<&'a RawValue>,
    #[serde(borrow)]
    uri: Option<&'a RawValue>,
}

/// The progress token of `_meta` (if any) and its per-hop entries; `None`
/// (unreadable here) when `_meta` is not an object or the token is neither
/// a string nor an integer, as MCP says it must be.
fn read_meta(meta: Option<&RawValue>) -> Option<(Option<&RawValue>, Meta<'_>)> {
    let Some(meta) = meta else {
        return Some((None, Meta::default()));
    };
    let keys: std::collections::HashMap<&str, &RawValue> = serde_json::from_str(meta.get()).ok()?;
    let hop_keys = keys
        .keys()
        .any(|k| k.starts_with("io.modelcontextprotocol/"));
    let protocol_version = keys
        .get(PROTOCOL_VERSION_KEY)
        .and_then(|v| serde_json::from_str::<Cow<'_, str>>(v.get()).ok());
    let capabilities = keys.get(CAPABILITIES_KEY).copied();
    let log_level = keys.contains_key("io.modelcontextprotocol/logLevel");
    let progress = match keys.get("progressToken") {
        None => None,
        Some(t) if matches!(t.get().as_bytes().first(), Some(b'"' | b'0'..=b'9' | b'-')) => {
            Some(*t)
        }
        Some(_) => return None,
    };
    Some((
        progress,
        Meta {
            hop_keys,
            protocol_version,
            capabilities,
            log_level,
        },
    ))
}

/// A JSON string, decoded, with its span in `body`.
fn string_at<'a>(body: &'a str, raw: &'a RawValue) -> Option<(Cow<'a, str>, (usize, usize))> {
    let text = raw.get();
    let decoded: Cow<'a, str> = if text.contains('\\') {
        Cow::Owned(serde_json::from_str::<String>(text).ok()?)
    } else {
        Cow::Borrowed(serde_json::from_str::<&str>(text).ok()?)
    };
    Some((decoded, span(body, text)?))
}

impl<'a> Request<'a> {
    /// `body` as a request the raw path may take, or `None` (the typed path
    /// takes it).
    pub fn parse(body: &'a str) -> Option<Self> {
        if !body.trim_start().starts_with('{') {
            return None; // a batch, or not JSON-RPC at all
        }
        let env: Envelope<'a> = serde_json::from_str(body).ok()?;
        if env.jsonrpc != "2.0" {
            return None;
        }
        let method = RawMethod::of(env.method)?;
        let id = env.id?;
        if !matches!(id.get().as_bytes().first(), Some(b'"' | b'0'..=b'9' | b'-')) {
            return None; // ids are strings or numbers
        }
        let params = env.params?.get();
        let (name_raw, target, arguments, meta, request_state, input_responses) = match method {
            RawMethod::ToolsCall | RawMethod::PromptsGet => {
                let p: NamedParams<'a> = serde_json::from_str(params).ok()?;
                let target = if method == RawMethod::ToolsCall {
                    Target::Tool
                } else {
                    Target::Prompt
                };
                let retry = (p.request_state, p.input_responses.is_some());
                (p.name, target, p.arguments, p.meta, retry.0, retry.1)
            }
            RawMethod::ResourcesRead => {
                let p: UriParams<'a> = serde_json::from_str(params).ok()?;
                let retry = (p.request_state, p.input_responses.is_some());
                (p.uri, Target::Uri, None, p.meta, retry.0, retry.1)
            }
            RawMethod::Complete => {
                let p: CompleteParams<'a> = serde_json::from_str(params).ok()?;
                let _ = (p.argument, p.context);
                let r: Reference<'a> = serde_json::from_str(p.reference.get()).ok()?;
                match (r.kind, r.name, r.uri) {
                    ("ref/prompt", Some(name), None) => {
                        (name, Target::Prompt, None, p.meta, None, false)
                    }
                    ("ref/resource", None, Some(uri)) => {
                        (uri, Target::Uri, None, p.meta, None, false)
                    }
                    _ => return None,
                }
            }
        };
        let (progress, meta) = read_meta(meta)?;
        let progress = match progress {
            Some(t) => Some((t, span(body, t.get())?)),
            None => None,
        };
        let (name, name_span) = string_at(body, name_raw)?;
        Some(Request {
            method,
            id,
            name,
            target,
            name_span,
            id_span: span(body, id.get())?,
            arguments,
            retargeted: false,
            progress,
            meta,
            request_state,
            input_responses,
        })
    }

    /// The body to send on: `body` with the id replaced by `id` (JSON), the
    /// progress token (if any) by `id` too, and, when `name` is given, the
    /// routed name by it (as the backend knows it). Nothing else changes.
    pub fn rewrite(&self, body: &str, id: &str, name: Option<&str>) -> String {
        let name = name.map(|n| serde_json::Value::from(n).to_string());
        let mut spans = vec![(self.id_span, id)];
        if let Some((_, at)) = self.progress {
            spans.push((at, id));
        }
        if let Some(n) = &name {
            spans.push((self.name_span, n.as_str()));
        }
        splice(body, spans)
    }
}

impl Request<'_> {
    /// The body of this `tools/call` calling `name` with `arguments` (JSON
    /// as written) instead: a `call_tool` turned into the call of the tool
    /// it names. Only the name and the arguments change; `None` for any
    /// other request, or one without arguments.
    pub fn retarget(&self, body: &str, name: &str, arguments: &str) -> Option<String> {
        if self.method != RawMethod::ToolsCall {
            return None;
        }
        let at = span(body, self.arguments?.get())?;
        let name = serde_json::Value::from(name).to_string();
        Some(splice(body, vec![(self.name_span, &name), (at, arguments)]))
    }
}

/// `text` with each span replaced; spans must not overlap.
fn splice(text: &str, mut spans: Vec<((usize, usize), &str)>) -> String {
    spans.sort_by_key(|((start, _), _)| *start);
    let extra: usize = spans.iter().map(|(_, s)| s.len()).sum();
    let mut out = String::with_capacity(text.len() + extra);
    let mut at = 0;
    for ((start, end), with) in spans {
        out.push_str(&text[at..start]);
        out.push_str(with);
        at = end;
    }
    out.push_str(&text[at..]);
    out
}

/// What a message from the backend is, for the request it answers.
#[derive(Debug)]
pub enum Incoming<'a> {
    /// The response to the request (`error`: it is a JSON-RPC error).
    Response { error: bool },
    /// A response to something else: not this request's.
    Other,
    /// A notification (`method`).
    Notification(&'a str),
    /// A request of the backend's own (`method`, its id as written).
    Request(&'a str, &'a RawValue),
}

#[derive(Deserialize)]
struct AnyMessage<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    method: Option<&'a str>,
    #[serde(borrow)]
    result: Option<&'a RawValue>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
}

/// A message from the backend, read against the id Vigil sent (`ours`,
/// decoded): `None` when it is not a JSON-RPC message.
pub fn classify<'a>(message: &'a str, ours: &str) -> Option<Incoming<'a>> {
    let m: AnyMessage<'a> = serde_json::from_str(message).ok()?;
    Some(match (m.method, m.id) {
        (Some(method), None) => Incoming::Notification(method),
        (Some(method), Some(id)) => Incoming::Request(method, id),
        (None, Some(id)) if m.result.is_some() || m.error.is_some() => {
            let is_ours = serde_json::from_str::<&str>(id.get()).is_ok_and(|s| s == ours)
                || serde_json::from_str::<String>(id.get()).is_ok_and(|s| s == ours);
            if is_ours {
                Incoming::Response {
                    error: m.error.is_some(),
                }
            } else {
                Incoming::Other
            }
        }
        _ => return None,
    })
}

/// The response `message` with its id replaced by `id` (JSON): the
/// client's id back on the backend's answer, every other byte as the
/// backend wrote it. `None` if `message` is not a response.
pub fn with_id(message: &str, id: &str) -> Option<String> {
    let m: AnyMessage<'_> = serde_json::from_str(message).ok()?;
    let at = span(message, m.id?.get())?;
    Some(splice(message, vec![(at, id)]))
}

/// A backend's `notifications/progress` for Vigil's token `ours`, with the
/// client's token (`token`, JSON as the client wrote it) put in its place
/// and every other byte as the backend wrote it. `None` for any other
/// message.
pub fn progress_for(message: &str, ours: &str, token: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Note<'a> {
        #[serde(borrow)]
        method: &'a str,
        #[serde(borrow)]
        params: &'a RawValue,
    }
    #[derive(Deserialize)]
    struct Params<'a> {
        #[serde(borrow, rename = "progressToken")]
        token: &'a RawValue,
    }
    let n: Note<'_> = serde_json::from_str(message).ok()?;
    if n.method != "notifications/progress" {
        return None;
    }
    let p: Params<'_> = serde_json::from_str(n.params.get()).ok()?;
    (serde_json::from_str::<&str>(p.token.get()).ok()? == ours).then_some(())?;
    Some(splice(
        message,
        vec![(span(message, p.token.get())?, token)],
    ))
}

/// Whether a `tools/call` result says `isError: true` (the backend's tool
/// failed): read without decoding the rest of the result.
pub fn tool_failed(message: &str) -> bool {
    #[derive(Deserialize)]
    struct Outer<'a> {
        #[serde(borrow)]
        result: Option<&'a RawValue>,
    }
    #[derive(Deserialize)]
    struct Flag {
        #[serde(rename = "isError")]
        is_error: Option<bool>,
    }
    serde_json::from_str::<Outer<'_>>(message)
        .ok()
        .and_then(|o| o.result)
        .and_then(|r| serde_json::from_str::<Flag>(r.get()).ok())
        .and_then(|f| f.is_error)
        .unwrap_or(false)
}

/// The members of a response's `result` the raw path looks at for a
/// 2026-07-28 client, borrowed.
#[derive(Deserialize)]
struct ModernResult<'a> {
    #[serde(borrow, rename = "resultType")]
    result_type: Option<&'a RawValue>,
    #[serde(borrow, rename = "cacheScope")]
    cache_scope: Option<&'a RawValue>,
    #[serde(borrow, rename = "_meta")]
    meta: Option<std::collections::HashMap<&'a str, &'a RawValue>>,
}

/// The `result` of response `message`, as written.
fn result_of(message: &str) -> Option<&RawValue> {
    #[derive(Deserialize)]
    struct Outer<'a> {
        #[serde(borrow)]
        result: Option<&'a RawValue>,
    }
    serde_json::from_str::<Outer<'_>>(message).ok()?.result
}

/// Whether a result for a 2026-07-28 client already says what that
/// revision asks of every result: its `resultType`, and the server that
/// made it (`_meta` `serverInfo`). A 2026-07-28 backend writes both; a
/// message that is no result says nothing to add.
pub fn modern_complete(message: &str, server_info_key: &str) -> bool {
    let Some(result) = result_of(message) else {
        return true;
    };
    serde_json::from_str::<ModernResult<'_>>(result.get()).is_ok_and(|r| {
        r.result_type.is_some() && r.meta.is_some_and(|m| m.contains_key(server_info_key))
    })
}

/// The `cacheScope` a result says, as written (`None` when it has none or
/// the message is no result).
pub fn cache_scope(message: &str) -> Option<&str> {
    let result = result_of(message)?;
    let r: ModernResult<'_> = serde_json::from_str(result.get()).ok()?;
    r.cache_scope.map(RawValue::get)
}

/// `message` with its result's `cacheScope` set to `scope` (JSON), in
/// place of the one written or as the result's first member; every other
/// byte as it was. `None` when the message is no result object.
pub fn with_cache_scope(message: &str, scope: &str) -> Option<String> {
    let result = result_of(message)?;
    let r: ModernResult<'_> = serde_json::from_str(result.get()).ok()?;
    if let Some(old) = r.cache_scope {
        return Some(splice(message, vec![(span(message, old.get())?, scope)]));
    }
    let (start, end) = span(message, result.get())?;
    let open = start + message[start..end].find('{')? + 1;
    let empty = message[open..end].trim_start().starts_with('}');
    let member = format!(r#""cacheScope":{scope}{}"#, if empty { "" } else { "," });
    Some(splice(message, vec![((open, open), member.as_str())]))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CALL: &str = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"demo__echo","arguments":{"text":"hi \"there\""}}}"#;

    #[test]
    fn a_tool_call_is_read_and_rewritten_in_place() {
        let r = Request::parse(CALL).unwrap();
        assert_eq!(r.method, RawMethod::ToolsCall);
        assert_eq!(r.id.get(), "7");
        assert_eq!(r.name, "demo__echo");
        assert_eq!(r.target, Target::Tool);
        assert_eq!(r.arguments.unwrap().get(), r#"{"text":"hi \"there\""}"#);
        let out = r.rewrite(CALL, r#""vr-1""#, Some("echo"));
        assert_eq!(
            out,
            r#"{"jsonrpc":"2.0","id":"vr-1","method":"tools/call","params":{"name":"echo","arguments":{"text":"hi \"there\""}}}"#
        );
        // Without naming, only the id changes.
        let out = r.rewrite(CALL, r#""vr-1""#, None);
        assert_eq!(out, CALL.replacen("7", r#""vr-1""#, 1));
    }

    #[test]
    fn a_call_tool_is_retargeted_to_the_tool_it_names_and_read_again() {
        let body = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"_meta":{"progressToken":"p"},"arguments":{"tool_name":"demo__echo","arguments":{"text":"x"}},"name":"call_tool"}}"#;
        let r = Request::parse(body).unwrap();
        let out = r
            .retarget(body, "demo__\"echo\"", r#"{"text":"x"}"#)
            .unwrap();
        assert_eq!(
            out,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"_meta":{"progressToken":"p"},"arguments":{"text":"x"},"name":"demo__\"echo\""}}"#
        );
        let again = Request::parse(&out).unwrap();
        assert_eq!(again.name, "demo__\"echo\"");
        assert_eq!(again.arguments.unwrap().get(), r#"{"text":"x"}"#);
        assert!(!again.retargeted, "set by the executor, never read");
        // Only a tools/call with arguments.
        let bare =
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"call_tool"}}"#;
        assert!(
            Request::parse(bare)
                .unwrap()
                .retarget(bare, "a", "{}")
                .is_none()
        );
        let prompt = r#"{"jsonrpc":"2.0","id":3,"method":"prompts/get","params":{"name":"p","arguments":{}}}"#;
        assert!(
            Request::parse(prompt)
                .unwrap()
                .retarget(prompt, "a", "{}")
                .is_none()
        );
    }

    #[test]
    fn escaped_names_are_decoded_and_replaced_whole() {
        let body =
            r#"{"jsonrpc":"2.0","id":"a","method":"prompts/get","params":{"name":"p\u0041"}}"#;
        let r = Request::parse(body).unwrap();
        assert_eq!(r.name, "pA");
        assert_eq!(r.target, Target::Prompt);
        assert_eq!(
            r.rewrite(body, "1", Some("x\"y")),
            r#"{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"x\"y"}}"#
        );
    }

    #[test]
    fn resources_and_completions_name_their_target() {
        let read =
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///a"}}"#;
        let r = Request::parse(read).unwrap();
        assert_eq!((r.target, &*r.name), (Target::Uri, "file:///a"));
        let complete = r#"{"jsonrpc":"2.0","id":2,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"b__p"},"argument":{"name":"x","value":"y"}}}"#;
        let r = Request::parse(complete).unwrap();
        assert_eq!((r.target, &*r.name), (Target::Prompt, "b__p"));
        assert!(
            r.rewrite(complete, "2", Some("p"))
                .contains(r#"{"type":"ref/prompt","name":"p"}"#)
        );
    }

    #[test]
    fn what_the_raw_path_does_not_know_is_left_to_the_typed_one() {
        let refused = [
            // a batch
            format!("[{CALL}]"),
            // a notification (no id)
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"a"}}"#.into(),
            // another method
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#.into(),
            // a progress token that is neither a string nor a number
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","_meta":{"progressToken":{}}}}"#.into(),
            // a task-augmented call: its task lives on the typed path's session
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","task":{}}}"#.into(),
            // an unknown envelope member
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"},"x":1}"#.into(),
            // duplicate keys
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/call","params":{"name":"a"}}"#.into(),
            // a name that is not a string
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":3}}"#.into(),
            // an object id
            r#"{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{"name":"a"}}"#.into(),
            "not json".into(),
        ];
        for body in refused {
            assert!(Request::parse(&body).is_none(), "taken raw: {body}");
        }
        let own_meta = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","_meta":{"trace":"x"}}}"#;
        assert!(Request::parse(own_meta).is_some(), "the caller's own _meta");
    }

    #[test]
    fn a_progress_token_is_replaced_by_ours_and_put_back_on_progress() {
        let call = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"demo__slow","_meta":{"progressToken":"tok-1"}}}"#;
        let r = Request::parse(call).unwrap();
        assert_eq!(r.progress.map(|(t, _)| t.get()), Some(r#""tok-1""#));
        assert_eq!(
            r.rewrite(call, r#""vr-9""#, Some("slow")),
            r#"{"jsonrpc":"2.0","id":"vr-9","method":"tools/call","params":{"name":"slow","_meta":{"progressToken":"vr-9"}}}"#
        );
        let numeric = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","_meta":{"progressToken":42}}}"#;
        assert_eq!(
            Request::parse(numeric)
                .unwrap()
                .progress
                .map(|(t, _)| t.get()),
            Some("42")
        );

        let note = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"vr-9","progress":1,"total":3}}"#;
        assert_eq!(
            progress_for(note, "vr-9", r#""tok-1""#).as_deref(),
            Some(
                r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"tok-1","progress":1,"total":3}}"#
            )
        );
        assert_eq!(
            progress_for(note, "vr-8", "1"),
            None,
            "another request's progress"
        );
        let log = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}"#;
        assert_eq!(progress_for(log, "vr-9", "1"), None);
    }

    #[test]
    fn backend_messages_are_told_apart_by_our_id() {
        assert!(matches!(
            classify(r#"{"jsonrpc":"2.0","id":"vr-1","result":{}}"#, "vr-1"),
            Some(Incoming::Response { error: false })
        ));
        assert!(matches!(
            classify(
                r#"{"jsonrpc":"2.0","id":"vr-1","error":{"code":1,"message":"x"}}"#,
                "vr-1"
            ),
            Some(Incoming::Response { error: true })
        ));
        assert!(matches!(
            classify(r#"{"jsonrpc":"2.0","id":"vr-2","result":{}}"#, "vr-1"),
            Some(Incoming::Other)
        ));
        assert!(matches!(
            classify(
                r#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#,
                "vr-1"
            ),
            Some(Incoming::Notification("notifications/message"))
        ));
        assert!(matches!(
            classify(r#"{"jsonrpc":"2.0","id":0,"method":"ping"}"#, "vr-1"),
            Some(Incoming::Request("ping", _))
        ));
        assert!(classify("data", "vr-1").is_none());
    }

    #[test]
    fn the_answer_gets_the_clients_id_and_keeps_every_other_byte() {
        let answer = "{\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"hi\"}],\"isError\":false},\n \"id\" : \"vr-9\",\"jsonrpc\":\"2.0\"}";
        let back = with_id(answer, "7").unwrap();
        assert_eq!(back, answer.replace("\"vr-9\"", "7"));
        assert!(!tool_failed(answer));
        assert!(tool_failed(
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":true}}"#
        ));
        assert!(!tool_failed(
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}}"#
        ));
    }

    #[test]
    fn a_2026_07_28_request_is_read_with_its_hop_metadata_and_retry() {
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","requestState":"vigil1.x","inputResponses":{"k":{}},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","progressToken":3}}}"#;
        let r = Request::parse(body).unwrap();
        assert!(r.meta.hop_keys);
        assert_eq!(r.meta.protocol_version.as_deref(), Some("2026-07-28"));
        assert!(r.input_responses);
        assert!(r.resumes_bridged_call());
        let theirs = body.replace("vigil1.x", "backend-state");
        assert!(!Request::parse(&theirs).unwrap().resumes_bridged_call());
        let plain = Request::parse(CALL).unwrap();
        assert!(!plain.meta.hop_keys && plain.request_state.is_none() && !plain.input_responses);
    }

    #[test]
    fn a_results_cache_scope_is_read_and_set_in_place() {
        let key = "io.modelcontextprotocol/serverInfo";
        let scoped = r#"{"jsonrpc":"2.0","id":1,"result":{"contents":[],"cacheScope":"public","resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":{}}}}"#;
        assert_eq!(cache_scope(scoped), Some(r#""public""#));
        assert!(modern_complete(scoped, key));
        assert_eq!(
            with_cache_scope(scoped, r#""private""#).unwrap(),
            scoped.replace(r#""public""#, r#""private""#)
        );
        let bare = r#"{"jsonrpc":"2.0","id":1,"result":{"contents":[]}}"#;
        assert_eq!(cache_scope(bare), None);
        assert!(!modern_complete(bare, key), "no resultType, no serverInfo");
        assert_eq!(
            with_cache_scope(bare, r#""private""#).unwrap(),
            r#"{"jsonrpc":"2.0","id":1,"result":{"cacheScope":"private","contents":[]}}"#
        );
        let empty = r#"{"jsonrpc":"2.0","id":1,"result":{ }}"#;
        assert_eq!(
            with_cache_scope(empty, r#""private""#).unwrap(),
            r#"{"jsonrpc":"2.0","id":1,"result":{"cacheScope":"private" }}"#
        );
        let error = r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}}"#;
        assert!(modern_complete(error, key));
        assert_eq!(with_cache_scope(error, r#""private""#), None);
    }
}
