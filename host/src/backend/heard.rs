//! What a backend announces, in Vigil's log: its notifications at DEBUG,
//! payload cut to [`PAYLOAD_CHARS`], at most one line per [`EVERY`] per
//! connection with the count of those not shown.
//!
//! A backend may send notifications as fast as it writes (log messages,
//! progress, `list_changed` in a loop): one line each would let it write
//! Vigil's log full. What Vigil does about a notification (a re-listing, a
//! catalog change) has its own line at INFO; this is for whoever debugs
//! the backend. rmcp's own line per notification is held back by the
//! default filter (see `logging`).

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::ServerNotification;
use tokio::time::Instant;

use crate::log_limit::LogLimit;

/// Least time between two lines of one connection.
const EVERY: Duration = Duration::from_secs(1);
/// The longest payload quoted, in characters.
const PAYLOAD_CHARS: usize = 512;

/// The DEBUG log of one connection's notifications.
pub(super) struct Heard {
    backend: Arc<str>,
    limit: LogLimit,
}

// === impl Heard ===

impl Heard {
    pub(super) fn new(backend: Arc<str>) -> Self {
        Heard {
            backend,
            limit: LogLimit::new(EVERY),
        }
    }

    /// Logs `n` if DEBUG is on for this module and the last line is
    /// [`EVERY`] old; counts it otherwise.
    pub(super) fn notification(&mut self, n: &ServerNotification) {
        if !tracing::enabled!(tracing::Level::DEBUG) {
            return;
        }
        let Some(more) = self.limit.admit(Instant::now()) else {
            return;
        };
        let (method, payload) = describe(n);
        tracing::debug!(backend = %self.backend, method, more, payload, "notification from the backend");
    }
}

/// The method of `n` and its JSON, cut to [`PAYLOAD_CHARS`].
fn describe(n: &ServerNotification) -> (String, String) {
    let json = serde_json::to_value(n).unwrap_or_default();
    let method = json
        .get("method")
        .and_then(|m| m.as_str())
        .unwrap_or("?")
        .to_owned();
    let mut payload = json.to_string();
    if let Some((cut, _)) = payload.char_indices().nth(PAYLOAD_CHARS) {
        let dropped = payload.len() - cut;
        payload.truncate(cut);
        payload.push_str(&format!("… [{dropped} bytes dropped]"));
    }
    (method, payload)
}

#[cfg(test)]
mod tests {
    use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam, ServerNotification};

    use super::*;

    fn log_message(data: String) -> ServerNotification {
        ServerNotification::LoggingMessageNotification(rmcp::model::Notification::new(
            LoggingMessageNotificationParam::new(LoggingLevel::Info, data.into()),
        ))
    }

    #[test]
    fn a_payload_is_named_by_its_method_and_cut() {
        let (method, payload) = describe(&log_message("x".repeat(2000)));
        assert_eq!(method, "notifications/message");
        assert!(
            payload.starts_with(r#"{"method":"notifications/message""#),
            "{payload}"
        );
        assert!(payload.ends_with(" bytes dropped]"), "{payload}");
        assert!(
            payload.chars().count() < PAYLOAD_CHARS + 30,
            "{}",
            payload.len()
        );
        let (_, short) = describe(&log_message("hi".into()));
        assert!(!short.contains("dropped"), "{short}");
    }
}
