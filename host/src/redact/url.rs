//! Masking of credentials in URLs found in free text.
//!
//! A URL is `scheme://` followed by everything up to a character that ends
//! a URL in prose, logs or JSON (whitespace, quotes, `<`, `>`, `)`, `}`,
//! `\`, a control character). In it, [`mask_urls`] replaces
//!
//! - the userinfo (`user:password@`) with `***@`;
//! - each query value with `***` (`?api_key=***&region=***`), and a query
//!   entry without `=` with `***`;
//! - each `key=value` value of the fragment (`#token=***`); a bare fragment
//!   (`#section`) is an anchor and is kept.
//!
//! Scheme, host, port, path and query keys stay, so a reader still sees
//! where the request went.

use std::borrow::Cow;

use super::MASK;

/// `text` with the credentials of every URL in it masked; borrowed when
/// nothing was masked.
pub fn mask_urls(text: &str) -> Cow<'_, str> {
    let mut out: Option<String> = None;
    // Bytes of `text` already copied to `out`.
    let mut copied = 0;
    let mut from = 0;
    while let Some(found) = text[from..].find("://") {
        let sep = from + found;
        let start = sep + 3;
        let end = text[start..]
            .find(ends_url)
            .map_or(text.len(), |i| start + i);
        if has_scheme(&text[..sep])
            && let Some(masked) = mask_rest(&text[start..end])
        {
            let o = out.get_or_insert_with(|| String::with_capacity(text.len()));
            o.push_str(&text[copied..start]);
            o.push_str(&masked);
            copied = end;
        }
        from = end;
    }
    match out {
        None => Cow::Borrowed(text),
        Some(mut o) => {
            o.push_str(&text[copied..]);
            Cow::Owned(o)
        }
    }
}

/// Whether `before` (the text before `://`) ends in a URL scheme: a letter,
/// then letters, digits, `+`, `-` or `.`.
fn has_scheme(before: &str) -> bool {
    let scheme_start = before
        .char_indices()
        .rev()
        .find(|&(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
        .map_or(0, |(i, c)| i + c.len_utf8());
    before[scheme_start..]
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic())
}

fn ends_url(c: char) -> bool {
    c.is_whitespace()
        || c.is_control()
        || matches!(c, '"' | '\'' | '`' | '<' | '>' | ')' | '}' | '\\' | '|')
}

/// The part of a URL after `scheme://`, masked; `None` when it holds
/// nothing to mask.
fn mask_rest(rest: &str) -> Option<String> {
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (path_and_query, fragment) = match tail.split_once('#') {
        Some((pq, f)) => (pq, Some(f)),
        None => (tail, None),
    };
    let (path, query) = match path_and_query.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path_and_query, None),
    };
    let host = authority.rsplit_once('@').map(|(_, host)| host);
    let query_masked = query.map(|q| mask_pairs(q, true));
    let fragment_masked = fragment.map(|f| mask_pairs(f, false));
    if host.is_none() && query_masked.as_deref() == query && fragment_masked.as_deref() == fragment
    {
        return None;
    }
    let mut out = String::with_capacity(rest.len());
    match host {
        Some(host) => {
            out.push_str(MASK);
            out.push('@');
            out.push_str(host);
        }
        None => out.push_str(authority),
    }
    out.push_str(path);
    if let Some(q) = query_masked {
        out.push('?');
        out.push_str(&q);
    }
    if let Some(f) = fragment_masked {
        out.push('#');
        out.push_str(&f);
    }
    Some(out)
}

/// `a=1&b=2` → `a=***&b=***`. An entry without `=` is masked when `bare`
/// is set (a query), kept otherwise (a fragment anchor); empty values stay
/// empty.
fn mask_pairs(pairs: &str, bare: bool) -> String {
    pairs
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, "")) => format!("{k}="),
            Some((k, _)) => format!("{k}={MASK}"),
            None if bare && !pair.is_empty() => MASK.to_owned(),
            None => pair.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests {
    use super::mask_urls;

    #[track_caller]
    fn check(text: &str, expected: &str) {
        assert_eq!(mask_urls(text), expected, "{text}");
    }

    #[test]
    fn userinfo_and_query_values_are_masked() {
        check(
            "http://vigil-user:pw-1234@127.0.0.1:3902/mcp?api_key=k-5678&region=eu",
            "http://***@127.0.0.1:3902/mcp?api_key=***&region=***",
        );
        check(
            "https://token@example.com/mcp",
            "https://***@example.com/mcp",
        );
        check("http://h/mcp?sk-bare-secret", "http://h/mcp?***");
        check("http://h/mcp?a=&b=1", "http://h/mcp?a=&b=***");
    }

    #[test]
    fn urls_without_credentials_are_left_alone() {
        for text in [
            "http://127.0.0.1:3902/mcp",
            "see https://example.com/docs#section-2.",
            "no url here: just a: colon",
            "://no-scheme?x=1",
            "1://digits?x=1",
        ] {
            assert!(
                matches!(mask_urls(text), std::borrow::Cow::Borrowed(_)),
                "{text}"
            );
        }
    }

    #[test]
    fn fragment_values_are_masked_and_anchors_kept() {
        check(
            "http://127.0.0.1:8081/ui#token=SECRET",
            "http://127.0.0.1:8081/ui#token=***",
        );
        check("http://h/p?q=1#top", "http://h/p?q=***#top");
    }

    #[test]
    fn a_url_ends_where_prose_logs_and_json_end_it() {
        check(
            "error sending request for url (http://h:1/mcp?api_key=k1), when sending",
            "error sending request for url (http://h:1/mcp?api_key=***), when sending",
        );
        check(
            r#"Error { url: "http://u:p@h/mcp?k=v", source: .. }"#,
            r#"Error { url: "http://***@h/mcp?k=***", source: .. }"#,
        );
        check(
            r#"{"url":"http://h/mcp?k=v\n"}"#,
            r#"{"url":"http://h/mcp?k=***\n"}"#,
        );
        check(
            "two: ws://a@h/x and redis://:pw@db:6379/0?x=1 end",
            "two: ws://***@h/x and redis://***@db:6379/0?x=*** end",
        );
    }

    #[test]
    fn any_text_is_handled_without_a_panic() {
        // Every sequence of three of these pieces: multi-byte characters
        // around and inside URLs, cut-off URLs, separators at every place.
        let pieces = [
            "é", "://", "http", "?", "=", "&", "#", "@", " ", "\"", "ß://", "a", "→", "/", ")",
        ];
        for a in pieces {
            for b in pieces {
                for c in pieces {
                    for d in pieces {
                        let text = format!("{a}{b}{c}{d}");
                        let _ = mask_urls(&text);
                    }
                }
            }
        }
        check("é://x?a=b", "é://x?a=b");
        check("naïve→http://h?k=v", "naïve→http://h?k=***");
    }

    #[test]
    fn ipv6_hosts_and_non_ascii_text_survive() {
        check(
            "http://[::1]:8080/mcp?key=v — läuft",
            "http://[::1]:8080/mcp?key=*** — läuft",
        );
        check("http://ü:p@hôst/?é=ß", "http://***@hôst/?é=***");
    }
}
