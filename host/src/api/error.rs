//! [`ApiError`]: the one error every control-API handler returns.
//!
//! Its body is always `{"error": {"code": "...", "message": "..."}}`.
//! Client mistakes (bad token, unknown backend, wrong method) are answered
//! and logged at debug level only; internal errors are logged at error
//! level and their message is hidden from the client.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::ControlError;

/// Why a control-API request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// No token, or one that matches no configured token. 401 with
    /// `WWW-Authenticate: Bearer`.
    #[error("{0}")]
    Unauthorized(&'static str),
    /// An OAuth access token that is not valid (expired, another
    /// audience...): 401 with `error="invalid_token"`.
    #[error("invalid token: {0}")]
    InvalidToken(String),
    /// The token is known but its role may not do this. 403.
    #[error("{0}")]
    Forbidden(String),
    /// A request a web page on another site could have made: a foreign
    /// `Host` or `Origin`, or a mutating request without the header that
    /// shows it is not one (see `guard.rs`). 403 with its own `code`.
    #[error("{message}")]
    CrossSite { code: &'static str, message: String },
    /// Too many unknown tokens from this address lately (see
    /// `throttle.rs`). 429 with `Retry-After: <retry_after_secs>`.
    #[error("too many failed token attempts from {address}: try again in {retry_after_secs} s")]
    Throttled {
        address: String,
        retry_after_secs: u64,
    },
    /// No such backend, or no such path. 404.
    #[error("{0}")]
    NotFound(String),
    /// The path exists but not with this method. 405.
    #[error("method {0} is not allowed here")]
    MethodNotAllowed(String),
    /// The action does not apply in the backend's current state. 409.
    #[error("{0}")]
    Conflict(String),
    /// A malformed query or body. 400.
    #[error("{0}")]
    BadRequest(String),
    /// A part the request needs is not running (the state store). 503.
    #[error("{0}")]
    Unavailable(String),
    /// Anything else: logged, answered as 500 without the detail.
    #[error("internal error: {0}")]
    Internal(String),
}

// === impl ApiError ===

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized(_) | ApiError::InvalidToken(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) | ApiError::CrossSite { .. } => StatusCode::FORBIDDEN,
            ApiError::Throttled { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The stable, machine-readable `error.code`.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Unauthorized(_) | ApiError::InvalidToken(_) => "unauthorized",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::CrossSite { code, .. } => code,
            ApiError::Throttled { .. } => "too_many_failures",
            ApiError::NotFound(_) => "not_found",
            ApiError::MethodNotAllowed(_) => "method_not_allowed",
            ApiError::Conflict(_) => "conflict",
            ApiError::BadRequest(_) => "bad_request",
            ApiError::Unavailable(_) => "unavailable",
            ApiError::Internal(_) => "internal",
        }
    }
}

impl From<ControlError> for ApiError {
    fn from(e: ControlError) -> Self {
        match e {
            ControlError::NotFound(_) => ApiError::NotFound(e.to_string()),
            ControlError::Conflict(m) => ApiError::Conflict(m),
            ControlError::Invalid(m) => ApiError::BadRequest(m),
            ControlError::Internal(m) => ApiError::Internal(m),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let message = match &self {
            ApiError::Internal(detail) => {
                tracing::error!(error = %detail, "control API: internal error");
                "internal error; see the gateway's log".to_owned()
            }
            other => {
                tracing::debug!(code = other.code(), message = %other, "control API: request refused");
                other.to_string()
            }
        };
        let body = Json(json!({ "error": { "code": self.code(), "message": message } }));
        let mut res = (self.status(), body).into_response();
        match self {
            ApiError::Unauthorized(_) => {
                res.headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            ApiError::InvalidToken(_) => {
                res.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static(r#"Bearer error="invalid_token""#),
                );
            }
            ApiError::Throttled {
                retry_after_secs, ..
            } => {
                res.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
            }
            _ => {}
        }
        res
    }
}
