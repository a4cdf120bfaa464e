//! `[[backends]]`: how each backend is run and reached.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::expand::{self, RefError};
use super::health::{HealthConfig, RestartPolicy};
use super::raw::RawBackend;
use super::{Problems, RESERVED_HEADERS, reqwest_header_invalid};

/// Whether `name` may name a backend: letters, digits, `-` and `_` (it
/// appears in prefixed tool names, log fields and control-API paths).
pub fn is_backend_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Where `${NAME}` references in a backend's values come from: Vigil's
/// environment for an enabled backend; nowhere for a disabled one, whose
/// references are only checked for syntax (its variables need not be set
/// until it is enabled).
type Lookup<'a> = Option<&'a dyn Fn(&str) -> Option<String>>;

/// How the gateway speaks MCP to a backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// Over a child process's stdin/stdout (runtime `process`).
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
    },
    /// Over streamable HTTP (runtime `remote` or `container`).
    /// `keep_alive`: reuse HTTP connections to the backend (default on).
    Http {
        url: String,
        headers: BTreeMap<String, String>,
        keep_alive: bool,
    },
}

/// Which protocol era Vigil speaks to a backend (`protocol`).
///
/// Revisions up to 2025-11-25 open a session with `initialize`; 2026-07-28
/// has no handshake (`server/discover`, then self-contained requests).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Protocol {
    /// `"auto"` (default): over HTTP `server/discover` first, then the
    /// handshake where the backend refuses it or lists a handshake revision
    /// too (the raw path and lanes need a session; its 2026-07-28 clients
    /// get a 2026-07-28 session of their own, `backend::variants`); over
    /// stdio the handshake first (and the same for 2026-07-28 clients). See
    /// `backend::lifecycle::begin` and docs/gateway.md "Protocol revisions".
    #[default]
    Auto,
    /// A handshake revision (`"2025-11-25"`, `"2025-06-18"`, `"2025-03-26"`,
    /// `"2024-11-05"`): offered in `initialize`, never `server/discover`.
    Handshake(rmcp::model::ProtocolVersion),
    /// `"2026-07-28"`: `server/discover` only, never `initialize`.
    Modern(rmcp::model::ProtocolVersion),
}

impl Protocol {
    /// Parses the `protocol` key; the error says what is accepted.
    pub fn parse(value: &str) -> Result<Protocol, String> {
        use rmcp::model::ProtocolVersion;
        if value == "auto" {
            return Ok(Protocol::Auto);
        }
        match ProtocolVersion::KNOWN_VERSIONS
            .iter()
            .find(|v| v.as_str() == value)
        {
            Some(v) if v.has_initialize() => Ok(Protocol::Handshake(v.clone())),
            Some(v) => Ok(Protocol::Modern(v.clone())),
            None => {
                let known: Vec<String> = ProtocolVersion::KNOWN_VERSIONS
                    .iter()
                    .rev()
                    .map(|v| format!("\"{}\"", v.as_str()))
                    .collect();
                Err(format!(
                    "`{value}` is not a protocol revision Vigil speaks: use \"auto\" (the default) or one of {}",
                    known.join(", ")
                ))
            }
        }
    }
}

/// Who shares one instance of a backend (`share`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Share {
    /// `"all"` (default): one instance (process, container, remote
    /// server) for every client; per-session state lives in backend
    /// sessions where the transport has them (HTTP).
    #[default]
    All,
    /// `"principal"` (stdio): one process per caller (`CallerKey`), shared
    /// by that caller's sessions.
    Principal,
    /// `"session"` (stdio): one process per client session (a 2026-07-28
    /// client, which has no session, gets one per caller).
    Session,
}

impl Share {
    pub fn as_str(self) -> &'static str {
        match self {
            Share::All => "all",
            Share::Principal => "principal",
            Share::Session => "session",
        }
    }
}

/// What runs the backend (see `crate::runtime`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeKind {
    /// A child process Vigil starts and owns (stdio backends).
    Process,
    /// A container Vigil creates and owns through the Docker Engine API.
    Container(ContainerSpec),
    /// An HTTP server Vigil does not own: probed, hidden when down, never
    /// restarted (http backends by default).
    Remote,
}

/// A backend's container (`runtime = "container"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerSpec {
    /// `image`: required, e.g. `"localhost/my-mcp:1"` (never pulled from a
    /// registry by Vigil; it must exist in the engine).
    pub image: String,
    /// `command`: overrides the image's entrypoint.
    pub command: Option<String>,
    /// `args`: the container's command (arguments).
    pub args: Vec<String>,
    /// `env`: environment variables.
    pub env: BTreeMap<String, String>,
    /// `labels`: added to Vigil's own (`vigil.backend = NAME`).
    pub labels: BTreeMap<String, String>,
    /// `port`: container port published on `127.0.0.1:port` of the host.
    pub port: Option<u16>,
    /// `network`: network mode, e.g. `"host"` (then no port publishing).
    pub network: Option<String>,
}

/// One `[[backends]]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct BackendConfig {
    /// `name`: unique; letters, digits, `-` and `_`. Used in prefixed names,
    /// logs, errors and the control API's paths.
    pub name: String,
    /// `transport` (`stdio` | `http`) with its keys: `command`, `args`, `env`,
    /// `cwd` for stdio; `url`, `headers` for http. Their `${NAME}`
    /// references are already expanded (see `config/expand.rs`).
    pub transport: Transport,
    /// `runtime`: `process` (stdio default), `remote` (http default) or
    /// `container` (http, with `image`, `command`, `args`, `env`, `labels`,
    /// `port`, `network`).
    pub runtime: RuntimeKind,
    /// `request_timeout`: overrides the global one for this backend.
    pub request_timeout: Option<Duration>,
    /// `protocol`: the era and revision spoken to the backend.
    pub protocol: Protocol,
    /// `[backends.health]` over `[health]`.
    pub health: HealthConfig,
    /// `[backends.restart]` over `[restart]`.
    pub restart: RestartPolicy,
    /// `[backends.pin]` over `[pin]`.
    pub pin: super::pin::PinConfig,
    /// `[backends.update]`, when the backend has one: an edit of what it
    /// runs is then rolled out as an update (`app::rollouts`).
    pub update: Option<super::update::UpdatePolicy>,
    /// `forward_auth` (http): each client session gets its own backend
    /// connection carrying that client's `Authorization` header, and its
    /// own catalog of this backend; Vigil never talks MCP to it with
    /// credentials of its own.
    pub forward_auth: bool,
    /// `forward_auth = "passthrough"`: the client's own token for Vigil is
    /// sent on as it came (token passthrough, which the MCP spec forbids:
    /// only for backends that trust Vigil's issuer and audience).
    pub passthrough: bool,
    /// `token_exchange`: with `[auth.oauth]`, the token a `forward_auth`
    /// backend gets is traded for its own audience (RFC 8693).
    pub token_exchange: Option<super::oauth::TokenExchange>,
    /// `session_idle` (with `forward_auth`, or `share` other than
    /// `"all"`): a session's connection or instance unused this long is
    /// closed (reopened on its next use). Default `10m`.
    pub session_idle: Duration,
    /// `share` (stdio): who shares one process of the backend.
    pub share: Share,
    /// `probes`: probe plugins run against this backend, each on its own
    /// schedule, feeding its health like the built-in probe.
    pub probes: Vec<super::PluginProbe>,
    /// `roots`: the roots (`file://` URIs) Vigil answers the backend's
    /// `roots/list` with when no client that declared roots is asking
    /// through a call of its own (the shared session declares `roots` for
    /// them).
    pub roots: Vec<String>,
    /// The values `${NAME}` references took from the environment, wherever
    /// they went (`args` and `url` included): secrets to mask like header
    /// values.
    pub substituted: Vec<String>,
}

/// What a backend's own tables override: the gateway-wide `[health]`,
/// `[restart]` and `[pin]`.
pub(super) struct Defaults {
    pub health: HealthConfig,
    pub restart: RestartPolicy,
    pub pin: super::pin::PinConfig,
}

impl Problems {
    pub(super) fn backend(
        &mut self,
        at: &str,
        b: RawBackend,
        defaults: &Defaults,
        env: &dyn Fn(&str) -> Option<String>,
        base: &std::path::Path,
    ) -> Option<BackendConfig> {
        let before = self.0.len();
        let enabled = b.enabled.unwrap_or(true);
        let mut substituted = Vec::new();
        let mut b = self.expand_backend(at, b, enabled.then_some(env), &mut substituted);
        let name = b.name.clone().unwrap_or_default();
        if name.is_empty() {
            self.add(
                format!("{at}.name"),
                "missing: every backend needs a name, like name = \"files\"",
            );
        } else if !is_backend_name(&name) {
            self.add(
                format!("{at}.name"),
                format!("`{name}` may only hold letters, digits, `-` and `_`"),
            );
        }
        let request_timeout = b
            .request_timeout
            .clone()
            .map(|t| self.duration(&format!("{at}.request_timeout"), Some(t), "60s"));
        let protocol = match b.protocol.as_deref().map(Protocol::parse) {
            None => Protocol::Auto,
            Some(Ok(p)) => p,
            Some(Err(e)) => {
                self.add(format!("{at}.protocol"), e);
                Protocol::Auto
            }
        };
        let health = self.health(&format!("{at}.health"), &defaults.health, b.health.clone());
        let restart = self.restart(
            &format!("{at}.restart"),
            &defaults.restart,
            b.restart.clone(),
        );
        let pin = self.pin(&format!("{at}.pin"), &defaults.pin, b.pin.clone());
        let update = b.update.clone().map(|u| self.update(at, u));
        let session_idle =
            self.duration(&format!("{at}.session_idle"), b.session_idle.clone(), "10m");
        if session_idle.is_zero() {
            self.add(
                format!("{at}.session_idle"),
                "must be longer than zero, like session_idle = \"10m\"",
            );
        }
        use super::raw::RawForwardAuth;
        let (forward_auth, passthrough) = match &b.forward_auth {
            None | Some(RawForwardAuth::On(false)) => (false, false),
            Some(RawForwardAuth::On(true)) => (true, false),
            Some(RawForwardAuth::Mode(m)) if m == "passthrough" => (true, true),
            Some(RawForwardAuth::Mode(m)) => {
                self.add(
                    format!("{at}.forward_auth"),
                    format!("`{m}` is not a mode: write forward_auth = true (with [auth.oauth]: token_exchange), false, or \"passthrough\""),
                );
                (false, false)
            }
        };
        let token_exchange = b
            .token_exchange
            .take()
            .and_then(|t| self.token_exchange(at, t, base, env));
        if token_exchange.is_some() && (!forward_auth || passthrough) {
            self.add(
                format!("{at}.token_exchange"),
                "only applies with forward_auth = true (passthrough sends the client's token as it came)",
            );
        }
        let probes = self.probes(at, b.probes.clone());
        let share = match b.share.as_deref() {
            None | Some("all") => Share::All,
            Some("principal") => Share::Principal,
            Some("session") => Share::Session,
            Some(other) => {
                self.add(
                    format!("{at}.share"),
                    format!("`{other}` is not a sharing mode: use \"all\" (one process for everyone, the default), \"principal\" (one per caller) or \"session\" (one per client session)"),
                );
                Share::All
            }
        };
        let runtime_name = b.runtime.clone();
        let (transport, runtime) = match b.transport.as_deref() {
            Some("stdio") => {
                self.refuse(
                    at,
                    "only applies to transport = \"http\"",
                    [
                        ("url", b.url.is_some()),
                        ("headers", !b.headers.is_empty()),
                        ("keep_alive", b.keep_alive.is_some()),
                        ("forward_auth", b.forward_auth.is_some()),
                        ("token_exchange", token_exchange.is_some()),
                    ],
                );
                if share == Share::All {
                    self.refuse(
                        at,
                        "only applies to transport = \"http\" with forward_auth, or with share = \"session\" or \"principal\"",
                        [("session_idle", b.session_idle.is_some())],
                    );
                }
                match runtime_name.as_deref() {
                    None | Some("process") => {}
                    Some(other) => self.add(format!("{at}.runtime"), format!("`{other}` does not run stdio backends: use runtime = \"process\" (the default) or transport = \"http\"")),
                }
                self.refuse_container_keys(at, &b, "only applies to runtime = \"container\"");
                let command = b.command.unwrap_or_default();
                if command.trim().is_empty() {
                    self.add(format!("{at}.command"), "missing: a stdio backend needs the command that starts it, like command = \"my-mcp-server\"");
                }
                (
                    Transport::Stdio {
                        command,
                        args: b.args,
                        env: b.env,
                        cwd: b.cwd.map(PathBuf::from),
                    },
                    RuntimeKind::Process,
                )
            }
            Some("http") => {
                let url = b.url.clone().unwrap_or_default();
                if url.is_empty() {
                    self.add(format!("{at}.url"), "missing: an http backend needs its MCP endpoint, like url = \"http://127.0.0.1:3902/mcp\"");
                } else if !(url.starts_with("http://")
                    || url.starts_with("https://")
                    // Not after a reference problem at this key, nor for a
                    // disabled backend's unexpanded references.
                    || self.has(&format!("{at}.url"))
                    || (!enabled && url.contains("${")))
                {
                    self.add(
                        format!("{at}.url"),
                        format!("`{url}` must start with http:// or https://"),
                    );
                }
                for (k, v) in &b.headers {
                    if reqwest_header_invalid(k, v) {
                        self.add(
                            format!("{at}.headers.{k}"),
                            "is not a valid HTTP header name/value",
                        );
                    } else if RESERVED_HEADERS.iter().any(|r| r.eq_ignore_ascii_case(k)) {
                        self.add(
                            format!("{at}.headers.{k}"),
                            "is set by the MCP transport itself; remove it",
                        );
                    }
                }
                self.refuse(
                    at,
                    "does not apply to http backends",
                    [("cwd", b.cwd.is_some())],
                );
                if share != Share::All {
                    self.add(
                        format!("{at}.share"),
                        "applies to stdio backends only: an http backend already gives each client session a backend session of its own; remove share, or run the server over stdio",
                    );
                }
                if forward_auth
                    && let Some(k) = b
                        .headers
                        .keys()
                        .find(|k| k.eq_ignore_ascii_case("authorization"))
                {
                    self.add(
                        format!("{at}.headers.{k}"),
                        "conflicts with forward_auth = true, which sends each client's own Authorization header; remove one of them",
                    );
                }
                if !forward_auth {
                    self.refuse(
                        at,
                        "only applies with forward_auth = true",
                        [("session_idle", b.session_idle.is_some())],
                    );
                }
                let runtime = match runtime_name.as_deref() {
                    None | Some("remote") => {
                        self.refuse(
                            at,
                            "only applies to transport = \"stdio\" or runtime = \"container\"",
                            [
                                ("command", b.command.is_some()),
                                ("args", !b.args.is_empty()),
                                ("env", !b.env.is_empty()),
                            ],
                        );
                        self.refuse_container_keys(
                            at,
                            &b,
                            "only applies to runtime = \"container\"",
                        );
                        RuntimeKind::Remote
                    }
                    Some("container") => {
                        let image = b.image.clone().unwrap_or_default();
                        if image.trim().is_empty() {
                            self.add(format!("{at}.image"), "missing: a container backend needs its image, like image = \"localhost/my-mcp:1\"");
                        }
                        RuntimeKind::Container(ContainerSpec {
                            image,
                            command: b.command.clone(),
                            args: b.args.clone(),
                            env: b.env.clone(),
                            labels: b.labels.clone(),
                            port: b.port,
                            network: b.network.clone(),
                        })
                    }
                    Some(other) => {
                        self.add(format!("{at}.runtime"), format!("unknown value `{other}`: use \"remote\" (the default for http) or \"container\""));
                        RuntimeKind::Remote
                    }
                };
                (
                    Transport::Http {
                        url,
                        headers: b.headers,
                        keep_alive: b.keep_alive.unwrap_or(true),
                    },
                    runtime,
                )
            }
            Some(other) => {
                self.add(
                    format!("{at}.transport"),
                    format!("unknown value `{other}`: use \"stdio\" or \"http\""),
                );
                return None;
            }
            None => {
                self.add(
                    format!("{at}.transport"),
                    "missing: set transport = \"stdio\" or \"http\"",
                );
                return None;
            }
        };
        let roots = self.roots(at, &b.roots);
        if let Some(u) = &update {
            self.update_fits(at, u, &runtime);
        }
        (self.0.len() == before).then_some(BackendConfig {
            name,
            transport,
            runtime,
            request_timeout,
            protocol,
            health,
            restart,
            pin,
            update,
            forward_auth,
            passthrough,
            token_exchange,
            session_idle,
            share,
            probes,
            roots,
            substituted,
        })
    }

    /// `roots` as `file://` URIs: each an absolute path or such a URI.
    fn roots(&mut self, at: &str, raw: &[String]) -> Vec<String> {
        let mut out = Vec::new();
        for (i, r) in raw.iter().enumerate() {
            let uri = if r.starts_with("file://") {
                url::Url::parse(r).ok().filter(|u| u.scheme() == "file")
            } else {
                url::Url::from_file_path(r).ok()
            };
            match uri {
                Some(u) => out.push(u.to_string()),
                None => self.add(
                    format!("{at}.roots[{i}]"),
                    format!("`{r}` is neither an absolute path nor a file:// URI: write roots = [\"/srv/docs\"]"),
                ),
            }
        }
        out
    }

    /// `b` with the `${NAME}` references of its `command`, `args`, `env`,
    /// `cwd`, `url` and `headers` expanded from `lookup`; a problem at the
    /// key for each that cannot be.
    fn expand_backend(
        &mut self,
        at: &str,
        mut b: RawBackend,
        lookup: Lookup<'_>,
        noted: &mut Vec<String>,
    ) -> RawBackend {
        b.command = b
            .command
            .map(|v| self.expand_value(&format!("{at}.command"), v, lookup, noted));
        b.args = std::mem::take(&mut b.args)
            .into_iter()
            .enumerate()
            .map(|(i, v)| self.expand_value(&format!("{at}.args[{i}]"), v, lookup, noted))
            .collect();
        b.env = std::mem::take(&mut b.env)
            .into_iter()
            .map(|(k, v)| {
                let v = self.expand_value(&format!("{at}.env.{k}"), v, lookup, noted);
                (k, v)
            })
            .collect();
        b.cwd = b
            .cwd
            .map(|v| self.expand_value(&format!("{at}.cwd"), v, lookup, noted));
        b.url = b
            .url
            .map(|v| self.expand_value(&format!("{at}.url"), v, lookup, noted));
        b.headers = std::mem::take(&mut b.headers)
            .into_iter()
            .map(|(k, v)| {
                let v = self.expand_value(&format!("{at}.headers.{k}"), v, lookup, noted);
                (k, v)
            })
            .collect();
        b
    }

    fn has(&self, key: &str) -> bool {
        self.0.iter().any(|p| p.key == key)
    }

    fn expand_value(
        &mut self,
        key: &str,
        value: String,
        lookup: Lookup<'_>,
        noted: &mut Vec<String>,
    ) -> String {
        let errors: Vec<RefError> = match lookup {
            Some(env) => {
                match expand::expand_noting(&value, env, &mut |v| noted.push(v.to_owned())) {
                    Ok(v) => return v,
                    Err(errors) => errors,
                }
            }
            None => expand::check(&value),
        };
        for e in errors {
            self.add(key, e.to_string());
        }
        value
    }

    fn refuse<const N: usize>(&mut self, at: &str, why: &str, keys: [(&str, bool); N]) {
        for (key, present) in keys {
            if present {
                self.add(format!("{at}.{key}"), format!("{why}; remove it"));
            }
        }
    }

    fn refuse_container_keys(&mut self, at: &str, b: &RawBackend, why: &str) {
        self.refuse(
            at,
            why,
            [
                ("image", b.image.is_some()),
                ("labels", !b.labels.is_empty()),
                ("port", b.port.is_some()),
                ("network", b.network.is_some()),
            ],
        );
    }
}
