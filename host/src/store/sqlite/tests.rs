use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::*;

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir =
            std::env::temp_dir().join(format!("vigil-store-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

fn transition(backend: &str, from: HealthState, to: HealthState, n: u64) -> Transition {
    Transition {
        backend: backend.into(),
        from,
        to,
        reason: format!("reason {n}"),
        at: at(1_700_000_000_000 + n),
    }
}

fn instance(backend: &str, state: HealthState) -> InstanceRecord {
    InstanceRecord {
        backend: backend.into(),
        state,
        restart_count: 3,
        consecutive_failures: 2,
        quarantine_reason: None,
        updated_at: at(1_700_000_000_123),
    }
}

fn audit_entry(n: u64) -> AuditEntry {
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

fn memory() -> SqliteStore {
    SqliteStore::open_in_memory().unwrap()
}

#[test]
fn transitions_round_trip_every_state() {
    let store = memory();
    let all: Vec<Transition> = HealthState::ALL
        .iter()
        .zip(HealthState::ALL.iter().cycle().skip(1))
        .enumerate()
        .map(|(n, (&from, &to))| transition("alpha", from, to, n as u64))
        .collect();
    for t in &all {
        store.record_transition(t).unwrap();
    }
    assert_eq!(store.transitions("alpha", 100).unwrap(), all);
}

#[test]
fn transitions_are_newest_limit_oldest_first_per_backend() {
    let store = memory();
    for n in 0..10 {
        store
            .record_transition(&transition(
                "alpha",
                HealthState::Running,
                HealthState::Offline,
                n,
            ))
            .unwrap();
        store
            .record_transition(&transition(
                "beta",
                HealthState::Offline,
                HealthState::Running,
                100 + n,
            ))
            .unwrap();
    }
    let reasons = |v: Vec<Transition>| v.into_iter().map(|t| t.reason).collect::<Vec<_>>();
    assert_eq!(
        reasons(store.transitions("alpha", 3).unwrap()),
        ["reason 7", "reason 8", "reason 9"]
    );
    assert_eq!(
        reasons(store.transitions("beta", 2).unwrap()),
        ["reason 108", "reason 109"]
    );
    assert_eq!(store.transitions("alpha", 1000).unwrap().len(), 10);
    assert_eq!(store.transitions("alpha", usize::MAX).unwrap().len(), 10);
    assert!(store.transitions("alpha", 0).unwrap().is_empty());
    assert!(store.transitions("gamma", 10).unwrap().is_empty());
}

#[test]
fn instance_round_trip_and_upsert_replaces() {
    let store = memory();
    let mut a = instance("alpha", HealthState::Quarantined);
    a.quarantine_reason = Some("5 failed starts".into());
    a.restart_count = u64::from(u32::MAX) + 7;
    let b = instance("beta", HealthState::Running);
    store.save_instance(&b).unwrap();
    store.save_instance(&a).unwrap();
    assert_eq!(store.load_instances().unwrap(), [a.clone(), b.clone()]);

    let released = InstanceRecord {
        state: HealthState::Starting,
        consecutive_failures: 0,
        quarantine_reason: None,
        updated_at: at(1_800_000_000_000),
        ..a
    };
    store.save_instance(&released).unwrap();
    assert_eq!(store.load_instances().unwrap(), [released, b]);
}

#[test]
fn restart_count_beyond_i64_saturates() {
    let store = memory();
    let mut a = instance("alpha", HealthState::Running);
    a.restart_count = u64::MAX;
    store.save_instance(&a).unwrap();
    assert_eq!(
        store.load_instances().unwrap()[0].restart_count,
        i64::MAX as u64
    );
}

#[test]
fn audit_round_trip_newest_limit_oldest_first() {
    let store = memory();
    let all: Vec<AuditEntry> = (0..6).map(audit_entry).collect();
    for a in &all {
        store.record_audit(a).unwrap();
    }
    assert_eq!(store.audit(100).unwrap(), all);
    assert_eq!(store.audit(2).unwrap(), all[4..]);
    assert!(store.audit(0).unwrap().is_empty());
}

#[test]
fn corrupt_values_are_errors_not_panics() {
    let store = memory();
    store
        .save_instance(&instance("alpha", HealthState::Running))
        .unwrap();
    store
        .record_transition(&transition(
            "alpha",
            HealthState::Starting,
            HealthState::Running,
            1,
        ))
        .unwrap();
    store.record_audit(&audit_entry(1)).unwrap();

    store
        .conn()
        .execute("UPDATE instances SET state = 'exploded'", [])
        .unwrap();
    let e = store.load_instances().unwrap_err();
    assert!(
        matches!(&e, StoreError::Corrupt { column: "instances.state", value } if value == "exploded"),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "store: bad value in column instances.state: exploded"
    );

    store
        .conn()
        .execute(
            "UPDATE instances SET state = 'running', consecutive_failures = -1",
            [],
        )
        .unwrap();
    let e = store.load_instances().unwrap_err();
    assert!(
        matches!(&e, StoreError::Corrupt { column: "instances.consecutive_failures", value } if value == "-1")
    );

    store
        .conn()
        .execute("UPDATE transitions SET to_state = 'Running'", [])
        .unwrap();
    let e = store.transitions("alpha", 10).unwrap_err();
    assert!(
        matches!(&e, StoreError::Corrupt { column: "transitions.to_state", value } if value == "Running")
    );

    store
        .conn()
        .execute("UPDATE audit SET at = -5", [])
        .unwrap();
    let e = store.audit(10).unwrap_err();
    assert!(matches!(&e, StoreError::Corrupt { column: "audit.at", value } if value == "-5"));
}

#[test]
fn prune_keeps_newest_per_backend() {
    let store = memory();
    for n in 0..5 {
        store
            .record_transition(&transition(
                "alpha",
                HealthState::Running,
                HealthState::Offline,
                n,
            ))
            .unwrap();
    }
    store
        .record_transition(&transition(
            "beta",
            HealthState::Starting,
            HealthState::Running,
            50,
        ))
        .unwrap();
    assert_eq!(store.prune_transitions(2).unwrap(), 3);
    let reasons: Vec<String> = store
        .transitions("alpha", 10)
        .unwrap()
        .into_iter()
        .map(|t| t.reason)
        .collect();
    assert_eq!(reasons, ["reason 3", "reason 4"]);
    assert_eq!(store.transitions("beta", 10).unwrap().len(), 1);
    assert_eq!(store.prune_transitions(2).unwrap(), 0);

    // Ids are never reused, so new rows still sort after the kept ones.
    store
        .record_transition(&transition(
            "alpha",
            HealthState::Offline,
            HealthState::Restarting,
            5,
        ))
        .unwrap();
    let reasons: Vec<String> = store
        .transitions("alpha", 10)
        .unwrap()
        .into_iter()
        .map(|t| t.reason)
        .collect();
    assert_eq!(reasons, ["reason 3", "reason 4", "reason 5"]);

    assert_eq!(store.prune_transitions(0).unwrap(), 4);
    assert!(store.transitions("alpha", 10).unwrap().is_empty());
}

#[test]
fn setup_is_idempotent_and_refuses_a_newer_schema() {
    let mut conn = Connection::open_in_memory().unwrap();
    setup(&mut conn, false).unwrap();
    setup(&mut conn, false).unwrap();
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, MIGRATIONS.len() as i64);

    conn.pragma_update(None, "user_version", 99).unwrap();
    let e = setup(&mut conn, false).unwrap_err();
    assert!(
        matches!(&e, StoreError::Corrupt { column: "PRAGMA user_version", value } if value.starts_with("99 "))
    );
}

/// The acceptance point: quarantine and history survive a gateway restart.
#[test]
fn file_store_keeps_state_across_reopen() {
    let dir = TempDir::new("reopen");
    let data_dir = dir.path().join("nested").join("data");
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
        let store = SqliteStore::open(&data_dir).unwrap();
        store.save_instance(&q).unwrap();
        store.record_transition(&t).unwrap();
        store.record_audit(&a).unwrap();
        let mode: String = store
            .conn()
            .pragma_query_value(None, "journal_mode", |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }
    assert!(data_dir.join(FILE_NAME).is_file());

    let store = SqliteStore::open(&data_dir).unwrap();
    assert_eq!(store.load_instances().unwrap(), [q]);
    assert_eq!(store.transitions("alpha", 10).unwrap(), [t]);
    assert_eq!(store.audit(10).unwrap(), [a]);
}

#[test]
fn open_where_the_dir_cannot_be_created_names_the_path() {
    let dir = TempDir::new("baddir");
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, b"not a directory").unwrap();
    let wanted = blocker.join("data");

    let e = SqliteStore::open(&wanted).unwrap_err();
    let StoreError::Dir { path, .. } = &e else {
        panic!("expected StoreError::Dir, got {e:?}")
    };
    assert_eq!(path, &wanted.display().to_string());
    assert!(
        e.to_string().contains(&*wanted.display().to_string()),
        "{e}"
    );
}
