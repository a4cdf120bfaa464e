//! The control API's answer to web pages: every request, on every route
//! (the dashboard, `/metrics` and the event stream included), must name an
//! allowed `Host` and, if it has an `Origin`, an allowed one; a request
//! that changes something (any method but GET, HEAD, OPTIONS, TRACE) must
//! also carry what a page on another origin cannot send without a CORS
//! preflight, which Vigil never grants.
//!
//! | check | refused with |
//! |---|---|
//! | `Host` not in `[api] allowed_hosts` (DNS rebinding) | 403 `host_not_allowed` |
//! | `Origin` neither the API's own nor in `[api] allowed_origins` | 403 `origin_not_allowed` |
//! | a browser's mutating request (it sends `Sec-Fetch-*`) without `Origin`, not `Sec-Fetch-Site: same-origin` | 403 `origin_required` |
//! | a mutating request with neither `X-Vigil-Request` nor `Authorization` | 403 `request_header_missing` |
//! | a missing or malformed `Host` | 400 `bad_request` |
//!
//! The header is required even without tokens: on tokenless loopback a
//! form POST or a `no-cors` fetch from any page would otherwise act as the
//! operator `local`. `Authorization` counts as well, since a page cannot
//! send it cross-origin without a preflight either (and with tokens it is
//! needed anyway). The rule for which `Host` and `Origin` pass is
//! [`crate::origin`]'s, the one `/mcp` uses.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, Method};
use axum::middleware::Next;
use axum::response::Response;
use tokio::time::Instant;

use super::ApiError;
use crate::log_limit::LogLimit;
use crate::origin::{HostRule, OriginRule, Refusal};

/// The header first-party clients send on mutating requests.
pub const REQUEST_HEADER: HeaderName = HeaderName::from_static("x-vigil-request");
/// At most one warning per this interval for refused requests.
const LOG_EVERY: Duration = Duration::from_secs(10);
/// Longest `Host` or `Origin` quoted back in a message.
const MAX_QUOTED: usize = 200;

/// `[api] allowed_hosts` and `allowed_origins`, and the log of refusals.
pub(super) struct Guard {
    hosts: HostRule,
    origins: OriginRule,
    log: Mutex<LogLimit>,
}

// === impl Guard ===

impl Guard {
    pub(super) fn new(allowed_hosts: &[String], allowed_origins: &[String]) -> Self {
        Guard {
            hosts: HostRule::new(allowed_hosts),
            origins: OriginRule::new(allowed_origins, true),
            log: Mutex::new(LogLimit::new(LOG_EVERY)),
        }
    }

    fn check(&self, method: &Method, req: &Request) -> Result<(), ApiError> {
        let headers = req.headers();
        let host = self.hosts.check(req.uri(), headers).map_err(refused)?;
        let origin = self.origins.check(headers, &host).map_err(refused)?;
        if is_safe(method) {
            return Ok(());
        }
        if origin.is_none() && from_browser(headers) && !same_origin_fetch(headers) {
            return Err(ApiError::CrossSite {
                code: "origin_required",
                message: "a browser request without an Origin header may not change anything: send it from the API's own origin".into(),
            });
        }
        let present = |name| headers.get(name).is_some_and(|v| !v.is_empty());
        if !present(REQUEST_HEADER) && !present(axum::http::header::AUTHORIZATION) {
            return Err(ApiError::CrossSite {
                code: "request_header_missing",
                message: format!(
                    "{method} needs the header `X-Vigil-Request: 1` or a bearer token, which a web page on another origin cannot send; e.g. curl -X {method} -H 'X-Vigil-Request: 1' URL"
                ),
            });
        }
        Ok(())
    }

    /// One warning per [`LOG_EVERY`] (with the count of the others); each
    /// refusal is also logged at debug level as every refused request is.
    fn warn(&self, req: &Request, e: &ApiError) {
        let now = Instant::now();
        let admitted = self
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .admit(now);
        if let Some(suppressed) = admitted {
            let header = |name| {
                req.headers()
                    .get(name)
                    .map(|v| quoted(&String::from_utf8_lossy(v.as_bytes())))
                    .unwrap_or_default()
            };
            tracing::warn!(
                code = e.code(),
                method = %req.method(),
                path = req.uri().path(),
                host = %header(axum::http::header::HOST),
                origin = %header(axum::http::header::ORIGIN),
                suppressed,
                "control API: refused a request from another origin or host"
            );
        }
    }
}

/// Middleware: refuses what [`Guard::check`] refuses, before anything else
/// (authentication included) looks at the request.
pub(super) async fn guard(
    State(guard): State<Arc<Guard>>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let method = req.method().clone();
    if let Err(e) = guard.check(&method, &req) {
        guard.warn(&req, &e);
        return Err(e);
    }
    Ok(next.run(req).await)
}

fn is_safe(method: &Method) -> bool {
    [Method::GET, Method::HEAD, Method::OPTIONS, Method::TRACE].contains(method)
}

/// Browsers send `Sec-Fetch-*` on every request; pages cannot set them.
fn from_browser(headers: &HeaderMap) -> bool {
    headers.contains_key("sec-fetch-site") || headers.contains_key("sec-fetch-mode")
}

fn same_origin_fetch(headers: &HeaderMap) -> bool {
    headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"same-origin"))
}

fn refused(r: Refusal) -> ApiError {
    match r {
        Refusal::MissingHost => ApiError::BadRequest(
            "missing Host header: a request must name the host it is for".into(),
        ),
        Refusal::BadHostEncoding | Refusal::BadHost => {
            ApiError::BadRequest("the Host header is not a valid host[:port]".into())
        }
        Refusal::HostNotAllowed(host) => ApiError::CrossSite {
            code: "host_not_allowed",
            message: format!(
                "Host `{}` is not a name this control API answers to (DNS rebinding protection): connect by an allowed name, or add it to [api] allowed_hosts",
                quoted(&host)
            ),
        },
        Refusal::BadOriginEncoding | Refusal::BadOrigin => ApiError::CrossSite {
            code: "origin_not_allowed",
            message: "the Origin header is not a valid origin".into(),
        },
        Refusal::OriginNotAllowed(origin) => ApiError::CrossSite {
            code: "origin_not_allowed",
            message: format!(
                "Origin `{}` may not use this control API: it answers only pages of its own origin; add the origin to [api] allowed_origins to allow it",
                quoted(&origin)
            ),
        },
    }
}

/// `text` cut to [`MAX_QUOTED`] characters.
fn quoted(text: &str) -> String {
    match text.char_indices().nth(MAX_QUOTED) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}
