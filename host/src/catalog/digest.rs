//! One digest of a listed definition: SHA-256 over its canonical JSON
//! (RFC 8785, the JSON Canonicalization Scheme). Every member counts —
//! unknown ones too, so a change hidden in `_meta` or an annotation
//! changes the digest — while member order, white space and the spelling
//! of a number do not. The one place a definition is fingerprinted: the
//! pin guard compares approvals by it, and anything later that diffs
//! definitions reuses it.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;
use sha2::{Digest as _, Sha256};

/// A definition's fingerprint; shown and stored as 64 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest([u8; 32]);

/// Why a text is not a digest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a digest: expected 64 hex digits")]
pub struct BadDigest(String);

/// `value` in canonical form (RFC 8785). Fails only for what JSON cannot
/// hold (a map with non-string keys, a number that is not finite): never
/// for a value read from JSON.
pub fn canonical(value: &impl Serialize) -> Result<Vec<u8>, serde_json::Error> {
    serde_json_canonicalizer::to_vec(value)
}

/// The digest of `value`'s canonical form.
pub fn digest(value: &impl Serialize) -> Result<Digest, serde_json::Error> {
    Ok(Digest(Sha256::digest(canonical(value)?).into()))
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({self})")
    }
}

impl FromStr for Digest {
    type Err = BadDigest;
    fn from_str(s: &str) -> Result<Digest, BadDigest> {
        let mut out = [0u8; 32];
        hex::decode_to_slice(s, &mut out).map_err(|_| BadDigest(s.chars().take(80).collect()))?;
        Ok(Digest(out))
    }
}

impl Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Digest, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(text: &str) -> Digest {
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        digest(&v).unwrap()
    }

    #[test]
    fn order_space_and_number_spelling_do_not_count() {
        assert_eq!(
            of(r#"{"name":"a","inputSchema":{"type":"object","b":1,"a":2.50}}"#),
            of(r#"{ "inputSchema": {"a": 2.5, "type": "object", "b": 1e0}, "name": "a" }"#)
        );
    }

    #[test]
    fn every_member_counts_unknown_ones_too() {
        let base = of(r#"{"name":"a","description":"adds"}"#);
        for changed in [
            r#"{"name":"a","description":"adds!"}"#,
            r#"{"name":"a","description":"adds","_meta":{"x":1}}"#,
            r#"{"name":"a","description":"adds","annotations":{"readOnlyHint":false}}"#,
            r#"{"name":"a","description":"adds","x-vendor":null}"#,
        ] {
            assert_ne!(of(changed), base, "{changed}");
        }
    }

    /// RFC 8785's own example (section 3.2.3): the canonical bytes.
    #[test]
    fn the_canonical_form_is_rfc_8785s() {
        let v: serde_json::Value = serde_json::from_str(
            r#"{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
                "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
                "literals": [null, true, false]}"#,
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(canonical(&v).unwrap()).unwrap(),
            "{\"literals\":[null,true,false],\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],\"string\":\"€$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}"
        );
    }

    #[test]
    fn a_digest_reads_back_from_its_text_and_nothing_else_does() {
        let d = of(r#"{"name":"a"}"#);
        assert_eq!(d.to_string().parse::<Digest>(), Ok(d));
        assert_eq!(d.to_string().len(), 64);
        for bad in ["", "zz", &"a".repeat(63), &"a".repeat(65)] {
            assert!(bad.parse::<Digest>().is_err(), "{bad:?}");
        }
    }
}
