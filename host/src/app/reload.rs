//! Config reload: apply backend additions, removals and edits, and the
//! control API's tokens, from the config file without a restart. A bad
//! file is refused whole and the running config stays in force. Live
//! sessions learn of backend changes through the usual catalog path
//! (`docs/freshness.md`). Every other key that differs is named in the
//! summary as needing a restart. What differs is decided in
//! `config::diff`, without I/O; this module carries it out.

use std::sync::Arc;

use super::App;
use super::secrets::log_policies;
use crate::backend::BackendSet;
use crate::backend::BackendUpdate;
use crate::config::diff::{BackendDiff, Change, restart_only_changes};
use crate::config::{BackendConfig, Config, ConfigError};
use crate::health::HealthState;

/// What a reload changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReloadSummary {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
    /// Backends with `[backends.update]` whose new image or command line
    /// is being rolled out as an update.
    pub updated: Vec<String>,
    /// Keys outside the backend list that changed and are in force now
    /// (`api.tokens`, `auth.keys`, `audit`).
    pub applied: Vec<&'static str>,
    /// Keys that differ but take effect only after a restart.
    pub needs_restart: Vec<&'static str>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("config reload refused; the running config stays in force\n{0}")]
    Invalid(#[from] ConfigError),
    #[error("config reload refused: the gateway is not running")]
    NotRunning,
}

impl App {
    /// Reads the config file again and applies what changed in the backend
    /// list and in `[[api.tokens]]` (compared by name, secret and role: a
    /// rotated secret is refused from the next request on). Only one
    /// reload runs at a time.
    pub async fn reload(self: &Arc<Self>) -> Result<ReloadSummary, ReloadError> {
        let _one = self.reloading.lock().await;
        let path = self.config().file.clone();
        let mut next = tokio::task::spawn_blocking(move || Config::load(&path))
            .await
            .map_err(|_| ReloadError::NotRunning)??;
        self.rollouts.with_kept_images(&mut next.backends);
        let front = &self.front;
        let spawner = &self.spawner;
        let old = front.backends();
        let running: Vec<&BackendConfig> = old.iter().map(|b| &b.config).collect();
        let diff = BackendDiff::of(&running, &next.backends);
        let mut summary = ReloadSummary {
            needs_restart: restart_only_changes(&front.config, &next),
            ..Default::default()
        };
        // The new set, in the new file order; unchanged backends keep their
        // object (and supervisor, connections, health).
        let mut list = Vec::new();
        let mut fresh = Vec::new();
        let mut updates = Vec::new();
        for (cfg, change) in next.backends.iter().zip(&diff.entries) {
            match (change, old.get(&cfg.name)) {
                (Change::Kept, Some(b)) => list.push(b.clone()),
                // An update's own switch replaces it (`rollouts`).
                (Change::Updated, Some(b)) => {
                    list.push(b.clone());
                    updates.push(cfg.clone());
                }
                (_, Some(b)) if self.updating(&cfg.name) => {
                    tracing::warn!(backend = %cfg.name, "the backend is being updated: its config change is not applied; reload again once the update ended");
                    list.push(b.clone());
                }
                (change, _) => {
                    let b = front.new_backend(cfg);
                    match change {
                        Change::Changed => summary.changed.push(cfg.name.clone()),
                        _ => summary.added.push(cfg.name.clone()),
                    }
                    list.push(b.clone());
                    fresh.push(b);
                }
            }
        }
        summary.removed = diff.removed;
        let next_set = BackendSet::new(list);
        let gone: Vec<_> = old
            .iter()
            .filter(|b| next_set.get(&b.name).is_none_or(|n| n.uid != b.uid))
            .cloned()
            .collect();
        front.generations().publish_backends(next_set);
        if self.api_tokens.replace(next.api.tokens.clone()) {
            if next.api.tokens.is_empty() {
                // Config validation allows this on a loopback listener only.
                tracing::warn!(
                    "control API tokens removed: every caller on loopback now acts as operator `local`"
                );
            } else {
                tracing::info!(
                    tokens = next.api.tokens.len(),
                    "control API tokens replaced"
                );
            }
            summary.applied.push("api.tokens");
        }
        if front.mcp_keys().replace(next.auth.keys.clone()) {
            if next.auth.keys.is_empty() {
                // Config validation allows this on a loopback listener only.
                tracing::warn!("[[auth.keys]] removed: /mcp now serves every caller as `local`");
            } else {
                tracing::info!(keys = next.auth.keys.len(), "[[auth.keys]] replaced");
            }
            summary.applied.push("auth.keys");
        }
        if let Some(policies) = front.generation().policies.next(next.policies.clone()) {
            front.generations().publish_policies(policies);
            log_policies(&front.config, &next.policies);
            // Each session compares its new view with what it saw: only
            // those whose view changed hear of it.
            front.resync_all();
            summary.applied.push("policy");
        }
        if *front.tool_search().settings() != next.tool_search {
            front.tool_search().set_settings(next.tool_search.clone());
            tracing::info!(
                mode = next.tool_search.mode.as_str(),
                "[tool_search] applied"
            );
            // What sessions list may have changed (their mode, the
            // listed tools).
            front.resync_all();
            summary.applied.push("tool_search");
        }
        if front.audit().configure(next.audit.clone()) {
            tracing::info!(arguments = next.audit.arguments, keep = %humantime::format_duration(next.audit.keep), "[audit] applied");
            summary.applied.push("audit");
        }
        self.refresh_secrets(&gone);
        for b in gone {
            spawner.stop(&b);
            // Before the replacement's first update: forget what it listed.
            let _ = spawner.outlets.feed.update(BackendUpdate {
                backend: b.name.clone(),
                uid: b.uid,
                removed: true,
                state: HealthState::Offline,
                catalog: None,
            });
        }
        for b in fresh {
            spawner.spawn(&b, self.supervisor_for(&b, &[]));
        }
        drop(_one);
        for cfg in updates {
            let name = cfg.name.clone();
            match self
                .start_update(
                    &name,
                    super::rollouts::Target::Config(Box::new(cfg)),
                    super::rollouts::RELOAD,
                )
                .await
            {
                Ok(_) => summary.updated.push(name),
                Err(e) => {
                    tracing::error!(backend = %name, error = %e, "the config change of the backend could not be rolled out as an update");
                }
            }
        }
        Ok(summary)
    }
}
