//! Which `Host` and `Origin` a listener answers: the one rule for DNS
//! rebinding and cross-origin protection, used by the MCP endpoint (`/mcp`,
//! top-level `allowed_hosts` / `allowed_origins`) and by the control API
//! (`[api] allowed_hosts` / `allowed_origins`).
//!
//! A web page can make a browser send requests to any address, loopback
//! included. Two headers tell such requests apart, and a page cannot forge
//! either:
//!
//! - `Host` names what the browser thinks it is talking to. A page on
//!   `evil.example` whose DNS name is *rebound* to `127.0.0.1` reaches a
//!   loopback listener with `Host: evil.example`, and the browser treats the
//!   answers as that page's own, so it can read them. [`HostRule`] refuses
//!   every `Host` not on the list.
//! - `Origin` names the page that made a request; browsers send it on every
//!   cross-origin request and on every POST. [`OriginRule`] refuses a
//!   present `Origin` that is not on the list (or, where asked, the
//!   listener's own origin). A missing `Origin` passes: non-browser clients
//!   send none.
//!
//! Entries are matched the way rmcp's streamable HTTP server matches them,
//! so `/mcp` behaves as it did when rmcp checked: hosts and origins compare
//! case-insensitively, `[::1]` and `::1` are one host, a host entry without
//! a port matches any port, an origin entry's `:*` matches any port and an
//! origin entry without a port (deprecated) does too, `"null"` matches the
//! `Origin: null` of sandboxed and `file:` pages, and `["*"]` allows all.

use axum::http::{HeaderMap, Uri, header};

/// Why a request's `Host` or `Origin` was refused. The texts are the ones
/// `/mcp` answered with when rmcp checked; the control API says more (see
/// `api/guard.rs`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("Bad Request: missing Host header")]
    MissingHost,
    #[error("Bad Request: Invalid Host header encoding")]
    BadHostEncoding,
    #[error("Bad Request: Invalid Host header")]
    BadHost,
    /// Carries the `Host` as sent (for messages; never trusted).
    #[error("Forbidden: Host header is not allowed")]
    HostNotAllowed(String),
    #[error("Forbidden: Invalid Origin header encoding")]
    BadOriginEncoding,
    #[error("Forbidden: Invalid Origin header")]
    BadOrigin,
    /// Carries the `Origin` as sent.
    #[error("Forbidden: Origin header is not allowed")]
    OriginNotAllowed(String),
}

impl Refusal {
    /// 400 for a missing or malformed `Host`, else 403.
    pub fn status(&self) -> axum::http::StatusCode {
        match self {
            Refusal::MissingHost | Refusal::BadHostEncoding | Refusal::BadHost => {
                axum::http::StatusCode::BAD_REQUEST
            }
            _ => axum::http::StatusCode::FORBIDDEN,
        }
    }
}

/// A `host[:port]` as compared: lower-case, without IPv6 brackets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authority {
    pub host: String,
    pub port: Option<u16>,
}

/// A request's origin as compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// `Origin: null` (sandboxed frames, `file:` pages, some redirects).
    Null,
    Tuple {
        scheme: String,
        host: String,
        port: Option<u16>,
    },
}

/// Which `Host` values are served.
#[derive(Debug, Clone)]
pub struct HostRule {
    /// `None`: any (`["*"]`).
    allowed: Option<Vec<Authority>>,
}

/// Which `Origin` values are served.
#[derive(Debug, Clone)]
pub struct OriginRule {
    /// `None`: any (`["*"]`).
    allowed: Option<Vec<AllowedOrigin>>,
    /// Also the origin whose host and port are the request's own `Host`.
    same_origin: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum AllowedOrigin {
    Null,
    Tuple {
        scheme: String,
        host: String,
        /// `None`: any port (`:*`, or no port given).
        port: Option<u16>,
    },
}

// === impl HostRule ===

impl HostRule {
    /// From config entries (`"localhost"`, `"example.com:8443"`, `"*"`).
    /// Entries that do not parse match nothing; config validation reports
    /// them first ([`host_entry_problem`]).
    pub fn new(entries: &[String]) -> Self {
        if entries.iter().any(|e| e.trim() == "*") {
            return HostRule { allowed: None };
        }
        HostRule {
            allowed: Some(entries.iter().filter_map(|e| parse_authority(e)).collect()),
        }
    }

    /// The request's `Host` (or, without one, the URI's authority, as
    /// HTTP/2 carries it), if it is served.
    pub fn check(&self, uri: &Uri, headers: &HeaderMap) -> Result<Authority, Refusal> {
        let host = request_host(uri, headers)?;
        let Some(allowed) = &self.allowed else {
            return Ok(host);
        };
        let served = allowed
            .iter()
            .any(|a| a.host == host.host && a.port.is_none_or(|p| host.port == Some(p)));
        if served {
            Ok(host)
        } else {
            Err(Refusal::HostNotAllowed(shown(uri, headers)))
        }
    }
}

/// The `Host` as sent, for messages.
fn shown(uri: &Uri, headers: &HeaderMap) -> String {
    match headers.get(header::HOST) {
        Some(v) => String::from_utf8_lossy(v.as_bytes()).into_owned(),
        None => uri.authority().map(|a| a.to_string()).unwrap_or_default(),
    }
}

fn request_host(uri: &Uri, headers: &HeaderMap) -> Result<Authority, Refusal> {
    let text = match headers.get(header::HOST) {
        Some(v) => v.to_str().map_err(|_| Refusal::BadHostEncoding)?.to_owned(),
        None => uri
            .authority()
            .map(|a| a.as_str().to_owned())
            .ok_or(Refusal::MissingHost)?,
    };
    let authority = http::uri::Authority::try_from(text.as_str()).map_err(|_| Refusal::BadHost)?;
    Ok(Authority {
        host: normalize_host(authority.host()),
        port: authority.port_u16(),
    })
}

fn parse_authority(entry: &str) -> Option<Authority> {
    let entry = entry.trim();
    if entry.is_empty() {
        return None;
    }
    Some(match http::uri::Authority::try_from(entry) {
        Ok(a) => Authority {
            host: normalize_host(a.host()),
            port: a.port_u16(),
        },
        Err(_) => Authority {
            host: normalize_host(entry),
            port: None,
        },
    })
}

fn normalize_host(host: &str) -> String {
    host.trim_matches(['[', ']']).to_ascii_lowercase()
}

/// What is wrong with an `allowed_hosts` entry, if anything.
pub fn host_entry_problem(entry: &str) -> Option<String> {
    let trimmed = entry.trim();
    if trimmed == "*" {
        return None;
    }
    if trimmed.is_empty() {
        return Some("must not be empty: write a host name such as \"localhost\"".into());
    }
    // A bare IPv6 address (`::1`) is a host; so is its bracketed form.
    if trimmed.parse::<std::net::Ipv6Addr>().is_ok() {
        return None;
    }
    if trimmed.contains("://") || trimmed.contains('/') {
        return Some(format!(
            "`{entry}` is not a host: write the name (and port) only, like \"vigil.example.com\" or \"vigil.example.com:8081\""
        ));
    }
    http::uri::Authority::try_from(trimmed)
        .err()
        .map(|e| format!("`{entry}` is not a host ({e}): write it like \"vigil.example.com:8081\""))
}

// === impl OriginRule ===

impl OriginRule {
    /// From config entries (`"http://localhost:*"`, `"https://app.example"`,
    /// `"null"`, `"*"`). With `same_origin`, the origin whose host and port
    /// are the request's own `Host` is allowed too.
    pub fn new(entries: &[String], same_origin: bool) -> Self {
        if entries.iter().any(|e| e.trim() == "*") {
            return OriginRule {
                allowed: None,
                same_origin,
            };
        }
        OriginRule {
            allowed: Some(entries.iter().filter_map(|e| parse_allowed(e)).collect()),
            same_origin,
        }
    }

    /// The request's `Origin`, if it has one (`None` passes: non-browser
    /// clients send none). `host` is the request's checked `Host`, for
    /// the same-origin allowance.
    pub fn check(&self, headers: &HeaderMap, host: &Authority) -> Result<Option<Origin>, Refusal> {
        let Some(value) = headers.get(header::ORIGIN) else {
            return Ok(None);
        };
        let text = value.to_str().map_err(|_| Refusal::BadOriginEncoding)?;
        let origin = parse_origin(text).ok_or(Refusal::BadOrigin)?;
        let Some(allowed) = &self.allowed else {
            return Ok(Some(origin));
        };
        if (self.same_origin && is_same_origin(&origin, host))
            || allowed.iter().any(|a| matches(a, &origin))
        {
            Ok(Some(origin))
        } else {
            Err(Refusal::OriginNotAllowed(
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            ))
        }
    }
}

/// `origin` is an http(s) origin on the request's own host and port.
fn is_same_origin(origin: &Origin, host: &Authority) -> bool {
    let Origin::Tuple {
        scheme,
        host: h,
        port,
    } = origin
    else {
        return false;
    };
    let default = default_port(scheme);
    default.is_some() && *h == host.host && port.or(default) == host.port.or(default)
}

fn matches(allowed: &AllowedOrigin, origin: &Origin) -> bool {
    match (allowed, origin) {
        (AllowedOrigin::Null, Origin::Null) => true,
        (
            AllowedOrigin::Tuple { scheme, host, port },
            Origin::Tuple {
                scheme: s,
                host: h,
                port: p,
            },
        ) => {
            scheme == s
                && host == h
                && port.is_none_or(|want| p.or_else(|| default_port(s)) == Some(want))
        }
        _ => false,
    }
}

/// The port a scheme implies when an origin omits it (RFC 6454 §4).
fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

fn parse_origin(value: &str) -> Option<Origin> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    if value.eq_ignore_ascii_case("null") {
        return Some(Origin::Null);
    }
    let uri = Uri::try_from(value).ok()?;
    let authority = uri.authority()?;
    Some(Origin::Tuple {
        scheme: uri.scheme_str()?.to_ascii_lowercase(),
        host: normalize_host(authority.host()),
        port: authority.port_u16(),
    })
}

fn parse_allowed(entry: &str) -> Option<AllowedOrigin> {
    let entry = entry.trim();
    if let Some(base) = entry.strip_suffix(":*") {
        let Some(Origin::Tuple {
            scheme,
            host,
            port: None,
        }) = parse_origin(base)
        else {
            return None;
        };
        return Some(AllowedOrigin::Tuple {
            scheme,
            host,
            port: None,
        });
    }
    Some(match parse_origin(entry)? {
        Origin::Null => AllowedOrigin::Null,
        Origin::Tuple { scheme, host, port } => AllowedOrigin::Tuple { scheme, host, port },
    })
}

/// What is wrong with an `allowed_origins` entry, if anything.
pub fn origin_entry_problem(entry: &str) -> Option<String> {
    let trimmed = entry.trim();
    if trimmed == "*" || trimmed.eq_ignore_ascii_case("null") {
        return None;
    }
    if !trimmed.contains("://") {
        return Some(format!(
            "`{entry}` needs a scheme, like \"https://{trimmed}\""
        ));
    }
    match parse_allowed(trimmed) {
        Some(_) => None,
        None => Some(format!(
            "`{entry}` is not an origin: write it like \"https://app.example.com\" or \"http://localhost:*\""
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    fn list(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn host(rule: &HostRule, value: &str) -> Result<Authority, Refusal> {
        rule.check(&Uri::from_static("/"), &headers(&[("host", value)]))
    }

    #[test]
    fn hosts_match_by_name_and_port_when_given() {
        let rule = HostRule::new(&list(&[
            "localhost",
            "127.0.0.1",
            "[::1]",
            "vigil.example:8443",
        ]));
        for ok in [
            "localhost",
            "LOCALHOST:8081",
            "127.0.0.1:1",
            "[::1]:8081",
            "vigil.example:8443",
        ] {
            assert!(host(&rule, ok).is_ok(), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8081",
            "vigil.example",
            "vigil.example:80",
            "127.0.0.2",
        ] {
            assert_eq!(
                host(&rule, bad),
                Err(Refusal::HostNotAllowed(bad.into())),
                "{bad}"
            );
        }
        assert!(host(&HostRule::new(&list(&["*"])), "anything.example:1").is_ok());
    }

    #[test]
    fn a_missing_or_malformed_host_is_a_bad_request() {
        let rule = HostRule::new(&list(&["localhost"]));
        assert_eq!(
            rule.check(&Uri::from_static("/"), &HeaderMap::new()),
            Err(Refusal::MissingHost)
        );
        assert_eq!(host(&rule, "a b"), Err(Refusal::BadHost));
        // HTTP/2 carries the authority in the URI.
        assert!(
            rule.check(
                &Uri::from_static("http://localhost:8081/x"),
                &HeaderMap::new()
            )
            .is_ok()
        );
        assert_eq!(Refusal::MissingHost.status(), 400);
        assert_eq!(Refusal::HostNotAllowed(String::new()).status(), 403);
    }

    fn origin(
        rule: &OriginRule,
        host: &str,
        value: Option<&str>,
    ) -> Result<Option<Origin>, Refusal> {
        let own = parse_authority(host).unwrap();
        match value {
            Some(v) => rule.check(&headers(&[("origin", v)]), &own),
            None => rule.check(&HeaderMap::new(), &own),
        }
    }

    #[test]
    fn origins_match_like_rmcp() {
        let rule = OriginRule::new(
            &list(&[
                "http://localhost:*",
                "https://app.example:8443",
                "https://any.example",
                "null",
            ]),
            false,
        );
        for ok in [
            "http://localhost:3000",
            "http://LOCALHOST:1",
            "https://app.example:8443",
            "https://any.example:9",
            "null",
        ] {
            assert!(origin(&rule, "localhost:8080", Some(ok)).is_ok(), "{ok}");
        }
        for bad in [
            "http://evil.example",
            "https://localhost:3000",
            "https://app.example",
            "http://app.example:8443",
        ] {
            assert_eq!(
                origin(&rule, "localhost:8080", Some(bad)),
                Err(Refusal::OriginNotAllowed(bad.into())),
                "{bad}"
            );
        }
        assert_eq!(origin(&rule, "localhost:8080", None), Ok(None));
        assert_eq!(
            origin(&rule, "localhost:8080", Some("not an origin")),
            Err(Refusal::BadOrigin)
        );
    }

    #[test]
    fn same_origin_is_the_requests_own_host_and_port() {
        let rule = OriginRule::new(&[], true);
        assert!(origin(&rule, "127.0.0.1:8081", Some("http://127.0.0.1:8081")).is_ok());
        assert!(origin(&rule, "vigil.example", Some("https://vigil.example")).is_ok());
        assert!(origin(&rule, "vigil.example:443", Some("https://vigil.example")).is_ok());
        for bad in [
            "http://127.0.0.1:9999",
            "http://localhost:8081",
            "null",
            "ftp://127.0.0.1:8081",
        ] {
            assert!(
                origin(&rule, "127.0.0.1:8081", Some(bad)).is_err(),
                "{bad} is another origin"
            );
        }
        // Without the allowance the listener's own origin is just another one.
        assert!(
            origin(
                &OriginRule::new(&[], false),
                "127.0.0.1:8081",
                Some("http://127.0.0.1:8081")
            )
            .is_err()
        );
        assert!(
            origin(
                &OriginRule::new(&list(&["*"]), false),
                "x",
                Some("http://evil.example")
            )
            .is_ok()
        );
    }

    #[test]
    fn config_entries_are_checked() {
        assert_eq!(host_entry_problem("vigil.example:8081"), None);
        assert_eq!(host_entry_problem("*"), None);
        assert!(
            host_entry_problem("http://vigil.example")
                .unwrap()
                .contains("not a host")
        );
        assert!(host_entry_problem("").is_some());
        assert_eq!(origin_entry_problem("https://app.example"), None);
        assert_eq!(origin_entry_problem("http://localhost:*"), None);
        assert_eq!(origin_entry_problem("null"), None);
        assert_eq!(origin_entry_problem("*"), None);
        assert!(
            origin_entry_problem("app.example")
                .unwrap()
                .contains("needs a scheme")
        );
        assert!(
            origin_entry_problem("https://app.example:1:*")
                .unwrap()
                .contains("not an origin")
        );
    }
}
