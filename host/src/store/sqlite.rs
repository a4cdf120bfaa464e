//! The embedded SQLite store: one file, `vigil.db`, under the data directory.
//!
//! It keeps what must survive a gateway restart:
//!
//! - `instances`: one row per backend with its current state, restart
//!   count, consecutive failures and quarantine reason, replaced on every
//!   save (quarantine is read back from here at start);
//! - `transitions`: the append-only log of state changes, newest read by
//!   `(backend, id)`;
//! - `audit`: the append-only log of mutating control-API calls and monitor
//!   actions, with their principal;
//! - `calls`: the audit of MCP calls ([`crate::audit`]), appended in
//!   batches, read newest first or after a row id, indexed by time (for
//!   pruning and `since`) and by `(principal, id)`; see `sqlite/calls.rs`.
//!
//! States are stored as their lowercase names
//! ([`HealthState::as_str`](crate::health::HealthState::as_str)) and times
//! as milliseconds since the Unix epoch, so the schema moves to PostgreSQL
//! unchanged (`postgres.rs`). A row with a value that does not parse (a state a
//! newer Vigil wrote, a count out of range) is skipped and reported in
//! [`Rows::skipped`], never a panic and never a reason to drop the other
//! rows. The schema version lives in `PRAGMA user_version` and is migrated
//! forward on open; a newer schema is refused ([`StoreErrorKind::Corrupt`]).
//!
//! The files are private to Vigil's user ([`crate::private_fs`]): the
//! data directory is created 0700 and `vigil.db` 0600 before SQLite opens
//! it (SQLite gives its `-wal`, `-shm` and `-journal` files the database's
//! mode), whatever the umask. Existing store files that group or others
//! could read or write are narrowed to that and a WARN says so, and so is
//! an existing data directory that holds only Vigil's files; a directory
//! shared with other files is never chmod'ed, and refused if group or
//! others can write it. Paths another user owns are refused.
//!
//! File stores run in WAL mode with `synchronous = NORMAL`: the health
//! writer appends often and in small batches, and WAL makes each commit one
//! sequential append without blocking readers (the control API reading the
//! log while the writer appends). A crash of the process loses nothing
//! committed; a power loss may lose the last few commits, which fresh probes
//! re-establish anyway. A busy timeout covers a second process (the CLI)
//! holding the file briefly.
//!
//! Every statement is short and runs on one connection behind a mutex, on
//! the blocking pool: the async trait methods hand it there themselves, so
//! callers just `.await` them. [`SqliteStore::open`] and
//! [`SqliteStore::open_in_memory`] block (`store::open` runs the first on
//! the blocking pool).
//!
//! Errors are turned into [`StoreError`]s here, where SQLite's own codes
//! are still known: the kind comes from the code (`SQLITE_NOTADB` is
//! [`StoreErrorKind::Corrupt`], `SQLITE_BUSY` is
//! [`StoreErrorKind::Unavailable`], ...), and so does the operator's fix
//! ("not a SQLite database: move it away").

use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use rusqlite::{Connection, ErrorCode, Row, TransactionBehavior, params};

use super::read::{self, Stored, sql_int};
use super::{
    ActionLog, AuditEntry, CallStore, HealthStore, HealthWrite, InstanceRecord, PinRecord,
    PinStore, Rows, StoreError, StoreErrorKind, UpdateStore,
};
use crate::audit::{CallQuery, CallRecord, StoredCall};
use crate::catalog::digest::Digest;
use crate::catalog::pin::PinKey;
use crate::health::{Transition, unix_ms};
use crate::private_fs::{self, Kind, Loose, Outcome};
use crate::rollout::UpdateRecord;

/// The database's file name inside the data directory.
pub const FILE_NAME: &str = "vigil.db";

/// The files SQLite keeps beside the database, by suffix.
pub const COMPANIONS: [&str; 3] = ["-wal", "-shm", "-journal"];

/// How long a statement waits for a lock held by another connection.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Schema migrations; entry `i` takes `user_version` from `i` to `i + 1`.
/// A released entry is never edited, only followed by a new one.
const MIGRATIONS: &[&str] = &[
    // 1: the initial schema.
    "CREATE TABLE instances (
         backend              TEXT    NOT NULL PRIMARY KEY,
         state                TEXT    NOT NULL,
         restart_count        INTEGER NOT NULL,
         consecutive_failures INTEGER NOT NULL,
         quarantine_reason    TEXT,
         updated_at           INTEGER NOT NULL
     ) STRICT;
     CREATE TABLE transitions (
         id         INTEGER PRIMARY KEY AUTOINCREMENT,
         backend    TEXT    NOT NULL,
         from_state TEXT    NOT NULL,
         to_state   TEXT    NOT NULL,
         reason     TEXT    NOT NULL,
         at         INTEGER NOT NULL
     ) STRICT;
     CREATE INDEX transitions_backend_id ON transitions (backend, id);
     CREATE TABLE audit (
         id        INTEGER PRIMARY KEY AUTOINCREMENT,
         principal TEXT    NOT NULL,
         action    TEXT    NOT NULL,
         target    TEXT    NOT NULL,
         outcome   TEXT    NOT NULL,
         at        INTEGER NOT NULL
     ) STRICT;",
    // 2: the audit of MCP calls (`calls.rs`).
    "CREATE TABLE calls (
         id          INTEGER PRIMARY KEY AUTOINCREMENT,
         at          INTEGER NOT NULL,
         principal   TEXT    NOT NULL,
         session     TEXT,
         backend     TEXT    NOT NULL,
         method      TEXT    NOT NULL,
         name        TEXT    NOT NULL,
         outcome     TEXT    NOT NULL,
         duration_us INTEGER NOT NULL,
         arguments   TEXT
     ) STRICT;
     CREATE INDEX calls_at ON calls (at);
     CREATE INDEX calls_principal_id ON calls (principal, id);",
    // 3: the issuer of an OAuth subject (two issuers may name the same one).
    "ALTER TABLE calls ADD COLUMN issuer TEXT;",
    // 4: the pin guard (`catalog::pin`): the backends that ever had an
    // approval, and each approved definition's digest.
    "CREATE TABLE pinned (
         backend TEXT    NOT NULL PRIMARY KEY,
         since   INTEGER NOT NULL
     ) STRICT;
     CREATE TABLE pins (
         backend     TEXT    NOT NULL,
         kind        TEXT    NOT NULL,
         name        TEXT    NOT NULL,
         digest      TEXT    NOT NULL,
         approved_by TEXT    NOT NULL,
         approved_at INTEGER NOT NULL,
         PRIMARY KEY (backend, kind, name)
     ) STRICT;",
    // 5: updates of backends (`app::rollouts`): the record as JSON, and
    // what it is found by.
    "CREATE TABLE updates (
         backend    TEXT    NOT NULL,
         id         TEXT    NOT NULL,
         phase      TEXT    NOT NULL,
         started_at INTEGER NOT NULL,
         record     TEXT    NOT NULL,
         PRIMARY KEY (backend, id)
     ) STRICT;
     CREATE INDEX updates_phase ON updates (phase);",
    // 6: what each `find_tool` asked and found (`audit::Searched`); NULL
    // for every other call.
    "ALTER TABLE calls ADD COLUMN search_query_bytes INTEGER;
     ALTER TABLE calls ADD COLUMN search_results INTEGER;",
];

/// The embedded store, serving [`HealthStore`], [`CallStore`] and
/// [`ActionLog`]: one SQLite connection behind a mutex. Cheap to clone
/// (every clone is the same connection).
#[derive(Clone)]
pub struct SqliteStore(Arc<Db>);

/// What the blocking pool works on.
struct Db {
    conn: Mutex<Connection>,
    /// The database file, or `:memory:`; for `Debug` and messages.
    location: String,
}

// === impl SqliteStore ===

impl SqliteStore {
    /// Opens (creating if needed) `data_dir/vigil.db`, creating `data_dir`
    /// too, both private to Vigil's user, and migrates the schema.
    /// Blocking.
    ///
    /// # Errors
    ///
    /// [`StoreErrorKind::Path`] if `data_dir` or a store file cannot be
    /// created or is not private (another user owns it; the text names the
    /// path and the fix); an error naming the file if the database cannot
    /// be opened or set up ([`StoreErrorKind::Corrupt`] for a file that is
    /// not a database, [`StoreErrorKind::Unavailable`] for one that cannot
    /// be opened, ...); and [`StoreErrorKind::Corrupt`] if it was written by
    /// a newer Vigil with a schema this build does not know.
    pub fn open(data_dir: &Path) -> Result<Self, StoreError> {
        private(data_dir, private_fs::dir(data_dir, dir_policy(data_dir))?);
        let file = data_dir.join(FILE_NAME);
        private(&file, private_fs::file(&file, Loose::Tighten)?);
        tighten_companions(&file)?;
        let location = file.display().to_string();
        let mut conn = Connection::open(&file).map_err(|e| opening(&location, e))?;
        setup(&mut conn, true).map_err(|e| match e {
            Setup::Sql(e) => opening(&location, e),
            Setup::Newer { found, known } => newer_schema(found, known),
        })?;
        // SQLite created its -wal and -shm files with the database's mode;
        // this only narrows what was left from before.
        tighten_companions(&file)?;
        Ok(SqliteStore::with(conn, location))
    }

    /// A private in-memory store with the same schema; gone when the last
    /// clone is dropped. For tests and for running without a data
    /// directory.
    pub fn open_in_memory() -> Result<Self, StoreError> {
        let mut conn = Connection::open_in_memory().map_err(sql)?;
        setup(&mut conn, false).map_err(|e| match e {
            Setup::Sql(e) => sql(e),
            Setup::Newer { found, known } => newer_schema(found, known),
        })?;
        Ok(SqliteStore::with(conn, ":memory:".into()))
    }

    fn with(conn: Connection, location: String) -> Self {
        SqliteStore(Arc::new(Db {
            conn: Mutex::new(conn),
            location,
        }))
    }

    /// Deletes all but the newest `keep_per_backend` transitions of every
    /// backend and returns how many rows went. Maintenance only (and
    /// blocking): the [`HealthStore`] contract itself is append-only.
    pub fn prune_transitions(&self, keep_per_backend: usize) -> Result<usize, StoreError> {
        self.0
            .conn()
            .execute(
                "DELETE FROM transitions WHERE id IN (
                     SELECT id FROM (
                         SELECT id, ROW_NUMBER() OVER (PARTITION BY backend ORDER BY id DESC) AS newer
                         FROM transitions
                     ) WHERE newer > ?1
                 )",
                params![sql_int(keep_per_backend)],
            )
            .map_err(sql)
    }

    /// The connection, for tests that write what no Vigil writes.
    #[cfg(test)]
    fn conn(&self) -> MutexGuard<'_, Connection> {
        self.0.conn()
    }

    /// Runs `f` on the blocking pool: the statements wait there for the
    /// connection and the disk, never on an async worker thread.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Db) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        let db = self.0.clone();
        match tokio::task::spawn_blocking(move || f(&db)).await {
            Ok(r) => r.map_err(sql),
            Err(e) => Err(StoreError::new(StoreErrorKind::Other, e).context("store task")),
        }
    }
}

impl Db {
    /// The connection. A panic while it was held cannot leave it half
    /// written (an open transaction rolls back when dropped), so a poisoned
    /// lock is taken over rather than propagated.
    fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("location", &self.0.location)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl HealthStore for SqliteStore {
    async fn write(&self, writes: Vec<HealthWrite>) -> Result<(), StoreError> {
        self.blocking(move |db| write_health(&mut db.conn(), &writes))
            .await
    }

    async fn transitions(
        &self,
        backend: &str,
        limit: usize,
    ) -> Result<Rows<Transition>, StoreError> {
        let backend = backend.to_owned();
        self.blocking(move |db| transitions(&db.conn(), &backend, limit))
            .await
    }

    async fn load_instances(&self) -> Result<Rows<InstanceRecord>, StoreError> {
        self.blocking(|db| load_instances(&db.conn())).await
    }

    async fn instance(&self, backend: &str) -> Result<Option<InstanceRecord>, StoreError> {
        let backend = backend.to_owned();
        self.blocking(move |db| instance(&db.conn(), &backend))
            .await
    }
}

#[async_trait]
impl CallStore for SqliteStore {
    async fn append(&self, records: Vec<CallRecord>) -> Result<(), StoreError> {
        self.blocking(move |db| calls::append(&mut db.conn(), &records))
            .await
    }

    async fn query(&self, q: &CallQuery) -> Result<Rows<StoredCall>, StoreError> {
        let q = q.clone();
        self.blocking(move |db| calls::read(&db.conn(), &q)).await
    }

    async fn prune(&self, cutoff: SystemTime) -> Result<usize, StoreError> {
        // In chunks, taking the lock for each: a prune of a large backlog
        // never holds up the writer for long.
        self.blocking(move |db| {
            let mut deleted = 0;
            loop {
                let n = calls::prune_chunk(&db.conn(), cutoff)?;
                deleted += n;
                if n < calls::PRUNE_CHUNK {
                    return Ok(deleted);
                }
            }
        })
        .await
    }
}

#[async_trait]
impl ActionLog for SqliteStore {
    async fn record(&self, entry: AuditEntry) -> Result<(), StoreError> {
        self.blocking(move |db| record_action(&db.conn(), &entry))
            .await
    }

    async fn list(&self, limit: usize) -> Result<Rows<AuditEntry>, StoreError> {
        self.blocking(move |db| actions(&db.conn(), limit)).await
    }
}

#[async_trait]
impl PinStore for SqliteStore {
    async fn approvals(&self) -> Result<(Vec<String>, Rows<PinRecord>), StoreError> {
        self.blocking(|db| {
            let conn = db.conn();
            let backends = conn
                .prepare_cached("SELECT backend FROM pinned ORDER BY backend")?
                .query_map([], |r| r.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {} FROM pins ORDER BY backend, kind, name",
                PinRecord::COLUMNS
            ))?;
            Ok((backends, read_rows(stmt.query([])?)?))
        })
        .await
    }

    async fn approve(
        &self,
        backend: &str,
        items: Vec<(PinKey, Digest)>,
        by: &str,
        at: SystemTime,
    ) -> Result<(), StoreError> {
        let (backend, by, at) = (backend.to_owned(), by.to_owned(), unix_ms::to_ms(at));
        self.blocking(move |db| {
            let mut conn = db.conn();
            let tx = conn.transaction()?;
            tx.prepare_cached("INSERT INTO pinned (backend, since) VALUES (?1, ?2) ON CONFLICT (backend) DO NOTHING")?
                .execute(params![backend, at])?;
            for (key, digest) in &items {
                tx.prepare_cached(
                    "INSERT INTO pins (backend, kind, name, digest, approved_by, approved_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                     ON CONFLICT (backend, kind, name) DO UPDATE SET
                         digest = excluded.digest,
                         approved_by = excluded.approved_by,
                         approved_at = excluded.approved_at",
                )?
                .execute(params![backend, key.kind.as_str(), &*key.name, digest.to_string(), by, at])?;
            }
            tx.commit()
        })
        .await
    }
}

#[async_trait]
impl UpdateStore for SqliteStore {
    async fn save_update(&self, update: &UpdateRecord) -> Result<(), StoreError> {
        let record = update_json(update)?;
        let (backend, id, phase, at) = (
            update.backend.clone(),
            update.id.clone(),
            update.phase.as_str(),
            unix_ms::to_ms(update.started_at),
        );
        self.blocking(move |db| {
            db.conn()
                .prepare_cached(
                    "INSERT INTO updates (backend, id, phase, started_at, record)
                     VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (backend, id) DO UPDATE SET
                         phase = excluded.phase,
                         record = excluded.record",
                )?
                .execute(params![backend, id, phase, at, record])
                .map(|_| ())
        })
        .await
    }

    async fn updates(&self, backend: &str, limit: usize) -> Result<Rows<UpdateRecord>, StoreError> {
        let backend = backend.to_owned();
        self.blocking(move |db| {
            let conn = db.conn();
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {} FROM updates WHERE backend = ?1 ORDER BY started_at DESC, id DESC LIMIT ?2",
                UpdateRecord::COLUMNS
            ))?;
            read_rows(stmt.query(params![backend, sql_int(limit)])?)
        })
        .await
    }

    async fn unfinished_updates(&self) -> Result<Rows<UpdateRecord>, StoreError> {
        self.blocking(move |db| {
            let conn = db.conn();
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {} FROM updates WHERE phase NOT IN ('succeeded', 'rolled_back') ORDER BY started_at, id",
                UpdateRecord::COLUMNS
            ))?;
            read_rows(stmt.query([])?)
        })
        .await
    }
}

/// Every row of `rows` read as `T` (see [`Rows::push`]).
fn read_rows<T: Stored>(mut rows: rusqlite::Rows<'_>) -> rusqlite::Result<Rows<T>> {
    let mut out = Rows::default();
    while let Some(row) = rows.next()? {
        out.push(row)?;
    }
    Ok(out)
}

/// An update record as stored (JSON text).
pub(super) fn update_json(update: &UpdateRecord) -> Result<String, StoreError> {
    serde_json::to_string(update).map_err(|e| {
        StoreError::new(StoreErrorKind::Other, e)
            .context(format!("writing the update record of {}", update.backend))
    })
}

// === statements ===

/// Applies `writes` in order in one transaction.
fn write_health(conn: &mut Connection, writes: &[HealthWrite]) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    for w in writes {
        match w {
            HealthWrite::Transition(t) => {
                tx.prepare_cached(
                    "INSERT INTO transitions (backend, from_state, to_state, reason, at) VALUES (?1, ?2, ?3, ?4, ?5)",
                )?
                .execute(params![
                    t.backend,
                    t.from.as_str(),
                    t.to.as_str(),
                    t.reason,
                    unix_ms::to_ms(t.at)
                ])?;
            }
            HealthWrite::Instance(r) => {
                tx.prepare_cached(
                    "INSERT INTO instances
                         (backend, state, restart_count, consecutive_failures, quarantine_reason, updated_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                     ON CONFLICT (backend) DO UPDATE SET
                         state = excluded.state,
                         restart_count = excluded.restart_count,
                         consecutive_failures = excluded.consecutive_failures,
                         quarantine_reason = excluded.quarantine_reason,
                         updated_at = excluded.updated_at",
                )?
                .execute(params![
                    r.backend,
                    r.state.as_str(),
                    // Saturates at i64::MAX, far beyond any real restart count.
                    i64::try_from(r.restart_count).unwrap_or(i64::MAX),
                    r.consecutive_failures,
                    r.quarantine_reason,
                    unix_ms::to_ms(r.updated_at),
                ])?;
            }
        }
    }
    tx.commit()
}

fn transitions(
    conn: &Connection,
    backend: &str,
    limit: usize,
) -> rusqlite::Result<Rows<Transition>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {} FROM (
             SELECT * FROM transitions WHERE backend = ?1 ORDER BY id DESC LIMIT ?2
         ) ORDER BY id ASC",
        Transition::COLUMNS
    ))?;
    read_rows(stmt.query(params![backend, sql_int(limit)])?)
}

fn instance(conn: &Connection, backend: &str) -> rusqlite::Result<Option<InstanceRecord>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {} FROM instances WHERE backend = ?1",
        InstanceRecord::COLUMNS
    ))?;
    let mut rows = stmt.query([backend])?;
    let mut out = Rows::default();
    if let Some(row) = rows.next()? {
        out.push(row)?;
    }
    Ok(out.rows.pop())
}

fn load_instances(conn: &Connection) -> rusqlite::Result<Rows<InstanceRecord>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {} FROM instances ORDER BY backend",
        InstanceRecord::COLUMNS
    ))?;
    read_rows(stmt.query([])?)
}

fn record_action(conn: &Connection, a: &AuditEntry) -> rusqlite::Result<()> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO audit (principal, action, target, outcome, at) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    stmt.execute(params![
        a.principal,
        a.action,
        a.target,
        a.outcome,
        unix_ms::to_ms(a.at)
    ])?;
    Ok(())
}

fn actions(conn: &Connection, limit: usize) -> rusqlite::Result<Rows<AuditEntry>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {} FROM (
             SELECT * FROM audit ORDER BY id DESC LIMIT ?1
         ) ORDER BY id ASC",
        AuditEntry::COLUMNS
    ))?;
    read_rows(stmt.query(params![sql_int(limit)])?)
}

// === errors ===

/// What an operator does about a failure on an open store.
const CHECK_THE_DISK: &str = "check the disk and the store's files; moving vigil.db (with its -wal and -shm files) away starts with an empty store";

/// The kind of a SQLite failure, from its result code.
fn kind_of(e: &rusqlite::Error) -> StoreErrorKind {
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => StoreErrorKind::Corrupt,
        Some(
            ErrorCode::CannotOpen
            | ErrorCode::PermissionDenied
            | ErrorCode::ReadOnly
            | ErrorCode::DatabaseBusy
            | ErrorCode::DatabaseLocked
            | ErrorCode::FileLockingProtocolFailed,
        ) => StoreErrorKind::Unavailable,
        Some(ErrorCode::SystemIoFailure | ErrorCode::DiskFull) => StoreErrorKind::Io,
        Some(ErrorCode::ConstraintViolation) => StoreErrorKind::Conflict,
        _ => StoreErrorKind::Other,
    }
}

/// A statement failed on the open store.
fn sql(e: rusqlite::Error) -> StoreError {
    StoreError::new(kind_of(&e), e)
        .context("store")
        .with_fix(CHECK_THE_DISK)
}

/// The database at `path` could not be opened or set up.
fn opening(path: &str, e: rusqlite::Error) -> StoreError {
    let fix = if e.sqlite_error_code() == Some(ErrorCode::NotADatabase) {
        format!(
            "{path} is not a SQLite database: move it away (Vigil then creates a new, empty store) or restore it from a backup"
        )
    } else {
        format!(
            "make {path} and its directory readable and writable by the user Vigil runs as, or point `data_dir` elsewhere"
        )
    };
    StoreError::new(kind_of(&e), e)
        .context(format!("store at {path}"))
        .with_fix(fix)
}

/// The file's schema is newer than this build's.
fn newer_schema(found: i64, known: usize) -> StoreError {
    StoreError::new(
        StoreErrorKind::Corrupt,
        format!(
            "bad value in column PRAGMA user_version: {found} (this build knows schema versions up to {known})"
        ),
    )
    .context("store")
    .with_fix(
        "the store was written by a newer Vigil: run that version, or move vigil.db (with its -wal and -shm files) away to start with an empty store",
    )
}

// === files ===

/// Logs a store path Vigil narrowed to owner-only.
fn private(path: &Path, outcome: Outcome) {
    if let Outcome::Tightened { from } = outcome {
        tracing::warn!(
            path = %path.display(),
            from = %private_fs::Mode(from),
            "state store: {} could be accessed by other users (mode {}); restricted it to Vigil's user",
            path.display(),
            private_fs::Mode(from),
        );
    }
}

/// How to treat a loose data directory: narrowed when it holds nothing but
/// what Vigil keeps there (it is Vigil's, as an older Vigil left it), else
/// left as it is — a shared directory such as `/tmp` or a home directory is
/// never chmod'ed, only refused when others can write it.
fn dir_policy(data_dir: &Path) -> Loose {
    let Ok(entries) = std::fs::read_dir(data_dir) else {
        return Loose::Refuse; // absent (then created 0700) or unreadable
    };
    let ours = |name: &std::ffi::OsStr| {
        let name = name.to_string_lossy();
        name == FILE_NAME
            || name == crate::config::DEFAULT_PLUGIN_CACHE
            || name == crate::config::SESSION_KEY_FILE
            || name == crate::config::SESSION_KEY_PARTIAL
            || COMPANIONS.iter().any(|s| name == format!("{FILE_NAME}{s}"))
    };
    let all_ours = entries
        .map(|e| e.map(|e| ours(&e.file_name())))
        .all(|ours| ours.unwrap_or(false));
    if all_ours {
        Loose::Tighten
    } else {
        Loose::Refuse
    }
}

/// Narrows SQLite's files beside `db` that exist to owner-only.
fn tighten_companions(db: &Path) -> Result<(), StoreError> {
    for suffix in COMPANIONS {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        let path = std::path::PathBuf::from(name);
        if let Some(outcome) = private_fs::existing(&path, Kind::File, Loose::Tighten)? {
            private(&path, outcome);
        }
    }
    Ok(())
}

// === setup ===

/// Why the setup of a connection failed.
#[derive(Debug)]
enum Setup {
    Sql(rusqlite::Error),
    /// The file's `user_version` is not one this build knows.
    Newer {
        found: i64,
        known: usize,
    },
}

impl From<rusqlite::Error> for Setup {
    fn from(e: rusqlite::Error) -> Self {
        Setup::Sql(e)
    }
}

/// What `open` and `open_in_memory` share: connection settings, then the
/// schema brought up to date. `file_backed` turns on WAL (an in-memory
/// database has no journal file to speak of).
fn setup(conn: &mut Connection, file_backed: bool) -> Result<(), Setup> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    if file_backed {
        let mode: String =
            conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            tracing::warn!(journal_mode = %mode, "SQLite store: WAL is not available here; writes will block readers");
        }
    }
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    migrate(conn)
}

/// Applies the migrations past the file's `user_version`, all in one
/// transaction, and refuses a file from a newer schema.
fn migrate(conn: &mut Connection) -> Result<(), Setup> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let known = MIGRATIONS.len();
    let from = usize::try_from(found)
        .ok()
        .filter(|v| *v <= known)
        .ok_or(Setup::Newer { found, known })?;
    if from == known {
        return Ok(());
    }
    for sql in &MIGRATIONS[from..] {
        tx.execute_batch(sql)?;
    }
    tx.pragma_update(None, "user_version", sql_int(known))?;
    tx.commit()?;
    Ok(())
}

// === reading values back ===

impl read::StoredRow for Row<'_> {
    type Error = rusqlite::Error;

    fn text(&self, idx: usize) -> rusqlite::Result<String> {
        self.get(idx)
    }

    fn maybe_text(&self, idx: usize) -> rusqlite::Result<Option<String>> {
        self.get(idx)
    }

    fn integer(&self, idx: usize) -> rusqlite::Result<i64> {
        self.get(idx)
    }

    fn maybe_integer(&self, idx: usize) -> rusqlite::Result<Option<i64>> {
        self.get(idx)
    }
}

mod calls;
#[cfg(test)]
mod tests;
