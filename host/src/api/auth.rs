//! Who is calling: `Authorization: Bearer <secret>` matched in constant
//! time against the configured `[[api.tokens]]`, or — with no tokens
//! configured — everyone is the operator `local` (config validation only
//! allows that on a loopback listener).
//!
//! The token set is [`Tokens`], which a config reload replaces whole: a
//! rotated secret is refused from the next request on. Unknown tokens are
//! counted per client address by the [`Throttle`].

use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use subtle::ConstantTimeEq;
use tokio::time::Instant;

use super::ApiError;
use crate::auth::throttle::{Client, Throttle};
use crate::config::{ApiRoles, ApiToken, Role};

/// The live `[[api.tokens]]`, shared by the API (which reads them on every
/// request) and the gateway (whose config reload replaces them).
#[derive(Debug)]
pub struct Tokens(ArcSwap<Vec<ApiToken>>);

// === impl Tokens ===

impl Tokens {
    pub fn new(tokens: Vec<ApiToken>) -> Self {
        Tokens(ArcSwap::from_pointee(tokens))
    }

    /// The set in force now.
    pub fn current(&self) -> Arc<Vec<ApiToken>> {
        self.0.load_full()
    }

    /// Puts `next` in force; `false` (and nothing changes) when it is the
    /// set already in force, names, secrets and roles alike.
    pub fn replace(&self, next: Vec<ApiToken>) -> bool {
        if **self.0.load() == next {
            return false;
        }
        self.0.store(Arc::new(next));
        true
    }
}

/// What [`authenticate`] needs.
pub(super) struct Auth {
    pub(super) tokens: Arc<Tokens>,
    pub(super) throttle: Throttle,
    /// With `[api] roles`: the validator of `[auth.oauth]` tokens.
    pub(super) oauth: Option<Arc<crate::auth::oauth::OAuth>>,
    pub(super) roles: ApiRoles,
}

/// The role `[api] roles` gives `p`, if any (operator first).
fn role_of(roles: &ApiRoles, p: &crate::auth::Principal) -> Option<Role> {
    let named = |patterns: &[String]| {
        patterns.iter().any(|pattern| {
            pattern == "*"
                || crate::policy::matches(pattern, p.id())
                || p.memberships()
                    .iter()
                    .any(|m| crate::policy::matches(pattern, m))
        })
    };
    if named(&roles.operator) {
        Some(Role::Operator)
    } else if named(&roles.viewer) {
        Some(Role::Viewer)
    } else {
        None
    }
}

/// The principal of the unauthenticated loopback mode.
pub const LOCAL: &str = "local";

/// The caller of a request, put in the request's extensions by
/// [`authenticate`]; handlers take it with `Extension<Principal>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The token's name (the audit log's principal), or [`LOCAL`].
    pub name: String,
    pub role: Role,
}

// === impl Principal ===

impl Principal {
    pub fn local() -> Self {
        Principal {
            name: LOCAL.to_owned(),
            role: Role::Operator,
        }
    }

    /// `Forbidden` unless this principal may act on backends.
    pub fn require_operator(&self) -> Result<(), ApiError> {
        match self.role {
            Role::Operator => Ok(()),
            Role::Viewer => Err(ApiError::Forbidden(format!(
                "token '{}' has the viewer role; this needs an operator token",
                self.name
            ))),
        }
    }
}

/// The principal whose secret is `given`, if any.
///
/// Every configured secret is compared, in constant time per byte, whether
/// or not an earlier one matched; only the lengths of the secrets can show
/// in the timing. Empty secrets never match.
pub fn find<'a>(tokens: &'a [ApiToken], given: &str) -> Option<&'a ApiToken> {
    let mut found = None;
    for t in tokens {
        let equal: bool = t.secret.as_bytes().ct_eq(given.as_bytes()).into();
        if equal && !t.secret.is_empty() {
            found = Some(t);
        }
    }
    found
}

/// The token of an `Authorization: Bearer <token>` header (scheme
/// case-insensitive), if the header is there and well formed.
fn bearer(req: &Request) -> Option<&str> {
    let value = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Middleware: resolves the caller into a [`Principal`] extension or
/// answers 401 (429 while the caller's address is in a cool-down). Roles
/// are checked by the handlers, which know the action.
pub(super) async fn authenticate(
    State(auth): State<Arc<Auth>>,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let tokens = auth.tokens.current();
    let principal = if tokens.is_empty() && auth.oauth.is_none() {
        Principal::local()
    } else {
        let client = req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(Client::Unknown, |ConnectInfo(peer)| Client::of(peer.ip()));
        if let Err(left) = auth.throttle.check(client, Instant::now()) {
            return Err(ApiError::Throttled {
                address: client.to_string(),
                retry_after_secs: left.as_secs() + u64::from(left.subsec_nanos() > 0),
            });
        }
        let given = bearer(&req).ok_or(ApiError::Unauthorized(
            "missing bearer token: send `Authorization: Bearer <token>`",
        ))?;
        match find(&tokens, given) {
            Some(token) => Principal {
                name: token.name.clone(),
                role: token.role,
            },
            None => match &auth.oauth {
                None => {
                    auth.throttle.failed(client, Instant::now());
                    return Err(ApiError::Unauthorized("unknown token"));
                }
                Some(oauth) => oauth_principal(auth.as_ref(), oauth, given, client).await?,
            },
        }
    };
    req.extensions_mut().insert(principal);
    Ok(next.run(req).await)
}

/// The API principal of an `[auth.oauth]` token: its `sub:` name, with
/// the role `[api] roles` gives it.
async fn oauth_principal(
    auth: &Auth,
    oauth: &crate::auth::oauth::OAuth,
    token: &str,
    client: Client,
) -> Result<Principal, ApiError> {
    use crate::auth::oauth::Refusal;
    let p = match oauth.validate(token).await {
        Ok(p) => p,
        Err(Refusal::Invalid { why, counts }) => {
            if counts {
                auth.throttle.failed(client, Instant::now());
            }
            return Err(ApiError::InvalidToken(why));
        }
        Err(Refusal::Scope(missing)) => {
            return Err(ApiError::Forbidden(format!(
                "the token lacks the scope {}",
                missing.join(" ")
            )));
        }
        Err(Refusal::Unavailable(why)) => return Err(ApiError::Unavailable(why)),
    };
    match role_of(&auth.roles, &p) {
        Some(role) => Ok(Principal {
            name: p.id().to_owned(),
            role,
        }),
        None => Err(ApiError::Forbidden(format!(
            "{} has no role here: [api] roles names none of its principals ({})",
            p.id(),
            p.memberships().join(", ")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_come_from_the_principal_and_its_groups_operator_first() {
        let roles = ApiRoles {
            operator: vec!["group:ops".into(), "sub:root".into()],
            viewer: vec!["group:dev*".into()],
        };
        let p = |sub: &str, groups: &[&str]| {
            crate::auth::Principal::subject("http://idp", sub, groups.iter().copied(), [])
        };
        assert_eq!(
            role_of(&roles, &p("olga", &["ops", "dev"])),
            Some(Role::Operator)
        );
        assert_eq!(role_of(&roles, &p("root", &[])), Some(Role::Operator));
        assert_eq!(role_of(&roles, &p("dana", &["devs"])), Some(Role::Viewer));
        assert_eq!(role_of(&roles, &p("eve", &["sales"])), None);
    }

    fn token(name: &str, secret: &str, role: Role) -> ApiToken {
        ApiToken {
            name: name.into(),
            secret: secret.into(),
            role,
        }
    }

    #[test]
    fn find_matches_whole_secret_only() {
        let tokens = [
            token("ops", "operator-secret-123", Role::Operator),
            token("view", "viewer-secret-4567", Role::Viewer),
        ];
        assert_eq!(
            find(&tokens, "viewer-secret-4567").map(|t| t.name.as_str()),
            Some("view")
        );
        assert_eq!(
            find(&tokens, "operator-secret-123").map(|t| t.name.as_str()),
            Some("ops")
        );
        assert!(find(&tokens, "operator-secret-12").is_none());
        assert!(find(&tokens, "operator-secret-1234").is_none());
        assert!(find(&tokens, "").is_none());
        assert!(find(&[token("empty", "", Role::Operator)], "").is_none());
    }

    #[test]
    fn replacing_tokens_compares_secrets_not_just_the_count() {
        let old = vec![token("ops", "operator-secret-123", Role::Operator)];
        let set = Tokens::new(old.clone());
        assert!(!set.replace(old), "the same set is no change");
        let rotated = vec![token("ops", "operator-secret-456", Role::Operator)];
        assert!(set.replace(rotated.clone()));
        assert_eq!(*set.current(), rotated);
        assert!(set.replace(vec![token("ops", "operator-secret-456", Role::Viewer)]));
    }
}
