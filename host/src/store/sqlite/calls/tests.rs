//! What only the SQLite `calls` table has: its indexes, its chunked prune,
//! and rows a newer Vigil (or a hand edit) left. The contract itself is
//! the store suite's (`store::suite`).

use std::sync::Arc;

use super::super::SqliteStore;
use super::*;
use crate::audit::Outcome;
use crate::store::CallStore;
use crate::store::suite::call;

fn memory() -> Arc<SqliteStore> {
    Arc::new(SqliteStore::open_in_memory().unwrap())
}

#[tokio::test]
async fn prune_deletes_a_backlog_larger_than_a_chunk() {
    let store = memory();
    let batch: Vec<CallRecord> = (0..(PRUNE_CHUNK as u64 + 7))
        .map(|n| call(n, "local", "files", Outcome::Ok))
        .collect();
    // Everything before the last 7 records, over more than one chunk.
    let cutoff = batch[PRUNE_CHUNK].at;
    store.append(batch).await.unwrap();
    assert_eq!(store.prune(cutoff).await.unwrap(), PRUNE_CHUNK);
    let left = store
        .query(&CallQuery {
            limit: 100,
            ..CallQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(left.rows.len(), 7);
    assert!(left.rows.iter().all(|r| r.call.at >= cutoff));
    assert_eq!(store.prune(cutoff).await.unwrap(), 0);
}

#[tokio::test]
async fn rows_a_newer_vigil_wrote_are_skipped_and_named() {
    let store = memory();
    store
        .append(vec![
            call(1, "local", "files", Outcome::Ok),
            call(2, "local", "files", Outcome::Ok),
            call(3, "local", "files", Outcome::Ok),
        ])
        .await
        .unwrap();
    {
        let conn = store.conn();
        conn.execute("UPDATE calls SET outcome = 'vetoed' WHERE id = 2", [])
            .unwrap();
        conn.execute("UPDATE calls SET arguments = '{not json' WHERE id = 3", [])
            .unwrap();
    }
    let rows = store.query(&CallQuery::default()).await.unwrap();
    let ids: Vec<i64> = rows.rows.iter().map(|r| r.id).collect();
    assert_eq!(ids, [1]);
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
    let store = memory();
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
