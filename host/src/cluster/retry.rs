//! The seam for MRTR retries that reach another replica than the one
//! holding their parked call: the replica a retry reached sends it to the
//! holder ([`RetryRoute`]; `postgres::retry` on a shared store, nothing
//! with one replica), which resumes the call and sends back what the
//! backend did next ([`Forwarded`]). The front builds the [`Retry`] and
//! carries out the ones routed to it (`gateway::mrtr::routed`).

use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::model::InputResponses;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::replica::ReplicaId;
use crate::auth::CallerKey;

/// A retry to carry out on the replica holding its parked call: the
/// client's state and answers, and who made it for what (checked against
/// the state's seal there as on the replica it reached).
#[derive(Debug, Serialize, Deserialize)]
pub struct Retry {
    pub state: String,
    pub responses: Option<InputResponses>,
    pub principal: CallerKey,
    pub method: String,
    pub name: String,
    /// How long a next question waits for the client's retry, and about
    /// how long the round may take (the backend's request timeout).
    pub ttl_ms: u64,
}

impl Retry {
    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }
}

/// What a routed retry's round came to, as it travels back.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Forwarded {
    /// The backend's result, as it wrote it.
    Result { result: Value, recovered: bool },
    /// The backend's error.
    Error { error: McpError, recovered: bool },
    /// The backend's next question, as the input-required result.
    Question(Value),
    /// Vigil's own refusal (a bad answer, a replayed state, …).
    Failed(McpError),
}

/// The replica holding the call did not take the retry (it died, or
/// cannot reach the store), or did not answer in time.
#[derive(Debug, thiserror::Error)]
#[error("replica `{0}` did not carry out the retry")]
pub struct NotTaken(pub ReplicaId);

/// Sends a retry to the replica holding its parked call.
#[async_trait::async_trait]
pub trait RetryRoute: Send + Sync + 'static {
    /// Has `replica` carry out `retry`: what its round came to.
    async fn retry(&self, replica: &ReplicaId, retry: &Retry) -> Result<Forwarded, NotTaken>;
}
