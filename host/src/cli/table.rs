//! The `vigil status` table.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

const HEADERS: [&str; 8] = ["NAME", "STATE", "RUNTIME", "LATENCY", "ERRORS", "RESTARTS", "NEXT RETRY", "REASON"];

/// Renders instance reports as an aligned table; `now` makes times relative.
pub fn render(rows: &[Value], now: SystemTime) -> String {
    let cells: Vec<[String; 8]> = rows.iter().map(|r| row(r, now)).collect();
    let mut widths = HEADERS.map(str::len);
    for c in &cells {
        for (w, v) in widths.iter_mut().zip(c.iter()) {
            *w = (*w).max(v.chars().count());
        }
    }
    let line = |cols: Vec<&str>| {
        let mut s = String::new();
        for (i, (v, w)) in cols.iter().zip(widths).enumerate() {
            if i == cols.len() - 1 {
                s.push_str(v);
            } else {
                s.push_str(&format!("{v:<w$}  "));
            }
        }
        s.trim_end().to_owned() + "\n"
    };
    let mut out = line(HEADERS.to_vec());
    for c in &cells {
        out.push_str(&line(c.iter().map(String::as_str).collect()));
    }
    out
}

fn row(r: &Value, now: SystemTime) -> [String; 8] {
    let text = |k: &str| r[k].as_str().unwrap_or("-").to_owned();
    let latency = r["latency_ms"].as_f64().map(|ms| format!("{ms:.1}ms")).unwrap_or_else(|| "-".into());
    let errors = match (r["error_rate"].as_f64(), r["calls_in_window"].as_u64()) {
        (Some(rate), Some(n)) => format!("{:.0}% of {n}", rate * 100.0),
        _ => "-".into(),
    };
    let next = r["next_retry_at"].as_i64().map(|ms| relative(UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64), now)).unwrap_or_else(|| "-".into());
    let mut reason = text("reason");
    if reason.chars().count() > 60 {
        reason = reason.chars().take(59).collect::<String>() + "…";
    }
    [text("name"), text("state"), text("runtime"), latency, errors, r["restart_count"].as_u64().unwrap_or(0).to_string(), next, reason]
}

fn relative(at: SystemTime, now: SystemTime) -> String {
    match at.duration_since(now) {
        Ok(d) => format!("in {}", humantime::format_duration(Duration::from_secs(d.as_secs().max(1)))),
        Err(_) => "due".into(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn columns_align_and_times_are_relative() {
        let now = UNIX_EPOCH + Duration::from_secs(1000);
        let rows = [
            json!({"name": "files", "state": "running", "runtime": "process", "latency_ms": 1.25, "error_rate": 0.0, "calls_in_window": 12, "restart_count": 0, "next_retry_at": null, "reason": "healthy"}),
            json!({"name": "web", "state": "restarting", "runtime": "container", "latency_ms": null, "error_rate": null, "calls_in_window": 0, "restart_count": 3, "next_retry_at": 1_004_000, "reason": "restart in 4s"}),
        ];
        let out = render(&rows, now);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "NAME   STATE       RUNTIME    LATENCY  ERRORS    RESTARTS  NEXT RETRY  REASON");
        assert_eq!(lines[1], "files  running     process    1.2ms    0% of 12  0         -           healthy");
        assert_eq!(lines[2], "web    restarting  container  -        -         3         in 4s       restart in 4s");
    }
}
