//! Operator commands (restart, quarantine, release) routed to the replica
//! that supervises the backend: an operator may ask any replica, and the
//! lease holder of a shared backend — or, for another replica's instance
//! of a replica-local backend (`NAME.REPLICA`), that replica — carries the
//! command out.
//!
//! The asking replica's supervisor of the backend (a follower) writes the
//! command into `commands` and announces it ([`Note::Command`]). Every
//! replica hears it; the one holding the backend's lease claims the row
//! (one `UPDATE … WHERE claimed_by IS NULL`: a command is carried out once
//! even if the lease moves meanwhile), hands it to its supervisor, writes
//! the answer into the row and announces that ([`Note::Answered`]). The
//! asker, woken by the note (or reading the row every second, should the
//! note be lost), gives the answer to the operator. Nobody answering
//! within [`WAIT`] (no holder right now: the lease is changing hands) is
//! a refusal saying to ask again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use super::lease::PgLeases;
use crate::backend::{Backend, Command, CommandError};
use crate::health::Status;
use crate::store::postgres::PostgresStore;
use crate::store::postgres::note::{CHANNEL, Note};

/// How long an asker waits for the holder's answer.
pub const WAIT: Duration = Duration::from_secs(10);

/// How often an asker reads the row meanwhile (a lost note).
const POLL: Duration = Duration::from_secs(1);

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
    store: PostgresStore,
    replica: String,
    leases: PgLeases,
    backends: OnceLock<Backends>,
    /// Askers waiting, by command id.
    waiting: Mutex<HashMap<i64, Arc<Notify>>>,
}

fn refused(why: impl Into<String>) -> CommandError {
    CommandError::Refused(why.into())
}

impl Commands {
    pub fn new(store: PostgresStore, replica: &str, leases: PgLeases) -> Arc<Commands> {
        Arc::new(Commands {
            store,
            replica: replica.to_owned(),
            leases,
            backends: OnceLock::new(),
            waiting: Mutex::default(),
        })
    }

    /// Where this replica's backends are found (set once).
    pub fn set_backends(&self, backends: Backends) {
        let _ = self.backends.set(backends);
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Arc<Notify>>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Has the supervisor of `backend` on the lease holder carry out
    /// `command`, and returns its answer.
    pub async fn forward(&self, backend: &str, command: &Command) -> Result<Status, CommandError> {
        let unreachable = |e: &dyn std::fmt::Display| {
            crate::metrics::get().store_op("command", false);
            refused(format!(
                "this replica does not supervise the backend and cannot reach the store to ask the one that does ({e}); ask again shortly"
            ))
        };
        let mut client = self.store.pool().get().await.map_err(|e| unreachable(&e))?;
        let text = serde_json::to_string(command)
            .map_err(|e| refused(format!("the command could not be written: {e}")))?;
        let woken = Arc::new(Notify::new());
        let id: i64 = {
            let tx = client.transaction().await.map_err(|e| unreachable(&e))?;
            let id: i64 = tx
                .query_one(
                    "INSERT INTO commands (backend, command, asked_by) VALUES ($1, $2, $3) RETURNING id",
                    &[&backend, &text, &self.replica],
                )
                .await
                .and_then(|r| r.try_get(0))
                .map_err(|e| unreachable(&e))?;
            let note = Note::Command {
                r: self.replica.clone(),
                b: backend.to_owned(),
                id,
            }
            .payload();
            tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &note])
                .await
                .map_err(|e| unreachable(&e))?;
            // Waiting before the note can be answered.
            self.waiting().insert(id, woken.clone());
            if let Err(e) = tx.commit().await {
                self.waiting().remove(&id);
                return Err(unreachable(&e));
            }
            id
        };
        crate::metrics::get().store_op("command", true);
        let deadline = tokio::time::Instant::now() + WAIT;
        let answer = loop {
            let row = client
                .query_one("SELECT answer FROM commands WHERE id = $1", &[&id])
                .await
                .and_then(|r| r.try_get::<_, Option<String>>(0));
            if let Ok(Some(answer)) = row {
                break Some(answer);
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                break None;
            }
            let _ = tokio::time::timeout(left.min(POLL), woken.notified()).await;
        };
        self.waiting().remove(&id);
        match answer.map(|a| serde_json::from_str::<Answer>(&a)) {
            Some(Ok(Answer::Done(status))) => Ok(status),
            Some(Ok(Answer::Refused(why))) => Err(refused(why)),
            Some(Err(e)) => Err(refused(format!(
                "the supervising replica's answer does not read: {e}"
            ))),
            None => Err(refused(format!(
                "no replica supervising `{backend}` answered within {}s (its lease may be changing hands): ask again shortly",
                WAIT.as_secs()
            ))),
        }
    }

    /// Another replica announced command `id` for `backend`: carried out
    /// here if this replica holds the backend's lease and claims it first.
    pub async fn heard(&self, backend: &str, id: i64) {
        let Some(find) = self.backends.get() else {
            return;
        };
        // A shared backend whose lease this replica holds, or this
        // replica's own instance of a replica-local one (`NAME.REPLICA`).
        let own = backend
            .strip_suffix(self.replica.as_str())
            .and_then(|b| b.strip_suffix('.'))
            .and_then(find)
            .filter(|b| matches!(b.config.runtime, crate::config::RuntimeKind::Process));
        let held = (self.leases.holder(backend).as_deref() == Some(self.replica.as_str()))
            .then(|| find(backend))
            .flatten();
        let Some(b) = held.or(own) else {
            return;
        };
        let Ok(client) = self.store.pool().get().await else {
            crate::metrics::get().store_op("command", false);
            return;
        };
        let claimed = client
            .query_opt(
                "UPDATE commands SET claimed_by = $2 WHERE id = $1 AND claimed_by IS NULL RETURNING command",
                &[&id, &self.replica],
            )
            .await;
        let command = match claimed {
            Ok(Some(row)) => row.get::<_, String>(0),
            Ok(None) => return, // another replica's, or answered
            Err(e) => {
                crate::metrics::get().store_op("command", false);
                tracing::warn!(error = %e, "could not claim a command another replica routed here");
                return;
            }
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
        let note = Note::Answered {
            r: self.replica.clone(),
            id,
        }
        .payload();
        let written = client
            .execute(
                "WITH done AS (UPDATE commands SET answer = $2, done_at = now() WHERE id = $1)
                 SELECT pg_notify($3, $4)",
                &[&id, &answer, &CHANNEL, &note],
            )
            .await;
        crate::metrics::get().store_op("command", written.is_ok());
        if let Err(e) = written {
            tracing::warn!(error = %e, "could not answer a command another replica routed here");
        }
    }

    /// The answer to command `id` is in its row.
    pub fn answered(&self, id: i64) {
        if let Some(w) = self.waiting().get(&id) {
            w.notify_one();
        }
    }
}
