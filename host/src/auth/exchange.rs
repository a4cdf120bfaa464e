//! RFC 8693 token exchange for `forward_auth` backends under
//! `[auth.oauth]`: the client's access token (for Vigil) is traded at its
//! issuer's token endpoint for one whose audience is the backend's own, so
//! no backend ever sees a token minted for Vigil.
//!
//! Exchanged tokens are cached per (principal, backend) until shortly
//! before they expire ([`EARLY`]); a client's refreshed token of the same
//! principal uses the cached one. Vigil authenticates as the backend's
//! `token_exchange.client_id` (HTTP Basic).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::oauth::OAuth;
use super::{CallerKey, Principal};
use crate::config::TokenExchange;

/// How long before it expires an exchanged token is replaced.
const EARLY: Duration = Duration::from_secs(30);
/// An exchanged token without `expires_in` is used this long.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(60);
/// Most entries kept; past it, expired ones go, then all.
const CAPACITY: usize = 10_000;
const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN: &str = "urn:ietf:params:oauth:token-type:access_token";

type Key = (CallerKey, Arc<str>);

pub struct Exchanger {
    oauth: Arc<OAuth>,
    cache: Mutex<HashMap<Key, (String, Instant)>>,
}

#[derive(serde::Deserialize)]
struct Answer {
    access_token: String,
    expires_in: Option<u64>,
}

impl Exchanger {
    pub fn new(oauth: Arc<OAuth>) -> Self {
        Exchanger {
            oauth,
            cache: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, (String, Instant)>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A token for `backend` on behalf of `principal`, whose token for
    /// Vigil is `subject_token`.
    pub async fn token_for(
        &self,
        principal: &Principal,
        subject_token: &str,
        backend: &Arc<str>,
        x: &TokenExchange,
    ) -> Result<String, String> {
        let key: Key = (principal.caller().clone(), backend.clone());
        if let Some((token, until)) = self.lock().get(&key)
            && Instant::now() < *until
        {
            return Ok(token.clone());
        }
        let issuer = principal.issuer().ok_or(
            "the client's credentials are not an OAuth token, and only those can be exchanged",
        )?;
        let endpoint = self
            .oauth
            .metadata_of(issuer)
            .await?
            .token_endpoint
            .clone()
            .ok_or_else(|| format!("issuer {issuer}'s metadata has no token_endpoint"))?;
        let body = {
            let mut form = url::form_urlencoded::Serializer::new(String::new());
            form.append_pair("grant_type", TOKEN_EXCHANGE)
                .append_pair("subject_token", subject_token)
                .append_pair("subject_token_type", ACCESS_TOKEN)
                .append_pair("requested_token_type", ACCESS_TOKEN)
                .append_pair("audience", &x.audience);
            if url::Url::parse(&x.audience).is_ok_and(|u| matches!(u.scheme(), "http" | "https")) {
                // RFC 8707: a URI audience is a resource indicator too.
                form.append_pair("resource", &x.audience);
            }
            if let Some(scope) = &x.scope {
                form.append_pair("scope", scope);
            }
            form.finish()
        };
        let (status, body) = self
            .oauth
            .post_form(&endpoint, &x.client_id, &x.client_secret, body, 64 << 10)
            .await
            .map_err(|e| format!("token exchange: {e}"))?;
        if !status.is_success() {
            return Err(format!(
                "token exchange at {endpoint}: HTTP {status}: {}",
                oauth_error(&body)
            ));
        }
        let answer: Answer = serde_json::from_slice(&body)
            .map_err(|e| format!("token exchange at {endpoint}: not an RFC 8693 answer: {e}"))?;
        let lifetime = answer
            .expires_in
            .map_or(DEFAULT_LIFETIME, Duration::from_secs);
        let until = Instant::now() + lifetime.saturating_sub(EARLY);
        let mut cache = self.lock();
        if cache.len() >= CAPACITY {
            let now = Instant::now();
            cache.retain(|_, (_, u)| *u > now);
            if cache.len() >= CAPACITY {
                cache.clear();
            }
        }
        cache.insert(key, (answer.access_token.clone(), until));
        tracing::debug!(backend = %backend, %principal, "exchanged the client's token for one for the backend");
        Ok(answer.access_token)
    }
}

/// `error: error_description` of an OAuth error answer, or a short
/// excerpt of whatever came.
fn oauth_error(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct E {
        error: String,
        error_description: Option<String>,
    }
    match serde_json::from_slice::<E>(body) {
        Ok(e) => match e.error_description {
            Some(d) => format!("{}: {d}", e.error),
            None => e.error,
        },
        Err(_) => String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
    }
}
