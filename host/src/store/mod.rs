//! Store: what must survive a gateway restart — each instance's current
//! state, restart counts and quarantine, the append-only transition log and
//! the audit log of operator actions.
//!
//! [`Store`] is the seam: [`sqlite::SqliteStore`] is the embedded default
//! (one file under `data_dir`); a PostgreSQL implementation can serve several
//! replicas later. The data plane never waits on the store.

pub mod sqlite;
mod writer;

pub use writer::StoreWriter;

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

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

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store at {path}: {source}")]
    Open {
        path: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("store: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("store: cannot create {path}: {source}")]
    Dir {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("store: bad value in column {column}: {value}")]
    Corrupt { column: &'static str, value: String },
}

/// Durable health state. Calls are synchronous and short; async callers
/// run them with `spawn_blocking`.
pub trait Store: Send + Sync + 'static {
    /// Appends one transition to the log.
    fn record_transition(&self, t: &Transition) -> Result<(), StoreError>;
    /// The newest `limit` transitions of `backend`, oldest first.
    fn transitions(&self, backend: &str, limit: usize) -> Result<Vec<Transition>, StoreError>;
    /// Creates or replaces an instance's current record.
    fn save_instance(&self, r: &InstanceRecord) -> Result<(), StoreError>;
    /// Every instance record (to restore state at start).
    fn load_instances(&self) -> Result<Vec<InstanceRecord>, StoreError>;
    /// Appends one audit entry.
    fn record_audit(&self, a: &AuditEntry) -> Result<(), StoreError>;
    /// The newest `limit` audit entries, oldest first.
    fn audit(&self, limit: usize) -> Result<Vec<AuditEntry>, StoreError>;
}
