//! Hostile probe: GETs the URL in its config key `url` and reads the whole
//! response body, however slowly it comes. Against a server that sends the
//! head at once and then one byte a second, only `limits.http_timeout`
//! covering the body (not just the connect, the head and the gap between
//! two bytes) stops it before its deadline.
//!
//! Reports `healthy` ("read N bytes in M ms") when the body ended, else
//! `unknown` naming the error and the time it took.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "probe",
    generate_all,
});

use std::time::Instant;

use exports::vigil::plugin::prober::Guest;
use vigil::plugin::host;
use vigil::plugin::types::{Report, Status};
use wasi::http::outgoing_handler;
use wasi::http::types::{Fields, OutgoingRequest, Scheme};
use wasi::io::streams::StreamError;

struct SlowBody;

impl Guest for SlowBody {
    fn check() -> Report {
        let url = host::config()
            .into_iter()
            .find(|(k, _)| k == "url")
            .map(|(_, v)| v)
            .unwrap_or_default();
        let start = Instant::now();
        let outcome = read_all(&url);
        let ms = start.elapsed().as_millis() as u32;
        let status = match &outcome {
            Ok(n) => {
                host::log(
                    host::Level::Info,
                    &format!("slow-body read {n} bytes in {ms} ms"),
                );
                Status::Healthy
            }
            Err(e) => Status::Unknown(format!("GET {url}: {e} after {ms} ms")),
        };
        Report {
            status,
            latency_ms: Some(ms),
            detail: outcome.ok().map(|n| format!("read {n} bytes in {ms} ms")),
        }
    }
}

/// GETs `url` and reads its body to the end: the number of bytes.
fn read_all(url: &str) -> Result<usize, String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("not an absolute URL: {url:?}"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let request = OutgoingRequest::new(Fields::new());
    let scheme = if scheme == "https" {
        Scheme::Https
    } else {
        Scheme::Http
    };
    request
        .set_scheme(Some(&scheme))
        .map_err(|()| "set scheme")?;
    request
        .set_authority(Some(authority))
        .map_err(|()| "set authority")?;
    request
        .set_path_with_query(Some(path))
        .map_err(|()| "set path")?;
    let response = outgoing_handler::handle(request, None).map_err(|e| format!("{e:?}"))?;
    response.subscribe().block();
    let response = match response.get() {
        Some(Ok(Ok(r))) => r,
        Some(Ok(Err(e))) => return Err(format!("{e:?}")),
        _ => return Err("no response".into()),
    };
    let body = response.consume().map_err(|()| "body taken")?;
    let stream = body.stream().map_err(|()| "stream taken")?;
    let mut n = 0;
    loop {
        match stream.blocking_read(64 << 10) {
            Ok(bytes) => n += bytes.len(),
            Err(StreamError::Closed) => return Ok(n),
            Err(StreamError::LastOperationFailed(e)) => {
                let code = wasi::http::types::http_error_code(&e);
                return Err(format!("reading the body after {n} bytes: {code:?}"));
            }
        }
    }
}

export!(SlowBody);
