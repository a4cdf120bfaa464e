//! `requestState` that travels through the client (SEP-2322): what a
//! multi-round fixture remembers between rounds, sealed with HMAC-SHA-256.
//!
//! The client echoes the state back verbatim, so on a retry it is untrusted
//! input: a state whose MAC does not verify (altered, forged, or issued for
//! another tool) is refused with `invalid params`. The key is drawn from the
//! OS when the server starts, so states do not outlive the process. The body
//! is readable (hex of JSON): integrity, not secrecy, is what the suite asks.

use std::sync::Arc;

use hmac::{Hmac, Mac};
use rmcp::ErrorData as McpError;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// What a fixture carries from one round to the next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// The tool or prompt that issued it: a state is only good for its issuer.
    pub issuer: String,
    /// The round that issued it (1 for the first question).
    pub round: u32,
    /// Answers gathered in earlier rounds, if the fixture needs them.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub carried: Value,
}

/// Seals and opens states with this process's key.
#[derive(Clone)]
pub struct Sealer {
    key: Arc<[u8; 32]>,
}

impl Sealer {
    /// A sealer with a fresh random key.
    pub fn new() -> anyhow::Result<Self> {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key)
            .map_err(|error| anyhow::anyhow!("no randomness for the state key: {error}"))?;
        Ok(Self { key: Arc::new(key) })
    }

    fn mac(&self, body: &[u8]) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(self.key.as_slice())
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(body);
        mac
    }

    /// `hex(body).hex(tag)`.
    pub fn seal(&self, state: &State) -> String {
        let body = serde_json::to_vec(state).unwrap_or_default();
        let tag = self.mac(&body).finalize().into_bytes();
        format!("{}.{}", hex(&body), hex(&tag))
    }

    /// The state inside `sealed`, if this server sealed it for `issuer`.
    pub fn open(&self, sealed: &str, issuer: &str) -> Result<State, McpError> {
        let refused = || {
            McpError::invalid_params(
                "requestState failed its integrity check: it was not issued by this server \
                 for this request, or it was altered",
                None,
            )
        };
        let (body, tag) = sealed.split_once('.').ok_or_else(refused)?;
        let (body, tag) = (
            unhex(body).ok_or_else(refused)?,
            unhex(tag).ok_or_else(refused)?,
        );
        self.mac(&body).verify_slice(&tag).map_err(|_| refused())?;
        let state: State = serde_json::from_slice(&body).map_err(|_| refused())?;
        if state.issuer != issuer {
            return Err(refused());
        }
        Ok(state)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> State {
        State {
            issuer: "tool".to_owned(),
            round: 2,
            carried: serde_json::json!({ "name": "Alice" }),
        }
    }

    #[test]
    fn a_sealed_state_opens_for_its_issuer_only() -> anyhow::Result<()> {
        let sealer = Sealer::new()?;
        let sealed = sealer.seal(&state());
        assert_eq!(sealer.open(&sealed, "tool").ok(), Some(state()));
        assert!(sealer.open(&sealed, "another_tool").is_err());
        Ok(())
    }

    #[test]
    fn altered_or_foreign_states_are_refused() -> anyhow::Result<()> {
        let sealer = Sealer::new()?;
        let sealed = sealer.seal(&state());
        assert!(sealer.open(&format!("{sealed}-TAMPERED"), "tool").is_err());
        assert!(sealer.open(&format!("{sealed}00"), "tool").is_err());
        let (_, tag) = sealed.split_once('.').unwrap_or_default();
        let forged = State {
            round: 9,
            ..state()
        };
        let forged = format!("{}.{tag}", hex(&serde_json::to_vec(&forged)?));
        assert!(sealer.open(&forged, "tool").is_err());
        let other = Sealer::new()?.seal(&state());
        assert!(sealer.open(&other, "tool").is_err());
        assert!(sealer.open("not a state", "tool").is_err());
        Ok(())
    }
}
