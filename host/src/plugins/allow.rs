//! `[http] allowed_hosts`: what one entry means, and whether a plugin's
//! outbound request matches any entry.
//!
//! The spellings:
//!
//! | entry | host | ports |
//! |---|---|---|
//! | `example.com`, `127.0.0.1` | that name / address | 80 and 443 |
//! | `example.com:8443` | that name | 8443 |
//! | `example.com:*` | that name | any |
//! | `::1`, `fe80::1` (bare IPv6) | that address | 80 and 443 |
//! | `[::1]` | that address | 80 and 443 |
//! | `[::1]:8080`, `[::1]:*` | that address | 8080 / any |
//!
//! [`parse`] runs when the manifest loads and refuses, naming the fix,
//! anything that would otherwise silently allow nothing or something else
//! than meant: an unclosed bracket, a port that is not one, a wildcard
//! name, and a bare IPv6 literal whose last group could be a port
//! (`::1:8080` is both the address `::1:8080` and "`::1`, port 8080": the
//! operator must write `[::1]:8080` or `[::1:8080]`).
//!
//! IPv6 addresses compare as addresses (`[::1]` and `[0:0::1]` are one),
//! names case-insensitively; an IPv4-mapped address (`::ffff:127.0.0.1`)
//! is not its IPv4 address: each entry allows exactly what it spells.

use std::net::Ipv6Addr;

/// One parsed entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    host: Host,
    ports: Ports,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Host {
    /// A DNS name or an IPv4 address, lower-case.
    Name(String),
    V6(Ipv6Addr),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ports {
    /// No port given: the web's two, 80 and 443.
    Web,
    Any,
    Only(u16),
}

/// The forms an entry may take, for messages.
const FORMS: &str = "write `example.com`, `example.com:8443`, `127.0.0.1:*`, `::1` or `[::1]:8080`";

/// Parses one `allowed_hosts` entry; the error says what is wrong and how
/// to write it (the caller adds the key).
pub fn parse(entry: &str) -> Result<Entry, String> {
    let e = entry;
    if e.trim().is_empty() {
        return Err(format!("an entry is empty: {FORMS}"));
    }
    if e.trim() != e {
        return Err(format!("`{e}` has spaces around it: {FORMS}"));
    }
    if e.contains("://") || e.contains('/') {
        return Err(format!("`{e}` is not a host (no scheme, no path): {FORMS}"));
    }
    if let Some(rest) = e.strip_prefix('[') {
        let Some((inside, after)) = rest.split_once(']') else {
            return Err(format!(
                "`{e}` has an unclosed `[`: write `[::1]`, `[::1]:8080` or `[::1]:*`"
            ));
        };
        let addr: Ipv6Addr = inside.parse().map_err(|_| {
            format!("`{e}`: brackets hold an IPv6 address, and `{inside}` is not one (zone ids like `%eth0` are not supported)")
        })?;
        let ports = match after {
            "" => Ports::Web,
            _ => match after.strip_prefix(':') {
                Some(p) => port(e, p)?,
                None => {
                    return Err(format!(
                        "`{e}`: only `:PORT` or `:*` may follow `]`, like `[{inside}]:8080`"
                    ));
                }
            },
        };
        return Ok(Entry {
            host: Host::V6(addr),
            ports,
        });
    }
    if e.contains(']') {
        return Err(format!(
            "`{e}` has a `]` without its `[`: write `[::1]` or `[::1]:8080`"
        ));
    }
    match e.matches(':').count() {
        0 => Ok(Entry {
            host: name(e, e)?,
            ports: Ports::Web,
        }),
        1 => {
            let (h, p) = e.split_once(':').unwrap_or((e, ""));
            Ok(Entry {
                host: name(e, h)?,
                ports: port(e, p)?,
            })
        }
        _ => bare_v6(e),
    }
}

/// A bare IPv6 literal (`::1`, `fe80::1`): ports 80 and 443, unless its
/// last group could be read as a port.
fn bare_v6(e: &str) -> Result<Entry, String> {
    // The reading as "address, then :PORT": is it one?
    let as_port = e.rsplit_once(':').and_then(|(a, p)| {
        let looks_like_port = p == "*" || (!p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        (looks_like_port && a.parse::<Ipv6Addr>().is_ok()).then_some((a, p))
    });
    match (e.parse::<Ipv6Addr>(), as_port) {
        (Ok(addr), None) => Ok(Entry {
            host: Host::V6(addr),
            ports: Ports::Web,
        }),
        (Ok(_), Some((a, p))) => Err(format!(
            "`{e}` is ambiguous: write `[{a}]:{p}` for port {p} of {a}, or `[{e}]` for the address {e} on ports 80 and 443"
        )),
        (Err(_), Some((a, p))) => Err(format!(
            "`{e}`: an IPv6 address with a port needs brackets: write `[{a}]:{p}`"
        )),
        (Err(_), None) => Err(format!(
            "`{e}` is neither a host name nor an IPv6 address: {FORMS}"
        )),
    }
}

/// The host part of a name entry: letters, digits, `-`, `.`, `_`.
fn name(e: &str, h: &str) -> Result<Host, String> {
    if h.is_empty() {
        return Err(format!("`{e}` has no host before the port: {FORMS}"));
    }
    if h.contains('*') {
        return Err(format!(
            "`{e}`: wildcard names are not supported: list each host by name (only the port may be `*`, as in `example.com:*`)"
        ));
    }
    if !h
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
    {
        return Err(format!(
            "`{e}`: `{h}` is not a host name or address: {FORMS}"
        ));
    }
    Ok(Host::Name(h.to_ascii_lowercase()))
}

/// `*` or a port number, 1 to 65535.
fn port(e: &str, p: &str) -> Result<Ports, String> {
    if p == "*" {
        return Ok(Ports::Any);
    }
    match p.parse::<u16>() {
        Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Ok(Ports::Only(n)),
        _ => Err(format!(
            "`{e}`: `{p}` is not a port: write a number from 1 to 65535, or `*` for any port"
        )),
    }
}

impl Entry {
    /// Whether a request to `host` (as [`http::Uri::host`] gives it: an
    /// IPv6 address in brackets) on `port` matches this entry.
    pub fn matches(&self, host: &str, port: u16) -> bool {
        let host_ok = match (&self.host, request_host(host)) {
            (Host::Name(n), Host::Name(h)) => *n == h,
            (Host::V6(a), Host::V6(b)) => *a == b,
            _ => false,
        };
        host_ok
            && match self.ports {
                Ports::Web => port == 80 || port == 443,
                Ports::Any => true,
                Ports::Only(p) => p == port,
            }
    }
}

/// A request's host as compared: `[v6]` (or bare v6) as an address, else
/// the lower-case name.
fn request_host(host: &str) -> Host {
    let inner = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    match inner.parse::<Ipv6Addr>() {
        Ok(a) => Host::V6(a),
        // A bracketed thing that is no address matches no name either.
        Err(_) if inner.len() != host.len() => Host::Name(host.to_owned()),
        Err(_) => Host::Name(host.to_ascii_lowercase()),
    }
}

/// Whether `allowed` (manifest entries) lets a request reach `host:port`.
/// Entries that do not parse (the manifest refused them at load) allow
/// nothing.
pub fn allows(allowed: &[String], host: &str, port: u16) -> bool {
    allowed
        .iter()
        .filter_map(|e| parse(e).ok())
        .any(|e| e.matches(host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(entry: &str) -> Entry {
        parse(entry).unwrap_or_else(|e| panic!("{entry}: {e}"))
    }

    fn refused(entry: &str) -> String {
        match parse(entry) {
            Ok(e) => panic!("{entry} accepted as {e:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn names_and_ipv4() {
        let e = ok("Example.COM");
        assert!(e.matches("example.com", 443) && e.matches("EXAMPLE.com", 80));
        assert!(!e.matches("example.com", 8080) && !e.matches("evil.example", 443));
        assert!(ok("hooks.example:8443").matches("hooks.example", 8443));
        assert!(!ok("hooks.example:8443").matches("hooks.example", 443));
        assert!(ok("127.0.0.1:*").matches("127.0.0.1", 41234));
        assert!(!ok("127.0.0.1:*").matches("[::1]", 41234));
        assert!(ok("my_host-1.local").matches("my_host-1.local", 80));
    }

    #[test]
    fn bare_ipv6_means_ports_80_and_443() {
        for entry in ["::1", "0:0::1", "0:0:0:0:0:0:0:1"] {
            let e = ok(entry);
            // What http::Uri::host() gives: the address in brackets.
            assert!(e.matches("[::1]", 80), "{entry}");
            assert!(e.matches("[::1]", 443), "{entry}");
            assert!(e.matches("::1", 443), "{entry}");
            assert!(!e.matches("[::1]", 8080), "{entry}");
            assert!(!e.matches("[::2]", 80), "{entry}");
        }
        let e = ok("fe80::1");
        assert!(e.matches("[FE80::1]", 443) && e.matches("[fe80:0::1]", 80));
        assert!(!e.matches("[fe80::2]", 443));
        assert!(ok("2001:db8::5").matches("[2001:db8::5]", 443));
        // A last group of hex letters cannot be a port: no ambiguity.
        assert!(ok("fe80::1:abcd").matches("[fe80::1:abcd]", 80));
        // IPv4-mapped: the address it spells, not 127.0.0.1.
        let m = ok("::ffff:127.0.0.1");
        assert!(m.matches("[::ffff:7f00:1]", 80));
        assert!(!m.matches("127.0.0.1", 80));
    }

    #[test]
    fn bracketed_ipv6_with_and_without_port() {
        let e = ok("[::1]");
        assert!(e.matches("[::1]", 80) && e.matches("[::1]", 443) && !e.matches("[::1]", 8080));
        let e = ok("[::1]:8080");
        assert!(e.matches("[::1]", 8080) && !e.matches("[::1]", 80) && !e.matches("[::2]", 8080));
        let e = ok("[::1]:*");
        assert!(e.matches("[::1]", 1) && e.matches("[::1]", 65535) && !e.matches("[::2]", 80));
        assert!(ok("[::1:8080]").matches("[::1:8080]", 443));
        // A name is never an address, nor the other way round.
        assert!(!ok("[::1]:*").matches("localhost", 80));
        assert!(!ok("localhost:*").matches("[::1]", 80));
    }

    #[test]
    fn ambiguous_or_malformed_entries_are_refused_with_the_fix() {
        for (entry, needle) in [
            (
                "::1:8080",
                "ambiguous: write `[::1]:8080` for port 8080 of ::1, or `[::1:8080]`",
            ),
            ("fe80::1:2", "`[fe80::1]:2`"),
            ("::1:*", "needs brackets: write `[::1]:*`"),
            ("[::1", "unclosed `[`"),
            ("[::1:8080", "unclosed `[`"),
            ("::1]", "without its `[`"),
            ("[::1]8080", "only `:PORT` or `:*` may follow `]`"),
            ("[::1]:", "`` is not a port"),
            ("[::1]:http", "`http` is not a port"),
            ("[::1]:65536", "`65536` is not a port"),
            ("[::1]:0", "`0` is not a port"),
            ("[example.com]", "`example.com` is not one"),
            ("[fe80::1%eth0]", "zone ids"),
            ("example.com:abc", "`abc` is not a port"),
            ("example.com:+80", "`+80` is not a port"),
            (":8080", "no host before the port"),
            ("*.example.com", "wildcard names are not supported"),
            ("*", "wildcard names are not supported"),
            ("a:b:c", "neither a host name nor an IPv6 address"),
            ("ex ample.com", "is not a host name or address"),
            (" example.com", "spaces"),
            ("", "empty"),
            ("https://x.example/", "no scheme, no path"),
            ("x.example/hook", "no scheme, no path"),
        ] {
            let e = refused(entry);
            assert!(e.contains(needle), "{entry}: `{needle}` missing from: {e}");
        }
    }

    #[test]
    fn unparsable_entries_allow_nothing() {
        let list = vec![
            "::1:8080".to_owned(),
            "[::1".to_owned(),
            "example.com".to_owned(),
        ];
        assert!(!allows(&list, "[::1]", 8080));
        assert!(!allows(&list, "[::1:8080]", 80));
        assert!(allows(&list, "example.com", 443));
        // A bracketed request host that is no address matches no name.
        assert!(!allows(&["example.com".to_owned()], "[example.com]", 443));
    }
}
