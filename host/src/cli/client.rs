//! A small client of the control API: builds URLs under `--api`, sends the
//! bearer token, and turns every failure into a [`ClientError`] that knows
//! its exit code.

use std::time::Duration;

use reqwest::{Method, StatusCode, Url};
use serde_json::Value;

/// How long to wait for the TCP connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a whole request may take (an action waits for the monitor).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an event stream may stay silent before it counts as broken:
/// the API sends a keep-alive comment every 15 s.
pub const STREAM_READ_TIMEOUT: Duration = Duration::from_secs(45);

/// Why a call to the control API failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("`{url}` is not a usable API URL: {reason}")]
    BadUrl { url: String, reason: String },
    /// No answer: refused, unresolvable, timed out, reset.
    #[error(
        "cannot reach the control API at {url}: {reason}\nhint: is `vigil serve` running, and does --api (or VIGIL_API) match its [api] listen address?"
    )]
    Unreachable { url: String, reason: String },
    /// The API answered with an error status.
    #[error("{}", api_message(*.status, .code.as_deref(), .message))]
    Api {
        status: StatusCode,
        code: Option<String>,
        message: String,
    },
    /// A success status with a body that is not what Vigil sends.
    #[error("unexpected answer from {url}: {reason}")]
    BadAnswer { url: String, reason: String },
}

fn api_message(status: StatusCode, code: Option<&str>, message: &str) -> String {
    let hint = match status {
        StatusCode::UNAUTHORIZED => {
            "\nhint: pass an [[api.tokens]] secret with --token or VIGIL_TOKEN"
        }
        StatusCode::FORBIDDEN if code == Some("forbidden") => {
            "\nhint: this needs a token with role = \"operator\""
        }
        StatusCode::FORBIDDEN if code == Some("host_not_allowed") => {
            "\nhint: use the address in [api] listen with --api, or add the name to [api] allowed_hosts"
        }
        StatusCode::TOO_MANY_REQUESTS => {
            "\nhint: wait for the cool-down; then check that --token (or VIGIL_TOKEN) is one of [[api.tokens]]"
        }
        _ => "",
    };
    match code {
        Some(code) => format!("{message} ({status}, {code}){hint}"),
        None => format!("the API answered {status}: {message}{hint}"),
    }
}

/// What an error means for the caller; see the exit codes in `cli`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Unreachable, or an answer that is not the control API's.
    Api,
    /// 401, 403 or 429 (a cool-down after failed tokens).
    Refused,
    /// 400, 404 or 409 from the control API: the request was understood
    /// and turned down (no such backend, action does not apply now).
    Rejected,
}

// === impl ClientError ===

impl ClientError {
    pub fn failure(&self) -> Failure {
        match self {
            ClientError::Api { status, .. }
                if matches!(
                    *status,
                    StatusCode::UNAUTHORIZED
                        | StatusCode::FORBIDDEN
                        | StatusCode::TOO_MANY_REQUESTS
                ) =>
            {
                Failure::Refused
            }
            // Only the control API's own JSON errors: a 404 page from some
            // other server at --api is a wrong URL, not a missing backend.
            ClientError::Api {
                status,
                code: Some(_),
                ..
            } if matches!(
                *status,
                StatusCode::BAD_REQUEST | StatusCode::NOT_FOUND | StatusCode::CONFLICT
            ) =>
            {
                Failure::Rejected
            }
            _ => Failure::Api,
        }
    }
}

/// A control-API client for one `--api` base URL and token.
pub struct ApiClient {
    base: Url,
    token: Option<String>,
    http: reqwest::Client,
}

// === impl ApiClient ===

impl ApiClient {
    /// `api` is the base URL (`http://127.0.0.1:8081`, or with a path
    /// prefix behind a proxy); a bare `host:port` gets `http://`. An empty
    /// token counts as none.
    pub fn new(api: &str, token: Option<String>) -> Result<Self, ClientError> {
        let text = if api.contains("://") {
            api.to_owned()
        } else {
            format!("http://{api}")
        };
        let bad = |reason: String| ClientError::BadUrl {
            url: api.to_owned(),
            reason,
        };
        let base = Url::parse(&text).map_err(|e| bad(e.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(bad("use an http:// or https:// URL".into()));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| bad(chain(&e)))?;
        Ok(ApiClient {
            base,
            token: token.filter(|t| !t.is_empty()),
            http,
        })
    }

    /// `base` + `/api/v1/` + `segments`, each segment percent-encoded.
    pub fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        // `new` refused URLs that cannot be a base, so this always applies.
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(["api", "v1"]).extend(segments);
        }
        url
    }

    /// `GET /api/v1/health/instances`: the raw answer.
    pub async fn instances(&self) -> Result<Value, ClientError> {
        self.send(Method::GET, self.url(&["health", "instances"]), None)
            .await
    }

    /// `GET /api/v1/search?...`: the raw answer.
    pub async fn search(&self, query: &[(&str, String)]) -> Result<Value, ClientError> {
        let mut url = self.url(&["search"]);
        url.query_pairs_mut().extend_pairs(query);
        self.send(Method::GET, url, None).await
    }

    /// `GET /api/v1/health/instances/{name}/pins`: the raw answer.
    pub async fn pins(&self, name: &str) -> Result<Value, ClientError> {
        self.send(
            Method::GET,
            self.url(&["health", "instances", name, "pins"]),
            None,
        )
        .await
    }

    /// `GET /api/v1/health/instances/{name}/update`: the raw answer.
    pub async fn update(&self, name: &str) -> Result<Value, ClientError> {
        self.send(
            Method::GET,
            self.url(&["health", "instances", name, "update"]),
            None,
        )
        .await
    }

    /// `GET /api/v1/plugins`: the raw answer.
    pub async fn plugins(&self) -> Result<Value, ClientError> {
        self.send(Method::GET, self.url(&["plugins"]), None).await
    }

    /// `GET /api/v1/audit/calls?...` with `query`: the raw answer.
    pub async fn calls(&self, query: &[(&str, String)]) -> Result<Value, ClientError> {
        let mut url = self.url(&["audit", "calls"]);
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        self.send(Method::GET, url, None).await
    }

    /// `POST /api/v1/health/instances/{name}/{action}`: the raw answer
    /// (the backend's new report).
    pub async fn act(
        &self,
        action: &str,
        name: &str,
        body: Option<Value>,
    ) -> Result<Value, ClientError> {
        let mut segments = vec!["health", "instances", name];
        segments.extend(action.split('/'));
        self.send(Method::POST, self.url(&segments), body).await
    }

    async fn send(
        &self,
        method: Method,
        url: Url,
        body: Option<Value>,
    ) -> Result<Value, ClientError> {
        let mut req = self.http.request(method, url.clone());
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        // What a web page on another origin cannot send without a
        // preflight: the API wants it (or a token) on every action.
        req = req.header(crate::api::REQUEST_HEADER, "1");
        if let Some(body) = body {
            req = req
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.to_string());
        }
        let res = req.send().await.map_err(|e| ClientError::Unreachable {
            url: url.to_string(),
            reason: chain(&e.without_url()),
        })?;
        let status = res.status();
        let bytes = res.bytes().await.map_err(|e| ClientError::Unreachable {
            url: url.to_string(),
            reason: chain(&e.without_url()),
        })?;
        if status.is_success() {
            return serde_json::from_slice::<Value>(&bytes).map_err(|e| ClientError::BadAnswer {
                url: url.to_string(),
                reason: format!("not JSON ({e})"),
            });
        }
        Err(error_answer(status, &bytes))
    }

    /// `GET /api/v1/events`: the open response, its status and content
    /// type checked; read its body with [`reqwest::Response::chunk`].
    ///
    /// Unlike the other calls it has no overall timeout, only one per
    /// read ([`STREAM_READ_TIMEOUT`]), which the API's keep-alive comments
    /// reset.
    pub async fn events(&self) -> Result<reqwest::Response, ClientError> {
        let url = self.url(&["events"]);
        // Its own client: one stream per call (and per reconnection), and
        // no overall timeout.
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(STREAM_READ_TIMEOUT)
            .build()
            .map_err(|e| ClientError::BadUrl {
                url: self.base.to_string(),
                reason: chain(&e),
            })?;
        let mut req = http
            .get(url.clone())
            .header(reqwest::header::ACCEPT, "text/event-stream");
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        let unreachable = |e: reqwest::Error| ClientError::Unreachable {
            url: url.to_string(),
            reason: chain(&e.without_url()),
        };
        let res = req.send().await.map_err(unreachable)?;
        let status = res.status();
        if !status.is_success() {
            let bytes = res.bytes().await.map_err(unreachable)?;
            return Err(error_answer(status, &bytes));
        }
        let kind = res
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !kind.starts_with("text/event-stream") {
            return Err(ClientError::BadAnswer {
                url: url.to_string(),
                reason: format!("not an event stream (content type `{kind}`)"),
            });
        }
        Ok(res)
    }
}

/// The error for a failed status: the control API's own JSON error when
/// the body is one, else the start of whatever the body says.
fn error_answer(status: StatusCode, bytes: &[u8]) -> ClientError {
    let error = serde_json::from_slice::<Value>(bytes).ok().and_then(|v| {
        let e = v.get("error")?;
        Some((
            e.get("code")?.as_str()?.to_owned(),
            e.get("message")?.as_str()?.to_owned(),
        ))
    });
    match error {
        Some((code, message)) => ClientError::Api {
            status,
            code: Some(code),
            message,
        },
        None => {
            let text = String::from_utf8_lossy(bytes);
            let message = if text.trim().is_empty() {
                "(empty body)".to_owned()
            } else {
                text.chars().take(200).collect()
            };
            ClientError::Api {
                status,
                code: None,
                message,
            }
        }
    }
}

/// An error and its causes on one line: reqwest's own message alone says
/// only "error sending request".
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}
