//! `http-readiness`: a Vigil probe that GETs a URL and judges the answer.
//!
//! Configuration (manifest `[config]`, overlaid by the backend's probe
//! arguments):
//!
//! | key | meaning |
//! | --- | --- |
//! | `url` | required; `http://` or `https://` URL to GET (its host must be in `[http] allowed_hosts`) |
//! | `expect_status` | accepted statuses, comma-separated codes or classes (`200`, `200,204`, `2xx,301`); default `2xx` |
//! | `body_contains` | text the body must contain |
//! | `degraded_ms` | latency above which the backend is `degraded` |
//! | `timeout_ms` | connect / first-byte timeout (the probe's deadline bounds the call anyway) |
//! | `headers` | extra request headers, `Name: value; Name2: value2` |
//! | `max_body_bytes` | a longer body is a failure; default 1 MiB |
//!
//! Verdicts: a bad configuration, or a host the manifest does not allow, is
//! `unknown`; a failed request, an unexpected status or a missing body text is
//! `unhealthy` (naming the URL and the status); a slow but correct answer is
//! `degraded`; otherwise `healthy`. The latency is always reported.

use std::fmt;
use std::time::{Duration, Instant};

use vigil_sdk::http::{self, Request, Response};
use vigil_sdk::{Config, Probe, Report};

/// The probe.
pub struct HttpReadiness;

impl Probe for HttpReadiness {
    fn check(cfg: &Config) -> Report {
        let settings = match Settings::from_config(cfg) {
            Ok(s) => s,
            Err(e) => return Report::unknown(e),
        };
        let start = Instant::now();
        let result = settings.request().send();
        judge(&settings, result, start.elapsed())
    }
}

vigil_sdk::export_probe!(HttpReadiness);

/// Accepted statuses: exact codes and classes like `2xx`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusSet {
    codes: Vec<u16>,
    classes: Vec<u16>,
}

impl StatusSet {
    /// Any 2xx.
    pub fn success() -> StatusSet {
        StatusSet {
            codes: vec![],
            classes: vec![2],
        }
    }

    /// Parses `200`, `200,204`, `2xx`, `2xx, 301`.
    pub fn parse(s: &str) -> Result<StatusSet, String> {
        let mut set = StatusSet {
            codes: vec![],
            classes: vec![],
        };
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let lower = item.to_ascii_lowercase();
            if let Some(class) = lower.strip_suffix("xx") {
                match class.parse::<u16>() {
                    Ok(c @ 1..=5) if class.len() == 1 => set.classes.push(c),
                    _ => return Err(bad_status(s, item)),
                }
            } else {
                match item.parse::<u16>() {
                    Ok(c @ 100..=599) => set.codes.push(c),
                    _ => return Err(bad_status(s, item)),
                }
            }
        }
        if set.codes.is_empty() && set.classes.is_empty() {
            return Err(format!("config key `expect_status` is empty: {s:?}"));
        }
        Ok(set)
    }

    /// Whether `status` is accepted.
    pub fn contains(&self, status: u16) -> bool {
        self.codes.contains(&status) || self.classes.contains(&(status / 100))
    }
}

fn bad_status(all: &str, item: &str) -> String {
    format!(
        "config key `expect_status`: {item:?} in {all:?} is neither a status code (100-599) nor a class like 2xx"
    )
}

impl fmt::Display for StatusSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let items: Vec<String> = self
            .classes
            .iter()
            .map(|c| format!("{c}xx"))
            .chain(self.codes.iter().map(u16::to_string))
            .collect();
        f.write_str(&items.join(","))
    }
}

/// The probe's configuration, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub url: String,
    pub expect_status: StatusSet,
    pub body_contains: Option<String>,
    pub degraded_ms: Option<u32>,
    pub timeout: Option<Duration>,
    pub headers: Vec<(String, String)>,
    pub max_body_bytes: usize,
}

impl Settings {
    /// Reads and checks the configuration; `Err` names the bad key.
    pub fn from_config(cfg: &Config) -> Result<Settings, String> {
        let url = cfg.require("url")?.trim().to_string();
        http::validate_url(&url).map_err(|e| format!("config key `url`: {e}"))?;
        let expect_status = match cfg.get("expect_status") {
            None => StatusSet::success(),
            Some(s) => StatusSet::parse(s)?,
        };
        Ok(Settings {
            url,
            expect_status,
            body_contains: cfg
                .get("body_contains")
                .filter(|s| !s.is_empty())
                .map(String::from),
            degraded_ms: cfg.parse("degraded_ms")?,
            timeout: cfg.parse::<u64>("timeout_ms")?.map(Duration::from_millis),
            headers: http::parse_header_list(cfg.get_or("headers", ""))
                .map_err(|e| format!("config key `headers`: {e}"))?,
            max_body_bytes: cfg.parse_or("max_body_bytes", http::DEFAULT_MAX_RESPONSE_BYTES)?,
        })
    }

    /// The GET to send.
    pub fn request(&self) -> Request {
        let mut req = Request::get(&self.url).max_response_bytes(self.max_body_bytes);
        req.headers = self.headers.clone();
        if let Some(t) = self.timeout {
            req = req.timeout(t);
        }
        req
    }
}

/// Turns the outcome of the GET into a report.
pub fn judge(s: &Settings, result: Result<Response, String>, elapsed: Duration) -> Report {
    let ms = u32::try_from(elapsed.as_millis()).unwrap_or(u32::MAX);
    let report = match result {
        Err(e) if http::is_denied(&e) => Report::unknown(e),
        // The SDK's message already starts with `GET <url>: `.
        Err(e) => Report::unhealthy(e),
        Ok(resp) if !s.expect_status.contains(resp.status) => Report::unhealthy(format!(
            "GET {} returned status {}, expected {}",
            s.url, resp.status, s.expect_status
        ))
        .with_detail(snippet(&resp.text())),
        Ok(resp) => match &s.body_contains {
            Some(needle) if !resp.text().contains(needle.as_str()) => Report::unhealthy(format!(
                "GET {} returned status {} but the body does not contain {needle:?}",
                s.url, resp.status
            ))
            .with_detail(snippet(&resp.text())),
            _ => match s.degraded_ms {
                Some(limit) if ms > limit => Report::degraded(format!(
                    "GET {} took {ms} ms (degraded_ms = {limit})",
                    s.url
                )),
                _ => Report::healthy(),
            }
            .with_detail(format!("status {}", resp.status)),
        },
    };
    report.with_latency(elapsed)
}

/// The first 200 characters of a body, for the report's detail.
fn snippet(body: &str) -> String {
    let body = body.trim();
    match body.char_indices().nth(200) {
        Some((i, _)) => format!("body: {}…", &body[..i]),
        None if body.is_empty() => "empty body".into(),
        None => format!("body: {body}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil_sdk::Status;

    fn settings(pairs: &[(&str, &str)]) -> Result<Settings, String> {
        Settings::from_config(&Config::from_pairs(pairs.iter().copied()))
    }

    fn resp(status: u16, body: &str) -> Result<Response, String> {
        Ok(Response {
            status,
            headers: vec![],
            body: body.as_bytes().to_vec(),
        })
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn status_sets() {
        let s = StatusSet::parse("2xx, 301").unwrap();
        assert!(s.contains(204) && s.contains(301) && !s.contains(302) && !s.contains(404));
        assert_eq!(s.to_string(), "2xx,301");
        assert!(StatusSet::parse("200").unwrap().contains(200));
        assert!(!StatusSet::parse("200").unwrap().contains(201));
        assert!(StatusSet::parse("6xx").is_err());
        assert!(StatusSet::parse("20x").is_err());
        assert!(StatusSet::parse("99").is_err());
        assert!(StatusSet::parse(" , ").unwrap_err().contains("empty"));
        assert!(StatusSet::success().contains(299) && !StatusSet::success().contains(300));
    }

    #[test]
    fn config_checks() {
        assert!(settings(&[]).unwrap_err().contains("`url`"));
        assert!(
            settings(&[("url", "localhost:8080/health")])
                .unwrap_err()
                .contains("`url`")
        );
        assert!(
            settings(&[("url", "http://h/"), ("degraded_ms", "fast")])
                .unwrap_err()
                .contains("`degraded_ms`")
        );
        assert!(
            settings(&[("url", "http://h/"), ("headers", "nope")])
                .unwrap_err()
                .contains("`headers`")
        );
        let s = settings(&[
            ("url", " http://127.0.0.1:8080/health "),
            ("expect_status", "200"),
            ("timeout_ms", "1500"),
            ("headers", "Authorization: Bearer x"),
        ])
        .unwrap();
        assert_eq!(s.url, "http://127.0.0.1:8080/health");
        let req = s.request();
        assert_eq!(req.timeout, Some(Duration::from_millis(1500)));
        assert_eq!(
            req.headers,
            vec![("Authorization".to_string(), "Bearer x".to_string())]
        );
        assert_eq!(req.method, http::Method::Get);
    }

    #[test]
    fn verdicts() {
        let s = settings(&[
            ("url", "http://h/health"),
            ("body_contains", "ok"),
            ("degraded_ms", "100"),
        ])
        .unwrap();

        let r = judge(&s, resp(200, "all ok"), 20 * MS);
        assert_eq!(r.status, Status::Healthy);
        assert_eq!(r.latency_ms, Some(20));
        assert_eq!(r.detail.as_deref(), Some("status 200"));

        let r = judge(&s, resp(200, "all ok"), 250 * MS);
        assert!(
            matches!(&r.status, Status::Degraded(m) if m.contains("250 ms")),
            "{:?}",
            r.status
        );

        let r = judge(&s, resp(503, "down"), MS);
        let reason = r.status.reason().unwrap().to_string();
        assert!(matches!(r.status, Status::Unhealthy(_)));
        assert!(
            reason.contains("http://h/health") && reason.contains("503") && reason.contains("2xx"),
            "{reason}"
        );
        assert_eq!(r.detail.as_deref(), Some("body: down"));

        let r = judge(&s, resp(200, "starting"), MS);
        assert!(
            matches!(&r.status, Status::Unhealthy(m) if m.contains("\"ok\"") && m.contains("200"))
        );

        let r = judge(
            &s,
            Err("GET http://h/health: connection refused".into()),
            MS,
        );
        assert!(matches!(&r.status, Status::Unhealthy(m) if m.contains("connection refused")));
        assert_eq!(r.latency_ms, Some(1));

        let denied = "GET http://h/health: request denied by Vigil (is the host in ...)";
        assert!(matches!(
            judge(&s, Err(denied.into()), MS).status,
            Status::Unknown(_)
        ));
    }

    #[test]
    fn long_bodies_are_cut() {
        let long = "x".repeat(500);
        assert_eq!(snippet(&long).chars().count(), "body: ".len() + 201);
        assert_eq!(snippet("  "), "empty body");
    }
}
