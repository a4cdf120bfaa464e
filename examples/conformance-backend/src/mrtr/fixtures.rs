//! The SEP-2322 fixtures of the 2026-07-28 suite (`input-required-result-*`
//! and `test_streaming_elicitation`), as pure round logic: given what the
//! client answered so far (and the state it echoed, already verified), each
//! fixture either asks its questions (again) or finishes with a text.
//!
//! Keys, messages and schemas are those the suite's scenario descriptions
//! give. An answer that does not parse as the result of its question (a
//! number where an `ElicitResult` belongs, say) counts as missing, so the
//! question is asked again rather than the call completing on bad input.

// Sampling, roots and logging are deprecated by SEP-2577 in rmcp, not gone
// from the revisions the suite tests.
#![allow(deprecated)]
// A round's question (`Step`) is the fixture's whole answer, made once per
// round: boxing it would only add noise to every fixture.
#![allow(clippy::result_large_err)]

use rmcp::{
    ErrorData as McpError,
    model::{
        ClientCapabilities, CreateMessageResult, ElicitResult, InputResponses, ListRootsResult,
    },
};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::state::State;

pub const ELICITATION: &str = "test_input_required_result_elicitation";
pub const SAMPLING: &str = "test_input_required_result_sampling";
pub const LIST_ROOTS: &str = "test_input_required_result_list_roots";
pub const REQUEST_STATE: &str = "test_input_required_result_request_state";
pub const MULTIPLE_INPUTS: &str = "test_input_required_result_multiple_inputs";
pub const MULTI_ROUND: &str = "test_input_required_result_multi_round";
pub const TAMPERED_STATE: &str = "test_input_required_result_tampered_state";
pub const CAPABILITIES: &str = "test_input_required_result_capabilities";
/// SEP-2575: a tool whose answer needs the client, whose response stream
/// must carry no request of the server's (only the input-required result).
pub const STREAMING_ELICITATION: &str = "test_streaming_elicitation";
/// The prompt counterpart: MRTR on `prompts/get`.
pub const PROMPT: &str = "test_input_required_result_prompt";

/// `(name, description)` of every MRTR tool.
pub const TOOLS: &[(&str, &str)] = &[
    (
        ELICITATION,
        "MRTR: asks the client's user for a name (elicitation), then greets",
    ),
    (
        SAMPLING,
        "MRTR: asks the client's LLM a question (sampling), then reports the answer",
    ),
    (
        LIST_ROOTS,
        "MRTR: asks for the client's roots (roots/list), then lists them",
    ),
    (
        REQUEST_STATE,
        "MRTR: asks for a confirmation with a sealed requestState, and checks it came back",
    ),
    (
        MULTIPLE_INPUTS,
        "MRTR: asks elicitation, sampling and roots/list questions at once",
    ),
    (
        MULTI_ROUND,
        "MRTR: asks two questions in two rounds, the state evolving between them",
    ),
    (
        TAMPERED_STATE,
        "MRTR: issues an HMAC-sealed requestState and refuses an altered one",
    ),
    (
        CAPABILITIES,
        "MRTR: asks only what the client's declared capabilities allow",
    ),
    (
        STREAMING_ELICITATION,
        "Asks the client's user a question; its response stream carries only the result",
    ),
];

/// What the client can be asked, from the capabilities it declared.
#[derive(Debug, Clone, Copy, Default)]
pub struct Capabilities {
    pub elicitation: bool,
    pub sampling: bool,
    pub roots: bool,
}

impl From<Option<&ClientCapabilities>> for Capabilities {
    fn from(capabilities: Option<&ClientCapabilities>) -> Self {
        capabilities.map_or_else(Self::default, |c| Self {
            elicitation: c.elicitation.is_some(),
            sampling: c.sampling.is_some(),
            roots: c.roots.is_some(),
        })
    }
}

/// Where a round leaves a fixture.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// Ask these questions (an `inputRequests` map), with this state.
    Ask {
        requests: Map<String, Value>,
        state: Option<State>,
    },
    /// Finished: the result's text.
    Done(String),
}

/// One round's input: the answers, the verified state, the capabilities.
pub struct Round<'a> {
    pub responses: &'a InputResponses,
    pub state: Option<&'a State>,
    pub capabilities: Capabilities,
}

#[derive(Clone, Copy)]
enum Kind {
    Elicitation,
    Sampling,
    Roots,
}

/// One question: its key in `inputRequests`, what it asks, and its request.
struct Question {
    key: &'static str,
    kind: Kind,
    request: Value,
}

fn elicit(key: &'static str, message: &str, field: &str, field_type: &str) -> Question {
    Question {
        key,
        kind: Kind::Elicitation,
        request: json!({
            "method": "elicitation/create",
            "params": {
                "message": message,
                "requestedSchema": {
                    "type": "object",
                    "properties": { field: { "type": field_type } },
                    "required": [field]
                }
            }
        }),
    }
}

fn sample(key: &'static str, text: &str, max_tokens: u32) -> Question {
    Question {
        key,
        kind: Kind::Sampling,
        request: json!({
            "method": "sampling/createMessage",
            "params": {
                "messages": [{ "role": "user", "content": { "type": "text", "text": text } }],
                "maxTokens": max_tokens
            }
        }),
    }
}

fn roots(key: &'static str) -> Question {
    Question {
        key,
        kind: Kind::Roots,
        request: json!({ "method": "roots/list", "params": {} }),
    }
}

fn parses<T: DeserializeOwned>(value: &Value) -> bool {
    value.is_object() && serde_json::from_value::<T>(value.clone()).is_ok()
}

impl Kind {
    fn declared(self, capabilities: Capabilities) -> bool {
        match self {
            Kind::Elicitation => capabilities.elicitation,
            Kind::Sampling => capabilities.sampling,
            Kind::Roots => capabilities.roots,
        }
    }

    fn capability(self) -> ClientCapabilities {
        let builder = ClientCapabilities::builder();
        match self {
            Kind::Elicitation => builder.enable_elicitation().build(),
            Kind::Sampling => builder.enable_sampling().build(),
            Kind::Roots => builder.enable_roots().build(),
        }
    }

    fn answered_by(self, value: &Value) -> bool {
        match self {
            Kind::Elicitation => parses::<ElicitResult>(value),
            Kind::Sampling => parses::<CreateMessageResult>(value),
            Kind::Roots => parses::<ListRootsResult>(value),
        }
    }
}

/// The step that asks `questions`, all of them, with `state`.
fn ask(questions: &[Question], state: Option<State>) -> Step {
    Step::Ask {
        requests: questions
            .iter()
            .map(|q| (q.key.to_owned(), q.request.clone()))
            .collect(),
        state,
    }
}

/// A question whose capability the client did not declare is an error: the
/// server must not rely on it (`-32021`, naming the capability).
fn require(round: &Round<'_>, questions: &[Question]) -> Result<(), McpError> {
    match questions
        .iter()
        .find(|q| !q.kind.declared(round.capabilities))
    {
        Some(missing) => Err(McpError::missing_required_client_capability(
            missing.kind.capability(),
        )),
        None => Ok(()),
    }
}

/// What a fixture does next: finish with a text, or ask.
type Next = Result<Result<String, Step>, McpError>;

/// The answers to `questions` if every one is answered, otherwise the step
/// that asks them all (again).
fn gather<'a>(
    round: &Round<'a>,
    questions: &[Question],
    state: Option<State>,
) -> Result<Result<Vec<&'a Value>, Step>, McpError> {
    require(round, questions)?;
    let answers: Option<Vec<&Value>> = questions
        .iter()
        .map(|q| {
            round
                .responses
                .get(q.key)
                .filter(|value| q.kind.answered_by(value))
        })
        .collect();
    Ok(answers.ok_or_else(|| ask(questions, state)))
}

/// The text of an elicitation answer: the field asked for, or what the user did.
fn elicited(answer: &Value, field: &str) -> String {
    match answer["action"].as_str() {
        Some("accept") => match &answer["content"][field] {
            Value::String(text) => text.clone(),
            Value::Null => format!("(no {field})"),
            other => other.to_string(),
        },
        action => format!("(the user chose {})", action.unwrap_or("nothing")),
    }
}

fn sampled(answer: &Value) -> String {
    answer["content"]["text"]
        .as_str()
        .unwrap_or("(no text)")
        .to_owned()
}

fn root_uris(answer: &Value) -> String {
    let uris: Vec<&str> = answer["roots"]
        .as_array()
        .map(|roots| roots.iter().filter_map(|r| r["uri"].as_str()).collect())
        .unwrap_or_default();
    uris.join(", ")
}

fn new_state(issuer: &str, round: u32, carried: Value) -> Option<State> {
    Some(State {
        issuer: issuer.to_owned(),
        round,
        carried,
    })
}

/// The state of `round` if the client echoed it, else `None`.
fn state_of_round<'a>(round: &Round<'a>, number: u32) -> Option<&'a State> {
    round.state.filter(|state| state.round == number)
}

fn name_question() -> Question {
    elicit("user_name", "What is your name?", "name", "string")
}

fn confirm_question() -> Question {
    elicit("confirm", "Please confirm", "ok", "boolean")
}

/// The next step of fixture `issuer`, or `None` if it is not an MRTR fixture.
pub fn step(issuer: &str, round: &Round<'_>) -> Option<Result<Step, McpError>> {
    let next: Next = match issuer {
        ELICITATION => gather(round, &[name_question()], None)
            .map(|r| r.map(|a| format!("Hello, {}!", elicited(a[0], "name")))),
        STREAMING_ELICITATION => {
            let question = elicit(
                "answer",
                "Please answer to finish the call",
                "answer",
                "string",
            );
            gather(round, &[question], None)
                .map(|r| r.map(|a| format!("Streaming complete: {}", elicited(a[0], "answer"))))
        }
        SAMPLING => {
            let question = sample("capital_question", "What is the capital of France?", 100);
            gather(round, &[question], None)
                .map(|r| r.map(|a| format!("LLM response: {}", sampled(a[0]))))
        }
        LIST_ROOTS => gather(round, &[roots("client_roots")], None)
            .map(|r| r.map(|a| format!("Client roots: {}", root_uris(a[0])))),
        REQUEST_STATE | TAMPERED_STATE => {
            with_issued_state(round, issuer, &[confirm_question()], |a| {
                let verdict = if issuer == REQUEST_STATE {
                    "state-ok"
                } else {
                    "integrity-ok"
                };
                format!(
                    "{verdict}: the requestState came back intact; confirmed: {}",
                    elicited(a[0], "ok")
                )
            })
        }
        MULTIPLE_INPUTS => {
            let questions = [
                name_question(),
                sample("greeting", "Generate a greeting", 50),
                roots("client_roots"),
            ];
            with_issued_state(round, issuer, &questions, |a| {
                format!(
                    "Name: {}; greeting: {}; roots: {}",
                    elicited(a[0], "name"),
                    sampled(a[1]),
                    root_uris(a[2])
                )
            })
        }
        MULTI_ROUND => multi_round(round),
        CAPABILITIES => Ok(capabilities(round)),
        PROMPT => {
            let question = elicit(
                "user_context",
                "What context should the prompt use?",
                "context",
                "string",
            );
            gather(round, &[question], None).map(|r| r.map(|a| elicited(a[0], "context")))
        }
        _ => return None,
    };
    Some(next.map(|next| match next {
        Ok(text) => Step::Done(text),
        Err(asking) => asking,
    }))
}

/// A fixture that issues a state with its questions and finishes only when
/// the answers come back together with that (verified) state.
fn with_issued_state(
    round: &Round<'_>,
    issuer: &str,
    questions: &[Question],
    finish: impl FnOnce(&[&Value]) -> String,
) -> Next {
    let fresh = || new_state(issuer, 1, Value::Null);
    Ok(
        match (gather(round, questions, fresh())?, state_of_round(round, 1)) {
            (Ok(answers), Some(_)) => Ok(finish(&answers)),
            (Ok(_), None) => Err(ask(questions, fresh())),
            (Err(asking), _) => Err(asking),
        },
    )
}

/// Round 1 asks a name (state 1); round 2 takes it and asks a colour
/// (state 2, carrying the name); round 3 finishes with both.
fn multi_round(round: &Round<'_>) -> Next {
    let step1 = [elicit(
        "step1",
        "Step 1: What is your name?",
        "name",
        "string",
    )];
    let step2 = [elicit(
        "step2",
        "Step 2: What is your favorite color?",
        "color",
        "string",
    )];
    if let Some(state) = state_of_round(round, 2) {
        let name = state.carried["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let again = new_state(MULTI_ROUND, 2, state.carried.clone());
        return gather(round, &step2, again)
            .map(|r| r.map(|a| format!("{name} likes {}", elicited(a[0], "color"))));
    }
    let fresh = new_state(MULTI_ROUND, 1, Value::Null);
    if state_of_round(round, 1).is_none() {
        require(round, &step1)?;
        return Ok(Err(ask(&step1, fresh)));
    }
    Ok(match gather(round, &step1, fresh)? {
        Ok(answers) => {
            let carried = json!({ "name": elicited(answers[0], "name") });
            Err(ask(&step2, new_state(MULTI_ROUND, 2, carried)))
        }
        Err(asking) => Err(asking),
    })
}

/// Asks what the declared capabilities allow; finishes once anything is
/// answered, or at once when nothing may be asked.
fn capabilities(round: &Round<'_>) -> Result<String, Step> {
    if !round.responses.is_empty() {
        let keys: Vec<&str> = round.responses.keys().map(String::as_str).collect();
        return Ok(format!("capabilities-ok: received {}", keys.join(",")));
    }
    let mut requests = Map::new();
    if round.capabilities.elicitation {
        let question = elicit("elicit_input", "Elicitation input", "value", "string");
        requests.insert(question.key.to_owned(), question.request);
    }
    if round.capabilities.sampling {
        let question = sample("sample_input", "Sample request", 50);
        requests.insert(question.key.to_owned(), question.request);
    }
    if requests.is_empty() {
        return Ok("No supported capabilities declared".to_owned());
    }
    Err(Step::Ask {
        requests,
        state: new_state(CAPABILITIES, 1, Value::Null),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: Capabilities = Capabilities {
        elicitation: true,
        sampling: true,
        roots: true,
    };

    fn run(issuer: &str, responses: Value, state: Option<&State>) -> Result<Step, McpError> {
        let responses: InputResponses = serde_json::from_value(responses).unwrap_or_default();
        let round = Round {
            responses: &responses,
            state,
            capabilities: ALL,
        };
        step(issuer, &round).unwrap_or_else(|| Err(McpError::internal_error("not a fixture", None)))
    }

    fn accepted(content: Value) -> Value {
        json!({ "action": "accept", "content": content })
    }

    fn asked(step: &Result<Step, McpError>) -> Option<(Vec<String>, Option<State>)> {
        match step {
            Ok(Step::Ask { requests, state }) => {
                Some((requests.keys().cloned().collect(), state.clone()))
            }
            _ => None,
        }
    }

    #[test]
    fn every_question_is_a_request_rmcp_accepts() {
        for name in TOOLS.iter().map(|(name, _)| *name).chain([PROMPT]) {
            if let Ok(Step::Ask { requests, .. }) = run(name, json!({}), None) {
                let typed: Result<rmcp::model::InputRequests, _> =
                    serde_json::from_value(Value::Object(requests));
                assert!(typed.is_ok(), "{name}: {typed:?}");
            }
        }
    }

    #[test]
    fn a_valid_answer_finishes_and_a_malformed_one_asks_again() {
        let done = run(
            ELICITATION,
            json!({ "user_name": accepted(json!({ "name": "Alice" })), "extra": 1 }),
            None,
        );
        assert_eq!(done.ok(), Some(Step::Done("Hello, Alice!".to_owned())));
        let again = run(ELICITATION, json!({ "user_name": 12345 }), None);
        assert_eq!(
            asked(&again).map(|(keys, _)| keys),
            Some(vec!["user_name".to_owned()])
        );
        let wrong_key = run(
            ELICITATION,
            json!({ "wrong_key": accepted(json!({})) }),
            None,
        );
        assert!(asked(&wrong_key).is_some());
    }

    #[test]
    fn multi_round_carries_the_first_answer_into_the_second_state() {
        let first = asked(&run(MULTI_ROUND, json!({}), None));
        let Some((keys, Some(state1))) = first else {
            panic!("round 1 must ask with a state")
        };
        assert_eq!(keys, ["step1"]);
        let second = run(
            MULTI_ROUND,
            json!({ "step1": accepted(json!({ "name": "Alice" })) }),
            Some(&state1),
        );
        let Some((keys, Some(state2))) = asked(&second) else {
            panic!("round 2 must ask with a state")
        };
        assert_eq!(
            (keys.as_slice(), state2.round),
            (["step2".to_owned()].as_slice(), 2)
        );
        let third = run(
            MULTI_ROUND,
            json!({ "step2": accepted(json!({ "color": "blue" })) }),
            Some(&state2),
        );
        assert_eq!(third.ok(), Some(Step::Done("Alice likes blue".to_owned())));
    }

    #[test]
    fn stateful_fixtures_finish_only_with_their_state() {
        let answer = json!({ "confirm": accepted(json!({ "ok": true })) });
        assert!(asked(&run(REQUEST_STATE, answer.clone(), None)).is_some());
        let state = State {
            issuer: REQUEST_STATE.to_owned(),
            round: 1,
            carried: Value::Null,
        };
        let done = run(REQUEST_STATE, answer, Some(&state));
        assert!(matches!(done, Ok(Step::Done(text)) if text.starts_with("state-ok")));
    }

    #[test]
    fn questions_need_their_capability() {
        let responses = InputResponses::new();
        let round = Round {
            responses: &responses,
            state: None,
            capabilities: Capabilities {
                sampling: true,
                ..Capabilities::default()
            },
        };
        let refused = step(ELICITATION, &round)
            .and_then(Result::err)
            .map(|e| e.code);
        assert_eq!(
            refused,
            Some(rmcp::model::ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY)
        );
        let Some(Ok(Step::Ask { requests, .. })) = step(CAPABILITIES, &round) else {
            panic!("must ask")
        };
        assert_eq!(requests.keys().collect::<Vec<_>>(), ["sample_input"]);
    }
}
