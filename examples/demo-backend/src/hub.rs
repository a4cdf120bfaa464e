//! State shared by every client session: the server name, the dynamic tools
//! loaded from `--tools-file`, the counter resource, and the registry of
//! connected clients that change notifications are fanned out to.
//!
//! Two kinds of listeners are registered here:
//!
//! - **sessions** (protocol revisions up to 2025-11-25): the peer of every
//!   client that completed `initialize`, with the resource URIs it subscribed
//!   to through `resources/subscribe`;
//! - **subscription streams** (2026-07-28): the sink of every open
//!   `subscriptions/listen` request, which carries its own accepted filter.
//!
//! Closed sessions and finished streams are pruned whenever the registry is
//! walked, so the hub never needs to be told that a client left.
//!
//! rmcp acknowledges a `subscriptions/listen` request before it hands the
//! stream to the handler, so a client may trigger a change in the gap
//! between the two. A listen request is therefore announced first
//! ([`Hub::expect_stream`], before the acknowledgment): changes it would
//! accept are remembered and replayed when the stream registers.

use std::{
    collections::BTreeSet,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError, RwLock,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use rmcp::{
    Peer, RoleServer,
    model::{ResourceUpdatedNotificationParam, SubscriptionFilter, Tool},
    service::SubscriptionSink,
};
use tokio::time::Instant;

use crate::watch::DynamicTool;

/// The resource URIs one session subscribed to with `resources/subscribe`.
pub type Subscriptions = Arc<Mutex<BTreeSet<String>>>;

/// Shared state of the demo server; one per process, behind an `Arc`.
#[derive(Debug)]
pub struct Hub {
    name: String,
    dynamic_tools: RwLock<Arc<Vec<DynamicTool>>>,
    counter: AtomicU64,
    sessions: Mutex<Vec<Session>>,
    streams: Mutex<Streams>,
    next_stream_id: AtomicU64,
}

#[derive(Debug)]
struct Session {
    peer: Peer<RoleServer>,
    subscriptions: Subscriptions,
}

/// Open `subscriptions/listen` streams, and those acknowledged but not yet
/// registered.
#[derive(Debug, Default)]
struct Streams {
    open: Vec<Stream>,
    pending: Vec<Pending>,
}

#[derive(Debug)]
struct Stream {
    id: u64,
    sink: SubscriptionSink,
}

/// A listen request between its acknowledgment and its registration.
#[derive(Debug)]
struct Pending {
    requested: SubscriptionFilter,
    since: Instant,
    missed: Missed,
}

/// Changes a stream would have accepted before it registered.
#[derive(Debug, Default)]
pub struct Missed {
    pub tools_list_changed: bool,
    pub resources_updated: BTreeSet<String>,
}

/// How long an announced listen request may take to register before it is
/// forgotten (its acknowledgment failed, or the client left).
const PENDING_TTL: Duration = Duration::from_secs(30);

/// Removes a `subscriptions/listen` stream from the hub when dropped.
#[derive(Debug)]
pub struct StreamGuard {
    hub: Arc<Hub>,
    id: u64,
}

// === impl Hub ===

impl Hub {
    /// A hub for a server called `name`, with `dynamic_tools` already loaded.
    pub fn new(name: String, dynamic_tools: Vec<DynamicTool>) -> Self {
        Self {
            name,
            dynamic_tools: RwLock::new(Arc::new(dynamic_tools)),
            counter: AtomicU64::new(0),
            sessions: Mutex::new(Vec::new()),
            streams: Mutex::new(Streams::default()),
            next_stream_id: AtomicU64::new(0),
        }
    }

    /// The `--name` of this server.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The URI of the counter resource.
    pub fn counter_uri(&self) -> String {
        format!("demo://{}/counter", self.name)
    }

    /// The current value of the counter resource.
    pub fn counter(&self) -> u64 {
        self.counter.load(Ordering::SeqCst)
    }

    /// Increments the counter and returns its new value.
    pub fn bump_counter(&self) -> u64 {
        self.counter.fetch_add(1, Ordering::SeqCst).wrapping_add(1)
    }

    /// The dynamic tools currently loaded from the tools file.
    pub fn dynamic_tools(&self) -> Arc<Vec<DynamicTool>> {
        self.dynamic_tools
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The dynamic tool called `name`, if one is loaded.
    pub fn dynamic_tool(&self, name: &str) -> Option<DynamicTool> {
        self.dynamic_tools()
            .iter()
            .find(|tool| tool.name == name)
            .cloned()
    }

    /// The dynamic tools as MCP tool definitions.
    pub fn dynamic_tool_definitions(&self) -> Vec<Tool> {
        self.dynamic_tools()
            .iter()
            .map(DynamicTool::to_tool)
            .collect()
    }

    /// Replaces the dynamic tools; returns whether the set changed.
    pub fn replace_dynamic_tools(&self, tools: Vec<DynamicTool>) -> bool {
        let mut current = self
            .dynamic_tools
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if **current == tools {
            return false;
        }
        *current = Arc::new(tools);
        true
    }

    /// Registers an initialized session so it receives change notifications.
    pub fn register_session(&self, peer: Peer<RoleServer>, subscriptions: Subscriptions) {
        let mut sessions = lock(&self.sessions);
        sessions.retain(|session| !session.peer.is_transport_closed());
        sessions.push(Session {
            peer,
            subscriptions,
        });
    }

    /// Announces a `subscriptions/listen` request that is about to be
    /// acknowledged, so changes in the meantime are not lost.
    pub fn expect_stream(&self, requested: &SubscriptionFilter) {
        let mut streams = lock(&self.streams);
        streams
            .pending
            .retain(|pending| pending.since.elapsed() < PENDING_TTL);
        streams.pending.push(Pending {
            requested: requested.clone(),
            since: Instant::now(),
            missed: Missed::default(),
        });
    }

    /// Registers an open `subscriptions/listen` stream until the guard drops;
    /// returns the changes it missed since it was announced with `requested`.
    pub fn register_stream(
        self: &Arc<Self>,
        requested: &SubscriptionFilter,
        sink: SubscriptionSink,
    ) -> (StreamGuard, Missed) {
        let id = self.next_stream_id.fetch_add(1, Ordering::Relaxed);
        let mut streams = lock(&self.streams);
        let missed = streams.take_missed(requested);
        streams.open.push(Stream { id, sink });
        let guard = StreamGuard {
            hub: self.clone(),
            id,
        };
        (guard, missed)
    }

    /// Sends `notifications/tools/list_changed` to every connected client.
    pub fn notify_tools_changed(&self) {
        let peers = self.live_peers(|_| true);
        let sinks = self.live_sinks(
            |sink| sink.accepted().tools_list_changed == Some(true),
            |pending| {
                if pending.requested.tools_list_changed == Some(true) {
                    pending.missed.tools_list_changed = true;
                }
            },
        );
        tracing::info!(
            sessions = peers.len(),
            streams = sinks.len(),
            "sending notifications/tools/list_changed"
        );
        for peer in peers {
            tokio::spawn(async move {
                if let Err(error) = peer.notify_tool_list_changed().await {
                    tracing::debug!(%error, "could not send tools/list_changed to a session");
                }
            });
        }
        for sink in sinks {
            tokio::spawn(async move {
                if let Err(error) = sink.notify_tool_list_changed().await {
                    tracing::debug!(%error, "could not send tools/list_changed to a stream");
                }
            });
        }
    }

    /// Sends `notifications/resources/updated` for `uri` to the clients
    /// subscribed to it.
    pub fn notify_resource_updated(&self, uri: &str) {
        let peers = self.live_peers(|session| lock(&session.subscriptions).contains(uri));
        let wants = |filter: &SubscriptionFilter| {
            filter
                .resource_subscriptions
                .as_ref()
                .is_some_and(|uris| uris.iter().any(|wanted| wanted == uri))
        };
        let sinks = self.live_sinks(
            |sink| wants(sink.accepted()),
            |pending| {
                if wants(&pending.requested) {
                    pending.missed.resources_updated.insert(uri.to_owned());
                }
            },
        );
        tracing::debug!(
            uri,
            sessions = peers.len(),
            streams = sinks.len(),
            "sending notifications/resources/updated"
        );
        for peer in peers {
            let param = ResourceUpdatedNotificationParam::new(uri);
            tokio::spawn(async move {
                if let Err(error) = peer.notify_resource_updated(param).await {
                    tracing::debug!(%error, "could not send resources/updated to a session");
                }
            });
        }
        for sink in sinks {
            let uri = uri.to_owned();
            tokio::spawn(async move {
                if let Err(error) = sink.notify_resource_updated(uri).await {
                    tracing::debug!(%error, "could not send resources/updated to a stream");
                }
            });
        }
    }

    fn live_peers(&self, wanted: impl Fn(&Session) -> bool) -> Vec<Peer<RoleServer>> {
        let mut sessions = lock(&self.sessions);
        sessions.retain(|session| !session.peer.is_transport_closed());
        sessions
            .iter()
            .filter(|session| wanted(session))
            .map(|session| session.peer.clone())
            .collect()
    }

    /// The open streams that want a change, after recording it with
    /// `remember` on the announced ones (under the same lock, so a stream
    /// gets every change either live or as missed).
    fn live_sinks(
        &self,
        wanted: impl Fn(&SubscriptionSink) -> bool,
        remember: impl Fn(&mut Pending),
    ) -> Vec<SubscriptionSink> {
        let mut streams = lock(&self.streams);
        streams.pending.iter_mut().for_each(remember);
        streams
            .open
            .iter()
            .filter(|stream| wanted(&stream.sink))
            .map(|stream| stream.sink.clone())
            .collect()
    }
}

// === impl Streams ===

impl Streams {
    /// Forgets the oldest announcement of `requested`; returns what it missed.
    fn take_missed(&mut self, requested: &SubscriptionFilter) -> Missed {
        self.pending
            .iter()
            .position(|pending| &pending.requested == requested)
            .map(|index| self.pending.remove(index).missed)
            .unwrap_or_default()
    }
}

// === impl StreamGuard ===

impl Drop for StreamGuard {
    fn drop(&mut self) {
        lock(&self.hub.streams)
            .open
            .retain(|stream| stream.id != self.id);
    }
}

/// Locks `mutex`, ignoring poisoning: the data behind these locks stays
/// consistent even if a holder panicked.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn announced_streams_keep_what_they_would_have_missed() {
        let hub = Hub::new("d".into(), Vec::new());
        let counter = hub.counter_uri();
        let wants_counter = SubscriptionFilter::builder()
            .resource_subscriptions([counter.clone()])
            .build();
        let wants_tools = SubscriptionFilter::builder().tools_list_changed().build();
        hub.expect_stream(&wants_counter);
        hub.expect_stream(&wants_tools);

        hub.notify_resource_updated(&counter);
        hub.notify_resource_updated("demo://d/readme");

        let mut streams = lock(&hub.streams);
        let missed = streams.take_missed(&wants_counter);
        assert!(!missed.tools_list_changed);
        assert_eq!(missed.resources_updated, BTreeSet::from([counter]));
        let missed = streams.take_missed(&wants_tools);
        assert!(!missed.tools_list_changed && missed.resources_updated.is_empty());
        assert!(streams.pending.is_empty());
        drop(streams);

        hub.expect_stream(&wants_tools);
        hub.notify_tools_changed();
        assert!(
            lock(&hub.streams)
                .take_missed(&wants_tools)
                .tools_list_changed
        );
    }

    #[test]
    fn replacing_tools_reports_changes_only() {
        let hub = Hub::new("d".into(), Vec::new());
        let tool = DynamicTool {
            name: "x".into(),
            description: "X".into(),
            required: vec![],
        };
        assert!(hub.replace_dynamic_tools(vec![tool.clone()]));
        assert!(!hub.replace_dynamic_tools(vec![tool]));
        assert!(hub.dynamic_tool("x").is_some());
        assert!(hub.replace_dynamic_tools(Vec::new()));
        assert!(hub.dynamic_tool("x").is_none());
    }
}
