//! An MRTR retry that reached another replica than the one holding its
//! parked call: the replica it reached routes it to the holder (a
//! cluster's [`RetryRoute`], `cluster::postgres::retry`), which gives the
//! answer to the parked call ([`Mrtr::carry_out`]) and sends back what the
//! backend did next ([`Forwarded`]). The client sees the same round as on
//! the holder: the backend's result, its error, or its next question
//! (whose state names the holder again).
//!
//! What does not cross: progress and log notifications of the resumed
//! round (they go to the request that parked the call), and cancellation
//! (the holder's round ends by its own timeout).

use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::model::{CustomResult, InputResponses, ServerResult};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Binding, Mrtr, NO_CALL, Next, Refused, Resumed, Round};
use crate::auth::CallerKey;
use crate::backend::BackendError;
use crate::cluster::replica::ReplicaId;

/// The methods whose calls can be parked (`super::mrtr_target`).
const METHODS: [&str; 3] = ["tools/call", "prompts/get", "resources/read"];

/// A retry to carry out on the replica holding its parked call: the
/// client's state and answers, and who made it for what (checked against
/// the state's seal there as here).
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
    pub fn new(
        state: &str,
        responses: Option<&InputResponses>,
        binding: &Binding,
        ttl: Duration,
    ) -> Retry {
        Retry {
            state: state.to_owned(),
            responses: responses.cloned(),
            principal: binding.principal.clone(),
            method: binding.method.to_owned(),
            name: binding.name.clone(),
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        }
    }

    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }

    fn binding(&self) -> Option<Binding> {
        let method = METHODS.into_iter().find(|m| *m == self.method)?;
        Some(Binding {
            principal: self.principal.clone(),
            method,
            name: self.name.clone(),
        })
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

impl Forwarded {
    /// The round the client gets, as if it had been carried out here.
    pub fn into_round(self) -> Round {
        match self {
            Forwarded::Result { result, recovered } => Ok(Ok((
                Ok(ServerResult::CustomResult(CustomResult(result))),
                recovered,
            ))),
            Forwarded::Error { error, recovered } => {
                Ok(Ok((Err(BackendError::Mcp(error)), recovered)))
            }
            Forwarded::Question(q) => Ok(Err(q)),
            Forwarded::Failed(e) => Err(e),
        }
    }
}

impl From<Next> for Forwarded {
    fn from(next: Next) -> Forwarded {
        match next {
            Next::Done {
                result: Ok(r),
                recovered,
            } => match serde_json::to_value(r) {
                Ok(result) => Forwarded::Result { result, recovered },
                Err(e) => Forwarded::Failed(McpError::internal_error(
                    format!("vigil: the backend's result could not be passed on: {e}"),
                    None,
                )),
            },
            Next::Done {
                result: Err(e),
                recovered,
            } => Forwarded::Error {
                error: e.into_mcp(),
                recovered,
            },
            Next::InputRequired(q) => Forwarded::Question(q.into_json()),
            Next::Failed(e) => Forwarded::Failed(e),
        }
    }
}

/// Sends a retry to the replica holding its parked call (a cluster's).
#[async_trait::async_trait]
pub trait RetryRoute: Send + Sync + 'static {
    /// Has `replica` carry out `retry`: what its round came to, or
    /// [`Refused::Elsewhere`] when it could not be asked or did not answer.
    async fn retry(&self, replica: &ReplicaId, retry: &Retry) -> Result<Forwarded, Refused>;
}

impl Mrtr {
    /// Carries out `retry`, routed here by the replica it reached: the
    /// answer goes to the parked call, and the round's outcome back.
    pub async fn carry_out(&self, retry: Retry) -> Forwarded {
        let Some(binding) = retry.binding() else {
            return Forwarded::Failed(McpError::invalid_params(
                format!(
                    "vigil: a routed retry for `{}`, which no call can be parked for",
                    retry.method
                ),
                None,
            ));
        };
        match self.resume(&retry.state, retry.responses.as_ref(), &binding) {
            Ok(Resumed::Parked(events)) => self.next(events, &binding, retry.ttl()).await.into(),
            // The replica that routed it makes such a call again itself.
            Ok(Resumed::Again) => {
                Forwarded::Failed(McpError::invalid_params(format!("vigil: {NO_CALL}"), None))
            }
            Err(refused) => Forwarded::Failed(refused.into()),
        }
    }
}
