//! The control API: JSON over HTTP on its own listener (`[api] listen`),
//! never in the MCP hot path. Operators read health and act on backends;
//! every mutating call is audited with its principal. Web pages cannot
//! drive it (`guard.rs`: `Host`, `Origin` and a request header), and
//! guessing tokens earns a cool-down (`crate::auth::throttle`).
//!
//! The API reads and acts through [`Control`], implemented by the health
//! monitor; it writes audit entries to the store's
//! [`ActionLog`](crate::store::ActionLog).

mod auth;
mod calls;
mod error;
pub mod events;
mod guard;
mod metrics;
mod router;
#[cfg(test)]
mod stream_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
pub(crate) mod testutil;
mod ui;

use std::time::SystemTime;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

pub use auth::{LOCAL, Principal, Tokens};
pub use error::ApiError;
pub use guard::REQUEST_HEADER;
pub use router::{ApiState, router, serve, serve_on};

use crate::health::{HealthState, Transition};

/// What the API shows of one backend.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InstanceReport {
    /// The configured backend name (or, for an instance run for one
    /// client, `NAME.sN` / `NAME.pN`): an id API paths take.
    pub name: String,
    /// This instance's own id (`NAME.iN`, `Backend::instance_id`): API
    /// paths take it too, and it names this instance only.
    pub instance: String,
    pub state: HealthState,
    /// `process`, `container` or `remote`.
    pub runtime: &'static str,
    /// Since when the backend is in `state`.
    #[serde(with = "crate::health::unix_ms")]
    pub since: SystemTime,
    /// Round trip of the last successful probe, in milliseconds.
    pub latency_ms: Option<f64>,
    /// Share of failed `tools/call`s in the sliding window (0..1).
    pub error_rate: Option<f64>,
    /// Calls in the sliding window.
    pub calls_in_window: u64,
    /// Restarts since first seen.
    pub restart_count: u64,
    /// Consecutive failed starts (towards `max_restarts`).
    pub consecutive_failures: u32,
    /// When the next restart attempt is due, if one is scheduled.
    #[serde(with = "opt_unix_ms")]
    pub next_retry_at: Option<SystemTime>,
    /// Why it is quarantined, when it is.
    pub quarantine_reason: Option<String>,
    /// The last reason given for a state change (sanitized).
    pub reason: String,
    /// Definitions the pin guard withholds until an operator approves
    /// them (`GET …/pins` lists them); absent when none is.
    #[serde(skip_serializing_if = "is_zero")]
    pub withheld: usize,
    /// The update in progress (`GET …/update` has the whole of it);
    /// absent when none is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub update: Option<UpdateBrief>,
}

/// Which update of a backend is in progress, and how far it got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UpdateBrief {
    pub id: String,
    pub state: crate::rollout::Phase,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One backend in full: its report, recent transitions and last exit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InstanceDetail {
    #[serde(flatten)]
    pub report: InstanceReport,
    /// Oldest first, at most the last 100.
    pub transitions: Vec<Transition>,
    /// How the last instance ended ("killed by signal 9 (SIGKILL)", ...).
    pub last_exit: Option<String>,
}

/// The pin guard of one backend (`[backends.pin]`): its settings, what
/// it holds back now, and, after an approval, what was approved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PinsReport {
    pub backend: String,
    /// `"allow"` or `"hold"`.
    pub on_change: &'static str,
    /// `"trust"` or `"hold"`.
    pub first_seen: &'static str,
    /// Each withheld definition with its digest (what an approval names),
    /// the approved digest it differs from (`null`: new), and the
    /// definition as the backend lists it now.
    pub held: Vec<crate::catalog::pin::Held>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub approved: Vec<crate::catalog::pin::Approved>,
}

/// `GET /api/v1/search`: what `find_tool` would answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    pub query: String,
    /// Whose view: `local`, `key:NAME` or `sub:SUBJECT`; none: every tool
    /// of every serving backend.
    pub principal: Option<String>,
    /// With a `sub:` principal: the issuer that vouched for it.
    pub issuer: Option<String>,
    /// With a `sub:` principal: its groups, comma-separated.
    pub groups: Option<String>,
    pub limit: Option<usize>,
    pub server: Option<String>,
}

/// What [`SearchRequest`] found, with each result's score.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchReport {
    pub principal: Option<String>,
    /// The principal's mode (`passthrough`, `search`, `always_listed`).
    pub mode: &'static str,
    pub generation: u64,
    /// Tools in the index (every backend's last listing).
    pub indexed: usize,
    pub results: Vec<SearchResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// One result of [`SearchReport`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchResult {
    pub name: String,
    pub server: String,
    pub score: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// Why a control action was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    #[error("no backend named '{0}'")]
    NotFound(String),
    /// The action does not apply in the current state (e.g. releasing a
    /// backend that is not quarantined, restarting a remote backend).
    #[error("{0}")]
    Conflict(String),
    /// The request does not fit the target (an image for a process
    /// backend): the message says what would.
    #[error("{0}")]
    Invalid(String),
    #[error("internal error: {0}")]
    Internal(String),
}

/// What the API may read and do. `principal` is the acting token's name.
pub trait Control: Send + Sync + 'static {
    fn instances(&self) -> Vec<InstanceReport>;
    /// What an operator should know about how the instances are served
    /// (say, clients sharing a backend session without `[auth]`).
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }
    /// The plugin directory (`None`: plugins are off) and its plugins.
    fn plugins(&self) -> (Option<String>, Vec<crate::plugins::PluginInfo>) {
        (None, Vec::new())
    }
    fn instance(&self, name: &str) -> BoxFuture<'_, Result<InstanceDetail, ControlError>>;
    /// One backend's report (`None`: no such backend). Cheaper than
    /// filtering [`instances`](Control::instances) per event.
    fn report(&self, name: &str) -> Option<InstanceReport> {
        self.instances().into_iter().find(|r| r.name == name)
    }
    /// Every health transition from now on (`None`: no event source).
    fn subscribe(&self) -> Option<tokio::sync::broadcast::Receiver<Transition>> {
        None
    }
    /// Live client sessions (`None`: not known).
    fn sessions(&self) -> Option<usize> {
        None
    }
    /// Restarts now (resets the failure count; leaves no quarantine behind).
    fn restart(
        &self,
        name: &str,
        principal: &str,
    ) -> BoxFuture<'_, Result<InstanceReport, ControlError>>;
    /// Quarantines now: stops the instance, no automatic restarts.
    fn quarantine(
        &self,
        name: &str,
        principal: &str,
        reason: Option<String>,
    ) -> BoxFuture<'_, Result<InstanceReport, ControlError>>;
    /// Leaves quarantine → `restarting`.
    fn release(
        &self,
        name: &str,
        principal: &str,
    ) -> BoxFuture<'_, Result<InstanceReport, ControlError>>;
    /// What the pin guard holds back of backend `name`.
    fn pins(&self, name: &str) -> Result<PinsReport, ControlError> {
        Err(ControlError::NotFound(name.to_owned()))
    }
    /// Starts an update of backend `name` to `image` (a container
    /// backend); answers as it starts.
    fn update(
        &self,
        name: &str,
        principal: &str,
        image: String,
    ) -> BoxFuture<'_, Result<crate::rollout::UpdateRecord, ControlError>> {
        let _ = (principal, image);
        let name = name.to_owned();
        Box::pin(async move { Err(ControlError::NotFound(name)) })
    }
    /// Approves (`approve`) or aborts the update of `name` in progress.
    fn decide_update(
        &self,
        name: &str,
        principal: &str,
        approve: bool,
    ) -> BoxFuture<'_, Result<crate::rollout::UpdateRecord, ControlError>> {
        let _ = (principal, approve);
        let name = name.to_owned();
        Box::pin(async move { Err(ControlError::NotFound(name)) })
    }
    /// What `find_tool` would answer `request` (operators tuning
    /// descriptions).
    fn search(&self, request: SearchRequest) -> BoxFuture<'_, Result<SearchReport, ControlError>> {
        let _ = request;
        Box::pin(async { Err(ControlError::Invalid("no tool search here".into())) })
    }
    /// The update of `name` in progress, else its last one.
    fn last_update(
        &self,
        name: &str,
    ) -> BoxFuture<'_, Result<Option<crate::rollout::UpdateRecord>, ControlError>> {
        let name = name.to_owned();
        Box::pin(async move { Err(ControlError::NotFound(name)) })
    }
    /// Approves the held definitions of `name` whose digests are
    /// `digests` (all, or none if one is not held now); answers once the
    /// catalog serves them.
    fn approve(
        &self,
        name: &str,
        principal: &str,
        digests: Vec<crate::catalog::digest::Digest>,
    ) -> BoxFuture<'_, Result<PinsReport, ControlError>> {
        let _ = (principal, digests);
        let name = name.to_owned();
        Box::pin(async move { Err(ControlError::NotFound(name)) })
    }
}

/// `Option<SystemTime>` as Unix milliseconds or null.
pub mod opt_unix_ms {
    use std::time::SystemTime;

    use serde::Serializer;

    pub fn serialize<S: Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_i64(crate::health::unix_ms::to_ms(*t)),
            None => s.serialize_none(),
        }
    }
}
