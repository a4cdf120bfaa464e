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
    pub reconnect_initial: Option<String>,
    pub reconnect_max: Option<String>,
    pub max_body_bytes: Option<u64>,
    pub page_size: Option<u64>,
    pub allowed_hosts: Option<Vec<String>>,
    pub allowed_origins: Option<Vec<String>>,
    #[serde(default)]
    pub backends: Vec<RawBackend>,
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
}
