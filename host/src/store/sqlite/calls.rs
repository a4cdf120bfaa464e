//! The `calls` table: the audit of MCP calls (`crate::audit`).
//!
//! Times are milliseconds since the epoch like every other table;
//! `method` and `outcome` are their JSON names (`tools/call`,
//! `rate_limited`), `arguments` JSON text or NULL, read back as every
//! store does (`store/read.rs`). A row whose method or outcome this build
//! does not know (written by a newer Vigil), or whose arguments are not
//! JSON, is skipped and reported, never a reason to drop the others.

use std::time::SystemTime;

use rusqlite::types::Value as Sql;
use rusqlite::{Connection, params, params_from_iter};

use super::read::Stored;
use super::{Rows, sql_int};
use crate::audit::{CallQuery, CallRecord, StoredCall};
use crate::health::unix_ms;

/// Rows deleted per statement by a prune.
pub(super) const PRUNE_CHUNK: usize = 5000;

/// Appends `calls` in one transaction.
pub(super) fn append(conn: &mut Connection, calls: &[CallRecord]) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    {
        let mut stmt = tx.prepare_cached(
            "INSERT INTO calls (at, principal, session, backend, method, name, outcome, duration_us, arguments, issuer,
                                search_query_bytes, search_results)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        )?;
        for c in calls {
            let arguments = c.arguments.as_ref().map(|a| a.to_string());
            stmt.execute(params![
                unix_ms::to_ms(c.at),
                c.principal,
                c.session,
                c.backend,
                c.method.as_str(),
                c.name,
                c.outcome.as_str(),
                // Saturates at i64::MAX µs, some 292,000 years.
                i64::try_from(c.duration_us).unwrap_or(i64::MAX),
                arguments,
                c.issuer,
                c.search.map(|s| s.query_bytes),
                c.search.map(|s| s.results),
            ])?;
        }
    }
    tx.commit()
}

/// The rows `q` selects (see [`crate::store::CallStore::query`]).
pub(super) fn read(conn: &Connection, q: &CallQuery) -> rusqlite::Result<Rows<StoredCall>> {
    let mut sql = format!("SELECT {} FROM calls WHERE 1 = 1", StoredCall::COLUMNS);
    let mut args: Vec<Sql> = Vec::new();
    let mut filter = |clause: &str, value: Sql| {
        sql.push_str(clause);
        args.push(value);
    };
    if let Some(p) = &q.principal {
        filter(" AND principal = ?", Sql::Text(p.clone()));
    }
    if let Some(i) = &q.issuer {
        filter(" AND issuer = ?", Sql::Text(i.clone()));
    }
    if let Some(b) = &q.backend {
        filter(" AND backend = ?", Sql::Text(b.clone()));
    }
    if let Some(o) = q.outcome {
        filter(" AND outcome = ?", Sql::Text(o.as_str().to_owned()));
    }
    if let Some(since) = q.since {
        filter(" AND at >= ?", Sql::Integer(unix_ms::to_ms(since)));
    }
    if let Some(after) = q.after {
        filter(" AND id > ?", Sql::Integer(after));
    }
    sql.push_str(if q.after.is_some() {
        " ORDER BY id ASC LIMIT ?"
    } else {
        " ORDER BY id DESC LIMIT ?"
    });
    args.push(Sql::Integer(sql_int(q.limit)));
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = stmt.query(params_from_iter(args))?;
    let mut out = Rows::default();
    while let Some(row) = rows.next()? {
        out.push(row)?;
    }
    Ok(out)
}

/// Deletes up to [`PRUNE_CHUNK`] rows received before `cutoff`.
pub(super) fn prune_chunk(conn: &Connection, cutoff: SystemTime) -> rusqlite::Result<usize> {
    let mut stmt = conn.prepare_cached(
        "DELETE FROM calls WHERE id IN (SELECT id FROM calls WHERE at < ?1 LIMIT ?2)",
    )?;
    stmt.execute(params![unix_ms::to_ms(cutoff), sql_int(PRUNE_CHUNK)])
}

#[cfg(test)]
mod tests;
