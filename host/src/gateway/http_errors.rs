//! Turns the plain-text transport errors of the `/mcp` endpoint (bad JSON,
//! unknown session, refused `Origin`, body too large, ...) into JSON-RPC
//! error bodies with the right HTTP status, and logs each one.
//!
//! rmcp answers a body that is not JSON-RPC with `415` and a text message;
//! JSON-RPC says that is a parse error (`-32700`) or an invalid request
//! (`-32600`), and HTTP says `400`.

use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use serde_json::json;

/// How rmcp's answer to a request body it could not read begins.
const BODY_UNREAD: &str = "Failed to read request body";

/// Longest error body rewritten; larger ones pass through untouched.
const MAX_ERROR_BODY: usize = 16 * 1024;

pub async fn jsonrpc_errors(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let mut response = next.run(req).await;
    let status = response.status();
    // A closed session is done, not "accepted for later": some clients
    // (the Python SDK) report 202 on DELETE as a failed termination.
    if method == axum::http::Method::DELETE && status == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::OK;
        return response;
    }
    // rmcp answers a session it could not create (see `streams.rs`) with 500.
    let server_error = status == StatusCode::INTERNAL_SERVER_ERROR;
    if !(status.is_client_error() || server_error) || is_json(&response) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = to_bytes(body, MAX_ERROR_BODY).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let text = String::from_utf8_lossy(&bytes).trim().to_owned();
    if server_error
        && !text.contains(super::streams::SESSIONS_FULL)
        && !text.starts_with(BODY_UNREAD)
    {
        return Response::from_parts(parts, Body::from(bytes));
    }
    let (status, code, message) = classify(status, &text);
    // Anyone who can reach /mcp can cause these: one line per interval
    // at WARN, each at DEBUG.
    tracing::debug!(%method, status = status.as_u16(), code, reason = %message, "rejected MCP request");
    if let Some(more) = rejected_log().admit() {
        tracing::warn!(%method, status = status.as_u16(), code, reason = %message, more, "rejected MCP request (and `more` since the last such line)");
    }
    let body = json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}});
    parts.status = status;
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(body.to_string()))
}

/// The one rate limit of "rejected MCP request" lines.
fn rejected_log() -> &'static crate::log_limit::SharedLogLimit {
    static LOG: std::sync::OnceLock<crate::log_limit::SharedLogLimit> = std::sync::OnceLock::new();
    LOG.get_or_init(|| crate::log_limit::SharedLogLimit::new(std::time::Duration::from_secs(10)))
}

fn is_json(r: &Response) -> bool {
    r.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"))
}

/// The HTTP status, JSON-RPC code and message for one rejected request.
fn classify(status: StatusCode, text: &str) -> (StatusCode, i32, String) {
    const PARSE_ERROR: i32 = -32700;
    const INVALID_REQUEST: i32 = -32600;
    if let Some(detail) = text.strip_prefix("fail to deserialize request body") {
        let detail = detail.trim();
        let syntax = [
            "EOF while parsing",
            "expected",
            "trailing",
            "key must be",
            "invalid escape",
            "control character",
            "invalid unicode",
            "number out of range",
        ]
        .iter()
        .any(|p| detail.contains(p))
            && !detail.contains("JSON-RPC");
        return if syntax {
            (
                StatusCode::BAD_REQUEST,
                PARSE_ERROR,
                format!("Parse error: the body is not valid JSON ({detail})"),
            )
        } else {
            (
                StatusCode::BAD_REQUEST,
                INVALID_REQUEST,
                format!("Invalid Request: the body is JSON but not a JSON-RPC message ({detail})"),
            )
        };
    }
    // A body that did not arrive (the listener's read_timeout) is the
    // client's doing, not the server's: 408 (rmcp says 500).
    if text.starts_with(BODY_UNREAD) {
        let status = if text.contains("read_timeout") {
            StatusCode::REQUEST_TIMEOUT
        } else {
            StatusCode::BAD_REQUEST
        };
        return (status, INVALID_REQUEST, text.to_owned());
    }
    if let Some(at) = text.find(super::streams::SESSIONS_FULL) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            -32000,
            format!(
                "{}: close sessions you no longer use (HTTP DELETE), retry later, or raise the limit",
                &text[at..]
            ),
        );
    }
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_owned()
    } else {
        text.to_owned()
    };
    (status, INVALID_REQUEST, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syntax_errors_are_parse_errors() {
        let (s, c, m) = classify(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "fail to deserialize request body EOF while parsing a string at line 1 column 42",
        );
        assert_eq!((s, c), (StatusCode::BAD_REQUEST, -32700));
        assert!(m.contains("not valid JSON"), "{m}");
    }

    #[test]
    fn json_that_is_not_jsonrpc_is_an_invalid_request() {
        let (s, c, _) = classify(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "fail to deserialize request body unrecognized JSON-RPC message",
        );
        assert_eq!((s, c), (StatusCode::BAD_REQUEST, -32600));
    }

    #[test]
    fn a_session_rmcp_could_not_create_for_the_limit_is_a_503() {
        let (s, c, m) = classify(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Encounter an error when create session: Vigil is at its session limit (limits.max_sessions = 3)",
        );
        assert_eq!((s, c), (StatusCode::SERVICE_UNAVAILABLE, -32000));
        assert!(
            m.starts_with(
                "Vigil is at its session limit (limits.max_sessions = 3): close sessions"
            ),
            "{m}"
        );
    }

    #[test]
    fn other_errors_keep_their_status() {
        let (s, c, m) = classify(StatusCode::NOT_FOUND, "Not Found: Session not found");
        assert_eq!(
            (s, c, m.as_str()),
            (
                StatusCode::NOT_FOUND,
                -32600,
                "Not Found: Session not found"
            )
        );
    }
}
