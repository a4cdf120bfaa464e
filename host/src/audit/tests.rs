//! The audit end to end inside the process: the hook, the queue, the writer
//! and a real SQLite store (on disk where a restart matters).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rmcp::model::Extensions;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::*;
use crate::auth::Principal;
use crate::config::AuditConfig;
use crate::redact::{Redactor, Secrets};
use crate::store::sqlite::SqliteStore;
use crate::store::{CallStore, Rows, StoreError};

/// Long enough for a loaded 2-core machine; only bounds waits.
const DEADLINE: Duration = Duration::from_secs(30);

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir =
            std::env::temp_dir().join(format!("vigil-audit-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A store whose `append_calls` waits until the test opens it, and says
/// when a batch is waiting there: the writer can be held busy.
struct Gated {
    inner: SqliteStore,
    open: AtomicBool,
    waiting: AtomicBool,
}

impl Gated {
    fn new(inner: SqliteStore) -> Arc<Gated> {
        Arc::new(Gated {
            inner,
            open: AtomicBool::new(false),
            waiting: AtomicBool::new(false),
        })
    }
}

#[async_trait::async_trait]
impl CallStore for Gated {
    async fn append(&self, calls: Vec<CallRecord>) -> Result<(), StoreError> {
        self.waiting.store(true, Ordering::SeqCst);
        let deadline = tokio::time::Instant::now() + DEADLINE;
        while !self.open.load(Ordering::SeqCst) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        self.inner.append(calls).await
    }
    async fn query(&self, q: &CallQuery) -> Result<Rows<StoredCall>, StoreError> {
        self.inner.query(q).await
    }
    async fn prune(&self, cutoff: SystemTime) -> Result<usize, StoreError> {
        self.inner.prune(cutoff).await
    }
}

fn record(n: usize) -> CallRecord {
    CallRecord {
        at: SystemTime::now(),
        principal: "key:burst".into(),
        issuer: None,
        session: None,
        backend: "demo".into(),
        method: Method::ToolsCall,
        name: format!("demo__echo{n}"),
        outcome: Outcome::Ok,
        duration_us: 10,
        arguments: None,
        search: None,
    }
}

async fn all(store: &dyn CallStore) -> Vec<StoredCall> {
    store
        .query(&CallQuery {
            limit: MAX_LIMIT,
            ..CallQuery::default()
        })
        .await
        .unwrap()
        .rows
}

/// Cancels `shutdown` and waits (bounded) for the writer to end, as `vigil
/// serve` does when it stops.
async fn shut_down(tracker: &TaskTracker, shutdown: &CancellationToken) {
    shutdown.cancel();
    tracker.close();
    tokio::time::timeout(DEADLINE, tracker.wait())
        .await
        .expect("the audit tasks end after shutdown");
}

async fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn records_queued_at_shutdown_are_on_disk_after_it() {
    let dir = TempDir::new("shutdown");
    let store = Gated::new(SqliteStore::open(&dir.0).unwrap());
    let (tracker, shutdown) = (TaskTracker::new(), CancellationToken::new());
    let audit = CallAudit::start(
        Some(store.clone()),
        AuditConfig::default(),
        Redactor::default(),
        &tracker,
        &shutdown,
    );
    for n in 0..600 {
        audit.record(record(n));
    }
    // The writer took a batch and is stuck writing it ...
    wait_until("the writer's first batch", || {
        store.waiting.load(Ordering::SeqCst)
    })
    .await;
    // ... while more records queue up behind it, and shutdown begins.
    for n in 600..2000 {
        audit.record(record(n));
    }
    shutdown.cancel();
    store.open.store(true, Ordering::SeqCst);
    shut_down(&tracker, &shutdown).await;
    drop(store);

    // What a restarted gateway reads from the same data directory.
    let reopened = SqliteStore::open(&dir.0).unwrap();
    let rows = all(&reopened).await;
    assert_eq!(rows.len(), 2000, "every queued record is stored");
    assert_eq!(audit.dropped(), 0);
    let mut names: Vec<String> = rows.into_iter().map(|r| r.call.name).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 2000);
}

#[tokio::test]
async fn a_full_queue_counts_what_it_drops_and_a_late_record_too() {
    let store = Gated::new(SqliteStore::open_in_memory().unwrap());
    let (tracker, shutdown) = (TaskTracker::new(), CancellationToken::new());
    let audit = CallAudit::with_capacity(
        Some(store.clone()),
        AuditConfig::default(),
        Redactor::default(),
        &tracker,
        &shutdown,
        4,
    );
    let before = crate::metrics::get()
        .audit_dropped
        .get_or_create(&crate::metrics::ReasonLabel {
            reason: "queue_full".into(),
        })
        .get();
    // On this single-threaded runtime the writer has not run yet: four fit.
    for n in 0..10 {
        audit.record(record(n));
    }
    assert_eq!(audit.dropped(), 6);
    let after = crate::metrics::get()
        .audit_dropped
        .get_or_create(&crate::metrics::ReasonLabel {
            reason: "queue_full".into(),
        })
        .get();
    assert!(after >= before + 6, "the metric moved: {before} -> {after}");
    store.open.store(true, Ordering::SeqCst);
    shut_down(&tracker, &shutdown).await;
    assert_eq!(all(&*store).await.len(), 4);
    // After the writer stopped, a record is counted, not lost silently.
    audit.record(record(99));
    assert_eq!(audit.dropped(), 7);
}

/// What the HTTP layer puts in a request's extensions: the request's parts,
/// holding the principal the `/mcp` authentication found.
fn http_request(principal: Option<Principal>, session: Option<&str>) -> Extensions {
    let mut req = http::Request::builder();
    if let Some(s) = session {
        req = req.header("mcp-session-id", s);
    }
    let (mut parts, ()) = req.body(()).unwrap().into_parts();
    if let Some(p) = principal {
        parts.extensions.insert(p);
    }
    let mut ext = Extensions::new();
    ext.insert(parts);
    ext
}

#[tokio::test]
async fn the_hook_records_who_what_and_masks_arguments() {
    let store = Arc::new(SqliteStore::open_in_memory().unwrap());
    let (tracker, shutdown) = (TaskTracker::new(), CancellationToken::new());
    let secret = "sk-live-0123456789abcdef";
    let audit = CallAudit::start(
        Some(store.clone()),
        AuditConfig {
            arguments: true,
            ..AuditConfig::default()
        },
        Redactor::new(Secrets::new([secret])),
        &tracker,
        &shutdown,
    );
    let args = json!({"query": "weather", "token": format!("Bearer {secret}")});
    let args = args.as_object().unwrap();
    let session = "6c59366b-e7b1-497e-996c-de166fb6b218";

    let call = audit.begin(
        Method::ToolsCall,
        "demo__echo",
        Some(args),
        &http_request(Some(Principal::key("alice")), Some(session)),
    );
    call.finish("demo", Outcome::Ok);
    // stdio: no HTTP request, so the local user and no session.
    let call = audit.begin(Method::PromptsGet, "demo__greet", None, &Extensions::new());
    call.finish("demo", Outcome::Ok);
    shut_down(&tracker, &shutdown).await;

    let rows = all(&*store).await;
    assert_eq!(rows.len(), 2);
    let (prompt, tool) = (&rows[0].call, &rows[1].call);
    assert_eq!(
        (
            tool.principal.as_str(),
            tool.backend.as_str(),
            tool.name.as_str()
        ),
        ("key:alice", "demo", "demo__echo")
    );
    assert_eq!(
        (tool.method, tool.outcome),
        (Method::ToolsCall, Outcome::Ok)
    );
    assert_eq!(
        tool.session.as_deref(),
        Some(crate::redact::session_tag(session).as_str())
    );
    assert_eq!(
        tool.arguments,
        Some(json!({"query": "weather", "token": "Bearer ***"}))
    );
    assert_eq!(
        (
            prompt.principal.as_str(),
            prompt.session.as_deref(),
            prompt.method
        ),
        ("local", None, Method::PromptsGet)
    );
    assert!(prompt.arguments.is_none());
}

#[tokio::test]
async fn arguments_follow_the_live_setting() {
    let store = Arc::new(SqliteStore::open_in_memory().unwrap());
    let (tracker, shutdown) = (TaskTracker::new(), CancellationToken::new());
    let audit = CallAudit::start(
        Some(store.clone()),
        AuditConfig::default(),
        Redactor::default(),
        &tracker,
        &shutdown,
    );
    let args = json!({"text": "hi"});
    let ext = Extensions::new();
    audit
        .begin(Method::ToolsCall, "a", args.as_object(), &ext)
        .finish("demo", Outcome::Ok);
    // A record passed in with arguments loses them too while they are off.
    let mut direct = record(0);
    direct.arguments = Some(args.clone());
    audit.record(direct);
    let on = AuditConfig {
        arguments: true,
        ..AuditConfig::default()
    };
    assert!(audit.configure(on.clone()), "a change is applied");
    assert!(!audit.configure(on), "the same config is no change");
    audit
        .begin(Method::ToolsCall, "b", args.as_object(), &ext)
        .finish("demo", Outcome::Ok);
    shut_down(&tracker, &shutdown).await;
    let by_name: Vec<(String, Option<serde_json::Value>)> = all(&*store)
        .await
        .into_iter()
        .map(|r| (r.call.name, r.call.arguments))
        .collect();
    assert_eq!(
        by_name,
        [
            ("b".to_owned(), Some(args)),
            ("demo__echo0".to_owned(), None),
            ("a".to_owned(), None),
        ]
    );
}

#[tokio::test]
async fn unrouted_names_are_recorded_only_when_their_backend_is_down() {
    let store = Arc::new(SqliteStore::open_in_memory().unwrap());
    let (tracker, shutdown) = (TaskTracker::new(), CancellationToken::new());
    let audit = CallAudit::start(
        Some(store.clone()),
        AuditConfig::default(),
        Redactor::default(),
        &tracker,
        &shutdown,
    );
    let ext = Extensions::new();
    audit
        .begin(Method::ToolsCall, "nope__x", None, &ext)
        .unrouted(None);
    audit
        .begin(Method::ToolsCall, "files__read", None, &ext)
        .unrouted(Some("files"));
    audit
        .begin(Method::ToolsCall, "files__write", None, &ext)
        .refused("files", Outcome::Denied);
    // Off: nothing is recorded, and nothing fails.
    let off = CallAudit::off();
    assert!(!off.is_on());
    off.begin(Method::ToolsCall, "files__read", None, &ext)
        .finish("files", Outcome::Ok);
    off.record(record(1));
    shut_down(&tracker, &shutdown).await;
    let got: Vec<(String, String, Outcome)> = all(&*store)
        .await
        .into_iter()
        .map(|r| (r.call.name, r.call.backend, r.call.outcome))
        .collect();
    assert_eq!(
        got,
        [
            ("files__write".into(), "files".into(), Outcome::Denied),
            ("files__read".into(), "files".into(), Outcome::Unavailable),
        ]
    );
}
