//! `slack`: a Vigil notifier that posts each health event to a Slack
//! incoming webhook (one fallback line plus Block Kit blocks).
//!
//! Configuration (manifest `[config]`):
//!
//! | key | meaning |
//! | --- | --- |
//! | `url` | required; the incoming-webhook URL (`https://hooks.slack.com/services/...`) |
//! | `timeout_ms` | connect / first-byte timeout |
//!
//! A non-2xx answer is an error, which Vigil retries with backoff.

use std::time::Duration;

use serde_json::{Value, json};
use vigil_sdk::http::{self, Request};
use vigil_sdk::{Config, Event, Notifier};

/// The notifier.
pub struct Slack;

impl Notifier for Slack {
    fn notify(cfg: &Config, event: &Event) -> Result<(), String> {
        let req = build_request(cfg, event)?;
        let resp = req.send()?;
        if resp.is_success() {
            return Ok(());
        }
        let body: String = resp.text().trim().chars().take(200).collect();
        Err(format!(
            "Slack webhook returned status {}: {body}",
            resp.status
        ))
    }
}

vigil_sdk::export_notifier!(Slack);

/// Escapes the three characters Slack's mrkdwn treats as markup.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Slack's incoming-webhook payload for `event`.
pub fn payload(event: &Event) -> Value {
    let mut section = format!(
        "*{}*: `{}` → `{}`",
        escape(&event.backend),
        escape(&event.from_state),
        escape(&event.to_state)
    );
    if !event.reason.trim().is_empty() {
        section.push('\n');
        section.push_str(&escape(event.reason.trim()));
    }
    json!({
        "text": cut(&escape(&event.summary()), 3000),
        "blocks": [
            {
                "type": "section",
                "text": { "type": "mrkdwn", "text": cut(&section, 3000) }
            },
            {
                "type": "context",
                "elements": [{
                    "type": "mrkdwn",
                    "text": format!(
                        "{} · {} · generation {}",
                        event.severity.as_str(),
                        event.timestamp_rfc3339(),
                        event.generation
                    )
                }]
            }
        ]
    })
}

/// The POST for `event`; `Err` names a bad configuration key.
pub fn build_request(cfg: &Config, event: &Event) -> Result<Request, String> {
    let url = cfg.require("url")?.trim();
    http::validate_url(url).map_err(|e| format!("config key `url`: {e}"))?;
    let mut req = Request::post(url).json(&payload(event));
    if let Some(ms) = cfg.parse::<u64>("timeout_ms")? {
        req = req.timeout(Duration::from_millis(ms));
    }
    Ok(req)
}

/// At most `max` characters of `s` (Slack's text limits), with `…` when cut.
fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max.saturating_sub(1)) {
        Some((i, _)) if s.chars().count() > max => format!("{}…", &s[..i]),
        _ => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil_sdk::Severity;

    fn event(reason: &str) -> Event {
        Event {
            backend: "db<1>".into(),
            from_state: "degraded".into(),
            to_state: "running".into(),
            reason: reason.into(),
            at_ms: 0,
            generation: 3,
            severity: Severity::Info,
        }
    }

    #[test]
    fn payload_shape() {
        assert_eq!(
            payload(&event("probe ok & fast")),
            json!({
                "text": "[info] db&lt;1&gt;: degraded → running (probe ok &amp; fast)",
                "blocks": [
                    {"type": "section", "text": {"type": "mrkdwn",
                        "text": "*db&lt;1&gt;*: `degraded` → `running`\nprobe ok &amp; fast"}},
                    {"type": "context", "elements": [{"type": "mrkdwn",
                        "text": "info · 1970-01-01T00:00:00.000Z · generation 3"}]}
                ]
            })
        );
        let p = payload(&event(""));
        assert_eq!(
            p["blocks"][0]["text"]["text"],
            "*db&lt;1&gt;*: `degraded` → `running`"
        );
    }

    #[test]
    fn request_and_limits() {
        let cfg = Config::from_pairs([
            ("url", "https://hooks.slack.com/services/T/B/x"),
            ("timeout_ms", "2000"),
        ]);
        let req = build_request(&cfg, &event(&"x".repeat(4000))).unwrap();
        assert_eq!(req.timeout, Some(Duration::from_secs(2)));
        let p: Value = serde_json::from_slice(&req.body).unwrap();
        assert_eq!(
            p["blocks"][0]["text"]["text"]
                .as_str()
                .unwrap()
                .chars()
                .count(),
            3000
        );
        assert!(
            build_request(&Config::default(), &event(""))
                .unwrap_err()
                .contains("`url`")
        );
        let bad = Config::from_pairs([("url", "https://h"), ("timeout_ms", "soon")]);
        assert!(
            build_request(&bad, &event(""))
                .unwrap_err()
                .contains("`timeout_ms`")
        );
    }
}
