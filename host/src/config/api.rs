//! `[api]`: the control API's listener, who may call it (`[[api.tokens]]`),
//! which `Host` and `Origin` it answers, and how failed token attempts are
//! throttled.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use super::Problems;
use super::raw::RawApi;
use super::token_strength;

/// A control-API role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// May read.
    Viewer,
    /// May read and act (restart, quarantine, release).
    Operator,
}

/// One `[[api.tokens]]` entry, with its secret resolved.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiToken {
    pub name: String,
    pub secret: String,
    pub role: Role,
}

impl std::fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiToken")
            .field("name", &self.name)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

/// `[api] roles = { operator = [...], viewer = [...] }`: principal patterns
/// (`group:ops`, `sub:alice`, `scope:vigil:admin`, `*`; matched like
/// `[[policy]] principals`). Operator wins when both match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiRoles {
    pub operator: Vec<String>,
    pub viewer: Vec<String>,
}

impl ApiRoles {
    pub fn is_empty(&self) -> bool {
        self.operator.is_empty() && self.viewer.is_empty()
    }
}

/// `[api]`: the control API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiConfig {
    /// `listen`: default `127.0.0.1:8081`. Without tokens it must be a
    /// loopback address (anyone who can connect is an operator).
    pub listen: SocketAddr,
    /// `[[api.tokens]]`: applied live by a config reload.
    pub tokens: Vec<ApiToken>,
    /// `allowed_hosts`: `Host` values the API answers (DNS rebinding
    /// protection), matched like the top-level key of `/mcp`. Default: the
    /// loopback names plus `listen`'s address; required when `listen` is
    /// an unspecified address (`0.0.0.0`, `[::]`). `["*"]` accepts any.
    pub allowed_hosts: Vec<String>,
    /// `allowed_origins`: browser `Origin`s allowed besides the API's own
    /// (the dashboard's). Default none; `["*"]` allows any.
    pub allowed_origins: Vec<String>,
    /// `failed_token_*`: the cool-down after repeated unknown tokens.
    pub failed_tokens: FailedTokens,
    /// `roles`: which principals of `[auth.oauth]` tokens may call the API,
    /// and as what (restart-only).
    pub roles: ApiRoles,
}

/// `failed_token_limit`, `failed_token_window`, `failed_token_cooldown`:
/// after `limit` unknown tokens from one client address within `window`,
/// every request from that address is answered 429 for `cooldown`, a
/// right token's too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailedTokens {
    /// Default 10.
    pub limit: u32,
    /// Default `1m`.
    pub window: Duration,
    /// Default `1m`.
    pub cooldown: Duration,
}

impl Default for FailedTokens {
    fn default() -> Self {
        FailedTokens {
            limit: 10,
            window: Duration::from_secs(60),
            cooldown: Duration::from_secs(60),
        }
    }
}

/// The names every control API answers to by default.
const LOOPBACK_HOSTS: [&str; 4] = ["localhost", "127.0.0.1", "::1", "[::1]"];

impl Problems {
    pub(super) fn api(
        &mut self,
        raw: Option<RawApi>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> ApiConfig {
        let raw = raw.unwrap_or_default();
        let listen_text = raw.listen.unwrap_or_else(|| "127.0.0.1:8081".into());
        let listen = listen_text.parse::<SocketAddr>().unwrap_or_else(|_| {
            self.add(
                "api.listen",
                format!("`{listen_text}` is not an address: write it like \"127.0.0.1:8081\""),
            );
            SocketAddr::from(([127, 0, 0, 1], 8081))
        });
        let tokens = self.tokens(raw.tokens, env);
        let roles = raw.roles.map_or_else(ApiRoles::default, |r| {
            for (key, patterns) in [("operator", &r.operator), ("viewer", &r.viewer)] {
                for (i, p) in patterns.iter().enumerate() {
                    if let Some(problem) = super::policy::principal_problem(p) {
                        self.add(format!("api.roles.{key}[{i}]"), problem);
                    }
                }
            }
            ApiRoles {
                operator: r.operator,
                viewer: r.viewer,
            }
        });
        if tokens.is_empty() && roles.is_empty() && !listen.ip().is_loopback() {
            self.add("api.listen", "without [[api.tokens]] or [api] roles the control API must listen on a loopback address; add tokens to listen elsewhere");
        }
        let allowed_hosts = match raw.allowed_hosts {
            Some(hosts) => {
                for (i, h) in hosts.iter().enumerate() {
                    if let Some(problem) = crate::origin::host_entry_problem(h) {
                        self.add(format!("api.allowed_hosts[{i}]"), problem);
                    }
                }
                hosts
            }
            None => {
                if listen.ip().is_unspecified() && !tokens.is_empty() {
                    self.add(
                        "api.allowed_hosts",
                        format!(
                            "missing: [api] listen = \"{listen}\" accepts every address, so Vigil cannot tell which Host names are yours; \
                             list the names clients use (e.g. allowed_hosts = [\"vigil.example.com\", \"10.0.0.5\"]), or [\"*\"] to accept any"
                        ),
                    );
                }
                default_hosts(listen.ip())
            }
        };
        let allowed_origins = raw.allowed_origins.unwrap_or_default();
        for (i, o) in allowed_origins.iter().enumerate() {
            if let Some(problem) = crate::origin::origin_entry_problem(o) {
                self.add(format!("api.allowed_origins[{i}]"), problem);
            }
        }
        let defaults = FailedTokens::default();
        let limit = raw.failed_token_limit.unwrap_or(defaults.limit);
        if limit == 0 {
            self.add("api.failed_token_limit", "must be at least 1");
        }
        let failed_tokens = FailedTokens {
            limit: limit.max(1),
            window: self.duration("api.failed_token_window", raw.failed_token_window, "1m"),
            cooldown: self.duration("api.failed_token_cooldown", raw.failed_token_cooldown, "1m"),
        };
        for (key, d) in [
            ("api.failed_token_window", failed_tokens.window),
            ("api.failed_token_cooldown", failed_tokens.cooldown),
        ] {
            if d.is_zero() {
                self.add(key, "must be longer than 0s");
            }
        }
        ApiConfig {
            listen,
            tokens,
            allowed_hosts,
            allowed_origins,
            failed_tokens,
            roles,
        }
    }

    fn tokens(
        &mut self,
        raw: Vec<super::raw::RawToken>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Vec<ApiToken> {
        let mut tokens = Vec::new();
        let mut names = std::collections::HashSet::new();
        for (i, t) in raw.into_iter().enumerate() {
            let at = format!("api.tokens[{i}]");
            let name = t.name.unwrap_or_default();
            if name.is_empty() {
                self.add(
                    format!("{at}.name"),
                    "missing: name the token (it is the principal in the audit log)",
                );
            } else if !names.insert(name.clone()) {
                self.add(
                    format!("{at}.name"),
                    format!("duplicate token name `{name}`"),
                );
            }
            let role = match t.role.as_deref() {
                Some("viewer") => Role::Viewer,
                Some("operator") => Role::Operator,
                Some(other) => {
                    self.add(
                        format!("{at}.role"),
                        format!("unknown value `{other}`: use \"viewer\" or \"operator\""),
                    );
                    Role::Viewer
                }
                None => {
                    self.add(
                        format!("{at}.role"),
                        "missing: set role = \"viewer\" or \"operator\"",
                    );
                    Role::Viewer
                }
            };
            let secret = match (t.token, t.token_env) {
                (Some(s), None) => {
                    if let Some(weak) = token_strength::weakness(&s) {
                        self.add(format!("{at}.token"), weak);
                    }
                    s
                }
                (None, Some(var)) => match env(&var) {
                    Some(s) => {
                        if let Some(weak) = token_strength::weakness(&s) {
                            self.add(
                                format!("{at}.token_env"),
                                format!("the secret in `{var}` {weak}"),
                            );
                        }
                        s
                    }
                    None => {
                        self.add(
                            format!("{at}.token_env"),
                            format!("environment variable `{var}` is not set"),
                        );
                        String::new()
                    }
                },
                (Some(_), Some(_)) => {
                    self.add(at.clone(), "set either token or token_env, not both");
                    String::new()
                }
                (None, None) => {
                    self.add(
                        format!("{at}.token"),
                        "missing: set token = \"...\" or token_env = \"VAR\"",
                    );
                    String::new()
                }
            };
            tokens.push(ApiToken { name, secret, role });
        }
        tokens
    }
}

/// The loopback names, plus `ip` itself when it is one specific address
/// (clients reach such a listener by that address).
fn default_hosts(ip: IpAddr) -> Vec<String> {
    let mut hosts: Vec<String> = LOOPBACK_HOSTS.map(String::from).to_vec();
    if !ip.is_loopback() && !ip.is_unspecified() {
        hosts.push(match ip {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => format!("[{v6}]"),
        });
    }
    hosts
}
