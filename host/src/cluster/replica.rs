//! A replica's id: what names one Vigil process among several serving the
//! same clients, in what it seals for them to bring back (the MRTR
//! `requestState`'s hint) so a cluster layer can route a retry to the
//! replica that holds what it needs.
//!
//! Opaque to everything but that routing: 1 to [`MAX_LEN`] characters of
//! `A-Z a-z 0-9 - _`, so it travels inside tokens without escaping and
//! never contains their separators. One replica draws a random one at
//! start; `[cluster]` will name each replica.

use std::fmt;

/// The longest id, in characters.
pub const MAX_LEN: usize = 64;

/// One replica's id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReplicaId(String);

/// Why a text is no replica id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BadReplicaId {
    #[error("a replica id is not empty")]
    Empty,
    #[error("a replica id has at most {MAX_LEN} characters")]
    TooLong,
    #[error("a replica id has only letters, digits, '-' and '_'")]
    Character,
}

impl ReplicaId {
    /// `text` as an id, if it is one.
    pub fn new(text: &str) -> Result<ReplicaId, BadReplicaId> {
        if text.is_empty() {
            return Err(BadReplicaId::Empty);
        }
        if text.len() > MAX_LEN {
            return Err(BadReplicaId::TooLong);
        }
        if !text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(BadReplicaId::Character);
        }
        Ok(ReplicaId(text.to_owned()))
    }

    /// A fresh id of 16 random hex digits: this process's, when no
    /// configuration names it.
    pub fn random() -> Result<ReplicaId, getrandom::Error> {
        let mut bytes = [0u8; 8];
        getrandom::fill(&mut bytes)?;
        Ok(ReplicaId(hex::encode(bytes)))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ReplicaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_short_plain_tokens() {
        assert_eq!(ReplicaId::new("vigil-0_a").unwrap().as_str(), "vigil-0_a");
        assert_eq!(ReplicaId::new(""), Err(BadReplicaId::Empty));
        assert_eq!(ReplicaId::new("a.b"), Err(BadReplicaId::Character));
        assert_eq!(ReplicaId::new(&"a".repeat(65)), Err(BadReplicaId::TooLong));
        let drawn = ReplicaId::random().unwrap();
        assert_eq!(ReplicaId::new(drawn.as_str()), Ok(drawn.clone()));
        assert_ne!(drawn, ReplicaId::random().unwrap(), "each draw its own");
    }
}
