//! The one decision on how a routed request travels: [`plan`].
//!
//! A pure function of what the request is (its headers and envelope), who
//! sent it (a client session of the handshake era, or none), and what the
//! generation says of the backend its name routes to. No sockets, no clock,
//! no locks: every fact is read by the caller first, once, so one request
//! is decided against one view, and the rule is tested case by case below.
//! The executors (`gateway::raw` for [`Plan::Raw`], rmcp's typed handlers
//! for [`Plan::Typed`]) carry a plan out and decide nothing of their own.
//!
//! # The rule (docs/gateway.md, "The raw path", states the same)
//!
//! A request goes raw when every row holds; the first row that fails names
//! the [`Why`] of the typed path:
//!
//! | row | handshake era (on a session) | 2026-07-28 (no session) |
//! |---|---|---|
//! | who | a session that finished the handshake ([`Why::NoSession`]) | no `Mcp-Session-Id` |
//! | revision | `MCP-Protocol-Version` absent or a handshake-era one ([`Why::Revision`]) | `MCP-Protocol-Version` is 2026-07-28 ([`Why::Revision`]), and `_meta` names the same ([`Why::MetaRevision`]) |
//! | answers | accepts JSON and SSE ([`Why::Accept`]) | the same |
//! | client | declared no sampling, elicitation or roots, set no log level ([`Why::SessionCapabilities`]) | — (its capabilities and level travel in its own `_meta`) |
//! | message | one request of `tools/call`, `resources/read`, `prompts/get`, `completion/complete` that the envelope reads ([`Why::Unreadable`]) | the same |
//! | metadata | no `io.modelcontextprotocol/` entry, no `requestState` ([`Why::HopMeta`]) | `Mcp-Method` / `Mcp-Name` agree with the body ([`Why::StandardHeaders`]); a `requestState` that is not Vigil's own ([`Why::Bridged`]); not a `call_tool` retargeted to its tool ([`Why::Retargeted`]) |
//! | route | the name routes ([`Why::Unrouted`]) to a backend that is serving ([`Why::NotServing`]), over HTTP ([`Why::Stdio`]), not `forward_auth` ([`Why::ForwardsAuth`]) | the same |
//! | backend's era | a session carries the lane: not a backend that speaks only 2026-07-28 ([`Why::NoLane`]) | the backend answers 2026-07-28 without a session ([`Why::Bridge`]) |

use std::sync::Arc;

use super::envelope::{Request, Target};
use super::revision::Revision;
use crate::backend::Era;

/// What the request's HTTP layer says, read once.
#[derive(Clone, Copy, Debug)]
pub struct Http {
    /// `MCP-Protocol-Version`: absent, a revision this build knows, or
    /// text it does not ([`Header::Unknown`]).
    pub revision: Header,
    /// `Accept` names both `application/json` and `text/event-stream`.
    pub accepts_both: bool,
    /// `Mcp-Method` and `Mcp-Name` are present once each and agree with
    /// the body (the name decoded from base64 where it is wrapped).
    pub standard_headers_agree: bool,
}

/// An `MCP-Protocol-Version` header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Header {
    Absent,
    Known(Revision),
    Unknown,
}

/// Who sent the request.
#[derive(Clone, Copy, Debug)]
pub enum Client {
    /// A session of the handshake era that finished it.
    Session {
        /// It declared none of sampling, elicitation and roots and set no
        /// log level: nothing of its own can flow on a shared lane.
        plain: bool,
    },
    /// An `Mcp-Session-Id` that names no session that finished the
    /// handshake (unknown, or before `notifications/initialized`).
    UnknownSession,
    /// No `Mcp-Session-Id`.
    Sessionless,
}

/// Where a name routes in the generation's catalog.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub backend: Arc<str>,
    /// The name the backend knows, where it differs (prefix naming).
    pub name: Option<String>,
}

/// What the generation says of a backend.
#[derive(Clone, Copy, Debug, Default)]
pub struct Serving {
    /// Its health lets it be advertised and called.
    pub advertisable: bool,
    /// Streamable HTTP (not stdio).
    pub http: bool,
    /// Each client reaches it with its own credentials (`forward_auth`).
    pub forwards_auth: bool,
    /// The era of its shared session, while one is open.
    pub era: Option<Era>,
    /// A 2026-07-28 client reaches it in that era without a session: its
    /// shared connection speaks 2026-07-28, or a 2026-07-28 connection to
    /// its current instance is open (the modern door of a backend that
    /// speaks both eras).
    pub stateless: bool,
}

/// What the plan reads of the generation a request is decided against.
pub trait Generation {
    /// Where `name` (a tool, prompt or resource URI) routes.
    fn route(&self, target: Target, name: &str) -> Option<Route>;
    /// What is known of `backend` now.
    fn serving(&self, backend: &str) -> Option<Serving>;
}

/// How a request travels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// As bytes, to `route`'s backend.
    Raw { route: Route, via: Via },
    /// Through rmcp's typed handlers, for the reason given.
    Typed(Why),
}

/// What carries a raw request to its backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// The backend's lane: one backend session shared by the plain clients
    /// of a caller (handshake era).
    Lane,
    /// A POST of its own, no session (2026-07-28).
    Stateless,
}

/// Why a request takes the typed path: the first row of the rule it fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// Its `Mcp-Session-Id` names no session that finished the handshake,
    /// or a handshake-era request came without one.
    NoSession,
    /// The revision it names is unknown, or not the one its kind of client
    /// speaks (a session speaks a handshake-era one).
    Revision,
    /// Its `_meta` names no revision, or another one than its header.
    MetaRevision,
    /// It does not accept both answer formats.
    Accept,
    /// Its session declared sampling, elicitation or roots, or set a log
    /// level: what flows for it must reach it alone.
    SessionCapabilities,
    /// The envelope does not read it (another method, a batch, a member it
    /// does not know): the typed parser answers it.
    Unreadable,
    /// A handshake-era request carrying 2026-07-28 metadata or a retry's
    /// `requestState`: its revision has neither.
    HopMeta,
    /// `Mcp-Method` or `Mcp-Name` disagree with the body: rmcp answers it.
    StandardHeaders,
    /// The retry of a call Vigil bridged across the eras (its
    /// `requestState` is Vigil's own): the parked call is on the typed path.
    Bridged,
    /// A `call_tool` of tool search, turned into the call of the tool it
    /// names, to a 2026-07-28 backend: the client derived its `Mcp-Param-*`
    /// headers from `call_tool`'s schema, not the tool's, and rmcp's client
    /// on the typed path derives the tool's.
    Retargeted,
    /// The name routes nowhere in the shared catalog (a session's own
    /// listing, or the unknown-name error, is the typed path's).
    Unrouted,
    /// Its backend is not serving: the typed path says why.
    NotServing,
    /// Its backend is a stdio process.
    Stdio,
    /// Its backend is reached with each client's own credentials.
    ForwardsAuth,
    /// Its backend speaks only 2026-07-28: no session carries a lane.
    NoLane,
    /// Its backend is not known to answer 2026-07-28 without a session
    /// (handshake era only, or its modern door not yet opened): Vigil
    /// bridges the eras, or opens the door, on the typed path.
    Bridge,
}

/// Decides how `request` (`None`: the envelope could not read it) travels.
pub fn plan(
    http: &Http,
    client: Client,
    request: Option<&Request<'_>>,
    generation: &impl Generation,
) -> Plan {
    match decide(http, client, request, generation) {
        Ok(raw) => raw,
        Err(why) => Plan::Typed(why),
    }
}

fn decide(
    http: &Http,
    client: Client,
    request: Option<&Request<'_>>,
    generation: &impl Generation,
) -> Result<Plan, Why> {
    let via = match (client, http.revision) {
        (Client::UnknownSession, _) => return Err(Why::NoSession),
        (Client::Session { plain }, Header::Absent) => session(plain)?,
        (Client::Session { plain }, Header::Known(r)) if r.era() == Era::Handshake => {
            session(plain)?
        }
        (Client::Session { .. }, _) => return Err(Why::Revision),
        (Client::Sessionless, Header::Known(r)) if r.era() == Era::Modern => Via::Stateless,
        (Client::Sessionless, Header::Absent) => return Err(Why::NoSession),
        (Client::Sessionless, _) => return Err(Why::Revision),
    };
    if !http.accepts_both {
        return Err(Why::Accept);
    }
    let r = request.ok_or(Why::Unreadable)?;
    match via {
        Via::Lane => {
            if r.meta.hop_keys || r.request_state.is_some() || r.input_responses {
                return Err(Why::HopMeta);
            }
        }
        Via::Stateless => {
            let named = r.meta.protocol_version.as_deref().and_then(Revision::parse);
            if named.is_none() || named.map(Header::Known) != Some(http.revision) {
                return Err(Why::MetaRevision);
            }
            if !http.standard_headers_agree {
                return Err(Why::StandardHeaders);
            }
            if r.resumes_bridged_call() {
                return Err(Why::Bridged);
            }
            if r.retargeted {
                return Err(Why::Retargeted);
            }
        }
    }
    let route = generation.route(r.target, &r.name).ok_or(Why::Unrouted)?;
    let s = generation.serving(&route.backend).ok_or(Why::Unrouted)?;
    if !s.advertisable {
        return Err(Why::NotServing);
    }
    if !s.http {
        return Err(Why::Stdio);
    }
    if s.forwards_auth {
        return Err(Why::ForwardsAuth);
    }
    match via {
        Via::Lane if s.era == Some(Era::Modern) => return Err(Why::NoLane),
        Via::Stateless if !s.stateless => return Err(Why::Bridge),
        _ => {}
    }
    Ok(Plan::Raw { route, via })
}

/// A session's requests go on a lane when nothing of its own can flow.
fn session(plain: bool) -> Result<Via, Why> {
    if plain {
        Ok(Via::Lane)
    } else {
        Err(Why::SessionCapabilities)
    }
}

#[cfg(test)]
mod tests;
