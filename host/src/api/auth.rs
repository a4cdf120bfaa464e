//! Who is calling: a bearer token from `[[api.tokens]]`, or — when no tokens
//! are configured (the API then listens on loopback only) — `local`, an
//! operator.

use axum::http::HeaderMap;

use super::error::ApiError;
use crate::config::{ApiToken, Role};

/// The caller of one API request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The token's name (recorded in the audit log), or `local`.
    pub name: String,
    pub role: Role,
}

pub fn authenticate(headers: &HeaderMap, tokens: &[ApiToken]) -> Result<Principal, ApiError> {
    if tokens.is_empty() {
        return Ok(Principal { name: "local".into(), role: Role::Operator });
    }
    let Some(value) = headers.get(axum::http::header::AUTHORIZATION) else {
        return Err(ApiError::unauthorized("missing bearer token: send `Authorization: Bearer <token>`"));
    };
    let presented = value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim)
        .ok_or_else(|| ApiError::unauthorized("malformed Authorization header: use `Bearer <token>`"))?;
    // Compare against every token, in constant time each, so timing tells
    // nothing about which prefix matched.
    let mut found = None;
    for t in tokens {
        if constant_time_eq(t.secret.as_bytes(), presented.as_bytes()) {
            found = Some(t);
        }
    }
    found
        .map(|t| Principal { name: t.name.clone(), role: t.role })
        .ok_or_else(|| ApiError::unauthorized("unknown token"))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_only_when_equal() {
        assert!(constant_time_eq(b"abcdef", b"abcdef"));
        assert!(!constant_time_eq(b"abcdef", b"abcdeg"));
        assert!(!constant_time_eq(b"abc", b"abcdef"));
    }
}
