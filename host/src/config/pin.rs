//! `[pin]` and `[backends.pin]`: the guard against definitions that change
//! under the operator's feet (a tool's description rewritten, a tool
//! slipped in). With `on_change = "hold"`, a backend's tools, prompts and
//! resource templates are served only as an operator approved them (see
//! `catalog::pin`).

use serde::Deserialize;

use super::Problems;

/// What the guard does for one backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PinConfig {
    /// `on_change`: `"allow"` (the default: every listing served as it
    /// comes) or `"hold"`.
    pub on_change: OnChange,
    /// `first_seen`: how a held backend's definitions are treated before
    /// any was approved: `"trust"` (the default: its first listing is
    /// approved as it comes, trust on first use) or `"hold"` (everything
    /// waits for an operator).
    pub first_seen: FirstSeen,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnChange {
    #[default]
    Allow,
    Hold,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FirstSeen {
    #[default]
    Trust,
    Hold,
}

impl PinConfig {
    /// Whether the guard holds anything back for this backend.
    pub fn holds(&self) -> bool {
        self.on_change == OnChange::Hold
    }
}

/// `[pin]` / `[backends.pin]` as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPin {
    pub on_change: Option<String>,
    pub first_seen: Option<String>,
}

impl Problems {
    /// `raw` over `base` (a backend's table over the gateway's).
    pub(super) fn pin(&mut self, key: &str, base: &PinConfig, raw: Option<RawPin>) -> PinConfig {
        let Some(raw) = raw else { return *base };
        let mut pin = *base;
        match raw.on_change.as_deref() {
            None => {}
            Some("allow") => pin.on_change = OnChange::Allow,
            Some("hold") => pin.on_change = OnChange::Hold,
            Some(other) => self.add(
                format!("{key}.on_change"),
                format!("`{other}` is not a choice: use \"allow\" (serve every listing as it comes) or \"hold\" (withhold changed and new definitions until an operator approves them)"),
            ),
        }
        match raw.first_seen.as_deref() {
            None => {}
            Some("trust") => pin.first_seen = FirstSeen::Trust,
            Some("hold") => pin.first_seen = FirstSeen::Hold,
            Some(other) => self.add(
                format!("{key}.first_seen"),
                format!("`{other}` is not a choice: use \"trust\" (approve a backend's first listing as it comes) or \"hold\" (withhold it until an operator approves it)"),
            ),
        }
        if raw.first_seen.is_some() && !pin.holds() {
            self.add(
                format!("{key}.first_seen"),
                "only applies with on_change = \"hold\"",
            );
        }
        pin
    }
}
