//! Multi round-trip requests (SEP-2322) in both protocol eras.
//!
//! The fixtures ([`fixtures`]) say, round by round, what they need from the
//! client. How they get it depends on the request's revision:
//! - 2026-07-28: the call answers with an input-required result (the
//!   questions and a sealed `requestState`), and the client calls again with
//!   `inputResponses` and the state;
//! - earlier revisions (a session that began with `initialize`): the server
//!   asks the client with real requests (`elicitation/create`,
//!   `sampling/createMessage`, `roots/list`) during the call and finishes
//!   it, which is what a gateway in front of a handshake-era session has to
//!   translate.

pub mod fixtures;
mod state;

#[allow(deprecated)] // sampling and roots are deprecated by SEP-2577, not gone from 2025-11-25
use rmcp::model::ServerRequest;
use rmcp::{
    ErrorData as McpError, Peer, RoleServer,
    model::{
        CallToolResult, ContentBlock, InputRequest, InputRequests, InputRequiredResult,
        InputResponses,
    },
    service::RequestContext,
};
use serde_json::{Map, Value};

use crate::{era::modern, fixtures::typed};
use fixtures::{Capabilities, Round, Step};
pub use state::Sealer;

/// Rounds a handshake-era call may take before the server gives up (the
/// fixtures need at most three).
const MAX_ROUNDS: usize = 10;

/// How one MRTR request came out.
pub enum Outcome {
    /// Finished, with this text.
    Done(String),
    /// The client must answer first (2026-07-28 only).
    InputRequired(InputRequiredResult),
    /// A handshake-era client could not answer a question (a tool error).
    Failed(String),
}

/// Run MRTR fixture `issuer` for one request; `None` if it is not one.
pub async fn run(
    sealer: &Sealer,
    issuer: &str,
    responses: Option<&InputResponses>,
    request_state: Option<&str>,
    context: &RequestContext<RoleServer>,
) -> Option<Result<Outcome, McpError>> {
    let empty = InputResponses::new();
    let state = match request_state.map(|sealed| sealer.open(sealed, issuer)) {
        Some(Err(refused)) => return Some(Err(refused)),
        Some(Ok(state)) => Some(state),
        None => None,
    };
    let capabilities = Capabilities::from(context.client_capabilities().as_ref());
    let round = Round {
        responses: responses.unwrap_or(&empty),
        state: state.as_ref(),
        capabilities,
    };
    let first = fixtures::step(issuer, &round)?;
    Some(if modern(context) {
        first.and_then(|step| answer_modern(sealer, step))
    } else {
        drive_legacy(issuer, first, capabilities, &context.peer).await
    })
}

/// 2026-07-28: a finished step is the result, an asking one the
/// input-required result with the sealed state.
fn answer_modern(sealer: &Sealer, step: Step) -> Result<Outcome, McpError> {
    match step {
        Step::Done(text) => Ok(Outcome::Done(text)),
        Step::Ask { requests, state } => {
            let requests: InputRequests = typed(Value::Object(requests))?;
            let sealed = state.as_ref().map(|state| sealer.seal(state));
            Ok(Outcome::InputRequired(InputRequiredResult::new(
                Some(requests),
                sealed,
            )))
        }
    }
}

/// Handshake era: ask each question with a real request, feed the answers
/// to the next round, until the fixture finishes.
async fn drive_legacy(
    issuer: &str,
    first: Result<Step, McpError>,
    capabilities: Capabilities,
    peer: &Peer<RoleServer>,
) -> Result<Outcome, McpError> {
    let mut step = first?;
    for _ in 0..MAX_ROUNDS {
        let (requests, state) = match step {
            Step::Done(text) => return Ok(Outcome::Done(text)),
            Step::Ask { requests, state } => (requests, state),
        };
        let responses = match ask_each(peer, requests).await {
            Ok(responses) => responses,
            Err(reason) => return Ok(Outcome::Failed(reason)),
        };
        let round = Round {
            responses: &responses,
            state: state.as_ref(),
            capabilities,
        };
        step = fixtures::step(issuer, &round).unwrap_or_else(|| {
            Err(McpError::internal_error(
                format!("`{issuer}` stopped being a fixture"),
                None,
            ))
        })?;
    }
    Err(McpError::internal_error(
        format!("`{issuer}` did not finish within {MAX_ROUNDS} rounds"),
        None,
    ))
}

/// Send every question to the client, one after the other; their answers
/// under the questions' keys. An error says which question failed and why.
async fn ask_each(
    peer: &Peer<RoleServer>,
    requests: Map<String, Value>,
) -> Result<InputResponses, String> {
    let mut responses = InputResponses::new();
    for (key, request) in requests {
        let request: InputRequest = serde_json::from_value(request)
            .map_err(|error| format!("question `{key}` is not a request: {error}"))?;
        #[allow(deprecated)]
        let request = match request {
            InputRequest::CreateMessage(r) => ServerRequest::CreateMessageRequest(r),
            InputRequest::Elicitation(r) => ServerRequest::ElicitRequest(r),
            InputRequest::ListRoots(r) => ServerRequest::ListRootsRequest(r),
            other => return Err(format!("question `{key}` has no request form: {other:?}")),
        };
        let answer = peer
            .send_request(request)
            .await
            .map_err(|error| format!("the client did not answer `{key}`: {error}"))?;
        let answer = serde_json::to_value(answer)
            .map_err(|error| format!("the answer to `{key}` does not serialise: {error}"))?;
        responses.insert(key, answer);
    }
    Ok(responses)
}

/// The tool result of an outcome.
pub fn tool_result(outcome: Outcome) -> rmcp::model::CallToolResponse {
    match outcome {
        Outcome::Done(text) => CallToolResult::success(vec![ContentBlock::text(text)]).into(),
        Outcome::InputRequired(result) => result.into(),
        Outcome::Failed(reason) => CallToolResult::error(vec![ContentBlock::text(reason)]).into(),
    }
}
