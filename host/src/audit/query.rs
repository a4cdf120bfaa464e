//! [`CallQuery`]: which audited calls to read, and how the control API's
//! query string (`?principal=&backend=&outcome=&since=&limit=&after=`)
//! becomes one, every bad value refused with what to write instead.

use std::time::{Duration, SystemTime};

use super::Outcome;

/// Rows one query returns when it names no `limit`.
pub const DEFAULT_LIMIT: usize = 100;
/// The most rows one query may ask for.
pub const MAX_LIMIT: usize = 10_000;

/// A read of the call audit. Every filter that is set must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallQuery {
    /// Exactly this principal (`key:ci-bot`, `local`).
    pub principal: Option<String>,
    /// Exactly this issuer (of `sub:` principals).
    pub issuer: Option<String>,
    /// Exactly this configured backend.
    pub backend: Option<String>,
    pub outcome: Option<Outcome>,
    /// Calls received at or after this time.
    pub since: Option<SystemTime>,
    /// At most this many rows, 1..=[`MAX_LIMIT`].
    pub limit: usize,
    /// `None`: the newest rows, newest first. `Some(id)`: the rows with a
    /// larger id, oldest first — the next page for a reader that follows
    /// the audit as it grows.
    pub after: Option<i64>,
}

impl Default for CallQuery {
    fn default() -> Self {
        CallQuery {
            principal: None,
            issuer: None,
            backend: None,
            outcome: None,
            since: None,
            limit: DEFAULT_LIMIT,
            after: None,
        }
    }
}

/// The query string as sent: every value text, checked by
/// [`CallQuery::parse`].
#[derive(Debug, Default, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCallQuery {
    pub principal: Option<String>,
    pub issuer: Option<String>,
    pub backend: Option<String>,
    pub outcome: Option<String>,
    pub since: Option<String>,
    pub limit: Option<String>,
    pub after: Option<String>,
}

impl CallQuery {
    /// Checks `raw`; relative `since` values count back from `now`. An
    /// empty value (`?backend=`) is no filter.
    ///
    /// # Errors
    ///
    /// The first bad value, named with the parameter and what to write
    /// (`outcome: unknown outcome `fine`: use one of ok, ...`).
    pub fn parse(raw: RawCallQuery, now: SystemTime) -> Result<CallQuery, String> {
        let given = |v: Option<String>| v.filter(|v| !v.is_empty());
        let outcome = given(raw.outcome)
            .map(|o| o.parse::<Outcome>())
            .transpose()
            .map_err(|e| format!("outcome: {e}"))?;
        let since = given(raw.since)
            .map(|s| parse_since(&s, now))
            .transpose()
            .map_err(|e| format!("since: {e}"))?;
        let limit = match given(raw.limit) {
            None => DEFAULT_LIMIT,
            Some(l) => l
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=MAX_LIMIT).contains(n))
                .ok_or_else(|| format!("limit: `{l}` is not a number from 1 to {MAX_LIMIT}"))?,
        };
        let after = given(raw.after)
            .map(|a| {
                a.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
                    format!("after: `{a}` is not a row id: pass the `id` of a row an earlier answer gave")
                })
            })
            .transpose()?;
        Ok(CallQuery {
            principal: given(raw.principal),
            issuer: given(raw.issuer),
            backend: given(raw.backend),
            outcome,
            since,
            limit,
            after,
        })
    }
}

/// `since` as an RFC 3339 time (`2025-06-01T09:00:00Z`,
/// `2025-06-01T11:00:00.5+02:00`) or a duration back from `now` (`10m`,
/// `2h`, `7d`).
///
/// # Errors
///
/// Text that is neither, or a time before 1970, with both forms shown.
pub fn parse_since(text: &str, now: SystemTime) -> Result<SystemTime, String> {
    let text = text.trim();
    let refused = || {
        format!(
            "`{text}` is neither an RFC 3339 time (like 2025-06-01T09:00:00Z) nor a duration back from now (like 10m, 2h or 7d)"
        )
    };
    let at = match humantime::parse_duration(text) {
        Ok(back) => now.checked_sub(back),
        Err(_) => rfc3339(text),
    };
    at.filter(|t| *t >= SystemTime::UNIX_EPOCH)
        .ok_or_else(refused)
}

/// An RFC 3339 time with `Z` or a numeric offset (humantime reads UTC
/// only; the offset is applied here).
fn rfc3339(text: &str) -> Option<SystemTime> {
    // The shortest full form is `YYYY-MM-DDTHH:MM:SSZ`; an offset is the
    // last six characters, `+HH:MM` or `-HH:MM`.
    if text.len() > 20 && text.is_char_boundary(text.len() - 6) {
        let (base, offset) = text.split_at(text.len() - 6);
        let b = offset.as_bytes();
        if matches!(b[0], b'+' | b'-') && b[3] == b':' {
            let hours: u64 = offset.get(1..3)?.parse().ok()?;
            let minutes: u64 = offset.get(4..6)?.parse().ok()?;
            if hours > 23 || minutes > 59 {
                return None;
            }
            let shift = Duration::from_secs(hours * 3600 + minutes * 60);
            let local = humantime::parse_rfc3339(&format!("{base}Z")).ok()?;
            // Local time + offset = UTC + offset: subtract a positive one.
            return if b[0] == b'+' {
                local.checked_sub(shift)
            } else {
                local.checked_add(shift)
            };
        }
    }
    let upper = text.to_ascii_uppercase();
    if upper.ends_with('Z') {
        return humantime::parse_rfc3339(&upper).ok();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(t: SystemTime) -> u128 {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    }

    #[test]
    fn since_reads_rfc3339_with_any_offset_and_relative_durations() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_750_000_000);
        let utc = parse_since("2025-06-01T09:00:00Z", now).unwrap();
        assert_eq!(ms(utc), 1_748_768_400_000);
        assert_eq!(parse_since("2025-06-01T11:00:00+02:00", now), Ok(utc));
        assert_eq!(parse_since("2025-06-01T04:30:00-04:30", now), Ok(utc));
        assert_eq!(
            ms(parse_since("2025-06-01t09:00:00.250z", now).unwrap()),
            1_748_768_400_250
        );
        assert_eq!(parse_since("10m", now), Ok(now - Duration::from_secs(600)));
        assert_eq!(
            parse_since("7d", now),
            Ok(now - Duration::from_secs(7 * 86400))
        );
    }

    #[test]
    fn a_bad_since_shows_both_forms() {
        let now = SystemTime::now();
        for bad in [
            "yesterday",
            "2025-06-01",
            "2025-06-01T09:00:00",
            "2025-06-01T09:00:00+25:00",
            "2025-13-01T09:00:00Z",
            "",
            "99999999999d",
        ] {
            let e = parse_since(bad, now).unwrap_err();
            assert!(e.contains("RFC 3339") && e.contains("10m"), "{bad}: {e}");
        }
    }

    fn raw(pairs: &[(&str, &str)]) -> RawCallQuery {
        let mut q = RawCallQuery::default();
        for (k, v) in pairs {
            let slot = match *k {
                "principal" => &mut q.principal,
                "issuer" => &mut q.issuer,
                "backend" => &mut q.backend,
                "outcome" => &mut q.outcome,
                "since" => &mut q.since,
                "limit" => &mut q.limit,
                "after" => &mut q.after,
                other => panic!("no parameter {other}"),
            };
            *slot = Some((*v).to_owned());
        }
        q
    }

    #[test]
    fn a_query_string_becomes_a_query() {
        let now = SystemTime::now();
        let q = CallQuery::parse(
            raw(&[
                ("principal", "key:ci"),
                ("issuer", "https://login.example.com"),
                ("backend", ""),
                ("outcome", "rate_limited"),
                ("since", "1h"),
                ("limit", "10000"),
                ("after", "42"),
            ]),
            now,
        )
        .unwrap();
        assert_eq!(
            q,
            CallQuery {
                principal: Some("key:ci".into()),
                issuer: Some("https://login.example.com".into()),
                backend: None,
                outcome: Some(Outcome::RateLimited),
                since: Some(now - Duration::from_secs(3600)),
                limit: 10_000,
                after: Some(42),
            }
        );
        assert_eq!(
            CallQuery::parse(RawCallQuery::default(), now),
            Ok(CallQuery::default())
        );
    }

    #[test]
    fn each_bad_value_is_named_with_its_parameter() {
        let now = SystemTime::now();
        for (pair, starts) in [
            (("outcome", "fine"), "outcome: unknown outcome `fine`"),
            (("since", "soon"), "since: `soon` is neither"),
            (("limit", "0"), "limit: `0` is not a number from 1 to 10000"),
            (("limit", "10001"), "limit: `10001`"),
            (("limit", "ten"), "limit: `ten`"),
            (("after", "-1"), "after: `-1` is not a row id"),
            (("after", "x"), "after: `x`"),
        ] {
            let e = CallQuery::parse(raw(&[pair]), now).unwrap_err();
            assert!(e.starts_with(starts), "{pair:?}: {e}");
        }
    }
}
