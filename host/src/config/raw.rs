//! The config file as written: serde types that mirror the TOML and do no
//! validation beyond types and unknown keys. [`super::Config::from_raw`]
//! checks and derives the rest.

use std::collections::BTreeMap;

use serde::Deserialize;

/// Top level of `vigil.toml`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub listen: Option<String>,
    pub naming: Option<String>,
    pub separator: Option<String>,
    pub log_level: Option<String>,
    pub log_format: Option<String>,
    pub request_timeout: Option<String>,
    pub connect_timeout: Option<String>,
    pub startup_timeout: Option<String>,
    pub max_body_bytes: Option<u64>,
    pub page_size: Option<u64>,
    pub allowed_hosts: Option<Vec<String>>,
    pub allowed_origins: Option<Vec<String>>,
    pub data_dir: Option<String>,
    pub health: Option<RawHealth>,
    pub restart: Option<RawRestart>,
    pub api: Option<RawApi>,
    pub auth: Option<super::auth::RawAuth>,
    /// `[[policy]]` entries, in order.
    #[serde(default)]
    pub policy: Vec<super::policy::RawPolicy>,
    pub freshness: Option<super::freshness::RawFreshness>,
    pub poller: Option<super::freshness::RawPoller>,
    pub plugins: Option<super::plugins::RawPlugins>,
    pub telemetry: Option<super::telemetry::RawTelemetry>,
    pub limits: Option<super::limits::RawLimits>,
    pub store: Option<super::store::RawStore>,
    pub cluster: Option<super::cluster::RawCluster>,
    pub audit: Option<super::audit::RawAudit>,
    pub pin: Option<super::pin::RawPin>,
    pub tool_search: Option<super::tool_search::RawToolSearch>,
    #[serde(default)]
    pub backends: Vec<RawBackend>,
}

/// `forward_auth = true | false | "passthrough"`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum RawForwardAuth {
    On(bool),
    Mode(String),
}

/// `[health]` and `[backends.health]`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHealth {
    pub interval: Option<String>,
    pub timeout: Option<String>,
    pub unhealthy_threshold: Option<u32>,
    pub readiness: Option<String>,
    pub degraded_latency: Option<String>,
    pub error_rate: Option<f64>,
    pub window: Option<String>,
    pub min_calls: Option<u32>,
    pub tool_probe: Option<RawToolProbe>,
}

/// `tool_probe = { tool = "...", arguments = { ... } }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawToolProbe {
    pub tool: String,
    #[serde(default)]
    pub arguments: toml::Table,
}

/// `[restart]` and `[backends.restart]`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRestart {
    pub base: Option<String>,
    pub max: Option<String>,
    pub multiplier: Option<f64>,
    pub jitter: Option<f64>,
    pub max_restarts: Option<u32>,
    pub healthy_reset: Option<String>,
    pub quarantine_reprobe: Option<String>,
}

/// `[api]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawApi {
    pub listen: Option<String>,
    #[serde(default)]
    pub tokens: Vec<RawToken>,
    pub allowed_hosts: Option<Vec<String>>,
    pub allowed_origins: Option<Vec<String>>,
    pub failed_token_limit: Option<u32>,
    pub failed_token_window: Option<String>,
    pub failed_token_cooldown: Option<String>,
    pub roles: Option<RawRoles>,
}

/// `[api] roles`: control-API roles for principals of `[auth.oauth]` tokens.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoles {
    #[serde(default)]
    pub operator: Vec<String>,
    #[serde(default)]
    pub viewer: Vec<String>,
}

/// `[[api.tokens]]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawToken {
    pub name: Option<String>,
    pub token: Option<String>,
    pub token_env: Option<String>,
    pub role: Option<String>,
}

/// One `[[backends]]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBackend {
    pub name: Option<String>,
    pub transport: Option<String>,
    pub enabled: Option<bool>,
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub cwd: Option<String>,
    pub url: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub request_timeout: Option<String>,
    pub keep_alive: Option<bool>,
    pub protocol: Option<String>,
    pub forward_auth: Option<RawForwardAuth>,
    pub token_exchange: Option<super::oauth::RawTokenExchange>,
    pub session_idle: Option<String>,
    pub share: Option<String>,
    pub runtime: Option<String>,
    pub image: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    pub port: Option<u16>,
    pub network: Option<String>,
    pub health: Option<RawHealth>,
    pub restart: Option<RawRestart>,
    pub pin: Option<super::pin::RawPin>,
    pub update: Option<super::update::RawUpdate>,
    #[serde(default)]
    pub probes: Vec<toml::Table>,
    #[serde(default)]
    pub roots: Vec<String>,
}
