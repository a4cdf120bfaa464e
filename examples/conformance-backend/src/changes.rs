//! List changes and who hears of them.
//!
//! Two tools change a list on purpose (`test_trigger_tool_change`,
//! `test_trigger_prompt_change`, which the 2026-07-28 suite calls while a
//! `subscriptions/listen` stream is open): each bumps a revision that the
//! changed list shows (in one entry's description), then tells
//! - every open `subscriptions/listen` stream whose filter asked for that
//!   list (2026-07-28; rmcp's subscription sink applies the filter and tags
//!   each notification with the subscription id), and
//! - every handshake-era session, on its own stream (`list_changed`).
//!
//! State is shared by all sessions and by the stateless requests, which get
//! a handler of their own each.

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicU64, Ordering},
};

use rmcp::{
    ErrorData as McpError, Peer, RoleServer,
    service::{SubscriptionContext, SubscriptionSendError},
};
use tokio::sync::broadcast;

/// Which list changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum List {
    Tools,
    Prompts,
}

/// Changes not yet delivered to a slow listen stream before it lags; a
/// stream that lagged is told that both lists changed.
const BACKLOG: usize = 64;

#[derive(Clone)]
pub struct Changes {
    sender: broadcast::Sender<List>,
    tools: Arc<AtomicU64>,
    prompts: Arc<AtomicU64>,
    sessions: Arc<Mutex<Vec<Peer<RoleServer>>>>,
}

impl Default for Changes {
    fn default() -> Self {
        Self {
            sender: broadcast::channel(BACKLOG).0,
            tools: Arc::default(),
            prompts: Arc::default(),
            sessions: Arc::default(),
        }
    }
}

impl Changes {
    fn counter(&self, list: List) -> &AtomicU64 {
        match list {
            List::Tools => &self.tools,
            List::Prompts => &self.prompts,
        }
    }

    /// How often `list` has changed since the server started.
    pub fn revision(&self, list: List) -> u64 {
        self.counter(list).load(Ordering::SeqCst)
    }

    /// Change `list` and tell everyone listening; returns the new revision.
    pub async fn change(&self, list: List) -> u64 {
        let revision = self.counter(list).fetch_add(1, Ordering::SeqCst) + 1;
        // No receiver (no listen stream open) is not an error.
        let _ = self.sender.send(list);
        let sessions: Vec<Peer<RoleServer>> = {
            let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
            sessions.retain(|peer| !peer.is_transport_closed());
            sessions.clone()
        };
        for peer in sessions {
            let sent = match list {
                List::Tools => peer.notify_tool_list_changed().await,
                List::Prompts => peer.notify_prompt_list_changed().await,
            };
            if let Err(error) = sent {
                tracing::debug!(%error, "a session missed a list change");
            }
        }
        revision
    }

    /// A handshake-era session that is to hear of list changes.
    pub fn register_session(&self, peer: Peer<RoleServer>) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.retain(|peer| !peer.is_transport_closed());
        sessions.push(peer);
    }

    /// A receiver of every change from now on. A listen stream must take
    /// one *before* rmcp acknowledges it: a client may change a list as soon
    /// as it sees the acknowledgment, before [`Self::listen`] runs.
    pub fn subscribe(&self) -> broadcast::Receiver<List> {
        self.sender.subscribe()
    }

    /// Serve one `subscriptions/listen` stream (already acknowledged by rmcp)
    /// until the client cancels it: one `notifications/resources/updated`
    /// for each resource it subscribed to (as `resources/subscribe` does in
    /// the handshake era), then the list changes (taken from `changes`) it
    /// asked for.
    pub async fn listen(
        subscription: SubscriptionContext,
        mut changes: broadcast::Receiver<List>,
    ) -> Result<(), McpError> {
        let sink = subscription.sink().clone();
        let uris = sink
            .accepted()
            .resource_subscriptions
            .clone()
            .unwrap_or_default();
        for uri in uris {
            if let Err(error) = sink.notify_resource_updated(uri).await {
                tracing::debug!(%error, "could not send a resource update");
            }
        }
        loop {
            let lists: &[List] = tokio::select! {
                () = subscription.cancelled() => return Ok(()),
                change = changes.recv() => match change {
                    Ok(List::Tools) => &[List::Tools],
                    Ok(List::Prompts) => &[List::Prompts],
                    Err(broadcast::error::RecvError::Lagged(_)) => &[List::Tools, List::Prompts],
                    Err(broadcast::error::RecvError::Closed) => return Ok(()),
                },
            };
            for list in lists {
                let sent = match list {
                    List::Tools => sink.notify_tool_list_changed().await,
                    List::Prompts => sink.notify_prompt_list_changed().await,
                };
                match sent {
                    Ok(()) | Err(SubscriptionSendError::NotificationNotAccepted(_)) => {}
                    Err(SubscriptionSendError::SubscriptionClosed) => return Ok(()),
                    Err(error) => tracing::debug!(%error, "could not send a list change"),
                }
            }
        }
    }
}
