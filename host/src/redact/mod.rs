//! Masking of secrets in everything Vigil writes or forwards.
//!
//! Two rules, applied together by [`Redactor::mask`]:
//!
//! - **configured secrets**: every value the config holds that may be a
//!   credential (API tokens; each backend's env values, header values and
//!   container env values; the userinfo and query values of its URL; see
//!   [`configured`]) is replaced by `***` wherever it appears, when it has
//!   at least [`MIN_SECRET`] characters;
//! - **URLs**: in any URL found in the text, userinfo and query values are
//!   replaced by `***` (`http://***@host/mcp?api_key=***`, see [`url`]),
//!   whether or not the config knows them.
//!
//! [`Redactor`] is the one shared place holding the current [`Secrets`]: the
//! log writer ([`writer`]), the reason sanitizer (`health::sanitize`) and
//! the errors forwarded to MCP clients all read it, and a config reload
//! swaps in the new set for all of them at once. Reading it takes no lock.
//!
//! It never touches the network; it only rewrites text.

pub mod configured;
pub mod url;
pub mod writer;

use std::borrow::Cow;
use std::sync::Arc;

use aho_corasick::{AhoCorasick, MatchKind};
use arc_swap::ArcSwap;

/// What a secret is replaced with.
pub const MASK: &str = "***";

/// Shorter values are never masked: they would mask ordinary words and
/// numbers everywhere (`true`, `8080`, `info`). Config load warns about
/// credential-like values this short (see [`configured::too_short`]).
pub const MIN_SECRET: usize = 6;

/// A set of secret values, searched for all at once.
#[derive(Debug, Default)]
pub struct Secrets {
    /// `None` when there is nothing to search for.
    matcher: Option<AhoCorasick>,
}

impl Secrets {
    /// The set of `values` (config values), each also as its last word
    /// (`Bearer abc…` → the bare credential) and as it appears inside a
    /// JSON string (JSON log lines, forwarded error data). Values shorter
    /// than [`MIN_SECRET`] characters are left out.
    pub fn new<'a>(values: impl IntoIterator<Item = &'a str>) -> Self {
        let mut patterns: Vec<String> = Vec::new();
        for v in values {
            let bare = v.split_whitespace().last().unwrap_or(v);
            for p in [v, bare] {
                if p.chars().count() < MIN_SECRET {
                    continue;
                }
                patterns.push(p.to_owned());
                let escaped = serde_json::to_string(p).unwrap_or_default();
                let escaped = escaped.trim_matches('"');
                if escaped != p {
                    patterns.push(escaped.to_owned());
                }
            }
        }
        patterns.sort();
        patterns.dedup();
        if patterns.is_empty() {
            return Self::default();
        }
        // Leftmost-longest: a secret that contains another is masked whole.
        let matcher = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&patterns)
            .map_err(|e| tracing::error!(error = %e, "cannot build the secret matcher; configured secrets are not masked"))
            .ok();
        Self { matcher }
    }

    /// `text` with every secret replaced by [`MASK`]; borrowed when none
    /// occurs.
    pub fn mask<'t>(&self, text: &'t str) -> Cow<'t, str> {
        match &self.matcher {
            Some(m) if m.is_match(text) => {
                let mut out = String::with_capacity(text.len());
                m.replace_all_with(text, &mut out, |_, _, dst| {
                    dst.push_str(MASK);
                    true
                });
                Cow::Owned(out)
            }
            _ => Cow::Borrowed(text),
        }
    }
}

/// The current [`Secrets`], shared: clones see the same set, and
/// [`Redactor::replace`] changes it for every clone.
#[derive(Debug, Clone, Default)]
pub struct Redactor(Arc<ArcSwap<Secrets>>);

impl Redactor {
    pub fn new(secrets: Secrets) -> Self {
        Self(Arc::new(ArcSwap::from_pointee(secrets)))
    }

    /// Installs a new set (a config reload); every clone masks with it from
    /// now on.
    pub fn replace(&self, secrets: Secrets) {
        self.0.store(Arc::new(secrets));
    }

    /// `text` with configured secrets and URL credentials masked; borrowed
    /// when nothing was masked.
    pub fn mask<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let secrets = self.0.load();
        match secrets.mask(text) {
            Cow::Borrowed(t) => url::mask_urls(t),
            Cow::Owned(t) => match url::mask_urls(&t) {
                Cow::Borrowed(_) => Cow::Owned(t),
                Cow::Owned(u) => Cow::Owned(u),
            },
        }
    }

    /// Masks every string inside a JSON value (object keys are names, not
    /// values, and are kept).
    pub fn mask_json(&self, value: &mut serde_json::Value) {
        use serde_json::Value;
        match value {
            Value::String(s) => {
                if let Cow::Owned(m) = self.mask(s) {
                    *s = m;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.mask_json(v)),
            Value::Object(map) => map.values_mut().for_each(|v| self.mask_json(v)),
            _ => {}
        }
    }

    /// A JSON-RPC error about to be sent to an MCP client, with its message
    /// and data masked: backends quote what they were sent (headers, URLs)
    /// in their errors, and Vigil's own errors name URLs.
    pub fn mask_error(&self, mut e: rmcp::ErrorData) -> rmcp::ErrorData {
        if let Cow::Owned(m) = self.mask(&e.message) {
            e.message = m.into();
        }
        if let Some(data) = e.data.as_mut() {
            self.mask_json(data);
        }
        e
    }
}

/// A name for an MCP session id in logs. The id is a bearer credential
/// (whoever presents it acts in that session), so logs carry this instead:
/// the same id always gives the same tag, and the tag does not give the id
/// back.
pub fn session_tag(id: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(id.as_bytes());
    format!("s-{}", hex::encode(&digest[..4]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redactor(values: &[&str]) -> Redactor {
        Redactor::new(Secrets::new(values.iter().copied()))
    }

    #[test]
    fn secrets_are_masked_whole_and_bare() {
        let r = redactor(&["Bearer sk-live-123456", "hunter2secret", "abc"]);
        assert_eq!(
            r.mask("401 with Authorization: Bearer sk-live-123456; retry with sk-live-123456; pw=hunter2secret; abc stays"),
            "401 with Authorization: ***; retry with ***; pw=***; abc stays"
        );
    }

    #[test]
    fn text_without_secrets_is_borrowed() {
        let r = redactor(&["hunter2secret"]);
        assert!(matches!(r.mask("nothing here"), Cow::Borrowed(_)));
        assert!(matches!(
            Redactor::default().mask("plain"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn a_secret_inside_a_longer_one_is_masked_with_it() {
        let r = redactor(&["secret1", "secret1-and-more"]);
        assert_eq!(r.mask("x secret1-and-more y secret1"), "x *** y ***");
    }

    #[test]
    fn json_escaped_secrets_are_masked_in_json_text() {
        let r = redactor(&[r#"pa"ss\word"#]);
        let line = serde_json::json!({ "message": r#"got pa"ss\word"# }).to_string();
        assert_eq!(line, r#"{"message":"got pa\"ss\\word"}"#);
        assert_eq!(r.mask(&line), r#"{"message":"got ***"}"#);
    }

    #[test]
    fn urls_are_masked_even_without_configured_secrets() {
        let r = Redactor::default();
        assert_eq!(
            r.mask("error sending request for url (http://u:p@127.0.0.1:1/mcp?api_key=k1&x=2)"),
            "error sending request for url (http://***@127.0.0.1:1/mcp?api_key=***&x=***)"
        );
    }

    #[test]
    fn replace_changes_every_clone() {
        let r = redactor(&["old-secret"]);
        let clone = r.clone();
        r.replace(Secrets::new(["new-secret"]));
        assert_eq!(clone.mask("old-secret new-secret"), "old-secret ***");
    }

    #[test]
    fn errors_are_masked_in_message_and_data() {
        let r = redactor(&["header-key-3456"]);
        let e = rmcp::ErrorData::internal_error(
            "refused: x-api-key='header-key-3456'",
            Some(serde_json::json!({"headers": {"x-api-key": "header-key-3456"}, "n": 1})),
        );
        let e = r.mask_error(e);
        assert_eq!(e.message, "refused: x-api-key='***'");
        assert_eq!(
            e.data,
            Some(serde_json::json!({"headers": {"x-api-key": "***"}, "n": 1}))
        );
    }

    #[test]
    fn session_tags_are_stable_and_do_not_contain_the_id() {
        let id = "6c59366b-e7b1-497e-996c-de166fb6b218";
        assert_eq!(session_tag(id), session_tag(id));
        assert_ne!(session_tag(id), session_tag("another"));
        assert!(!session_tag(id).contains("6c59"));
        assert_eq!(session_tag(id).len(), 10);
    }
}
