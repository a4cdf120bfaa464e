//! The session book on PostgreSQL: the [`SessionBook`] of replicas
//! sharing a store.
//!
//! Ids are still verified by their seal alone (`cluster::session_id`);
//! what the database adds is what every replica must agree on:
//!
//! - **closed sessions** (`sessions_closed`): a DELETE on any replica
//!   closes the session on all. The replica that closes it writes the row
//!   and announces it ([`Note::Closed`]); every replica keeps the closed
//!   sessions it heard of in memory and refuses them on each request
//!   without a round trip; a replica about to adopt a session reads the
//!   table too ([`SessionBook::closed_elsewhere`]), which covers a note it
//!   missed;
//! - **what a session kept** (`sessions_kept`): its log level and
//!   subscriptions, read by a replica adopting it.
//!
//! Rows are named by rmcp's id of the session (in the sealed id), never by
//! the sealed id itself, a credential, and go when the session would have
//! expired anyway ([`PgBook::prune`]).

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;

use crate::cluster::book::{Change, Kept, OpenError, Refused, SessionBook, unix_now};
use crate::cluster::session_id::{Sealer, SessionFacts};
use crate::store::postgres::PostgresStore;
use crate::store::postgres::note::Note;

/// The shared book; see the module doc.
pub struct PgBook {
    sealer: Sealer,
    store: PostgresStore,
    replica: String,
    /// Sessions closed (heard of or closed here), by rmcp's id, with when
    /// each expires (then forgotten).
    closed: Mutex<HashMap<String, u64>>,
}

fn secs(t: u64) -> i64 {
    i64::try_from(t).unwrap_or(i64::MAX)
}

impl PgBook {
    pub fn new(sealer: Sealer, store: PostgresStore, replica: &str) -> PgBook {
        PgBook {
            sealer,
            store,
            replica: replica.to_owned(),
            closed: Mutex::default(),
        }
    }

    fn closed(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.closed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Another replica closed session `local`, valid until `expires`.
    pub fn heard_closed(&self, local: &str, expires: u64) {
        let now = unix_now();
        let mut closed = self.closed();
        closed.retain(|_, e| *e > now);
        if expires > now {
            closed.insert(local.to_owned(), expires);
        }
    }

    /// Deletes the rows of sessions that expired; how many went.
    pub async fn prune(&self) -> Result<u64, tokio_postgres::Error> {
        let client = match self.store.pool().get().await {
            Ok(c) => c,
            Err(deadpool_postgres::PoolError::Backend(e)) => return Err(e),
            Err(_) => return Ok(0),
        };
        let now = secs(unix_now());
        let a = client
            .execute("DELETE FROM sessions_closed WHERE expires_at < $1", &[&now])
            .await?;
        let b = client
            .execute("DELETE FROM sessions_kept WHERE expires_at < $1", &[&now])
            .await?;
        Ok(a + b)
    }

    async fn client(&self) -> Option<deadpool_postgres::Client> {
        match self.store.pool().get().await {
            Ok(c) => Some(c),
            Err(e) => {
                crate::metrics::get().store_op("session", false);
                tracing::warn!(error = %e, "the session book is out of reach");
                None
            }
        }
    }

    fn failed(&self, what: &str, e: &tokio_postgres::Error) {
        crate::metrics::get().store_op("session", false);
        tracing::warn!(error = %e, "the session book could not {what}");
    }
}

#[async_trait]
impl SessionBook for PgBook {
    async fn open(&self, facts: &SessionFacts) -> Result<String, OpenError> {
        Ok(self.sealer.seal(facts)?)
    }

    async fn resolve(&self, id: &str) -> Result<SessionFacts, Refused> {
        let facts = self.sealer.open(id)?;
        if self.closed().contains_key(&facts.local) {
            return Err(Refused::Closed);
        }
        Ok(facts)
    }

    async fn closed_elsewhere(&self, facts: &SessionFacts) -> bool {
        let Some(client) = self.client().await else {
            // Out of reach: what this replica heard decides.
            return false;
        };
        match client
            .query_opt(
                "SELECT expires_at FROM sessions_closed WHERE session = $1",
                &[&facts.local],
            )
            .await
        {
            Ok(row) => {
                crate::metrics::get().store_op("session", true);
                let closed = row.is_some();
                if closed {
                    self.heard_closed(&facts.local, facts.expires);
                }
                closed
            }
            Err(e) => {
                self.failed("read closed sessions", &e);
                false
            }
        }
    }

    async fn close(&self, id: &str) {
        let Ok(facts) = self.sealer.open(id) else {
            return; // not an open session: nothing to remember
        };
        self.heard_closed(&facts.local, facts.expires);
        let Some(mut client) = self.client().await else {
            return;
        };
        let note = Note::Closed {
            r: self.replica.clone(),
            s: facts.local.clone(),
            e: facts.expires,
        }
        .payload();
        let written = async {
            let tx = client.transaction().await?;
            tx.execute(
                "INSERT INTO sessions_closed (session, expires_at) VALUES ($1, $2)
                 ON CONFLICT (session) DO NOTHING",
                &[&facts.local, &secs(facts.expires)],
            )
            .await?;
            tx.execute(
                "DELETE FROM sessions_kept WHERE session = $1",
                &[&facts.local],
            )
            .await?;
            tx.execute(
                "SELECT pg_notify($1, $2)",
                &[&crate::store::postgres::note::CHANNEL, &note],
            )
            .await?;
            tx.commit().await
        }
        .await;
        match written {
            Ok(()) => crate::metrics::get().store_op("session", true),
            Err(e) => self.failed("record a closed session", &e),
        }
    }

    async fn update(&self, id: &str, change: Change) -> Result<(), Refused> {
        let facts = self.resolve(id).await?;
        let Some(client) = self.client().await else {
            return Ok(());
        };
        let (level, add, remove): (Option<String>, Option<String>, Option<String>) = match change {
            Change::LogLevel(l) => (Some(l), None, None),
            Change::Subscribed(uri) => (None, Some(uri), None),
            Change::Unsubscribed(uri) => (None, None, Some(uri)),
        };
        let written = client
            .execute(
                "INSERT INTO sessions_kept AS k (session, expires_at, log_level, subscriptions)
                 VALUES ($1, $2, $3, CASE WHEN $4::text IS NULL THEN '{}' ELSE ARRAY[$4::text] END)
                 ON CONFLICT (session) DO UPDATE SET
                     log_level = coalesce($3, k.log_level),
                     subscriptions = CASE
                         WHEN $4::text IS NOT NULL AND NOT ($4::text = ANY(k.subscriptions))
                             THEN array_append(k.subscriptions, $4::text)
                         WHEN $5::text IS NOT NULL THEN array_remove(k.subscriptions, $5::text)
                         ELSE k.subscriptions
                     END",
                &[&facts.local, &secs(facts.expires), &level, &add, &remove],
            )
            .await;
        match written {
            Ok(_) => crate::metrics::get().store_op("session", true),
            Err(e) => self.failed("record what a session kept", &e),
        }
        Ok(())
    }

    async fn kept(&self, id: &str) -> Result<Kept, Refused> {
        let facts = self.resolve(id).await?;
        let Some(client) = self.client().await else {
            return Ok(Kept::default());
        };
        match client
            .query_opt(
                "SELECT log_level, subscriptions FROM sessions_kept WHERE session = $1",
                &[&facts.local],
            )
            .await
        {
            Ok(row) => {
                crate::metrics::get().store_op("session", true);
                Ok(row
                    .map(|r| Kept {
                        log_level: r.get(0),
                        subscriptions: r.get::<_, Vec<String>>(1).into_iter().collect(),
                    })
                    .unwrap_or_default())
            }
            Err(e) => {
                self.failed("read what a session kept", &e);
                Ok(Kept::default())
            }
        }
    }
}

#[cfg(test)]
mod tests;
