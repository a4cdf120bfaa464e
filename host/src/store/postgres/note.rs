//! What replicas tell each other through the store: PostgreSQL
//! notifications (`NOTIFY`) on one channel, each a small JSON
//! [`Note`]. A notification is delivered when the transaction that sent
//! it commits, to every connection listening then, and to no other: a
//! listener that was away re-reads what it follows
//! (`cluster::postgres::listen`).
//!
//! Notes name rows, never carry them: a payload is at most 8000 bytes,
//! and the rows are in the tables anyway.

use serde::{Deserialize, Serialize};

/// The channel every note is sent on.
pub const CHANNEL: &str = "vigil";

/// Transition ids per note: well within the payload limit with any
/// backend name (at most 20 digits and a comma each).
const IDS_PER_NOTE: usize = 200;

/// One note.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "k", rename_all = "snake_case")]
pub enum Note {
    /// `replica` wrote `backend`'s health: its instance record, and the
    /// transitions of these ids (oldest first).
    Health {
        r: String,
        b: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        t: Vec<i64>,
    },
    /// `replica`, lease holder of `backend`, saw its listing change.
    Listing { r: String, b: String },
    /// `replica` closed session `s` (rmcp's id), valid until `e`.
    Closed { r: String, s: String, e: u64 },
    /// `replica` asks the supervisor of backend `b` to carry out command
    /// `id` (a row of `commands`).
    Command { r: String, b: String, id: i64 },
    /// `replica` asks replica `to` to carry out the MRTR retry `id` (a
    /// row of `commands`) for a call parked there.
    Retry { r: String, to: String, id: i64 },
    /// `replica` answered routed request `id` (a command or a retry).
    Answered { r: String, id: i64 },
    /// `replica` recorded approved definitions of backend `b` (the pin
    /// guard): every replica serves by the store's approvals.
    Approved { r: String, b: String },
}

impl Note {
    /// The replica that sent it.
    pub fn replica(&self) -> &str {
        match self {
            Note::Health { r, .. }
            | Note::Listing { r, .. }
            | Note::Closed { r, .. }
            | Note::Command { r, .. }
            | Note::Retry { r, .. }
            | Note::Approved { r, .. }
            | Note::Answered { r, .. } => r,
        }
    }

    /// As sent.
    pub fn payload(&self) -> String {
        serde_json::to_string(self).expect("a note serializes")
    }

    /// A payload read back; `None` for one this build does not know (a
    /// newer replica's).
    pub fn parse(payload: &str) -> Option<Note> {
        serde_json::from_str(payload).ok()
    }
}

/// The backends one health write changed, in order, each with its new
/// transitions' ids.
#[derive(Debug, Default)]
pub(super) struct Changed(Vec<(String, Vec<i64>)>);

impl Changed {
    pub(super) fn add(&mut self, backend: &str, transition: Option<i64>) {
        let at = match self.0.iter().position(|(b, _)| b == backend) {
            Some(i) => i,
            None => {
                self.0.push((backend.to_owned(), Vec::new()));
                self.0.len() - 1
            }
        };
        self.0[at].1.extend(transition);
    }

    /// The notes that announce them, as `replica`'s.
    pub(super) fn payloads(self, replica: &str) -> Vec<String> {
        let mut out = Vec::new();
        for (backend, ids) in self.0 {
            let mut chunks: Vec<Vec<i64>> = ids.chunks(IDS_PER_NOTE).map(<[i64]>::to_vec).collect();
            if chunks.is_empty() {
                chunks.push(Vec::new());
            }
            for t in chunks {
                out.push(
                    Note::Health {
                        r: replica.to_owned(),
                        b: backend.clone(),
                        t,
                    }
                    .payload(),
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_fit_a_notification_and_read_back() {
        let mut c = Changed::default();
        for id in 0..450 {
            c.add("files", Some(i64::MAX - id));
        }
        c.add("notes", None);
        let payloads = c.payloads(&"r".repeat(64));
        assert_eq!(payloads.len(), 4, "3 notes of files, 1 of notes");
        assert!(payloads.iter().all(|p| p.len() < 8000), "under the limit");
        let Some(Note::Health { b, t, .. }) = Note::parse(&payloads[3]) else {
            panic!("a health note")
        };
        assert_eq!((b.as_str(), t.len()), ("notes", 0));
        assert_eq!(Note::parse(r#"{"k":"future","x":1}"#), None);
        let listing = Note::Listing {
            r: "a".into(),
            b: "files".into(),
        };
        assert_eq!(Note::parse(&listing.payload()), Some(listing));
    }
}
