//! Hostile probe: sends `count` GETs (config key, default 2000) to the URL
//! in its config key `url` without waiting for any, keeping every
//! `future-incoming-response` alive; then waits for each, keeps every
//! response without reading its body, and holds them all for `hold_ms`
//! (default 1000) before it returns. Only a cap on the requests in flight
//! (`limits.http_concurrency`, per call, and
//! `limits.http_concurrency_plugin`, over the plugin's calls) keeps it from
//! opening one connection per request.
//!
//! Reports `healthy` with what happened: "sent N: A answered, R refused
//! (connection-limit-reached), F failed (first: ...)".

wit_bindgen::generate!({
    path: "../../../wit",
    world: "probe",
    generate_all,
});

use exports::vigil::plugin::prober::Guest;
use vigil::plugin::host;
use vigil::plugin::types::{Report, Status};
use wasi::http::outgoing_handler;
use wasi::http::types::{ErrorCode, Fields, OutgoingRequest, Scheme};

struct HttpFlood;

fn config(key: &str) -> Option<String> {
    host::config()
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

impl Guest for HttpFlood {
    fn check() -> Report {
        let url = config("url").unwrap_or_default();
        let count: usize = config("count").and_then(|c| c.parse().ok()).unwrap_or(2000);
        let hold_ms: u64 = config("hold_ms")
            .and_then(|c| c.parse().ok())
            .unwrap_or(1000);
        let Some((authority, path)) =
            url.strip_prefix("http://")
                .map(|rest| match rest.find('/') {
                    Some(i) => (&rest[..i], &rest[i..]),
                    None => (rest, "/"),
                })
        else {
            return unknown(format!("not an http:// URL: {url:?}"));
        };
        let mut pending = Vec::new();
        let mut failed = 0;
        let mut first_failure = None;
        for _ in 0..count {
            let request = OutgoingRequest::new(Fields::new());
            let _ = request.set_scheme(Some(&Scheme::Http));
            let _ = request.set_authority(Some(authority));
            let _ = request.set_path_with_query(Some(path));
            match outgoing_handler::handle(request, None) {
                Ok(f) => pending.push(f),
                Err(e) => {
                    failed += 1;
                    first_failure.get_or_insert(format!("{e:?}"));
                }
            }
        }
        let (mut answered, mut refused) = (Vec::new(), 0);
        for f in &pending {
            f.subscribe().block();
            match f.get() {
                Some(Ok(Ok(response))) => answered.push(response),
                Some(Ok(Err(ErrorCode::ConnectionLimitReached))) => refused += 1,
                Some(Ok(Err(e))) => {
                    failed += 1;
                    first_failure.get_or_insert(format!("{e:?}"));
                }
                _ => failed += 1,
            }
        }
        // Every answered request stays open (body unread) a while longer.
        wasi::clocks::monotonic_clock::subscribe_duration(hold_ms * 1_000_000).block();
        let detail = format!(
            "sent {count}: {} answered, {refused} refused (connection-limit-reached), {failed} failed (first: {})",
            answered.len(),
            first_failure.as_deref().unwrap_or("none")
        );
        host::log(host::Level::Info, &format!("http-flood {detail}"));
        drop(answered);
        drop(pending);
        Report {
            status: Status::Healthy,
            latency_ms: None,
            detail: Some(detail),
        }
    }
}

fn unknown(why: String) -> Report {
    Report {
        status: Status::Unknown(why),
        latency_ms: None,
        detail: None,
    }
}

export!(HttpFlood);
