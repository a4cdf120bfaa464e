//! A protocol revision as the data path compares it: parsed once from the
//! text a header or `_meta` carries, never compared as a string.
//!
//! Only the revisions rmcp knows parse; anything else (a typo, a revision
//! newer than this build) is `None`, and the typed path, whose transport
//! answers an unsupported revision, takes the request.

use rmcp::model::ProtocolVersion;

use crate::backend::Era;

/// One of [`ProtocolVersion::KNOWN_VERSIONS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Revision(usize);

impl Revision {
    /// The revision `text` names, if it is one this build knows.
    pub fn parse(text: &str) -> Option<Revision> {
        ProtocolVersion::KNOWN_VERSIONS
            .iter()
            .position(|v| v.as_str() == text)
            .map(Revision)
    }

    /// The revision of an `MCP-Protocol-Version` header value.
    pub fn of_header(value: &http::HeaderValue) -> Option<Revision> {
        value.to_str().ok().and_then(Revision::parse)
    }

    fn version(self) -> &'static ProtocolVersion {
        &ProtocolVersion::KNOWN_VERSIONS[self.0]
    }

    /// Which era the revision belongs to: with `initialize` (2025) or
    /// without (2026-07-28).
    pub fn era(self) -> Era {
        Era::of(self.version())
    }

    pub fn as_str(self) -> &'static str {
        self.version().as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_revisions_parse_to_their_era() {
        let modern = Revision::parse("2026-07-28").unwrap();
        assert_eq!(modern.era(), Era::Modern);
        assert_eq!(modern.as_str(), "2026-07-28");
        for v in ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"] {
            assert_eq!(Revision::parse(v).unwrap().era(), Era::Handshake, "{v}");
        }
        assert_ne!(Revision::parse("2025-06-18"), Revision::parse("2025-11-25"));
    }

    #[test]
    fn text_that_merely_sorts_like_a_revision_is_none() {
        // A lexical comparison against "2026" would take each of these.
        for v in [
            "2026",
            "2026-07-28 ",
            "2027-01-01",
            "2025-13-01",
            "",
            "1999-01-01",
        ] {
            assert_eq!(Revision::parse(v), None, "{v:?}");
        }
    }
}
