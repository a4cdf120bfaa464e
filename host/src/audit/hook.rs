//! The hook the gateway's call paths use: [`CallAudit::begin`] when a
//! `tools/call`, `resources/read` or `prompts/get` arrives, then exactly one
//! of [`PendingCall::finish`] (it was routed: the outcome is how the call
//! path says it ended), [`PendingCall::unrouted`] (no route: recorded only
//! when the name belongs to a backend that is not serving) or
//! [`PendingCall::refused`] (an access check said no: `denied`,
//! `rate_limited`).
//!
//! When the audit is off, `begin` returns an empty [`PendingCall`] and
//! everything after costs nothing. When it is on, the call path pays a few
//! small copies (name, principal, session id, and the arguments only with
//! `[audit] arguments = true`) and a `try_send`; tagging the session and
//! masking the arguments happen in `finish` and in the writer.

use std::time::SystemTime;

use rmcp::model::{Extensions, JsonObject};
use tokio::time::Instant;

use super::{CallAudit, CallRecord, Method, Outcome, Searched};
use crate::auth::Principal;

/// A call received and not yet recorded; see the module doc. Dropping it
/// without one of its methods records nothing: that is how a name nobody
/// serves goes unrecorded. (A call the client cancels still ends through
/// `finish`, with the backend's error; only a handler torn down before the
/// call returned, as when the whole session is dropped, leaves no record.)
#[must_use = "a pending call is recorded by finish, unrouted or refused"]
pub struct PendingCall(Option<Box<Started>>);

struct Started {
    audit: CallAudit,
    at: SystemTime,
    t0: Instant,
    principal: Principal,
    /// The session's tag ([`crate::redact::session_tag`]), if any.
    session: Option<String>,
    method: Method,
    name: String,
    arguments: Option<serde_json::Value>,
    search: Option<Searched>,
}

/// The client session of a call, as a call path has it at hand.
#[derive(Debug, Clone, Copy)]
pub enum CallSession<'a> {
    /// Its `Mcp-Session-Id`: tagged when the call is recorded.
    Id(&'a str),
    /// Its tag already ([`crate::redact::session_tag`] of its id), from
    /// a call path that keeps the tag per session rather than hash the id
    /// on every call.
    Tagged(&'a str),
}

impl CallAudit {
    /// A call of `method` for `name` (the client-visible tool or prompt
    /// name, or the resource URI) with `arguments`, as the request's
    /// `extensions` carry it: the caller is the [`Principal`] the `/mcp`
    /// authentication put in the HTTP request's extensions, or
    /// [`Principal::local`] without one (stdio); the session is the
    /// request's `Mcp-Session-Id`.
    pub fn begin(
        &self,
        method: Method,
        name: &str,
        arguments: Option<&JsonObject>,
        extensions: &Extensions,
    ) -> PendingCall {
        if !self.is_on() {
            return PendingCall(None);
        }
        let session = extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.headers.get("mcp-session-id"))
            .and_then(|v| v.to_str().ok());
        self.begin_for(
            method,
            name,
            || arguments.map(|a| serde_json::Value::Object(a.clone())),
            &Principal::of(extensions),
            session.map(CallSession::Id),
        )
    }

    /// [`CallAudit::begin`] for a call path that has the caller and the
    /// session at hand (the raw path); `arguments` is asked for only with
    /// `[audit] arguments = true`.
    pub fn begin_for(
        &self,
        method: Method,
        name: &str,
        arguments: impl FnOnce() -> Option<serde_json::Value>,
        principal: &Principal,
        session: Option<CallSession<'_>>,
    ) -> PendingCall {
        if !self.is_on() {
            return PendingCall(None);
        }
        let arguments = if self.arguments() { arguments() } else { None };
        PendingCall(Some(Box::new(Started {
            audit: self.clone(),
            at: SystemTime::now(),
            t0: Instant::now(),
            principal: principal.clone(),
            session: session.map(|s| match s {
                CallSession::Id(id) => crate::redact::session_tag(id),
                CallSession::Tagged(tag) => tag.to_owned(),
            }),
            method,
            name: name.to_owned(),
            arguments,
            search: None,
        })))
    }
}

impl PendingCall {
    /// The call was routed to `backend` and ended as `outcome` (read off
    /// how the call path says it ended: `dataplane::outcome::Ended`).
    pub fn finish(self, backend: &str, outcome: Outcome) {
        if let Some(s) = self.0 {
            s.record(backend, outcome);
        }
    }

    /// The call was a `find_tool`, which asked and found `searched`
    /// (recorded with the outcome `finish` is then given).
    pub fn searched(mut self, searched: Searched) -> Self {
        if let Some(s) = &mut self.0 {
            s.search = Some(searched);
        }
        self
    }

    /// A call no audit record is kept of (`completion/complete`).
    pub fn untracked() -> Self {
        PendingCall(None)
    }

    /// The name has no route: recorded as `unavailable` when it belongs to
    /// `backend`, which is not serving; else not at all (an unknown name
    /// reached no backend).
    pub fn unrouted(self, backend: Option<&str>) {
        if let Some(s) = self.0
            && let Some(backend) = backend
        {
            s.record(backend, Outcome::Unavailable);
        }
    }

    /// An access check refused the call: `outcome` is
    /// [`Outcome::Denied`] or [`Outcome::RateLimited`]; `backend` is the
    /// one the name routes to, or empty when it was refused before routing.
    pub fn refused(self, backend: &str, outcome: Outcome) {
        if let Some(s) = self.0 {
            s.record(backend, outcome);
        }
    }
}

impl Started {
    fn record(self, backend: &str, outcome: Outcome) {
        let duration_us = u64::try_from(self.t0.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.audit.record(CallRecord {
            at: self.at,
            principal: self.principal.id().to_owned(),
            issuer: self.principal.issuer().map(str::to_owned),
            session: self.session,
            backend: backend.to_owned(),
            method: self.method,
            name: self.name,
            outcome,
            duration_us,
            arguments: self.arguments,
            search: self.search,
        });
    }
}
