//! The two meta-tools of `search` and `always_listed` modes: their
//! definitions, and what their arguments must be.
//!
//! `find_tool` takes `query` (required), `keywords`, `limit` (1..=20) and
//! `server`; `call_tool` takes `tool_name` and `arguments`, and also what
//! models write instead: `parameters` for `arguments`, and a `tool_name`
//! inside the arguments. Arguments that do not fit get an error naming
//! the field ([`ArgError`]), answered as a tool error (`isError`) so a
//! model can correct itself; nothing reaches a backend.
//!
//! `find_tool`'s description names the servers the caller may use, a line
//! each (at most [`SERVERS_NAMED`]); it changes with the config and the
//! caller's policy, never with health.

use serde_json::{Map, Value, json};

use crate::catalog::{Entry, EntryKind};
use crate::config::MAX_LIMIT;

pub const FIND: &str = "find_tool";
pub const CALL: &str = "call_tool";

/// Servers named in `find_tool`'s description; the rest are counted.
pub const SERVERS_NAMED: usize = 50;

/// A server as `find_tool`'s description names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Server {
    pub name: String,
    /// How many of its tools the caller may use (as last listed).
    pub tools: usize,
}

/// `find_tool`'s definition for a caller who may use `servers`;
/// `limit`: the default number of results.
pub fn find_tool(servers: &[Server], limit: usize) -> Entry {
    let mut description = String::from(
        "Find the tools for a task among the tools of the servers below, which are not listed. \
Describe the task in plain words (`query`); the answer gives the matching tools' full \
definitions, best first. Call one with `call_tool` (or by its name).",
    );
    if servers.is_empty() {
        description.push_str("\n\nNo server offers you tools right now.");
    } else {
        description.push_str("\n\nServers:");
        for s in servers.iter().take(SERVERS_NAMED) {
            let plural = if s.tools == 1 { "" } else { "s" };
            description.push_str(&format!("\n- {} ({} tool{plural})", s.name, s.tools));
        }
        if servers.len() > SERVERS_NAMED {
            description.push_str(&format!("\n- and {} more", servers.len() - SERVERS_NAMED));
        }
    }
    let def = json!({
        "name": FIND,
        "title": "Find tools",
        "description": description,
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "description": "The task, in plain words (e.g. \"read a file from the project\")"
                },
                "keywords": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Extra words a matching tool's name or description may use"
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_LIMIT,
                    "description": format!("How many tools to return (default {limit})")
                },
                "server": {
                    "type": "string",
                    "description": "Only tools of this server"
                }
            },
            "required": ["query"]
        },
        "outputSchema": {
            "type": "object",
            "properties": {
                "tools": {
                    "type": "array",
                    "description": "The matching tools' definitions, best first, each with its `server`",
                    "items": {"type": "object"}
                },
                "generation": {
                    "type": "integer",
                    "description": "The catalog generation searched"
                },
                "bytes_saved": {
                    "type": "integer",
                    "description": "Bytes of the full tool list minus bytes of this answer"
                },
                "hint": {
                    "type": "string",
                    "description": "What to try when nothing matched"
                }
            },
            "required": ["tools", "generation", "bytes_saved"]
        },
        "annotations": {"readOnlyHint": true, "openWorldHint": false}
    });
    Entry::from_json(EntryKind::Tool, def).expect("a literal tool definition")
}

/// `call_tool`'s definition.
pub fn call_tool() -> Entry {
    let def = json!({
        "name": CALL,
        "title": "Call a tool",
        "description": "Call a tool that find_tool found, by its name, with its arguments.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "tool_name": {
                    "type": "string",
                    "description": "The tool's name, as find_tool gave it"
                },
                "arguments": {
                    "type": "object",
                    "description": "The tool's arguments, as its inputSchema says"
                }
            },
            "required": ["tool_name"]
        }
    });
    Entry::from_json(EntryKind::Tool, def).expect("a literal tool definition")
}

/// Why a meta-tool's arguments were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgError {
    #[error("`{field}` is required: {hint}")]
    Missing {
        field: &'static str,
        hint: &'static str,
    },
    #[error("`{field}` must be {what}")]
    Type {
        field: &'static str,
        what: &'static str,
    },
    #[error("`query` must not be empty: describe the task in plain words")]
    EmptyQuery,
    #[error(
        "`query` (with `keywords`) is {bytes} bytes; at most {max} are taken: describe the task in fewer words"
    )]
    TooLong { bytes: usize, max: usize },
    #[error("`limit` must be between 1 and {MAX_LIMIT}, not {0}")]
    Limit(String),
}

/// The length in bytes of `args`' `query`, whatever else is wrong with
/// them (0 without a string there): what the audit records of a
/// `find_tool`, refused or not.
pub fn query_bytes(args: Option<&Map<String, Value>>) -> usize {
    args.and_then(|a| a.get("query"))
        .and_then(Value::as_str)
        .map_or(0, str::len)
}

/// `find_tool`'s arguments, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FindArgs {
    /// The query with its keywords.
    pub text: String,
    /// The length of `query` alone, in bytes (for the audit).
    pub query_bytes: usize,
    pub limit: usize,
    pub server: Option<String>,
}

impl FindArgs {
    /// `args` checked; `limit` and `max_bytes` from `[tool_search]`.
    pub fn parse(
        args: Option<&Map<String, Value>>,
        limit: usize,
        max_bytes: usize,
    ) -> Result<FindArgs, ArgError> {
        let empty = Map::new();
        let args = args.unwrap_or(&empty);
        let query = match args.get("query") {
            None | Some(Value::Null) => {
                return Err(ArgError::Missing {
                    field: "query",
                    hint: "describe the task in plain words",
                });
            }
            Some(Value::String(q)) => q,
            Some(_) => {
                return Err(ArgError::Type {
                    field: "query",
                    what: "a string",
                });
            }
        };
        let mut text = query.trim().to_owned();
        match args.get("keywords") {
            None | Some(Value::Null) => {}
            Some(Value::Array(words)) => {
                for w in words {
                    let Value::String(w) = w else {
                        return Err(ArgError::Type {
                            field: "keywords",
                            what: "an array of strings",
                        });
                    };
                    text.push(' ');
                    text.push_str(w.trim());
                }
            }
            Some(_) => {
                return Err(ArgError::Type {
                    field: "keywords",
                    what: "an array of strings",
                });
            }
        }
        if text.len() > max_bytes {
            return Err(ArgError::TooLong {
                bytes: text.len(),
                max: max_bytes,
            });
        }
        if text.trim().is_empty() {
            return Err(ArgError::EmptyQuery);
        }
        let limit = match args.get("limit") {
            None | Some(Value::Null) => limit,
            Some(Value::Number(n)) => match n.as_u64().and_then(|n| usize::try_from(n).ok()) {
                Some(l) if (1..=MAX_LIMIT).contains(&l) => l,
                _ => return Err(ArgError::Limit(n.to_string())),
            },
            Some(_) => {
                return Err(ArgError::Type {
                    field: "limit",
                    what: "an integer",
                });
            }
        };
        let server = match args.get("server") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.trim().is_empty() => None,
            Some(Value::String(s)) => Some(s.trim().to_owned()),
            Some(_) => {
                return Err(ArgError::Type {
                    field: "server",
                    what: "a string (a server's name)",
                });
            }
        };
        Ok(FindArgs {
            query_bytes: query.len(),
            text,
            limit,
            server,
        })
    }
}

/// `call_tool`'s arguments: the tool's name, and its own arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct CallArgs {
    pub tool_name: String,
    pub arguments: Option<Map<String, Value>>,
}

impl CallArgs {
    pub fn parse(args: Option<&Map<String, Value>>) -> Result<CallArgs, ArgError> {
        let empty = Map::new();
        let args = args.unwrap_or(&empty);
        let inner = match args.get("arguments").or_else(|| args.get("parameters")) {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) => Some(m.clone()),
            // Some models send the arguments as a JSON string.
            Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                Ok(Value::Object(m)) => Some(m),
                _ => {
                    return Err(ArgError::Type {
                        field: "arguments",
                        what: "an object (the tool's arguments)",
                    });
                }
            },
            Some(_) => {
                return Err(ArgError::Type {
                    field: "arguments",
                    what: "an object (the tool's arguments)",
                });
            }
        };
        let (tool_name, inner) = match args.get("tool_name") {
            Some(Value::String(n)) => (n.clone(), inner),
            Some(Value::Null) | None => {
                // A `tool_name` put inside the arguments.
                let mut inner = inner;
                match inner.as_mut().and_then(|m| m.remove("tool_name")) {
                    Some(Value::String(n)) => (n, inner),
                    _ => {
                        return Err(ArgError::Missing {
                            field: "tool_name",
                            hint: "name the tool to call, as find_tool gave it",
                        });
                    }
                }
            }
            Some(_) => {
                return Err(ArgError::Type {
                    field: "tool_name",
                    what: "a string (a tool's name)",
                });
            }
        };
        if tool_name.trim().is_empty() {
            return Err(ArgError::Missing {
                field: "tool_name",
                hint: "name the tool to call, as find_tool gave it",
            });
        }
        Ok(CallArgs {
            tool_name,
            arguments: inner,
        })
    }
}

/// `call_tool`'s arguments in the one form the raw path forwards as bytes
/// (`gateway::raw`): a non-blank `tool_name` and an object of `arguments`
/// (or `parameters`), nothing else. Every other form [`CallArgs::parse`]
/// takes (the name inside the arguments, arguments written as a JSON
/// string, none at all) or refuses is its, on the typed path; where both
/// read a body they agree (tested below).
#[derive(Debug)]
pub struct RawCall<'a> {
    pub tool_name: std::borrow::Cow<'a, str>,
    /// The tool's arguments, as written.
    pub arguments: &'a serde_json::value::RawValue,
}

impl<'a> RawCall<'a> {
    /// `call_tool`'s `arguments` (as written) in the raw form, or `None`.
    pub fn read(arguments: &'a serde_json::value::RawValue) -> Option<Self> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Form<'a> {
            #[serde(borrow)]
            tool_name: std::borrow::Cow<'a, str>,
            #[serde(borrow)]
            arguments: Option<&'a serde_json::value::RawValue>,
            #[serde(borrow)]
            parameters: Option<&'a serde_json::value::RawValue>,
        }
        let form: Form<'a> = serde_json::from_str(arguments.get()).ok()?;
        let inner = match (form.arguments, form.parameters) {
            (Some(a), None) | (None, Some(a)) => a,
            _ => return None,
        };
        if !inner.get().starts_with('{') || form.tool_name.trim().is_empty() {
            return None;
        }
        Some(RawCall {
            tool_name: form.tool_name,
            arguments: inner,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn find_arguments_are_checked_field_by_field() {
        let parse = |v: Value| FindArgs::parse(Some(&obj(v)), 8, 64);
        let ok = parse(
            json!({"query": " read a file ", "keywords": ["disk"], "limit": 3, "server": "files"}),
        )
        .unwrap();
        assert_eq!(
            (
                ok.text.as_str(),
                ok.limit,
                ok.server.as_deref(),
                ok.query_bytes
            ),
            ("read a file disk", 3, Some("files"), 13)
        );
        assert_eq!(parse(json!({"query": "x"})).unwrap().limit, 8);
        assert_eq!(
            FindArgs::parse(None, 8, 64).unwrap_err().to_string(),
            "`query` is required: describe the task in plain words"
        );
        assert_eq!(
            parse(json!({"query": "  "})).unwrap_err(),
            ArgError::EmptyQuery
        );
        assert_eq!(
            parse(json!({"query": 3})).unwrap_err(),
            ArgError::Type {
                field: "query",
                what: "a string"
            }
        );
        assert_eq!(
            parse(json!({"query": "x".repeat(65)})).unwrap_err(),
            ArgError::TooLong { bytes: 65, max: 64 }
        );
        assert_eq!(
            parse(json!({"query": "x", "limit": 10_000}))
                .unwrap_err()
                .to_string(),
            "`limit` must be between 1 and 20, not 10000"
        );
        assert_eq!(
            parse(json!({"query": "x", "limit": 0})).unwrap_err(),
            ArgError::Limit("0".into())
        );
        assert_eq!(
            parse(json!({"query": "x", "limit": "3"})).unwrap_err(),
            ArgError::Type {
                field: "limit",
                what: "an integer"
            }
        );
        assert_eq!(
            parse(json!({"query": "x", "keywords": "a"})).unwrap_err(),
            ArgError::Type {
                field: "keywords",
                what: "an array of strings"
            }
        );
    }

    #[test]
    fn call_arguments_take_what_models_write() {
        let parse = |v: Value| CallArgs::parse(Some(&obj(v)));
        let want = CallArgs {
            tool_name: "files__read".into(),
            arguments: Some(obj(json!({"path": "a"}))),
        };
        assert_eq!(
            parse(json!({"tool_name": "files__read", "arguments": {"path": "a"}})).unwrap(),
            want
        );
        assert_eq!(
            parse(json!({"tool_name": "files__read", "parameters": {"path": "a"}})).unwrap(),
            want
        );
        assert_eq!(
            parse(json!({"arguments": {"tool_name": "files__read", "path": "a"}})).unwrap(),
            want
        );
        assert_eq!(
            parse(json!({"tool_name": "files__read", "arguments": "{\"path\": \"a\"}"})).unwrap(),
            want
        );
        assert_eq!(parse(json!({"tool_name": "t"})).unwrap().arguments, None);
        assert_eq!(
            parse(json!({"arguments": {"path": "a"}}))
                .unwrap_err()
                .to_string(),
            "`tool_name` is required: name the tool to call, as find_tool gave it"
        );
        assert_eq!(
            parse(json!({"tool_name": 1})).unwrap_err(),
            ArgError::Type {
                field: "tool_name",
                what: "a string (a tool's name)"
            }
        );
        assert_eq!(
            parse(json!({"tool_name": "t", "arguments": [1]})).unwrap_err(),
            ArgError::Type {
                field: "arguments",
                what: "an object (the tool's arguments)"
            }
        );
    }

    #[test]
    fn the_raw_form_of_call_arguments_reads_as_the_typed_parse_does() {
        let bodies = [
            r#"{"tool_name":"files__read","arguments":{"path":"a"}}"#,
            r#"{"arguments": {"path": "a\u0041"}, "tool_name": "files__re\u0061d"}"#,
            r#"{"tool_name":"t","parameters":{}}"#,
            // What only the typed parse takes, or refuses.
            r#"{"tool_name":"t"}"#,
            r#"{"tool_name":"t","arguments":null}"#,
            r#"{"tool_name":"t","arguments":"{\"path\": \"a\"}"}"#,
            r#"{"arguments":{"tool_name":"t","path":"a"}}"#,
            r#"{"tool_name":"t","arguments":{},"parameters":{}}"#,
            r#"{"tool_name":"t","arguments":{},"extra":1}"#,
            r#"{"tool_name":" ","arguments":{}}"#,
            r#"{"tool_name":1,"arguments":{}}"#,
            r#"{"tool_name":"t","arguments":[1]}"#,
            r#"{"tool_name":"t","tool_name":"u","arguments":{}}"#,
        ];
        let mut raw = 0;
        for body in bodies {
            let written: Box<serde_json::value::RawValue> = serde_json::from_str(body).expect(body);
            let Some(call) = RawCall::read(&written) else {
                continue;
            };
            raw += 1;
            let typed = CallArgs::parse(serde_json::from_str::<Value>(body).unwrap().as_object())
                .unwrap_or_else(|e| {
                    panic!("{body}: the raw form reads what the typed parse refuses: {e}")
                });
            assert_eq!(call.tool_name, typed.tool_name, "{body}");
            let arguments: Map<String, Value> = serde_json::from_str(call.arguments.get()).unwrap();
            assert_eq!(Some(arguments), typed.arguments, "{body}");
        }
        assert_eq!(raw, 3, "the three raw forms are read");
    }

    #[test]
    fn find_tools_description_names_the_servers_and_is_capped() {
        let servers: Vec<Server> = (0..SERVERS_NAMED + 2)
            .map(|i| Server {
                name: format!("s{i}"),
                tools: i,
            })
            .collect();
        let e = find_tool(&servers[..2], 8);
        let d = e.str("description").unwrap();
        assert!(
            d.ends_with("Servers:\n- s0 (0 tools)\n- s1 (1 tool)"),
            "{d}"
        );
        let d = find_tool(&servers, 8)
            .str("description")
            .unwrap()
            .to_owned();
        assert!(d.ends_with("\n- and 2 more"), "{d}");
        assert_eq!(call_tool().key(), CALL);
    }
}
