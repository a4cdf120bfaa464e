//! `discord`: a Vigil notifier that posts each health event to a Discord
//! webhook, as one line of content plus an embed coloured by severity.
//!
//! Configuration (manifest `[config]`):
//!
//! | key | meaning |
//! | --- | --- |
//! | `url` | required; the Discord webhook URL (`https://discord.com/api/webhooks/...`) |
//! | `username` | the name the message is posted under; default `Vigil` |
//! | `avatar_url` | optional avatar for the message |
//! | `timeout_ms` | connect / first-byte timeout |
//!
//! A non-2xx answer (Discord answers 204 on success, 429 when rate limited)
//! is an error, which Vigil retries with backoff.

use std::time::Duration;

use serde_json::{Value, json};
use vigil_sdk::http::{self, Request};
use vigil_sdk::{Config, Event, Notifier, Severity};

/// The notifier.
pub struct Discord;

impl Notifier for Discord {
    fn notify(cfg: &Config, event: &Event) -> Result<(), String> {
        let req = build_request(cfg, event)?;
        let resp = req.send()?;
        if resp.is_success() {
            return Ok(());
        }
        let body: String = resp.text().trim().chars().take(200).collect();
        Err(format!(
            "Discord webhook returned status {}: {body}",
            resp.status
        ))
    }
}

vigil_sdk::export_notifier!(Discord);

/// The embed colour for a severity: critical red, warning yellow, info
/// green.
pub fn color(severity: Severity) -> u32 {
    match severity {
        Severity::Critical => 0xE7_4C_3C,
        Severity::Warning => 0xF1_C4_0F,
        Severity::Info => 0x2E_CC_71,
    }
}

/// Discord's webhook payload for `event`.
pub fn payload(event: &Event, username: &str, avatar_url: Option<&str>) -> Value {
    let mut embed = json!({
        "title": cut(&format!("{}: {} → {}", event.backend, event.from_state, event.to_state), 256),
        "color": color(event.severity),
        "timestamp": event.timestamp_rfc3339(),
        "footer": { "text": format!("generation {}", event.generation) },
    });
    // Discord rejects an empty description.
    if !event.reason.trim().is_empty() {
        embed["description"] = json!(cut(event.reason.trim(), 4096));
    }
    let mut payload = json!({
        "username": cut(username, 80),
        "content": cut(&event.summary(), 2000),
        "embeds": [embed],
        // Event text is not meant to ping anyone.
        "allowed_mentions": { "parse": [] },
    });
    if let Some(url) = avatar_url {
        payload["avatar_url"] = json!(url);
    }
    payload
}

/// The POST for `event`; `Err` names a bad configuration key.
pub fn build_request(cfg: &Config, event: &Event) -> Result<Request, String> {
    let url = cfg.require("url")?.trim();
    http::validate_url(url).map_err(|e| format!("config key `url`: {e}"))?;
    let username = cfg
        .get("username")
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .unwrap_or("Vigil");
    let avatar = cfg
        .get("avatar_url")
        .map(str::trim)
        .filter(|u| !u.is_empty());
    let mut req = Request::post(url).json(&payload(event, username, avatar));
    if let Some(ms) = cfg.parse::<u64>("timeout_ms")? {
        req = req.timeout(Duration::from_millis(ms));
    }
    Ok(req)
}

/// At most `max` characters of `s` (Discord's field limits), with `…` when
/// cut.
fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max.saturating_sub(1)) {
        Some((i, _)) if s.chars().count() > max => format!("{}…", &s[..i]),
        _ => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(severity: Severity, reason: &str) -> Event {
        Event {
            backend: "github".into(),
            from_state: "running".into(),
            to_state: "degraded".into(),
            reason: reason.into(),
            at_ms: 1_700_000_000_123,
            generation: 9,
            severity,
        }
    }

    #[test]
    fn payload_shape() {
        let p = payload(&event(Severity::Warning, "probe slow"), "Vigil", None);
        assert_eq!(
            p,
            json!({
                "username": "Vigil",
                "content": "[warning] github: running → degraded (probe slow)",
                "embeds": [{
                    "title": "github: running → degraded",
                    "description": "probe slow",
                    "color": 0xF1C40F,
                    "timestamp": "2023-11-14T22:13:20.123Z",
                    "footer": {"text": "generation 9"}
                }],
                "allowed_mentions": {"parse": []}
            })
        );
    }

    #[test]
    fn colours() {
        assert_eq!(color(Severity::Critical), 0xE74C3C);
        assert_eq!(color(Severity::Warning), 0xF1C40F);
        assert_eq!(color(Severity::Info), 0x2ECC71);
    }

    #[test]
    fn config_and_limits() {
        let cfg = Config::from_pairs([
            ("url", "https://discord.com/api/webhooks/1/abc"),
            ("username", "Ops"),
            ("avatar_url", "https://x/a.png"),
        ]);
        let long = "r".repeat(5000);
        let req = build_request(&cfg, &event(Severity::Info, &long)).unwrap();
        let p: Value = serde_json::from_slice(&req.body).unwrap();
        assert_eq!(p["username"], "Ops");
        assert_eq!(p["avatar_url"], "https://x/a.png");
        assert_eq!(p["embeds"][0]["color"], 0x2ECC71);
        assert_eq!(
            p["embeds"][0]["description"]
                .as_str()
                .unwrap()
                .chars()
                .count(),
            4096
        );
        assert_eq!(p["content"].as_str().unwrap().chars().count(), 2000);
        assert!(
            req.headers
                .contains(&("content-type".into(), "application/json".into()))
        );

        let p = payload(&event(Severity::Critical, " "), "Vigil", None);
        assert!(p["embeds"][0].get("description").is_none());
        assert_eq!(p["content"], "[critical] github: running → degraded");

        let no_url = Config::from_pairs([("username", "x")]);
        assert!(
            build_request(&no_url, &event(Severity::Info, ""))
                .unwrap_err()
                .contains("`url`")
        );
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("abcd", 3), "ab…");
    }
}
