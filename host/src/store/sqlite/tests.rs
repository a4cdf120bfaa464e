//! The SQLite store: the store suite (`store::suite`) over a file store in
//! a temporary directory, then what only SQLite has — its schema, its
//! files and their modes, rows a hand-edited database holds.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::*;
use crate::health::HealthState;
use crate::store::Stores;
use crate::store::suite::{self, Fixture, audit_entry, instance, transition};

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

/// The suite's fixture: a file store in a directory of its own, opened
/// again by each `open`.
struct FileFixture(TempDir);

#[async_trait]
impl Fixture for FileFixture {
    async fn open(&self) -> Stores {
        let dir = self.0.path().join("data");
        let store = tokio::task::spawn_blocking(move || SqliteStore::open(&dir))
            .await
            .unwrap()
            .unwrap();
        Stores::of(Arc::new(store))
    }
}

/// The store contract (`store::suite`), on a file store.
mod contract {
    use super::*;

    suite::store_suite!(FileFixture(TempDir::new("suite")));
}

/// The in-memory store keeps the contract too (one handle: nothing to
/// reopen, so only the tests that do not reopen).
mod in_memory {
    use super::*;

    async fn stores() -> Stores {
        Stores::of(Arc::new(SqliteStore::open_in_memory().unwrap()))
    }

    #[tokio::test]
    async fn serves_every_concern() {
        suite::an_empty_store_reads_nothing(&Memory).await;
        suite::a_health_batch_is_applied_in_order(&Memory).await;
        suite::actions_round_trip_newest_limit_oldest_first(&Memory).await;
        suite::call_filters_limit_and_the_after_cursor(&Memory).await;
    }

    /// A fresh in-memory store per `open`: for tests that open once.
    struct Memory;

    #[async_trait]
    impl Fixture for Memory {
        async fn open(&self) -> Stores {
            stores().await
        }
    }
}

fn memory() -> SqliteStore {
    SqliteStore::open_in_memory().unwrap()
}

async fn save(store: &SqliteStore, r: InstanceRecord) {
    store.write(vec![HealthWrite::Instance(r)]).await.unwrap();
}

async fn record(store: &SqliteStore, t: Transition) {
    store.write(vec![HealthWrite::Transition(t)]).await.unwrap();
}

/// The regression of issue 12 item 14: one row with a state this build
/// does not know made the whole read fail, and the gateway then dropped
/// every saved quarantine.
#[tokio::test]
async fn an_unknown_state_skips_that_row_and_keeps_the_others() {
    let store = memory();
    let mut held = instance("alpha", HealthState::Quarantined);
    held.quarantine_reason = Some("held by an operator".into());
    save(&store, held.clone()).await;
    save(&store, instance("beta", HealthState::Running)).await;
    save(&store, instance("gamma", HealthState::Running)).await;
    store
        .conn()
        .execute(
            "UPDATE instances SET state = 'hibernating' WHERE backend = 'beta'",
            [],
        )
        .unwrap();

    let read = store.load_instances().await.unwrap();
    assert_eq!(
        read.rows,
        [held, instance("gamma", HealthState::Running)],
        "every readable record is kept, the quarantine with it"
    );
    let [skipped] = &read.skipped[..] else {
        panic!("one row skipped: {:?}", read.skipped)
    };
    assert_eq!(
        (
            skipped.table,
            skipped.backend.as_deref(),
            skipped.column,
            &*skipped.value
        ),
        ("instances", Some("beta"), "state", "hibernating")
    );
    assert_eq!(
        skipped.to_string(),
        "instances row of backend `beta`: state `hibernating` is not a state this build knows (written by a newer Vigil?)"
    );
}

#[tokio::test]
async fn values_out_of_range_skip_their_rows_in_every_reader() {
    let store = memory();
    for name in ["alpha", "beta"] {
        save(&store, instance(name, HealthState::Running)).await;
    }
    for n in 0..3 {
        record(
            &store,
            transition("alpha", HealthState::Starting, HealthState::Running, n),
        )
        .await;
        store.record(audit_entry(n)).await.unwrap();
    }
    {
        let conn = store.conn();
        for sql in [
            "UPDATE instances SET consecutive_failures = -1 WHERE backend = 'alpha'",
            "UPDATE transitions SET to_state = 'Running' WHERE id = 2",
            "UPDATE transitions SET at = -7 WHERE id = 3",
            "UPDATE audit SET at = -5 WHERE id = 1",
        ] {
            conn.execute(sql, []).unwrap();
        }
    }

    let instances = store.load_instances().await.unwrap();
    assert_eq!(instances.rows, [instance("beta", HealthState::Running)]);
    assert_eq!(
        instances.skipped[0].to_string(),
        "instances row of backend `alpha`: consecutive_failures `-1` is out of range"
    );

    let history = store.transitions("alpha", 10).await.unwrap();
    assert_eq!(
        history.rows,
        [transition(
            "alpha",
            HealthState::Starting,
            HealthState::Running,
            0
        )]
    );
    let skipped: Vec<String> = history.skipped.iter().map(ToString::to_string).collect();
    assert_eq!(
        skipped,
        [
            "transitions row 2 of backend `alpha`: to_state `Running` is not a state this build knows (written by a newer Vigil?)",
            "transitions row 3 of backend `alpha`: at `-7` is not a time this store writes (milliseconds since 1970)",
        ]
    );

    let audit = store.list(10).await.unwrap();
    assert_eq!(audit.rows, [audit_entry(1), audit_entry(2)]);
    assert_eq!(
        audit.skipped[0].to_string(),
        "audit row 1: at `-5` is not a time this store writes (milliseconds since 1970)"
    );
}

#[tokio::test]
async fn prune_keeps_newest_per_backend() {
    let store = memory();
    for n in 0..5 {
        record(
            &store,
            transition("alpha", HealthState::Running, HealthState::Offline, n),
        )
        .await;
    }
    record(
        &store,
        transition("beta", HealthState::Starting, HealthState::Running, 50),
    )
    .await;
    assert_eq!(store.prune_transitions(2).unwrap(), 3);
    let reasons: Vec<String> = store
        .transitions("alpha", 10)
        .await
        .unwrap()
        .rows
        .into_iter()
        .map(|t| t.reason)
        .collect();
    assert_eq!(reasons, ["reason 3", "reason 4"]);
    assert_eq!(store.transitions("beta", 10).await.unwrap().rows.len(), 1);
    assert_eq!(store.prune_transitions(2).unwrap(), 0);

    // Ids are never reused, so new rows still sort after the kept ones.
    record(
        &store,
        transition("alpha", HealthState::Offline, HealthState::Restarting, 5),
    )
    .await;
    let reasons: Vec<String> = store
        .transitions("alpha", 10)
        .await
        .unwrap()
        .rows
        .into_iter()
        .map(|t| t.reason)
        .collect();
    assert_eq!(reasons, ["reason 3", "reason 4", "reason 5"]);

    assert_eq!(store.prune_transitions(0).unwrap(), 4);
    assert!(
        store
            .transitions("alpha", 10)
            .await
            .unwrap()
            .rows
            .is_empty()
    );
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
        matches!(e, Setup::Newer { found: 99, known } if known == MIGRATIONS.len()),
        "{e:?}"
    );
}

/// A file a newer Vigil wrote refuses the open as `Corrupt`, naming the
/// version and saying what to do.
#[test]
fn a_newer_schema_is_refused_as_corrupt_with_its_fix() {
    let dir = TempDir::new("newer");
    let data_dir = dir.path().join("data");
    drop(SqliteStore::open(&data_dir).unwrap());
    let conn = Connection::open(data_dir.join(FILE_NAME)).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);

    let e = SqliteStore::open(&data_dir).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Corrupt);
    assert_eq!(
        e.to_string(),
        format!(
            "store: bad value in column PRAGMA user_version: 99 (this build knows schema versions up to {})",
            MIGRATIONS.len()
        )
    );
    assert_eq!(
        e.fix(),
        Some(
            "the store was written by a newer Vigil: run that version, or move vigil.db (with its -wal and -shm files) away to start with an empty store"
        )
    );
}

/// File stores run in WAL mode (see the module doc).
#[test]
fn a_file_store_runs_in_wal_mode() {
    let dir = TempDir::new("wal");
    let store = SqliteStore::open(dir.path()).unwrap();
    let mode: String = store
        .conn()
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    assert!(dir.path().join(FILE_NAME).is_file());
}

/// Failures are classified by SQLite's result code, never by the text.
#[test]
fn kinds_come_from_sqlite_result_codes() {
    use std::error::Error as _;
    let code = |code: i32| {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), Some("any text".into()))
    };
    for (raw, kind) in [
        (rusqlite::ffi::SQLITE_NOTADB, StoreErrorKind::Corrupt),
        (rusqlite::ffi::SQLITE_CORRUPT, StoreErrorKind::Corrupt),
        (rusqlite::ffi::SQLITE_BUSY, StoreErrorKind::Unavailable),
        (rusqlite::ffi::SQLITE_CANTOPEN, StoreErrorKind::Unavailable),
        (rusqlite::ffi::SQLITE_FULL, StoreErrorKind::Io),
        (rusqlite::ffi::SQLITE_IOERR, StoreErrorKind::Io),
        (rusqlite::ffi::SQLITE_CONSTRAINT, StoreErrorKind::Conflict),
        (rusqlite::ffi::SQLITE_ERROR, StoreErrorKind::Other),
    ] {
        assert_eq!(sql(code(raw)).kind(), kind, "code {raw}");
    }
    let e = sql(code(rusqlite::ffi::SQLITE_FULL));
    assert_eq!(e.to_string(), "store: any text");
    assert_eq!(e.fix(), Some(CHECK_THE_DISK));
    assert!(
        e.source().is_some_and(|s| s.is::<rusqlite::Error>()),
        "the driver's error stays reachable by type"
    );
}

#[test]
fn open_where_the_dir_cannot_be_created_names_the_path() {
    let dir = TempDir::new("baddir");
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, b"not a directory").unwrap();

    let e = SqliteStore::open(&blocker).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Path, "{e:?}");
    assert_eq!(
        e.to_string(),
        format!(
            "{} is not a directory: move it away or choose another path",
            blocker.display()
        )
    );
    assert_eq!(e.fix(), None, "the text says the fix");

    let below = blocker.join("data");
    let e = SqliteStore::open(&below).unwrap_err();
    assert!(e.to_string().contains(&*below.display().to_string()), "{e}");
}

fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().mode() & 0o7777
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn companion(db: &Path, suffix: &str) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Issue 12 item 13: the store was created world-readable. The umask is
/// the test process's (0022 usually); the e2e test runs Vigil under 000.
#[tokio::test]
async fn a_new_store_is_private_to_vigils_user() {
    let dir = TempDir::new("modes");
    let data_dir = dir.path().join("data");
    let store = SqliteStore::open(&data_dir).unwrap();
    save(&store, instance("alpha", HealthState::Running)).await;
    let db = data_dir.join(FILE_NAME);
    assert_eq!(mode_of(&data_dir), 0o700);
    assert_eq!(mode_of(&db), 0o600);
    for suffix in ["-wal", "-shm"] {
        let f = companion(&db, suffix);
        assert!(f.exists(), "{} exists while the store is open", f.display());
        assert_eq!(mode_of(&f), 0o600, "{}", f.display());
    }
}

#[tokio::test]
async fn an_existing_loose_store_is_tightened_and_kept() {
    let dir = TempDir::new("loose");
    let data_dir = dir.path().join("data");
    {
        let store = SqliteStore::open(&data_dir).unwrap();
        save(&store, instance("alpha", HealthState::Quarantined)).await;
    }
    let db = data_dir.join(FILE_NAME);
    set_mode(&data_dir, 0o777);
    set_mode(&db, 0o666);
    let stale_journal = companion(&db, "-journal");
    std::fs::write(&stale_journal, b"").unwrap();
    set_mode(&stale_journal, 0o644);

    let store = SqliteStore::open(&data_dir).unwrap();
    assert_eq!(mode_of(&data_dir), 0o700);
    assert_eq!(mode_of(&db), 0o600);
    assert_eq!(mode_of(&stale_journal), 0o600);
    assert_eq!(
        store.load_instances().await.unwrap().rows,
        [instance("alpha", HealthState::Quarantined)]
    );
}

/// A shared directory (`/tmp`, a home directory) is never chmod'ed: its
/// other users would break. Refused when others can write it.
#[tokio::test]
async fn a_shared_data_dir_is_left_alone_and_refused_when_others_can_write_it() {
    let dir = TempDir::new("shared");
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::write(shared.join("someone-elses.txt"), b"x").unwrap();

    set_mode(&shared, 0o1777);
    let e = SqliteStore::open(&shared).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{p} can be written by its group and others (mode 1777), so another user can change what Vigil reads from it: \
             `chmod 700 {p}` if only Vigil uses it, else choose a directory of Vigil's own",
            p = shared.display()
        )
    );
    assert_eq!(mode_of(&shared), 0o1777, "not chmod'ed");
    assert!(!shared.join(FILE_NAME).exists(), "nothing created there");

    set_mode(&shared, 0o755);
    let store = SqliteStore::open(&shared).unwrap();
    save(&store, instance("alpha", HealthState::Running)).await;
    assert_eq!(mode_of(&shared), 0o755, "readable is left as it is");
    assert_eq!(
        mode_of(&shared.join(FILE_NAME)),
        0o600,
        "the store itself is private"
    );
}

/// Needs root to give a file away; elsewhere it checks nothing.
#[test]
fn a_store_file_another_user_owns_is_refused() {
    if crate::private_fs::euid() != 0 {
        eprintln!("skipped: only root can give a file to another user");
        return;
    }
    let dir = TempDir::new("foreign");
    let data_dir = dir.path().join("data");
    drop(SqliteStore::open(&data_dir).unwrap());
    let db = data_dir.join(FILE_NAME);
    std::os::unix::fs::chown(&db, Some(65534), None).unwrap();
    let e = SqliteStore::open(&data_dir).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{p} is owned by uid 65534, not by uid 0 that Vigil runs as, so that user can change it: `chown 0 {p}` (or choose a path uid 0 owns)",
            p = db.display()
        )
    );
}

/// Issue 12 item 15: what `vigil serve` prints when it refuses to start.
#[tokio::test]
async fn a_refused_start_says_what_where_and_how_to_fix_it() {
    let dir = TempDir::new("refused");
    let data_dir = dir.path().join("data");
    std::fs::create_dir(&data_dir).unwrap();
    let db = data_dir.join(FILE_NAME);
    std::fs::write(
        &db,
        b"this is not a database, it is a text file long enough to be read",
    )
    .unwrap();

    let Err(refused) =
        crate::store::open(&data_dir, &crate::config::StoreConfig::default(), "r").await
    else {
        panic!("a store that is not a database must refuse the start")
    };
    assert_eq!(
        refused.to_string(),
        format!(
            "cannot open the state store in {d}: store at {f}: file is not a database\n  \
             fix: {f} is not a SQLite database: move it away (Vigil then creates a new, empty store) or restore it from a backup\n  \
             or set `optional = true` under [store] to serve without durable state \
             (quarantines, restart counts and history are then lost when Vigil stops, and quarantined backends are started again)",
            d = data_dir.display(),
            f = db.display(),
        )
    );
    assert_eq!(refused.source.kind(), StoreErrorKind::Corrupt);
    assert!(
        matches!(
            crate::store::open(
                &data_dir,
                &crate::config::StoreConfig {
                    optional: true,
                    ..Default::default()
                },
                "r",
            )
            .await,
            Ok(None)
        ),
        "optional: serves without it"
    );
}
