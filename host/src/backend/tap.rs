//! Ordered relay of a backend's progress and log notifications.
//!
//! rmcp handles each incoming notification in its own task, so relaying from
//! its handler callbacks can reorder them and even deliver them after the
//! response they belong to — and clients drop progress that arrives after
//! the result. This transport wrapper sees messages in arrival order and
//! queues progress and log notifications for one relay worker per
//! connection; [`Relay::flush`] lets a request wait until everything that
//! arrived before its response has been relayed.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use rmcp::model::{
    JsonRpcMessage, LoggingMessageNotificationParam, ProgressNotificationParam, ServerNotification,
};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::client::Downstream;
use super::inflight::Inflight;

/// Longest wait for one relayed notification to be accepted by the client
/// side, so a stuck client cannot stall the backend's relay.
const RELAY_SEND_TIMEOUT: Duration = Duration::from_secs(2);

enum Item {
    Progress(ProgressNotificationParam),
    Log(LoggingMessageNotificationParam),
    Flush(oneshot::Sender<()>),
}

/// The sending side, held by the tapped transport and the connection.
/// Also carries the "transport ended" signal.
#[derive(Clone)]
pub struct Relay(mpsc::UnboundedSender<Item>, CancellationToken);

impl Relay {
    /// Starts the relay worker for one backend connection.
    pub fn spawn(
        inflight: Arc<Inflight>,
        downstream: Arc<dyn Downstream>,
        backend: Arc<str>,
        session: Option<u64>,
    ) -> Relay {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(rx, inflight, downstream, backend, session));
        Relay(tx, CancellationToken::new())
    }

    /// Resolves once the tapped transport has ended (peer gone, process
    /// exited, stream broken): an event, not a poll.
    pub async fn transport_ended(&self) {
        self.1.cancelled().await
    }

    pub fn has_transport_ended(&self) -> bool {
        self.1.is_cancelled()
    }

    /// Waits (bounded) until every notification queued so far is relayed.
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.0.send(Item::Flush(tx)).is_ok() {
            let _ = tokio::time::timeout(RELAY_SEND_TIMEOUT, rx).await;
        }
    }
}

async fn run(
    mut rx: mpsc::UnboundedReceiver<Item>,
    inflight: Arc<Inflight>,
    downstream: Arc<dyn Downstream>,
    backend: Arc<str>,
    session: Option<u64>,
) {
    while let Some(item) = rx.recv().await {
        match item {
            Item::Progress(mut p) => {
                let Some(call) = inflight.by_token(&p.progress_token) else {
                    continue;
                };
                let Some(token) = call.progress_token else {
                    continue;
                };
                p.progress_token = token;
                if tokio::time::timeout(RELAY_SEND_TIMEOUT, call.peer.notify_progress(p))
                    .await
                    .is_err()
                {
                    tracing::debug!(%backend, "client did not take a progress notification in time");
                }
            }
            Item::Log(p) => {
                let _ =
                    tokio::time::timeout(RELAY_SEND_TIMEOUT, downstream.log(&backend, session, p))
                        .await;
            }
            Item::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}

/// A transport that queues progress and log notifications on a [`Relay`]
/// as they arrive, then hands every message on to rmcp unchanged.
pub struct Tapped<T> {
    inner: T,
    relay: Relay,
}

impl<T> Tapped<T> {
    pub fn new(inner: T, relay: Relay) -> Self {
        Self { inner, relay }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Tapped<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let Some(message) = self.inner.receive().await else {
            self.relay.1.cancel();
            return None;
        };
        if let JsonRpcMessage::Notification(n) = &message {
            let item = match &n.notification {
                ServerNotification::ProgressNotification(p) => {
                    Some(Item::Progress(p.params.clone()))
                }
                ServerNotification::LoggingMessageNotification(l) => {
                    Some(Item::Log(l.params.clone()))
                }
                _ => None,
            };
            if let Some(item) = item {
                let _ = self.relay.0.send(item);
            }
        }
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// The log half of [`Downstream`], boxed for the relay.
pub type LogFuture = BoxFuture<'static, ()>;
