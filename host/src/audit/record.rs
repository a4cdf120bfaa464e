//! What one audited call is: [`CallRecord`], its [`Method`] and its
//! [`Outcome`], and [`StoredCall`], a record read back with its row id.

use std::fmt;
use std::str::FromStr;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// The MCP methods the audit records: the ones that use what a backend
/// offers (lists only show it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Method {
    #[serde(rename = "tools/call")]
    ToolsCall,
    #[serde(rename = "resources/read")]
    ResourcesRead,
    #[serde(rename = "prompts/get")]
    PromptsGet,
}

impl Method {
    /// The JSON-RPC method name, as stored and served.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::ToolsCall => "tools/call",
            Method::ResourcesRead => "resources/read",
            Method::PromptsGet => "prompts/get",
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Method {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "tools/call" => Ok(Method::ToolsCall),
            "resources/read" => Ok(Method::ResourcesRead),
            "prompts/get" => Ok(Method::PromptsGet),
            other => Err(format!(
                "unknown method `{other}`: use tools/call, resources/read or prompts/get"
            )),
        }
    }
}

/// How an audited call ended, from the caller's side.
///
/// - `ok`: the backend answered with a result (for `tools/call`, one
///   without `isError: true`);
/// - `error`: the backend answered with a JSON-RPC error or `isError:
///   true`, or the gateway could not use its answer;
/// - `denied`: policy refused the call (the caller saw an unknown name);
/// - `rate_limited`: a rate limit refused it;
/// - `unavailable`: the backend that owns the name is not serving, or the
///   connection to it was lost during the call.
///
/// The gateway's call paths produce `ok`, `error` and `unavailable` (see
/// [`super::PendingCall::finish`]); `denied` and `rate_limited` are passed
/// in by the access checks that refuse a call
/// ([`super::PendingCall::refused`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    Error,
    Denied,
    RateLimited,
    Unavailable,
}

impl Outcome {
    /// Every outcome, in the order messages list them.
    pub const ALL: [Outcome; 5] = [
        Outcome::Ok,
        Outcome::Error,
        Outcome::Denied,
        Outcome::RateLimited,
        Outcome::Unavailable,
    ];

    /// The snake_case name, as stored, served and filtered on.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Error => "error",
            Outcome::Denied => "denied",
            Outcome::RateLimited => "rate_limited",
            Outcome::Unavailable => "unavailable",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Reads like this: "unknown outcome `fine`: use one of ok, error, denied,
/// rate_limited, unavailable".
impl FromStr for Outcome {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Outcome::ALL
            .into_iter()
            .find(|o| o.as_str() == s)
            .ok_or_else(|| {
                let all: Vec<&str> = Outcome::ALL.iter().map(|o| o.as_str()).collect();
                format!("unknown outcome `{s}`: use one of {}", all.join(", "))
            })
    }
}

/// One call through the gateway.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// When the gateway received the call (milliseconds since the epoch
    /// in JSON and in the store).
    #[serde(with = "crate::health::unix_ms")]
    pub at: SystemTime,
    /// Who called: `local` (stdio, or no `[auth]`), `key:NAME`, ... (see
    /// [`crate::auth::Principal::id`]).
    pub principal: String,
    /// The authorization server that vouched for a `sub:` principal (two
    /// may each have a subject of that name); absent for keys and `local`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// The client session, as [`crate::redact::session_tag`] names it
    /// (`s-1a2b3c4d`); `None` for calls without a session (stdio, and
    /// 2026-07-28 clients, which have none).
    ///
    /// The tag, not the gateway's numeric session id: the numeric id
    /// starts again at 1 with every run of the process, so in a log that
    /// outlives restarts it would name several sessions; the tag is what
    /// the WARNs about sessions show operators (a session tried with
    /// another principal's credentials, a stream not resumed), so an audit
    /// row and a log line can be matched. The session id itself is a
    /// bearer credential and is never stored.
    pub session: Option<String>,
    /// The configured backend the call went to (or would have gone to);
    /// empty when it was refused before it had one.
    pub backend: String,
    pub method: Method,
    /// What the client asked for by the name it sees: the tool or prompt
    /// name (with the backend prefix under `naming = "prefix"`) or the
    /// resource URI.
    pub name: String,
    pub outcome: Outcome,
    /// From receiving the call to answering it, in microseconds.
    pub duration_us: u64,
    /// The call's arguments, only with `[audit] arguments = true`; every
    /// configured secret in them is masked (`***`) before they are stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<serde_json::Value>,
    /// For a `find_tool`: how long its query was and how many tools it
    /// returned (the query's text is in `arguments` only with `[audit]
    /// arguments = true`); absent for every other call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<Searched>,
}

/// What one `find_tool` asked and found, as the audit keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Searched {
    /// Bytes of its `query` (keywords not counted); 0 when it had none.
    pub query_bytes: u32,
    /// Tools returned; 0 when it was refused.
    pub results: u32,
}

/// A [`CallRecord`] read back from the store, with its row id: ids grow
/// with every record, so `after = <id>` pages forward (`vigil audit
/// --follow`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredCall {
    pub id: i64,
    #[serde(flatten)]
    pub call: CallRecord,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_and_methods_round_trip_their_names() {
        for o in Outcome::ALL {
            assert_eq!(o.as_str().parse::<Outcome>(), Ok(o));
            assert_eq!(
                serde_json::to_value(o).unwrap(),
                serde_json::json!(o.as_str())
            );
        }
        assert_eq!(
            serde_json::to_value(Outcome::RateLimited).unwrap(),
            "rate_limited"
        );
        for m in [Method::ToolsCall, Method::ResourcesRead, Method::PromptsGet] {
            assert_eq!(m.as_str().parse::<Method>(), Ok(m));
            assert_eq!(serde_json::to_value(m).unwrap(), m.as_str());
        }
    }

    #[test]
    fn an_unknown_outcome_names_the_valid_ones() {
        let e = "fine".parse::<Outcome>().unwrap_err();
        assert_eq!(
            e,
            "unknown outcome `fine`: use one of ok, error, denied, rate_limited, unavailable"
        );
    }

    #[test]
    fn a_stored_call_is_flat_json_without_absent_arguments() {
        let call = StoredCall {
            id: 7,
            call: CallRecord {
                at: SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_700_000_000_123),
                principal: "key:ci".into(),
                issuer: None,
                session: None,
                backend: "files".into(),
                method: Method::ToolsCall,
                name: "files__read".into(),
                outcome: Outcome::Ok,
                duration_us: 1500,
                arguments: None,
                search: None,
            },
        };
        assert_eq!(
            serde_json::to_value(&call).unwrap(),
            serde_json::json!({
                "id": 7, "at": 1_700_000_000_123_i64, "principal": "key:ci", "session": null,
                "backend": "files", "method": "tools/call", "name": "files__read",
                "outcome": "ok", "duration_us": 1500
            })
        );
    }
}
