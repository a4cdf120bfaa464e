//! The store contract as tests, written against the traits only: every
//! implementation runs all of them through [`store_suite!`] with a
//! [`Fixture`] of its own (SQLite in `sqlite/tests.rs`, PostgreSQL in
//! `postgres/tests.rs`).
//!
//! What is particular to one implementation (its schema, its files, rows
//! only a hand-edited database holds) is tested beside it, not here.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;

use super::{AuditEntry, HealthWrite, InstanceRecord, Stores};
use crate::audit::{CallQuery, CallRecord, Method, Outcome, StoredCall};
use crate::health::{HealthState, Transition};

/// One test's store: fresh and empty at first, and opened again by every
/// [`Fixture::open`] (a second handle on the same data, as a restarted
/// gateway gets).
#[async_trait]
pub(crate) trait Fixture: Send + Sync {
    async fn open(&self) -> Stores;
}

/// Runs every test of the suite against the fixture `$fixture` builds
/// (an expression evaluated once per test). With `if_some`, the expression
/// is an `Option` of a fixture, and a test given `None` passes without
/// running (a database server that is not installed; its fixture says so).
macro_rules! store_suite {
    (if_some $fixture:expr) => {
        $crate::store::suite::store_suite!(@each $fixture;
            an_empty_store_reads_nothing,
            transitions_round_trip_every_state,
            transitions_are_newest_limit_oldest_first_per_backend,
            instance_round_trip_and_upsert_replaces,
            a_health_batch_is_applied_in_order,
            restart_count_beyond_i64_saturates,
            health_state_survives_reopening,
            actions_round_trip_newest_limit_oldest_first,
            calls_round_trip_and_survive_reopening,
            the_issuer_of_a_subject_is_kept_and_filtered_on,
            call_filters_limit_and_the_after_cursor,
            call_ids_keep_growing_across_batches,
            prune_deletes_only_calls_older_than_the_cutoff,
            approvals_round_trip_replace_older_digests_and_survive_reopening,
            updates_are_saved_by_phase_listed_newest_first_and_unfinished_found,
        );
    };
    ($fixture:expr) => {
        $crate::store::suite::store_suite!(if_some Some($fixture));
    };
    (@each $fixture:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                let Some(fixture) = $fixture else {
                    return;
                };
                $crate::store::suite::$name(&fixture).await;
            }
        )*
    };
}

pub(crate) use store_suite;

// === what the tests write ===

pub(crate) fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

pub(crate) fn transition(backend: &str, from: HealthState, to: HealthState, n: u64) -> Transition {
    Transition {
        backend: backend.into(),
        from,
        to,
        reason: format!("reason {n}"),
        at: at(1_700_000_000_000 + n),
    }
}

pub(crate) fn instance(backend: &str, state: HealthState) -> InstanceRecord {
    InstanceRecord {
        backend: backend.into(),
        state,
        restart_count: 3,
        consecutive_failures: 2,
        quarantine_reason: None,
        updated_at: at(1_700_000_000_123),
    }
}

pub(crate) fn audit_entry(n: u64) -> AuditEntry {
    AuditEntry {
        principal: if n.is_multiple_of(2) {
            "system:health".into()
        } else {
            "ops-token".into()
        },
        action: "restart".into(),
        target: format!("backend-{n}"),
        outcome: if n.is_multiple_of(3) {
            "denied: role viewer".into()
        } else {
            "ok".into()
        },
        at: at(1_700_000_000_000 + n),
    }
}

pub(crate) fn call(n: u64, principal: &str, backend: &str, outcome: Outcome) -> CallRecord {
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
        search: None,
    }
}

/// Writes `t`, alone in its batch.
pub(crate) async fn record(s: &Stores, t: Transition) {
    s.health
        .write(vec![HealthWrite::Transition(t)])
        .await
        .unwrap();
}

/// Saves `r`, alone in its batch.
pub(crate) async fn save(s: &Stores, r: InstanceRecord) {
    s.health
        .write(vec![HealthWrite::Instance(r)])
        .await
        .unwrap();
}

async fn reasons(s: &Stores, backend: &str, limit: usize) -> Vec<String> {
    let read = s.health.transitions(backend, limit).await.unwrap();
    assert!(read.skipped.is_empty(), "{:?}", read.skipped);
    read.rows.into_iter().map(|t| t.reason).collect()
}

async fn call_ids(s: &Stores, q: &CallQuery) -> Vec<i64> {
    let read = s.calls.query(q).await.unwrap();
    assert!(read.skipped.is_empty(), "{:?}", read.skipped);
    read.rows.iter().map(|r| r.id).collect()
}

// === the tests ===

pub(crate) async fn an_empty_store_reads_nothing(f: &impl Fixture) {
    let s = f.open().await;
    assert_eq!(s.health.load_instances().await.unwrap(), Default::default());
    assert_eq!(
        s.health.transitions("alpha", 10).await.unwrap(),
        Default::default()
    );
    assert_eq!(s.actions.list(10).await.unwrap(), Default::default());
    assert_eq!(
        s.calls.query(&CallQuery::default()).await.unwrap(),
        Default::default()
    );
    assert_eq!(s.calls.prune(SystemTime::now()).await.unwrap(), 0);
}

pub(crate) async fn transitions_round_trip_every_state(f: &impl Fixture) {
    let s = f.open().await;
    let all: Vec<Transition> = HealthState::ALL
        .iter()
        .zip(HealthState::ALL.iter().cycle().skip(1))
        .enumerate()
        .map(|(n, (&from, &to))| transition("alpha", from, to, n as u64))
        .collect();
    for t in &all {
        record(&s, t.clone()).await;
    }
    assert_eq!(s.health.transitions("alpha", 100).await.unwrap().rows, all);
}

pub(crate) async fn transitions_are_newest_limit_oldest_first_per_backend(f: &impl Fixture) {
    let s = f.open().await;
    for n in 0..10 {
        record(
            &s,
            transition("alpha", HealthState::Running, HealthState::Offline, n),
        )
        .await;
        record(
            &s,
            transition("beta", HealthState::Offline, HealthState::Running, 100 + n),
        )
        .await;
    }
    assert_eq!(
        reasons(&s, "alpha", 3).await,
        ["reason 7", "reason 8", "reason 9"]
    );
    assert_eq!(reasons(&s, "beta", 2).await, ["reason 108", "reason 109"]);
    assert_eq!(reasons(&s, "alpha", 1000).await.len(), 10);
    assert_eq!(reasons(&s, "alpha", usize::MAX).await.len(), 10);
    assert!(reasons(&s, "alpha", 0).await.is_empty());
    assert!(reasons(&s, "gamma", 10).await.is_empty());
}

pub(crate) async fn instance_round_trip_and_upsert_replaces(f: &impl Fixture) {
    let s = f.open().await;
    let mut a = instance("alpha", HealthState::Quarantined);
    a.quarantine_reason = Some("5 failed starts".into());
    a.restart_count = u64::from(u32::MAX) + 7;
    let b = instance("beta", HealthState::Running);
    save(&s, b.clone()).await;
    save(&s, a.clone()).await;
    assert_eq!(
        s.health.load_instances().await.unwrap().rows,
        [a.clone(), b.clone()],
        "ordered by backend"
    );

    let released = InstanceRecord {
        state: HealthState::Starting,
        consecutive_failures: 0,
        quarantine_reason: None,
        updated_at: at(1_800_000_000_000),
        ..a
    };
    save(&s, released.clone()).await;
    assert_eq!(
        s.health.load_instances().await.unwrap().rows,
        [released.clone(), b.clone()]
    );
    // One record read alone, as a follower reads it.
    assert_eq!(s.health.instance("alpha").await.unwrap(), Some(released));
    assert_eq!(s.health.instance("beta").await.unwrap(), Some(b));
    assert_eq!(s.health.instance("gamma").await.unwrap(), None);
}

/// What the health writer hands over: transitions and records of several
/// backends, interleaved; the log keeps their order and the last record
/// of a backend wins.
pub(crate) async fn a_health_batch_is_applied_in_order(f: &impl Fixture) {
    let s = f.open().await;
    let mut batch = Vec::new();
    for n in 0..6 {
        let backend = if n % 2 == 0 { "alpha" } else { "beta" };
        batch.push(HealthWrite::Transition(transition(
            backend,
            HealthState::Starting,
            HealthState::Running,
            n,
        )));
        let mut r = instance(backend, HealthState::Running);
        r.restart_count = n;
        batch.push(HealthWrite::Instance(r));
    }
    s.health.write(batch).await.unwrap();
    s.health.write(Vec::new()).await.unwrap();
    assert_eq!(
        reasons(&s, "alpha", 10).await,
        ["reason 0", "reason 2", "reason 4"]
    );
    assert_eq!(
        reasons(&s, "beta", 10).await,
        ["reason 1", "reason 3", "reason 5"]
    );
    let counts: Vec<(String, u64)> = s
        .health
        .load_instances()
        .await
        .unwrap()
        .rows
        .into_iter()
        .map(|r| (r.backend, r.restart_count))
        .collect();
    assert_eq!(counts, [("alpha".into(), 4), ("beta".into(), 5)]);
}

/// Restart counts are kept as signed 64-bit integers: beyond, they
/// saturate (far beyond any real count) rather than fail the write.
pub(crate) async fn restart_count_beyond_i64_saturates(f: &impl Fixture) {
    let s = f.open().await;
    let mut a = instance("alpha", HealthState::Running);
    a.restart_count = u64::MAX;
    save(&s, a).await;
    assert_eq!(
        s.health.load_instances().await.unwrap().rows[0].restart_count,
        i64::MAX as u64
    );
}

/// The acceptance point: quarantine and history survive a gateway restart.
pub(crate) async fn health_state_survives_reopening(f: &impl Fixture) {
    let mut q = instance("alpha", HealthState::Quarantined);
    q.quarantine_reason = Some("restarts kept failing".into());
    let t = transition(
        "alpha",
        HealthState::Restarting,
        HealthState::Quarantined,
        1,
    );
    let a = audit_entry(2);
    {
        let s = f.open().await;
        save(&s, q.clone()).await;
        record(&s, t.clone()).await;
        s.actions.record(a.clone()).await.unwrap();
    }
    let s = f.open().await;
    assert_eq!(s.health.load_instances().await.unwrap().rows, [q]);
    assert_eq!(s.health.transitions("alpha", 10).await.unwrap().rows, [t]);
    assert_eq!(s.actions.list(10).await.unwrap().rows, [a]);
}

pub(crate) async fn actions_round_trip_newest_limit_oldest_first(f: &impl Fixture) {
    let s = f.open().await;
    let all: Vec<AuditEntry> = (0..6).map(audit_entry).collect();
    for a in &all {
        s.actions.record(a.clone()).await.unwrap();
    }
    assert_eq!(s.actions.list(100).await.unwrap().rows, all);
    assert_eq!(s.actions.list(2).await.unwrap().rows, all[4..]);
    assert!(s.actions.list(0).await.unwrap().rows.is_empty());
}

pub(crate) async fn calls_round_trip_and_survive_reopening(f: &impl Fixture) {
    let mut first = call(1, "key:alice", "files", Outcome::Ok);
    first.arguments = Some(serde_json::json!({"path": "/etc/motd", "n": 3}));
    let mut second = call(2, "local", "search", Outcome::RateLimited);
    second.session = None;
    second.method = Method::PromptsGet;
    // A find_tool, with its figures.
    let mut third = call(3, "key:alice", "", Outcome::Ok);
    third.name = "find_tool".into();
    third.search = Some(crate::audit::Searched {
        query_bytes: 42,
        results: 8,
    });
    {
        let s = f.open().await;
        s.calls
            .append(vec![first.clone(), second.clone(), third.clone()])
            .await
            .unwrap();
    }
    let s = f.open().await;
    let rows = s.calls.query(&CallQuery::default()).await.unwrap();
    assert!(rows.skipped.is_empty());
    let got: Vec<&CallRecord> = rows.rows.iter().map(|r| &r.call).collect();
    assert_eq!(got, [&third, &second, &first], "newest first");
    assert!(rows.rows[0].id > rows.rows[1].id, "{:?}", rows.rows);
}

pub(crate) async fn the_issuer_of_a_subject_is_kept_and_filtered_on(f: &impl Fixture) {
    let s = f.open().await;
    let of = |n, issuer: &str| CallRecord {
        issuer: Some(issuer.into()),
        ..call(n, "sub:alice", "files", Outcome::Ok)
    };
    let (a, b) = (of(1, "https://a.example"), of(2, "https://b.example"));
    s.calls
        .append(vec![a.clone(), b, call(3, "key:ci", "files", Outcome::Ok)])
        .await
        .unwrap();
    let q = CallQuery {
        issuer: Some("https://a.example".into()),
        ..CallQuery::default()
    };
    let rows = s.calls.query(&q).await.unwrap();
    let got: Vec<&CallRecord> = rows.rows.iter().map(|r| &r.call).collect();
    assert_eq!(got, [&a], "alice of a, not alice of b");
    let all = s.calls.query(&CallQuery::default()).await.unwrap();
    assert_eq!(all.rows[0].call.issuer, None, "a key has no issuer");
}

pub(crate) async fn call_filters_limit_and_the_after_cursor(f: &impl Fixture) {
    let s = f.open().await;
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
    s.calls.append(batch).await.unwrap();
    // Ids as the store gave them; the calls' numbers as the test wrote
    // them (1..=10 in order), whatever ids the store starts from.
    let ids = call_ids(&s, &CallQuery::default()).await;
    assert_eq!(ids.len(), 10);
    let id = |n: usize| ids[10 - n];
    let q = |f: fn(&mut CallQuery)| {
        let mut q = CallQuery::default();
        f(&mut q);
        q
    };
    let ns = |got: Vec<i64>| -> Vec<usize> {
        got.iter()
            .map(|g| 10 - ids.iter().position(|i| i == g).unwrap())
            .collect()
    };
    assert_eq!(ns(ids.clone()), [10, 9, 8, 7, 6, 5, 4, 3, 2, 1]);
    assert_eq!(ns(call_ids(&s, &q(|q| q.limit = 3)).await), [10, 9, 8]);
    assert_eq!(
        ns(call_ids(&s, &q(|q| q.principal = Some("key:alice".into()))).await),
        [10, 8, 6, 4, 2]
    );
    assert_eq!(
        ns(call_ids(&s, &q(|q| q.backend = Some("files".into()))).await),
        [5, 4, 3, 2, 1]
    );
    assert_eq!(
        ns(call_ids(&s, &q(|q| q.outcome = Some(Outcome::Error))).await),
        [9, 6, 3]
    );
    assert_eq!(
        ns(call_ids(&s, &q(|q| q.since = Some(at(1_700_000_000_000 + 8 * 1000)))).await),
        [10, 9, 8]
    );
    let after = |n: usize, limit: usize| CallQuery {
        after: Some(id(n)),
        limit,
        ..CallQuery::default()
    };
    assert_eq!(
        ns(call_ids(&s, &after(4, 100)).await),
        [5, 6, 7, 8, 9, 10],
        "oldest first"
    );
    assert_eq!(ns(call_ids(&s, &after(4, 2)).await), [5, 6]);
    let all_filters = CallQuery {
        principal: Some("key:bob".into()),
        backend: Some("files".into()),
        outcome: Some(Outcome::Ok),
        ..after(2, 100)
    };
    assert_eq!(ns(call_ids(&s, &all_filters).await), [5]);
    assert!(call_ids(&s, &after(10, 100)).await.is_empty());
}

/// `vigil audit --follow` pages with `after`: an id handed out once is
/// below every later one, batch after batch.
pub(crate) async fn call_ids_keep_growing_across_batches(f: &impl Fixture) {
    let s = f.open().await;
    s.calls
        .append(vec![call(1, "local", "files", Outcome::Ok)])
        .await
        .unwrap();
    let first = call_ids(&s, &CallQuery::default()).await;
    s.calls
        .append(vec![
            call(2, "local", "files", Outcome::Ok),
            call(3, "local", "files", Outcome::Ok),
        ])
        .await
        .unwrap();
    let later = call_ids(
        &s,
        &CallQuery {
            after: Some(first[0]),
            ..CallQuery::default()
        },
    )
    .await;
    assert_eq!(later.len(), 2);
    assert!(first[0] < later[0] && later[0] < later[1], "{later:?}");
}

pub(crate) async fn prune_deletes_only_calls_older_than_the_cutoff(f: &impl Fixture) {
    let s = f.open().await;
    let batch: Vec<CallRecord> = (0..20)
        .map(|n| call(n, "local", "files", Outcome::Ok))
        .collect();
    let cutoff = batch[13].at;
    s.calls.append(batch).await.unwrap();
    assert_eq!(s.calls.prune(cutoff).await.unwrap(), 13);
    let left: Vec<StoredCall> = s.calls.query(&CallQuery::default()).await.unwrap().rows;
    assert_eq!(left.len(), 7);
    assert!(left.iter().all(|r| r.call.at >= cutoff));
    assert_eq!(s.calls.prune(cutoff).await.unwrap(), 0);
}

pub(crate) async fn approvals_round_trip_replace_older_digests_and_survive_reopening(
    f: &impl Fixture,
) {
    use crate::catalog::digest::digest;
    use crate::catalog::pin::{PinKey, PinKind};
    let key = |kind, name: &str| PinKey {
        kind,
        name: name.into(),
    };
    let d = |v: u64| digest(&v).unwrap();
    let s = f.open().await;
    let (backends, pins) = s.pins.approvals().await.unwrap();
    assert!(backends.is_empty() && pins.rows.is_empty());
    // A first use with nothing to guard still marks the backend approved.
    s.pins
        .approve("empty", vec![], "system:first-use", at(1))
        .await
        .unwrap();
    s.pins
        .approve(
            "files",
            vec![
                (key(PinKind::Tool, "read"), d(1)),
                (key(PinKind::Prompt, "read"), d(2)),
            ],
            "system:first-use",
            at(2),
        )
        .await
        .unwrap();
    s.pins
        .approve(
            "files",
            vec![
                (key(PinKind::Tool, "read"), d(3)),
                (key(PinKind::ResourceTemplate, "file:///{p}"), d(4)),
            ],
            "alice",
            at(3),
        )
        .await
        .unwrap();
    let reopened = f.open().await;
    let (backends, pins) = reopened.pins.approvals().await.unwrap();
    assert_eq!(backends, ["empty", "files"]);
    assert!(pins.skipped.is_empty());
    let got: Vec<(String, PinKind, String, _)> = pins
        .rows
        .into_iter()
        .map(|r| (r.backend, r.key.kind, r.key.name.to_string(), r.digest))
        .collect();
    let mut want = vec![
        ("files".to_owned(), PinKind::Prompt, "read".to_owned(), d(2)),
        (
            "files".to_owned(),
            PinKind::ResourceTemplate,
            "file:///{p}".to_owned(),
            d(4),
        ),
        ("files".to_owned(), PinKind::Tool, "read".to_owned(), d(3)),
    ];
    want.sort_by(|a, b| (a.1.as_str(), &a.2).cmp(&(b.1.as_str(), &b.2)));
    assert_eq!(got, want, "the newer digest of the tool replaced the older");
}

pub(crate) async fn updates_are_saved_by_phase_listed_newest_first_and_unfinished_found(
    f: &impl Fixture,
) {
    use crate::rollout::{Phase, Spec, UpdateRecord};
    let update = |backend: &str, n: u64, phase: Phase| UpdateRecord {
        id: format!("u{n}"),
        backend: backend.into(),
        strategy: "blue-green".into(),
        from: Spec {
            image: Some(format!("i:{}", n - 1)),
            ..Spec::default()
        },
        to: Spec {
            image: Some(format!("i:{n}")),
            ..Spec::default()
        },
        phase,
        reason: None,
        diff: None,
        principal: "alice".into(),
        approved_by: None,
        declared: None,
        started_at: at(n * 1000),
        ended_at: phase.is_final().then(|| at(n * 1000 + 500)),
    };
    let s = f.open().await;
    assert!(
        s.updates
            .unfinished_updates()
            .await
            .unwrap()
            .rows
            .is_empty()
    );
    s.updates
        .save_update(&update("svc", 1, Phase::Starting))
        .await
        .unwrap();
    s.updates
        .save_update(&update("svc", 1, Phase::Succeeded))
        .await
        .unwrap();
    s.updates
        .save_update(&update("svc", 2, Phase::Held))
        .await
        .unwrap();
    s.updates
        .save_update(&update("other", 3, Phase::Baking))
        .await
        .unwrap();
    let reopened = f.open().await;
    let svc = reopened.updates.updates("svc", 10).await.unwrap();
    assert!(svc.skipped.is_empty());
    assert_eq!(
        svc.rows,
        vec![
            update("svc", 2, Phase::Held),
            update("svc", 1, Phase::Succeeded)
        ],
        "newest first; the later phase replaced the earlier"
    );
    assert_eq!(
        reopened.updates.updates("svc", 1).await.unwrap().rows.len(),
        1
    );
    let open: Vec<(String, String)> = reopened
        .updates
        .unfinished_updates()
        .await
        .unwrap()
        .rows
        .into_iter()
        .map(|u| (u.backend, u.id))
        .collect();
    assert_eq!(
        open,
        [
            ("svc".to_owned(), "u2".to_owned()),
            ("other".to_owned(), "u3".to_owned())
        ]
    );
}
