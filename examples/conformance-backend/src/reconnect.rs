//! SEP-1699 stream polling: the `test_reconnection` tool closes the SSE
//! stream of its own `tools/call` POST before answering, and the client
//! fetches the answer by resuming with `Last-Event-ID` on a GET.
//!
//! rmcp can close a request's stream (`LocalSessionHandle::close_sse_stream`)
//! but does not tell a handler which HTTP stream carries its request. So this
//! session manager wraps rmcp's [`LocalSessionManager`]: it opens request
//! streams itself, notes the stream of every `test_reconnection` call, and
//! reports resumptions so the tool can answer once the client is back (an
//! answer sent while no stream is attached would be dropped from the
//! session's routing and the resume would find nothing).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use futures::Stream;
use rmcp::{
    model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage, RequestId, ServerJsonRpcMessage},
    transport::{
        WorkerTransport,
        streamable_http_server::{
            SessionId, SessionManager,
            session::{
                ServerSseMessage,
                local::{LocalSessionManager, LocalSessionManagerError, LocalSessionWorker},
            },
        },
    },
};
use tokio::sync::watch;
use tokio_stream::wrappers::ReceiverStream;

/// The tool whose stream gets closed mid-call.
pub const TOOL: &str = "test_reconnection";

/// How long the tool waits for the client to resume before answering anyway.
/// Longer than rmcp's default SSE `retry` (3 s), which clients that honour it
/// wait before they reconnect.
const RESUME_WAIT: Duration = Duration::from_secs(8);

/// A [`LocalSessionManager`] that can close a `test_reconnection` call's
/// stream on request. Everything else is delegated unchanged.
pub struct ReconnectingSessionManager {
    inner: LocalSessionManager,
    /// The priming `retry` sent just before a stream is closed.
    retry: Option<Duration>,
    /// The HTTP stream of each pending `test_reconnection` call.
    streams: Mutex<HashMap<(SessionId, RequestId), u64>>,
    /// Per session with a pending `test_reconnection`: a counter of resumes.
    resumes: Mutex<HashMap<SessionId, watch::Sender<u64>>>,
}

/// Lock a mutex, recovering the data if a panicking thread poisoned it.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn is_reconnection_call(message: &ClientJsonRpcMessage) -> Option<RequestId> {
    match message {
        JsonRpcMessage::Request(request) => match &request.request {
            ClientRequest::CallToolRequest(call) if call.params.name == TOOL => {
                Some(request.id.clone())
            }
            _ => None,
        },
        _ => None,
    }
}

impl ReconnectingSessionManager {
    pub fn new(inner: LocalSessionManager, retry: Option<Duration>) -> Self {
        Self {
            inner,
            retry,
            streams: Mutex::default(),
            resumes: Mutex::default(),
        }
    }

    /// Close the stream carrying request `request` of session `session`, then
    /// wait (bounded) until the client resumes. Errors say why the stream
    /// could not be closed; the caller answers the call either way.
    pub async fn close_and_await_resume(
        &self,
        session: &str,
        request: &RequestId,
    ) -> Result<(), String> {
        let session: SessionId = session.into();
        let stream = lock(&self.streams)
            .remove(&(session.clone(), request.clone()))
            .ok_or("this call's HTTP stream is unknown")?;
        let handle = self
            .inner
            .sessions
            .read()
            .await
            .get(&session)
            .cloned()
            .ok_or("the session is gone")?;
        let mut resumed = lock(&self.resumes)
            .entry(session.clone())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe();
        let outcome = match handle.close_sse_stream(stream, self.retry).await {
            Ok(()) => {
                if tokio::time::timeout(RESUME_WAIT, resumed.changed())
                    .await
                    .is_err()
                {
                    tracing::info!(%session, "client did not resume within {RESUME_WAIT:?}");
                }
                Ok(())
            }
            Err(error) => Err(format!("could not close the stream: {error}")),
        };
        drop(resumed);
        let mut resumes = lock(&self.resumes);
        if resumes
            .get(&session)
            .is_some_and(|sender| sender.receiver_count() == 0)
        {
            resumes.remove(&session);
        }
        outcome
    }
}

impl SessionManager for ReconnectingSessionManager {
    type Error = LocalSessionManagerError;
    type Transport = WorkerTransport<LocalSessionWorker>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        self.inner.create_session().await
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.inner.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.inner.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        lock(&self.streams).retain(|(session, _), _| session != id);
        self.inner.close_session(id).await
    }

    /// What [`LocalSessionManager::create_stream`] does, plus noting the
    /// stream of a `test_reconnection` call before the call reaches the tool.
    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let handle = self
            .inner
            .sessions
            .read()
            .await
            .get(id)
            .cloned()
            .ok_or_else(|| LocalSessionManagerError::SessionNotFound(id.clone()))?;
        let receiver = handle.establish_request_wise_channel().await?;
        if let (Some(request), Some(stream)) =
            (is_reconnection_call(&message), receiver.http_request_id)
        {
            lock(&self.streams).insert((id.clone(), request), stream);
        }
        handle
            .push_message(message, receiver.http_request_id)
            .await?;
        Ok(ReceiverStream::new(receiver.inner))
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.inner.create_standalone_stream(id).await
    }

    /// Resume as rmcp does, then tell a waiting `test_reconnection` call.
    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let stream = self.inner.resume(id, last_event_id).await?;
        if let Some(resumes) = lock(&self.resumes).get(id) {
            resumes.send_modify(|count| *count += 1);
        }
        Ok(stream)
    }
}

/// Shared handle the tool uses; the HTTP service holds the same `Arc`.
pub type Reconnector = Arc<ReconnectingSessionManager>;
