//! The 2026-07-28 standard request headers (`Mcp-Method`, `Mcp-Name`,
//! SEP-2243) as the raw path reads the client's and writes the backend's.
//!
//! rmcp's server checks a client's headers against its body on the typed
//! path; the raw path takes only a request whose headers already agree
//! ([`agree`]), so a disagreeing one still gets rmcp's answer. Toward the
//! backend the name is the backend's (prefix naming), written as rmcp's
//! client writes it ([`encode`]).

use base64::Engine as _;
use base64::prelude::BASE64_STANDARD;

const PREFIX: &str = "=?base64?";
const SUFFIX: &str = "?=";

/// `value` as a header value: base64-wrapped when it could not travel
/// bare (space or tab at either end, characters outside visible ASCII, or
/// text that looks wrapped already).
pub fn encode(value: &str) -> String {
    let wrap = value.starts_with([' ', '\t'])
        || value.ends_with([' ', '\t'])
        || value.chars().any(|c| !(' '..='~').contains(&c))
        || (value.starts_with(PREFIX) && value.ends_with(SUFFIX));
    if wrap {
        format!("{PREFIX}{}{SUFFIX}", BASE64_STANDARD.encode(value))
    } else {
        value.to_owned()
    }
}

/// A header value decoded ([`encode`] reversed); `None` when the wrapping
/// holds no base64 of UTF-8 text.
pub fn decode(value: &str) -> Option<std::borrow::Cow<'_, str>> {
    match value
        .strip_prefix(PREFIX)
        .and_then(|v| v.strip_suffix(SUFFIX))
    {
        Some(inner) => {
            let bytes = BASE64_STANDARD.decode(inner).ok()?;
            String::from_utf8(bytes).ok().map(Into::into)
        }
        None => Some(value.into()),
    }
}

/// The one value of header `name`, as text; `None` when it is absent,
/// repeated or not text.
fn single<'a>(headers: &'a http::HeaderMap, name: &str) -> Option<&'a str> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?;
    if values.next().is_some() {
        return None;
    }
    first.to_str().ok()
}

/// Whether `Mcp-Method` is `method` and, for a method that names what it
/// routes by (`name`), `Mcp-Name` names it; each present once.
pub fn agree(headers: &http::HeaderMap, method: &str, name: Option<&str>) -> bool {
    single(headers, "mcp-method") == Some(method)
        && name.is_none_or(|name| {
            single(headers, "mcp-name")
                .and_then(decode)
                .is_some_and(|n| n == name)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                http::HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn plain_names_travel_bare_and_others_wrapped() {
        assert_eq!(encode("echo"), "echo");
        assert_eq!(encode("file:///a b"), "file:///a b");
        for odd in [" lead", "trail\t", "naïve", "=?base64?x?="] {
            let e = encode(odd);
            assert!(e.starts_with(PREFIX), "{odd:?} -> {e}");
            assert_eq!(decode(&e).as_deref(), Some(odd));
        }
        assert_eq!(decode("=?base64?!!?="), None);
    }

    #[test]
    fn headers_agree_only_when_each_is_there_once_and_matches() {
        let ok = headers(&[("mcp-method", "tools/call"), ("mcp-name", "web__echo")]);
        assert!(agree(&ok, "tools/call", Some("web__echo")));
        assert!(!agree(&ok, "prompts/get", Some("web__echo")));
        assert!(!agree(&ok, "tools/call", Some("web__other")));
        let wrapped = headers(&[("mcp-method", "tools/call"), ("mcp-name", &encode("é"))]);
        assert!(agree(&wrapped, "tools/call", Some("é")));
        let missing = headers(&[("mcp-method", "tools/call")]);
        assert!(!agree(&missing, "tools/call", Some("web__echo")));
        // A completion's reference travels in no header.
        let complete = headers(&[("mcp-method", "completion/complete")]);
        assert!(agree(&complete, "completion/complete", None));
        let twice = headers(&[
            ("mcp-method", "tools/call"),
            ("mcp-name", "web__echo"),
            ("mcp-name", "web__echo"),
        ]);
        assert!(!agree(&twice, "tools/call", Some("web__echo")));
    }
}
