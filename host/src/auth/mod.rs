//! Who is calling the MCP endpoint.
//!
//! - this file: [`Principal`], the caller as policy and the audit see it,
//!   and [`Keys`], the live set of `[[auth.keys]]` matched in constant time;
//! - `mcp.rs`: the `/mcp` middleware that asks for credentials, answers
//!   the MCP authorization spec's 401s, and binds each session to the
//!   principal that opened it;
//! - `oauth/`: access tokens of trusted authorization servers
//!   (`[auth.oauth]`): discovery, signing keys, validation, a cache;
//! - `exchange.rs`: RFC 8693 token exchange, so a `forward_auth` backend
//!   gets a token for its own audience, never the client's for Vigil;
//! - `metadata.rs`: the protected resource metadata (RFC 9728) that
//!   tells clients where to get tokens;
//! - `throttle.rs`: the cool-down for addresses that keep sending unknown
//!   credentials, one table per listener (the control API has its own).
//!
//! Without `[auth]` every caller is [`Principal::local`] (config validation
//! allows that only on a loopback listener, or with `allow_anonymous`).

pub mod exchange;
pub mod mcp;
pub mod metadata;
pub mod oauth;
pub mod throttle;

use std::sync::Arc;

use arc_swap::ArcSwap;
use subtle::ConstantTimeEq;

use crate::config::ApiKey;

/// The `Authorization` value (`Bearer <token>`) a request to `/mcp` was
/// authenticated with when it carried an `[auth.oauth]` token (never a
/// key), kept in the request for the token exchange or passthrough of
/// `forward_auth` backends after the header itself is removed.
#[derive(Clone)]
pub struct InboundToken(pub Arc<str>);

impl std::fmt::Debug for InboundToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InboundToken(..)")
    }
}

/// Who a caller is, as every per-caller structure keys it (lanes, rate
/// buckets, MRTR state, lane logs, the audit): its id *and* the issuer
/// that vouched for it. Two authorization servers may well each have an
/// `alice`; they are two callers. Cheap to clone.
///
/// It serializes for a request one replica routes to another (an MRTR
/// retry, `gateway::mrtr::routed`): the replicas of a cluster share the
/// store and the keys, and take each other's word for who called.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(from = "CallerParts", into = "CallerParts")]
pub struct CallerKey {
    /// `local` (no `[auth]`, or stdio), `key:NAME`, `sub:SUBJECT`.
    id: Arc<str>,
    /// The authorization server that vouched for `sub:` principals.
    issuer: Option<Arc<str>>,
}

/// A [`CallerKey`] as it is written.
#[derive(serde::Serialize, serde::Deserialize)]
struct CallerParts {
    id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    issuer: Option<String>,
}

impl From<CallerParts> for CallerKey {
    fn from(p: CallerParts) -> CallerKey {
        CallerKey {
            id: p.id.into(),
            issuer: p.issuer.map(Into::into),
        }
    }
}

impl From<CallerKey> for CallerParts {
    fn from(k: CallerKey) -> CallerParts {
        CallerParts {
            id: k.id.to_string(),
            issuer: k.issuer.map(|i| i.to_string()),
        }
    }
}

impl CallerKey {
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn issuer(&self) -> Option<&str> {
        self.issuer.as_deref()
    }

    /// The key as bytes no other key has (each part length-prefixed), for
    /// what is signed over it (MRTR state).
    pub fn unambiguous(&self) -> String {
        let issuer = self.issuer.as_deref().unwrap_or("");
        format!("{}:{}{}:{}", self.id.len(), self.id, issuer.len(), issuer)
    }
}

impl std::fmt::Display for CallerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.issuer {
            Some(issuer) => write!(f, "{} of {issuer}", self.id),
            None => f.write_str(&self.id),
        }
    }
}

/// A caller of the MCP endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal {
    caller: CallerKey,
    /// What else policy may match the caller by: `group:NAME` and
    /// `scope:NAME` of its token.
    memberships: Arc<[Arc<str>]>,
}

impl Principal {
    /// The user who started Vigil: stdio mode, or HTTP without `[auth]`.
    /// Cheap: every request without `[auth]` carries it.
    pub fn local() -> Self {
        static LOCAL: std::sync::LazyLock<Principal> =
            std::sync::LazyLock::new(|| Principal::named("local".into()));
        LOCAL.clone()
    }

    fn named(id: Arc<str>) -> Self {
        static NONE: std::sync::LazyLock<Arc<[Arc<str>]>> =
            std::sync::LazyLock::new(|| Arc::from(Vec::new()));
        Principal {
            caller: CallerKey { id, issuer: None },
            memberships: NONE.clone(),
        }
    }

    /// The caller of an MCP request, as `/mcp`'s authentication put it in
    /// the HTTP request (`extensions` of an rmcp request context); a
    /// request without one (stdio) is [`Principal::local`].
    pub fn of(extensions: &rmcp::model::Extensions) -> Self {
        extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.extensions.get::<Principal>())
            .cloned()
            .unwrap_or_else(Principal::local)
    }

    /// The principal of `[[auth.keys]]` entry `name`.
    pub fn key(name: &str) -> Self {
        Principal::named(format!("key:{name}").into())
    }

    /// The subject of an access token `issuer` vouched for, with its
    /// groups and scopes.
    pub fn subject<'a>(
        issuer: &str,
        subject: &str,
        groups: impl IntoIterator<Item = &'a str>,
        scopes: impl IntoIterator<Item = &'a str>,
    ) -> Self {
        let memberships: Vec<Arc<str>> = groups
            .into_iter()
            .map(|g| format!("group:{g}").into())
            .chain(scopes.into_iter().map(|s| format!("scope:{s}").into()))
            .collect();
        Principal {
            caller: CallerKey {
                id: format!("sub:{subject}").into(),
                issuer: Some(issuer.into()),
            },
            memberships: memberships.into(),
        }
    }

    /// `local`, `key:NAME`, `sub:SUBJECT`: what policy patterns match and
    /// people read. Not a key: two issuers may have the same id
    /// ([`Principal::caller`]).
    pub fn id(&self) -> &str {
        &self.caller.id
    }

    /// Who the caller is, for every per-caller structure.
    pub fn caller(&self) -> &CallerKey {
        &self.caller
    }

    /// The issuer of a `sub:` principal's token.
    pub fn issuer(&self) -> Option<&str> {
        self.caller.issuer()
    }

    /// The caller's `group:` and `scope:` names.
    pub fn memberships(&self) -> &[Arc<str>] {
        &self.memberships
    }

    /// Whether `other` is the same caller: same id from the same issuer,
    /// whatever its groups or scopes are now (a refreshed token may carry
    /// others, and still continues the caller's session).
    pub fn same_caller(&self, other: &Principal) -> bool {
        self.caller == other.caller
    }
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.caller.fmt(f)
    }
}

/// The live `[[auth.keys]]`: read on every request, replaced whole by a
/// config reload (a removed or rotated key is refused from the next
/// request on).
#[derive(Debug)]
pub struct Keys(ArcSwap<Vec<ApiKey>>);

impl Keys {
    pub fn new(keys: Vec<ApiKey>) -> Self {
        Keys(ArcSwap::from_pointee(keys))
    }

    /// Puts `next` in force; `false` when it is the set in force already.
    pub fn replace(&self, next: Vec<ApiKey>) -> bool {
        if **self.0.load() == next {
            return false;
        }
        self.0.store(Arc::new(next));
        true
    }

    /// The set in force now.
    pub fn current(&self) -> Arc<Vec<ApiKey>> {
        self.0.load_full()
    }

    /// Whether any key is configured (then every request needs one).
    pub fn required(&self) -> bool {
        !self.0.load().is_empty()
    }

    /// The principal whose key is `secret`. Every key is compared, in
    /// constant time, so timing tells neither which key nor how much of it
    /// matched.
    pub fn find(&self, secret: &str) -> Option<Principal> {
        let keys = self.0.load();
        let mut found = None;
        for k in keys.iter() {
            if bool::from(k.secret.as_bytes().ct_eq(secret.as_bytes())) {
                found = Some(Principal::key(&k.name));
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str, secret: &str) -> ApiKey {
        ApiKey {
            name: name.into(),
            secret: secret.into(),
        }
    }

    #[test]
    fn a_key_names_its_principal_and_only_the_whole_secret_matches() {
        let keys = Keys::new(vec![
            key("ci-bot", "s3cret-s3cret-s3cret"),
            key("ops", "other-other-other-1"),
        ]);
        assert!(keys.required());
        assert_eq!(
            keys.find("s3cret-s3cret-s3cret"),
            Some(Principal::key("ci-bot"))
        );
        assert_eq!(keys.find("s3cret-s3cret-s3cre"), None);
        assert_eq!(keys.find("s3cret-s3cret-s3cret "), None);
        assert_eq!(keys.find(""), None);
        assert_eq!(Principal::key("ci-bot").id(), "key:ci-bot");
    }

    #[test]
    fn a_replaced_set_refuses_the_old_key_at_once() {
        let keys = Keys::new(vec![key("a", "first-first-first-1")]);
        assert!(keys.replace(vec![key("a", "second-second-second")]));
        assert!(!keys.replace(vec![key("a", "second-second-second")]));
        assert_eq!(keys.find("first-first-first-1"), None);
        assert_eq!(keys.find("second-second-second"), Some(Principal::key("a")));
        assert!(keys.replace(Vec::new()));
        assert!(!keys.required());
    }
}
