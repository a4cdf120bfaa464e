//! An MRTR retry that reached another replica than the one holding its
//! parked call: the replica it reached routes it to the holder (a
//! cluster's `RetryRoute`, `cluster::retry`), which gives the answer to
//! the parked call ([`Mrtr::carry_out`]) and sends back what the backend
//! did next (`Forwarded`). The client sees the same round as on
//! the holder: the backend's result, its error, or its next question
//! (whose state names the holder again).
//!
//! What does not cross: progress and log notifications of the resumed
//! round (they go to the request that parked the call), and cancellation
//! (the holder's round ends by its own timeout).

use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::model::{CustomResult, InputResponses, ServerResult};

use super::{Binding, Mrtr, NO_CALL, Next, Resumed, Round};
use crate::backend::BackendError;
use crate::cluster::retry::{Forwarded, Retry};

/// The methods whose calls can be parked (`super::mrtr_target`).
const METHODS: [&str; 3] = ["tools/call", "prompts/get", "resources/read"];

/// The retry of the call `state` names, for another replica to carry out.
pub fn retry(
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

fn binding(retry: &Retry) -> Option<Binding> {
    let method = METHODS.into_iter().find(|m| *m == retry.method)?;
    Some(Binding {
        principal: retry.principal.clone(),
        method,
        name: retry.name.clone(),
    })
}

/// The round the client gets from what another replica sent back, as if
/// it had been carried out here.
pub fn round(forwarded: Forwarded) -> Round {
    match forwarded {
        Forwarded::Result { result, recovered } => Ok(Ok((
            Ok(ServerResult::CustomResult(CustomResult(result))),
            recovered,
        ))),
        Forwarded::Error { error, recovered } => Ok(Ok((Err(BackendError::Mcp(error)), recovered))),
        Forwarded::Question(q) => Ok(Err(q)),
        Forwarded::Failed(e) => Err(e),
    }
}

fn forwarded(next: Next) -> Forwarded {
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

impl Mrtr {
    /// Carries out `retry`, routed here by the replica it reached: the
    /// answer goes to the parked call, and the round's outcome back.
    pub async fn carry_out(&self, retry: Retry) -> Forwarded {
        let Some(binding) = binding(&retry) else {
            return Forwarded::Failed(McpError::invalid_params(
                format!(
                    "vigil: a routed retry for `{}`, which no call can be parked for",
                    retry.method
                ),
                None,
            ));
        };
        match self.resume(&retry.state, retry.responses.as_ref(), &binding) {
            Ok(Resumed::Parked(events)) => {
                forwarded(self.next(events, &binding, retry.ttl()).await)
            }
            // The replica that routed it makes such a call again itself.
            Ok(Resumed::Again) => {
                Forwarded::Failed(McpError::invalid_params(format!("vigil: {NO_CALL}"), None))
            }
            Err(refused) => Forwarded::Failed(refused.into()),
        }
    }
}
