//! Sealed session ids: what a client session *is*, carried in its own
//! `Mcp-Session-Id`, so that any holder of the key can verify it and read
//! it without a lookup (another replica, or this one after a restart).
//!
//! An id is `s1.` followed by base64url (no padding) of a random 24-byte
//! nonce and the XChaCha20-Poly1305 sealing of the [`SessionFacts`] as
//! JSON, with the version prefix as associated data. Sealed, not merely
//! signed: a client's declared capabilities and info are its own business,
//! and an id must not show the principal it belongs to. Any change to the
//! text is refused (the AEAD's tag), as is an id sealed under a key this
//! gateway does not hold. Ids are opened with the current key, then with
//! the previous one (a rotation: ids issued before it stay valid until
//! they expire).
//!
//! An id travels in a header, so it is capped at [`MAX_ID`] characters:
//! facts too large for that (a client that declares kilobytes of
//! capabilities) lose their client info, then their capabilities, and say
//! so (`trimmed`); whoever needs them reads them from the session book.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::auth::CallerKey;

/// The version prefix of every id this build seals.
const PREFIX: &str = "s1.";

/// The longest id issued, in characters: well within what HTTP header
/// limits allow (8 KiB is common) with room for the other headers.
pub const MAX_ID: usize = 2048;

/// How long an id is valid after it was issued. A session idle for
/// `streams::IDLE` ends long before; this bounds how long a copied id of a
/// live session, or of one whose close was missed, is worth anything.
pub const LIFETIME: Duration = Duration::from_secs(24 * 60 * 60);

/// A 256-bit key.
pub type Key = [u8; 32];

/// What a sealed id carries: what another replica needs to adopt the
/// session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionFacts {
    /// The id of the session on the replica that serves it (rmcp's).
    pub local: String,
    /// Who opened it (only they may use it).
    pub caller: Caller,
    /// The protocol revision its client asked for (`initialize`).
    pub revision: String,
    /// The client's declared capabilities (`initialize` params), as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Declared>,
    /// The client's `clientInfo`, as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<Declared>,
    /// Seconds since 1970 when it was issued, and when it stops being valid.
    pub issued: u64,
    pub expires: u64,
    /// Capabilities or client info were left out to fit [`MAX_ID`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub trimmed: bool,
}

/// What a client declared in its `initialize` (its capabilities, its
/// `clientInfo`), kept as the JSON text the id carries and never parsed
/// when an id is opened: every request on a session opens its id, and
/// none reads these (a replica adopting the session does, with
/// [`Declared::value`]). Two are equal when their texts are.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Declared(Box<RawValue>);

impl Declared {
    /// `value` as an id carries it (compact JSON).
    pub fn of(value: &serde_json::Value) -> Declared {
        Declared(serde_json::value::to_raw_value(value).expect("a JSON value serializes"))
    }

    /// The JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// Parsed.
    pub fn value(&self) -> serde_json::Value {
        serde_json::from_str(self.0.get()).unwrap_or_default()
    }
}

impl PartialEq for Declared {
    fn eq(&self, other: &Declared) -> bool {
        self.get() == other.get()
    }
}

impl Eq for Declared {}

/// A [`CallerKey`] as an id carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caller {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
}

impl Caller {
    pub fn of(key: &CallerKey) -> Caller {
        Caller {
            id: key.id().to_owned(),
            issuer: key.issuer().map(str::to_owned),
        }
    }

    /// Whether this is `key`.
    pub fn is(&self, key: &CallerKey) -> bool {
        self.id == key.id() && self.issuer.as_deref() == key.issuer()
    }
}

impl SessionFacts {
    /// Facts issued now, valid for [`LIFETIME`].
    pub fn new(local: String, caller: &CallerKey, revision: String) -> SessionFacts {
        let issued = unix_now();
        SessionFacts {
            local,
            caller: Caller::of(caller),
            revision,
            capabilities: None,
            client: None,
            issued,
            expires: issued.saturating_add(LIFETIME.as_secs()),
            trimmed: false,
        }
    }

    /// Whether the id has expired at `now` (seconds since 1970).
    pub fn expired_at(&self, now: u64) -> bool {
        now >= self.expires
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Why an id did not open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unsealed {
    /// Not an id of this format (another version, not base64, too short).
    #[error("not a session id this gateway issues")]
    Malformed,
    /// Altered, forged, or sealed under a key this gateway does not hold.
    #[error("the session id was not issued by this gateway, or was altered")]
    Forged,
    /// Past its expiry.
    #[error("the session id has expired")]
    Expired,
}

/// Seals and opens ids under the current key (and opens under the
/// previous one, during a rotation).
#[derive(Clone)]
pub struct Sealer {
    current: XChaCha20Poly1305,
    previous: Option<XChaCha20Poly1305>,
}

impl Sealer {
    pub fn new(current: &Key, previous: Option<&Key>) -> Sealer {
        Sealer {
            current: XChaCha20Poly1305::new(current.into()),
            previous: previous.map(|k| XChaCha20Poly1305::new(k.into())),
        }
    }

    /// The id of `facts`, trimmed to fit [`MAX_ID`] where needed.
    pub fn seal(&self, facts: &SessionFacts) -> Result<String, getrandom::Error> {
        let mut facts = std::borrow::Cow::Borrowed(facts);
        loop {
            let id = self.seal_as_is(&facts)?;
            if id.len() <= MAX_ID {
                return Ok(id);
            }
            let f = facts.to_mut();
            f.trimmed = true;
            if f.client.take().is_none() && f.capabilities.take().is_none() {
                // Nothing left to leave out: the id as it is (a caller key
                // or revision this long is not one a client sends).
                return Ok(id);
            }
        }
    }

    fn seal_as_is(&self, facts: &SessionFacts) -> Result<String, getrandom::Error> {
        // Serializing plain data to JSON cannot fail.
        self.seal_plain(&serde_json::to_vec(facts).unwrap_or_default())
    }

    fn seal_plain(&self, plain: &[u8]) -> Result<String, getrandom::Error> {
        let mut nonce = [0u8; 24];
        getrandom::fill(&mut nonce)?;
        let sealed = self
            .current
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: plain,
                    aad: PREFIX.as_bytes(),
                },
            )
            .unwrap_or_default();
        let mut bytes = Vec::with_capacity(nonce.len() + sealed.len());
        bytes.extend_from_slice(&nonce);
        bytes.extend_from_slice(&sealed);
        Ok(format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes)))
    }

    /// The facts `id` carries, if it is one this gateway sealed and it has
    /// not expired.
    pub fn open(&self, id: &str) -> Result<SessionFacts, Unsealed> {
        self.open_at(id, unix_now())
    }

    fn open_at(&self, id: &str, now: u64) -> Result<SessionFacts, Unsealed> {
        let body = id.strip_prefix(PREFIX).ok_or(Unsealed::Malformed)?;
        if id.len() > MAX_ID {
            return Err(Unsealed::Malformed);
        }
        let bytes = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| Unsealed::Malformed)?;
        if bytes.len() < 24 + 16 {
            return Err(Unsealed::Malformed);
        }
        let (nonce, sealed) = bytes.split_at(24);
        let payload = || Payload {
            msg: sealed,
            aad: PREFIX.as_bytes(),
        };
        let nonce = XNonce::from_slice(nonce);
        let plain = self
            .current
            .decrypt(nonce, payload())
            .or_else(|_| match &self.previous {
                Some(k) => k.decrypt(nonce, payload()),
                None => Err(chacha20poly1305::aead::Error),
            })
            .map_err(|_| Unsealed::Forged)?;
        // Sealed by us, so it parses; a build that changed the facts'
        // shape would have changed the prefix.
        let facts: SessionFacts = serde_json::from_slice(&plain).map_err(|_| Unsealed::Forged)?;
        if facts.expired_at(now) {
            return Err(Unsealed::Expired);
        }
        Ok(facts)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::auth::Principal;

    fn facts() -> SessionFacts {
        let mut f = SessionFacts::new(
            "rmcp-local-1".into(),
            Principal::key("alice").caller(),
            "2025-11-25".into(),
        );
        f.capabilities = Some(Declared::of(&json!({"sampling": {}})));
        f.client = Some(Declared::of(&json!({"name": "c", "version": "1"})));
        f
    }

    #[test]
    fn an_id_opens_to_its_facts_and_shows_none_of_them() {
        let s = Sealer::new(&[7; 32], None);
        let f = facts();
        let id = s.seal(&f).unwrap();
        assert!(id.starts_with("s1.") && id.len() < 400, "{id}");
        for hidden in ["alice", "rmcp-local", "sampling", "2025"] {
            assert!(!id.contains(hidden), "{hidden} shows in {id}");
        }
        assert_eq!(s.open(&id).unwrap(), f);
        // Two ids of the same facts differ (a fresh nonce each).
        assert_ne!(s.seal(&f).unwrap(), id);
        // URL- and header-safe.
        assert!(
            id.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        );
    }

    #[test]
    fn an_altered_or_foreign_id_is_refused() {
        let s = Sealer::new(&[7; 32], None);
        let id = s.seal(&facts()).unwrap();
        let mut bytes = id.clone().into_bytes();
        let last = bytes.len() - 5;
        bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
        let altered = String::from_utf8(bytes).unwrap();
        assert_eq!(s.open(&altered), Err(Unsealed::Forged));
        let other = Sealer::new(&[8; 32], None);
        assert_eq!(other.open(&id), Err(Unsealed::Forged));
        for malformed in ["", "s1.", "s1.!!", "s2.AAAA", "0f3c9a2e-uuid", "s1.AAAA"] {
            assert_eq!(s.open(malformed), Err(Unsealed::Malformed), "{malformed:?}");
        }
    }

    #[test]
    fn a_rotated_key_still_opens_what_it_sealed() {
        let old = Sealer::new(&[1; 32], None);
        let id = old.seal(&facts()).unwrap();
        let rotated = Sealer::new(&[2; 32], Some(&[1; 32]));
        assert_eq!(rotated.open(&id).unwrap(), facts());
        let new_id = rotated.seal(&facts()).unwrap();
        assert_eq!(
            old.open(&new_id),
            Err(Unsealed::Forged),
            "sealed under the new key"
        );
    }

    #[test]
    fn an_id_expires() {
        let s = Sealer::new(&[7; 32], None);
        let f = facts();
        let id = s.seal(&f).unwrap();
        assert!(s.open_at(&id, f.expires - 1).is_ok());
        assert_eq!(s.open_at(&id, f.expires), Err(Unsealed::Expired));
    }

    #[test]
    fn what_a_client_declared_is_carried_as_text_and_opened_unparsed() {
        // The facts' JSON as ids have always carried it: the declared
        // capabilities and client info compact, keys in the client's order.
        let plain = r#"{"local":"rmcp-local-1","caller":{"id":"alice"},"revision":"2025-11-25","capabilities":{"roots":{"listChanged":true},"sampling":{}},"client":{"name":"c","version":"1"},"issued":1000,"expires":99999999999}"#;
        let s = Sealer::new(&[7; 32], None);
        let opened = s.open(&s.seal_plain(plain.as_bytes()).unwrap()).unwrap();
        let caps = opened.capabilities.as_ref().unwrap();
        assert_eq!(
            caps.get(),
            r#"{"roots":{"listChanged":true},"sampling":{}}"#
        );
        assert_eq!(
            caps.value(),
            json!({"sampling": {}, "roots": {"listChanged": true}})
        );
        assert_eq!(
            opened.client,
            Some(Declared::of(&json!({"name": "c", "version": "1"})))
        );
        // Sealed again, the same text.
        assert_eq!(serde_json::to_string(&opened).unwrap(), plain);
    }

    #[test]
    fn large_facts_are_trimmed_to_fit_a_header() {
        let s = Sealer::new(&[7; 32], None);
        let mut f = facts();
        f.capabilities = Some(Declared::of(
            &json!({"experimental": {"blob": "x".repeat(4000)}}),
        ));
        let id = s.seal(&f).unwrap();
        assert!(id.len() <= MAX_ID, "{}", id.len());
        let opened = s.open(&id).unwrap();
        assert!(opened.trimmed && opened.capabilities.is_none() && opened.client.is_none());
        assert_eq!((opened.local, opened.caller), (f.local, f.caller));
    }
}
