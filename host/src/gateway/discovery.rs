//! What Vigil tells a client about itself as one server made of many: the
//! `instructions` of `initialize` and `server/discover`, and the caching
//! hints (`ttlMs`, `cacheScope`, 2026-07-28) of the results it makes or
//! relays.
//!
//! **Instructions.** A backend's instructions tell the model how to use its
//! tools, which reach the client under Vigil's names. Vigil's own sentence
//! comes first, then each backend's instructions under a heading naming the
//! backend (and, with `naming = "prefix"`, the prefix its names carry), for
//! the backends the caller can use something of, in name order. Each is cut
//! at [`MAX_PER_BACKEND`] bytes.
//!
//! **Caching hints.** Lists and `server/discover` are Vigil's own: `ttlMs` is
//! 0, because what Vigil shows changes the moment a backend fails, recovers
//! or changes its tools (a client that wants to know when listens, or takes
//! `list_changed`); `cacheScope` is `"public"` only when nothing Vigil shows
//! depends on who asks (no `[auth]`, no `[[policy]]`, no `forward_auth`
//! backend), `"private"` otherwise, so no shared cache serves one caller's
//! view to another. A relayed result (`resources/read`) keeps the backend's
//! `ttlMs`, and its scope is narrowed to `"private"` whenever Vigil's is:
//! the backend cannot know that Vigil filters what each caller may read.
//!
//! **Server info.** A 2026-07-28 result names its server in `_meta`
//! (`io.modelcontextprotocol/serverInfo`, there being no handshake to say
//! it). Vigil's results carry Vigil's ([`own_implementation`]); a relayed
//! result keeps the stamp its backend wrote, and gets Vigil's where it has
//! none (a backend of the handshake era).

use std::sync::LazyLock;

use rmcp::model::{CacheScope, Implementation};

use crate::config::Naming;

/// The first paragraph of Vigil's instructions.
pub const OWN: &str =
    "Vigil MCP gateway: tools, resources and prompts of several MCP servers behind one endpoint.";

/// The `_meta` key naming the server of a 2026-07-28 result.
pub const SERVER_INFO_KEY: &str = "io.modelcontextprotocol/serverInfo";

/// Who Vigil says it is (`initialize`, `server/discover`, the stamp of
/// its 2026-07-28 results).
pub fn own_implementation() -> Implementation {
    Implementation::new("vigil", env!("CARGO_PKG_VERSION"))
}

/// [`own_implementation`] as the stamp of a 2026-07-28 result.
pub fn server_info_stamp() -> &'static serde_json::Value {
    static STAMP: LazyLock<serde_json::Value> = LazyLock::new(|| {
        serde_json::to_value(own_implementation()).unwrap_or(serde_json::Value::Null)
    });
    &STAMP
}

/// How much of one backend's instructions is passed on.
pub const MAX_PER_BACKEND: usize = 4 * 1024;

/// Vigil's instructions with those of `backends` (name, instructions),
/// taken in the order given.
pub fn instructions<'a>(
    naming: &Naming,
    backends: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> String {
    let mut out = String::from(OWN);
    for (name, text) in backends {
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        out.push_str("\n\n## ");
        out.push_str(name);
        if let Naming::Prefix { separator } = naming {
            out.push_str(&format!(
                " (its tools and prompts are named `{name}{separator}…`)"
            ));
        }
        out.push('\n');
        out.push_str(cut(text, MAX_PER_BACKEND));
    }
    out
}

/// `text` up to `max` bytes, at a character boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The `ttlMs` of the lists and `server/discover` (see the module doc).
pub const LIST_TTL_MS: u64 = 0;

/// The `cacheScope` of Vigil's own results: public only when every caller
/// sees the same.
pub fn scope(depends_on_caller: bool) -> CacheScope {
    if depends_on_caller {
        CacheScope::Private
    } else {
        CacheScope::Public
    }
}

/// The scope to write on a relayed result, `None` to keep what the backend
/// wrote: a result may be cached as widely as its backend says (an absent
/// scope means public), but never more widely than Vigil's own results
/// (with `ours` private, a result not already private is made so).
pub fn narrowed(backend: Option<CacheScope>, ours: CacheScope) -> Option<CacheScope> {
    match (backend, ours) {
        (_, CacheScope::Public) | (Some(CacheScope::Private), _) => None,
        _ => Some(CacheScope::Private),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix() -> Naming {
        Naming::Prefix {
            separator: "__".into(),
        }
    }

    #[test]
    fn backends_instructions_follow_vigils_under_their_names() {
        let text = instructions(
            &prefix(),
            [
                ("files", "Read files.\n"),
                ("quiet", "  "),
                ("web", "Search."),
            ],
        );
        assert_eq!(
            text,
            format!(
                "{OWN}\n\n## files (its tools and prompts are named `files__…`)\nRead files.\n\n## web (its tools and prompts are named `web__…`)\nSearch."
            )
        );
        assert_eq!(
            instructions(&Naming::None, [("web", "Search.")]),
            format!("{OWN}\n\n## web\nSearch.")
        );
        assert_eq!(instructions(&prefix(), []), OWN);
    }

    #[test]
    fn long_instructions_are_cut_at_a_character_boundary() {
        let long = "é".repeat(MAX_PER_BACKEND); // two bytes each
        let text = instructions(&Naming::None, [("b", long.as_str())]);
        let kept = text.rsplit('\n').next().unwrap_or_default();
        assert_eq!(kept.len(), MAX_PER_BACKEND);
        assert!(kept.chars().all(|c| c == 'é'));
    }

    #[test]
    fn a_relayed_result_is_public_only_when_both_say_so() {
        use CacheScope::{Private, Public};
        // Kept as the backend wrote it (absent means public)...
        assert_eq!(narrowed(Some(Public), Public), None);
        assert_eq!(narrowed(Some(Private), Public), None);
        assert_eq!(narrowed(None, Public), None);
        assert_eq!(narrowed(Some(Private), Private), None);
        // ...unless Vigil's own results are private and it is not.
        assert_eq!(narrowed(Some(Public), Private), Some(Private));
        assert_eq!(narrowed(None, Private), Some(Private));
        assert_eq!(scope(true), Private);
        assert_eq!(scope(false), Public);
    }
}
