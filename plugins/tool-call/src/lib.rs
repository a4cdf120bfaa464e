//! `tool-call`: a Vigil probe that calls one MCP tool of its target backend
//! and judges the result.
//!
//! Configuration (manifest `[config]`, overlaid by the backend's probe
//! arguments):
//!
//! | key | meaning |
//! | --- | --- |
//! | `tool` | required; the tool to call |
//! | `arguments` | the call's arguments, a JSON object as text; default `{}` |
//! | `expect_regex` | a regex the result text must match |
//! | `json_pointer` | an RFC 6901 pointer into the result's JSON (`structuredContent`, else the text parsed as JSON) that must resolve |
//! | `expect` | the value expected there (or for the whole document without `json_pointer`): JSON (`true`, `3`, `"ok"`), or a bare string compared with a string value |
//! | `degraded_ms` | latency above which the backend is `degraded` |
//! | `timeout_ms` | the call's timeout; default 5000 (the probe's deadline bounds it) |
//!
//! Verdicts: a bad configuration, or a backend with no live session to ask,
//! is `unknown`; a failed call, an `isError` result or a result that misses
//! its expectations is `unhealthy`; a slow but correct answer is `degraded`;
//! otherwise `healthy`. The latency is always reported.

use std::time::{Duration, Instant};

use regex_lite::Regex;
use serde_json::Value;
use vigil_sdk::target::{self, McpError, ToolResult};
use vigil_sdk::{Config, Probe, Report};

/// The probe.
pub struct ToolCall;

impl Probe for ToolCall {
    fn check(cfg: &Config) -> Report {
        let settings = match Settings::from_config(cfg) {
            Ok(s) => s,
            Err(e) => return Report::unknown(e),
        };
        let start = Instant::now();
        let result = target::call_tool(&settings.tool, &settings.arguments, settings.timeout);
        judge(&settings, result, start.elapsed())
    }
}

vigil_sdk::export_probe!(ToolCall);

/// The default call timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(5000);

/// The probe's configuration, checked.
#[derive(Debug, Clone)]
pub struct Settings {
    pub tool: String,
    pub arguments: Value,
    pub expect_regex: Option<Regex>,
    pub json_pointer: Option<String>,
    /// The `expect` value: parsed JSON, and the raw text.
    pub expect: Option<(Option<Value>, String)>,
    pub degraded_ms: Option<u32>,
    pub timeout: Duration,
}

impl Settings {
    /// Reads and checks the configuration; `Err` names the bad key.
    pub fn from_config(cfg: &Config) -> Result<Settings, String> {
        let tool = cfg.require("tool")?.trim().to_string();
        let arguments: Value = serde_json::from_str(cfg.get_or("arguments", "{}"))
            .map_err(|e| format!("config key `arguments` is not JSON: {e}"))?;
        if !arguments.is_object() {
            return Err("config key `arguments` must be a JSON object".into());
        }
        let expect_regex = match cfg.get("expect_regex") {
            None => None,
            Some(re) => Some(
                Regex::new(re)
                    .map_err(|e| format!("config key `expect_regex`: invalid regex: {e}"))?,
            ),
        };
        let json_pointer = cfg.get("json_pointer").map(String::from);
        if let Some(p) = &json_pointer
            && !(p.is_empty() || p.starts_with('/'))
        {
            return Err(format!(
                "config key `json_pointer`: {p:?} must be empty or start with `/` (RFC 6901)"
            ));
        }
        let expect = cfg
            .get("expect")
            .map(|raw| (serde_json::from_str(raw).ok(), raw.to_string()));
        Ok(Settings {
            tool,
            arguments,
            expect_regex,
            json_pointer,
            expect,
            degraded_ms: cfg.parse("degraded_ms")?,
            timeout: cfg
                .parse::<u64>("timeout_ms")?
                .map_or(DEFAULT_TIMEOUT, Duration::from_millis),
        })
    }
}

/// Turns the outcome of the call into a report.
pub fn judge(s: &Settings, result: Result<ToolResult, McpError>, elapsed: Duration) -> Report {
    let ms = u32::try_from(elapsed.as_millis()).unwrap_or(u32::MAX);
    let tool = &s.tool;
    let report = match result {
        Err(McpError::Unavailable(why)) => Report::unknown(format!(
            "cannot call tool {tool}: backend unavailable: {why}"
        )),
        Err(McpError::Timeout) => Report::unhealthy(format!(
            "tool {tool} did not answer within {} ms",
            s.timeout.as_millis()
        )),
        Err(e) => Report::unhealthy(format!("tool {tool} failed: {e}")),
        Ok(r) if r.is_error => Report::unhealthy(format!(
            "tool {tool} returned an error: {}",
            snippet(&r.text)
        )),
        Ok(r) => match check_expectations(s, &r) {
            Err(why) => Report::unhealthy(format!("tool {tool}: {why}")),
            Ok(()) => match s.degraded_ms {
                Some(limit) if ms > limit => {
                    Report::degraded(format!("tool {tool} took {ms} ms (degraded_ms = {limit})"))
                }
                _ => Report::healthy(),
            },
        },
    };
    report.with_latency(elapsed)
}

/// Checks `expect_regex` and `json_pointer`/`expect` against a successful
/// result.
pub fn check_expectations(s: &Settings, r: &ToolResult) -> Result<(), String> {
    if let Some(re) = &s.expect_regex
        && !re.is_match(&r.text)
    {
        return Err(format!(
            "result text does not match /{}/: {}",
            re.as_str(),
            snippet(&r.text)
        ));
    }
    if s.json_pointer.is_none() && s.expect.is_none() {
        return Ok(());
    }
    let doc = r.json()?;
    let pointer = s.json_pointer.as_deref().unwrap_or("");
    let Some(found) = doc.pointer(pointer) else {
        return Err(format!("no value at JSON pointer {pointer:?}"));
    };
    if let Some((parsed, raw)) = &s.expect {
        let equal = parsed.as_ref() == Some(found) || found.as_str() == Some(raw.as_str());
        if !equal {
            return Err(format!(
                "value at {pointer:?} is {}, expected {raw}",
                snippet(&found.to_string())
            ));
        }
    }
    Ok(())
}

/// At most 200 characters of `text`, for reasons.
fn snippet(text: &str) -> String {
    let text = text.trim();
    match text.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None if text.is_empty() => "(empty)".into(),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil_sdk::Status;

    fn settings(pairs: &[(&str, &str)]) -> Result<Settings, String> {
        Settings::from_config(&Config::from_pairs(pairs.iter().copied()))
    }

    fn ok(text: &str, structured: Option<&str>) -> Result<ToolResult, McpError> {
        Ok(ToolResult {
            is_error: false,
            text: text.into(),
            content: "[]".into(),
            structured: structured.map(Into::into),
        })
    }

    const MS: Duration = Duration::from_millis(1);

    fn reason(r: &Report) -> String {
        r.status.reason().unwrap_or("").to_string()
    }

    #[test]
    fn config_checks() {
        assert!(settings(&[]).unwrap_err().contains("`tool`"));
        assert!(
            settings(&[("tool", "t"), ("arguments", "{")])
                .unwrap_err()
                .contains("`arguments`")
        );
        assert!(
            settings(&[("tool", "t"), ("arguments", "[1]")])
                .unwrap_err()
                .contains("object")
        );
        assert!(
            settings(&[("tool", "t"), ("expect_regex", "(")])
                .unwrap_err()
                .contains("`expect_regex`")
        );
        assert!(
            settings(&[("tool", "t"), ("json_pointer", "a/b")])
                .unwrap_err()
                .contains("`json_pointer`")
        );
        let s = settings(&[
            ("tool", "echo"),
            ("arguments", r#"{"text":"hi"}"#),
            ("timeout_ms", "900"),
        ])
        .unwrap();
        assert_eq!(s.arguments, serde_json::json!({"text": "hi"}));
        assert_eq!(s.timeout, Duration::from_millis(900));
        assert_eq!(settings(&[("tool", "t")]).unwrap().timeout, DEFAULT_TIMEOUT);
        assert_eq!(
            settings(&[("tool", "t")]).unwrap().arguments,
            serde_json::json!({})
        );
    }

    #[test]
    fn errors_and_latency() {
        let s = settings(&[("tool", "echo"), ("degraded_ms", "50")]).unwrap();
        assert_eq!(judge(&s, ok("x", None), 10 * MS).status, Status::Healthy);
        assert_eq!(judge(&s, ok("x", None), 10 * MS).latency_ms, Some(10));
        assert!(matches!(
            judge(&s, ok("x", None), 80 * MS).status,
            Status::Degraded(_)
        ));
        let err = Ok(ToolResult {
            is_error: true,
            text: "boom".into(),
            content: "[]".into(),
            structured: None,
        });
        let r = judge(&s, err, MS);
        assert!(matches!(r.status, Status::Unhealthy(_)) && reason(&r).contains("boom"));
        assert!(matches!(
            judge(&s, Err(McpError::Timeout), MS).status,
            Status::Unhealthy(_)
        ));
        assert!(matches!(
            judge(&s, Err(McpError::Unavailable("starting".into())), MS).status,
            Status::Unknown(_)
        ));
        let rpc = McpError::Rpc {
            code: -32601,
            message: "no such tool".into(),
        };
        let r = judge(&s, Err(rpc), MS);
        assert!(reason(&r).contains("no such tool") && reason(&r).contains("echo"));
    }

    #[test]
    fn regex_expectation() {
        let s = settings(&[("tool", "t"), ("expect_regex", r"^status: (ok|fine)$")]).unwrap();
        assert_eq!(
            judge(&s, ok("status: ok", None), MS).status,
            Status::Healthy
        );
        let r = judge(&s, ok("status: bad", None), MS);
        assert!(reason(&r).contains("does not match") && reason(&r).contains("status: bad"));
    }

    #[test]
    fn pointer_expectations() {
        let s = settings(&[
            ("tool", "t"),
            ("json_pointer", "/health/ok"),
            ("expect", "true"),
        ])
        .unwrap();
        assert_eq!(
            judge(&s, ok("", Some(r#"{"health":{"ok":true}}"#)), MS).status,
            Status::Healthy
        );
        // Falls back to the text parsed as JSON.
        assert_eq!(
            judge(&s, ok(r#"{"health":{"ok":true}}"#, None), MS).status,
            Status::Healthy
        );
        let r = judge(&s, ok("", Some(r#"{"health":{"ok":false}}"#)), MS);
        assert!(reason(&r).contains("expected true"), "{}", reason(&r));
        let r = judge(&s, ok("", Some(r#"{"health":{}}"#)), MS);
        assert!(reason(&r).contains("no value"));
        let r = judge(&s, ok("not json", None), MS);
        assert!(reason(&r).contains("not JSON"));

        // A bare word matches a string value; quoted JSON too.
        let s = settings(&[
            ("tool", "t"),
            ("json_pointer", "/state"),
            ("expect", "ready"),
        ])
        .unwrap();
        assert_eq!(
            judge(&s, ok(r#"{"state":"ready"}"#, None), MS).status,
            Status::Healthy
        );
        let s = settings(&[
            ("tool", "t"),
            ("json_pointer", "/state"),
            ("expect", "\"ready\""),
        ])
        .unwrap();
        assert_eq!(
            judge(&s, ok(r#"{"state":"ready"}"#, None), MS).status,
            Status::Healthy
        );
        // Pointer alone: must resolve.
        let s = settings(&[("tool", "t"), ("json_pointer", "/n")]).unwrap();
        assert_eq!(
            judge(&s, ok(r#"{"n":0}"#, None), MS).status,
            Status::Healthy
        );
        // Expect alone: the whole document.
        let s = settings(&[("tool", "t"), ("expect", "3")]).unwrap();
        assert_eq!(judge(&s, ok("3", None), MS).status, Status::Healthy);
    }
}
