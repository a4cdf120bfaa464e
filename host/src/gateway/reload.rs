//! Config reload: apply backend additions, removals and edits from the
//! config file without a restart. A bad file is refused whole and the
//! running config stays in force. Live sessions learn of the change through
//! the usual catalog path (`docs/freshness.md`).

use std::sync::Arc;

use super::Gateway;
use super::backends::BackendSet;
use crate::backend::BackendUpdate;
use crate::config::{Config, ConfigError};
use crate::health::HealthState;

/// What a reload changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReloadSummary {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
    /// Top-level keys that differ but take effect only after a restart.
    pub needs_restart: Vec<&'static str>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("config reload refused; the running config stays in force\n{0}")]
    Invalid(#[from] ConfigError),
    #[error("config reload refused: the gateway is not running")]
    NotRunning,
}

impl Gateway {
    /// Reads the config file again and applies what changed in the backend
    /// list. Only one reload runs at a time.
    pub async fn reload(self: &Arc<Self>) -> Result<ReloadSummary, ReloadError> {
        let _one = self.reloading.lock().await;
        let path = self.config.file.clone();
        let next = tokio::task::spawn_blocking(move || Config::load(&path))
            .await
            .map_err(|_| ReloadError::NotRunning)??;
        let Some(spawner) = self.spawner.get() else {
            return Err(ReloadError::NotRunning);
        };
        let old = self.backends();
        let mut summary = ReloadSummary {
            needs_restart: restart_only_changes(&self.config, &next),
            ..Default::default()
        };
        // The new set, in the new file order; unchanged backends keep their
        // object (and supervisor, connections, health).
        let mut list = Vec::new();
        let mut fresh = Vec::new();
        for cfg in &next.backends {
            match old.get(&cfg.name) {
                Some(b) if b.config == *cfg => list.push(b.clone()),
                existing => {
                    let b = self.new_backend(cfg);
                    if existing.is_some() {
                        summary.changed.push(cfg.name.clone());
                    } else {
                        summary.added.push(cfg.name.clone());
                    }
                    list.push(b.clone());
                    fresh.push(b);
                }
            }
        }
        let next_set = BackendSet::new(list);
        let gone: Vec<_> = old
            .iter()
            .filter(|b| next_set.get(&b.name).is_none_or(|n| n.uid != b.uid))
            .cloned()
            .collect();
        for b in &gone {
            if next_set.get(&b.name).is_none() {
                summary.removed.push(b.name.to_string());
            }
        }
        self.install(next_set);
        self.refresh_secrets(&gone);
        for b in gone {
            if let Ok(mut stops) = spawner.stops.lock()
                && let Some(stop) = stops.remove(&b.uid)
            {
                stop.cancel();
            }
            // Before the replacement's first update: forget what it listed.
            let _ = spawner.outlets.updates.send(BackendUpdate {
                backend: b.name.clone(),
                uid: b.uid,
                removed: true,
                state: HealthState::Offline,
                catalog: None,
            });
        }
        let sanitizer = self.sanitizer();
        for b in fresh {
            let supervisor =
                self.supervisor_for(&b, None, spawner.outlets.clone(), sanitizer.clone());
            self.spawn_supervisor(&b, supervisor);
        }
        Ok(summary)
    }
}

/// Top-level settings a running gateway does not change.
fn restart_only_changes(running: &Config, next: &Config) -> Vec<&'static str> {
    let mut keys = Vec::new();
    let mut check = |key, differs: bool| {
        if differs {
            keys.push(key);
        }
    };
    check("listen", running.listen != next.listen);
    check("naming", running.naming != next.naming);
    check("log_level", running.log_level != next.log_level);
    check(
        "request_timeout",
        running.request_timeout != next.request_timeout,
    );
    check(
        "connect_timeout",
        running.connect_timeout != next.connect_timeout,
    );
    check(
        "max_body_bytes",
        running.max_body_bytes != next.max_body_bytes,
    );
    check("page_size", running.page_size != next.page_size);
    check("allowed_hosts", running.allowed_hosts != next.allowed_hosts);
    check(
        "allowed_origins",
        running.allowed_origins != next.allowed_origins,
    );
    check("data_dir", running.data_dir != next.data_dir);
    check(
        "api",
        running.api.listen != next.api.listen || running.api.tokens.len() != next.api.tokens.len(),
    );
    check("freshness", running.freshness != next.freshness);
    check("poller", running.poller != next.poller);
    check("plugins", running.plugins != next.plugins);
    check("telemetry", running.telemetry != next.telemetry);
    keys
}
