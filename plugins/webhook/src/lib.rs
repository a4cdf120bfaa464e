//! `webhook`: a Vigil notifier that POSTs each health event as JSON.
//!
//! The body is `{"backend","from","to","reason","at_ms","generation","severity"}`
//! (see [`vigil_sdk::Event::to_json`]), with `content-type: application/json`.
//!
//! Configuration (manifest `[config]`):
//!
//! | key | meaning |
//! | --- | --- |
//! | `url` | required; where to POST (its host must be in `[http] allowed_hosts`) |
//! | `secret` | if set, the header `X-Vigil-Signature: sha256=<hex HMAC-SHA256 of the body>` is added |
//! | `headers` | extra headers, `Name: value; Name2: value2` |
//! | `timeout_ms` | connect / first-byte timeout (the plugin's deadline bounds the call anyway) |
//!
//! A non-2xx answer is an error (Vigil retries with backoff), naming the
//! status.

use std::time::Duration;

use vigil_sdk::http::{self, Request};
use vigil_sdk::{Config, Event, Notifier};

/// The notifier.
pub struct Webhook;

impl Notifier for Webhook {
    fn notify(cfg: &Config, event: &Event) -> Result<(), String> {
        let req = build_request(cfg, event)?;
        let resp = req.send()?;
        check_response(&req.url, resp.status, &resp.text())
    }
}

vigil_sdk::export_notifier!(Webhook);

/// The signature header's name.
pub const SIGNATURE_HEADER: &str = "X-Vigil-Signature";

/// `sha256=<hex HMAC-SHA256 of body under secret>`.
pub fn signature(secret: &str, body: &[u8]) -> String {
    format!(
        "sha256={}",
        vigil_sdk::crypto::hmac_sha256_hex(secret.as_bytes(), body)
    )
}

/// The POST for `event`; `Err` names a bad configuration key.
pub fn build_request(cfg: &Config, event: &Event) -> Result<Request, String> {
    let url = cfg.require("url")?.trim();
    http::validate_url(url).map_err(|e| format!("config key `url`: {e}"))?;
    let extra = http::parse_header_list(cfg.get_or("headers", ""))
        .map_err(|e| format!("config key `headers`: {e}"))?;
    let body = event.to_json().to_string().into_bytes();
    let mut req = Request::post(url).header("content-type", "application/json");
    if let Some(secret) = cfg.get("secret").filter(|s| !s.is_empty()) {
        req = req.header(SIGNATURE_HEADER, signature(secret, &body));
    }
    for (name, value) in extra {
        req = req.header(name, value);
    }
    if let Some(ms) = cfg.parse::<u64>("timeout_ms")? {
        req = req.timeout(Duration::from_millis(ms));
    }
    Ok(req.body(body))
}

/// `Ok` for 2xx, else `Err` with the status and the start of the body.
pub fn check_response(url: &str, status: u16, body: &str) -> Result<(), String> {
    if (200..300).contains(&status) {
        return Ok(());
    }
    let body: String = body.trim().chars().take(200).collect();
    Err(format!("POST {url} returned status {status}: {body}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil_sdk::Severity;

    fn event() -> Event {
        Event {
            backend: "github".into(),
            from_state: "running".into(),
            to_state: "offline".into(),
            reason: "process exited with status 1".into(),
            at_ms: 1_700_000_000_000,
            generation: 42,
            severity: Severity::Critical,
        }
    }

    fn cfg(pairs: &[(&str, &str)]) -> Config {
        Config::from_pairs(pairs.iter().copied())
    }

    #[test]
    fn body_is_the_event() {
        let req = build_request(&cfg(&[("url", "https://hooks.example.com/x")]), &event()).unwrap();
        let body: serde_json::Value = serde_json::from_slice(&req.body).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "backend": "github", "from": "running", "to": "offline",
                "reason": "process exited with status 1", "at_ms": 1_700_000_000_000u64,
                "generation": 42, "severity": "critical"
            })
        );
        assert_eq!(req.method, http::Method::Post);
        assert_eq!(req.url, "https://hooks.example.com/x");
        assert_eq!(
            req.headers,
            vec![("content-type".to_string(), "application/json".to_string())]
        );
        assert_eq!(req.timeout, None);
    }

    #[test]
    fn signed_with_extra_headers() {
        let c = cfg(&[
            ("url", "https://h/x"),
            ("secret", "s3cret"),
            ("headers", "Authorization: Bearer t; X-Env: prod"),
            ("timeout_ms", "1000"),
        ]);
        let req = build_request(&c, &event()).unwrap();
        let sig = req
            .headers
            .iter()
            .find(|(n, _)| n == SIGNATURE_HEADER)
            .unwrap();
        assert_eq!(sig.1, signature("s3cret", &req.body));
        assert!(sig.1.starts_with("sha256=") && sig.1.len() == 7 + 64);
        assert!(req.headers.contains(&("X-Env".into(), "prod".into())));
        assert!(
            req.headers
                .contains(&("Authorization".into(), "Bearer t".into()))
        );
        assert_eq!(req.timeout, Some(Duration::from_secs(1)));
    }

    #[test]
    fn signature_is_hmac_sha256() {
        // RFC 4231 test case 2.
        assert_eq!(
            signature("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn bad_config_and_statuses() {
        assert!(
            build_request(&cfg(&[]), &event())
                .unwrap_err()
                .contains("`url`")
        );
        assert!(
            build_request(&cfg(&[("url", "hooks/x")]), &event())
                .unwrap_err()
                .contains("`url`")
        );
        assert!(
            build_request(&cfg(&[("url", "http://h"), ("headers", "x")]), &event())
                .unwrap_err()
                .contains("`headers`")
        );
        assert_eq!(check_response("u", 204, ""), Ok(()));
        let e = check_response("https://h/x", 502, " bad gateway ").unwrap_err();
        assert_eq!(e, "POST https://h/x returned status 502: bad gateway");
    }
}
