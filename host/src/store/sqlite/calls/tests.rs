use std::path::PathBuf;
use std::time::{Duration, UNIX_EPOCH};

use super::super::SqliteStore;
use super::*;
use crate::store::Store;

fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

fn call(n: u64, principal: &str, backend: &str, outcome: Outcome) -> CallRecord {
    CallRecord {
        at: at(1_700_000_000_000 + n * 1000),
        principal: principal.into(),
        issuer: None,
        session: Some(format!("s-{n:08x}")),
        backend: backend.into(),
        method: Method::ToolsCall,
        name: format!("{backend}__tool{n}"),
        outcome,
        duration_us: 100 + n,
        arguments: None,
    }
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir =
            std::env::temp_dir().join(format!("vigil-calls-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn ids(rows: &Rows<StoredCall>) -> Vec<i64> {
    rows.rows.iter().map(|r| r.id).collect()
}

#[test]
fn a_batch_round_trips_and_survives_reopening() {
    let dir = TempDir::new("round-trip");
    let mut first = call(1, "key:alice", "files", Outcome::Ok);
    first.arguments = Some(serde_json::json!({"path": "/etc/motd", "n": 3}));
    let mut second = call(2, "local", "search", Outcome::RateLimited);
    second.session = None;
    second.method = Method::PromptsGet;
    {
        let store = SqliteStore::open(&dir.0).unwrap();
        store
            .append_calls(&[first.clone(), second.clone()])
            .unwrap();
    }
    let store = SqliteStore::open(&dir.0).unwrap();
    let rows = store.calls(&CallQuery::default()).unwrap();
    assert!(rows.skipped.is_empty());
    let got: Vec<&CallRecord> = rows.rows.iter().map(|r| &r.call).collect();
    assert_eq!(got, [&second, &first], "newest first");
    assert_eq!(ids(&rows), [2, 1]);
}

#[test]
fn the_issuer_of_a_subject_is_kept_and_filtered_on() {
    let store = SqliteStore::open_in_memory().unwrap();
    let of = |n, issuer: &str| CallRecord {
        issuer: Some(issuer.into()),
        ..call(n, "sub:alice", "files", Outcome::Ok)
    };
    let (a, b) = (of(1, "https://a.example"), of(2, "https://b.example"));
    store
        .append_calls(&[a.clone(), b, call(3, "key:ci", "files", Outcome::Ok)])
        .unwrap();
    let q = CallQuery {
        issuer: Some("https://a.example".into()),
        ..CallQuery::default()
    };
    let rows = store.calls(&q).unwrap();
    let got: Vec<&CallRecord> = rows.rows.iter().map(|r| &r.call).collect();
    assert_eq!(got, [&a], "alice of a, not alice of b");
    let all = store.calls(&CallQuery::default()).unwrap();
    assert_eq!(all.rows[0].call.issuer, None, "a key has no issuer");
}

#[test]
fn filters_limit_and_the_after_cursor() {
    let store = SqliteStore::open_in_memory().unwrap();
    let batch: Vec<CallRecord> = (1..=10)
        .map(|n| {
            let who = if n % 2 == 0 { "key:alice" } else { "key:bob" };
            let backend = if n <= 5 { "files" } else { "search" };
            let outcome = if n % 3 == 0 {
                Outcome::Error
            } else {
                Outcome::Ok
            };
            call(n, who, backend, outcome)
        })
        .collect();
    store.append_calls(&batch).unwrap();
    let q = |f: fn(&mut CallQuery)| {
        let mut q = CallQuery::default();
        f(&mut q);
        ids(&store.calls(&q).unwrap())
    };
    assert_eq!(q(|_| {}), [10, 9, 8, 7, 6, 5, 4, 3, 2, 1]);
    assert_eq!(q(|q| q.limit = 3), [10, 9, 8]);
    assert_eq!(
        q(|q| q.principal = Some("key:alice".into())),
        [10, 8, 6, 4, 2]
    );
    assert_eq!(q(|q| q.backend = Some("files".into())), [5, 4, 3, 2, 1]);
    assert_eq!(q(|q| q.outcome = Some(Outcome::Error)), [9, 6, 3]);
    assert_eq!(
        q(|q| q.since = Some(at(1_700_000_000_000 + 8 * 1000))),
        [10, 9, 8]
    );
    assert_eq!(
        q(|q| q.after = Some(4)),
        [5, 6, 7, 8, 9, 10],
        "oldest first"
    );
    assert_eq!(
        q(|q| {
            q.after = Some(4);
            q.limit = 2;
        }),
        [5, 6]
    );
    assert_eq!(
        q(|q| {
            q.after = Some(2);
            q.principal = Some("key:bob".into());
            q.backend = Some("files".into());
            q.outcome = Some(Outcome::Ok);
        }),
        [5]
    );
    assert!(q(|q| q.after = Some(10)).is_empty());
}

#[test]
fn prune_deletes_only_what_is_older_than_the_cutoff() {
    let store = SqliteStore::open_in_memory().unwrap();
    let batch: Vec<CallRecord> = (0..(PRUNE_CHUNK as u64 + 7))
        .map(|n| call(n, "local", "files", Outcome::Ok))
        .collect();
    store.append_calls(&batch).unwrap();
    // Everything before the last 7 records, over more than one chunk.
    let cutoff = batch[PRUNE_CHUNK].at;
    assert_eq!(store.prune_calls(cutoff).unwrap(), PRUNE_CHUNK);
    let left = store
        .calls(&CallQuery {
            limit: 100,
            ..CallQuery::default()
        })
        .unwrap();
    assert_eq!(left.rows.len(), 7);
    assert!(left.rows.iter().all(|r| r.call.at >= cutoff));
    assert_eq!(store.prune_calls(cutoff).unwrap(), 0);
}

#[test]
fn rows_a_newer_vigil_wrote_are_skipped_and_named() {
    let store = SqliteStore::open_in_memory().unwrap();
    store
        .append_calls(&[
            call(1, "local", "files", Outcome::Ok),
            call(2, "local", "files", Outcome::Ok),
            call(3, "local", "files", Outcome::Ok),
        ])
        .unwrap();
    {
        let conn = store.conn();
        conn.execute("UPDATE calls SET outcome = 'vetoed' WHERE id = 2", [])
            .unwrap();
        conn.execute("UPDATE calls SET arguments = '{not json' WHERE id = 3", [])
            .unwrap();
    }
    let rows = store.calls(&CallQuery::default()).unwrap();
    assert_eq!(ids(&rows), [1]);
    let skipped: Vec<String> = rows.skipped.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        skipped,
        [
            "calls row 3 of backend `files`: arguments `{not json` is not JSON",
            "calls row 2 of backend `files`: outcome `vetoed` is not a value this build knows (written by a newer Vigil?)",
        ]
    );
}

#[test]
fn the_schema_has_the_indexes_the_reads_use() {
    let store = SqliteStore::open_in_memory().unwrap();
    let conn = store.conn();
    let mut stmt = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'calls' ORDER BY name")
        .unwrap();
    let names: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(names, ["calls_at", "calls_principal_id"]);
}
