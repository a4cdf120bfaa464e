//! The PostgreSQL schema and its migrations (see the store's module doc):
//! versions recorded in `schema_migrations`, applied under a
//! transaction-scoped advisory lock so replicas starting together migrate
//! once.

use super::error;
use crate::store::StoreError;

/// The advisory lock every replica takes to migrate: `vigil` in ASCII,
/// then 1 (a key of its own, so no other use of advisory locks on the same
/// database waits on it by chance).
pub(super) const LOCK: i64 = 0x7669_6769_6c00_0001;

/// Schema migrations; entry `i` takes the schema from version `i` to
/// `i + 1`. A released entry is never edited, only followed by a new one.
///
/// The tables are SQLite's (`sqlite.rs`), with its later migrations
/// folded into the first version here.
pub const MIGRATIONS: &[&str] = &[
    // 1: the initial schema.
    "CREATE TABLE instances (
         backend              text   NOT NULL PRIMARY KEY,
         state                text   NOT NULL,
         restart_count        bigint NOT NULL,
         consecutive_failures bigint NOT NULL,
         quarantine_reason    text,
         updated_at           bigint NOT NULL
     );
     CREATE TABLE transitions (
         id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
         backend    text   NOT NULL,
         from_state text   NOT NULL,
         to_state   text   NOT NULL,
         reason     text   NOT NULL,
         at         bigint NOT NULL
     );
     CREATE INDEX transitions_backend_id ON transitions (backend, id);
     CREATE TABLE audit (
         id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
         principal text   NOT NULL,
         action    text   NOT NULL,
         target    text   NOT NULL,
         outcome   text   NOT NULL,
         at        bigint NOT NULL
     );
     CREATE TABLE calls (
         id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
         at          bigint NOT NULL,
         principal   text   NOT NULL,
         session     text,
         backend     text   NOT NULL,
         method      text   NOT NULL,
         name        text   NOT NULL,
         outcome     text   NOT NULL,
         duration_us bigint NOT NULL,
         arguments   text,
         issuer      text
     );
     CREATE INDEX calls_at ON calls (at);
     CREATE INDEX calls_principal_id ON calls (principal, id);",
    // 2: the cluster (`cluster::postgres`): supervision leases, timed by
    // the server's clock, each with an epoch raised at every change of
    // holder (with whom it was taken from, and when their lease ran out);
    // the replicas that share the store; and which replica made each
    // transition.
    "CREATE TABLE leases (
         backend     text        NOT NULL PRIMARY KEY,
         holder      text        NOT NULL,
         epoch       bigint      NOT NULL,
         expires_at  timestamptz NOT NULL,
         acquired_at timestamptz NOT NULL,
         -- Who held it before, and when their lease ran out: the order of
         -- a takeover, kept for whoever checks it.
         taken_from  text,
         previous_expires_at timestamptz
     );
     CREATE TABLE replicas (
         replica       text        NOT NULL PRIMARY KEY,
         run           text        NOT NULL,
         started_at    timestamptz NOT NULL,
         seen_at       timestamptz NOT NULL,
         expires_at    timestamptz NOT NULL,
         config_digest text        NOT NULL,
         version       text        NOT NULL
     );
     -- Which replica's supervisor made each transition.
     ALTER TABLE transitions ADD COLUMN replica text;",
    // 3: the session book (`cluster::postgres::book`): sessions closed
    // before they expired, and what open ones kept, by rmcp's id of the
    // session (never the sealed id, a credential); each row goes when its
    // session would have expired (seconds since 1970).
    "CREATE TABLE sessions_closed (
         session    text   NOT NULL PRIMARY KEY,
         expires_at bigint NOT NULL
     );
     CREATE TABLE sessions_kept (
         session       text   NOT NULL PRIMARY KEY,
         expires_at    bigint NOT NULL,
         log_level     text,
         subscriptions text[] NOT NULL DEFAULT '{}'
     );",
    // 4: operator commands routed to the replica that supervises the
    // backend (`cluster::postgres::command`): asked by one replica,
    // claimed and carried out by the lease holder, answered in the row.
    "CREATE TABLE commands (
         id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
         backend    text        NOT NULL,
         command    text        NOT NULL,
         asked_by   text        NOT NULL,
         asked_at   timestamptz NOT NULL DEFAULT now(),
         claimed_by text,
         done_at    timestamptz,
         answer     text
     );",
    // 5: the `commands` rows carry any request one replica routes to
    // another (`cluster::postgres::route`): an operator command for a
    // backend's supervisor, or an MRTR retry for the replica holding its
    // parked call. `target` names the backend or the replica, `kind` which.
    "ALTER TABLE commands RENAME COLUMN backend TO target;
     ALTER TABLE commands RENAME COLUMN command TO body;
     ALTER TABLE commands ADD COLUMN kind text NOT NULL DEFAULT 'command';",
    // 6: the pin guard (`catalog::pin`): the backends that ever had an
    // approval, and each approved definition's digest.
    "CREATE TABLE pinned (
         backend text   NOT NULL PRIMARY KEY,
         since   bigint NOT NULL
     );
     CREATE TABLE pins (
         backend     text   NOT NULL,
         kind        text   NOT NULL,
         name        text   NOT NULL,
         digest      text   NOT NULL,
         approved_by text   NOT NULL,
         approved_at bigint NOT NULL,
         PRIMARY KEY (backend, kind, name)
     );",
    // 7: updates of backends (`app::rollouts`): the record as JSON text,
    // and what it is found by.
    "CREATE TABLE updates (
         backend    text   NOT NULL,
         id         text   NOT NULL,
         phase      text   NOT NULL,
         started_at bigint NOT NULL,
         record     text   NOT NULL,
         PRIMARY KEY (backend, id)
     );
     CREATE INDEX updates_phase ON updates (phase);",
    // 8: what each `find_tool` asked and found (`audit::Searched`); NULL
    // for every other call.
    "ALTER TABLE calls ADD COLUMN search_query_bytes bigint;
     ALTER TABLE calls ADD COLUMN search_results bigint;",
];

/// Brings the schema up to date in one transaction, holding [`LOCK`]:
/// applies every migration past the newest recorded version and records
/// each. A database with a version this build does not know is refused.
pub(super) async fn migrate(
    client: &mut deadpool_postgres::Client,
    location: &str,
) -> Result<(), StoreError> {
    let failed = |e| error::statement(location, e);
    let tx = client.transaction().await.map_err(failed)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK])
        .await
        .map_err(failed)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version    integer     NOT NULL PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now()
         )",
    )
    .await
    .map_err(failed)?;
    let found: i64 = tx
        .query_one(
            "SELECT coalesce(max(version), 0)::bigint FROM schema_migrations",
            &[],
        )
        .await
        .and_then(|row| row.try_get(0))
        .map_err(failed)?;
    let known = MIGRATIONS.len();
    let from = usize::try_from(found)
        .ok()
        .filter(|v| *v <= known)
        .ok_or_else(|| error::newer_schema(location, found, known))?;
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(from) {
        let version = i32::try_from(i + 1).unwrap_or(i32::MAX);
        tx.batch_execute(sql).await.map_err(failed)?;
        tx.execute(
            "INSERT INTO schema_migrations (version) VALUES ($1)",
            &[&version],
        )
        .await
        .map_err(failed)?;
        tracing::info!(version, store = location, "store schema migrated");
    }
    tx.commit().await.map_err(failed)
}
