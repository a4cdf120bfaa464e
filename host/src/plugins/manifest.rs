//! A plugin's manifest, `NAME.toml` beside `NAME.wasm`: its kind (when the
//! component alone cannot tell), sandbox limits, allowed HTTP hosts, config
//! values and, for notifiers, which events it wants.
//!
//! Every key is optional; a plugin without a manifest gets the defaults
//! (16 MiB of memory, a 1 s deadline per call, no HTTP at all).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::{Kind, files};
use crate::health::HealthState;

/// Largest memory a manifest may grant (the engine reserves this much
/// address space per instance slot).
pub const MAX_MEMORY: u64 = 256 << 20;
/// Longest deadline a manifest may set for one call.
pub const MAX_DEADLINE: Duration = Duration::from_secs(60);
/// `limits.http_concurrency_plugin` when the manifest sets neither it nor a
/// higher `http_concurrency`: four calls' worth of the default per-call cap.
const DEFAULT_HTTP_CONCURRENCY_PLUGIN: u32 = 16;

#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// `kind`: `"probe"` or `"notifier"`; checked against the component.
    pub kind: Option<Kind>,
    pub limits: Limits,
    /// `[http] allowed_hosts`: `host`, `host:port`, `host:*`, a bare IPv6
    /// address or `[v6]`, `[v6]:port`, `[v6]:*` (see `allow.rs`; every
    /// entry parsed at load). Empty: no outbound HTTP.
    pub allowed_hosts: Vec<String>,
    /// `[config]`: values the plugin reads through `host.config`.
    pub config: BTreeMap<String, String>,
    pub filter: Filter,
}

/// `[limits]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// `memory`, e.g. `"16MiB"` (default 16 MiB, at most 256 MiB).
    pub memory: u64,
    /// `deadline`: CPU and wall time of one call (default `1s`, at most
    /// `60s`).
    pub deadline: Duration,
    /// `failures`: consecutive failed calls (trap, deadline, memory) after
    /// which the plugin is disabled (default 5).
    pub failures: u32,
    /// `http_timeout`: one outbound request (default `5s`).
    pub http_timeout: Duration,
    /// `http_max_body`: largest response body read (default 1 MiB).
    pub http_max_body: u64,
    /// `max_string`: largest string a plugin may return (default 64 KiB);
    /// longer ones are cut.
    pub max_string: usize,
    /// `host_resources`: most resources one call may hold in the host at
    /// once (`wasi:http` headers, requests, bodies, streams, pollables;
    /// default 256, at most [`MAX_HOST_RESOURCES`]). Each is bounded in
    /// bytes, so this bounds the host memory a call can make Vigil hold.
    pub host_resources: usize,
    /// `concurrency`: most calls of this plugin running at once (default 4,
    /// at most 64); more wait their turn, never fail for it.
    pub concurrency: u32,
    /// `http_concurrency`: outbound requests one call may have in flight
    /// (default 4, at most 256). A request counts from `handle` until its
    /// response body is read to the end or dropped; one past the cap fails
    /// at once with `connection-limit-reached`.
    pub http_concurrency: u32,
    /// `http_concurrency_plugin`: the same, over all calls of the plugin at
    /// once (a probe attached to many backends, notifications delivered
    /// side by side). Default 16, or `http_concurrency` when that is set
    /// higher; never below `http_concurrency`, at most 1024.
    pub http_concurrency_plugin: u32,
    /// `log_rate`: lines per second the plugin may write through
    /// `host.log`, over all its calls (default 20, at most 10000); lines
    /// past it are dropped and counted.
    pub log_rate: u32,
    /// `log_burst`: lines the plugin may write at once before `log_rate`
    /// applies (default 100, at most 100000).
    pub log_burst: u32,
    /// `target_requests`: MCP requests one probe call may send to its
    /// target through `vigil:plugin/target` (each `ping`, each page of
    /// `list-tools`, each `call-tool`; default 10, at most 1000). Past it
    /// the request fails at once with `unavailable`, nothing sent.
    pub target_requests: u32,
}

/// Most host resources a manifest may grant one call.
pub const MAX_HOST_RESOURCES: usize = 4096;

/// `[filter]` of a notifier: which health events it is offered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    /// `backends`: names; empty means all.
    pub backends: Vec<String>,
    /// `states`: to-states; empty means all.
    pub states: Vec<HealthState>,
    /// `min_severity` (default `info`: everything).
    pub min_severity: Severity,
    /// `rate`: most events delivered per minute (default 60).
    pub per_minute: u32,
}

/// How much a health event matters (as in the WIT `severity`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    #[default]
    Info,
    Warning,
    Critical,
}

impl Severity {
    /// The severity of a move into `to`.
    pub fn of(to: HealthState) -> Severity {
        match to {
            HealthState::Running | HealthState::Starting => Severity::Info,
            HealthState::Degraded
            | HealthState::Restarting
            | HealthState::Updating
            | HealthState::Unknown => Severity::Warning,
            HealthState::Offline | HealthState::Quarantined => Severity::Critical,
        }
    }
}

impl Default for Manifest {
    fn default() -> Self {
        Self {
            kind: None,
            limits: Limits {
                memory: 16 << 20,
                deadline: Duration::from_secs(1),
                failures: 5,
                http_timeout: Duration::from_secs(5),
                http_max_body: 1 << 20,
                max_string: 64 << 10,
                host_resources: 256,
                concurrency: 4,
                http_concurrency: 4,
                http_concurrency_plugin: DEFAULT_HTTP_CONCURRENCY_PLUGIN,
                log_rate: 20,
                log_burst: 100,
                target_requests: 10,
            },
            allowed_hosts: Vec::new(),
            config: BTreeMap::new(),
            filter: Filter {
                per_minute: 60,
                ..Filter::default()
            },
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Raw {
    kind: Option<String>,
    limits: Option<RawLimits>,
    http: Option<RawHttp>,
    #[serde(default)]
    config: BTreeMap<String, toml::Value>,
    filter: Option<RawFilter>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    memory: Option<String>,
    deadline: Option<String>,
    failures: Option<u32>,
    http_timeout: Option<String>,
    http_max_body: Option<String>,
    max_string: Option<String>,
    host_resources: Option<usize>,
    concurrency: Option<u32>,
    http_concurrency: Option<u32>,
    http_concurrency_plugin: Option<u32>,
    log_rate: Option<u32>,
    log_burst: Option<u32>,
    target_requests: Option<u32>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    #[serde(default)]
    allowed_hosts: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawFilter {
    #[serde(default)]
    backends: Vec<String>,
    #[serde(default)]
    states: Vec<String>,
    min_severity: Option<String>,
    rate: Option<u32>,
}

/// Why a manifest was refused: every problem, each with its key.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {}", .problems.join("; "))]
pub struct ManifestError {
    pub file: String,
    pub problems: Vec<String>,
}

impl Manifest {
    /// Reads `path` (a regular file of at most [`files::MAX_MANIFEST`],
    /// never blocking: see `files.rs`); a missing file is the defaults.
    pub fn load(path: &Path) -> Result<Manifest, ManifestError> {
        let refuse = |why: String| ManifestError {
            file: path.display().to_string(),
            problems: vec![why],
        };
        let bytes = match files::read(path, files::MAX_MANIFEST, "") {
            Ok(bytes) => bytes,
            Err(files::ReadError::NotFound) => return Ok(Manifest::default()),
            Err(e) => return Err(refuse(format!("cannot read it: {e}"))),
        };
        let text = String::from_utf8(bytes)
            .map_err(|e| refuse(format!("cannot read it: it is not UTF-8 text ({e})")))?;
        Manifest::parse(&text, &path.display().to_string())
    }

    pub fn parse(text: &str, file: &str) -> Result<Manifest, ManifestError> {
        let refuse = |problems: Vec<String>| ManifestError {
            file: file.to_owned(),
            problems,
        };
        let raw: Raw = toml::from_str(text).map_err(|e| refuse(vec![e.to_string()]))?;
        let mut m = Manifest::default();
        let mut problems = Vec::new();
        m.kind = match raw.kind.as_deref() {
            None => None,
            Some("probe") => Some(Kind::Probe),
            Some("notifier") => Some(Kind::Notifier),
            Some(other) => {
                problems.push(format!(
                    "kind: unknown value `{other}`: use \"probe\" or \"notifier\""
                ));
                None
            }
        };
        let l = raw.limits.unwrap_or_default();
        let duration =
            |key: &str, v: Option<String>, default: Duration, problems: &mut Vec<String>| {
                let Some(v) = v else { return default };
                match humantime::parse_duration(&v) {
                    Ok(d) if d.is_zero() => {
                        problems.push(format!("limits.{key}: must be longer than zero"));
                        default
                    }
                    Ok(d) if d > MAX_DEADLINE => {
                        problems.push(format!(
                            "limits.{key}: `{v}` is longer than the most allowed, 60s"
                        ));
                        default
                    }
                    Ok(d) => d,
                    Err(e) => {
                        problems.push(format!(
                            "limits.{key}: `{v}` is not a duration ({e}), like \"2s\""
                        ));
                        default
                    }
                }
            };
        let size =
            |key: &str, v: Option<String>, default: u64, max: u64, problems: &mut Vec<String>| {
                let Some(v) = v else { return default };
                match parse_size(&v) {
                    Some(0) => {
                        problems.push(format!("limits.{key}: must be more than zero"));
                        default
                    }
                    Some(n) if n > max => {
                        problems.push(format!(
                            "limits.{key}: `{v}` is more than the most allowed, {}",
                            show_size(max)
                        ));
                        default
                    }
                    Some(n) => n,
                    None => {
                        problems.push(format!(
                            "limits.{key}: `{v}` is not a size, like \"16MiB\" or \"512KiB\""
                        ));
                        default
                    }
                }
            };
        m.limits.memory = size(
            "memory",
            l.memory,
            m.limits.memory,
            MAX_MEMORY,
            &mut problems,
        );
        m.limits.deadline = duration("deadline", l.deadline, m.limits.deadline, &mut problems);
        m.limits.http_timeout = duration(
            "http_timeout",
            l.http_timeout,
            m.limits.http_timeout,
            &mut problems,
        );
        m.limits.http_max_body = size(
            "http_max_body",
            l.http_max_body,
            m.limits.http_max_body,
            64 << 20,
            &mut problems,
        );
        m.limits.max_string = size(
            "max_string",
            l.max_string,
            m.limits.max_string as u64,
            16 << 20,
            &mut problems,
        ) as usize;
        if let Some(n) = l.host_resources {
            if !(16..=MAX_HOST_RESOURCES).contains(&n) {
                problems.push(format!(
                    "limits.host_resources: {n} is outside 16..={MAX_HOST_RESOURCES}"
                ));
            } else {
                m.limits.host_resources = n;
            }
        }
        if let Some(n) = l.concurrency {
            if !(1..=64).contains(&n) {
                problems.push(format!("limits.concurrency: {n} is outside 1..=64"));
            } else {
                m.limits.concurrency = n;
            }
        }
        let count =
            |key: &str, v: Option<u32>, default: u32, max: u32, problems: &mut Vec<String>| match v
            {
                None => default,
                Some(0) => {
                    problems.push(format!("limits.{key}: must be at least 1"));
                    default
                }
                Some(n) if n > max => {
                    problems.push(format!(
                        "limits.{key}: {n} is more than the most allowed, {max}"
                    ));
                    default
                }
                Some(n) => n,
            };
        let per_call = count(
            "http_concurrency",
            l.http_concurrency,
            m.limits.http_concurrency,
            256,
            &mut problems,
        );
        m.limits.http_concurrency = per_call;
        // Raising the per-call cap alone raises the per-plugin one with it:
        // a single call may then use what it was granted.
        m.limits.http_concurrency_plugin = count(
            "http_concurrency_plugin",
            l.http_concurrency_plugin,
            m.limits.http_concurrency_plugin.max(per_call),
            1024,
            &mut problems,
        );
        if m.limits.http_concurrency_plugin < per_call {
            problems.push(format!(
                "limits.http_concurrency_plugin: {} is less than limits.http_concurrency, {per_call}: \
                 one call could never use what it is granted",
                m.limits.http_concurrency_plugin
            ));
        }
        m.limits.log_rate = count(
            "log_rate",
            l.log_rate,
            m.limits.log_rate,
            10_000,
            &mut problems,
        );
        m.limits.log_burst = count(
            "log_burst",
            l.log_burst,
            m.limits.log_burst,
            100_000,
            &mut problems,
        );
        m.limits.target_requests = count(
            "target_requests",
            l.target_requests,
            m.limits.target_requests,
            1000,
            &mut problems,
        );
        if let Some(f) = l.failures {
            if f == 0 {
                problems.push("limits.failures: must be at least 1".into());
            } else {
                m.limits.failures = f;
            }
        }
        m.allowed_hosts = raw.http.unwrap_or_default().allowed_hosts;
        for h in &m.allowed_hosts {
            if let Err(why) = super::allow::parse(h) {
                problems.push(format!("http.allowed_hosts: {why}"));
            }
        }
        for (k, v) in raw.config {
            let text = match v {
                toml::Value::String(s) => s,
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(f) => f.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                other => {
                    problems.push(format!(
                        "config.{k}: `{other}` is not a string, number or boolean"
                    ));
                    continue;
                }
            };
            m.config.insert(k, text);
        }
        if let Some(f) = raw.filter {
            m.filter.backends = f.backends;
            for s in f.states {
                match s.parse::<HealthState>() {
                    Ok(st) => m.filter.states.push(st),
                    Err(_) => problems.push(format!("filter.states: unknown state `{s}`")),
                }
            }
            m.filter.min_severity = match f.min_severity.as_deref() {
                None | Some("info") => Severity::Info,
                Some("warning") => Severity::Warning,
                Some("critical") => Severity::Critical,
                Some(other) => {
                    problems.push(format!(
                        "filter.min_severity: unknown value `{other}`: use \"info\", \"warning\" or \"critical\""
                    ));
                    Severity::Info
                }
            };
            if let Some(r) = f.rate {
                if r == 0 {
                    problems.push("filter.rate: must be at least 1 (events per minute)".into());
                } else {
                    m.filter.per_minute = r;
                }
            }
        }
        if problems.is_empty() {
            Ok(m)
        } else {
            Err(refuse(problems))
        }
    }

    /// Whether the manifest lets the plugin reach `host` on `port`.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        allows(&self.allowed_hosts, host, port)
    }
}

pub use super::allow::allows;

/// "16MiB", "512KiB", "1GiB", "4096" (bytes); also "MB"/"KB" as powers of two.
fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" | "kb" | "k" => 1 << 10,
        "mib" | "mb" | "m" => 1 << 20,
        "gib" | "gb" | "g" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

fn show_size(n: u64) -> String {
    if n.is_multiple_of(1 << 20) {
        format!("{}MiB", n >> 20)
    } else if n.is_multiple_of(1 << 10) {
        format!("{}KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_manifest_parses() {
        let m = Manifest::parse(
            r#"
            kind = "notifier"
            [limits]
            memory = "8MiB"
            deadline = "2s"
            failures = 3
            [http]
            allowed_hosts = ["discord.com", "127.0.0.1:*", "hooks.example:8443"]
            [config]
            url = "https://discord.com/api/webhooks/1"
            retries = 3
            [filter]
            backends = ["db"]
            states = ["offline", "running"]
            min_severity = "warning"
            rate = 10
            "#,
            "d.toml",
        )
        .unwrap();
        assert_eq!(m.kind, Some(Kind::Notifier));
        assert_eq!(m.limits.memory, 8 << 20);
        assert_eq!(m.limits.deadline, Duration::from_secs(2));
        assert_eq!(m.limits.failures, 3);
        assert_eq!(m.config["retries"], "3");
        assert_eq!(
            m.filter.states,
            [HealthState::Offline, HealthState::Running]
        );
        assert_eq!(m.filter.min_severity, Severity::Warning);
        assert_eq!(m.filter.per_minute, 10);
        assert!(m.allows("discord.com", 443));
        assert!(!m.allows("discord.com", 8080));
        assert!(m.allows("127.0.0.1", 41234));
        assert!(m.allows("hooks.example", 8443));
        assert!(!m.allows("evil.example", 443));
    }

    #[test]
    fn mistakes_are_refused_with_their_keys() {
        let e = Manifest::parse(
            r#"
            kind = "prob"
            [limits]
            memory = "1TiB"
            deadline = "forever"
            [http]
            allowed_hosts = ["https://x.example/"]
            [filter]
            states = ["asleep"]
            "#,
            "bad.toml",
        )
        .unwrap_err()
        .to_string();
        for needle in [
            "bad.toml",
            "kind: unknown value `prob`",
            "limits.memory",
            "limits.deadline",
            "http.allowed_hosts",
            "filter.states: unknown state `asleep`",
        ] {
            assert!(e.contains(needle), "{needle} missing from: {e}");
        }
        let e = Manifest::parse("colour = 1", "c.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("colour"), "{e}");
    }

    #[test]
    fn ipv6_allow_list_entries_load_and_match() {
        let m = Manifest::parse(
            "[http]\nallowed_hosts = [\"::1\", \"[fe80::1]:8080\", \"[2001:db8::5]:*\"]\n",
            "v6.toml",
        )
        .unwrap();
        // http::Uri::host() of http://[::1]:8080/ is "[::1]", brackets kept.
        let uri: http::Uri = "http://[::1]:8080/".parse().unwrap();
        assert_eq!(uri.host(), Some("[::1]"));
        assert!(m.allows("[::1]", 80) && m.allows("[::1]", 443));
        assert!(
            !m.allows("[::1]", 8080),
            "a bare entry means ports 80 and 443"
        );
        assert!(m.allows("[fe80::1]", 8080) && !m.allows("[fe80::1]", 443));
        assert!(m.allows("[2001:db8::5]", 9));

        let e = Manifest::parse(
            "[http]\nallowed_hosts = [\"::1:8080\", \"[::1\"]\n",
            "amb.toml",
        )
        .unwrap_err()
        .to_string();
        for needle in [
            "amb.toml",
            "http.allowed_hosts: `::1:8080` is ambiguous: write `[::1]:8080`",
            "http.allowed_hosts: `[::1` has an unclosed `[`",
        ] {
            assert!(e.contains(needle), "{needle} missing from: {e}");
        }
    }

    #[test]
    fn a_manifest_that_is_no_regular_file_or_too_large_is_refused() {
        let d = crate::private_fs::tests::TempDir::new("manifest-files");
        let dir = d.path().join("y.toml");
        std::fs::create_dir(&dir).unwrap();
        let e = Manifest::load(&dir).unwrap_err().to_string();
        assert!(
            e.contains("y.toml: cannot read it: it is a directory, not a regular file"),
            "{e}"
        );
        let big = d.path().join("big.toml");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(files::MAX_MANIFEST + 1)
            .unwrap();
        let e = Manifest::load(&big).unwrap_err().to_string();
        assert!(e.contains("more than the 65536 bytes allowed"), "{e}");
        let bin = d.path().join("bin.toml");
        std::fs::write(&bin, b"kind = \"\xff\"").unwrap();
        let e = Manifest::load(&bin).unwrap_err().to_string();
        assert!(e.contains("not UTF-8"), "{e}");
    }

    #[test]
    fn no_manifest_means_the_defaults() {
        let m = Manifest::load(Path::new("/nonexistent/x.toml")).unwrap();
        assert_eq!(m, Manifest::default());
        assert!(!m.allows("localhost", 80), "no HTTP by default");
        let l = &m.limits;
        assert_eq!((l.http_concurrency, l.http_concurrency_plugin), (4, 16));
        assert_eq!((l.log_rate, l.log_burst, l.target_requests), (20, 100, 10));
    }

    #[test]
    fn traffic_limits_parse_and_are_checked() {
        let m = Manifest::parse(
            r#"
            [limits]
            http_concurrency = 2
            http_concurrency_plugin = 6
            log_rate = 5
            log_burst = 7
            target_requests = 3
            "#,
            "t.toml",
        )
        .unwrap();
        let l = &m.limits;
        assert_eq!(
            (
                l.http_concurrency,
                l.http_concurrency_plugin,
                l.log_rate,
                l.log_burst,
                l.target_requests
            ),
            (2, 6, 5, 7, 3)
        );
        // Raising the per-call cap alone raises the per-plugin one.
        let m = Manifest::parse("[limits]\nhttp_concurrency = 40\n", "t.toml").unwrap();
        assert_eq!(m.limits.http_concurrency_plugin, 40);
        let e = Manifest::parse(
            r#"
            [limits]
            http_concurrency = 8
            http_concurrency_plugin = 4
            log_rate = 0
            log_burst = 1000000
            target_requests = 0
            "#,
            "bad.toml",
        )
        .unwrap_err()
        .to_string();
        for needle in [
            "limits.http_concurrency_plugin: 4 is less than limits.http_concurrency, 8",
            "limits.log_rate: must be at least 1",
            "limits.log_burst: 1000000 is more than the most allowed, 100000",
            "limits.target_requests: must be at least 1",
        ] {
            assert!(e.contains(needle), "{needle} missing from: {e}");
        }
    }
}
