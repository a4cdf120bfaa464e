//! Hostile notifier: `notify` POSTs the event to `http://example.invalid:9/`
//! (or to its config key `url`) with the raw `wasi:http` bindings. With no
//! host allowed by its manifest, the host must refuse the request: the
//! plugin then returns `Err` with the error it got. `Ok(())` means it got a
//! response, i.e. the request went out.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "notifier",
    generate_all,
});

use exports::vigil::plugin::notify_sink::Guest;
use vigil::plugin::host;
use vigil::plugin::types::Event;
use wasi::http::outgoing_handler;
use wasi::http::types::{Fields, Method, OutgoingBody, OutgoingRequest, Scheme};

const DEFAULT_URL: &str = "http://example.invalid:9/";

struct HttpNotAllowed;

impl Guest for HttpNotAllowed {
    fn notify(event: Event) -> Result<(), String> {
        let url = host::config()
            .into_iter()
            .find(|(k, _)| k == "url")
            .map(|(_, v)| v)
            .unwrap_or_else(|| DEFAULT_URL.to_string());
        post(&url, body(&event).as_bytes()).map_err(|e| format!("POST {url}: {e}"))
    }
}

/// Sends one POST and waits for the response head.
fn post(url: &str, body: &[u8]) -> Result<(), String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("not an absolute URL: {url}"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let scheme = match scheme {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => Scheme::Other(other.to_string()),
    };

    let headers = Fields::from_list(&[("content-type".to_string(), b"application/json".to_vec())])
        .map_err(|e| format!("headers: {e:?}"))?;
    let request = OutgoingRequest::new(headers);
    request
        .set_method(&Method::Post)
        .map_err(|()| "set method")?;
    request
        .set_scheme(Some(&scheme))
        .map_err(|()| "set scheme")?;
    request
        .set_authority(Some(authority))
        .map_err(|()| "set authority")?;
    request
        .set_path_with_query(Some(path))
        .map_err(|()| "set path")?;
    let outgoing_body = request.body().map_err(|()| "request body")?;

    // The handler may refuse right here (the host's allow-list) ...
    let response = outgoing_handler::handle(request, None).map_err(|e| format!("{e:?}"))?;

    {
        let stream = outgoing_body.write().map_err(|()| "body stream")?;
        // blocking-write-and-flush takes at most 4096 bytes per call.
        for piece in body.chunks(4096) {
            stream
                .blocking_write_and_flush(piece)
                .map_err(|e| format!("writing body: {e:?}"))?;
        }
        // The stream must be dropped before the body is finished.
    }
    OutgoingBody::finish(outgoing_body, None).map_err(|e| format!("{e:?}"))?;

    // ... or fail later (DNS, connection refused).
    response.subscribe().block();
    match response.get() {
        Some(Ok(Ok(_response))) => Ok(()),
        Some(Ok(Err(e))) => Err(format!("{e:?}")),
        Some(Err(())) => Err("response already taken".to_string()),
        None => Err("response not ready after blocking".to_string()),
    }
}

/// The event as a small JSON object (no serde: keep the fixture tiny).
fn body(e: &Event) -> String {
    format!(
        r#"{{"backend":{},"from":{},"to":{},"reason":{},"at_ms":{},"generation":{}}}"#,
        json_string(&e.backend),
        json_string(&e.from_state),
        json_string(&e.to_state),
        json_string(&e.reason),
        e.at_ms,
        e.generation,
    )
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

export!(HttpNotAllowed);
