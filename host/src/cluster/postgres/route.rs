//! Requests one replica routes to another through the store: an operator
//! command for the supervisor of a backend (`command`), an MRTR retry for
//! the replica holding its parked call (`retry`).
//!
//! The asker writes a row of `commands` (its kind, its target — a backend
//! or a replica —, its body) and announces it in the same transaction.
//! Every replica hears the note; the one the request is meant for claims
//! the row (one `UPDATE … WHERE claimed_by IS NULL`: a request is carried
//! out once), carries it out, writes the answer into the row and announces
//! that ([`Note::Answered`]). The asker, woken by the note (or reading the
//! row every second, should the note be lost), takes the answer and
//! deletes the row. A row given up on is deleted too, so a request nobody
//! claimed in time is never carried out later.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::store::postgres::PostgresStore;
use crate::store::postgres::note::{CHANNEL, Note};

/// How often an asker reads the row while it waits (a lost note).
const POLL: Duration = Duration::from_secs(1);

/// What a routed request is, as its row's `kind` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An operator command; the target is a backend.
    Command,
    /// An MRTR retry; the target is a replica.
    Retry,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Command => "command",
            Kind::Retry => "retry",
        }
    }
}

/// How long an asker waits: for a replica to claim the request (a live
/// one does as it hears the note), then for its answer.
#[derive(Debug, Clone, Copy)]
pub struct Waits {
    pub claim: Duration,
    pub answer: Duration,
}

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    #[error("cannot reach the store: {0}")]
    Unreachable(String),
    #[error("no replica took it within {}s", .0.as_secs())]
    Unclaimed(Duration),
    #[error("no answer within {}s", .0.as_secs())]
    Unanswered(Duration),
}

/// This replica's end of the routed requests: what it asks and waits for,
/// and what it claims and answers.
pub struct Route {
    store: PostgresStore,
    replica: String,
    /// Askers waiting, by request id.
    waiting: Mutex<HashMap<i64, Arc<Notify>>>,
}

impl Route {
    pub fn new(store: PostgresStore, replica: &str) -> Arc<Route> {
        Arc::new(Route {
            store,
            replica: replica.to_owned(),
            waiting: Mutex::default(),
        })
    }

    /// This replica's name.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Arc<Notify>>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes a request of `kind` for `target`, announced by the note
    /// `note` makes of its id, and waits for the answer as `waits` says.
    pub async fn ask(
        &self,
        kind: Kind,
        target: &str,
        body: &str,
        note: impl FnOnce(i64) -> Note,
        waits: Waits,
    ) -> Result<String, AskError> {
        let op = kind.as_str();
        let unreachable = |e: &dyn std::fmt::Display| {
            crate::metrics::get().store_op(op, false);
            AskError::Unreachable(e.to_string())
        };
        let mut client = self.store.pool().get().await.map_err(|e| unreachable(&e))?;
        let woken = Arc::new(Notify::new());
        let id: i64 = {
            let tx = client.transaction().await.map_err(|e| unreachable(&e))?;
            let id: i64 = tx
                .query_one(
                    "INSERT INTO commands (kind, target, body, asked_by) VALUES ($1, $2, $3, $4) RETURNING id",
                    &[&op, &target, &body, &self.replica],
                )
                .await
                .and_then(|r| r.try_get(0))
                .map_err(|e| unreachable(&e))?;
            let note = note(id).payload();
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
        crate::metrics::get().store_op(op, true);
        let asked = tokio::time::Instant::now();
        let mut deadline = asked + waits.claim;
        let mut claimed = false;
        let answer = loop {
            let row = client
                .query_one(
                    "SELECT claimed_by IS NOT NULL, answer FROM commands WHERE id = $1",
                    &[&id],
                )
                .await
                .and_then(|r| Ok((r.try_get::<_, bool>(0)?, r.try_get::<_, Option<String>>(1)?)));
            match row {
                Ok((_, Some(answer))) => break Ok(answer),
                Ok((true, None)) if !claimed => {
                    claimed = true;
                    deadline = asked + waits.answer;
                }
                _ => {}
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                break Err(if claimed {
                    AskError::Unanswered(waits.answer)
                } else {
                    AskError::Unclaimed(waits.claim)
                });
            }
            let _ = tokio::time::timeout(left.min(POLL), woken.notified()).await;
        };
        self.waiting().remove(&id);
        let deleted = client
            .execute("DELETE FROM commands WHERE id = $1", &[&id])
            .await;
        crate::metrics::get().store_op(op, deleted.is_ok());
        answer
    }

    /// Claims request `id` of `kind` for this replica: its body, or `None`
    /// when another replica claimed it first, or it was given up on.
    pub async fn claim(&self, kind: Kind, id: i64) -> Option<String> {
        let op = kind.as_str();
        let client = match self.store.pool().get().await {
            Ok(c) => c,
            Err(e) => {
                crate::metrics::get().store_op(op, false);
                tracing::warn!(error = %e, kind = op, "could not claim a request another replica routed here");
                return None;
            }
        };
        let claimed = client
            .query_opt(
                "UPDATE commands SET claimed_by = $2 WHERE id = $1 AND kind = $3 AND claimed_by IS NULL RETURNING body",
                &[&id, &self.replica, &op],
            )
            .await;
        crate::metrics::get().store_op(op, claimed.is_ok());
        match claimed {
            Ok(row) => row.map(|r| r.get::<_, String>(0)),
            Err(e) => {
                tracing::warn!(error = %e, kind = op, "could not claim a request another replica routed here");
                None
            }
        }
    }

    /// Writes the answer to request `id` into its row and announces it.
    pub async fn answer(&self, kind: Kind, id: i64, answer: &str) {
        let op = kind.as_str();
        let note = Note::Answered {
            r: self.replica.clone(),
            id,
        }
        .payload();
        let written = match self.store.pool().get().await {
            Ok(client) => client
                .execute(
                    "WITH done AS (UPDATE commands SET answer = $2, done_at = now() WHERE id = $1)
                     SELECT pg_notify($3, $4)",
                    &[&id, &answer, &CHANNEL, &note],
                )
                .await
                .map(drop)
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        crate::metrics::get().store_op(op, written.is_ok());
        if let Err(e) = written {
            tracing::warn!(error = %e, kind = op, "could not answer a request another replica routed here; its asker gives up in time");
        }
    }

    /// The answer to request `id` is in its row: wakes its asker, if it is
    /// this replica.
    pub fn answered(&self, id: i64) {
        if let Some(w) = self.waiting().get(&id) {
            w.notify_one();
        }
    }
}
