//! `[backends.update]`: how a new version of a backend is rolled out (see
//! `app::rollouts` and docs/updates.md). Without the table an edit of the
//! backend's image or command line replaces it outright; with it, such an
//! edit is an update: the new version must become ready before it serves,
//! and is rolled back when it does not.

use std::time::Duration;

use serde::Deserialize;

use super::Problems;

/// How one backend is updated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdatePolicy {
    pub strategy: Strategy,
    /// `ready_timeout`: the new version must be ready within this.
    pub ready_timeout: Duration,
    /// `drain`: how long calls begun on the old version may go on after
    /// the switch.
    pub drain: Duration,
    /// `require_tools`: tools the new version must list, by the backend's
    /// own names (before any `naming` prefix).
    pub require_tools: Vec<String>,
    pub on_catalog_change: OnCatalogChange,
    /// `bake`: after the switch the old version is kept this long; a crash
    /// of the new one meanwhile rolls back.
    pub bake: Duration,
}

impl Default for UpdatePolicy {
    fn default() -> Self {
        Self {
            strategy: Strategy::BlueGreen,
            ready_timeout: Duration::from_secs(60),
            drain: Duration::from_secs(30),
            require_tools: Vec::new(),
            on_catalog_change: OnCatalogChange::Allow,
            bake: Duration::from_secs(30),
        }
    }
}

/// `strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// `"blue-green"`: the new version starts beside the old, which serves
    /// until the switch.
    #[default]
    BlueGreen,
    /// `"recreate"`: the old version stops, then the new one starts; the
    /// backend is unavailable in between.
    Recreate,
}

impl Strategy {
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::BlueGreen => "blue-green",
            Strategy::Recreate => "recreate",
        }
    }
}

/// `on_catalog_change`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnCatalogChange {
    /// `"allow"`: the switch happens whatever the new version lists.
    #[default]
    Allow,
    /// `"hold"`: an update that removes a definition or changes one waits
    /// for an operator's approval.
    Hold,
}

/// `[backends.update]` as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpdate {
    pub strategy: Option<String>,
    pub ready_timeout: Option<String>,
    pub drain: Option<String>,
    #[serde(default)]
    pub require_tools: Vec<String>,
    pub on_catalog_change: Option<String>,
    pub bake: Option<String>,
}

impl Problems {
    /// `[backends.update]` of the backend at `at`.
    pub(super) fn update(&mut self, at: &str, raw: RawUpdate) -> UpdatePolicy {
        let key = format!("{at}.update");
        let d = UpdatePolicy::default();
        let strategy = match raw.strategy.as_deref() {
            None | Some("blue-green") => Strategy::BlueGreen,
            Some("recreate") => Strategy::Recreate,
            Some(other) => {
                self.add(
                    format!("{key}.strategy"),
                    format!("`{other}` is not a strategy: use \"blue-green\" (start the new version beside the old, the default) or \"recreate\" (stop the old, then start the new)"),
                );
                d.strategy
            }
        };
        let on_catalog_change = match raw.on_catalog_change.as_deref() {
            None | Some("allow") => OnCatalogChange::Allow,
            Some("hold") => OnCatalogChange::Hold,
            Some(other) => {
                self.add(
                    format!("{key}.on_catalog_change"),
                    format!("`{other}` is not a choice: use \"allow\" (switch whatever the new version lists) or \"hold\" (wait for an operator when a definition is removed or changed)"),
                );
                d.on_catalog_change
            }
        };
        let ready_timeout =
            self.duration(&format!("{key}.ready_timeout"), raw.ready_timeout, "60s");
        if ready_timeout.is_zero() {
            self.add(
                format!("{key}.ready_timeout"),
                "must be longer than zero, like ready_timeout = \"60s\"",
            );
        }
        for (i, t) in raw.require_tools.iter().enumerate() {
            if t.trim().is_empty() {
                self.add(
                    format!("{key}.require_tools[{i}]"),
                    "is empty: name a tool as the backend lists it, like \"search\"",
                );
            }
        }
        UpdatePolicy {
            strategy,
            ready_timeout,
            drain: self.duration(&format!("{key}.drain"), raw.drain, "30s"),
            require_tools: raw.require_tools,
            on_catalog_change,
            bake: self.duration(&format!("{key}.bake"), raw.bake, "30s"),
        }
    }

    /// Whether `policy` can update the backend `runtime` runs; a problem
    /// says why not.
    pub(super) fn update_fits(
        &mut self,
        at: &str,
        policy: &UpdatePolicy,
        runtime: &super::RuntimeKind,
    ) {
        use super::RuntimeKind;
        match runtime {
            RuntimeKind::Remote => self.add(
                format!("{at}.update"),
                "only applies to a backend Vigil runs (transport = \"stdio\", or runtime = \"container\"): a remote server is updated where it runs",
            ),
            RuntimeKind::Container(spec)
                if policy.strategy == Strategy::BlueGreen
                    && (spec.port.is_none() || spec.network.as_deref() == Some("host")) =>
            {
                self.add(
                    format!("{at}.update.strategy"),
                    "blue-green runs the new container beside the old one on another host port, so the backend needs `port` (published) and not network = \"host\"; publish the port, or use strategy = \"recreate\"",
                )
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_choices() {
        let mut p = Problems::default();
        let u = p.update("backends[0]", RawUpdate::default());
        assert_eq!(u, UpdatePolicy::default());
        let u = p.update(
            "backends[0]",
            RawUpdate {
                strategy: Some("recreate".into()),
                on_catalog_change: Some("hold".into()),
                bake: Some("2s".into()),
                require_tools: vec!["search".into()],
                ..Default::default()
            },
        );
        assert!(p.0.is_empty(), "{:?}", p.0);
        assert_eq!(
            (u.strategy, u.on_catalog_change, u.bake, u.require_tools),
            (
                Strategy::Recreate,
                OnCatalogChange::Hold,
                Duration::from_secs(2),
                vec!["search".to_owned()]
            )
        );
    }

    #[test]
    fn a_bad_choice_names_the_key_and_the_choices() {
        let mut p = Problems::default();
        p.update(
            "backends[1]",
            RawUpdate {
                strategy: Some("canary".into()),
                ready_timeout: Some("0s".into()),
                require_tools: vec![" ".into()],
                ..Default::default()
            },
        );
        let text = format!("{:?}", p.0);
        assert!(text.contains("backends[1].update.strategy"), "{text}");
        assert!(text.contains("or \\\"recreate\\\""), "{text}");
        assert!(text.contains("backends[1].update.ready_timeout"), "{text}");
        assert!(
            text.contains("backends[1].update.require_tools[0]"),
            "{text}"
        );
    }
}
