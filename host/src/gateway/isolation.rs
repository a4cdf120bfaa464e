//! Where clients of different people would share a backend's per-session
//! state because Vigil cannot tell them apart.
//!
//! A 2026-07-28 client has no session: Vigil keeps what a backend holds
//! for it on a backend session (or an instance, `share`) of its *caller*.
//! Without `[auth]` every client is the one anonymous caller, so all of
//! them share it. That is said at `vigil serve` (once the backends
//! settled), in `vigil status`, and by `vigil check` for what the config
//! alone shows (a pinned handshake revision: `check` starts nothing).

use crate::backend::Backend;
use crate::config::{AuthConfig, BackendConfig, Protocol, Share, Transport};

/// Why a backend's 2026-07-28 clients share state without `[auth]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    /// An HTTP backend Vigil speaks the handshake era to (pinned, or it
    /// answered 2026-07-28 clients only that way).
    HandshakeOnly,
    /// A stdio backend with instances per client: a sessionless client's
    /// is its caller's.
    PerCallerInstance,
}

fn warning(backend: &str, why: Why) -> String {
    let how = match why {
        Why::HandshakeOnly => {
            "is spoken to in the handshake era only, so each 2026-07-28 client runs on a backend session of its caller"
        }
        Why::PerCallerInstance => {
            "runs an instance per client, and a 2026-07-28 client (which has no session) gets its caller's"
        }
    };
    format!(
        "backend '{backend}' {how}; without [auth] every client is the same anonymous caller, so all 2026-07-28 clients share what the server keeps per session. Configure [auth] (keys or OAuth) to keep callers apart: see docs/security.md"
    )
}

/// What the config alone shows (`vigil check`).
pub fn pinned(auth: &AuthConfig, backends: &[BackendConfig]) -> Vec<String> {
    if auth.required() {
        return Vec::new();
    }
    backends
        .iter()
        .filter_map(|b| of_config(b, false).map(|why| warning(&b.name, why)))
        .collect()
}

/// What a running gateway knows (`vigil serve`, `vigil status`).
/// `authenticated`: `/mcp` needs credentials now (keys or OAuth).
pub fn running<'a>(
    authenticated: bool,
    backends: impl Iterator<Item = &'a std::sync::Arc<Backend>>,
) -> Vec<String> {
    if authenticated {
        return Vec::new();
    }
    backends
        .filter_map(|b| {
            of_config(&b.config, b.serving().bridges_modern()).map(|why| warning(&b.name, why))
        })
        .collect()
}

/// `bridged`: the backend answered a 2026-07-28 client only in the
/// handshake era on its current instance.
fn of_config(b: &BackendConfig, bridged: bool) -> Option<Why> {
    match &b.transport {
        Transport::Http { .. } if b.forward_auth => None,
        Transport::Http { .. } => {
            (matches!(b.protocol, Protocol::Handshake(_)) || bridged).then_some(Why::HandshakeOnly)
        }
        Transport::Stdio { .. } => (b.share != Share::All).then_some(Why::PerCallerInstance),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backends(toml: &str) -> Vec<BackendConfig> {
        crate::config::Config::parse(toml, std::path::Path::new("vigil.toml"))
            .unwrap()
            .backends
    }

    #[test]
    fn pinned_handshake_and_per_client_instances_warn_without_auth_only() {
        let b = backends(
            r#"
            [[backends]]
            name = "old"
            transport = "http"
            url = "http://127.0.0.1:1/mcp"
            protocol = "2025-11-25"
            [[backends]]
            name = "auto"
            transport = "http"
            url = "http://127.0.0.1:2/mcp"
            [[backends]]
            name = "mem"
            transport = "stdio"
            command = "x"
            share = "session"
            [[backends]]
            name = "all"
            transport = "stdio"
            command = "x"
            "#,
        );
        let w = pinned(&AuthConfig::default(), &b);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].starts_with("backend 'old' ") && w[0].contains("[auth]"),
            "{w:?}"
        );
        assert!(w[1].starts_with("backend 'mem' "), "{w:?}");
        let with_keys = AuthConfig {
            keys: vec![crate::config::ApiKey {
                name: "a".into(),
                secret: "s".into(),
            }],
            ..AuthConfig::default()
        };
        assert!(pinned(&with_keys, &b).is_empty());
        assert_eq!(of_config(&b[1], false), None, "auto, not yet seen bridging");
        assert_eq!(of_config(&b[1], true), Some(Why::HandshakeOnly));
    }
}
