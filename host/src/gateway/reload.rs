//! Config reload: apply backend additions, removals and edits, and the
//! control API's tokens, from the config file without a restart. A bad
//! file is refused whole and the running config stays in force. Live
//! sessions learn of backend changes through the usual catalog path
//! (`docs/freshness.md`). Every other key that differs is named in the
//! summary as needing a restart ([`restart_only_changes`]).

use std::sync::Arc;

use super::Gateway;
use super::backends::BackendSet;
use crate::backend::BackendUpdate;
use crate::config::{ApiConfig, Config, ConfigError};
use crate::health::HealthState;

/// What a reload changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReloadSummary {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
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

impl Gateway {
    /// Reads the config file again and applies what changed in the backend
    /// list and in `[[api.tokens]]` (compared by name, secret and role: a
    /// rotated secret is refused from the next request on). Only one
    /// reload runs at a time.
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
        if self.mcp_keys.replace(next.auth.keys.clone()) {
            if next.auth.keys.is_empty() {
                // Config validation allows this on a loopback listener only.
                tracing::warn!("[[auth.keys]] removed: /mcp now serves every caller as `local`");
            } else {
                tracing::info!(keys = next.auth.keys.len(), "[[auth.keys]] replaced");
            }
            summary.applied.push("auth.keys");
        }
        if self.policies.replace(next.policies.clone()) {
            self.log_policies(&next.policies);
            // Each session compares its new view with what it saw: only
            // those whose view changed hear of it.
            self.sessions().resync_all();
            summary.applied.push("policy");
        }
        if self.audit.configure(next.audit.clone()) {
            tracing::info!(arguments = next.audit.arguments, keep = %humantime::format_duration(next.audit.keep), "[audit] applied");
            summary.applied.push("audit");
        }
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

/// The keys of `next` that differ from `running` and that a running
/// gateway does not change: they take effect after a restart.
///
/// `next` is taken apart whole, so a new config key does not compile until
/// it is sorted here: applied by the reload, or compared.
fn restart_only_changes(running: &Config, next: &Config) -> Vec<&'static str> {
    let Config {
        file: _,
        listen,
        naming,
        log_level,
        log_json,
        request_timeout,
        connect_timeout,
        startup_timeout,
        max_body_bytes,
        page_size,
        allowed_hosts,
        allowed_origins,
        data_dir,
        // Merged into every backend's config: applied with the backends.
        health: _,
        restart: _,
        api:
            ApiConfig {
                listen: api_listen,
                // Applied by the reload.
                tokens: _,
                allowed_hosts: api_hosts,
                allowed_origins: api_origins,
                failed_tokens,
                roles: api_roles,
            },
        freshness,
        poller,
        plugins,
        telemetry,
        limits,
        store,
        auth:
            crate::config::AuthConfig {
                allow_anonymous,
                // Applied by the reload.
                keys: _,
                oauth,
            },
        // Applied by the reload.
        backends: _,
        policies: _,
        // Applied by the reload.
        audit: _,
    } = next;
    let r = running;
    [
        ("listen", r.listen != *listen),
        ("naming", r.naming != *naming),
        ("log_level", r.log_level != *log_level),
        ("log_format", r.log_json != *log_json),
        ("request_timeout", r.request_timeout != *request_timeout),
        ("connect_timeout", r.connect_timeout != *connect_timeout),
        ("startup_timeout", r.startup_timeout != *startup_timeout),
        ("max_body_bytes", r.max_body_bytes != *max_body_bytes),
        ("page_size", r.page_size != *page_size),
        ("allowed_hosts", r.allowed_hosts != *allowed_hosts),
        ("allowed_origins", r.allowed_origins != *allowed_origins),
        ("data_dir", r.data_dir != *data_dir),
        ("api.listen", r.api.listen != *api_listen),
        ("api.allowed_hosts", r.api.allowed_hosts != *api_hosts),
        ("api.allowed_origins", r.api.allowed_origins != *api_origins),
        (
            "api.failed_token_limit",
            r.api.failed_tokens.limit != failed_tokens.limit,
        ),
        (
            "api.failed_token_window",
            r.api.failed_tokens.window != failed_tokens.window,
        ),
        (
            "api.failed_token_cooldown",
            r.api.failed_tokens.cooldown != failed_tokens.cooldown,
        ),
        ("api.roles", r.api.roles != *api_roles),
        ("freshness", r.freshness != *freshness),
        ("poller", r.poller != *poller),
        ("plugins", r.plugins != *plugins),
        ("telemetry", r.telemetry != *telemetry),
        ("limits", r.limits != *limits),
        ("store", r.store != *store),
        (
            "auth.allow_anonymous",
            r.auth.allow_anonymous != *allow_anonymous,
        ),
        ("auth.oauth", r.auth.oauth != *oauth),
    ]
    .into_iter()
    .filter_map(|(key, differs)| differs.then_some(key))
    .collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    const TOKEN: &str = "4f9c2b7e1a0d8c3f6b5e9a2d7c1f0e8b";

    fn config(text: &str) -> Config {
        Config::parse(text, Path::new("vigil.toml")).unwrap_or_else(|e| panic!("{e}"))
    }

    fn base(extra: &str) -> String {
        format!(
            "{extra}\n[api]\nlisten = \"127.0.0.1:8081\"\n[[api.tokens]]\nname = \"ops\"\nrole = \"operator\"\ntoken = \"{TOKEN}\"\n"
        )
    }

    #[test]
    fn an_unchanged_file_needs_nothing() {
        assert!(restart_only_changes(&config(&base("")), &config(&base(""))).is_empty());
    }

    #[test]
    fn every_top_level_key_is_compared() {
        let running = config(&base(""));
        for (line, key) in [
            ("listen = \"127.0.0.1:9999\"", "listen"),
            ("naming = \"none\"", "naming"),
            ("separator = \".\"", "naming"),
            ("log_level = \"debug\"", "log_level"),
            ("log_format = \"json\"", "log_format"),
            ("request_timeout = \"5s\"", "request_timeout"),
            ("connect_timeout = \"5s\"", "connect_timeout"),
            ("startup_timeout = \"30s\"", "startup_timeout"),
            ("max_body_bytes = 2048", "max_body_bytes"),
            ("page_size = 10", "page_size"),
            ("allowed_hosts = [\"vigil.example\"]", "allowed_hosts"),
            (
                "allowed_origins = [\"https://app.example\"]",
                "allowed_origins",
            ),
            ("[freshness]\ndebounce = \"1s\"", "freshness"),
            ("[poller]\ninterval = \"1m\"", "poller"),
            ("[plugins]\ndir = \"plugins\"", "plugins"),
            (
                "[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"",
                "telemetry",
            ),
        ] {
            let next = config(&base(line));
            assert_eq!(restart_only_changes(&running, &next), [key], "{line}");
        }
        // The compiled-plugin cache lives in the data directory.
        let next = config(&base("data_dir = \"elsewhere\""));
        assert_eq!(
            restart_only_changes(&running, &next),
            ["data_dir", "plugins"]
        );
    }

    #[test]
    fn api_keys_but_tokens_need_a_restart() {
        let running = config(&base(""));
        for (line, key) in [
            ("listen = \"127.0.0.1:9998\"", "api.listen"),
            ("allowed_hosts = [\"vigil.example\"]", "api.allowed_hosts"),
            (
                "allowed_origins = [\"https://app.example\"]",
                "api.allowed_origins",
            ),
            ("failed_token_limit = 3", "api.failed_token_limit"),
            ("failed_token_window = \"5m\"", "api.failed_token_window"),
            (
                "failed_token_cooldown = \"5m\"",
                "api.failed_token_cooldown",
            ),
        ] {
            let text = base("").replace("listen = \"127.0.0.1:8081\"", line);
            let text = if key == "api.listen" {
                text
            } else {
                text.replace("[api]\n", "[api]\nlisten = \"127.0.0.1:8081\"\n")
            };
            assert_eq!(
                restart_only_changes(&running, &config(&text)),
                [key],
                "{line}"
            );
        }
        // A rotated secret (same count, same name) needs no restart: the
        // reload applies it.
        let rotated = base("").replace(TOKEN, "8b0e1f7c2d9a5e6b3f8c0d1a7e2b9c4f");
        assert!(restart_only_changes(&running, &config(&rotated)).is_empty());
    }

    #[test]
    fn health_and_restart_tables_go_with_the_backends() {
        let running = config(&base(""));
        let next = config(&base(
            "[health]\nunhealthy_threshold = 5\n[restart]\nbase = \"2s\"",
        ));
        assert!(restart_only_changes(&running, &next).is_empty());
    }
}
