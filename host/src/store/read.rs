//! Reading stored values back, for every implementation: what a column's
//! text or integer stands for, or why its row is skipped
//! ([`Rows::skipped`]).
//!
//! Every store writes the same representation — states by their lowercase
//! names ([`HealthState::as_str`]), times as milliseconds since the Unix
//! epoch, counts as signed 64-bit integers, call arguments as JSON text —
//! so each reads it back the same way: its driver fetches the raw value
//! (and fails with its own error type `E`), these say what it means.

use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{Rows, SkippedRow};
use crate::health::HealthState;

/// Why one row could not be read: the database failed (the whole read
/// fails with the driver's error `E`), or one value is not one this build
/// reads (the row is skipped).
pub(crate) enum Unread<E> {
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

impl<T> Rows<T> {
    /// Keeps a row that was read; records one with a bad value as skipped
    /// (`row` says which it was); fails on a database error.
    pub(crate) fn take<E>(
        &mut self,
        read: Result<T, Unread<E>>,
        row: impl FnOnce() -> SkippedRow,
    ) -> Result<(), E> {
        match read {
            Ok(r) => self.rows.push(r),
            Err(Unread::Value { column, value, why }) => self.skipped.push(SkippedRow {
                column,
                value,
                why,
                ..row()
            }),
            Err(Unread::Db(e)) => return Err(e),
        }
        Ok(())
    }
}

/// A `LIMIT` or count as the databases' 64-bit integer; `usize` beyond
/// `i64` means "all".
pub(crate) fn sql_int(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A health state by its name.
pub(crate) fn state<E>(value: String, column: &'static str) -> Result<HealthState, Unread<E>> {
    value.parse().map_err(|_| Unread::Value {
        column,
        value,
        why: "is not a state this build knows (written by a newer Vigil?)",
    })
}

/// A value stored by its name (a call's method, its outcome).
pub(crate) fn parsed<T: FromStr, E>(value: String, column: &'static str) -> Result<T, Unread<E>> {
    value.parse().map_err(|_| Unread::Value {
        column,
        value,
        why: "is not a value this build knows (written by a newer Vigil?)",
    })
}

/// A count or duration, narrowed to its type.
pub(crate) fn int<T: TryFrom<i64>, E>(value: i64, column: &'static str) -> Result<T, Unread<E>> {
    T::try_from(value).map_err(|_| Unread::Value {
        column,
        value: value.to_string(),
        why: "is out of range",
    })
}

/// Milliseconds since the epoch; negative or unrepresentable is a bad
/// value (no store writes either).
pub(crate) fn time<E>(value: i64, column: &'static str) -> Result<SystemTime, Unread<E>> {
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
pub(crate) fn arguments<E>(text: Option<String>) -> Result<Option<serde_json::Value>, Unread<E>> {
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
