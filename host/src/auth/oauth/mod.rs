//! `[auth.oauth]`: access tokens of trusted authorization servers.
//!
//! [`OAuth::validate`] turns a bearer token into a [`Principal`] or a
//! [`Refusal`] that says which answer the client gets (401
//! `invalid_token`, 403 `insufficient_scope`, 503 while an issuer cannot
//! be reached). A JWT is checked with `jsonwebtoken` against the keys its
//! issuer publishes (`issuer.rs`): the signature with an asymmetric
//! algorithm only, `iss` one of the trusted issuers, `aud` the configured
//! `resource`, `exp` and `nbf` within `clock_skew`, and the required
//! scopes. A token that is not a JWT is asked about at the issuer's
//! introspection endpoint when `introspection` is configured
//! (`introspect.rs`), and refused otherwise. Validated tokens are cached
//! by hash until they expire (`cache.rs`).

mod cache;
mod claims;
mod introspect;
pub mod issuer;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{AlgorithmFamily, Validation};

use self::cache::TokenCache;
use self::issuer::{Issuer, NoKey};
use super::Principal;
use crate::config::OAuthConfig;

/// Why a token is not accepted, and so how the client is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// 401 `invalid_token`. `counts`: whether it counts towards the
    /// address's cool-down (an expired token of a real client does not).
    Invalid { why: String, counts: bool },
    /// 403 `insufficient_scope`: the scopes the token lacks.
    Scope(Vec<String>),
    /// 503: the token cannot be checked now (its issuer is unreachable
    /// and no key of it is known).
    Unavailable(String),
}

fn invalid(why: impl Into<String>) -> Refusal {
    Refusal::Invalid {
        why: why.into(),
        counts: true,
    }
}

/// The validator of `[auth.oauth]`: one per Vigil process, shared by
/// `/mcp` and the control API.
pub struct OAuth {
    config: OAuthConfig,
    issuers: Vec<Arc<Issuer>>,
    cache: TokenCache,
    http: reqwest::Client,
}

/// Longest a validated token is trusted without being checked again, even
/// when it expires later: an introspected token may be revoked.
const CACHE_AT_MOST: Duration = Duration::from_secs(300);
/// Same, for introspected tokens.
const INTROSPECTED_AT_MOST: Duration = Duration::from_secs(60);

impl OAuth {
    pub fn new(config: OAuthConfig) -> Arc<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap_or_default();
        let issuers = config
            .issuers
            .iter()
            .map(|u| Arc::new(Issuer::new(u.clone(), http.clone())))
            .collect();
        Arc::new(OAuth {
            config,
            issuers,
            cache: TokenCache::new(),
            http,
        })
    }

    /// A validator over issuers built by the caller (tests: keys known
    /// without a server).
    #[cfg(test)]
    fn with_issuers(config: OAuthConfig, issuers: Vec<Issuer>) -> Self {
        OAuth {
            config,
            issuers: issuers.into_iter().map(Arc::new).collect(),
            cache: TokenCache::new(),
            http: reqwest::Client::new(),
        }
    }

    pub fn config(&self) -> &OAuthConfig {
        &self.config
    }

    /// Fetches every issuer's metadata and keys now, then keeps them
    /// fresh until `stop`: a failed issuer is retried with backoff (from
    /// 1 s to a minute), a reachable one refreshed every
    /// [`issuer::REFRESH_EVERY`]. Start-up never waits on it.
    pub fn spawn_refresh(
        &self,
        tracker: &tokio_util::task::TaskTracker,
        stop: tokio_util::sync::CancellationToken,
    ) {
        for issuer in &self.issuers {
            let (issuer, stop) = (issuer.clone(), stop.clone());
            tracker.spawn(async move {
                let mut backoff = Duration::from_secs(1);
                loop {
                    let wait = match issuer.refresh(true).await {
                        Ok(()) => {
                            backoff = Duration::from_secs(1);
                            issuer::REFRESH_EVERY
                        }
                        Err(_) => {
                            let w = backoff;
                            backoff = (backoff * 2).min(Duration::from_secs(60));
                            w
                        }
                    };
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
            });
        }
    }

    /// The principal `token` vouches for, or why it does not.
    pub async fn validate(&self, token: &str) -> Result<Principal, Refusal> {
        let key = cache::hash(token);
        let now = SystemTime::now();
        if let Some(p) = self.cache.get(&key, now) {
            return Ok(p);
        }
        let (claims, until) = if looks_like_jwt(token) {
            let claims = self.jwt(token).await?;
            let until = claims
                .exp
                .map(|e| cache::expiry(e, now, CACHE_AT_MOST))
                .unwrap_or(now);
            (claims, until)
        } else if let Some(creds) = &self.config.introspection {
            let claims = introspect::introspect(self, creds, token).await?;
            let until = claims
                .exp
                .map(|e| cache::expiry(e, now, INTROSPECTED_AT_MOST))
                .unwrap_or(now + INTROSPECTED_AT_MOST);
            (claims, until)
        } else {
            return Err(invalid(
                "the token is not a JWT, and [auth.oauth] has no introspection for other tokens",
            ));
        };
        let principal = claims.principal(&self.config)?;
        self.cache.put(key, principal.clone(), until, now);
        Ok(principal)
    }

    /// Checks a JWT: header, issuer, key, signature, claims.
    async fn jwt(&self, token: &str) -> Result<claims::Claims, Refusal> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| {
            invalid(format!(
                "the token's header cannot be read ({e}); alg none is refused"
            ))
        })?;
        if header.alg.family() == AlgorithmFamily::Hmac {
            return Err(invalid(format!(
                "the token is signed with {:?}, a shared-secret algorithm; Vigil accepts tokens signed with the issuer's published public keys only",
                header.alg
            )));
        }
        // Which issuer to ask for keys: read from the unverified token,
        // then verified with the key (`iss` is part of the validation).
        let unverified = jsonwebtoken::dangerous::insecure_decode::<claims::Peek>(token)
            .map_err(|e| invalid(format!("the token's claims cannot be read ({e})")))?;
        let iss = unverified.claims.iss.unwrap_or_default();
        let Some(issuer) = self.issuers.iter().find(|i| i.url == iss) else {
            return Err(invalid(
                "the token's issuer (iss) is not one of [auth.oauth] issuers",
            ));
        };
        let keys = issuer
            .keys_for(header.kid.as_deref(), header.alg)
            .await
            .map_err(|e| match e {
                NoKey::Unknown => invalid(
                    "the token is signed with a key its issuer does not publish (unknown kid)",
                ),
                NoKey::Unreachable(why) => Refusal::Unavailable(format!(
                    "the signing keys of the token's issuer cannot be fetched now ({why}); retry later"
                )),
            })?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&issuer.url]);
        validation.set_audience(&[&self.config.resource]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.leeway = self.config.clock_skew.as_secs();
        validation.validate_nbf = true;
        let mut last = None;
        for (set, i) in keys {
            match jsonwebtoken::decode::<claims::Claims>(token, &set[i].key, &validation) {
                Ok(data) => return Ok(data.claims),
                Err(e) => last = Some(e),
            }
        }
        Err(refusal_of(last.map(|e| e.into_kind())))
    }

    fn issuers(&self) -> &[Arc<Issuer>] {
        &self.issuers
    }

    /// POSTs the form `body` to `endpoint` of an issuer, authenticated as
    /// a client with HTTP Basic (RFC 6749 §2.3.1): the status and at most
    /// `limit` bytes of the answer.
    pub(super) async fn post_form(
        &self,
        endpoint: &str,
        client_id: &str,
        secret: &str,
        body: String,
        limit: usize,
    ) -> Result<(http::StatusCode, Vec<u8>), String> {
        let response = self
            .http
            .post(endpoint)
            .basic_auth(client_id, Some(secret))
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .header(http::header::ACCEPT, "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| format!("POST {endpoint}: {e}"))?;
        let status = response.status();
        let bytes = issuer::read_limited(response, limit)
            .await
            .map_err(|e| format!("POST {endpoint}: {e}"))?;
        Ok((status, bytes))
    }

    /// The metadata of trusted issuer `url`.
    pub(super) async fn metadata_of(&self, url: &str) -> Result<Arc<issuer::Metadata>, String> {
        let issuer = self
            .issuers
            .iter()
            .find(|i| i.url == url)
            .ok_or_else(|| format!("{url} is not one of [auth.oauth] issuers"))?;
        issuer.metadata().await
    }
}

/// The answer for a JWT the library refused.
fn refusal_of(kind: Option<ErrorKind>) -> Refusal {
    let resource_hint = "the token's audience (aud) is not this server's resource: request the token with resource set to it";
    match kind {
        Some(ErrorKind::ExpiredSignature) => Refusal::Invalid {
            why: "the token expired".into(),
            counts: false,
        },
        Some(ErrorKind::ImmatureSignature) => invalid("the token is not valid yet (nbf)"),
        Some(ErrorKind::InvalidAudience) => invalid(resource_hint),
        Some(ErrorKind::InvalidIssuer) => invalid("the token's issuer (iss) does not match"),
        Some(ErrorKind::InvalidSignature) => invalid("the token's signature does not verify"),
        Some(ErrorKind::MissingRequiredClaim(c)) => {
            invalid(format!("the token has no `{c}` claim"))
        }
        Some(ErrorKind::InvalidAlgorithm) => {
            invalid("the token's algorithm does not match its key")
        }
        Some(other) => invalid(format!("the token is not valid ({other:?})")),
        None => invalid("the token is signed with a key its issuer does not publish"),
    }
}

/// Three base64url segments: the JWS compact form.
fn looks_like_jwt(token: &str) -> bool {
    token.split('.').count() == 3
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'='))
}

#[cfg(test)]
mod tests;
