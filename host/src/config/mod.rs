//! Config: parsing, validation and defaults of `vigil.toml`.
//!
//! [`raw::RawConfig`] mirrors the file; [`Config::from_raw`] validates it and
//! derives the typed [`Config`], collecting *every* problem so an operator
//! fixes a file in one pass. This module never touches the network.
//!
//! Every key, its default and its meaning is documented on [`Config`] and
//! [`BackendConfig`], and in `docs/config.md`.

mod api;
mod audit;
mod auth;
mod backend;
mod cluster;
pub mod diff;
mod error;
pub(crate) mod expand;
mod freshness;
mod health;
mod limits;
mod oauth;
mod pin;
mod plugins;
mod policy;
pub mod raw;
mod store;
mod telemetry;
mod token_strength;
mod tool_search;
mod update;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use api::{ApiConfig, ApiRoles, ApiToken, FailedTokens, Role};
pub use audit::AuditConfig;
pub use auth::{ApiKey, AuthConfig};
pub use backend::{
    BackendConfig, ContainerSpec, Protocol, RuntimeKind, Share, Transport, is_backend_name,
};
pub use error::{ConfigError, ConfigErrorKind, Problem};
pub use freshness::{FreshnessConfig, POLL_INTERVAL_ENV, PollerConfig};
pub use health::{HealthConfig, Readiness, RestartPolicy, ToolProbe};
pub use limits::{LimitsConfig, ListLimits, ListenerLimits};
pub use oauth::{Introspection, OAuthConfig, TokenExchange};
pub use pin::{FirstSeen, OnChange, PinConfig};
pub use plugins::{DEFAULT_PLUGIN_CACHE, PluginProbe, PluginsConfig};
pub use tool_search::{MAX_LIMIT, SearchMode, ToolSearchConfig};
pub use update::{OnCatalogChange, Strategy, UpdatePolicy};

/// The file in `data_dir` holding the key that seals MCP session ids
/// (`cluster::key`), and the name it is written under before it is put in
/// place.
pub const SESSION_KEY_FILE: &str = "session.key";
pub const SESSION_KEY_PARTIAL: &str = "session.key.new";
pub use cluster::{ClusterConfig, ClusterKey};
pub use policy::{Issuer as PolicyIssuer, PolicyConfig, Rate, parse_rate};
use raw::RawConfig;
pub use store::{StoreConfig, StoreUrl};
pub use telemetry::TelemetryConfig;

/// How the gateway names what backends export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Naming {
    /// `<backend><separator><name>`: never collides, the default.
    Prefix { separator: String },
    /// Names as the backends give them; a name exported by two backends is
    /// refused at start (see [`crate::catalog::conflicts`]).
    None,
}

/// Why `backend`'s `forward_auth` cannot work with `auth`, if it cannot.
///
/// With `[auth]` the client's `Authorization` is its credential for Vigil:
/// passing it on is token passthrough, which the MCP spec forbids. With
/// `[auth.oauth]` a `forward_auth` backend gets a token for its own
/// audience (`token_exchange`); `"passthrough"` passes the client's token
/// on by the operator's explicit choice.
fn forward_auth_problem(auth: &AuthConfig, backend: &BackendConfig) -> Option<&'static str> {
    if !backend.forward_auth {
        return None;
    }
    match (&auth.oauth, backend.passthrough, &backend.token_exchange) {
        (_, _, Some(_)) if auth.oauth.is_none() => Some(
            "token_exchange trades the client's token for Vigil at its issuer, and needs [auth.oauth]",
        ),
        (Some(_), false, None) => Some(
            "with [auth.oauth] the client's token is for Vigil, and passing it on would be token passthrough (the MCP spec forbids it): \
             add token_exchange = { audience = \"...\", client_id = \"...\", client_secret_env = \"...\" } so the backend gets a token for its own audience, \
             or write forward_auth = \"passthrough\" if the backend is meant to accept Vigil's tokens",
        ),
        (None, true, _) if auth.required() => Some(
            "\"passthrough\" passes on the client's OAuth token, and with [[auth.keys]] only there is none (a key is for Vigil alone): give the backend its own `headers`",
        ),
        (None, false, None) if auth.required() => Some(
            "with [auth] the client's Authorization is its credential for Vigil, and passing it on would be token passthrough (the MCP spec forbids it): \
             give the backend its own credentials in `headers` instead, or drop [[auth.keys]] and [auth.oauth]",
        ),
        _ => None,
    }
}

/// The validated gateway config.
#[derive(Debug, Clone)]
pub struct Config {
    /// File the config came from (for messages and reloads).
    pub file: PathBuf,
    /// `listen`: address of the MCP streamable HTTP endpoint (served at
    /// `/mcp`). Default `127.0.0.1:8080`.
    pub listen: SocketAddr,
    /// `naming` + `separator`: default `prefix` with `__`.
    pub naming: Naming,
    /// `log_level`: a `tracing` filter such as `info` or `vigil=debug`.
    /// Default `info`; `RUST_LOG` overrides it.
    pub log_level: String,
    /// `log_format`: `human` (default) or `json`.
    pub log_json: bool,
    /// `request_timeout`: longest wait for a backend's answer to a routed
    /// request. Default `60s`; per backend overridable.
    pub request_timeout: Duration,
    /// `connect_timeout`: longest wait to start a backend and finish its MCP
    /// handshake. Default `10s`.
    pub connect_timeout: Duration,
    /// `startup_timeout`: how long `serve` waits for backends to connect
    /// before it starts serving. Default `10s`. Backends not up by then are
    /// served once they connect.
    pub startup_timeout: Duration,
    /// `max_body_bytes`: largest accepted POST body on `/mcp`; bigger ones get
    /// HTTP 413. Default 4 MiB.
    pub max_body_bytes: usize,
    /// `page_size`: items per page of merged lists when a client paginates.
    /// Default 1000.
    pub page_size: usize,
    /// `allowed_hosts`: `Host` header values accepted (DNS rebinding
    /// protection). Default: loopback names. `["*"]` disables the check.
    pub allowed_hosts: Vec<String>,
    /// `allowed_origins`: browser `Origin`s accepted; requests with another
    /// `Origin` get 403. Default: loopback origins on any port.
    pub allowed_origins: Vec<String>,
    /// `data_dir`: where state that must survive a restart is kept (the
    /// SQLite store, the session key, and by default the compiled-plugin
    /// cache), private to
    /// Vigil's user. Default: `vigil-data` beside the config file.
    pub data_dir: PathBuf,
    /// `[store]`: which state store (embedded SQLite, or PostgreSQL), and
    /// whether Vigil may serve without it.
    pub store: StoreConfig,
    /// `[cluster]`: this replica's name, the key replicas share, the
    /// supervision lease (used with a PostgreSQL store).
    pub cluster: ClusterConfig,
    /// `[auth]`: who may use `/mcp`.
    pub auth: AuthConfig,
    /// `[[policy]]`: what each principal may see and use (applied live).
    pub policies: Vec<PolicyConfig>,
    /// `[health]`: probe schedule and thresholds; `[backends.health]`
    /// overrides them per backend (already applied in each backend).
    pub health: HealthConfig,
    /// `[restart]`: restart policy; `[backends.restart]` overrides it.
    pub restart: RestartPolicy,
    /// `[api]`: the control API.
    pub api: ApiConfig,
    /// `[freshness]`: debouncing of catalog change notifications.
    pub freshness: FreshnessConfig,
    /// `[poller]`: periodic re-listing of every backend.
    pub poller: PollerConfig,
    /// `[plugins]`: the WebAssembly plugin directory.
    pub plugins: PluginsConfig,
    /// `[telemetry]`: optional OpenTelemetry export of tool-call spans.
    pub telemetry: TelemetryConfig,
    /// `[limits]`: bounds on what a backend or a client may cost.
    pub limits: LimitsConfig,
    /// `[audit]`: the audit of MCP calls (applied live by a reload).
    pub audit: AuditConfig,
    /// `[tool_search]`: meta-tools for large catalogs (applied live by a
    /// reload).
    pub tool_search: ToolSearchConfig,
    /// Enabled backends, in file order.
    pub backends: Vec<BackendConfig>,
}

const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// Longest duration any key accepts. Timers add durations to the clock,
/// and a value past what the clock can represent would panic there.
const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// Headers the streamable HTTP transport manages; a backend may not set them.
pub(crate) const RESERVED_HEADERS: [&str; 4] = [
    "accept",
    "mcp-session-id",
    "last-event-id",
    "mcp-protocol-version",
];

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.to_owned(),
            kind: ConfigErrorKind::Read(e),
        })?;
        Self::parse(&text, path)
    }

    /// Parses and validates config text; `path` is used in messages and to
    /// place the default `data_dir`.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        Self::parse_with_env(text, path, &|k| std::env::var(k).ok())
    }

    /// [`Config::parse`] with an explicit environment (for tests and for
    /// checking generated configs).
    pub fn parse_with_env(
        text: &str,
        path: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| line_of(text, s.start));
            ConfigError::invalid(
                path,
                vec![Problem {
                    key: String::new(),
                    line,
                    message: toml_message(&e),
                }],
            )
        })?;
        Self::from_raw_with_env(raw, path, env)
    }

    /// Validates a raw config, collecting every problem. Token secrets
    /// named by `token_env` and `${NAME}` references in backends are read
    /// from the process environment.
    pub fn from_raw(raw: RawConfig, path: &Path) -> Result<Config, ConfigError> {
        Self::from_raw_with_env(raw, path, &|k| std::env::var(k).ok())
    }

    /// [`Config::from_raw`] with an explicit environment (for tests).
    pub fn from_raw_with_env(
        raw: RawConfig,
        path: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let mut p = Problems::default();
        let listen = raw.listen.as_deref().unwrap_or(DEFAULT_LISTEN);
        let listen = listen.parse::<SocketAddr>().unwrap_or_else(|_| {
            p.add(
                "listen",
                format!("`{listen}` is not an address: write it like \"127.0.0.1:8080\""),
            );
            std::net::SocketAddr::from(([127, 0, 0, 1], 8080))
        });
        let separator = raw.separator.unwrap_or_else(|| "__".into());
        if separator.is_empty() {
            p.add("separator", "must not be empty: use e.g. \"__\" or \".\"");
        }
        let naming = match raw.naming.as_deref().unwrap_or("prefix") {
            "prefix" => Naming::Prefix { separator },
            "none" => Naming::None,
            other => {
                p.add(
                    "naming",
                    format!("unknown value `{other}`: use \"prefix\" or \"none\""),
                );
                Naming::Prefix { separator }
            }
        };
        let log_json = match raw.log_format.as_deref().unwrap_or("human") {
            "human" => false,
            "json" => true,
            other => {
                p.add(
                    "log_format",
                    format!("unknown value `{other}`: use \"human\" or \"json\""),
                );
                false
            }
        };
        let log_level = raw.log_level.unwrap_or_else(|| "info".into());
        if tracing_subscriber::EnvFilter::try_new(&log_level).is_err() {
            p.add(
                "log_level",
                format!("`{log_level}` is not a log filter: use e.g. \"info\" or \"vigil=debug\""),
            );
        }
        let request_timeout = p.duration("request_timeout", raw.request_timeout, "60s");
        let connect_timeout = p.duration("connect_timeout", raw.connect_timeout, "10s");
        let startup_timeout = p.duration("startup_timeout", raw.startup_timeout, "10s");
        let max_body_bytes = raw.max_body_bytes.unwrap_or(4 * 1024 * 1024);
        if max_body_bytes < 1024 {
            p.add("max_body_bytes", "must be at least 1024");
        }
        let page_size = raw.page_size.unwrap_or(1000);
        if page_size == 0 {
            p.add("page_size", "must be at least 1");
        }
        let allowed_hosts = raw.allowed_hosts.unwrap_or_else(|| {
            ["localhost", "127.0.0.1", "::1", "[::1]"]
                .map(String::from)
                .to_vec()
        });
        let allowed_origins = raw.allowed_origins.unwrap_or_else(|| {
            ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"]
                .map(String::from)
                .to_vec()
        });
        // The rule the listeners apply (`crate::origin`), so what passes
        // here is what they understand: `"*"` included.
        for (i, o) in allowed_origins.iter().enumerate() {
            if let Some(problem) = crate::origin::origin_entry_problem(o) {
                p.add(format!("allowed_origins[{i}]"), problem);
            }
        }
        for (i, h) in allowed_hosts.iter().enumerate() {
            if let Some(problem) = crate::origin::host_entry_problem(h) {
                p.add(format!("allowed_hosts[{i}]"), problem);
            }
        }

        let data_dir = match raw.data_dir {
            Some(d) if d.trim().is_empty() => {
                p.add("data_dir", "must not be empty");
                PathBuf::from(d)
            }
            Some(d) => PathBuf::from(d),
            None => path.parent().unwrap_or(Path::new(".")).join("vigil-data"),
        };
        let health = p.health("health", &HealthConfig::default(), raw.health);
        let restart = p.restart("restart", &RestartPolicy::default(), raw.restart);
        let pin = p.pin("pin", &PinConfig::default(), raw.pin);
        let api = p.api(raw.api, env);
        let auth = p.auth(
            raw.auth,
            listen,
            path.parent().unwrap_or(Path::new(".")),
            env,
        );
        if !api.roles.is_empty() && auth.oauth.is_none() {
            p.add(
                "api.roles",
                "gives roles to principals of OAuth access tokens, but [auth.oauth] is not configured: add [auth.oauth], or use [[api.tokens]]",
            );
        }
        let issuers: &[String] = auth.oauth.as_ref().map_or(&[], |o| &o.issuers);
        let policies = p.policies(raw.policy, issuers);
        let freshness = p.freshness(raw.freshness, health.interval);
        let poller = p.poller(raw.poller, env);
        let plugins = p.plugins(raw.plugins, path, &data_dir);
        let telemetry = p.telemetry(raw.telemetry);
        let limits = p.limits(raw.limits);
        let store = p.store(raw.store, env);
        let cluster = p.cluster(raw.cluster, listen, env);
        let audit = p.audit(raw.audit);
        let tool_search = p.tool_search(raw.tool_search, path.parent().unwrap_or(Path::new(".")));

        let defaults = backend::Defaults {
            health,
            restart,
            pin,
        };
        let mut backends = Vec::new();
        let mut seen = HashSet::new();
        for (i, b) in raw.backends.into_iter().enumerate() {
            let at = format!("backends[{i}]");
            let enabled = b.enabled.unwrap_or(true);
            let base = path.parent().unwrap_or(Path::new("."));
            if let Some(backend) = p.backend(&at, b, &defaults, env, base) {
                if !seen.insert(backend.name.clone()) {
                    p.add(
                        format!("{at}.name"),
                        format!(
                            "duplicate backend name `{}`: every backend needs its own name",
                            backend.name
                        ),
                    );
                } else if enabled {
                    if let Some(problem) = forward_auth_problem(&auth, &backend) {
                        p.add(format!("{at}.forward_auth"), problem);
                    }
                    if plugins.dir.is_none() && !backend.probes.is_empty() {
                        p.add(
                            format!("{at}.probes"),
                            "names probe plugins, but [plugins] dir is not set: add [plugins] dir = \"plugins\"",
                        );
                    }
                    backends.push(backend);
                }
            }
        }
        p.finish(path)?;
        Ok(Config {
            file: path.to_owned(),
            listen,
            naming,
            log_level,
            log_json,
            request_timeout,
            connect_timeout,
            startup_timeout,
            max_body_bytes: max_body_bytes as usize,
            page_size: page_size as usize,
            allowed_hosts,
            allowed_origins,
            data_dir,
            store,
            cluster,
            health: defaults.health,
            restart: defaults.restart,
            api,
            auth,
            policies,
            freshness,
            poller,
            plugins,
            telemetry,
            limits,
            audit,
            tool_search,
            backends,
        })
    }

    /// A digest of what this config serves: its backends (with their
    /// health, restart, isolation and every other setting), its policies
    /// and its naming. Replicas compare theirs (`cluster::postgres::replicas`):
    /// the same file on every replica gives the same digest, whatever
    /// each replica's `listen`, `[cluster] replica` or `data_dir`. Hex
    /// SHA-256.
    pub fn serving_digest(&self) -> String {
        use sha2::{Digest, Sha256};
        let text = format!(
            "{:?}\n{:?}\n{:?}",
            self.naming, self.backends, self.policies
        );
        hex::encode(Sha256::digest(text.as_bytes()))
    }

    /// The request timeout that applies to `backend`.
    pub fn request_timeout_for(&self, backend: &BackendConfig) -> Duration {
        backend.request_timeout.unwrap_or(self.request_timeout)
    }
}

#[derive(Default)]
pub(crate) struct Problems(Vec<Problem>);

impl Problems {
    pub(crate) fn add(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem {
            key: key.into(),
            line: None,
            message: message.into(),
        });
    }

    /// `value` if given (checked like [`Problems::duration`]), else `current`.
    pub(crate) fn override_duration(
        &mut self,
        key: &str,
        value: Option<String>,
        current: Duration,
    ) -> Duration {
        match value {
            Some(v) => self.duration(
                key,
                Some(v),
                &humantime::format_duration(current).to_string(),
            ),
            None => current,
        }
    }

    pub(crate) fn duration(&mut self, key: &str, value: Option<String>, default: &str) -> Duration {
        let text = value.unwrap_or_else(|| default.to_owned());
        match humantime::parse_duration(&text) {
            Ok(d) if d > MAX_DURATION => {
                self.add(
                    key,
                    format!("`{text}` is too long: durations are at most 365 days"),
                );
                humantime::parse_duration(default).unwrap_or_default()
            }
            Ok(d) => d,
            Err(e) => {
                self.add(key, format!("`{text}` is not a duration ({e}): write it like \"500ms\", \"10s\" or \"5m\""));
                humantime::parse_duration(default).unwrap_or_default()
            }
        }
    }

    fn finish(self, path: &Path) -> Result<(), ConfigError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::invalid(path, self.0))
        }
    }
}

pub(crate) fn reqwest_header_invalid(name: &str, value: &str) -> bool {
    http::HeaderName::from_bytes(name.as_bytes()).is_err()
        || http::HeaderValue::from_str(value).is_err()
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())]
        .bytes()
        .filter(|b| *b == b'\n')
        .count()
        + 1
}

/// toml's message, plus a fix for the common case of a misspelt key.
fn toml_message(e: &toml::de::Error) -> String {
    let msg = e.message().trim().to_owned();
    if msg.starts_with("unknown field") {
        format!("{msg}; remove the key or fix its spelling (see docs/config.md)")
    } else {
        msg
    }
}

#[cfg(test)]
mod tests;
