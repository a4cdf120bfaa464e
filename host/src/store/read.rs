//! Reading stored rows back, for every implementation: what a row's
//! columns stand for, or why it is skipped ([`Rows::skipped`]).
//!
//! Every store writes the same representation — states by their lowercase
//! names ([`HealthState::as_str`]), times as milliseconds since the Unix
//! epoch, counts as signed 64-bit integers, call arguments as JSON text —
//! and selects each table's columns in the same order ([`Stored::COLUMNS`]),
//! so each reads them back with the same code: its driver fetches the raw
//! values ([`StoredRow`], failing with its own error type), these say what
//! they mean.

use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{AuditEntry, InstanceRecord, Rows, SkippedRow};
use crate::audit::{CallRecord, Method, Outcome, Searched, StoredCall};
use crate::health::{HealthState, Transition};

/// A row as a store's driver returns it: raw values by column index.
pub trait StoredRow {
    /// The driver's error.
    type Error;
    fn text(&self, idx: usize) -> Result<String, Self::Error>;
    fn maybe_text(&self, idx: usize) -> Result<Option<String>, Self::Error>;
    fn integer(&self, idx: usize) -> Result<i64, Self::Error>;
    fn maybe_integer(&self, idx: usize) -> Result<Option<i64>, Self::Error>;
}

/// What one table's rows are read as.
pub trait Stored: Sized {
    /// The columns a store selects, in the order [`Stored::read`] reads.
    const COLUMNS: &'static str;
    /// The row as a value, or why it cannot be.
    fn read<R: StoredRow>(row: &R) -> Result<Self, Unread<R::Error>>;
    /// Which row it was, for [`Rows::skipped`].
    fn which<R: StoredRow>(row: &R) -> SkippedRow;
}

/// Why one row could not be read: the database failed (the whole read
/// fails with the driver's error `E`), or one value is not one this build
/// reads (the row is skipped).
pub enum Unread<E> {
    Db(E),
    Value {
        column: &'static str,
        value: String,
        why: &'static str,
    },
}

impl<E> From<E> for Unread<E> {
    fn from(e: E) -> Self {
        Unread::Db(e)
    }
}

impl<T: Stored> Rows<T> {
    /// Reads `row`: kept when it could be read, recorded as skipped when
    /// one of its values is bad; a database error fails the whole read.
    pub(crate) fn push<R: StoredRow>(&mut self, row: &R) -> Result<(), R::Error> {
        match T::read(row) {
            Ok(r) => self.rows.push(r),
            Err(Unread::Value { column, value, why }) => self.skipped.push(SkippedRow {
                column,
                value,
                why,
                ..T::which(row)
            }),
            Err(Unread::Db(e)) => return Err(e),
        }
        Ok(())
    }
}

// === the tables ===

impl Stored for super::PinRecord {
    const COLUMNS: &'static str = "backend, kind, name, digest";

    fn read<R: StoredRow>(row: &R) -> Result<Self, Unread<R::Error>> {
        let kind = row.text(1)?;
        let digest = row.text(3)?;
        Ok(super::PinRecord {
            backend: row.text(0)?,
            key: crate::catalog::pin::PinKey {
                kind: crate::catalog::pin::PinKind::parse(&kind).ok_or(Unread::Value {
                    column: "kind",
                    value: kind.clone(),
                    why: "not a kind of definition",
                })?,
                name: row.text(2)?.into(),
            },
            digest: digest.parse().map_err(|_| Unread::Value {
                column: "digest",
                value: digest.clone(),
                why: "not 64 hex digits",
            })?,
        })
    }

    fn which<R: StoredRow>(row: &R) -> SkippedRow {
        SkippedRow {
            table: "pins",
            backend: row.text(0).ok(),
            ..SkippedRow::default()
        }
    }
}

impl Stored for crate::rollout::UpdateRecord {
    const COLUMNS: &'static str = "backend, id, record";

    fn read<R: StoredRow>(row: &R) -> Result<Self, Unread<R::Error>> {
        let text = row.text(2)?;
        serde_json::from_str(&text).map_err(|_| Unread::Value {
            column: "record",
            value: text.chars().take(200).collect(),
            why: "not an update record this build reads",
        })
    }

    fn which<R: StoredRow>(row: &R) -> SkippedRow {
        SkippedRow {
            table: "updates",
            backend: row.text(0).ok(),
            ..SkippedRow::default()
        }
    }
}

impl Stored for Transition {
    const COLUMNS: &'static str = "backend, from_state, to_state, reason, at, id";

    fn read<R: StoredRow>(row: &R) -> Result<Self, Unread<R::Error>> {
        Ok(Transition {
            backend: row.text(0)?,
            from: state(row.text(1)?, "from_state")?,
            to: state(row.text(2)?, "to_state")?,
            reason: row.text(3)?,
            at: time(row.integer(4)?, "at")?,
        })
    }

    fn which<R: StoredRow>(row: &R) -> SkippedRow {
        SkippedRow {
            table: "transitions",
            backend: row.text(0).ok(),
            id: row.integer(5).ok(),
            ..SkippedRow::default()
        }
    }
}

impl Stored for InstanceRecord {
    const COLUMNS: &'static str =
        "backend, state, restart_count, consecutive_failures, quarantine_reason, updated_at";

    fn read<R: StoredRow>(row: &R) -> Result<Self, Unread<R::Error>> {
        Ok(InstanceRecord {
            backend: row.text(0)?,
            state: state(row.text(1)?, "state")?,
            restart_count: int(row.integer(2)?, "restart_count")?,
            consecutive_failures: int(row.integer(3)?, "consecutive_failures")?,
            quarantine_reason: row.maybe_text(4)?,
            updated_at: time(row.integer(5)?, "updated_at")?,
        })
    }

    fn which<R: StoredRow>(row: &R) -> SkippedRow {
        SkippedRow {
            table: "instances",
            backend: row.text(0).ok(),
            ..SkippedRow::default()
        }
    }
}

impl Stored for AuditEntry {
    const COLUMNS: &'static str = "principal, action, target, outcome, at, id";

    fn read<R: StoredRow>(row: &R) -> Result<Self, Unread<R::Error>> {
        Ok(AuditEntry {
            principal: row.text(0)?,
            action: row.text(1)?,
            target: row.text(2)?,
            outcome: row.text(3)?,
            at: time(row.integer(4)?, "at")?,
        })
    }

    fn which<R: StoredRow>(row: &R) -> SkippedRow {
        SkippedRow {
            table: "audit",
            id: row.integer(5).ok(),
            ..SkippedRow::default()
        }
    }
}

/// The `calls` table: `method` and `outcome` by their JSON names
/// (`tools/call`, `rate_limited`), `arguments` JSON text or NULL.
impl Stored for StoredCall {
    const COLUMNS: &'static str = "id, at, principal, session, backend, method, name, outcome, duration_us, arguments, issuer, search_query_bytes, search_results";

    fn read<R: StoredRow>(row: &R) -> Result<Self, Unread<R::Error>> {
        Ok(StoredCall {
            id: row.integer(0)?,
            call: CallRecord {
                at: time(row.integer(1)?, "at")?,
                principal: row.text(2)?,
                issuer: row.maybe_text(10)?,
                session: row.maybe_text(3)?,
                backend: row.text(4)?,
                method: parsed::<Method, _>(row.text(5)?, "method")?,
                name: row.text(6)?,
                outcome: parsed::<Outcome, _>(row.text(7)?, "outcome")?,
                duration_us: int(row.integer(8)?, "duration_us")?,
                arguments: arguments(row.maybe_text(9)?)?,
                search: searched(row.maybe_integer(11)?, row.maybe_integer(12)?)?,
            },
        })
    }

    fn which<R: StoredRow>(row: &R) -> SkippedRow {
        SkippedRow {
            table: "calls",
            backend: row.text(4).ok(),
            id: row.integer(0).ok(),
            ..SkippedRow::default()
        }
    }
}

// === values ===

/// A `LIMIT` or count as the databases' 64-bit integer; `usize` beyond
/// `i64` means "all".
pub(crate) fn sql_int(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A health state by its name.
fn state<E>(value: String, column: &'static str) -> Result<HealthState, Unread<E>> {
    value.parse().map_err(|_| Unread::Value {
        column,
        value,
        why: "is not a state this build knows (written by a newer Vigil?)",
    })
}

/// A value stored by its name (a call's method, its outcome).
fn parsed<T: FromStr, E>(value: String, column: &'static str) -> Result<T, Unread<E>> {
    value.parse().map_err(|_| Unread::Value {
        column,
        value,
        why: "is not a value this build knows (written by a newer Vigil?)",
    })
}

/// A `find_tool`'s figures: both columns set, or neither (every other
/// call).
fn searched<E>(
    query_bytes: Option<i64>,
    results: Option<i64>,
) -> Result<Option<Searched>, Unread<E>> {
    match (query_bytes, results) {
        (Some(q), Some(r)) => Ok(Some(Searched {
            query_bytes: int(q, "search_query_bytes")?,
            results: int(r, "search_results")?,
        })),
        _ => Ok(None),
    }
}

/// A count or duration, narrowed to its type.
fn int<T: TryFrom<i64>, E>(value: i64, column: &'static str) -> Result<T, Unread<E>> {
    T::try_from(value).map_err(|_| Unread::Value {
        column,
        value: value.to_string(),
        why: "is out of range",
    })
}

/// Milliseconds since the epoch; negative or unrepresentable is a bad
/// value (no store writes either).
fn time<E>(value: i64, column: &'static str) -> Result<SystemTime, Unread<E>> {
    u64::try_from(value)
        .ok()
        .and_then(|ms| UNIX_EPOCH.checked_add(Duration::from_millis(ms)))
        .ok_or_else(|| Unread::Value {
            column,
            value: value.to_string(),
            why: "is not a time this store writes (milliseconds since 1970)",
        })
}

/// A call's arguments: JSON text, or none.
fn arguments<E>(text: Option<String>) -> Result<Option<serde_json::Value>, Unread<E>> {
    let Some(text) = text else {
        return Ok(None);
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|_| Unread::Value {
            column: "arguments",
            value: text.chars().take(80).collect(),
            why: "is not JSON",
        })
}
