//! MCP logging for one session: the level the client chose with
//! `logging/setLevel`, and sending `notifications/message` that pass it.

// Logging is deprecated by SEP-2577 in rmcp, but the 2025-11-25 protocol the
// conformance suite speaks still has it.
#![allow(deprecated)]

use std::sync::{
    Arc,
    atomic::{AtomicU8, Ordering},
};

use rmcp::{
    Peer, RoleServer,
    model::{LoggingLevel, LoggingMessageNotificationParam},
    service::RequestContext,
};
use serde_json::Value;

use crate::{era::modern, fixtures::LOGGER};

/// Severity rank of a level, lowest (`debug`) first, as RFC 5424 orders them.
fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// The minimum level a session's client wants to receive. Until the client
/// sets one, everything is sent.
#[derive(Clone, Debug, Default)]
pub struct LogThreshold(Arc<AtomicU8>);

impl LogThreshold {
    pub fn set(&self, level: LoggingLevel) {
        self.0.store(rank(level), Ordering::Relaxed);
    }

    pub fn admits(&self, level: LoggingLevel) -> bool {
        rank(level) >= self.0.load(Ordering::Relaxed)
    }

    /// Send one log message to the client if the threshold admits it.
    /// A client that has gone away is not an error worth reporting.
    pub async fn log(&self, peer: &Peer<RoleServer>, level: LoggingLevel, data: impl Into<Value>) {
        if !self.admits(level) {
            return;
        }
        let mut param = LoggingMessageNotificationParam::new(level, data.into());
        param.logger = Some(LOGGER.to_owned());
        if let Err(error) = peer.notify_logging_message(param).await {
            tracing::debug!(%error, "could not send a log message");
        }
    }
}

/// The threshold that applies to one request: the session's (set by
/// `logging/setLevel`) in the handshake era; in 2026-07-28 the level the
/// request itself carries in `_meta`, and without one no log messages at all.
pub fn for_request(
    session: &LogThreshold,
    context: &RequestContext<RoleServer>,
) -> Option<LogThreshold> {
    if !modern(context) {
        return Some(session.clone());
    }
    let level = context.meta.log_level()?;
    let threshold = LogThreshold::default();
    threshold.set(level);
    Some(threshold)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn everything_passes_until_a_level_is_set() {
        let threshold = LogThreshold::default();
        assert!(threshold.admits(LoggingLevel::Debug));
        threshold.set(LoggingLevel::Warning);
        assert!(!threshold.admits(LoggingLevel::Info));
        assert!(threshold.admits(LoggingLevel::Warning));
        assert!(threshold.admits(LoggingLevel::Emergency));
    }
}
