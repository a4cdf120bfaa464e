//! Multi round-trip requests (MRTR) between a handshake-era backend and a
//! 2026-07-28 client.
//!
//! Such a backend asks its client things (`elicitation/create`,
//! `sampling/createMessage`, `roots/list`) as requests on its session while
//! a call runs; a 2026-07-28 client cannot be sent requests. Vigil keeps the
//! backend's call running on a task of its own ([`crate::backend::ask`]),
//! answers the client with an input-required result holding the question
//! and a `requestState`, and, when the client calls again with its answer
//! and that state, gives the answer to the waiting backend request and
//! waits for what the backend does next (another question, or the result).
//!
//! A 2025-11-25 backend may also end a call with `-32042` (URL elicitation
//! required: the user is to visit URLs, then the call is made again), an
//! error 2026-07-28 does not have. A 2026-07-28 client gets it as an
//! input-required result holding the URL elicitations, and a sealed state
//! that names no parked call: its retry is sent to the backend as the call
//! made again.
//!
//! `requestState` passes through the client, so it is sealed: an HMAC
//! (SHA-256, a key Vigil draws at start) over the parked call's number, its
//! expiry, the replica that parked it, and who may resume it for what
//! (principal, method, name). A state that fails the MAC (forged or
//! altered), has expired, or whose call was already resumed (replayed) is
//! refused with an error saying which; nothing reaches the backend.
//!
//! Parked calls are kept in a [`ParkedCalls`] table (`cluster::parked`),
//! this process's own: they hold live channels to the backend call. The
//! table's replica id is sealed in each state; a genuine state that names
//! another replica (one sharing the key) is routed there when the replicas
//! form a cluster ([`routed`]), and refused with a message naming that
//! replica and saying to call again otherwise, or when that replica does
//! not answer ([`Refused::Elsewhere`]). A state that names no parked call
//! (a `-32042`'s) is the call made again, on any replica.
//!
//! A state reads `vigil1.` + hex call number + hex expiry (ms) + `.` +
//! replica id + `.` + hex MAC.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use rmcp::ErrorData as McpError;
use rmcp::model::*;
use sha2::Sha256;
use tokio::sync::{mpsc, oneshot};

use crate::auth::CallerKey;
use crate::backend::ask::Event;
use crate::cluster::parked::{LocalParked, ParkedCalls};
use crate::cluster::replica::ReplicaId;

/// Marks a `requestState` as Vigil's own (a 2026-07-28 backend's passes
/// through untouched).
const PREFIX: &str = "vigil1.";

/// The key of the one question of each round in `inputRequests`.
pub const INPUT_KEY: &str = "vigil";

/// The error a 2025-11-25 server ends a call with when the user must visit
/// URLs first (the elicitations are in its `data`).
pub const URL_ELICITATION_REQUIRED: i32 = -32042;

/// The parked-call number of a state that names none: its retry is the
/// call made again (`-32042`, see the module doc). Parked calls count from 1.
const AGAIN: u64 = 0;

/// Calls waiting for a client's answer at once; beyond it a new question
/// is refused (the backend gets an error) rather than memory growing.
const MAX_PARKED: usize = 10_000;

/// What a sealed state is bound to: the retry must come from the same
/// principal, for the same method and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub principal: CallerKey,
    pub method: &'static str,
    pub name: String,
}

impl Binding {
    fn mac_input(&self) -> String {
        format!(
            "{}\n{}\n{}",
            self.principal.unambiguous(),
            self.method,
            self.name
        )
    }
}

/// What a backend call's question waits on.
pub(crate) struct Parked {
    events: mpsc::Receiver<Event>,
    reply: oneshot::Sender<Result<ClientResult, McpError>>,
    kind: Asked,
}

/// The kind of question, which decides how the client's answer is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Asked {
    Elicitation,
    Sampling,
    Roots,
}

/// The parked calls and the key that seals their states; one per gateway.
pub struct Mrtr {
    key: [u8; 32],
    parked: Box<dyn ParkedCalls<Parked>>,
}

/// What a call that names no parked call, or one parked elsewhere, is
/// told: there is nothing here to resume.
const NO_CALL: &str = "requestState was already used (each is answered once) or its call ended: call again without it";

/// Why a `requestState` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error(
        "requestState was not issued by this gateway for this caller and request, or was altered: call again without it"
    )]
    Forged,
    #[error("requestState expired: its call gave up waiting for the answer; call again without it")]
    Expired,
    #[error("{NO_CALL}")]
    Replayed,
    /// Genuine, but its call is parked on another replica that could not
    /// be asked to resume it (it died, or no cluster routes retries):
    /// this one has nothing to resume; the client is told what to do.
    #[error(
        "requestState names a call waiting on replica `{replica}`, not this one (the balancer sent the retry elsewhere, or that replica is gone): call again without it"
    )]
    Elsewhere { replica: ReplicaId },
    #[error("inputResponses has no usable answer under \"{INPUT_KEY}\": {0}")]
    BadAnswer(String),
}

impl From<Refused> for McpError {
    fn from(r: Refused) -> McpError {
        McpError::invalid_params(format!("vigil: {r}"), None)
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Mrtr {
    /// A store with a fresh random key, for this replica, its calls in this
    /// process's memory (states do not survive a restart; neither do the
    /// calls they stand for).
    ///
    /// With a cluster key (`[cluster] key_env`), the key is derived from it
    /// instead, so a state any replica sealed is genuine on every other
    /// (states live minutes: a key rotation refuses the few in flight, and
    /// their clients call again).
    pub fn new(cluster: &crate::config::ClusterConfig) -> Result<Mrtr, getrandom::Error> {
        let key = match &cluster.key {
            Some(k) => {
                let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&k.key)
                    .expect("HMAC takes a key of any length");
                mac.update(b"vigil mrtr requestState key v1");
                mac.finalize().into_bytes().into()
            }
            None => {
                let mut key = [0u8; 32];
                getrandom::fill(&mut key)?;
                key
            }
        };
        let table = LocalParked::new(cluster.replica.clone(), MAX_PARKED);
        Ok(Mrtr::with_table(key, Box::new(table)))
    }

    /// A store sealing with `key`, its calls in `parked`.
    pub(crate) fn with_table(key: [u8; 32], parked: Box<dyn ParkedCalls<Parked>>) -> Mrtr {
        Mrtr { key, parked }
    }

    /// A store sealing with `key`, for replica `test`.
    #[cfg(test)]
    fn with_key(key: [u8; 32]) -> Mrtr {
        let replica = ReplicaId::new("test").expect("a replica id");
        Mrtr::with_table(key, Box::new(LocalParked::new(replica, MAX_PARKED)))
    }

    fn mac(&self, payload: &str, binding: &Binding) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.key)
            .expect("HMAC takes a key of any length");
        mac.update(payload.as_bytes());
        mac.update(b"\n");
        mac.update(binding.mac_input().as_bytes());
        mac
    }

    fn seal(&self, id: u64, expires_ms: u64, binding: &Binding) -> String {
        self.seal_for(self.parked.replica(), id, expires_ms, binding)
    }

    /// A state of call `id` parked on `replica`.
    fn seal_for(&self, replica: &ReplicaId, id: u64, expires_ms: u64, binding: &Binding) -> String {
        let payload = format!("{id:016x}{expires_ms:016x}.{replica}");
        let tag = hex::encode(self.mac(&payload, binding).finalize().into_bytes());
        format!("{PREFIX}{payload}.{tag}")
    }

    /// The parked call a state names and the replica that parked it, if
    /// the state is genuine, current and bound to `binding`.
    fn open(&self, state: &str, binding: &Binding) -> Result<(u64, ReplicaId), Refused> {
        let rest = state.strip_prefix(PREFIX).ok_or(Refused::Forged)?;
        let (payload, tag) = rest.rsplit_once('.').ok_or(Refused::Forged)?;
        let (numbers, replica) = payload.split_once('.').ok_or(Refused::Forged)?;
        if numbers.len() != 32 || !numbers.is_ascii() {
            return Err(Refused::Forged);
        }
        let tag = hex::decode(tag).map_err(|_| Refused::Forged)?;
        // Constant-time comparison (hmac's `verify_slice`). The binding is
        // in the MAC: a genuine state brought by another caller, or for
        // another request, fails it like a forged one.
        if self.mac(payload, binding).verify_slice(&tag).is_err() {
            return Err(Refused::Forged);
        }
        let id = u64::from_str_radix(&numbers[..16], 16).map_err(|_| Refused::Forged)?;
        let expires = u64::from_str_radix(&numbers[16..], 16).map_err(|_| Refused::Forged)?;
        let replica = ReplicaId::new(replica).map_err(|_| Refused::Forged)?;
        if now_ms() > expires {
            return Err(Refused::Expired);
        }
        Ok((id, replica))
    }

    /// Waits for what a backend call reports next: its answer, or a
    /// question, which is parked and becomes the input-required result.
    /// `ttl`: how long the question waits for the client's retry.
    pub async fn next(
        &self,
        mut events: mpsc::Receiver<Event>,
        binding: &Binding,
        ttl: Duration,
    ) -> Next {
        loop {
            match events.recv().await {
                None => {
                    return Next::Failed(McpError::internal_error(
                        "vigil: the backend call ended without an answer",
                        None,
                    ));
                }
                Some(Event::Done {
                    result: Err(crate::backend::BackendError::Mcp(e)),
                    recovered,
                }) => {
                    let Some(requests) = url_elicitations(&e) else {
                        let result = Err(crate::backend::BackendError::Mcp(e));
                        return Next::Done { result, recovered };
                    };
                    let expires_ms = now_ms() + ttl.as_millis() as u64;
                    let state = self.seal(AGAIN, expires_ms, binding);
                    return Next::InputRequired(Question::decoded(InputRequiredResult::new(
                        Some(requests),
                        Some(state),
                    )));
                }
                Some(Event::Done { result, recovered }) => return Next::Done { result, recovered },
                Some(Event::Ask { request, reply }) => {
                    // The backend's params as it wrote them come as a
                    // custom request (`backend::client`); the typed one is
                    // still read for what kind of question it is.
                    let (request, written) = match request {
                        ServerRequest::CustomRequest(c) => {
                            let typed = serde_json::from_value::<ServerRequest>(
                                serde_json::json!({"method": c.method, "params": c.params}),
                            );
                            match typed {
                                Ok(typed) => (typed, c.params),
                                Err(_) => (ServerRequest::CustomRequest(c), None),
                            }
                        }
                        other => (other, None),
                    };
                    let (kind, input) = match request {
                        ServerRequest::ElicitRequest(r) => {
                            (Asked::Elicitation, InputRequest::Elicitation(r))
                        }
                        ServerRequest::CreateMessageRequest(r) => {
                            (Asked::Sampling, InputRequest::CreateMessage(r))
                        }
                        ServerRequest::ListRootsRequest(r) => {
                            (Asked::Roots, InputRequest::ListRoots(r))
                        }
                        ServerRequest::PingRequest(_) => {
                            let _ = reply.send(Ok(ClientResult::EmptyResult(EmptyResult {})));
                            continue;
                        }
                        _ => {
                            let _ = reply.send(Err(McpError::invalid_request(
                                "vigil cannot relay this request to a 2026-07-28 client",
                                None,
                            )));
                            continue;
                        }
                    };
                    let expires_ms = now_ms() + ttl.as_millis() as u64;
                    let call = Parked {
                        events,
                        reply,
                        kind,
                    };
                    let id = match self.parked.park(call, expires_ms) {
                        Ok(id) => id,
                        Err(full) => {
                            tracing::warn!(
                                max = full.max,
                                "an MRTR question refused: too many calls wait for their clients' answers"
                            );
                            let Parked {
                                events: back,
                                reply,
                                ..
                            } = full.call;
                            let _ = reply.send(Err(McpError::internal_error(
                                "vigil: too many calls wait for their clients' answers",
                                None,
                            )));
                            events = back;
                            continue;
                        }
                    };
                    let state = self.seal(id, expires_ms, binding);
                    let mut requests = InputRequests::new();
                    requests.insert(INPUT_KEY.to_owned(), input);
                    return Next::InputRequired(Question {
                        result: InputRequiredResult::new(Some(requests), Some(state)),
                        written,
                    });
                }
            }
        }
    }

    /// Gives the client's answer (from its retry) to the parked call that
    /// `state` names; the call's events, to wait on with [`Mrtr::next`].
    /// A state that names no parked call says to make the call again.
    pub fn resume(
        &self,
        state: &str,
        responses: Option<&InputResponses>,
        binding: &Binding,
    ) -> Result<Resumed, Refused> {
        let (id, replica) = self.open(state, binding)?;
        if id == AGAIN {
            return Ok(Resumed::Again);
        }
        if replica != *self.parked.replica() {
            return Err(Refused::Elsewhere { replica });
        }
        // The answer is read against the parked call's kind; one that
        // cannot be read leaves the call parked for a better retry.
        let mut read = None;
        let taken = self.parked.take(id, &mut |p| {
            let answer = responses
                .and_then(|r| r.get(INPUT_KEY))
                .ok_or_else(|| "missing".to_owned())
                .and_then(|a| read_answer(p.kind, a.clone()));
            let ready = answer.is_ok();
            read = Some(answer);
            ready
        });
        match (taken, read) {
            (Some(p), Some(Ok(answer))) => {
                let _ = p.reply.send(Ok(answer));
                Ok(Resumed::Parked(p.events))
            }
            (None, Some(Err(why))) => Err(Refused::BadAnswer(why)),
            _ => Err(Refused::Replayed),
        }
    }
}

/// What a retry's genuine state leads to.
pub enum Resumed {
    /// The parked call goes on: its events.
    Parked(mpsc::Receiver<Event>),
    /// Make the call again (after a `-32042`).
    Again,
}

/// The URL elicitations of a `-32042` error, as the input requests of an
/// input-required result (keys `vigil-url-0`, ...); `None` for any other
/// error, or one whose `data` has none that parse.
fn url_elicitations(e: &McpError) -> Option<InputRequests> {
    if e.code.0 != URL_ELICITATION_REQUIRED {
        return None;
    }
    let listed = e.data.as_ref()?.get("elicitations")?.as_array()?;
    let mut requests = InputRequests::new();
    for (i, v) in listed.iter().enumerate() {
        let params: ElicitRequestParams = serde_json::from_value(v.clone()).ok()?;
        let request = InputRequest::Elicitation(ElicitRequest::new(params));
        requests.insert(format!("{INPUT_KEY}-url-{i}"), request);
    }
    (!requests.is_empty()).then_some(requests)
}

/// What [`Mrtr::next`] found. One per round of a call, moved once: its
/// size does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Next {
    Done {
        result: Result<ServerResult, crate::backend::BackendError>,
        recovered: bool,
    },
    InputRequired(Question),
    Failed(McpError),
}

/// A question for the client: the input-required result, and the params
/// of the backend's request as it wrote them (see `backend::wire`), which
/// leave in place of the decoded ones.
pub struct Question {
    pub result: InputRequiredResult,
    pub written: Option<serde_json::Value>,
}

impl Question {
    fn decoded(result: InputRequiredResult) -> Self {
        Self {
            result,
            written: None,
        }
    }

    /// The result as JSON, with the backend's own params in the question.
    pub fn into_json(self) -> serde_json::Value {
        let mut v = serde_json::to_value(ServerResult::InputRequiredResult(self.result))
            .unwrap_or_default();
        if let Some(written) = self.written
            && let Some(params) = v.pointer_mut(&format!("/inputRequests/{INPUT_KEY}/params"))
        {
            *params = written;
        }
        v
    }
}

/// What an MRTR round needs of a request that can get an input-required
/// result (`tools/call`, `prompts/get`, `resources/read`).
pub struct MrtrTarget {
    pub method: &'static str,
    /// The tool or prompt name, or the resource URI, as sent to the backend.
    pub name: String,
    pub state: Option<String>,
    pub responses: Option<InputResponses>,
}

/// The MRTR view of `request`, if it is a kind that can be relayed so.
pub fn mrtr_target(request: &ClientRequest) -> Option<MrtrTarget> {
    let (method, name, state, responses) = match request {
        ClientRequest::CallToolRequest(r) => (
            "tools/call",
            r.params.name.to_string(),
            &r.params.request_state,
            &r.params.input_responses,
        ),
        ClientRequest::GetPromptRequest(r) => (
            "prompts/get",
            r.params.name.clone(),
            &r.params.request_state,
            &r.params.input_responses,
        ),
        ClientRequest::ReadResourceRequest(r) => (
            "resources/read",
            r.params.uri.clone(),
            &r.params.request_state,
            &r.params.input_responses,
        ),
        _ => return None,
    };
    Some(MrtrTarget {
        method,
        name,
        state: state.clone(),
        responses: responses.clone(),
    })
}

/// `request` made into its retry: the client's answers and the state the
/// backend issued, byte for byte (`None`, `None`: the call made afresh).
pub fn retry_with(
    request: &mut ClientRequest,
    answers: Option<InputResponses>,
    state: Option<String>,
) {
    let (responses, request_state) = match request {
        ClientRequest::CallToolRequest(r) => {
            (&mut r.params.input_responses, &mut r.params.request_state)
        }
        ClientRequest::GetPromptRequest(r) => {
            (&mut r.params.input_responses, &mut r.params.request_state)
        }
        ClientRequest::ReadResourceRequest(r) => {
            (&mut r.params.input_responses, &mut r.params.request_state)
        }
        _ => return,
    };
    *responses = answers;
    *request_state = state;
}

/// A round's outcome for the request path: the backend's answer (and
/// whether the call recovered a forgotten session), or a question (the
/// input-required result, as the client gets it).
pub type Round = Result<
    Result<(Result<ServerResult, crate::backend::BackendError>, bool), serde_json::Value>,
    McpError,
>;

impl Next {
    pub fn into_round(self) -> Round {
        match self {
            Next::Done { result, recovered } => Ok(Ok((result, recovered))),
            Next::InputRequired(q) => Ok(Err(q.into_json())),
            Next::Failed(e) => Err(e),
        }
    }
}

fn read_answer(kind: Asked, v: serde_json::Value) -> Result<ClientResult, String> {
    let e = |e: serde_json::Error| e.to_string();
    Ok(match kind {
        Asked::Elicitation => ClientResult::ElicitResult(serde_json::from_value(v).map_err(e)?),
        Asked::Sampling => {
            ClientResult::CreateMessageResult(Box::new(serde_json::from_value(v).map_err(e)?))
        }
        Asked::Roots => ClientResult::ListRootsResult(serde_json::from_value(v).map_err(e)?),
    })
}

pub mod routed;

#[cfg(test)]
mod tests;
