//! PostgreSQL failures as [`StoreError`]s: the kind from the driver's own
//! classification and the server's SQLSTATE (its class, the first two
//! characters, or a code named in [`SqlState`]), never from the message;
//! the context names the server (never the password), the fix says what
//! an operator checks.

use std::error::Error;

use tokio_postgres::error::SqlState;

use crate::store::{StoreError, StoreErrorKind};

type PoolError = deadpool_postgres::PoolError;

/// A driver error, printed with its causes: tokio-postgres prints only
/// its own kind ("db error", "error connecting to server") and keeps the
/// server's message or the socket's error as its source, which an
/// operator must see. The text holds the whole chain, so no `source()`
/// (reporters that print the chain would print it twice); the driver's
/// error is [`PgError::driver`].
#[derive(Debug)]
pub struct PgError(tokio_postgres::Error);

impl PgError {
    /// The driver's error, for its kind and SQLSTATE.
    pub fn driver(&self) -> &tokio_postgres::Error {
        &self.0
    }
}

/// `error connecting to server: Connection refused (os error 111)`,
/// `db error: ERROR: database "x" does not exist`.
impl std::fmt::Display for PgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = self.0.source();
        while let Some(c) = cause {
            write!(f, ": {c}")?;
            cause = c.source();
        }
        Ok(())
    }
}

impl Error for PgError {}

/// The kind of a failure the server reported, by its SQLSTATE.
pub(super) fn kind_of_state(code: &SqlState) -> StoreErrorKind {
    if *code == SqlState::DATA_CORRUPTED || *code == SqlState::INDEX_CORRUPTED {
        return StoreErrorKind::Corrupt;
    }
    if *code == SqlState::DISK_FULL || *code == SqlState::IO_ERROR {
        return StoreErrorKind::Io;
    }
    if *code == SqlState::INVALID_CATALOG_NAME
        || *code == SqlState::LOCK_NOT_AVAILABLE
        || *code == SqlState::READ_ONLY_SQL_TRANSACTION
    {
        return StoreErrorKind::Unavailable;
    }
    match code.code().get(..2) {
        // Connection exception; operator intervention (shutdown, cancel,
        // "cannot connect now"); insufficient resources (too many
        // connections, out of memory); invalid authorization.
        Some("08" | "57" | "53" | "28") => StoreErrorKind::Unavailable,
        // Integrity constraint violation; transaction rollback
        // (serialization failure, deadlock).
        Some("23" | "40") => StoreErrorKind::Conflict,
        _ => StoreErrorKind::Other,
    }
}

/// The kind of a driver error: the server's SQLSTATE when it answered;
/// a connection that closed or failed at the socket is unavailable;
/// anything else (a value the driver could not convert) is other.
pub(super) fn kind_of(e: &tokio_postgres::Error) -> StoreErrorKind {
    if let Some(code) = e.code() {
        return kind_of_state(code);
    }
    if e.is_closed() || io_cause(e) {
        return StoreErrorKind::Unavailable;
    }
    StoreErrorKind::Other
}

/// Whether a socket error is among `e`'s causes.
fn io_cause(e: &(dyn Error + 'static)) -> bool {
    let mut cause = e.source();
    while let Some(c) = cause {
        if c.is::<std::io::Error>() {
            return true;
        }
        cause = c.source();
    }
    false
}

/// What an operator checks when the store fails with `kind` (and, for
/// the server's own refusals, `code`).
fn fix(location: &str, kind: StoreErrorKind, code: Option<&SqlState>) -> String {
    match (kind, code) {
        (_, Some(c)) if *c == SqlState::INVALID_CATALOG_NAME => format!(
            "create the database named in the store URL (CREATE DATABASE …) on {location}, or correct the URL"
        ),
        // SQLSTATE class 28, "invalid authorization specification" (a
        // wrong password among them): the code's class, not a message.
        (_, Some(c)) if c.code().starts_with("28") => format!(
            "check the user and password in the store URL, and that the server at {location} lets that user in (pg_hba.conf)"
        ),
        (_, Some(c)) if *c == SqlState::READ_ONLY_SQL_TRANSACTION => format!(
            "the server at {location} is read-only (a standby?): point the store URL at the primary"
        ),
        (StoreErrorKind::Unavailable, _) => format!(
            "check that the PostgreSQL server at {location} is running and accepts connections from this host, and that the store URL names it"
        ),
        (StoreErrorKind::Io, _) => format!("check the disk of the PostgreSQL server at {location}"),
        (StoreErrorKind::Corrupt, _) => format!(
            "the server at {location} reports damaged data: see its log, and restore the database from a backup"
        ),
        _ => format!("see the log of the PostgreSQL server at {location}"),
    }
}

/// A failed statement (or connection) on the store at `location`.
pub(super) fn statement(location: &str, e: tokio_postgres::Error) -> StoreError {
    let kind = kind_of(&e);
    let fix = fix(location, kind, e.code());
    StoreError::new(kind, PgError(e))
        .context(format!("store at {location}"))
        .with_fix(fix)
}

/// No connection from the pool: the server's refusal, or none free in time.
pub(super) fn pool(location: &str, e: PoolError) -> StoreError {
    match e {
        PoolError::Backend(e) => statement(location, e),
        PoolError::Timeout(_) | PoolError::Closed => {
            let fix = fix(location, StoreErrorKind::Unavailable, None);
            StoreError::new(StoreErrorKind::Unavailable, e)
                .context(format!("store at {location}"))
                .with_fix(fix)
        }
        e => other(location, e),
    }
}

/// A failure of Vigil's own side (a pool that cannot be built).
pub(super) fn other(location: &str, e: impl Into<Box<dyn Error + Send + Sync>>) -> StoreError {
    StoreError::new(StoreErrorKind::Other, e).context(format!("store at {location}"))
}

/// The database was migrated by a newer Vigil.
pub(super) fn newer_schema(location: &str, found: i64, known: usize) -> StoreError {
    StoreError::new(
        StoreErrorKind::Corrupt,
        format!(
            "schema_migrations holds version {found}; this build knows schema versions up to {known}"
        ),
    )
    .context(format!("store at {location}"))
    .with_fix(
        "the database was migrated by a newer Vigil: run that version, or point the store URL at another database",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates_map_to_kinds_by_code_and_class() {
        for (code, kind) in [
            (SqlState::CONNECTION_FAILURE, StoreErrorKind::Unavailable),
            (SqlState::ADMIN_SHUTDOWN, StoreErrorKind::Unavailable),
            (SqlState::CANNOT_CONNECT_NOW, StoreErrorKind::Unavailable),
            (SqlState::TOO_MANY_CONNECTIONS, StoreErrorKind::Unavailable),
            (SqlState::INVALID_PASSWORD, StoreErrorKind::Unavailable),
            (SqlState::INVALID_CATALOG_NAME, StoreErrorKind::Unavailable),
            (
                SqlState::READ_ONLY_SQL_TRANSACTION,
                StoreErrorKind::Unavailable,
            ),
            (SqlState::UNIQUE_VIOLATION, StoreErrorKind::Conflict),
            (
                SqlState::T_R_SERIALIZATION_FAILURE,
                StoreErrorKind::Conflict,
            ),
            (SqlState::T_R_DEADLOCK_DETECTED, StoreErrorKind::Conflict),
            (SqlState::DISK_FULL, StoreErrorKind::Io),
            (SqlState::IO_ERROR, StoreErrorKind::Io),
            (SqlState::DATA_CORRUPTED, StoreErrorKind::Corrupt),
            (SqlState::INDEX_CORRUPTED, StoreErrorKind::Corrupt),
            (SqlState::SYNTAX_ERROR, StoreErrorKind::Other),
            (SqlState::UNDEFINED_TABLE, StoreErrorKind::Other),
        ] {
            assert_eq!(kind_of_state(&code), kind, "{}", code.code());
        }
    }

    #[test]
    fn the_fix_names_the_server_and_what_to_check() {
        let at = "postgres://vigil@db:5432/vigil";
        let f = fix(
            at,
            StoreErrorKind::Unavailable,
            Some(&SqlState::INVALID_CATALOG_NAME),
        );
        assert!(f.contains("CREATE DATABASE") && f.contains(at), "{f}");
        let f = fix(
            at,
            StoreErrorKind::Unavailable,
            Some(&SqlState::INVALID_PASSWORD),
        );
        assert!(f.contains("password") && f.contains("pg_hba.conf"), "{f}");
        let f = fix(at, StoreErrorKind::Unavailable, None);
        assert!(f.contains("is running") && f.contains(at), "{f}");
    }
}
