//! Errors of backend connections, each naming the backend.

use std::sync::Arc;
use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::model::ErrorCode;

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("backend '{backend}': cannot start `{command}`: {source}")]
    Spawn {
        backend: Arc<str>,
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("backend '{backend}': MCP handshake failed: {reason}{}", stderr_suffix(.stderr))]
    Handshake {
        backend: Arc<str>,
        reason: String,
        stderr: Vec<String>,
    },
    /// Nothing accepted the connection (e.g. a container whose server has
    /// not bound its port yet).
    #[error("backend '{backend}': connection refused: {reason}")]
    Refused { backend: Arc<str>, reason: String },
    /// The backend answered a request with an HTTP error status (told by
    /// the HTTP client's typed error, never its text).
    #[error("backend '{backend}' answered HTTP {status}: {reason}")]
    Status {
        backend: Arc<str>,
        status: http::StatusCode,
        reason: String,
    },
    #[error("backend '{backend}': connection failed: {reason}{}", stderr_suffix(.stderr))]
    Transport {
        backend: Arc<str>,
        reason: String,
        stderr: Vec<String>,
    },
    #[error("backend '{backend}' did not answer within {}", humantime::format_duration(*.timeout))]
    Timeout {
        backend: Arc<str>,
        timeout: Duration,
    },
    /// A listing of the backend's capabilities was cut short: no answer
    /// in time, or more than `[limits]` allows.
    #[error("backend '{backend}': {method}: {reason}")]
    Listing {
        backend: Arc<str>,
        method: &'static str,
        reason: String,
    },
    /// The credentials a `forward_auth` backend needs could not be had
    /// (the token exchange at the issuer failed).
    #[error("backend '{backend}': no credentials for it: {reason}")]
    Credentials { backend: Arc<str>, reason: String },
    #[error("backend '{backend}': request cancelled by the client")]
    Cancelled { backend: Arc<str> },
    /// The backend's answer is larger than Vigil relays
    /// (`limits.max_result_bytes`); it was not read into memory.
    /// `bytes`: as many as were read before Vigil stopped reading (the raw
    /// path stops at the limit; the typed path reads the line).
    #[error(
        "backend '{backend}' answered {method} with more than limits.max_result_bytes ({limit} bytes) allows ({bytes} bytes read): ask for less (a smaller range or page), or raise the limit"
    )]
    TooLarge {
        backend: Arc<str>,
        method: String,
        bytes: usize,
        limit: usize,
    },
    /// A client needs an instance of its own (`share`) and as many as
    /// `limits.max_instances` allows are live.
    #[error(
        "backend '{backend}' runs a process per client (share = \"{share}\") and {limit} instances are live, the most limits.max_instances allows: close sessions that are done with it, or raise limits.max_instances"
    )]
    TooManyInstances {
        backend: Arc<str>,
        share: &'static str,
        limit: usize,
    },
    /// The backend answered with a JSON-RPC error; passed through as is.
    #[error("{}", .0.message)]
    Mcp(McpError),
}

/// What failed in one HTTP exchange with a backend, by kind: callers
/// match on the variant (a refused connection, the HTTP status of the
/// answer, a broken body), never on the message.
#[derive(Debug, thiserror::Error)]
pub enum HttpFailure {
    /// The shared HTTP client could not be built (e.g. out of file
    /// descriptors while loading root certificates); the next try builds
    /// again.
    #[error("cannot build the HTTP client: {0}")]
    NoClient(#[source] reqwest::Error),
    /// Nothing accepted the TCP connection.
    #[error("connection refused: {0}")]
    Refused(#[source] reqwest::Error),
    /// The connection could not be made for another reason (DNS, TLS, ...).
    #[error("cannot connect: {0}")]
    Connect(#[source] reqwest::Error),
    /// The request failed after the connection was made.
    #[error("the request failed: {0}")]
    Request(#[source] reqwest::Error),
    /// The backend answered with a status the exchange cannot use.
    #[error("HTTP {0}")]
    Status(http::StatusCode),
    /// The answer's body broke off.
    #[error("the answer broke off: {0}")]
    Body(#[source] reqwest::Error),
    /// The answer passed the bound the exchange reads; `read`: the bytes
    /// it had when it stopped (or the length the backend announced).
    #[error("the answer is larger than {limit} bytes")]
    TooLarge { limit: usize, read: usize },
    /// The answer arrived but is not what the protocol says (no response
    /// to the request, an unreadable event stream, ...).
    #[error("{0}")]
    Protocol(String),
}

impl HttpFailure {
    /// Classifies a failed send (connect, or request after it).
    pub fn of_send(e: reqwest::Error) -> Self {
        if is_refused(&e) {
            HttpFailure::Refused(e)
        } else if e.is_connect() {
            HttpFailure::Connect(e)
        } else {
            HttpFailure::Request(e)
        }
    }

    /// Whether the request cannot have reached the backend's MCP handler
    /// (so sending it again another way cannot run it twice).
    pub fn before_delivery(&self) -> bool {
        matches!(
            self,
            HttpFailure::NoClient(_) | HttpFailure::Refused(_) | HttpFailure::Connect(_)
        )
    }
}

/// Whether `e` or one of its sources is a refused TCP connection. Walks
/// the typed source chain (reqwest keeps the `io::Error`); errors that
/// lost their chain (rmcp's) are classified where the reqwest error is
/// still at hand (see `stream_watch`).
pub fn is_refused(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if err
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        cur = err.source();
    }
    false
}

/// An rmcp error message without the Rust type names it embeds
/// (`Transport [vigil::backend::tap::Tapped<...>]`): operators read these.
pub fn plain(message: impl std::fmt::Display) -> String {
    let text = message.to_string();
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find(']').map(|c| open + c) else {
            break;
        };
        out.push_str(&rest[..open]);
        let inner = &rest[open + 1..close];
        if !inner.contains("::") {
            out.push_str(&rest[open..=close]);
        }
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn stderr_suffix(lines: &[String]) -> String {
    match lines.last() {
        Some(last) => format!(" (last stderr line: {last})"),
        None => String::new(),
    }
}

impl BackendError {
    /// Whether its message already quotes the backend's last stderr line
    /// (so a reason built from it needs no second quote).
    pub fn quotes_stderr(&self) -> bool {
        match self {
            BackendError::Handshake { stderr, .. } | BackendError::Transport { stderr, .. } => {
                !stderr.is_empty()
            }
            _ => false,
        }
    }

    /// Whether the connection is unusable after this error.
    pub fn is_connection_lost(&self) -> bool {
        matches!(
            self,
            BackendError::Transport { .. }
                | BackendError::Refused { .. }
                | BackendError::Status { .. }
        )
    }

    /// The JSON-RPC error a client sees.
    pub fn into_mcp(self) -> McpError {
        match self {
            BackendError::Mcp(e) => e,
            BackendError::Timeout { .. } => {
                McpError::new(ErrorCode::INTERNAL_ERROR, self.to_string(), None)
            }
            other => McpError::new(ErrorCode::INTERNAL_ERROR, other.to_string(), None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{HttpFailure, plain};

    #[tokio::test]
    async fn a_refused_connection_is_told_by_its_kind() {
        // A port nothing listens on: bound, then closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let e = reqwest::Client::new()
            .post(format!("http://127.0.0.1:{port}/mcp"))
            .send()
            .await
            .unwrap_err();
        let failure = HttpFailure::of_send(e);
        assert!(matches!(failure, HttpFailure::Refused(_)), "{failure:?}");
        assert!(failure.before_delivery());
    }

    #[test]
    fn type_names_are_dropped_from_messages() {
        assert_eq!(
            plain(
                "Send message error Transport [vigil::backend::tap::Tapped<rmcp::X<Y>>] error: closed, when send initialize request"
            ),
            "Send message error Transport error: closed, when send initialize request"
        );
        assert_eq!(plain("keeps [plain brackets]"), "keeps [plain brackets]");
    }
}
