//! Ordered relay of a backend's progress and log notifications.
//!
//! rmcp handles each incoming notification in its own task, so relaying from
//! its handler callbacks can reorder them and even deliver them after the
//! response they belong to — and clients drop progress that arrives after
//! the result. This transport wrapper sees messages in arrival order and
//! queues progress and log notifications for one relay worker per
//! connection, which hands each to the [`Outbox`](super::Outbox) of the
//! client session(s) it is for. The worker never waits for a client: a
//! client that does not read fills only its own outbox. [`Relay::flush`]
//! lets a request wait until everything that arrived before its response has
//! been handed over.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use rmcp::model::{
    GetExtensions, JsonRpcMessage, LoggingMessageNotificationParam, ProgressNotificationParam,
    ServerNotification,
};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::client::Downstream;
use super::heard::Heard;
use super::inflight::{Inflight, LogRecipients};
use super::wire::{KeepJson, Wire};
use crate::background::Background;

/// Notifications waiting for the relay worker. The worker only moves them
/// to per-session outboxes, so this fills only when the backend outruns
/// Vigil itself; beyond it they are dropped and counted.
const RELAY_BACKLOG: usize = 4096;

enum Item {
    /// Progress as rmcp decoded it, and its params as the backend wrote
    /// them (see `wire.rs`).
    Progress(ProgressNotificationParam, Option<serde_json::Value>),
    Log(LoggingMessageNotificationParam),
    Flush(oneshot::Sender<()>),
}

/// The sending side, held by the tapped transport and the connection.
/// Also carries the "transport ended" signal, how many notifications
/// are queued or being handed over (so a flush with none costs nothing),
/// and whether the backend speaks 2026-07-28 (its log messages belong to
/// the calls that asked for them, see [`CallLog`](super::inflight::CallLog)).
#[derive(Clone)]
pub struct Relay(
    mpsc::Sender<Item>,
    CancellationToken,
    Arc<AtomicUsize>,
    Arc<AtomicBool>,
);

impl Relay {
    /// Starts the relay worker for one backend connection on `background`:
    /// it ends with the connection (every `Relay` dropped) or at shutdown.
    pub fn spawn(
        inflight: Arc<Inflight>,
        downstream: Arc<dyn Downstream>,
        backend: Arc<str>,
        session: Option<u64>,
        background: &Background,
    ) -> Relay {
        let (tx, rx) = mpsc::channel(RELAY_BACKLOG);
        let pending = Arc::new(AtomicUsize::new(0));
        let modern = Arc::new(AtomicBool::new(false));
        background.spawn_until_shutdown(run(
            rx,
            inflight,
            downstream,
            backend,
            session,
            pending.clone(),
            modern.clone(),
        ));
        Relay(tx, CancellationToken::new(), pending, modern)
    }

    /// Records the era the backend agreed to (before any call is sent).
    pub fn set_era(&self, era: super::Era) {
        self.3.store(era == super::Era::Modern, Ordering::Release);
    }

    /// Resolves once the tapped transport has ended (peer gone, process
    /// exited, stream broken): an event, not a poll.
    pub async fn transport_ended(&self) {
        self.1.cancelled().await
    }

    pub fn has_transport_ended(&self) -> bool {
        self.1.is_cancelled()
    }

    /// Waits until every notification that arrived so far has been handed
    /// to the outboxes it is for (not to the clients: see
    /// [`Outbox::flush`](super::Outbox::flush)).
    pub async fn flush(&self) {
        if self.2.load(Ordering::Acquire) == 0 {
            return;
        }
        let (tx, rx) = oneshot::channel();
        if self.0.send(Item::Flush(tx)).await.is_ok() {
            let _ = rx.await;
        }
    }

    fn queue(&self, item: Item) {
        self.2.fetch_add(1, Ordering::AcqRel);
        if self.0.try_send(item).is_err() {
            self.2.fetch_sub(1, Ordering::AcqRel);
            crate::metrics::get().relay_dropped.inc();
        }
    }
}

async fn run(
    mut rx: mpsc::Receiver<Item>,
    inflight: Arc<Inflight>,
    downstream: Arc<dyn Downstream>,
    backend: Arc<str>,
    session: Option<u64>,
    pending: Arc<AtomicUsize>,
    modern: Arc<AtomicBool>,
) {
    while let Some(item) = rx.recv().await {
        let counted = !matches!(item, Item::Flush(_));
        match item {
            Item::Progress(mut p, written) => {
                // Progress for no call, or for a call that asked for none, is dropped.
                if let Some(call) = inflight.by_token_soon(&p.progress_token).await
                    && let Some(token) = call.progress_token
                {
                    let params = match written {
                        Some(serde_json::Value::Object(mut written)) => {
                            // Only the token is the client's; in its place.
                            if let Ok(token) = serde_json::to_value(&token) {
                                written.insert("progressToken".into(), token);
                            }
                            written
                        }
                        _ => {
                            p.progress_token = token;
                            match serde_json::to_value(p) {
                                Ok(serde_json::Value::Object(m)) => m,
                                _ => continue,
                            }
                        }
                    };
                    call.outbox.progress(call.peer, params);
                }
            }
            Item::Log(p) => {
                let modern = modern.load(Ordering::Acquire);
                match inflight.log_recipients(p.level, modern) {
                    LogRecipients::Calls(calls) => {
                        for call in calls {
                            call.outbox.call_log(call.peer, p.clone());
                        }
                    }
                    LogRecipients::Ambiguous => {
                        tracing::debug!(%backend, "log message of a call by one of several callers: relayed to none");
                        crate::metrics::get().relay_dropped.inc();
                    }
                }
                // A 2026-07-28 backend logs only for requests that asked.
                if !modern {
                    downstream.log(&backend, session, p);
                }
            }
            Item::Flush(done) => {
                let _ = done.send(());
            }
        }
        if counted {
            pending.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// A transport that queues progress and log notifications on a [`Relay`]
/// as they arrive, then hands every message on to rmcp unchanged; and tells
/// the connection's [`Wire`] which answers to keep as JSON before the
/// request that asks for one leaves.
pub struct Tapped<T> {
    inner: T,
    relay: Relay,
    wire: Arc<Wire>,
    /// Every notification, in the DEBUG log (rate-limited).
    heard: Heard,
}

impl<T> Tapped<T> {
    pub fn new(inner: T, relay: Relay, wire: Arc<Wire>, backend: Arc<str>) -> Self {
        Self {
            inner,
            relay,
            wire,
            heard: Heard::new(backend),
        }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Tapped<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let JsonRpcMessage::Request(r) = &item
            && r.request.extensions().get::<KeepJson>().is_some()
        {
            if matches!(r.request, rmcp::model::ClientRequest::ListToolsRequest(_)) {
                self.wire.expect_decoded(r.id.clone());
            } else {
                self.wire.expect(r.id.clone());
            }
        }
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let Some(message) = self.inner.receive().await else {
            self.relay.1.cancel();
            return None;
        };
        if let JsonRpcMessage::Notification(n) = &message {
            self.heard.notification(&n.notification);
            let item = match &n.notification {
                ServerNotification::ProgressNotification(p) => {
                    let written = serde_json::to_value(&p.params.progress_token)
                        .ok()
                        .and_then(|token| self.wire.take_progress(&token));
                    Some(Item::Progress(p.params.clone(), written))
                }
                ServerNotification::LoggingMessageNotification(l) => {
                    Some(Item::Log(l.params.clone()))
                }
                _ => None,
            };
            if let Some(item) = item {
                self.relay.queue(item);
            }
        }
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
