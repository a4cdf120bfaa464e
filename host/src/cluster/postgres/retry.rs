//! MRTR retries routed to the replica holding their parked call
//! ([`crate::cluster::retry`]): the replica a retry reached asks the one
//! its `requestState` names through the store ([`super::route`],
//! announced as [`Note::Retry`]); that one gives the answer to the parked
//! call and writes back what the backend did next.
//!
//! A replica that does not take the retry within [`CLAIM`] (it died, or
//! cannot reach the store) leaves the client with the error saying to
//! call again ([`NotTaken`]); so does one that takes it but has not
//! answered within the round's own timeout and [`MARGIN`].

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::future::BoxFuture;

use super::route::{Kind, Route, Waits};
use crate::cluster::replica::ReplicaId;
use crate::cluster::retry::{Forwarded, NotTaken, Retry, RetryRoute};
use crate::store::postgres::note::Note;

/// How long the holder has to take a retry: a live one does as soon as it
/// hears the note.
pub const CLAIM: Duration = Duration::from_secs(5);

/// Added to a round's timeout for the answer to come back.
const MARGIN: Duration = Duration::from_secs(5);

/// Carries out a retry on this replica (the gateway's, set once it is
/// assembled).
pub type Here = Box<dyn Fn(Retry) -> BoxFuture<'static, Forwarded> + Send + Sync>;

/// Routes retries between replicas; see the module doc.
pub struct Retries {
    route: Arc<Route>,
    here: OnceLock<Here>,
}

impl Retries {
    pub fn new(route: Arc<Route>) -> Arc<Retries> {
        Arc::new(Retries {
            route,
            here: OnceLock::new(),
        })
    }

    /// How this replica carries out the retries routed to it (set once).
    pub fn set_here(&self, here: Here) {
        let _ = self.here.set(here);
    }

    /// Another replica announced retry `id` for replica `to`: carried out
    /// here if that is this replica.
    pub async fn heard(&self, to: &str, id: i64) {
        let Some(here) = self.here.get() else {
            return;
        };
        if to != self.route.replica() {
            return;
        }
        let Some(body) = self.route.claim(Kind::Retry, id).await else {
            return; // given up on
        };
        let forwarded = match serde_json::from_str::<Retry>(&body) {
            Ok(retry) => here(retry).await,
            Err(e) => Forwarded::Failed(rmcp::ErrorData::internal_error(
                format!("vigil: a routed retry this replica does not read: {e}"),
                None,
            )),
        };
        let answer = serde_json::to_string(&forwarded).unwrap_or_else(|e| {
            serde_json::to_string(&Forwarded::Failed(rmcp::ErrorData::internal_error(
                format!("vigil: the round's outcome could not be passed on: {e}"),
                None,
            )))
            .unwrap_or_default()
        });
        self.route.answer(Kind::Retry, id, &answer).await;
    }
}

#[async_trait::async_trait]
impl RetryRoute for Retries {
    async fn retry(&self, replica: &ReplicaId, retry: &Retry) -> Result<Forwarded, NotTaken> {
        let elsewhere = || NotTaken(replica.clone());
        let body = serde_json::to_string(retry).map_err(|_| elsewhere())?;
        let note = |id| Note::Retry {
            r: self.route.replica().to_owned(),
            to: replica.to_string(),
            id,
        };
        let waits = Waits {
            claim: CLAIM,
            answer: retry.ttl() + MARGIN,
        };
        let answer = self
            .route
            .ask(Kind::Retry, replica.as_str(), &body, note, waits)
            .await
            .map_err(|e| {
                tracing::info!(%replica, error = %e, "an MRTR retry could not be carried out by the replica holding its call");
                elsewhere()
            })?;
        serde_json::from_str(&answer).map_err(|e| {
            tracing::warn!(%replica, error = %e, "the answer to a routed MRTR retry does not read");
            elsewhere()
        })
    }
}
