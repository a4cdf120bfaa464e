//! The registry of live client sessions, and fan-out of notifications to
//! them: list changes to everyone, log messages and resource updates to the
//! sessions they concern.
//!
//! A 2025-revision client is reached through its session's peer
//! (`notifications/*/list_changed`); a 2026-07-28 client through each
//! `subscriptions/listen` stream it holds open.
//!
//! List changes are per session: each entry has a resync worker that
//! remembers the catalog snapshot its session last saw (at registration, or
//! at its last notification). On [`Sessions::resync_all`] every worker
//! compares the current snapshot with that one and notifies only the kinds
//! that differ, so a session never hears of a change it already saw, nor
//! misses one that happened before it registered. A worker has at most one
//! resync in flight and one queued (a `Notify` permit); a session whose
//! channel is gone leaves the registry then.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;

use rmcp::model::{
    LoggingLevel, LoggingMessageNotificationParam, ResourceUpdatedNotificationParam,
};
use rmcp::service::{Peer, RoleServer, SubscriptionSink};

use tokio::sync::Notify;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::catalog::{Catalog, Changes, Current};

/// How a session is reached.
#[derive(Clone)]
pub enum Channel {
    /// A session-mode client (protocol revisions before 2026-07-28).
    Session(Peer<RoleServer>),
    /// One open `subscriptions/listen` stream.
    Listen(SubscriptionSink),
}

struct Entry {
    channel: Channel,
    subscriptions: HashSet<String>,
    /// Minimum level of log messages the client asked for.
    log_level: Option<LoggingLevel>,
    /// Wakes the session's resync worker.
    resync: Arc<Notify>,
    /// Ends the worker when the entry leaves the registry.
    _worker: DropGuard,
}

pub struct Sessions {
    inner: Mutex<HashMap<u64, Entry>>,
    catalog: Arc<Current>,
}

impl Sessions {
    pub fn new(catalog: Arc<Current>) -> Arc<Self> {
        Arc::new(Self {
            inner: Mutex::default(),
            catalog,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a session that has seen the current catalog (it lists it
    /// from now on) and starts its resync worker.
    pub fn add(self: &Arc<Self>, id: u64, channel: Channel) {
        let resync = Arc::new(Notify::new());
        let stop = CancellationToken::new();
        let worker = Resync {
            id,
            channel: channel.clone(),
            seen: self.catalog.get(),
            wake: resync.clone(),
            registry: Arc::downgrade(self),
        };
        tokio::spawn(worker.run(stop.clone()));
        self.lock().insert(
            id,
            Entry {
                channel,
                subscriptions: HashSet::new(),
                log_level: None,
                resync,
                _worker: stop.drop_guard(),
            },
        );
    }

    pub fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// How many sessions are registered.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Asks every session's worker to compare the current catalog with what
    /// its session saw and notify the difference.
    pub fn resync_all(&self) {
        for e in self.lock().values() {
            e.resync.notify_one();
        }
    }

    pub fn subscribe(&self, id: u64, uri: &str, on: bool) {
        if let Some(e) = self.lock().get_mut(&id) {
            if on {
                e.subscriptions.insert(uri.to_owned());
            } else {
                e.subscriptions.remove(uri);
            }
        }
    }

    pub fn set_log_level(&self, id: u64, level: LoggingLevel) {
        if let Some(e) = self.lock().get_mut(&id) {
            e.log_level = Some(level);
        }
    }

    /// Relays a backend log message: to `session` when the backend
    /// connection belongs to one, otherwise to every session-mode client
    /// whose level admits it. The future resolves once every target took it.
    pub fn log(
        &self,
        session: Option<u64>,
        params: LoggingMessageNotificationParam,
    ) -> BoxFuture<'static, ()> {
        let peers: Vec<Peer<RoleServer>> = self
            .lock()
            .iter()
            .filter(|(id, _)| session.is_none_or(|s| s == **id))
            .filter(|(_, e)| {
                e.log_level
                    .is_none_or(|min| level_rank(params.level) >= level_rank(min))
            })
            .filter_map(|(_, e)| match &e.channel {
                Channel::Session(p) => Some(p.clone()),
                Channel::Listen(_) => None,
            })
            .collect();
        Box::pin(async move {
            for peer in peers {
                let _ = peer.notify_logging_message(params.clone()).await;
            }
        })
    }

    /// Relays `notifications/resources/updated` to `session`, or to the
    /// sessions subscribed to `uri`.
    pub fn resource_updated(&self, session: Option<u64>, uri: String) {
        let targets: Vec<Channel> = self
            .lock()
            .iter()
            .filter(|(id, e)| match session {
                Some(s) => s == **id,
                None => e.subscriptions.contains(&uri) || matches!(e.channel, Channel::Listen(_)),
            })
            .map(|(_, e)| e.channel.clone())
            .collect();
        for channel in targets {
            let uri = uri.clone();
            tokio::spawn(async move {
                match channel {
                    Channel::Session(peer) => {
                        let _ = peer
                            .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                            .await;
                    }
                    // The sink drops URIs this stream did not ask for.
                    Channel::Listen(sink) => {
                        let _ = sink.notify_resource_updated(uri).await;
                    }
                }
            });
        }
    }
}

/// One session's resync worker.
struct Resync {
    id: u64,
    channel: Channel,
    /// The snapshot the session last saw.
    seen: Arc<Catalog>,
    wake: Arc<Notify>,
    registry: std::sync::Weak<Sessions>,
}

impl Resync {
    async fn run(mut self, stop: CancellationToken) {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.wake.notified() => {}
            }
            let Some(registry) = self.registry.upgrade() else {
                return;
            };
            let now = registry.catalog.get();
            drop(registry);
            let changes = now.diff(&self.seen);
            self.seen = now;
            if !changes.any() {
                continue;
            }
            let result = match &self.channel {
                Channel::Session(peer) => send_session_changes(peer, changes)
                    .await
                    .map_err(|e| e.to_string()),
                Channel::Listen(sink) => send_listen_changes(sink, changes).await,
            };
            match result {
                Ok(()) => {
                    tracing::debug!(
                        session = self.id,
                        tools = changes.tools,
                        resources = changes.resources,
                        prompts = changes.prompts,
                        "list_changed sent"
                    )
                }
                Err(e) => {
                    // The client is gone: the entry is stale.
                    tracing::debug!(session = self.id, error = %e, "could not send list_changed; removing the session");
                    if let Some(registry) = self.registry.upgrade() {
                        registry.remove(self.id);
                    }
                    return;
                }
            }
        }
    }
}

async fn send_session_changes(
    peer: &Peer<RoleServer>,
    c: Changes,
) -> Result<(), rmcp::service::ServiceError> {
    if c.tools {
        peer.notify_tool_list_changed().await?;
    }
    if c.resources {
        peer.notify_resource_list_changed().await?;
    }
    if c.prompts {
        peer.notify_prompt_list_changed().await?;
    }
    Ok(())
}

async fn send_listen_changes(sink: &SubscriptionSink, c: Changes) -> Result<(), String> {
    // A stream that did not ask for a kind refuses it; that is not an error.
    let mut last = Ok(());
    if c.tools {
        last = sink.notify_tool_list_changed().await;
    }
    if c.resources {
        last = last.and(sink.notify_resource_list_changed().await);
    }
    if c.prompts {
        last = last.and(sink.notify_prompt_list_changed().await);
    }
    tracing::debug!(result = ?last, "list_changed sent on a listen stream");
    match last {
        Err(rmcp::service::SubscriptionSendError::SubscriptionClosed) => {
            Err("subscription closed".into())
        }
        _ => Ok(()),
    }
}

fn level_rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}
