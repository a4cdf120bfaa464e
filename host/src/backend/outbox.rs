//! What is relayed to one client session, queued apart from every other's.
//!
//! Backends send notifications (progress, log messages, resource updates)
//! faster than some clients take them; one client that never reads its
//! stream must not hold up anyone else, nor grow Vigil's memory. So each
//! client session has its own bounded [`Outbox`] with one writer task:
//! relaying only enqueues (never waits for a client), and a full queue drops
//! its oldest progress or log message, counting it. Resource updates are
//! coalesced by URI (the client re-reads the resource anyway). Once the
//! client takes notifications again it first gets one warning log message
//! saying how many were dropped.
//!
//! [`Outbox::flush`] waits until everything queued before it has been
//! handed to this client, so a call's answer follows its own progress;
//! it waits on this session's client only, and is bounded.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    LoggingLevel, LoggingMessageNotificationParam, ResourceUpdatedNotificationParam,
};
use rmcp::service::{Peer, RoleServer, SubscriptionSink};
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::{CancellationToken, DropGuard};

/// Queued notifications per session unless `[limits] relay_queue` says
/// otherwise.
pub const DEFAULT_CAPACITY: usize = 1_000;

/// How long [`Outbox::flush`] waits for the client to take what was queued.
const FLUSH_WAIT: Duration = Duration::from_secs(2);

/// Where a session's log messages and resource updates go.
#[derive(Clone)]
pub enum Channel {
    /// A session-mode client (protocol revisions before 2026-07-28).
    Session(Peer<RoleServer>),
    /// One open `subscriptions/listen` stream.
    Listen(SubscriptionSink),
}

enum Note {
    /// Progress of a call, to the peer that made it: the params as the
    /// backend wrote them, with the client's token.
    Progress(Peer<RoleServer>, serde_json::Map<String, serde_json::Value>),
    /// A log message for one call, to the peer that made it.
    CallLog(Peer<RoleServer>, LoggingMessageNotificationParam),
    Log(LoggingMessageNotificationParam),
    Resource(String),
    /// Everything before it has been handed over.
    Flush(oneshot::Sender<()>),
}

struct Queue {
    notes: VecDeque<Note>,
    /// Dropped since the client last took one.
    dropped: u64,
    /// Where logs and resource updates go (none: only progress is relayed,
    /// e.g. before the session registered).
    channel: Option<Channel>,
}

impl Queue {
    /// Queues `note` within `capacity`; `true` if an older one was dropped
    /// for it. A resource update already queued for the same URI is not
    /// queued twice; flush markers are never dropped nor count as full.
    fn admit(&mut self, note: Note, capacity: usize) -> bool {
        if let Note::Resource(uri) = &note
            && self
                .notes
                .iter()
                .any(|n| matches!(n, Note::Resource(u) if u == uri))
        {
            return false;
        }
        let mut dropped = false;
        if !matches!(note, Note::Flush(_))
            && self
                .notes
                .iter()
                .filter(|n| !matches!(n, Note::Flush(_)))
                .count()
                >= capacity
            && let Some(i) = self.notes.iter().position(|n| !matches!(n, Note::Flush(_)))
        {
            self.notes.remove(i);
            self.dropped += 1;
            dropped = true;
        }
        self.notes.push_back(note);
        dropped
    }
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Notify,
    capacity: usize,
    /// Ends the writer (cancelled when the last handle is dropped).
    stop: CancellationToken,
    /// Whether the writer runs: it starts with the first notification, so a
    /// session that is never relayed anything (a stateless request) costs
    /// no task.
    started: std::sync::atomic::AtomicBool,
    /// Whether the writer is handing a notification to the client now.
    delivering: std::sync::atomic::AtomicBool,
}

/// The handle of one session's queue; clones share it. The writer task
/// ends when the last handle is dropped.
#[derive(Clone)]
pub struct Outbox {
    shared: Arc<Shared>,
    _writer: Arc<DropGuard>,
}

impl Outbox {
    /// A queue of `capacity` notifications (at least one) and its writer.
    pub fn new(capacity: usize) -> Self {
        let stop = CancellationToken::new();
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                notes: VecDeque::new(),
                dropped: 0,
                channel: None,
            }),
            wake: Notify::new(),
            capacity: capacity.max(1),
            stop: stop.clone(),
            started: std::sync::atomic::AtomicBool::new(false),
            delivering: std::sync::atomic::AtomicBool::new(false),
        });
        Self {
            shared,
            _writer: Arc::new(stop.drop_guard()),
        }
    }

    /// Sets where log messages and resource updates go.
    pub fn connect(&self, channel: Channel) {
        self.lock().channel = Some(channel);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.shared.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, note: Note) {
        let dropped = self.lock().admit(note, self.shared.capacity);
        if dropped {
            crate::metrics::get().relay_dropped.inc();
        }
        if !self
            .shared
            .started
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            // The writer holds only a weak reference: the queue goes with
            // its last handle.
            crate::background::spawn(write(
                Arc::downgrade(&self.shared),
                self.shared.stop.clone(),
            ));
        }
        self.shared.wake.notify_one();
    }

    /// Queues a call's progress for `peer` (the calling client).
    pub fn progress(&self, peer: Peer<RoleServer>, p: serde_json::Map<String, serde_json::Value>) {
        self.push(Note::Progress(peer, p));
    }

    /// Queues a log message a call asked for, for `peer` (the calling
    /// client, whichever its revision).
    pub fn call_log(&self, peer: Peer<RoleServer>, p: LoggingMessageNotificationParam) {
        self.push(Note::CallLog(peer, p));
    }

    /// Queues a log message (for a session-mode client only).
    pub fn log(&self, p: LoggingMessageNotificationParam) {
        if matches!(self.lock().channel, Some(Channel::Session(_))) {
            self.push(Note::Log(p));
        }
    }

    /// Queues `notifications/resources/updated` for `uri`.
    pub fn resource_updated(&self, uri: String) {
        if self.lock().channel.is_some() {
            self.push(Note::Resource(uri));
        }
    }

    /// Waits (at most two seconds) until this client has been handed
    /// everything queued so far.
    pub async fn flush(&self) {
        // The common case, once per call: nothing queued, nothing on its way.
        {
            let q = self.lock();
            if q.notes.is_empty()
                && !self
                    .shared
                    .delivering
                    .load(std::sync::atomic::Ordering::Acquire)
            {
                return;
            }
        }
        let (tx, rx) = oneshot::channel();
        self.push(Note::Flush(tx));
        let _ = tokio::time::timeout(FLUSH_WAIT, rx).await;
    }

    /// Notifications queued now (for tests and metrics).
    pub fn len(&self) -> usize {
        self.lock().notes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The writer: hands queued notifications to the client one at a time.
/// Whether a message of `level` reaches a client whose least severe wanted
/// level is `min` (RFC 5424 order, as MCP defines it).
pub fn admits(min: LoggingLevel, level: LoggingLevel) -> bool {
    fn rank(level: LoggingLevel) -> u8 {
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
    rank(level) >= rank(min)
}

async fn write(shared: std::sync::Weak<Shared>, stop: CancellationToken) {
    loop {
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let next = {
            let mut q = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            let dropped = std::mem::take(&mut q.dropped);
            let channel = q.channel.clone();
            let note = q.notes.pop_front();
            // Set under the lock, so a flush never sees an empty queue
            // while a note is between the queue and the client.
            shared
                .delivering
                .store(note.is_some(), std::sync::atomic::Ordering::Release);
            (note, dropped, channel)
        };
        let (note, dropped, channel) = next;
        if dropped > 0
            && let Some(Channel::Session(peer)) = &channel
        {
            let warning = LoggingMessageNotificationParam::new(
                LoggingLevel::Warning,
                serde_json::Value::String(format!(
                    "vigil dropped {dropped} notifications for this session: the client did not take them in time"
                )),
            )
            .with_logger("vigil");
            let _ = peer.notify_logging_message(warning).await;
        }
        let Some(note) = note else {
            // `notified` is registered before the queue is looked at again.
            let woken = shared.wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let empty = shared
                .queue
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .notes
                .is_empty();
            if empty {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = woken => {}
                }
            }
            continue;
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = deliver(note, channel.as_ref()) => {}
        }
        shared
            .delivering
            .store(false, std::sync::atomic::Ordering::Release);
        drop(shared);
    }
}

async fn deliver(note: Note, channel: Option<&Channel>) {
    match (note, channel) {
        (Note::Flush(done), _) => {
            let _ = done.send(());
        }
        (Note::Progress(peer, p), _) => {
            if let Some(placeholder) = progress_placeholder(&p) {
                let _ = peer.notify_progress(placeholder).await;
            }
        }
        (Note::CallLog(peer, p), _) => {
            let _ = peer.notify_logging_message(p).await;
        }
        (Note::Log(p), Some(Channel::Session(peer))) => {
            let _ = peer.notify_logging_message(p).await;
        }
        (Note::Resource(uri), Some(Channel::Session(peer))) => {
            let _ = peer
                .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                .await;
        }
        // The sink drops URIs this stream did not ask for.
        (Note::Resource(uri), Some(Channel::Listen(sink))) => {
            let _ = sink.notify_resource_updated(uri).await;
        }
        (Note::Log(_) | Note::Resource(_), _) => {}
    }
}

/// The `_meta` key of Vigil's placeholders: of progress here, and of the
/// answers of `gateway::relayed` (one key, so one look at outgoing text
/// finds both).
pub const PLACEHOLDER_KEY: &str = "io.vigil/relayed";

/// A typed progress notification standing for `written` (the params as the
/// backend wrote them, with the client's token): rmcp's HTTP service sends
/// progress on its call's stream only when it is typed, and typed params
/// would leave reordered and with `1` written as `1.0`. So its `_meta`
/// holds only the written params as text, and the front puts them back in
/// its place on the way out ([`written_progress`]). `None` if `written` is
/// not a progress notification's params.
fn progress_placeholder(
    written: &serde_json::Map<String, serde_json::Value>,
) -> Option<rmcp::model::ProgressNotificationParam> {
    let mut typed: rmcp::model::ProgressNotificationParam =
        serde_json::from_value(serde_json::Value::Object(written.clone())).ok()?;
    let text = serde_json::to_string(written).ok()?;
    let mut meta = serde_json::Map::new();
    meta.insert(PLACEHOLDER_KEY.into(), serde_json::Value::String(text));
    typed.meta = Some(rmcp::model::NotificationMetaObject(
        rmcp::model::MetaObject(meta),
    ));
    Some(typed)
}

/// `text` (one outgoing JSON-RPC message) as the progress notification its
/// placeholder ([`progress_placeholder`]) stands for; `None` when it is no
/// such placeholder.
pub fn written_progress(text: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Message<'a> {
        #[serde(borrow)]
        method: &'a str,
        params: Params,
    }
    #[derive(serde::Deserialize)]
    struct Params {
        #[serde(rename = "_meta")]
        meta: Meta,
    }
    #[derive(serde::Deserialize)]
    struct Meta {
        #[serde(rename = "io.vigil/relayed")]
        written: String,
    }
    let m: Message<'_> = serde_json::from_str(text).ok()?;
    if m.method != "notifications/progress" {
        return None;
    }
    // Only an object stands in params' place.
    let _: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&m.params.meta.written).ok()?;
    Some(format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{}}}"#,
        m.params.meta.written
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_leaves_as_written_through_its_placeholder() {
        let written: serde_json::Map<String, serde_json::Value> = serde_json::from_str(
            r#"{"progressToken":7,"total":4,"progress":1,"message":"m","extra":{"z":1,"a":0.7}}"#,
        )
        .unwrap();
        let placeholder = progress_placeholder(&written).expect("valid progress params");
        let n = rmcp::model::ServerNotification::ProgressNotification(
            rmcp::model::Notification::new(placeholder),
        );
        let text =
            serde_json::to_string(&rmcp::model::ServerJsonRpcMessage::notification(n)).unwrap();
        assert_eq!(
            written_progress(&text).as_deref(),
            Some(
                r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":7,"total":4,"progress":1,"message":"m","extra":{"z":1,"a":0.7}}}"#
            )
        );
        assert_eq!(
            written_progress(
                r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"_meta":{"io.vigil/relayed":"{}"}}}"#
            ),
            None,
            "only progress notifications"
        );
        assert_eq!(
            written_progress(
                r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"_meta":{"io.vigil/relayed":"[1]"}}}"#
            ),
            None,
            "only an object stands in for params"
        );
        let not_progress: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(r#"{"progressToken":7}"#).unwrap();
        assert!(progress_placeholder(&not_progress).is_none());
    }

    fn log(text: &str) -> Note {
        Note::Log(LoggingMessageNotificationParam::new(
            LoggingLevel::Info,
            serde_json::Value::String(text.into()),
        ))
    }

    fn texts(q: &Queue) -> Vec<String> {
        q.notes
            .iter()
            .map(|n| match n {
                Note::Log(p) => p.data.as_str().unwrap_or_default().to_owned(),
                Note::Resource(u) => format!("resource {u}"),
                Note::Flush(_) => "flush".into(),
                Note::Progress(..) => "progress".into(),
                Note::CallLog(..) => "call log".into(),
            })
            .collect()
    }

    fn queue() -> Queue {
        Queue {
            notes: VecDeque::new(),
            dropped: 0,
            channel: None,
        }
    }

    #[test]
    fn a_full_queue_drops_its_oldest_and_counts() {
        let mut q = queue();
        for i in 0..5 {
            q.admit(log(&i.to_string()), 3);
        }
        assert_eq!(texts(&q), ["2", "3", "4"]);
        assert_eq!(q.dropped, 2);
    }

    #[test]
    fn flush_markers_are_never_dropped_nor_count() {
        let mut q = queue();
        let (tx, _rx) = oneshot::channel();
        q.admit(Note::Flush(tx), 2);
        for i in 0..3 {
            q.admit(log(&i.to_string()), 2);
        }
        assert_eq!(texts(&q), ["flush", "1", "2"]);
        assert_eq!(q.dropped, 1);
    }

    #[test]
    fn resource_updates_coalesce_by_uri() {
        let mut q = queue();
        q.admit(Note::Resource("a".into()), 10);
        q.admit(Note::Resource("b".into()), 10);
        q.admit(Note::Resource("a".into()), 10);
        assert_eq!(texts(&q), ["resource a", "resource b"]);
        assert_eq!(q.dropped, 0);
    }
}
