//! The PostgreSQL store: the same three concerns as the embedded SQLite
//! store ([`HealthStore`], [`CallStore`], [`ActionLog`]) in a database
//! several Vigil replicas share, chosen with `[store] url_env`
//! ([`crate::store::open`]).
//!
//! The tables and their meaning are SQLite's (`sqlite.rs`): `instances`
//! (one row per backend, replaced on every save), the append-only
//! `transitions` and `audit` logs, and `calls`, the audit of MCP calls.
//! Values are stored the same way — states by name, times as milliseconds
//! since the Unix epoch (`bigint`), restart counts saturating at
//! `i64::MAX`, call arguments as JSON text — and read back by the same
//! code (`store/read.rs`), so a row one build cannot read is skipped and
//! reported ([`Rows::skipped`]) here too. Row ids are `bigint` identity
//! columns: each batch's ids are larger than every id handed out before
//! it, so `vigil audit --follow` pages with `after` as it does on SQLite.
//! Several replicas appending at once may *commit* out of id order, so a
//! follower paging with `after` can step past a row committed just after
//! its read; the cluster feed that orders them comes with a later step.
//!
//! # Driver
//!
//! [`tokio_postgres`] with a [`deadpool_postgres`] pool, rather than
//! sqlx:
//!
//! - the store is hand-written SQL behind traits, so sqlx's checked
//!   queries would buy little and cost a database (or an offline cache)
//!   at build time; without them sqlx is a larger build for the same
//!   driver work (some 24 crates against 19 here), and its SQLite half
//!   would share the `sqlite3` native library with rusqlite's;
//! - `LISTEN/NOTIFY` (the cluster's feed, a later step) needs a dedicated
//!   connection whatever the driver: deadpool-postgres drives its pooled
//!   connections without reading their notifications, and tokio-postgres
//!   hands every asynchronous message of a connection of our own to us,
//!   so reconnecting, listening again and catching up is Vigil's code,
//!   where it can be counted, not a driver's silent retry.
//!
//! The pool holds up to [`POOL_SIZE`] connections; a statement waits at
//! most [`WAIT`] for one, and a connection attempt gives up after
//! [`CONNECT_TIMEOUT`] (unless the URL sets `connect_timeout`). Every
//! statement is async: nothing here blocks a worker thread.
//!
//! Connections are plain TCP (or a Unix socket): `NoTls`. TLS to the
//! store comes with a later step; until then a URL asking for it
//! (`sslmode=require`) is refused when the config is read.
//!
//! # Schema migrations
//!
//! [`MIGRATIONS`] is a list of SQL scripts; entry `i` takes the schema
//! from version `i` to `i + 1` and is never edited once released, only
//! followed by a new one. The versions applied are rows of
//! `schema_migrations`. Opening the store takes a transaction-scoped
//! advisory lock (`pg_advisory_xact_lock`), then applies what is missing
//! and records it in that same transaction, so replicas starting together
//! migrate once (the others wait for the lock, then find nothing to do)
//! and a failed migration leaves nothing half done. A database migrated
//! by a newer Vigil is refused ([`StoreErrorKind::Corrupt`]).
//!
//! This is some forty lines rather than a migration crate (refinery):
//! the SQLite store already migrates by a list of scripts and a version
//! number, and the two read alike; refinery would add its own crates and
//! its own history table, and does not take the lock that keeps replicas
//! starting together from racing.
//!
//! # Errors
//!
//! Failures become [`StoreError`]s here, by the driver's error kind and
//! the server's SQLSTATE, never by message text (`postgres/error.rs`): a
//! server that cannot be reached or refuses the login is
//! [`StoreErrorKind::Unavailable`], a constraint or a serialization
//! failure [`StoreErrorKind::Conflict`], a full disk
//! [`StoreErrorKind::Io`], a damaged page [`StoreErrorKind::Corrupt`].
//!
//! Not here yet, each a later step: leases, `LISTEN/NOTIFY`, the session
//! book on PostgreSQL, and retrying with backoff while the server is down
//! (today a server that cannot be reached at start refuses the start,
//! unless `[store] optional = true`).

pub mod error;
pub mod note;
mod schema;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use deadpool_postgres::{Manager, Pool, Runtime};
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row};

#[cfg(doc)]
use super::StoreErrorKind;
use super::read::{self, Stored, sql_int};
use super::{
    ActionLog, AuditEntry, CallStore, HealthStore, HealthWrite, InstanceRecord, PinRecord,
    PinStore, Rows, StoreError, UpdateStore,
};
use crate::audit::{CallQuery, CallRecord, StoredCall};
use crate::catalog::digest::Digest;
use crate::catalog::pin::PinKey;
use crate::health::{Transition, unix_ms};
use crate::rollout::UpdateRecord;

pub use schema::MIGRATIONS;

/// Connections the pool keeps at most: the health writer, the call audit,
/// the control API's reads and a prune at once, with room to spare.
pub const POOL_SIZE: usize = 8;

/// How long a statement waits for a free connection.
pub const WAIT: Duration = Duration::from_secs(5);

/// How long a new connection may take, when the URL does not say.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Rows deleted per statement by a prune.
const PRUNE_CHUNK: usize = 5000;

/// The shared store, serving [`HealthStore`], [`CallStore`] and
/// [`ActionLog`] from a pool of connections. Cheap to clone (every clone
/// shares the pool).
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    /// The replica whose writes this store announces ([`note`]), if any.
    replica: Option<String>,
    /// Whether the schema was brought up to date (`migrate`).
    migrated: Arc<AtomicBool>,
    /// `postgres://user@host:port/database`, never the password; for
    /// messages and `Debug`.
    location: String,
}

// === impl PostgresStore ===

impl PostgresStore {
    /// Connects to the database `config` names and brings its schema up to
    /// date.
    ///
    /// # Errors
    ///
    /// [`StoreErrorKind::Unavailable`]
    /// when the server cannot be reached, refuses the login or has no such
    /// database (the text names the server, the fix says what to check);
    /// [`StoreErrorKind::Corrupt`] when a
    /// newer Vigil migrated the database; the kind of the failure for a
    /// migration the server refused.
    pub async fn connect(config: &tokio_postgres::Config) -> Result<Self, StoreError> {
        let store = Self::pooled(config)?;
        store.migrate().await?;
        Ok(store)
    }

    /// The store over a pool of connections to `config`'s database, not
    /// yet connected: nothing is tried before the first statement (or
    /// [`PostgresStore::migrate`]).
    pub fn pooled(config: &tokio_postgres::Config) -> Result<Self, StoreError> {
        let mut config = config.clone();
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("vigil");
        }
        let location = location(&config);
        let pool = Pool::builder(Manager::new(config, NoTls))
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(WAIT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .recycle_timeout(Some(WAIT))
            .build()
            .map_err(|e| error::other(&location, e))?;
        Ok(PostgresStore {
            pool,
            replica: None,
            location,
            migrated: Arc::default(),
        })
    }

    /// Brings the schema up to date (once per store: later calls return
    /// at once).
    ///
    /// # Errors
    ///
    /// As [`PostgresStore::connect`].
    pub async fn migrate(&self) -> Result<(), StoreError> {
        if self.is_migrated() {
            return Ok(());
        }
        let mut client = self.client().await?;
        schema::migrate(&mut client, &self.location).await?;
        self.migrated.store(true, Ordering::Release);
        Ok(())
    }

    /// Whether [`PostgresStore::migrate`] succeeded.
    pub fn is_migrated(&self) -> bool {
        self.migrated.load(Ordering::Acquire)
    }

    /// Migrates, trying again with backoff while the server is out of
    /// reach, until it succeeds, fails otherwise (logged), or `shutdown`.
    pub async fn migrate_when_up(self, shutdown: tokio_util::sync::CancellationToken) {
        let mut wait = Duration::from_millis(500);
        loop {
            match self.migrate().await {
                Ok(()) => {
                    tracing::info!(store = %self.location, "the PostgreSQL store answers: schema up to date, supervision of shared backends resumes");
                    return;
                }
                Err(e) if e.kind() == super::StoreErrorKind::Unavailable => {
                    tracing::debug!(store = %self.location, error = %e, "the PostgreSQL store is still out of reach");
                }
                Err(e) => {
                    tracing::error!(store = %self.location, error = %e, "the PostgreSQL store answers but cannot be used; fix it and restart Vigil");
                    return;
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
            wait = (wait * 2).min(Duration::from_secs(10));
        }
    }

    /// This store, announcing its health writes as `replica`'s to the
    /// other replicas ([`note`]).
    pub fn announcing_as(mut self, replica: &str) -> Self {
        self.replica = Some(replica.to_owned());
        self
    }

    /// Where the store is: `postgres://user@host:port/database`.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The pool, for the cluster's own statements (`cluster::postgres`).
    pub(crate) fn pool(&self) -> &Pool {
        &self.pool
    }

    /// A pooled connection.
    async fn client(&self) -> Result<deadpool_postgres::Client, StoreError> {
        self.pool
            .get()
            .await
            .map_err(|e| error::pool(&self.location, e))
    }

    /// A failed statement, as the callers see it.
    fn failed(&self, e: tokio_postgres::Error) -> StoreError {
        error::statement(&self.location, e)
    }
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

/// `postgres://user@host:port/database` from `config`, without its
/// password: every host and port it names, in order.
pub fn location(config: &tokio_postgres::Config) -> String {
    use tokio_postgres::config::Host;
    let ports = config.get_ports();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let host = match h {
                Host::Tcp(name) => name.clone(),
                Host::Unix(dir) => dir.display().to_string(),
            };
            // One port for every host, or one each; PostgreSQL's default.
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            format!("{host}:{port}")
        })
        .collect();
    let user = config
        .get_user()
        .map(|u| format!("{u}@"))
        .unwrap_or_default();
    let db = config.get_dbname().or(config.get_user()).unwrap_or("");
    format!("postgres://{user}{}/{db}", hosts.join(","))
}

#[async_trait]
impl HealthStore for PostgresStore {
    async fn write(&self, writes: Vec<HealthWrite>) -> Result<(), StoreError> {
        if writes.is_empty() {
            return Ok(());
        }
        let mut client = self.client().await?;
        write_health(&mut client, &writes, self.replica.as_deref())
            .await
            .map_err(|e| self.failed(e))
    }

    async fn transitions(
        &self,
        backend: &str,
        limit: usize,
    ) -> Result<Rows<Transition>, StoreError> {
        let client = self.client().await?;
        transitions(&client, backend, limit)
            .await
            .map_err(|e| self.failed(e))
    }

    async fn load_instances(&self) -> Result<Rows<InstanceRecord>, StoreError> {
        let client = self.client().await?;
        load_instances(&client).await.map_err(|e| self.failed(e))
    }

    async fn instance(&self, backend: &str) -> Result<Option<InstanceRecord>, StoreError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&format!(
                "SELECT {} FROM instances WHERE backend = $1",
                InstanceRecord::COLUMNS
            ))
            .await
            .map_err(|e| self.failed(e))?;
        let found = client
            .query(&stmt, &[&backend])
            .await
            .map_err(|e| self.failed(e))?;
        Ok(rows::<InstanceRecord>(found)
            .map_err(|e| self.failed(e))?
            .rows
            .pop())
    }
}

impl PostgresStore {
    /// The instance records other live replicas keep of their own
    /// replica-local backends (named `NAME.REPLICA`), for the cluster-wide
    /// list of instances; `me`'s are left out.
    pub async fn instances_of_other_replicas(
        &self,
        me: &str,
    ) -> Result<Vec<InstanceRecord>, StoreError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&format!(
                "SELECT {} FROM instances i WHERE EXISTS (
                     SELECT 1 FROM replicas r
                     WHERE r.expires_at > now() AND r.replica <> $1
                       AND right(i.backend, length(r.replica) + 1) = '.' || r.replica)
                 ORDER BY backend",
                InstanceRecord::COLUMNS
            ))
            .await
            .map_err(|e| self.failed(e))?;
        let found = client
            .query(&stmt, &[&me])
            .await
            .map_err(|e| self.failed(e))?;
        Ok(rows::<InstanceRecord>(found)
            .map_err(|e| self.failed(e))?
            .logged("other replicas' instances"))
    }

    /// Sends `note` to every replica listening.
    pub async fn notify(&self, note: &note::Note) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(
                "SELECT pg_notify($1, $2)",
                &[&note::CHANNEL, &note.payload()],
            )
            .await
            .map_err(|e| self.failed(e))?;
        Ok(())
    }

    /// The transitions of `ids` that can be read, in id order: what
    /// another replica announced it wrote ([`note::Note::Health`]).
    pub async fn transitions_by_id(&self, ids: &[i64]) -> Result<Rows<Transition>, StoreError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&format!(
                "SELECT {} FROM transitions WHERE id = ANY($1) ORDER BY id",
                Transition::COLUMNS
            ))
            .await
            .map_err(|e| self.failed(e))?;
        let found = client
            .query(&stmt, &[&ids])
            .await
            .map_err(|e| self.failed(e))?;
        rows(found).map_err(|e| self.failed(e))
    }
}

#[async_trait]
impl CallStore for PostgresStore {
    async fn append(&self, calls: Vec<CallRecord>) -> Result<(), StoreError> {
        if calls.is_empty() {
            return Ok(());
        }
        let client = self.client().await?;
        append_calls(&client, &calls)
            .await
            .map_err(|e| self.failed(e))
    }

    async fn query(&self, q: &CallQuery) -> Result<Rows<StoredCall>, StoreError> {
        let client = self.client().await?;
        query_calls(&client, q).await.map_err(|e| self.failed(e))
    }

    async fn prune(&self, cutoff: SystemTime) -> Result<usize, StoreError> {
        // In chunks, each its own statement: a prune of a large backlog
        // never holds the table's rows locked for long.
        let client = self.client().await?;
        let mut deleted = 0;
        loop {
            let n = prune_chunk(&client, cutoff)
                .await
                .map_err(|e| self.failed(e))?;
            deleted += n;
            if n < PRUNE_CHUNK {
                return Ok(deleted);
            }
        }
    }
}

#[async_trait]
impl ActionLog for PostgresStore {
    async fn record(&self, entry: AuditEntry) -> Result<(), StoreError> {
        let client = self.client().await?;
        record_action(&client, &entry)
            .await
            .map_err(|e| self.failed(e))
    }

    async fn list(&self, limit: usize) -> Result<Rows<AuditEntry>, StoreError> {
        let client = self.client().await?;
        actions(&client, limit).await.map_err(|e| self.failed(e))
    }
}

#[async_trait]
impl PinStore for PostgresStore {
    async fn approvals(&self) -> Result<(Vec<String>, Rows<PinRecord>), StoreError> {
        let client = self.client().await?;
        let read = async {
            let backends = client
                .query("SELECT backend FROM pinned ORDER BY backend", &[])
                .await?
                .iter()
                .map(|r| r.try_get::<_, String>(0))
                .collect::<PgResult<Vec<_>>>()?;
            let pins = client
                .query(
                    &format!(
                        "SELECT {} FROM pins ORDER BY backend, kind, name",
                        PinRecord::COLUMNS
                    ),
                    &[],
                )
                .await?;
            Ok((backends, rows::<PinRecord>(pins)?))
        };
        read.await.map_err(|e| self.failed(e))
    }

    async fn approve(
        &self,
        backend: &str,
        items: Vec<(PinKey, Digest)>,
        by: &str,
        at: SystemTime,
    ) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let at = unix_ms::to_ms(at);
        let write = async {
            let tx = client.transaction().await?;
            tx.execute(
                "INSERT INTO pinned (backend, since) VALUES ($1, $2) ON CONFLICT (backend) DO NOTHING",
                &[&backend, &at],
            )
            .await?;
            let stmt = tx
                .prepare_cached(
                    "INSERT INTO pins (backend, kind, name, digest, approved_by, approved_at)
                     VALUES ($1, $2, $3, $4, $5, $6)
                     ON CONFLICT (backend, kind, name) DO UPDATE SET
                         digest = EXCLUDED.digest,
                         approved_by = EXCLUDED.approved_by,
                         approved_at = EXCLUDED.approved_at",
                )
                .await?;
            for (key, digest) in &items {
                tx.execute(
                    &stmt,
                    &[
                        &backend,
                        &key.kind.as_str(),
                        &&*key.name,
                        &digest.to_string(),
                        &by,
                        &at,
                    ],
                )
                .await?;
            }
            // The other replicas read the approvals again when this commits.
            if let Some(replica) = &self.replica {
                let note = note::Note::Approved {
                    r: replica.clone(),
                    b: backend.to_owned(),
                }
                .payload();
                tx.execute("SELECT pg_notify($1, $2)", &[&note::CHANNEL, &note])
                    .await?;
            }
            tx.commit().await
        };
        write.await.map_err(|e| self.failed(e))
    }
}

#[async_trait]
impl UpdateStore for PostgresStore {
    async fn save_update(&self, update: &UpdateRecord) -> Result<(), StoreError> {
        let record = super::sqlite::update_json(update)?;
        let client = self.client().await?;
        client
            .execute(
                "INSERT INTO updates (backend, id, phase, started_at, record)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (backend, id) DO UPDATE SET
                     phase = EXCLUDED.phase,
                     record = EXCLUDED.record",
                &[
                    &update.backend,
                    &update.id,
                    &update.phase.as_str(),
                    &unix_ms::to_ms(update.started_at),
                    &record,
                ],
            )
            .await
            .map(|_| ())
            .map_err(|e| self.failed(e))
    }

    async fn updates(&self, backend: &str, limit: usize) -> Result<Rows<UpdateRecord>, StoreError> {
        let client = self.client().await?;
        let found = client
            .query(
                &format!(
                    "SELECT {} FROM updates WHERE backend = $1 ORDER BY started_at DESC, id DESC LIMIT $2",
                    UpdateRecord::COLUMNS
                ),
                &[&backend, &sql_int(limit)],
            )
            .await
            .map_err(|e| self.failed(e))?;
        rows::<UpdateRecord>(found).map_err(|e| self.failed(e))
    }

    async fn unfinished_updates(&self) -> Result<Rows<UpdateRecord>, StoreError> {
        let client = self.client().await?;
        let found = client
            .query(
                &format!(
                    "SELECT {} FROM updates WHERE phase NOT IN ('succeeded', 'rolled_back') ORDER BY started_at, id",
                    UpdateRecord::COLUMNS
                ),
                &[],
            )
            .await
            .map_err(|e| self.failed(e))?;
        rows::<UpdateRecord>(found).map_err(|e| self.failed(e))
    }
}

// === statements ===

type PgResult<T> = Result<T, tokio_postgres::Error>;

/// Applies `writes` in order in one transaction; as `replica`, announces
/// each backend it changed ([`note::Note::Health`], delivered when the
/// transaction commits, so a listener reads what it is told of).
async fn write_health(
    client: &mut deadpool_postgres::Client,
    writes: &[HealthWrite],
    replica: Option<&str>,
) -> PgResult<()> {
    let tx = client.transaction().await?;
    let transition = tx
        .prepare_cached(
            "INSERT INTO transitions (backend, from_state, to_state, reason, at, replica)
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
        )
        .await?;
    let instance = tx
        .prepare_cached(
            "INSERT INTO instances
                 (backend, state, restart_count, consecutive_failures, quarantine_reason, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (backend) DO UPDATE SET
                 state = EXCLUDED.state,
                 restart_count = EXCLUDED.restart_count,
                 consecutive_failures = EXCLUDED.consecutive_failures,
                 quarantine_reason = EXCLUDED.quarantine_reason,
                 updated_at = EXCLUDED.updated_at",
        )
        .await?;
    let mut changed = note::Changed::default();
    for w in writes {
        match w {
            HealthWrite::Transition(t) => {
                let row = tx
                    .query_one(
                        &transition,
                        &[
                            &t.backend,
                            &t.from.as_str(),
                            &t.to.as_str(),
                            &t.reason,
                            &unix_ms::to_ms(t.at),
                            &replica,
                        ],
                    )
                    .await?;
                changed.add(&t.backend, Some(row.try_get(0)?));
            }
            HealthWrite::Instance(r) => {
                tx.execute(
                    &instance,
                    &[
                        &r.backend,
                        &r.state.as_str(),
                        // Saturates at i64::MAX, far beyond any real restart count.
                        &i64::try_from(r.restart_count).unwrap_or(i64::MAX),
                        &i64::from(r.consecutive_failures),
                        &r.quarantine_reason,
                        &unix_ms::to_ms(r.updated_at),
                    ],
                )
                .await?;
                changed.add(&r.backend, None);
            }
        }
    }
    if let Some(replica) = replica {
        for payload in changed.payloads(replica) {
            tx.execute("SELECT pg_notify($1, $2)", &[&note::CHANNEL, &payload])
                .await?;
        }
    }
    tx.commit().await
}

async fn transitions(
    client: &deadpool_postgres::Client,
    backend: &str,
    limit: usize,
) -> PgResult<Rows<Transition>> {
    let stmt = client
        .prepare_cached(&format!(
            "SELECT {} FROM (
                 SELECT * FROM transitions WHERE backend = $1 ORDER BY id DESC LIMIT $2
             ) AS newest ORDER BY id ASC",
            Transition::COLUMNS
        ))
        .await?;
    rows(client.query(&stmt, &[&backend, &sql_int(limit)]).await?)
}

async fn load_instances(client: &deadpool_postgres::Client) -> PgResult<Rows<InstanceRecord>> {
    let stmt = client
        .prepare_cached(&format!(
            "SELECT {} FROM instances ORDER BY backend",
            InstanceRecord::COLUMNS
        ))
        .await?;
    rows(client.query(&stmt, &[]).await?)
}

async fn record_action(client: &deadpool_postgres::Client, a: &AuditEntry) -> PgResult<()> {
    let stmt = client
        .prepare_cached(
            "INSERT INTO audit (principal, action, target, outcome, at) VALUES ($1, $2, $3, $4, $5)",
        )
        .await?;
    client
        .execute(
            &stmt,
            &[
                &a.principal,
                &a.action,
                &a.target,
                &a.outcome,
                &unix_ms::to_ms(a.at),
            ],
        )
        .await?;
    Ok(())
}

async fn actions(client: &deadpool_postgres::Client, limit: usize) -> PgResult<Rows<AuditEntry>> {
    let stmt = client
        .prepare_cached(&format!(
            "SELECT {} FROM (
                 SELECT * FROM audit ORDER BY id DESC LIMIT $1
             ) AS newest ORDER BY id ASC",
            AuditEntry::COLUMNS
        ))
        .await?;
    rows(client.query(&stmt, &[&sql_int(limit)]).await?)
}

/// Appends `calls` in one statement (so in one transaction): one array per
/// column, unnested in the batch's order, so ids follow that order.
async fn append_calls(client: &deadpool_postgres::Client, calls: &[CallRecord]) -> PgResult<()> {
    let stmt = client
        .prepare_cached(
            "INSERT INTO calls
                 (at, principal, session, backend, method, name, outcome, duration_us, arguments, issuer,
                  search_query_bytes, search_results)
             SELECT at, principal, session, backend, method, name, outcome, duration_us, arguments, issuer,
                    search_query_bytes, search_results
             FROM UNNEST($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[],
                         $6::text[], $7::text[], $8::bigint[], $9::text[], $10::text[],
                         $11::bigint[], $12::bigint[])
                  WITH ORDINALITY AS c (at, principal, session, backend, method, name, outcome,
                                        duration_us, arguments, issuer,
                                        search_query_bytes, search_results, n)
             ORDER BY n",
        )
        .await?;
    let column =
        |f: fn(&CallRecord) -> Option<&str>| -> Vec<Option<&str>> { calls.iter().map(f).collect() };
    let at: Vec<i64> = calls.iter().map(|c| unix_ms::to_ms(c.at)).collect();
    let principal = column(|c| Some(&c.principal));
    let session = column(|c| c.session.as_deref());
    let backend = column(|c| Some(&c.backend));
    let method = column(|c| Some(c.method.as_str()));
    let name = column(|c| Some(&c.name));
    let outcome = column(|c| Some(c.outcome.as_str()));
    // Saturates at i64::MAX µs, some 292,000 years.
    let duration_us: Vec<i64> = calls
        .iter()
        .map(|c| i64::try_from(c.duration_us).unwrap_or(i64::MAX))
        .collect();
    let arguments: Vec<Option<String>> = calls
        .iter()
        .map(|c| c.arguments.as_ref().map(|a| a.to_string()))
        .collect();
    let issuer = column(|c| c.issuer.as_deref());
    let search = |f: fn(&crate::audit::Searched) -> u32| -> Vec<Option<i64>> {
        calls
            .iter()
            .map(|c| c.search.as_ref().map(|s| i64::from(f(s))))
            .collect()
    };
    let query_bytes = search(|s| s.query_bytes);
    let results = search(|s| s.results);
    client
        .execute(
            &stmt,
            &[
                &at,
                &principal,
                &session,
                &backend,
                &method,
                &name,
                &outcome,
                &duration_us,
                &arguments,
                &issuer,
                &query_bytes,
                &results,
            ],
        )
        .await?;
    Ok(())
}

/// The rows `q` selects (see [`CallStore::query`]).
async fn query_calls(
    client: &deadpool_postgres::Client,
    q: &CallQuery,
) -> PgResult<Rows<StoredCall>> {
    let mut sql = format!("SELECT {} FROM calls WHERE TRUE", StoredCall::COLUMNS);
    let mut args: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
    let mut filter = |column: &str, op: &str, value: Box<dyn ToSql + Sync + Send>| {
        args.push(value);
        sql.push_str(&format!(" AND {column} {op} ${}", args.len()));
    };
    if let Some(p) = &q.principal {
        filter("principal", "=", Box::new(p.clone()));
    }
    if let Some(i) = &q.issuer {
        filter("issuer", "=", Box::new(i.clone()));
    }
    if let Some(b) = &q.backend {
        filter("backend", "=", Box::new(b.clone()));
    }
    if let Some(o) = q.outcome {
        filter("outcome", "=", Box::new(o.as_str()));
    }
    if let Some(since) = q.since {
        filter("at", ">=", Box::new(unix_ms::to_ms(since)));
    }
    if let Some(after) = q.after {
        filter("id", ">", Box::new(after));
    }
    args.push(Box::new(sql_int(q.limit)));
    sql.push_str(&format!(
        " ORDER BY id {} LIMIT ${}",
        if q.after.is_some() { "ASC" } else { "DESC" },
        args.len()
    ));
    let stmt = client.prepare_cached(&sql).await?;
    let params: Vec<&(dyn ToSql + Sync)> = args
        .iter()
        .map(|a| a.as_ref() as &(dyn ToSql + Sync))
        .collect();
    rows(client.query(&stmt, &params).await?)
}

/// Deletes up to [`PRUNE_CHUNK`] calls received before `cutoff`.
async fn prune_chunk(client: &deadpool_postgres::Client, cutoff: SystemTime) -> PgResult<usize> {
    let stmt = client
        .prepare_cached(
            "DELETE FROM calls WHERE id IN (SELECT id FROM calls WHERE at < $1 LIMIT $2)",
        )
        .await?;
    let n = client
        .execute(&stmt, &[&unix_ms::to_ms(cutoff), &sql_int(PRUNE_CHUNK)])
        .await?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

// === reading values back ===

/// Every row that can be read; those that cannot, skipped.
fn rows<T: Stored>(rows: Vec<Row>) -> PgResult<Rows<T>> {
    let mut out = Rows::default();
    for row in &rows {
        out.push(row)?;
    }
    Ok(out)
}

impl read::StoredRow for Row {
    type Error = tokio_postgres::Error;

    fn text(&self, idx: usize) -> PgResult<String> {
        self.try_get(idx)
    }

    fn maybe_text(&self, idx: usize) -> PgResult<Option<String>> {
        self.try_get(idx)
    }

    fn integer(&self, idx: usize) -> PgResult<i64> {
        self.try_get(idx)
    }

    fn maybe_integer(&self, idx: usize) -> PgResult<Option<i64>> {
        self.try_get(idx)
    }
}

#[cfg(test)]
mod tests;
