//! Rollouts: what decides an update of a backend, without I/O. The
//! orchestration (start the new version, judge it, switch, drain, bake,
//! roll back) is `app::rollouts`; these are its rules:
//!
//! - [`diff`]: what the new version lists that the old one did not, or no
//!   longer, or differently (by each definition's canonical digest);
//! - [`Rejected`]: every reason an update is rolled back, one type;
//! - [`verdict`]: whether a ready new version may serve now, must wait
//!   for an operator, or is rejected.

pub mod diff;
pub mod record;

use std::time::Duration;

pub use diff::CatalogDiff;
pub use record::{Phase, Spec, UpdateRecord};

use crate::catalog::BackendCatalog;
use crate::config::{OnCatalogChange, UpdatePolicy};

/// Why an update did not go through: the old version serves (again).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    /// The new version did not come up (start, handshake or first
    /// listing failed).
    #[error("the new version failed to start: {0}")]
    StartFailed(String),
    /// Not ready (started, listed, probes passed) within `ready_timeout`.
    #[error("the new version was not ready within {}", humantime::format_duration(*.0))]
    NotReady(Duration),
    /// A readiness probe (built-in or plugin) kept failing.
    #[error("the new version failed its readiness probe: {0}")]
    ProbeFailed(String),
    /// It does not list every tool `require_tools` names.
    #[error("the new version does not list the required tool{} {}", if .0.len() == 1 { "" } else { "s" }, .0.iter().map(|t| format!("`{t}`")).collect::<Vec<_>>().join(", "))]
    MissingTools(Vec<String>),
    /// It ended before the update finished (before the switch, or within
    /// `bake` after it).
    #[error("the new version {0}")]
    Crashed(String),
    /// An operator aborted it.
    #[error("aborted by {0}")]
    Aborted(String),
    /// Vigil stopped (or was killed) during the update; the old version
    /// serves after the restart.
    #[error("Vigil stopped during the update; the version from before it serves")]
    Interrupted,
}

/// What to do with a new version that is ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Switch to it now.
    Promote,
    /// Wait for an operator: the diff removes or changes definitions and
    /// the backend holds such updates.
    Hold,
    Reject(Rejected),
}

/// The rule for a ready new version listing `catalog`, which differs from
/// the old one's by `diff` (`None`: the old listing is unknown, say the
/// old version was down).
pub fn verdict(
    policy: &UpdatePolicy,
    catalog: &BackendCatalog,
    diff: Option<&CatalogDiff>,
) -> Verdict {
    let missing: Vec<String> = policy
        .require_tools
        .iter()
        .filter(|t| !catalog.tools.iter().any(|l| l.key() == t.as_str()))
        .cloned()
        .collect();
    if !missing.is_empty() {
        return Verdict::Reject(Rejected::MissingTools(missing));
    }
    match (policy.on_catalog_change, diff) {
        (OnCatalogChange::Hold, Some(d)) if d.removes_or_changes() => Verdict::Hold,
        _ => Verdict::Promote,
    }
}

#[cfg(test)]
mod tests;
