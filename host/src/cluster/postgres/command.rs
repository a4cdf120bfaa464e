//! Operator commands (restart, quarantine, release) routed to the replica
//! that supervises the backend: an operator may ask any replica, and the
//! lease holder of a shared backend — or, for another replica's instance
//! of a replica-local backend (`NAME.REPLICA`), that replica — carries the
//! command out.
//!
//! The asking replica's supervisor of the backend (a follower) routes the
//! command ([`super::route`], announced as [`Note::Command`]); the replica
//! holding the backend's lease claims it, hands it to its supervisor and
//! answers. Nobody answering within [`WAIT`] (no holder right now: the
//! lease is changing hands) is a refusal saying to ask again.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::lease::PgLeases;
use super::route::{AskError, Kind, Route, Waits};
use crate::backend::{Backend, Command, CommandError};
use crate::health::Status;
use crate::store::postgres::note::Note;

/// How long an asker waits for the holder's answer.
pub const WAIT: Duration = Duration::from_secs(10);

/// The answer written into a command's row.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Answer {
    Done(Status),
    Refused(String),
}

/// Finds a backend of this replica by name (the app's, set once it is
/// assembled).
pub type Backends = Box<dyn Fn(&str) -> Option<Arc<Backend>> + Send + Sync>;

/// Routes commands between replicas; see the module doc.
pub struct Commands {
    route: Arc<Route>,
    leases: PgLeases,
    backends: OnceLock<Backends>,
}

fn refused(why: impl Into<String>) -> CommandError {
    CommandError::Refused(why.into())
}

impl Commands {
    pub fn new(route: Arc<Route>, leases: PgLeases) -> Arc<Commands> {
        Arc::new(Commands {
            route,
            leases,
            backends: OnceLock::new(),
        })
    }

    /// Where this replica's backends are found (set once).
    pub fn set_backends(&self, backends: Backends) {
        let _ = self.backends.set(backends);
    }

    /// Has the supervisor of `backend` on the lease holder carry out
    /// `command`, and returns its answer.
    pub async fn forward(&self, backend: &str, command: &Command) -> Result<Status, CommandError> {
        let text = serde_json::to_string(command)
            .map_err(|e| refused(format!("the command could not be written: {e}")))?;
        let note = |id| Note::Command {
            r: self.route.replica().to_owned(),
            b: backend.to_owned(),
            id,
        };
        let waits = Waits {
            claim: WAIT,
            answer: WAIT,
        };
        let answer = match self
            .route
            .ask(Kind::Command, backend, &text, note, waits)
            .await
        {
            Ok(answer) => answer,
            Err(AskError::Unreachable(e)) => {
                return Err(refused(format!(
                    "this replica does not supervise the backend and cannot reach the store to ask the one that does ({e}); ask again shortly"
                )));
            }
            Err(AskError::Unclaimed(_) | AskError::Unanswered(_)) => {
                return Err(refused(format!(
                    "no replica supervising `{backend}` answered within {}s (its lease may be changing hands): ask again shortly",
                    WAIT.as_secs()
                )));
            }
        };
        match serde_json::from_str::<Answer>(&answer) {
            Ok(Answer::Done(status)) => Ok(status),
            Ok(Answer::Refused(why)) => Err(refused(why)),
            Err(e) => Err(refused(format!(
                "the supervising replica's answer does not read: {e}"
            ))),
        }
    }

    /// Another replica announced command `id` for `backend`: carried out
    /// here if this replica holds the backend's lease and claims it first.
    pub async fn heard(&self, backend: &str, id: i64) {
        let Some(find) = self.backends.get() else {
            return;
        };
        let replica = self.route.replica();
        // A shared backend whose lease this replica holds, or this
        // replica's own instance of a replica-local one (`NAME.REPLICA`).
        let own = backend
            .strip_suffix(replica)
            .and_then(|b| b.strip_suffix('.'))
            .and_then(find)
            .filter(|b| matches!(b.config.runtime, crate::config::RuntimeKind::Process));
        let held = (self.leases.holder(backend).as_deref() == Some(replica))
            .then(|| find(backend))
            .flatten();
        let Some(b) = held.or(own) else {
            return;
        };
        let Some(command) = self.route.claim(Kind::Command, id).await else {
            return; // another replica's, or given up on
        };
        let answer = match serde_json::from_str::<Command>(&command) {
            Ok(cmd) => {
                tracing::info!(backend, command = ?cmd, "carrying out a command another replica routed here");
                match b.command(cmd).await {
                    Ok(status) => Answer::Done(status),
                    Err(CommandError::Refused(why) | CommandError::NoSupervisor(why)) => {
                        Answer::Refused(why)
                    }
                }
            }
            Err(e) => Answer::Refused(format!("a command this replica does not read: {e}")),
        };
        // A status with a time before 1970 (a clock set wrong) does not
        // serialize: the asker is told so rather than left waiting.
        let answer = serde_json::to_string(&answer).unwrap_or_else(|e| {
            serde_json::to_string(&Answer::Refused(format!(
                "the supervising replica could not write its answer: {e}"
            )))
            .unwrap_or_default()
        });
        self.route.answer(Kind::Command, id, &answer).await;
    }
}
