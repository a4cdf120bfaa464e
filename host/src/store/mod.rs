//! Store: what must survive a gateway restart — each instance's current
//! state, restart counts and quarantine, the append-only transition log,
//! the audit log of operator actions and the audit of MCP calls
//! ([`crate::audit`]).
//!
//! The seams are three async traits, one per concern, so that a second
//! implementation (PostgreSQL, for several replicas) slots in without a
//! change above them:
//!
//! - [`HealthStore`]: instance records (state, restart counts, quarantine)
//!   and the append-only transition log; written by the supervisors through
//!   a [`HealthWriter`], read at start and by the control API;
//! - [`CallStore`]: the audit of MCP calls, appended in batches by
//!   [`crate::audit`]'s writer, queried by the control API, pruned;
//! - [`ActionLog`]: the operator actions the control API records and lists.
//!
//! [`Stores`] hands out one of each; [`open`] returns it. Two
//! implementations serve all three: [`sqlite::SqliteStore`], the embedded
//! default (one file under `data_dir`), and [`postgres::PostgresStore`],
//! one database several replicas share (`[store] url_env`). One suite of
//! tests (`suite.rs`) runs against both. Every method is async and never
//! blocks the caller's thread: an implementation over a blocking driver
//! (SQLite) runs it on the blocking pool itself, so callers just `.await`.
//! Failures are a [`StoreError`], whose [`StoreErrorKind`] callers match
//! on; no database's own types cross the seam.
//!
//! Writes that must not stall their caller go through the one batched
//! writer, [`Writer`]: queued without waiting, written in batches in order,
//! drained at shutdown. The health writes and the call audit are each a
//! [`Writer`] with their own [`Policy`].
//!
//! The data plane never waits on the store. It is needed to *start*,
//! though: without it a restart forgets every quarantine, so a store that
//! cannot be opened refuses the start unless the operator set `[store]
//! optional = true` ([`open`]). Readers skip a row they cannot read and
//! report it ([`Rows`]), so one bad row never costs the others.

mod error;
pub mod postgres;
mod read;
pub mod sqlite;
pub mod writer;

#[cfg(test)]
pub(crate) mod pg_test;
#[cfg(test)]
pub(crate) mod suite;

pub use error::{StoreError, StoreErrorKind};
pub use writer::{HealthWriter, Policy, Refusal, Sink, Writer};

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::audit::{CallQuery, CallRecord, StoredCall};
use crate::config::StoreConfig;
use crate::health::{HealthState, Transition};

/// The persisted state of one backend instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceRecord {
    pub backend: String,
    pub state: HealthState,
    /// Restarts since the instance was first seen (never reset).
    pub restart_count: u64,
    /// Consecutive failed starts; reset after `healthy_reset` of uptime.
    pub consecutive_failures: u32,
    /// Why it is quarantined, when it is.
    pub quarantine_reason: Option<String>,
    #[serde(with = "crate::health::unix_ms")]
    pub updated_at: SystemTime,
}

/// One mutating control-API call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Token name of the operator, or `system:health` for the monitor.
    pub principal: String,
    /// `restart`, `quarantine`, `release`, ...
    pub action: String,
    /// The backend acted on.
    pub target: String,
    /// `ok`, or `denied: ...`, `error: ...`.
    pub outcome: String,
    #[serde(with = "crate::health::unix_ms")]
    pub at: SystemTime,
}

/// What a reader read: every row it could, and each row it had to skip.
///
/// One row this build cannot read (a state written by a newer Vigil, a
/// value out of range) never costs the others: readers skip it and say
/// which and why here; only a failure of the database itself is an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rows<T> {
    pub rows: Vec<T>,
    pub skipped: Vec<SkippedRow>,
}

impl<T> Default for Rows<T> {
    fn default() -> Self {
        Rows {
            rows: Vec::new(),
            skipped: Vec::new(),
        }
    }
}

impl<T> Rows<T> {
    /// The rows, after a WARN for each skipped one; `what` names the read
    /// for the log ("transition history", "audit log").
    pub fn logged(self, what: &str) -> Vec<T> {
        for s in &self.skipped {
            tracing::warn!(table = s.table, column = s.column, value = %s.value, "{what}: skipped {s}");
        }
        self.rows
    }
}

/// A stored row a reader could not read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkippedRow {
    /// `instances`, `transitions`, `audit` or `calls`.
    pub table: &'static str,
    /// The backend the row is about, when it names one.
    pub backend: Option<String>,
    /// The row's id, for the append-only logs.
    pub id: Option<i64>,
    /// The column whose value could not be read.
    pub column: &'static str,
    /// That value, as stored.
    pub value: String,
    /// Why it could not be read.
    pub why: &'static str,
}

/// Reads like this:
///
/// ```text
/// instances row of backend `beta`: state `paused` is not a state this build knows (written by a newer Vigil?)
/// audit row 17: at `-5` is not a time this store writes (milliseconds since 1970)
/// ```
impl fmt::Display for SkippedRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} row", self.table)?;
        if let Some(id) = self.id {
            write!(f, " {id}")?;
        }
        if let Some(b) = &self.backend {
            write!(f, " of backend `{b}`")?;
        }
        write!(f, ": {} `{}` {}", self.column, self.value, self.why)
    }
}

/// One health write, as the supervisors hand them to the [`HealthWriter`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthWrite {
    /// Appends a transition to the log.
    Transition(Transition),
    /// Creates or replaces an instance's current record.
    Instance(InstanceRecord),
}

impl HealthWrite {
    /// The backend the write is about.
    pub fn backend(&self) -> &str {
        match self {
            HealthWrite::Transition(t) => &t.backend,
            HealthWrite::Instance(r) => &r.backend,
        }
    }
}

/// Durable health state: each instance's current record (state, restart
/// count, consecutive failures, quarantine reason) and the append-only
/// log of its transitions.
///
/// Restoring quarantines at start depends on it, so a record one build
/// cannot read costs only that record ([`Rows::skipped`]).
#[async_trait]
pub trait HealthStore: Send + Sync + 'static {
    /// Applies `writes` in order, in one transaction: all of them or, on
    /// error, none. A transition is appended; an instance record replaces
    /// the backend's previous one.
    async fn write(&self, writes: Vec<HealthWrite>) -> Result<(), StoreError>;
    /// The newest `limit` transitions of `backend`, oldest first (rows
    /// that cannot be read are skipped, and count towards `limit`).
    async fn transitions(
        &self,
        backend: &str,
        limit: usize,
    ) -> Result<Rows<Transition>, StoreError>;
    /// Every instance record, ordered by backend (to restore state at
    /// start). A record that cannot be read is skipped, never a reason to
    /// drop the others.
    async fn load_instances(&self) -> Result<Rows<InstanceRecord>, StoreError>;
    /// `backend`'s instance record, if there is one it can read (a
    /// replica following a backend another supervises reads it at each
    /// change).
    async fn instance(&self, backend: &str) -> Result<Option<InstanceRecord>, StoreError>;
}

/// The audit of MCP calls ([`crate::audit`]): appended in batches, read
/// newest first or page by page after a row id, pruned by age.
#[async_trait]
pub trait CallStore: Send + Sync + 'static {
    /// Appends `calls` in one transaction: all of them or, on error, none.
    /// Each gets a row id larger than every id before it.
    async fn append(&self, calls: Vec<CallRecord>) -> Result<(), StoreError>;
    /// The call records `q` selects, each with its row id: without
    /// `q.after` the newest first, with it those of a larger id, oldest
    /// first; at most `q.limit` (rows that cannot be read are skipped, and
    /// count towards it).
    async fn query(&self, q: &CallQuery) -> Result<Rows<StoredCall>, StoreError>;
    /// Deletes the call records received before `cutoff`; how many went.
    async fn prune(&self, cutoff: SystemTime) -> Result<usize, StoreError>;
}

/// The append-only log of operator actions (mutating control-API calls).
#[async_trait]
pub trait ActionLog: Send + Sync + 'static {
    /// Appends one entry.
    async fn record(&self, entry: AuditEntry) -> Result<(), StoreError>;
    /// The newest `limit` entries, oldest first (rows that cannot be read
    /// are skipped, and count towards `limit`).
    async fn list(&self, limit: usize) -> Result<Rows<AuditEntry>, StoreError>;
}

/// One approved definition of a backend the pin guard holds
/// (`catalog::pin`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinRecord {
    pub backend: String,
    pub key: crate::catalog::pin::PinKey,
    pub digest: crate::catalog::digest::Digest,
}

/// What operators approved of held backends: the definitions each may
/// serve (`catalog::pin`). Read at start; written at each approval, and
/// at a backend's first use (`first_seen = "trust"`).
#[async_trait]
pub trait PinStore: Send + Sync + 'static {
    /// The backends that ever had an approval (an empty one included:
    /// a first listing with nothing to guard), and every approved
    /// definition. A row that cannot be read is skipped: its definition
    /// stays held.
    async fn approvals(&self) -> Result<(Vec<String>, Rows<PinRecord>), StoreError>;
    /// Records that `by` approved `items` of `backend` at `at`, in one
    /// transaction; a newer digest of a definition replaces the older.
    async fn approve(
        &self,
        backend: &str,
        items: Vec<(crate::catalog::pin::PinKey, crate::catalog::digest::Digest)>,
        by: &str,
        at: SystemTime,
    ) -> Result<(), StoreError>;
}

/// The updates of backends (`app::rollouts`): each recorded when it
/// starts and again at each phase, so a Vigil restarted in the middle of
/// one finds it and resolves it.
#[async_trait]
pub trait UpdateStore: Send + Sync + 'static {
    /// Records `update`: a new one, or the next phase of one recorded
    /// (same backend and id), replacing it.
    async fn save_update(&self, update: &crate::rollout::UpdateRecord) -> Result<(), StoreError>;
    /// The newest `limit` updates of `backend`, newest first (rows that
    /// cannot be read are skipped, and count towards `limit`).
    async fn updates(
        &self,
        backend: &str,
        limit: usize,
    ) -> Result<Rows<crate::rollout::UpdateRecord>, StoreError>;
    /// Every update that has not ended, oldest first: what a Vigil that
    /// stopped during an update left.
    async fn unfinished_updates(&self) -> Result<Rows<crate::rollout::UpdateRecord>, StoreError>;
}

/// The state store, one handle per concern: what [`open`] returns and what
/// the gateway and the control API are given. Cheap to clone.
///
/// Each part goes to whoever needs only it: `health` to the supervisors'
/// [`HealthWriter`] and the instance detail, `calls` to the call audit and
/// `GET /api/v1/audit/calls`, `actions` to the control API's action log.
#[derive(Clone)]
pub struct Stores {
    pub health: Arc<dyn HealthStore>,
    pub calls: Arc<dyn CallStore>,
    pub actions: Arc<dyn ActionLog>,
    pub pins: Arc<dyn PinStore>,
    pub updates: Arc<dyn UpdateStore>,
    /// The PostgreSQL store behind all of them, when it is one several
    /// replicas share (`cluster::postgres` builds on it).
    pub shared: Option<postgres::PostgresStore>,
}

impl Stores {
    /// One implementation of every concern, serving all three.
    pub fn of<S: HealthStore + CallStore + ActionLog + PinStore + UpdateStore>(
        store: Arc<S>,
    ) -> Stores {
        Stores {
            health: store.clone(),
            calls: store.clone(),
            actions: store.clone(),
            pins: store.clone(),
            updates: store,
            shared: None,
        }
    }

    /// The PostgreSQL store, serving all three and shared by replicas.
    pub fn shared(store: postgres::PostgresStore) -> Stores {
        Stores {
            shared: Some(store.clone()),
            ..Stores::of(Arc::new(store))
        }
    }
}

impl fmt::Debug for Stores {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stores").finish_non_exhaustive()
    }
}

/// Opens the state store `config` chooses for `vigil serve` and `vigil
/// stdio`: PostgreSQL when `[store] url_env` names a variable that holds a
/// URL ([`postgres::PostgresStore`]), else the embedded SQLite store in
/// `data_dir` ([`sqlite::SqliteStore`]).
///
/// Without durable state a restart forgets every quarantine and starts a
/// backend an operator held, so a store that cannot be opened — a file
/// that cannot, a PostgreSQL database migrated by a newer Vigil — refuses
/// the start ([`Refused`]), unless the operator chose `[store] optional =
/// true`, which serves without it (`Ok(None)`) and says so at ERROR. A
/// PostgreSQL server that is out of reach at start (down, refusing the
/// login, without the database yet) is not a refusal: the store is
/// returned unmigrated, Vigil serves its replica-local backends, and the
/// cluster migrates it once it answers (`PostgresStore::migrate_when_up`).
///
/// A PostgreSQL store announces this replica's health writes to the
/// others as `replica`'s (`store::postgres::note`).
pub async fn open(
    data_dir: &Path,
    config: &StoreConfig,
    replica: &str,
) -> Result<Option<Stores>, Refused> {
    let (location, opened) = match &config.url {
        Some(url) => {
            let location = postgres::location(&url.config);
            tracing::info!(store = %location, var = %url.var, "opening the PostgreSQL state store");
            let opened = match postgres::PostgresStore::pooled(&url.config) {
                Ok(store) => match store.migrate().await {
                    Ok(()) => Ok(Stores::shared(store.announcing_as(replica))),
                    // Down at start: serve meanwhile (replica-local
                    // backends; shared ones wait for their leases) and
                    // migrate once it answers (`app::cluster`).
                    Err(e) if e.kind() == StoreErrorKind::Unavailable => {
                        tracing::warn!(
                            store = %location,
                            error = %e,
                            fix = e.fix().unwrap_or_default(),
                            "the PostgreSQL store is out of reach: serving replica-local backends meanwhile, trying again with backoff; \
                             shared backends are supervised once it answers"
                        );
                        Ok(Stores::shared(store.announcing_as(replica)))
                    }
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            };
            (format!("at {location} (from `{}`)", url.var), opened)
        }
        None => {
            if let Some(var) = &config.url_env {
                tracing::warn!(
                    var = %var,
                    "[store] url_env names `{var}`, which is unset or empty: using the embedded store in data_dir, \
                     which other replicas do not share"
                );
            }
            let dir = data_dir.to_owned();
            let opened = tokio::task::spawn_blocking(move || sqlite::SqliteStore::open(&dir))
                .await
                .unwrap_or_else(|e| Err(StoreError::new(StoreErrorKind::Other, e).context("store")))
                .map(|s| Stores::of(Arc::new(s)));
            (format!("in {}", data_dir.display()), opened)
        }
    };
    match opened {
        Ok(stores) => {
            tracing::info!(store = %location, "health state store opened");
            Ok(Some(stores))
        }
        Err(source) if config.optional => {
            tracing::error!(
                store = %location,
                error = %source,
                "cannot open the state store; serving without it because [store] optional = true: \
                 quarantines, restart counts and history will not survive a restart, and quarantined backends are started again"
            );
            Ok(None)
        }
        Err(source) => Err(Refused { location, source }),
    }
}

/// The store could not be opened and `[store] optional` is not set: what
/// failed, where, how to fix it, and how to serve without durable state.
#[derive(Debug)]
pub struct Refused {
    /// Where the store is: `in DATA_DIR`, or `at postgres://…` (never a
    /// password) with the variable it came from.
    pub location: String,
    pub source: StoreError,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot open the state store {}: {}",
            self.location, self.source
        )?;
        if let Some(fix) = self.source.fix() {
            write!(f, "\n  fix: {fix}")?;
        }
        write!(
            f,
            "\n  or set `optional = true` under [store] to serve without durable state \
             (quarantines, restart counts and history are then lost when Vigil stops, and quarantined backends are started again)"
        )
    }
}

/// The text already holds the cause (`source`), so no `source()`: error
/// reporters that print the chain would print it twice.
impl std::error::Error for Refused {}
