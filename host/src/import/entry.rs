//! One client server entry turned into one backend: which transport, its
//! command or URL, its env or headers in Vigil's reference syntax, and a
//! note for every field that is not carried over as it was.

use super::Note;
use super::json::{self, JsonPath, JsonValue};
use super::refs::{self, Resolver, Translated};
use super::secrets;
use crate::config::RESERVED_HEADERS;

/// A server Vigil can run, before it is named (see `names.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    /// Where the entry is, e.g. `mcpServers.github`.
    pub path: JsonPath,
    /// The server's own name in the file.
    pub name: String,
    /// `false` for a `"disabled": true` entry.
    pub enabled: bool,
    pub kind: Kind,
    /// Everything the user should know about this entry, in field order.
    pub notes: Vec<Note>,
    /// Environment variables its values read.
    pub vars: Vec<String>,
    /// Whether it holds literal values that look like secrets.
    pub literal_secrets: bool,
}

/// How Vigil reaches the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Stdio {
        command: String,
        args: Vec<String>,
        env: Vec<(String, String)>,
        cwd: Option<String>,
    },
    Http {
        url: String,
        headers: Vec<(String, String)>,
    },
}

/// An entry Vigil cannot run, with why and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub path: JsonPath,
    pub reason: String,
}

impl Skipped {
    /// The note that reports it.
    pub fn note(&self) -> Note {
        Note::warning(self.path.clone(), format!("not imported: {}", self.reason))
    }
}

/// The transport an entry declares with `"type"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Declared {
    Unsaid,
    Stdio,
    Http,
}

/// The fields of an entry as read, each with its path.
#[derive(Default)]
struct Fields {
    command: Option<(JsonPath, String)>,
    args: Option<(JsonPath, Vec<String>)>,
    env: Option<(JsonPath, Vec<(String, String)>)>,
    cwd: Option<(JsonPath, String)>,
    url: Option<(JsonPath, String)>,
    headers: Option<(JsonPath, Vec<(String, String)>)>,
}

/// Maps the entry `name` at `path`.
pub fn map(
    name: &str,
    path: JsonPath,
    value: JsonValue<'_>,
    r: &Resolver<'_>,
) -> Result<Backend, Skipped> {
    let skip = |reason: String| Skipped {
        path: path.clone(),
        reason,
    };
    let JsonValue::Object(entry) = value else {
        return Err(skip(format!(
            "expected an object with \"command\" or \"url\", found {}",
            json::kind(&value)
        )));
    };
    let mut notes = Vec::new();
    let mut declared = Declared::Unsaid;
    let mut enabled = true;
    let mut f = Fields::default();
    let entry: Vec<_> = entry.into_iter().collect();
    let fields: Vec<String> = entry.iter().map(|(k, _)| k.to_string()).collect();
    for (key, value) in entry {
        let at = path.key(&key);
        match key.as_ref() {
            "type" => {
                declared = match value {
                    JsonValue::String(t) => match t.as_ref() {
                        "stdio" => Declared::Stdio,
                        "http" | "streamable-http" | "streamableHttp" | "streamable_http" => {
                            Declared::Http
                        }
                        "sse" => return Err(skip(
                            "it uses the legacy HTTP+SSE transport (\"type\": \"sse\"), and Vigil reaches HTTP servers over streamable HTTP only: if the server also serves streamable HTTP (often at /mcp), set \"type\" to \"http\" with that URL and import again".to_owned(),
                        )),
                        other => return Err(skip(format!(
                            "\"type\" is \"{other}\", a transport Vigil does not speak: it runs \"stdio\" servers and reaches \"http\" (streamable HTTP) ones"
                        ))),
                    },
                    other => return Err(skip(format!(
                        "\"type\" must be a string like \"stdio\" or \"http\", found {}",
                        json::kind(&other)
                    ))),
                }
            }
            "command" => f.command = Some((at.clone(), string(&at, value).map_err(skip)?)),
            "args" => f.args = Some((at.clone(), args(&at, value, &mut notes).map_err(skip)?)),
            "env" => f.env = Some((at.clone(), pairs(&at, value, &mut notes).map_err(skip)?)),
            "cwd" => f.cwd = Some((at.clone(), string(&at, value).map_err(skip)?)),
            "url" => f.url = Some((at.clone(), string(&at, value).map_err(skip)?)),
            "headers" => f.headers = Some((at.clone(), pairs(&at, value, &mut notes).map_err(skip)?)),
            "disabled" => match value {
                JsonValue::Boolean(true) => {
                    enabled = false;
                    notes.push(Note::info(
                        at,
                        "imported as enabled = false (kept in the file, not started)",
                    ));
                }
                JsonValue::Boolean(false) => {}
                other => notes.push(Note::warning(
                    at,
                    format!("not imported: expected true or false, found {}", json::kind(&other)),
                )),
            },
            other => notes.push(Note::warning(at, format!("not imported ({})", unknown(other)))),
        }
    }
    let transport = match (declared, &f.command, &f.url) {
        (Declared::Stdio, Some(_), _) | (Declared::Unsaid, Some(_), None) => Declared::Stdio,
        (Declared::Http, _, Some(_)) | (Declared::Unsaid, None, Some(_)) => Declared::Http,
        (Declared::Unsaid, Some(_), Some(_)) => {
            return Err(skip(
                "it has both \"command\" and \"url\": set \"type\" to \"stdio\" or \"http\" to say which to import".to_owned(),
            ));
        }
        (Declared::Stdio, None, _) => {
            return Err(skip("a stdio server needs a \"command\"".to_owned()));
        }
        (Declared::Http, _, None) => {
            return Err(skip("an http server needs a \"url\"".to_owned()));
        }
        (Declared::Unsaid, None, None) => {
            return Err(skip(
                "it has neither \"command\" (a server to start) nor \"url\" (a server to reach)"
                    .to_owned(),
            ));
        }
    };
    let mut b = Backend {
        path: path.clone(),
        name: name.to_owned(),
        enabled,
        kind: Kind::Stdio {
            command: String::new(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
        },
        notes: Vec::new(),
        vars: Vec::new(),
        literal_secrets: false,
    };
    b.kind = if transport == Declared::Stdio {
        for (field, at) in [
            ("url", f.url.as_ref().map(|(p, _)| p)),
            ("headers", f.headers.as_ref().map(|(p, _)| p)),
        ]
        .into_iter()
        .filter_map(|(n, p)| p.map(|p| (n, p)))
        {
            notes.push(Note::warning(
                at.clone(),
                format!("not imported: {field} apply to HTTP servers, and this one is started over stdio"),
            ));
        }
        stdio(f, r, &mut notes, &mut b).map_err(skip)?
    } else {
        for at in [
            f.command.as_ref().map(|(p, _)| p),
            f.args.as_ref().map(|(p, _)| p),
            f.env.as_ref().map(|(p, _)| p),
            f.cwd.as_ref().map(|(p, _)| p),
        ]
        .into_iter()
        .flatten()
        {
            notes.push(Note::warning(
                at.clone(),
                "not imported: it applies to a server Vigil starts, and this one is reached over HTTP",
            ));
        }
        http(f, name, declared, r, &mut notes, &mut b).map_err(skip)?
    };
    b.notes = in_field_order(notes, &path, &fields);
    Ok(b)
}

/// `notes` sorted by the field they are about, in the entry's order
/// (stable: notes about one field keep theirs); notes about the entry
/// itself first.
fn in_field_order(mut notes: Vec<Note>, entry: &JsonPath, fields: &[String]) -> Vec<Note> {
    let prefixes: Vec<String> = fields.iter().map(|k| entry.key(k).to_string()).collect();
    notes.sort_by_key(|n| {
        let p = n.path.to_string();
        prefixes
            .iter()
            .position(|f| {
                p.strip_prefix(f.as_str())
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
            })
            .map_or(0, |i| i + 1)
    });
    notes
}

fn stdio(
    f: Fields,
    r: &Resolver<'_>,
    notes: &mut Vec<Note>,
    b: &mut Backend,
) -> Result<Kind, String> {
    let (at, command) = f.command.ok_or("a stdio server needs a \"command\"")?;
    let command = b.take(translate(&command, &at, r, notes));
    if command.trim().is_empty() {
        return Err("its \"command\" is empty".to_owned());
    }
    let mut args = Vec::new();
    if let Some((at, list)) = f.args {
        let mut literal = Vec::new();
        for (i, a) in list.iter().enumerate() {
            let t = translate(a, &at.index(i), r, notes);
            literal.push(if t.is_literal() {
                Some(t.text.clone())
            } else {
                None
            });
            args.push(b.take(t));
        }
        let texts: Vec<String> = literal
            .iter()
            .map(|l| l.clone().unwrap_or_default())
            .collect();
        for i in secrets::arg_secrets(&texts) {
            if literal[i].is_some() {
                b.secret(
                    notes,
                    at.index(i),
                    "replace it with a `${NAME}` reference and set NAME in Vigil's environment",
                );
            }
        }
    }
    let mut env = Vec::new();
    if let Some((at, pairs)) = f.env {
        for (k, v) in pairs {
            let at = at.key(&k);
            let t = translate(&v, &at, r, notes);
            if t.is_literal() && secrets::looks_secret(Some(&k), &t.text) {
                let hint = suggestion(&k);
                b.secret(
                    notes,
                    at,
                    &format!("replace it with `${{{hint}}}` and set {hint} in Vigil's environment"),
                );
            }
            env.push((k, b.take(t)));
        }
    }
    let cwd = f.cwd.map(|(at, c)| b.take(translate(&c, &at, r, notes)));
    Ok(Kind::Stdio {
        command,
        args,
        env,
        cwd,
    })
}

fn http(
    f: Fields,
    name: &str,
    declared: Declared,
    r: &Resolver<'_>,
    notes: &mut Vec<Note>,
    b: &mut Backend,
) -> Result<Kind, String> {
    let (at, url) = f.url.ok_or("an http server needs a \"url\"")?;
    let t = translate(&url, &at, r, notes);
    let literal = t.is_literal();
    let url = b.take(t);
    if !(url.starts_with("http://") || url.starts_with("https://") || url.starts_with("${")) {
        return Err(format!(
            "its \"url\" {} is not an http:// or https:// URL",
            serde_json::Value::String(url.clone())
        ));
    }
    if declared == Declared::Unsaid
        && url
            .split(['?', '#'])
            .next()
            .is_some_and(|p| p.trim_end_matches('/').ends_with("/sse"))
    {
        notes.push(Note::warning(
            at.clone(),
            "ends in /sse, the usual endpoint of the legacy HTTP+SSE transport, which Vigil does not speak: imported as streamable HTTP; if `vigil serve` cannot connect, use the server's streamable HTTP endpoint (often /mcp)",
        ));
    }
    if literal && let Some(part) = secrets::url_secret(&url) {
        b.secret(notes, at.clone(), &format!("{part} holds it: move it into a header with a `${{NAME}}` reference if the server accepts one, or write the URL as a `${{NAME}}` reference"));
    }
    let mut headers = Vec::new();
    if let Some((at, pairs)) = f.headers {
        for (k, v) in pairs {
            let at = at.key(&k);
            if RESERVED_HEADERS.iter().any(|h| h.eq_ignore_ascii_case(&k)) {
                notes.push(Note::warning(
                    at,
                    "not imported: the MCP transport sets this header itself",
                ));
                continue;
            }
            let t = translate(&v, &at, r, notes);
            if http::HeaderName::from_bytes(k.as_bytes()).is_err()
                || http::HeaderValue::from_str(&t.text).is_err()
            {
                notes.push(Note::warning(
                    at,
                    "not imported: not a valid HTTP header name and value",
                ));
                continue;
            }
            if t.is_literal() && secrets::looks_secret(Some(&k), &t.text) {
                let (hint, example) = if k.eq_ignore_ascii_case("authorization") {
                    let hint = suggestion(&format!("{name}_token"));
                    let scheme = t
                        .text
                        .split_once(' ')
                        .map(|(s, _)| format!("{s} "))
                        .unwrap_or_default();
                    (hint.clone(), format!("{scheme}${{{hint}}}"))
                } else {
                    let hint = suggestion(&k);
                    (hint.clone(), format!("${{{hint}}}"))
                };
                b.secret(
                    notes,
                    at.clone(),
                    &format!("replace it with `{example}` and set {hint} in Vigil's environment"),
                );
            }
            headers.push((k, b.take(t)));
        }
    }
    Ok(Kind::Http { url, headers })
}

impl Backend {
    /// The text of `t`, its variables noted.
    fn take(&mut self, t: Translated) -> String {
        for v in t.vars {
            if !self.vars.contains(&v) {
                self.vars.push(v);
            }
        }
        t.text
    }

    fn secret(&mut self, notes: &mut Vec<Note>, at: JsonPath, fix: &str) {
        self.literal_secrets = true;
        notes.push(Note::warning(
            at,
            format!("holds a literal value that looks like a secret, and so does the imported file: {fix}"),
        ));
    }
}

fn translate(value: &str, at: &JsonPath, r: &Resolver<'_>, notes: &mut Vec<Note>) -> Translated {
    refs::translate(value, at, r, notes)
}

/// A variable name to suggest for a secret found at `key`.
fn suggestion(key: &str) -> String {
    refs::input_var(key)
}

/// Why a field is not imported, and what to do instead where there is
/// something.
fn unknown(key: &str) -> &'static str {
    match key {
        "envFile" => {
            "Vigil reads no env files; a stdio backend inherits Vigil's environment, so export the file's variables before `vigil serve`, e.g. `set -a; . ./.env; set +a`"
        }
        "auth" | "oauth" => {
            "Vigil does not sign in to backends with OAuth: put a token in \"headers\" as a `${NAME}` reference, or set forward_auth = true to pass on each client's own Authorization (see docs/freshness.md)"
        }
        "dev" => "VS Code's development mode (watch and debug) has no Vigil equivalent",
        "autoApprove" | "alwaysAllow" => {
            "which calls need approval is for the client to decide, not Vigil"
        }
        "timeout" => {
            "set request_timeout on the backend, like request_timeout = \"120s\", if it needs longer than the default 60s"
        }
        _ => "not a setting Vigil knows; docs/config.md lists what [[backends]] takes",
    }
}

/// A string field; anything else skips the entry.
fn string(at: &JsonPath, value: JsonValue<'_>) -> Result<String, String> {
    match value {
        JsonValue::String(s) => Ok(s.into_owned()),
        other => Err(format!(
            "{at} must be a string, found {}",
            json::kind(&other)
        )),
    }
}

/// `args`: strings; numbers and booleans as written (a client passes them
/// on as text), with a note; anything else skips the entry, since an
/// argument list with a hole would start another program.
fn args(at: &JsonPath, value: JsonValue<'_>, notes: &mut Vec<Note>) -> Result<Vec<String>, String> {
    let JsonValue::Array(items) = value else {
        return Err(format!(
            "{at} must be an array of strings, found {}",
            json::kind(&value)
        ));
    };
    let mut out = Vec::new();
    for (i, item) in items.take_inner().into_iter().enumerate() {
        match (&item, json::scalar_text(&item)) {
            (JsonValue::String(_), Some(s)) => out.push(s),
            (_, Some(s)) => {
                notes.push(Note::info(
                    at.index(i),
                    format!("written as the string \"{s}\""),
                ));
                out.push(s);
            }
            (_, None) => {
                return Err(format!(
                    "{} must be a string, found {}",
                    at.index(i),
                    json::kind(&item)
                ));
            }
        }
    }
    Ok(out)
}

/// `env` and `headers`: an object of strings; a value that is not a
/// string, number or boolean is reported and left out.
fn pairs(
    at: &JsonPath,
    value: JsonValue<'_>,
    notes: &mut Vec<Note>,
) -> Result<Vec<(String, String)>, String> {
    let JsonValue::Object(items) = value else {
        return Err(format!(
            "{at} must be an object of strings, found {}",
            json::kind(&value)
        ));
    };
    let mut out = Vec::new();
    for (k, v) in items {
        let here = at.key(&k);
        match (&v, json::scalar_text(&v)) {
            (JsonValue::String(_), Some(s)) => out.push((k.into_owned(), s)),
            (_, Some(s)) => {
                notes.push(Note::info(here, format!("written as the string \"{s}\"")));
                out.push((k.into_owned(), s));
            }
            (_, None) => notes.push(Note::warning(
                here,
                format!("not imported: expected a string, found {}", json::kind(&v)),
            )),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::source::Input;

    fn mapped(text: &str) -> Result<Backend, Skipped> {
        let value = json::parse(text).unwrap().unwrap();
        let inputs = [Input {
            id: "api-key".into(),
            description: Some("API key".into()),
            password: true,
            default: None,
        }];
        let r = Resolver {
            inputs: &inputs,
            workspace: None,
            bare_is_env: true,
        };
        map(
            "srv",
            JsonPath::root().key("mcpServers").key("srv"),
            value,
            &r,
        )
    }

    fn notes(b: &Backend) -> Vec<String> {
        b.notes.iter().map(|n| n.to_string()).collect()
    }

    fn reason(text: &str) -> String {
        mapped(text).unwrap_err().note().to_string()
    }

    #[test]
    fn a_stdio_server_keeps_its_command_and_references() {
        let b = mapped(
            r#"{"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
                "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "${env:GITHUB_TOKEN}", "LOG": "debug"}}"#,
        )
        .unwrap();
        assert_eq!(
            b.kind,
            Kind::Stdio {
                command: "npx".into(),
                args: vec!["-y".into(), "@modelcontextprotocol/server-github".into()],
                env: vec![
                    (
                        "GITHUB_PERSONAL_ACCESS_TOKEN".into(),
                        "${GITHUB_TOKEN}".into()
                    ),
                    ("LOG".into(), "debug".into())
                ],
                cwd: None,
            }
        );
        assert_eq!(b.vars, ["GITHUB_TOKEN"]);
        assert!(b.enabled && !b.literal_secrets && b.notes.is_empty());
    }

    #[test]
    fn an_http_server_keeps_its_url_and_header_references() {
        let b = mapped(
            r#"{"type": "http", "url": "https://api.example.com/mcp",
                "headers": {"Authorization": "Bearer ${input:api-key}"}}"#,
        )
        .unwrap();
        assert_eq!(
            b.kind,
            Kind::Http {
                url: "https://api.example.com/mcp".into(),
                headers: vec![("Authorization".into(), "Bearer ${API_KEY}".into())],
            }
        );
        assert_eq!(b.vars, ["API_KEY"]);
        assert_eq!(
            notes(&b),
            [
                "note: mcpServers.srv.headers.Authorization: `${input:api-key}` (VS Code asks for it: \"API key\", a password) is now `${API_KEY}`: set API_KEY in Vigil's environment"
            ]
        );
        for t in ["streamable-http", "streamableHttp"] {
            let b = mapped(&format!(r#"{{"type": "{t}", "url": "http://h/mcp"}}"#)).unwrap();
            assert!(matches!(b.kind, Kind::Http { .. }), "{t}");
        }
    }

    #[test]
    fn unknown_and_unsupported_fields_are_reported_with_their_path() {
        let b = mapped(
            r#"{"command": "srv", "disabled": true, "autoApprove": ["x"], "envFile": ".env",
                "headers": {"A": "b"}, "colour": "blue"}"#,
        )
        .unwrap();
        assert!(!b.enabled);
        assert_eq!(
            notes(&b),
            [
                "note: mcpServers.srv.disabled: imported as enabled = false (kept in the file, not started)",
                "warning: mcpServers.srv.autoApprove: not imported (which calls need approval is for the client to decide, not Vigil)",
                "warning: mcpServers.srv.envFile: not imported (Vigil reads no env files; a stdio backend inherits Vigil's environment, so export the file's variables before `vigil serve`, e.g. `set -a; . ./.env; set +a`)",
                "warning: mcpServers.srv.headers: not imported: headers apply to HTTP servers, and this one is started over stdio",
                "warning: mcpServers.srv.colour: not imported (not a setting Vigil knows; docs/config.md lists what [[backends]] takes)",
            ]
        );
    }

    #[test]
    fn entries_vigil_cannot_run_say_why_and_what_to_do() {
        assert_eq!(
            reason(r#"{"type": "sse", "url": "http://h/sse"}"#),
            "warning: mcpServers.srv: not imported: it uses the legacy HTTP+SSE transport (\"type\": \"sse\"), and Vigil reaches HTTP servers over streamable HTTP only: if the server also serves streamable HTTP (often at /mcp), set \"type\" to \"http\" with that URL and import again"
        );
        assert!(reason(r#"{"type": "ws", "url": "ws://h"}"#).contains("\"type\" is \"ws\""));
        assert!(
            reason(r#"{"command": "a", "url": "http://h"}"#)
                .contains("both \"command\" and \"url\"")
        );
        assert!(reason(r#"{"args": []}"#).contains("neither \"command\""));
        assert!(reason(r#"{"url": "ftp://h"}"#).contains("is not an http:// or https:// URL"));
        assert!(reason(r#"{"command": "  "}"#).contains("\"command\" is empty"));
        assert_eq!(
            reason(r#"{"command": "a", "args": "--flag"}"#),
            "warning: mcpServers.srv: not imported: mcpServers.srv.args must be an array of strings, found a string"
        );
        assert!(
            reason(r#"{"command": "a", "args": [{}]}"#)
                .contains("mcpServers.srv.args[0] must be a string, found an object")
        );
        assert!(
            reason("[]").contains("expected an object with \"command\" or \"url\", found an array")
        );
    }

    #[test]
    fn a_url_ending_in_sse_is_imported_with_a_warning() {
        let b = mapped(r#"{"url": "https://h.example.com/sse"}"#).unwrap();
        assert!(notes(&b)[0].contains("ends in /sse"), "{:?}", notes(&b));
        let b = mapped(r#"{"url": "https://h.example.com/mcp"}"#).unwrap();
        assert!(b.notes.is_empty());
    }

    #[test]
    fn literal_secrets_are_reported_where_they_are() {
        let b = mapped(
            r#"{"command": "srv", "args": ["--api-key", "abcdefgh12345"],
                "env": {"BRAVE_API_KEY": "BSAabcdefghijklmnop", "MODE": "fast"}}"#,
        )
        .unwrap();
        assert!(b.literal_secrets);
        assert_eq!(
            notes(&b),
            [
                "warning: mcpServers.srv.args[1]: holds a literal value that looks like a secret, and so does the imported file: replace it with a `${NAME}` reference and set NAME in Vigil's environment",
                "warning: mcpServers.srv.env.BRAVE_API_KEY: holds a literal value that looks like a secret, and so does the imported file: replace it with `${BRAVE_API_KEY}` and set BRAVE_API_KEY in Vigil's environment",
            ]
        );
        let b = mapped(
            r#"{"url": "https://h/mcp?api_key=abcdef123456", "headers": {"Authorization": "Bearer abcdefghijkl"}}"#,
        )
        .unwrap();
        assert_eq!(
            notes(&b),
            [
                "warning: mcpServers.srv.url: holds a literal value that looks like a secret, and so does the imported file: the query parameter `api_key` holds it: move it into a header with a `${NAME}` reference if the server accepts one, or write the URL as a `${NAME}` reference",
                "warning: mcpServers.srv.headers.Authorization: holds a literal value that looks like a secret, and so does the imported file: replace it with `Bearer ${SRV_TOKEN}` and set SRV_TOKEN in Vigil's environment",
            ]
        );
    }

    #[test]
    fn odd_values_are_converted_or_left_out_with_a_note() {
        let b = mapped(
            r#"{"command": "srv", "args": ["--port", 8080], "env": {"DEBUG": true, "X": null},
                "disabled": "yes"}"#,
        )
        .unwrap();
        let Kind::Stdio { args, env, .. } = &b.kind else {
            panic!("stdio expected")
        };
        assert_eq!(args, &["--port", "8080"]);
        assert_eq!(env, &[("DEBUG".to_owned(), "true".to_owned())]);
        assert_eq!(
            notes(&b),
            [
                "note: mcpServers.srv.args[1]: written as the string \"8080\"",
                "note: mcpServers.srv.env.DEBUG: written as the string \"true\"",
                "warning: mcpServers.srv.env.X: not imported: expected a string, found null",
                "warning: mcpServers.srv.disabled: not imported: expected true or false, found a string",
            ]
        );
        assert!(b.enabled);
    }

    #[test]
    fn headers_vigil_would_refuse_are_left_out_with_a_note() {
        let b = mapped(
            r#"{"url": "http://h/mcp", "headers": {"Mcp-Session-Id": "x", "Bad Name": "v", "Ok": "v"}}"#,
        )
        .unwrap();
        assert_eq!(
            b.kind,
            Kind::Http {
                url: "http://h/mcp".into(),
                headers: vec![("Ok".into(), "v".into())]
            }
        );
        assert_eq!(
            notes(&b),
            [
                "warning: mcpServers.srv.headers.Mcp-Session-Id: not imported: the MCP transport sets this header itself",
                "warning: mcpServers.srv.headers[\"Bad Name\"]: not imported: not a valid HTTP header name and value",
            ]
        );
    }
}
