//! Who is calling: `Authorization: Bearer <secret>` matched in constant
//! time against the configured `[[api.tokens]]`, or — with no tokens
//! configured — everyone is the operator `local` (config validation only
//! allows that on a loopback listener).

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use subtle::ConstantTimeEq;

use super::ApiError;
use crate::config::{ApiToken, Role};

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
/// answers 401. Roles are checked by the handlers, which know the action.
pub async fn authenticate(
    State(tokens): State<std::sync::Arc<Vec<ApiToken>>>,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let principal = if tokens.is_empty() {
        Principal::local()
    } else {
        let given = bearer(&req).ok_or(ApiError::Unauthorized(
            "missing bearer token: send `Authorization: Bearer <token>`",
        ))?;
        let token = find(&tokens, given).ok_or(ApiError::Unauthorized("unknown token"))?;
        Principal {
            name: token.name.clone(),
            role: token.role,
        }
    };
    req.extensions_mut().insert(principal);
    Ok(next.run(req).await)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
