//! The client-side half of SSE polling pass-through (SEP-1699).
//!
//! When a backend closes the HTTP stream of a request before answering
//! (see `backend::stream_watch`), Vigil closes the client's stream of the
//! same request and holds the answer until the client resumes with
//! `Last-Event-ID` — as the backend did to Vigil. rmcp can close one stream
//! of a session but does not tell a handler which stream carries its
//! request, so this session manager wraps rmcp's [`LocalSessionManager`] and
//! remembers, for each routed request, the stream it came on.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use futures::Stream;
use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, JsonRpcMessage, RequestId, ServerJsonRpcMessage,
};
use rmcp::transport::WorkerTransport;
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, LocalSessionWorker,
};
use rmcp::transport::streamable_http_server::{RestoreOutcome, SessionId, SessionManager};
use tokio::sync::watch;
use tokio_stream::wrappers::ReceiverStream;

// A session id is a bearer credential: logs name a session by its tag.
use crate::redact::session_tag;

/// How long a session may go without a request from its client before it
/// is closed: rmcp's default idle timeout, kept here because the raw path
/// (`super::raw`) serves requests rmcp never sees.
pub const IDLE: Duration = Duration::from_secs(300);

/// How long an answer waits for the client to resume a stream Vigil closed,
/// beyond the `retry` the client was told to wait.
const RESUME_WAIT: Duration = Duration::from_secs(10);

pub struct StreamSessions {
    inner: LocalSessionManager,
    /// `[limits] max_sessions`.
    max_sessions: usize,
    retry: Option<Duration>,
    /// The HTTP stream of each routed request still running.
    streams: Mutex<HashMap<(SessionId, RequestId), u64>>,
    /// Resume counter per session with a closed stream waiting.
    resumes: Mutex<HashMap<SessionId, watch::Sender<u64>>>,
    /// When each session's client last sent something (see [`IDLE`]).
    activity: Mutex<HashMap<SessionId, tokio::time::Instant>>,
    /// Sessions adopted here (`super::adopt`) whose client has not yet
    /// resumed its GET stream: the event ids it brings are another
    /// replica's.
    adopted: Mutex<std::collections::HashSet<SessionId>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Requests that are routed to backends and can be long-running.
fn routed_request(message: &ClientJsonRpcMessage) -> Option<RequestId> {
    match message {
        JsonRpcMessage::Request(r) => match &r.request {
            ClientRequest::CallToolRequest(_)
            | ClientRequest::ReadResourceRequest(_)
            | ClientRequest::GetPromptRequest(_) => Some(r.id.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// Why a session request could not be served.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error(transparent)]
    Local(#[from] LocalSessionManagerError),
    /// `max_sessions` sessions are open (see [`StreamSessions::is_full`]).
    #[error("{SESSIONS_FULL} (limits.max_sessions = {max})")]
    Full { max: usize },
}

/// The start of the error a client gets when no session can be opened;
/// `http_errors` recognises it.
pub const SESSIONS_FULL: &str = "Vigil is at its session limit";

impl StreamSessions {
    pub fn new(retry: Option<Duration>, max_sessions: usize) -> Self {
        let mut inner = LocalSessionManager::default();
        // Idle sessions are closed by `expire_idle`, which also counts the
        // raw path's requests.
        inner.session_config.keep_alive = None;
        Self {
            inner,
            max_sessions,
            retry,
            streams: Mutex::default(),
            resumes: Mutex::default(),
            activity: Mutex::default(),
            adopted: Mutex::default(),
        }
    }

    /// Notes a request of session `id`'s client.
    pub fn touch(&self, id: &str) {
        if let Some(at) = lock(&self.activity).get_mut(id) {
            *at = tokio::time::Instant::now();
        }
    }

    /// Closes sessions whose client sent nothing for [`IDLE`], until
    /// `shutdown`.
    pub async fn expire_idle(
        self: std::sync::Arc<Self>,
        shutdown: tokio_util::sync::CancellationToken,
    ) {
        let every = IDLE / 10;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            let now = tokio::time::Instant::now();
            let idle: Vec<SessionId> = lock(&self.activity)
                .iter()
                .filter(|(_, at)| now.duration_since(**at) >= IDLE)
                .map(|(id, _)| id.clone())
                .collect();
            for id in idle {
                tracing::debug!(session = %session_tag(&id), "closing a session idle for {IDLE:?}");
                if let Err(e) = self.close_session(&id).await {
                    tracing::debug!(session = %session_tag(&id), error = %e, "could not close an idle session");
                }
            }
        }
    }

    /// Whether rmcp has session `id` here.
    pub async fn has(&self, id: &str) -> bool {
        self.inner
            .sessions
            .read()
            .await
            .contains_key(&SessionId::from(id))
    }

    /// Whether `max_sessions` sessions are open: a new one is refused.
    pub async fn is_full(&self) -> bool {
        self.inner.sessions.read().await.len() >= self.max_sessions
    }

    /// `[limits] max_sessions`.
    pub fn max_sessions(&self) -> usize {
        self.max_sessions
    }

    /// Forgets a finished request's stream.
    pub fn forget(&self, session: &str, request: &RequestId) {
        lock(&self.streams).remove(&(SessionId::from(session), request.clone()));
    }

    /// Closes the client's stream of `request`, then waits (bounded) until
    /// the client resumes. Returns whether a stream was closed.
    ///
    /// The client is told to wait `backend_retry` before resuming — what
    /// the backend told Vigil, whose own resumption waits that long (the
    /// spec binds a client to the `retry` it was given) — so the client
    /// comes back when the answer can be there, as it would talking to the
    /// backend directly. Without one, the `retry` of Vigil's own streams.
    pub async fn close_and_await_resume(
        &self,
        session: &str,
        request: &RequestId,
        backend_retry: Option<Duration>,
    ) -> bool {
        let session = SessionId::from(session);
        let Some(stream) = lock(&self.streams)
            .get(&(session.clone(), request.clone()))
            .copied()
        else {
            return false;
        };
        let Some(handle) = self.inner.sessions.read().await.get(&session).cloned() else {
            return false;
        };
        let mut resumed = lock(&self.resumes)
            .entry(session.clone())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe();
        let retry = backend_retry.or(self.retry);
        let wait = RESUME_WAIT + retry.unwrap_or_default();
        let closed = match handle.close_sse_stream(stream, retry).await {
            Ok(()) => {
                tracing::debug!(session = %session_tag(&session), request = %request, ?retry, "closed the client's stream like the backend did; waiting for the client to resume");
                if tokio::time::timeout(wait, resumed.changed()).await.is_err() {
                    tracing::info!(session = %session_tag(&session), "client did not resume its stream within {wait:?}");
                }
                true
            }
            Err(e) => {
                tracing::debug!(session = %session_tag(&session), error = %e, "could not close the client's stream");
                false
            }
        };
        drop(resumed);
        let mut resumes = lock(&self.resumes);
        if resumes
            .get(&session)
            .is_some_and(|s| s.receiver_count() == 0)
        {
            resumes.remove(&session);
        }
        closed
    }
}

impl SessionManager for StreamSessions {
    type Error = StreamError;
    type Transport = WorkerTransport<LocalSessionWorker>;

    /// As rmcp's, within `max_sessions` (the `/mcp` router refuses most
    /// such requests before they get here, with a clearer answer).
    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        if self.is_full().await {
            crate::metrics::get().sessions_refused.inc();
            return Err(StreamError::Full {
                max: self.max_sessions,
            });
        }
        let (id, transport) = self.inner.create_session().await?;
        lock(&self.activity).insert(id.clone(), tokio::time::Instant::now());
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.inner.initialize_session(id, message).await?)
    }

    /// As rmcp's (an adopted session, `super::adopt`), within
    /// `max_sessions`.
    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        if self.is_full().await {
            crate::metrics::get().sessions_refused.inc();
            return Err(StreamError::Full {
                max: self.max_sessions,
            });
        }
        let outcome = self.inner.restore_session(id.clone()).await?;
        if matches!(outcome, RestoreOutcome::Restored(_)) {
            lock(&self.activity).insert(id.clone(), tokio::time::Instant::now());
            lock(&self.adopted).insert(id);
        }
        Ok(outcome)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.inner.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        lock(&self.streams).retain(|(s, _), _| s != id);
        lock(&self.activity).remove(id);
        lock(&self.adopted).remove(id);
        Ok(self.inner.close_session(id).await?)
    }

    /// As rmcp's, plus noting the stream of each routed request.
    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.touch(id);
        let handle = self
            .inner
            .sessions
            .read()
            .await
            .get(id)
            .cloned()
            .ok_or_else(|| LocalSessionManagerError::SessionNotFound(id.clone()))?;
        let receiver = handle
            .establish_request_wise_channel()
            .await
            .map_err(LocalSessionManagerError::from)?;
        if let (Some(request), Some(stream)) = (routed_request(&message), receiver.http_request_id)
        {
            lock(&self.streams).insert((id.clone(), request), stream);
        }
        handle
            .push_message(message, receiver.http_request_id)
            .await
            .map_err(LocalSessionManagerError::from)?;
        Ok(ReceiverStream::new(receiver.inner))
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.touch(id);
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.touch(id);
        Ok(self.inner.create_standalone_stream(id).await?)
    }

    /// As rmcp's, from the event after the one `Last-Event-ID` names,
    /// then wakes an answer waiting for this session to resume.
    ///
    /// The first GET stream of a session adopted here names an event of
    /// the replica that served it before, which means nothing here: it
    /// gets the session's stream from its start instead (what was sent
    /// since the adoption, the `list_changed` of `super::session`'s
    /// adoption among it).
    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.touch(id);
        let common = !last_event_id.contains('/');
        let last_event_id = if common && lock(&self.adopted).remove(id) {
            "0".to_owned()
        } else {
            event_after(&last_event_id)
        };
        let stream = self.inner.resume(id, last_event_id).await?;
        if let Some(r) = lock(&self.resumes).get(id) {
            r.send_modify(|n| *n += 1);
        }
        Ok(stream)
    }
}

/// The id of the event after `last` on the same stream, which is where
/// rmcp's replay must begin: rmcp replays from the event an id names,
/// that one included, and the specification says to replay the messages
/// *after* it (a client would otherwise get its last event twice). rmcp's
/// ids are `INDEX` (the session's GET stream) and `INDEX/REQUEST` (a
/// request's stream); anything else goes to rmcp as it came, to refuse.
fn event_after(last: &str) -> String {
    let (index, request) = match last.split_once('/') {
        Some((index, request)) => (index, Some(request)),
        None => (last, None),
    };
    let Some(next) = index.parse::<usize>().ok().and_then(|i| i.checked_add(1)) else {
        return last.to_owned();
    };
    if request.is_some_and(|r| r.parse::<u64>().is_err()) {
        return last.to_owned();
    }
    match request {
        Some(request) => format!("{next}/{request}"),
        None => next.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::event_after;

    #[test]
    fn a_resumed_stream_begins_after_the_event_its_client_named() {
        assert_eq!(event_after("0"), "1");
        assert_eq!(event_after("41"), "42");
        assert_eq!(event_after("0/7"), "1/7");
        assert_eq!(
            event_after("3/18446744073709551615"),
            "4/18446744073709551615"
        );
        // Not rmcp's: rmcp refuses it as it came.
        for odd in ["", "x", "1/x/2", "-1", &usize::MAX.to_string()] {
            let after = event_after(odd);
            assert_eq!(after, odd, "{odd:?} passes through");
        }
    }
}
