//! Outbound HTTP over `wasi:http/outgoing-handler@0.2.12`.
//!
//! Both worlds import the outgoing handler. Vigil lets a plugin reach only
//! the hosts its manifest's `[http] allowed_hosts` lists; any other request
//! fails with an error that says the request was denied. Requests are
//! blocking: [`request`] returns once the whole response body is read (up to
//! [`Request::max_response_bytes`]). Off `wasm32` every request returns
//! `Err` without a network call.
//!
//! ```no_run
//! let body = serde_json::json!({"text": "hello"});
//! let resp = vigil_sdk::http::post_json("https://example.com/hook", &body, &[("x-token", "t")])?;
//! if !resp.is_success() {
//!     return Err(format!("status {}", resp.status));
//! }
//! # Ok::<(), String>(())
//! ```

use std::time::Duration;

/// Default bound on a response body: 1 MiB.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 1 << 20;

/// An HTTP method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `GET`
    Get,
    /// `HEAD`
    Head,
    /// `POST`
    Post,
    /// `PUT`
    Put,
    /// `PATCH`
    Patch,
    /// `DELETE`
    Delete,
    /// `OPTIONS`
    Options,
}

/// An outgoing request, built with [`Request::new`] (or [`Request::get`],
/// [`Request::post`]) and the builder methods, sent with [`Request::send`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The method.
    pub method: Method,
    /// An absolute `http://` or `https://` URL (no user info; the fragment
    /// is dropped).
    pub url: String,
    /// Header names and values, sent in order. Vigil may refuse some
    /// (`host`, `connection`, `transfer-encoding`, ...). Without a
    /// `user-agent` header, [`DEFAULT_USER_AGENT`] is sent.
    pub headers: Vec<(String, String)>,
    /// The body; empty means none. A non-empty body is sent with a
    /// `content-length` header.
    pub body: Vec<u8>,
    /// Connect, first-byte and between-bytes timeout, if set. The plugin's
    /// deadline bounds the whole call anyway.
    pub timeout: Option<Duration>,
    /// A longer response body is an error. Default
    /// [`DEFAULT_MAX_RESPONSE_BYTES`].
    pub max_response_bytes: usize,
}

impl Request {
    /// A request with no headers, no body and no timeout.
    pub fn new(method: Method, url: impl Into<String>) -> Request {
        Request {
            method,
            url: url.into(),
            headers: Vec::new(),
            body: Vec::new(),
            timeout: None,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        }
    }

    /// A `GET` of `url`.
    pub fn get(url: impl Into<String>) -> Request {
        Request::new(Method::Get, url)
    }

    /// A `POST` to `url`.
    pub fn post(url: impl Into<String>) -> Request {
        Request::new(Method::Post, url)
    }

    /// Adds a header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Request {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Adds the headers in `headers`.
    pub fn headers(mut self, headers: &[(&str, &str)]) -> Request {
        self.headers
            .extend(headers.iter().map(|(n, v)| (n.to_string(), v.to_string())));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Request {
        self.body = body.into();
        self
    }

    /// Sets the body to `value` serialized as JSON, and the `content-type`
    /// header to `application/json` unless one is already set.
    pub fn json(mut self, value: &serde_json::Value) -> Request {
        self.body = value.to_string().into_bytes();
        if !self
            .headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
        {
            self.headers
                .push(("content-type".into(), "application/json".into()));
        }
        self
    }

    /// Sets the connect, first-byte and between-bytes timeouts.
    pub fn timeout(mut self, timeout: Duration) -> Request {
        self.timeout = Some(timeout);
        self
    }

    /// Sets the response body bound.
    pub fn max_response_bytes(mut self, max: usize) -> Request {
        self.max_response_bytes = max;
        self
    }

    /// Sends the request: same as [`request`].
    pub fn send(&self) -> Result<Response, String> {
        request(self)
    }
}

/// A response, with its body read to the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Header names (lowercase, as the host gives them) and values (lossy
    /// UTF-8), in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON.
    pub fn json(&self) -> Result<serde_json::Value, String> {
        serde_json::from_slice(&self.body).map_err(|e| format!("response body is not JSON: {e}"))
    }

    /// The first value of header `name` (ASCII case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// `GET url` with `headers`.
pub fn get(url: &str, headers: &[(&str, &str)]) -> Result<Response, String> {
    Request::get(url).headers(headers).send()
}

/// `POST url` with `body` as JSON (`content-type: application/json` unless
/// `headers` sets one) and `headers`. Any status is `Ok`: check
/// [`Response::is_success`].
pub fn post_json(
    url: &str,
    body: &serde_json::Value,
    headers: &[(&str, &str)],
) -> Result<Response, String> {
    Request::post(url).headers(headers).json(body).send()
}

/// Checks that `url` is an absolute `http://` or `https://` URL this module
/// can send to (so a plugin can reject a bad configured URL up front).
pub fn validate_url(url: &str) -> Result<(), String> {
    split_url(url).map(|_| ())
}

/// Whether `error` (a message from this module) says Vigil refused the
/// request by policy: the host is not in the manifest's
/// `[http] allowed_hosts`. That is the plugin's configuration problem, not
/// the remote side's.
pub fn is_denied(error: &str) -> bool {
    error.contains(DENIED)
}

/// The phrase [`is_denied`] looks for.
const DENIED: &str = "request denied by Vigil";

/// Parses a header list written as `Name: value; Name2: value2` (as in a
/// plugin's configuration): empty items are skipped, whitespace around names
/// and values trimmed. Values cannot contain `;`. `Err` names the bad item.
pub fn parse_header_list(list: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for item in list.split(';') {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let Some((name, value)) = item.split_once(':') else {
            return Err(format!("header {item:?} is not `Name: value`"));
        };
        let name = name.trim();
        let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
        if name.is_empty() || !name.chars().all(token) {
            return Err(format!("header {item:?} has an invalid name"));
        }
        let value = value.trim();
        if value.chars().any(|c| c.is_control()) {
            return Err(format!(
                "header {name:?} has control characters in its value"
            ));
        }
        out.push((name.to_string(), value.to_string()));
    }
    Ok(out)
}

/// The value of the `user-agent` header sent when a request sets none.
pub const DEFAULT_USER_AGENT: &str = concat!("vigil-plugin/", env!("CARGO_PKG_VERSION"));

/// The parts of a URL that `wasi:http` takes separately.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UrlParts {
    pub https: bool,
    pub authority: String,
    pub path_with_query: String,
}

/// Splits an absolute `http(s)://authority/path?query#fragment` URL.
pub(crate) fn split_url(url: &str) -> Result<UrlParts, String> {
    let url = url.trim();
    let (https, rest) = if let Some(r) = strip_prefix_ci(url, "https://") {
        (true, r)
    } else if let Some(r) = strip_prefix_ci(url, "http://") {
        (false, r)
    } else {
        return Err(format!("URL {url:?} must start with http:// or https://"));
    };
    let rest = rest.split('#').next().unwrap_or("");
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if authority.is_empty() {
        return Err(format!("URL {url:?} has no host"));
    }
    if authority.contains('@') {
        return Err(format!(
            "URL {url:?} has user info; send credentials in a header instead"
        ));
    }
    if authority
        .chars()
        .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(format!("URL {url:?} has an invalid host"));
    }
    let path_with_query = match tail.chars().next() {
        None => "/".to_string(),
        Some('?') => format!("/{tail}"),
        Some(_) => tail.to_string(),
    };
    if path_with_query
        .chars()
        .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "URL {url:?} has spaces or control characters in its path"
        ));
    }
    Ok(UrlParts {
        https,
        authority: authority.to_string(),
        path_with_query,
    })
}

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

/// Sends `req` and reads the whole response.
///
/// `Ok` for any status; `Err` with a readable reason for a bad URL or
/// header, a denied host, a connection or TLS failure, a timeout, or a
/// response body longer than `req.max_response_bytes`.
pub fn request(req: &Request) -> Result<Response, String> {
    let parts = split_url(&req.url)?;
    #[cfg(target_arch = "wasm32")]
    {
        wasi_impl::send(req, &parts)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = parts;
        Err(format!(
            "cannot send {} {}: wasi:http is only available inside a Vigil plugin component",
            method_name(req.method),
            req.url
        ))
    }
}

fn method_name(m: Method) -> &'static str {
    match m {
        Method::Get => "GET",
        Method::Head => "HEAD",
        Method::Post => "POST",
        Method::Put => "PUT",
        Method::Patch => "PATCH",
        Method::Delete => "DELETE",
        Method::Options => "OPTIONS",
    }
}

#[cfg(target_arch = "wasm32")]
mod wasi_impl {
    use super::{DEFAULT_USER_AGENT, DENIED, Method, Request, Response, UrlParts, method_name};
    use crate::bindings::probe::wasi::http::outgoing_handler;
    use crate::bindings::probe::wasi::http::types as http;
    use crate::bindings::probe::wasi::io::streams::{InputStream, OutputStream, StreamError};

    /// `blocking-write-and-flush` takes at most 4096 bytes a call.
    const WRITE_CHUNK: usize = 4096;
    /// Bytes asked for per `blocking-read`.
    const READ_CHUNK: u64 = 64 * 1024;

    pub(super) fn send(req: &Request, parts: &UrlParts) -> Result<Response, String> {
        let what = format!("{} {}", method_name(req.method), req.url);
        let fail = |why: String| format!("{what}: {why}");

        let headers = http::Fields::new();
        for (name, value) in &req.headers {
            headers
                .append(name, value.as_bytes())
                .map_err(|e| fail(format!("header {name:?}: {}", header_error(&e))))?;
        }
        let has = |h: &str| req.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(h));
        if !has("user-agent") {
            headers
                .append("user-agent", DEFAULT_USER_AGENT.as_bytes())
                .map_err(|e| fail(format!("header user-agent: {}", header_error(&e))))?;
        }
        if !req.body.is_empty() && !has("content-length") {
            headers
                .append("content-length", req.body.len().to_string().as_bytes())
                .map_err(|e| fail(format!("header content-length: {}", header_error(&e))))?;
        }

        let outgoing = http::OutgoingRequest::new(headers);
        let method = match req.method {
            Method::Get => http::Method::Get,
            Method::Head => http::Method::Head,
            Method::Post => http::Method::Post,
            Method::Put => http::Method::Put,
            Method::Patch => http::Method::Patch,
            Method::Delete => http::Method::Delete,
            Method::Options => http::Method::Options,
        };
        let scheme = if parts.https {
            http::Scheme::Https
        } else {
            http::Scheme::Http
        };
        outgoing
            .set_method(&method)
            .and_then(|()| outgoing.set_scheme(Some(&scheme)))
            .map_err(|()| fail("invalid method or scheme".into()))?;
        outgoing
            .set_authority(Some(&parts.authority))
            .map_err(|()| fail(format!("invalid host {:?}", parts.authority)))?;
        outgoing
            .set_path_with_query(Some(&parts.path_with_query))
            .map_err(|()| fail(format!("invalid path {:?}", parts.path_with_query)))?;

        // Take the body before `handle` consumes the request; with no body
        // leave it untaken, which sends none.
        let out_body = if req.body.is_empty() {
            None
        } else {
            Some(
                outgoing
                    .body()
                    .map_err(|()| fail("request body already taken".into()))?,
            )
        };

        let options = req.timeout.map(|t| {
            let ns = u64::try_from(t.as_nanos()).unwrap_or(u64::MAX);
            let o = http::RequestOptions::new();
            // A host that does not support a timeout refuses to set it; the
            // plugin's deadline still bounds the call, so go on.
            let _ = o.set_connect_timeout(Some(ns));
            let _ = o.set_first_byte_timeout(Some(ns));
            let _ = o.set_between_bytes_timeout(Some(ns));
            o
        });

        // Hand the request over first, then stream the body: the host may
        // buffer only part of it before it starts sending.
        let future =
            outgoing_handler::handle(outgoing, options).map_err(|e| fail(error_code(&e)))?;

        if let Some(body) = out_body {
            let written = match body.write() {
                Ok(stream) => write_all(&stream, &req.body),
                Err(()) => Err("request body stream already taken".into()),
            };
            if let Err(why) = written {
                // The host may know better (the connection was refused, ...).
                if let Some(Ok(Err(code))) = future.get() {
                    return Err(fail(error_code(&code)));
                }
                return Err(fail(format!("writing the request body: {why}")));
            }
            http::OutgoingBody::finish(body, None)
                .map_err(|e| fail(format!("finishing the request body: {}", error_code(&e))))?;
        }

        let response = loop {
            if let Some(result) = future.get() {
                break result;
            }
            let ready = future.subscribe();
            ready.block();
        };
        let response = match response {
            Err(()) => return Err(fail("response already taken".into())),
            Ok(Err(code)) => return Err(fail(error_code(&code))),
            Ok(Ok(r)) => r,
        };

        let status = response.status();
        let headers = {
            let fields = response.headers();
            fields
                .entries()
                .into_iter()
                .map(|(n, v)| (n, String::from_utf8_lossy(&v).into_owned()))
                .collect()
        };
        let body = {
            let incoming = response
                .consume()
                .map_err(|()| fail("response body already taken".into()))?;
            let read = match incoming.stream() {
                Ok(stream) => read_all(&stream, req.max_response_bytes),
                Err(()) => Err("response body stream already taken".into()),
            };
            // The stream (dropped above) is a child of the body, the body a
            // child of the response: drop in that order.
            drop(http::IncomingBody::finish(incoming));
            read.map_err(|why| fail(format!("status {status}: {why}")))?
        };
        drop(response);
        Ok(Response {
            status,
            headers,
            body,
        })
    }

    fn write_all(stream: &OutputStream, mut data: &[u8]) -> Result<(), String> {
        while !data.is_empty() {
            let n = data.len().min(WRITE_CHUNK);
            stream
                .blocking_write_and_flush(&data[..n])
                .map_err(|e| stream_error(&e))?;
            data = &data[n..];
        }
        Ok(())
    }

    fn read_all(stream: &InputStream, max: usize) -> Result<Vec<u8>, String> {
        let mut body = Vec::new();
        loop {
            match stream.blocking_read(READ_CHUNK) {
                Ok(chunk) => {
                    if body.len() + chunk.len() > max {
                        return Err(format!("response body exceeds {max} bytes"));
                    }
                    body.extend_from_slice(&chunk);
                }
                Err(StreamError::Closed) => return Ok(body),
                Err(e) => return Err(format!("reading the response body: {}", stream_error(&e))),
            }
        }
    }

    fn stream_error(e: &StreamError) -> String {
        match e {
            StreamError::Closed => "stream closed".into(),
            StreamError::LastOperationFailed(err) => match http::http_error_code(err) {
                Some(code) => error_code(&code),
                None => err.to_debug_string(),
            },
        }
    }

    fn header_error(e: &http::HeaderError) -> &'static str {
        match e {
            http::HeaderError::InvalidSyntax => "invalid name or value",
            http::HeaderError::Forbidden => "forbidden by the host",
            http::HeaderError::Immutable => "headers are immutable",
        }
    }

    /// A readable reason for a `wasi:http` error code.
    fn error_code(e: &http::ErrorCode) -> String {
        use http::ErrorCode as E;
        match e {
            E::HttpRequestDenied => {
                format!("{DENIED} (is the host in the manifest's [http] allowed_hosts?)")
            }
            E::DnsTimeout => "DNS lookup timed out".into(),
            E::DnsError(p) => format!(
                "DNS lookup failed{}",
                p.rcode
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            ),
            E::DestinationNotFound => "host not found".into(),
            E::DestinationUnavailable => "host unavailable".into(),
            E::DestinationIpProhibited => "destination IP prohibited".into(),
            E::DestinationIpUnroutable => "destination IP unroutable".into(),
            E::ConnectionRefused => "connection refused".into(),
            E::ConnectionTerminated => "connection closed early".into(),
            E::ConnectionTimeout => "connect timed out".into(),
            E::ConnectionReadTimeout => "read timed out".into(),
            E::ConnectionWriteTimeout => "write timed out".into(),
            E::HttpResponseTimeout => "response timed out".into(),
            E::TlsProtocolError => "TLS protocol error".into(),
            E::TlsCertificateError => "TLS certificate error".into(),
            E::TlsAlertReceived(p) => format!(
                "TLS alert received{}",
                p.alert_message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ),
            E::HttpRequestUriInvalid => "invalid request URI".into(),
            E::HttpResponseIncomplete => "incomplete response".into(),
            E::HttpProtocolError => "HTTP protocol error".into(),
            E::InternalError(Some(m)) => format!("host error: {m}"),
            other => format!("{other:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(url: &str) -> (bool, String, String) {
        let p = split_url(url).unwrap();
        (p.https, p.authority, p.path_with_query)
    }

    #[test]
    fn split_urls() {
        assert_eq!(
            parts("https://discord.com/api/webhooks/1/x"),
            (true, "discord.com".into(), "/api/webhooks/1/x".into())
        );
        assert_eq!(
            parts("http://127.0.0.1:8080"),
            (false, "127.0.0.1:8080".into(), "/".into())
        );
        assert_eq!(
            parts("HTTP://h?q=1#frag"),
            (false, "h".into(), "/?q=1".into())
        );
        assert_eq!(
            parts("http://[::1]:9/a?b#c"),
            (false, "[::1]:9".into(), "/a?b".into())
        );
        assert!(split_url("ftp://h/").unwrap_err().contains("http://"));
        assert!(split_url("https:///path").unwrap_err().contains("no host"));
        assert!(
            split_url("https://u:p@h/")
                .unwrap_err()
                .contains("user info")
        );
        assert!(split_url("https://h/a b").is_err());
    }

    #[test]
    fn header_lists() {
        assert_eq!(
            parse_header_list(" X-A: 1 ; ;Authorization: Bearer a:b ").unwrap(),
            vec![
                ("X-A".into(), "1".into()),
                ("Authorization".into(), "Bearer a:b".into())
            ]
        );
        assert_eq!(parse_header_list("").unwrap(), vec![]);
        assert!(parse_header_list("X-A 1").unwrap_err().contains("X-A 1"));
        assert!(
            parse_header_list("X A: 1")
                .unwrap_err()
                .contains("invalid name")
        );
        assert!(parse_header_list(": 1").is_err());
    }

    #[test]
    fn denied_and_validate() {
        assert!(is_denied(&format!("POST http://h/: {DENIED} (...)")));
        assert!(!is_denied("connection refused"));
        assert!(validate_url("https://h").is_ok());
        assert!(validate_url("h").is_err());
    }

    #[test]
    fn builder() {
        let r = Request::post("http://h/x")
            .header("X-A", "1")
            .json(&serde_json::json!({"k": 1}))
            .timeout(Duration::from_secs(2));
        assert_eq!(r.body, br#"{"k":1}"#);
        assert_eq!(
            r.headers,
            vec![
                ("X-A".into(), "1".into()),
                ("content-type".into(), "application/json".into())
            ]
        );
        let r = Request::post("http://h/x")
            .headers(&[("Content-Type", "text/json")])
            .json(&serde_json::json!(1));
        assert_eq!(r.headers.len(), 1);
        assert_eq!(r.max_response_bytes, DEFAULT_MAX_RESPONSE_BYTES);
    }

    #[test]
    fn response_helpers() {
        let r = Response {
            status: 204,
            headers: vec![("content-type".into(), "x".into())],
            body: b"{}".to_vec(),
        };
        assert!(r.is_success());
        assert_eq!(r.header("Content-Type"), Some("x"));
        assert_eq!(r.json().unwrap(), serde_json::json!({}));
        assert!(
            !Response {
                status: 300,
                headers: vec![],
                body: vec![]
            }
            .is_success()
        );
    }

    #[test]
    fn off_wasm_request_errors() {
        let e = get("http://h/", &[]).unwrap_err();
        assert!(e.contains("GET http://h/"), "{e}");
        assert!(get("nope", &[]).unwrap_err().contains("http://"));
    }
}
