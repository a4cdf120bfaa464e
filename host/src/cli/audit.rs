//! `vigil audit [--principal P] [--backend B] [--outcome O] [--since S]
//! [--limit N] [--follow] [--json]`: the audit of MCP calls, from `GET
//! /api/v1/audit/calls`.
//!
//! One line per call, oldest first like a log, the newest `--limit` (100
//! by default) of those the filters select:
//!
//! ```text
//! TIME                      PRINCIPAL  BACKEND  METHOD      OUTCOME      DURATION  SESSION     NAME
//! 2025-06-01T09:14:03.201Z  key:ci     files    tools/call  ok           1.2ms     s-1a2b3c4d  files__read
//! ```
//!
//! With `--follow` it then asks every second for the calls after the last
//! one shown (the API's `after` cursor) and prints them as they come, until
//! Ctrl-C; a failed poll is a note on stderr and is retried, except a
//! refused token. `--json` prints the API's answer as it is (newest first)
//! or, with `--follow`, each call as one JSON line, oldest first. The
//! filters are checked by the API: a bad one exits 5 with its message.

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::client::{ApiClient, ClientError, Failure};
use super::events::Sink;
use super::table::one_line;
use super::{AuditArgs, Exit};

/// Time between two polls of `--follow`.
pub const FOLLOW_EVERY: Duration = Duration::from_secs(1);
/// Rows asked for per poll of `--follow` (the API's maximum).
const FOLLOW_PAGE: u64 = crate::audit::MAX_LIMIT as u64;

const HEADERS: [&str; 8] = [
    "TIME",
    "PRINCIPAL",
    "BACKEND",
    "METHOD",
    "OUTCOME",
    "DURATION",
    "SESSION",
    "NAME",
];

/// One call as the API sends it, read leniently (a newer gateway may add
/// fields or outcomes).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct CallRow {
    pub id: i64,
    /// Unix milliseconds.
    pub at: i64,
    pub principal: String,
    /// The issuer of a `sub:` principal.
    #[serde(default)]
    pub issuer: Option<String>,
    #[serde(default)]
    pub session: Option<String>,
    #[serde(default)]
    pub backend: String,
    #[serde(default)]
    pub method: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub outcome: String,
    #[serde(default)]
    pub duration_us: u64,
    /// A `find_tool`'s figures.
    #[serde(default)]
    pub search: Option<crate::audit::Searched>,
}

/// Runs `vigil audit`: prints the first page, then (`--follow`) what comes
/// after it until `stop` fires or stdout closes (exit 0). A failure of the
/// first request ends it (exit 2, 4, or 5 for a filter the API refused); a
/// refused token on a later poll too (4).
pub async fn run(args: &AuditArgs, sink: &mut dyn Sink, stop: &CancellationToken) -> Exit {
    let client = match ApiClient::new(&args.api.api, args.api.token.clone()) {
        Ok(c) => c,
        Err(e) => return failed(sink, &e),
    };
    let first = match client.calls(&query(args, None, args.limit)).await {
        Ok(v) => v,
        Err(e) => return failed(sink, &e),
    };
    let mut rows = match rows_of(&first) {
        Ok(rows) => rows,
        Err(reason) => return failed(sink, &bad_answer(&client, reason)),
    };
    rows.reverse(); // the API sends the newest first
    let mut last = rows.iter().map(|r| r.id).max().unwrap_or(0);
    let mut widths = widths(&rows);
    let text = if args.api.json && !args.follow {
        super::pretty(&first)
    } else if args.api.json {
        json_lines(&first, true)
    } else if rows.is_empty() && !args.follow {
        "no calls recorded match\n".to_owned()
    } else {
        let mut t = line(&HEADERS.map(str::to_owned), &widths);
        for r in &rows {
            t.push_str(&line(&cells(r), &widths));
        }
        t
    };
    if sink.out(&text).is_err() || !args.follow {
        return Exit::Ok;
    }
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => return Exit::Ok,
            _ = tokio::time::sleep(FOLLOW_EVERY) => {}
        }
        // Pages until the API has nothing newer.
        loop {
            let page = match client.calls(&query(args, Some(last), FOLLOW_PAGE)).await {
                Ok(v) => v,
                Err(e) if e.failure() == Failure::Refused => return failed(sink, &e),
                Err(e) => {
                    let text = e.to_string();
                    let first_line = text.lines().next().unwrap_or_default();
                    sink.err(&format!("note: {first_line}; retrying in 1s\n"));
                    break;
                }
            };
            let rows = match rows_of(&page) {
                Ok(rows) => rows,
                Err(reason) => {
                    sink.err(&format!("note: {reason}; retrying in 1s\n"));
                    break;
                }
            };
            let Some(newest) = rows.iter().map(|r| r.id).max() else {
                break;
            };
            last = last.max(newest);
            let text = if args.api.json {
                json_lines(&page, false)
            } else {
                widths = grow(widths, &rows);
                rows.iter().map(|r| line(&cells(r), &widths)).collect()
            };
            if sink.out(&text).is_err() {
                return Exit::Ok;
            }
            if (rows.len() as u64) < FOLLOW_PAGE {
                break;
            }
        }
    }
}

/// The query string for the filters of `args`, `after` a row id.
fn query(args: &AuditArgs, after: Option<i64>, limit: u64) -> Vec<(&'static str, String)> {
    let mut q = Vec::new();
    let filters = [
        ("principal", &args.principal),
        ("issuer", &args.issuer),
        ("backend", &args.backend),
        ("outcome", &args.outcome),
        ("since", &args.since),
    ];
    for (key, value) in filters {
        if let Some(v) = value {
            q.push((key, v.clone()));
        }
    }
    q.push(("limit", limit.to_string()));
    if let Some(after) = after {
        q.push(("after", after.to_string()));
    }
    q
}

fn rows_of(answer: &Value) -> Result<Vec<CallRow>, String> {
    match answer.get("calls").map(Vec::<CallRow>::deserialize) {
        Some(Ok(rows)) => Ok(rows),
        Some(Err(e)) => Err(format!("a call is not readable ({e})")),
        None => Err("no `calls` list".into()),
    }
}

/// Each call of `answer` as one JSON line; `reverse`: the answer is newest
/// first and the lines go oldest first.
fn json_lines(answer: &Value, reverse: bool) -> String {
    let mut calls: Vec<&Value> = answer
        .get("calls")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    if reverse {
        calls.reverse();
    }
    calls.iter().map(|c| format!("{c}\n")).collect()
}

fn cells(r: &CallRow) -> [String; 8] {
    let or_dash = |s: &str| {
        if s.is_empty() {
            "-".to_owned()
        } else {
            one_line(s)
        }
    };
    [
        humantime::format_rfc3339_millis(crate::health::unix_ms::from_ms(r.at)).to_string(),
        match &r.issuer {
            Some(issuer) => one_line(&format!("{} of {issuer}", r.principal)),
            None => or_dash(&r.principal),
        },
        or_dash(&r.backend),
        or_dash(&r.method),
        or_dash(&r.outcome),
        duration(r.duration_us),
        or_dash(r.session.as_deref().unwrap_or("")),
        match r.search {
            Some(s) => one_line(&format!(
                "{} ({}-byte query, {} found)",
                r.name, s.query_bytes, s.results
            )),
            None => or_dash(&r.name),
        },
    ]
}

/// `850µs`, `1.2ms`, `340ms`, `2.1s`.
pub fn duration(us: u64) -> String {
    match us {
        0..1_000 => format!("{us}µs"),
        1_000..10_000 => format!("{:.1}ms", us as f64 / 1000.0),
        10_000..1_000_000 => format!("{}ms", us / 1000),
        _ => format!("{:.1}s", us as f64 / 1_000_000.0),
    }
}

/// Column widths for `rows` (and the headers).
fn widths(rows: &[CallRow]) -> [usize; 8] {
    grow(HEADERS.map(|h| h.chars().count()), rows)
}

fn grow(mut widths: [usize; 8], rows: &[CallRow]) -> [usize; 8] {
    for r in rows {
        for (w, c) in widths.iter_mut().zip(cells(r)) {
            *w = (*w).max(c.chars().count());
        }
    }
    widths
}

/// One table line: every column but the last padded, two spaces apart.
fn line(cells: &[String; 8], widths: &[usize; 8]) -> String {
    let mut l = String::new();
    for (i, c) in cells.iter().enumerate() {
        if i + 1 < cells.len() {
            l.push_str(&format!("{c:<w$}  ", w = widths[i]));
        } else {
            l.push_str(c);
        }
    }
    let mut l = l.trim_end().to_owned();
    l.push('\n');
    l
}

fn failed(sink: &mut dyn Sink, e: &ClientError) -> Exit {
    sink.err(&format!("error: {e}\n"));
    Exit::of(e.failure(), true)
}

fn bad_answer(client: &ApiClient, reason: String) -> ClientError {
    ClientError::BadAnswer {
        url: client.url(&["audit", "calls"]).to_string(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, principal: &str, session: Option<&str>, us: u64) -> CallRow {
        CallRow {
            id,
            at: 1_748_768_400_201,
            principal: principal.into(),
            issuer: None,
            session: session.map(Into::into),
            backend: "files".into(),
            method: "tools/call".into(),
            name: "files__read\nnow".into(),
            outcome: "ok".into(),
            duration_us: us,
            search: None,
        }
    }

    #[test]
    fn a_search_shows_its_figures_after_its_name() {
        let mut r = row(1, "local", None, 850);
        r.name = "find_tool".into();
        r.backend = String::new();
        r.search = Some(crate::audit::Searched {
            query_bytes: 23,
            results: 3,
        });
        let c = cells(&r);
        assert_eq!(c[2], "-");
        assert_eq!(c[7], "find_tool (23-byte query, 3 found)");
    }

    #[test]
    fn durations_read_at_a_glance() {
        let shown: Vec<String> = [0, 850, 1_234, 9_999, 340_000, 2_100_000]
            .map(duration)
            .into();
        assert_eq!(shown, ["0µs", "850µs", "1.2ms", "10.0ms", "340ms", "2.1s"]);
    }

    #[test]
    fn lines_line_up_and_never_break() {
        let rows = [
            row(1, "key:ci", Some("s-1a2b3c4d"), 1_234),
            row(2, "local", None, 850),
        ];
        let w = widths(&rows);
        let text: String = std::iter::once(line(&HEADERS.map(str::to_owned), &w))
            .chain(rows.iter().map(|r| line(&cells(r), &w)))
            .collect();
        assert_eq!(
            text,
            "\
TIME                      PRINCIPAL  BACKEND  METHOD      OUTCOME  DURATION  SESSION     NAME
2025-06-01T09:00:00.201Z  key:ci     files    tools/call  ok       1.2ms     s-1a2b3c4d  files__read now
2025-06-01T09:00:00.201Z  local      files    tools/call  ok       850µs     -           files__read now
"
        );
    }
}
