//! Which client request each backend request was made for.
//!
//! A backend's progress notifications and its server→client requests
//! (sampling, elicitation, roots) must reach the client whose call caused
//! them. Every request forwarded to a backend is registered here, keyed by
//! the backend-side request id and progress token, for as long as it runs.
//!
//! Association rule, in order:
//! 1. progress notifications: by the progress token Vigil put on the
//!    backend request (exact, on every transport);
//! 2. server→client requests that arrive on the HTTP response stream of a
//!    backend request: that request's client (exact; per-session HTTP
//!    connections make it unambiguous anyway);
//! 3. otherwise (stdio: one process, one session, no stream association):
//!    the client request that most recently started on this connection and
//!    is still running. With several clients calling the same stdio backend
//!    at once this is a best guess; use an HTTP backend when that matters.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::model::{LoggingLevel, ProgressToken, RequestId};
use rmcp::service::{Peer, RoleServer};

/// Called when the backend closed the request's stream before answering,
/// with the `retry` the backend asked its client to wait before resuming.
pub type StreamClosed = Arc<dyn Fn(Option<std::time::Duration>) + Send + Sync>;

/// The client side of a forwarded request.
#[derive(Clone)]
pub struct FrontCall {
    /// The client session that made the request.
    pub peer: Peer<RoleServer>,
    /// Its JSON-RPC id on the client side.
    pub request_id: RequestId,
    /// The progress token the client asked for, if any.
    pub progress_token: Option<ProgressToken>,
    /// What to do when the backend closes this request's HTTP stream early
    /// (SEP-1699 polling); `None` when the client cannot be shown the same.
    pub on_stream_closed: Option<StreamClosed>,
    /// The client session's own queue of relayed notifications: its
    /// progress goes there, never through anyone else's.
    pub outbox: super::Outbox,
    /// Set when the client cannot be sent requests (a 2026-07-28 client):
    /// the backend's server→client requests go here instead (MRTR).
    pub ask: Option<super::ask::Asker>,
    /// The log messages the client wants for this call, if any.
    pub log: Option<CallLog>,
    /// Who made the call.
    pub caller: crate::auth::Principal,
    /// The capabilities a 2026-07-28 client declared on this request (its
    /// `_meta`), as sent; a handshake-era client's are its session's.
    pub capabilities: Option<serde_json::Value>,
}

/// The `_meta` key of a 2026-07-28 request's client capabilities.
pub const CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";

impl FrontCall {
    /// What the client can be asked, as a 2026-07-28 backend must be told
    /// on each request (a backend asks only what the client declared, and
    /// refuses with `-32021` what needs a capability it lacks).
    pub fn declared_capabilities(&self) -> Option<serde_json::Value> {
        self.capabilities.clone().or_else(|| {
            let info = self.peer.peer_info()?;
            serde_json::to_value(&info.capabilities).ok()
        })
    }

    /// The capability set of the calling client (what it may be asked).
    pub fn declared(&self) -> super::capset::CapSet {
        self.declared_capabilities()
            .map(|c| super::capset::CapSet::of_json(&c))
            .unwrap_or_default()
    }
}

/// Who gets a log message a backend sent (see [`Inflight::log_recipients`]).
pub enum LogRecipients {
    /// These calls (possibly none).
    Calls(Vec<FrontCall>),
    /// Calls of more than one caller may have caused it: nobody.
    Ambiguous,
}

/// A client's wish for log messages during one call.
///
/// A 2026-07-28 client names a level per request (`_meta`
/// `io.modelcontextprotocol/logLevel`); a session-mode client sets one for
/// its session (`logging/setLevel`). Toward a 2026-07-28 backend either
/// travels with the request (that revision has no `logging/setLevel`), and
/// the backend's messages go to the calls that asked; toward a handshake-era
/// backend the session level is applied with `logging/setLevel` and relayed
/// per session, so only a per-request wish is served per call there.
///
/// A log message names no request, so on a connection several callers
/// share it goes to the calls that want it only when every call it may have
/// come from is the same caller's (see [`Inflight::log_recipients`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallLog {
    /// The least severe level wanted.
    pub level: LoggingLevel,
    /// Named on the request itself (not a session setting).
    pub per_request: bool,
}

impl CallLog {
    /// Whether a call with this wish gets a message from a connection of
    /// the given era (see the type's doc for the rule).
    pub fn wants(&self, level: LoggingLevel, modern_backend: bool) -> bool {
        (modern_backend || self.per_request) && super::outbox::admits(self.level, level)
    }
}

#[derive(Default)]
pub struct Inflight {
    inner: Mutex<Inner>,
    /// Requests sent but not registered yet: a backend may answer with
    /// progress before its request's registration lands.
    unregistered: std::sync::atomic::AtomicUsize,
    /// Woken by every registration.
    registered: tokio::sync::Notify,
}

/// Marks a request as about to be sent until it is registered (dropped).
pub struct Sending<'a>(&'a Inflight);

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        self.0
            .unregistered
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// How long a progress notification waits for the registration of the
/// request it belongs to.
const REGISTRATION_GRACE: std::time::Duration = std::time::Duration::from_millis(200);

#[derive(Default)]
struct Inner {
    seq: u64,
    by_request: HashMap<RequestId, (u64, FrontCall)>,
    by_token: HashMap<ProgressToken, RequestId>,
}

/// Unregisters its request when dropped.
pub struct Registration {
    table: Arc<Inflight>,
    request: RequestId,
    token: ProgressToken,
}

impl Inflight {
    pub fn register(
        self: &Arc<Self>,
        request: RequestId,
        token: ProgressToken,
        call: FrontCall,
    ) -> Registration {
        let mut inner = self.lock();
        inner.seq += 1;
        let seq = inner.seq;
        inner.by_request.insert(request.clone(), (seq, call));
        inner.by_token.insert(token.clone(), request.clone());
        drop(inner);
        self.registered.notify_waiters();
        Registration {
            table: self.clone(),
            request,
            token,
        }
    }

    /// Call before sending a request; keep the guard until it is
    /// registered.
    pub fn sending(&self) -> Sending<'_> {
        self.unregistered
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Sending(self)
    }

    /// The call of progress `token`, waiting briefly while requests are
    /// still being registered (never for a token no request can have).
    pub async fn by_token_soon(&self, token: &ProgressToken) -> Option<FrontCall> {
        let deadline = tokio::time::Instant::now() + REGISTRATION_GRACE;
        loop {
            let registered = self.registered.notified();
            tokio::pin!(registered);
            registered.as_mut().enable();
            if let Some(call) = self.by_token(token) {
                return Some(call);
            }
            if self.unregistered.load(std::sync::atomic::Ordering::Acquire) == 0 {
                return None;
            }
            if tokio::time::timeout_at(deadline, registered).await.is_err() {
                return None;
            }
        }
    }

    pub fn by_request(&self, id: &RequestId) -> Option<FrontCall> {
        self.lock().by_request.get(id).map(|(_, c)| c.clone())
    }

    pub fn by_token(&self, token: &ProgressToken) -> Option<FrontCall> {
        let inner = self.lock();
        let id = inner.by_token.get(token)?;
        inner.by_request.get(id).map(|(_, c)| c.clone())
    }

    /// The calls running now that get a log message of `level` from this
    /// connection (see [`CallLog`]).
    ///
    /// A message names no request. It may have come from any call running
    /// on the connection (in the handshake era a backend logs for whatever
    /// it does) or, from a 2026-07-28 backend, from a call that asked for
    /// logs. When those calls are not all one caller's the message goes to
    /// nobody ([`LogRecipients::Ambiguous`]): one caller's logs never reach
    /// another.
    pub fn log_recipients(&self, level: LoggingLevel, modern_backend: bool) -> LogRecipients {
        let inner = self.lock();
        let calls = || inner.by_request.values().map(|(_, c)| c);
        let wanting: Vec<FrontCall> = calls()
            .filter(|c| {
                c.log
                    .as_ref()
                    .is_some_and(|l| l.wants(level, modern_backend))
            })
            .cloned()
            .collect();
        let mut sources = calls()
            .filter(|c| !modern_backend || c.log.is_some())
            .map(|c| &c.caller);
        let one_caller = match sources.next() {
            Some(first) => sources.all(|c| first.same_caller(c)),
            None => true,
        };
        if wanting.is_empty() || one_caller {
            LogRecipients::Calls(wanting)
        } else {
            LogRecipients::Ambiguous
        }
    }

    /// The most recently started request still running.
    pub fn latest(&self) -> Option<FrontCall> {
        self.lock()
            .by_request
            .values()
            .max_by_key(|(seq, _)| *seq)
            .map(|(_, c)| c.clone())
    }

    pub fn is_empty(&self) -> bool {
        self.lock().by_request.is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding this lock cannot leave the maps inconsistent
        // (each update is a single insert/remove), so poisoning is ignored.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut inner = self.table.lock();
        inner.by_request.remove(&self.request);
        inner.by_token.remove(&self.token);
    }
}
