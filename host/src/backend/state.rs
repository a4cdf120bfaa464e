//! A backend's connection state and the one rule that says whether its
//! capabilities are shown to clients.

use std::time::SystemTime;

/// Where a backend's shared connection stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendState {
    /// Starting the process or opening the connection, handshake pending.
    Connecting,
    /// Handshake done; capabilities listed.
    Connected,
    /// Not reachable; `reason` is safe to show a client.
    Down { reason: String, since: SystemTime },
}

impl BackendState {
    pub fn name(&self) -> &'static str {
        match self {
            BackendState::Connecting => "connecting",
            BackendState::Connected => "connected",
            BackendState::Down { .. } => "down",
        }
    }
}

/// Whether a backend in `state` has its tools, resources and prompts shown to
/// clients and receives routed requests. The router, the catalog and the
/// change notifier all call this; none keeps its own copy of the rule.
pub fn advertisable(state: &BackendState) -> bool {
    matches!(state, BackendState::Connected)
}
