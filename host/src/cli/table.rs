//! The `vigil status` and `vigil plugins` tables: one row per backend or
//! plugin, columns aligned, times relative to now ("in 4s"), reasons
//! clipped to 80 characters.

use std::time::{Duration, SystemTime};

use serde::Deserialize;

use crate::health::{HealthState, advertisable};

/// The fields of an `InstanceReport` the table shows, read leniently: a
/// newer gateway may add fields or states.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Row {
    pub name: String,
    pub state: String,
    #[serde(default)]
    pub runtime: String,
    #[serde(default)]
    pub latency_ms: Option<f64>,
    #[serde(default)]
    pub error_rate: Option<f64>,
    #[serde(default)]
    pub calls_in_window: u64,
    #[serde(default)]
    pub restart_count: u64,
    /// Unix milliseconds.
    #[serde(default)]
    pub next_retry_at: Option<i64>,
    #[serde(default)]
    pub quarantine_reason: Option<String>,
    #[serde(default)]
    pub reason: String,
}

// === impl Row ===

impl Row {
    /// Whether clients are being served this backend's tools (the gateway's
    /// own [`advertisable`] rule); an unknown state is not serving.
    pub fn serving(&self) -> bool {
        self.state.parse::<HealthState>().is_ok_and(advertisable)
    }
}

const HEADERS: [&str; 8] = [
    "NAME",
    "STATE",
    "RUNTIME",
    "LATENCY",
    "ERRORS",
    "RESTARTS",
    "NEXT-RETRY",
    "REASON",
];

/// The table, header first, one line per row, each ending in `\n`.
pub fn render(rows: &[Row], now: SystemTime) -> String {
    let cells: Vec<[String; 8]> = rows.iter().map(|r| cells(r, now)).collect();
    grid(&HEADERS, &cells)
}

/// `headers` and `rows` with every column but the last padded to its
/// widest cell, two spaces apart.
fn grid<const N: usize>(headers: &[&str; N], rows: &[[String; N]]) -> String {
    let mut widths = headers.map(|h| h.chars().count());
    for row in rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |fields: &[&str]| {
        let mut l = String::new();
        for (i, f) in fields.iter().enumerate() {
            if i + 1 < fields.len() {
                l.push_str(&format!("{f:<w$}  ", w = widths[i]));
            } else {
                l.push_str(f);
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(headers);
    for row in rows {
        line(&row.each_ref().map(String::as_str));
    }
    out
}

fn cells(r: &Row, now: SystemTime) -> [String; 8] {
    let reason = match (&r.quarantine_reason, r.state.as_str()) {
        (Some(q), "quarantined") => q.as_str(),
        _ => r.reason.as_str(),
    };
    [
        one_line(&r.name),
        one_line(&r.state),
        one_line(if r.runtime.is_empty() {
            "-"
        } else {
            &r.runtime
        }),
        r.latency_ms.map_or_else(|| "-".to_owned(), latency),
        r.error_rate
            .map_or_else(|| "-".to_owned(), |e| errors(e, r.calls_in_window)),
        r.restart_count.to_string(),
        r.next_retry_at
            .map_or_else(|| "-".to_owned(), |at| relative(at, now)),
        if reason.is_empty() {
            "-".to_owned()
        } else {
            clip(&one_line(reason))
        },
    ]
}

/// The fields of a `PluginInfo` the `vigil plugins` table shows, read
/// leniently like [`Row`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PluginRow {
    pub name: String,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub version: Option<String>,
    pub state: String,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub calls: u64,
    #[serde(default)]
    pub failures: u64,
    #[serde(default)]
    pub consecutive_failures: u64,
    #[serde(default)]
    pub last_error: Option<String>,
}

// === impl PluginRow ===

impl PluginRow {
    /// Whether the plugin runs: `disabled`, `rejected` and any state this
    /// CLI does not know are not active.
    pub fn active(&self) -> bool {
        self.state == "active"
    }
}

const PLUGIN_HEADERS: [&str; 7] = [
    "NAME",
    "KIND",
    "VERSION",
    "STATE",
    "CALLS",
    "FAILURES",
    "LAST-ERROR/REASON",
];

/// The plugin table, header first, one line per plugin. The last column
/// is why a plugin is not active, or else the last error of an active one.
pub fn render_plugins(rows: &[PluginRow]) -> String {
    let cells: Vec<[String; 7]> = rows.iter().map(plugin_cells).collect();
    grid(&PLUGIN_HEADERS, &cells)
}

fn plugin_cells(p: &PluginRow) -> [String; 7] {
    let or_dash = |s: &Option<String>| match s.as_deref() {
        Some(s) if !s.is_empty() => one_line(s),
        _ => "-".to_owned(),
    };
    let detail = match (&p.reason, &p.last_error) {
        (Some(r), _) if !p.active() && !r.is_empty() => r.as_str(),
        (_, Some(e)) if !e.is_empty() => e.as_str(),
        _ => "",
    };
    let failures = if p.consecutive_failures > 0 {
        format!("{} ({} in a row)", p.failures, p.consecutive_failures)
    } else {
        p.failures.to_string()
    };
    [
        one_line(&p.name),
        or_dash(&p.kind),
        or_dash(&p.version),
        one_line(&p.state),
        p.calls.to_string(),
        failures,
        if detail.is_empty() {
            "-".to_owned()
        } else {
            clip(&one_line(detail))
        },
    ]
}

/// `0.4ms`, `12ms`, `1.3s`.
pub fn latency(ms: f64) -> String {
    if ms < 10.0 {
        format!("{ms:.1}ms")
    } else if ms < 1000.0 {
        format!("{ms:.0}ms")
    } else {
        format!("{:.1}s", ms / 1000.0)
    }
}

/// Error share of the calls in the window: `0% of 12`, `<1% of 900`.
pub fn errors(rate: f64, calls: u64) -> String {
    let pct = rate * 100.0;
    let pct = if pct > 0.0 && pct < 1.0 {
        "<1".to_owned()
    } else {
        format!("{pct:.0}")
    };
    format!("{pct}% of {calls}")
}

/// When `at_ms` (Unix milliseconds) is, seen from `now`: `in 4s`,
/// `in 2m 5s`, `in 1h 3m`, or `due` once it has passed.
pub fn relative(at_ms: i64, now: SystemTime) -> String {
    let now_ms = crate::health::unix_ms::to_ms(now);
    let ahead = at_ms.saturating_sub(now_ms);
    if ahead <= 0 {
        return "due".to_owned();
    }
    // To the nearest second, but never "in 0s" for what is still ahead.
    format!(
        "in {}",
        short(Duration::from_secs(((ahead as u64 + 500) / 1000).max(1)))
    )
}

fn short(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 if s.is_multiple_of(60) => format!("{}m", s / 60),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        3600..86400 if s % 3600 / 60 == 0 => format!("{}h", s / 3600),
        3600..86400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86400, s % 86400 / 3600),
    }
}

/// The widest REASON shown; `--json` has it whole.
const MAX_REASON: usize = 80;

pub fn clip(s: &str) -> String {
    if s.chars().count() <= MAX_REASON {
        return s.to_owned();
    }
    let mut cut: String = s.chars().take(MAX_REASON - 1).collect();
    cut.push('…');
    cut
}

/// Control characters (a newline in a reason) would break the table.
pub fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW_MS: i64 = 1_700_000_000_000;

    fn now() -> SystemTime {
        crate::health::unix_ms::from_ms(NOW_MS)
    }

    fn row(name: &str, state: &str) -> Row {
        Row {
            name: name.into(),
            state: state.into(),
            runtime: "process".into(),
            latency_ms: None,
            error_rate: None,
            calls_in_window: 0,
            restart_count: 0,
            next_retry_at: None,
            quarantine_reason: None,
            reason: String::new(),
        }
    }

    #[test]
    fn table_is_aligned_with_relative_times() {
        let mut a = row("alpha", "running");
        a.latency_ms = Some(12.4);
        a.error_rate = Some(0.25);
        a.calls_in_window = 40;
        a.reason = "ready".into();
        let mut b = row("search-backend", "restarting");
        b.runtime = "container".into();
        b.restart_count = 3;
        b.next_retry_at = Some(NOW_MS + 4_000);
        b.reason = "exited with code 1\nstderr: boom".into();
        let mut c = row("db", "quarantined");
        c.runtime = "remote".into();
        c.restart_count = 12;
        c.quarantine_reason = Some("crashed 5 times".into());
        c.reason = "exited".into();
        let expected = "\
NAME            STATE        RUNTIME    LATENCY  ERRORS     RESTARTS  NEXT-RETRY  REASON
alpha           running      process    12ms     25% of 40  0         -           ready
search-backend  restarting   container  -        -          3         in 4s       exited with code 1 stderr: boom
db              quarantined  remote     -        -          12        -           crashed 5 times
";
        assert_eq!(render(&[a, b, c], now()), expected);
    }

    #[test]
    fn empty_table_is_the_header() {
        assert_eq!(
            render(&[], now()),
            "NAME  STATE  RUNTIME  LATENCY  ERRORS  RESTARTS  NEXT-RETRY  REASON\n"
        );
    }

    #[test]
    fn long_reasons_are_clipped() {
        let mut r = row("x", "offline");
        r.reason = "e".repeat(200);
        let line = render(&[r], now()).lines().nth(1).unwrap().to_owned();
        assert!(
            line.ends_with(&format!("{}…", "e".repeat(MAX_REASON - 1))),
            "{line}"
        );
    }

    #[test]
    fn relative_times() {
        assert_eq!(relative(NOW_MS + 300, now()), "in 1s");
        assert_eq!(relative(NOW_MS + 4_000, now()), "in 4s");
        assert_eq!(relative(NOW_MS + 4_020, now()), "in 4s");
        assert_eq!(relative(NOW_MS + 4_600, now()), "in 5s");
        assert_eq!(relative(NOW_MS + 59_000, now()), "in 59s");
        assert_eq!(relative(NOW_MS + 60_000, now()), "in 1m");
        assert_eq!(relative(NOW_MS + 125_000, now()), "in 2m 5s");
        assert_eq!(relative(NOW_MS + 3_600_000, now()), "in 1h");
        assert_eq!(relative(NOW_MS + 3_780_000, now()), "in 1h 3m");
        assert_eq!(relative(NOW_MS + 90_000_000, now()), "in 1d 1h");
        assert_eq!(relative(NOW_MS, now()), "due");
        assert_eq!(relative(NOW_MS - 5_000, now()), "due");
    }

    #[test]
    fn latency_and_errors() {
        assert_eq!(latency(0.42), "0.4ms");
        assert_eq!(latency(12.4), "12ms");
        assert_eq!(latency(1340.0), "1.3s");
        assert_eq!(errors(0.0, 12), "0% of 12");
        assert_eq!(errors(0.001, 900), "<1% of 900");
        assert_eq!(errors(1.0, 5), "100% of 5");
    }

    #[test]
    fn serving_follows_the_gateway_rule() {
        for (state, serving) in [
            ("running", true),
            ("degraded", true),
            ("unknown", true),
            ("starting", false),
            ("offline", false),
            ("restarting", false),
            ("updating", false),
            ("quarantined", false),
            ("from-the-future", false),
        ] {
            assert_eq!(row("x", state).serving(), serving, "{state}");
        }
    }
}
