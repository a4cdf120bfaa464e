//! One trusted authorization server: its metadata and its signing keys.
//!
//! Metadata is discovered from the issuer URL (RFC 8414's
//! `/.well-known/oauth-authorization-server`, then OpenID Connect's
//! `/.well-known/openid-configuration`) and must name the issuer exactly
//! as configured (RFC 8414 §3.3), so a look-alike server cannot pass off
//! its keys. The key set (`jwks_uri`) is cached:
//!
//! - a token signed with a key id the cache lacks makes Vigil fetch the
//!   set again — at most once per [`REFETCH_AFTER`] (such a request waits
//!   for the next fetch), so a stream of tokens with made-up key ids costs
//!   the issuer one request per interval;
//! - a failed fetch keeps the keys already known: tokens signed with them
//!   go on working while the issuer is unreachable;
//! - the set is fetched again every [`REFRESH_EVERY`] in the background,
//!   so a key the issuer withdrew stops being trusted.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey};
use serde::Deserialize;
use tokio::time::Instant;

/// Least time between two fetches caused by unknown key ids.
pub const REFETCH_AFTER: Duration = Duration::from_secs(5);
/// Background refresh of the key set.
pub const REFRESH_EVERY: Duration = Duration::from_secs(15 * 60);
/// Largest metadata document or key set read.
const MAX_DOCUMENT: usize = 1 << 20;

/// What Vigil uses of an authorization server's metadata.
#[derive(Debug, Clone, Deserialize)]
pub struct Metadata {
    pub issuer: String,
    pub jwks_uri: Option<String>,
    pub introspection_endpoint: Option<String>,
    pub token_endpoint: Option<String>,
}

/// A public signing key of the issuer.
pub struct Key {
    pub kid: Option<String>,
    /// The `alg` the key is published for, if the set says.
    pub alg: Option<Algorithm>,
    pub family: AlgorithmFamily,
    pub key: DecodingKey,
}

#[derive(Default)]
struct Known {
    metadata: Option<Arc<Metadata>>,
    keys: Arc<Vec<Key>>,
}

/// One entry of `[auth.oauth] issuers`.
pub struct Issuer {
    pub url: String,
    http: reqwest::Client,
    known: ArcSwap<Known>,
    /// When the last fetch began: single flight and the refetch interval.
    fetching: tokio::sync::Mutex<Option<Instant>>,
}

/// Why no key could be had.
#[derive(Debug)]
pub enum NoKey {
    /// The issuer publishes none for this token (unknown `kid`, wrong type).
    Unknown,
    /// The issuer's keys could not be fetched, and none are known.
    Unreachable(String),
}

impl Issuer {
    pub fn new(url: String, http: reqwest::Client) -> Self {
        Issuer {
            url,
            http,
            known: ArcSwap::from_pointee(Known::default()),
            fetching: tokio::sync::Mutex::new(None),
        }
    }

    /// An issuer whose keys are known already and were just fetched (so
    /// an unknown key id does not fetch again within [`REFETCH_AFTER`]).
    #[cfg(test)]
    pub fn with_keys(url: &str, keys: Vec<Key>) -> Self {
        let metadata = Metadata {
            issuer: url.into(),
            jwks_uri: Some("http://127.0.0.1:9/jwks".into()),
            introspection_endpoint: None,
            token_endpoint: None,
        };
        Issuer {
            url: url.into(),
            http: reqwest::Client::new(),
            known: ArcSwap::from_pointee(Known {
                metadata: Some(Arc::new(metadata)),
                keys: Arc::new(keys),
            }),
            fetching: tokio::sync::Mutex::new(Some(Instant::now())),
        }
    }

    /// The issuer's metadata, discovered on first use (and retried at most
    /// once per [`REFETCH_AFTER`] while it fails).
    pub async fn metadata(&self) -> Result<Arc<Metadata>, String> {
        if let Some(m) = &self.known.load().metadata {
            return Ok(m.clone());
        }
        self.refresh(false).await?;
        self.known
            .load()
            .metadata
            .clone()
            .ok_or_else(|| format!("the metadata of issuer {} could not be fetched", self.url))
    }

    /// The keys that may have signed a token with header `kid` and `alg`:
    /// the one with that id, or every key of the algorithm's family when
    /// the token names none.
    pub async fn keys_for(
        &self,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<Vec<(Arc<Vec<Key>>, usize)>, NoKey> {
        let pick = |keys: &Arc<Vec<Key>>| -> Vec<(Arc<Vec<Key>>, usize)> {
            keys.iter()
                .enumerate()
                .filter(|(_, k)| {
                    k.family == alg.family()
                        && k.alg.is_none_or(|a| a == alg)
                        && (kid.is_none() || k.kid.as_deref() == kid)
                })
                .map(|(i, _)| (keys.clone(), i))
                .collect()
        };
        let known = self.known.load_full();
        let found = pick(&known.keys);
        if !found.is_empty() {
            return Ok(found);
        }
        match self.refresh(false).await {
            Ok(()) => {}
            Err(e) if known.keys.is_empty() => return Err(NoKey::Unreachable(e)),
            Err(e) => {
                tracing::debug!(issuer = %self.url, error = %e, "could not refetch the issuer's keys for an unknown key id");
            }
        }
        let found = pick(&self.known.load().keys);
        if found.is_empty() {
            Err(NoKey::Unknown)
        } else {
            Ok(found)
        }
    }

    /// Fetches metadata (when not yet known) and the key set. Without
    /// `force`, a fetch within [`REFETCH_AFTER`] of the last attempt waits
    /// until that much time has passed (a new key is then found on the
    /// first request that needs it, a little late, never refused).
    /// Concurrent callers share one fetch.
    pub async fn refresh(&self, force: bool) -> Result<(), String> {
        let started = Instant::now();
        let mut last = self.fetching.lock().await;
        if let Some(at) = *last {
            if at >= started {
                // Another caller fetched while this one waited.
                return Ok(());
            }
            if !force && at.elapsed() < REFETCH_AFTER {
                tokio::time::sleep_until(at + REFETCH_AFTER).await;
            }
        }
        *last = Some(Instant::now());
        let result = self.fetch().await;
        drop(last);
        if let Err(e) = &result {
            tracing::warn!(issuer = %self.url, error = %e, "could not refresh the authorization server's signing keys; the keys known so far stay in use");
        }
        result
    }

    async fn fetch(&self) -> Result<(), String> {
        let metadata = match self.known.load().metadata.clone() {
            Some(m) => m,
            None => Arc::new(self.discover().await?),
        };
        let jwks_uri = metadata.jwks_uri.as_deref().ok_or_else(|| {
            format!(
                "issuer {}'s metadata has no jwks_uri: Vigil checks JWT access tokens against the issuer's published keys",
                self.url
            )
        })?;
        let set: JwkSetRaw = self.get_json(jwks_uri).await?;
        let keys = usable_keys(set.keys);
        tracing::info!(issuer = %self.url, keys = keys.len(), "fetched the authorization server's signing keys");
        self.known.store(Arc::new(Known {
            metadata: Some(metadata),
            keys: Arc::new(keys),
        }));
        Ok(())
    }

    /// RFC 8414 discovery, then OpenID Connect's.
    async fn discover(&self) -> Result<Metadata, String> {
        let mut errors = Vec::new();
        for url in discovery_urls(&self.url) {
            match self.get_json::<Metadata>(&url).await {
                Ok(m) if m.issuer == self.url => return Ok(m),
                Ok(m) => errors.push(format!(
                    "{url} names issuer {:?}, not {:?} (the configured issuer must be exactly the metadata's)",
                    m.issuer, self.url
                )),
                Err(e) => errors.push(e),
            }
        }
        Err(errors.join("; "))
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<T, String> {
        let response = self
            .http
            .get(url)
            .header(http::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("GET {url}: HTTP {status}"));
        }
        let body = read_limited(response, MAX_DOCUMENT)
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        serde_json::from_slice(&body).map_err(|e| format!("GET {url}: not the JSON expected: {e}"))
    }
}

/// The body of `response`, refused past `limit` bytes.
pub async fn read_limited(response: reqwest::Response, limit: usize) -> Result<Vec<u8>, String> {
    use futures::StreamExt;
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| e.to_string())?;
        if body.len() + chunk.len() > limit {
            return Err(format!("the answer is larger than {limit} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Where the metadata of `issuer` may be: RFC 8414 §3.1 inserts the
/// well-known path before the issuer's path; OpenID Connect appends it.
fn discovery_urls(issuer: &str) -> Vec<String> {
    let Ok(u) = url::Url::parse(issuer) else {
        return Vec::new();
    };
    let path = u.path().trim_end_matches('/');
    let mut origin = u.clone();
    origin.set_path("");
    let origin = origin.as_str().trim_end_matches('/').to_owned();
    let mut urls = vec![format!(
        "{origin}/.well-known/oauth-authorization-server{path}"
    )];
    urls.push(format!(
        "{}/.well-known/openid-configuration",
        issuer.trim_end_matches('/')
    ));
    urls
}

#[derive(Deserialize)]
struct JwkSetRaw {
    keys: Vec<serde_json::Value>,
}

/// The signature keys of a set that Vigil can use: public keys (never a
/// shared secret: HMAC against a published key would let anyone sign) not
/// marked for encryption. Keys of types Vigil does not know are skipped,
/// not fatal.
fn usable_keys(raw: Vec<serde_json::Value>) -> Vec<Key> {
    raw.into_iter()
        .filter_map(|v| serde_json::from_value::<Jwk>(v).ok())
        .filter(|jwk| !matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)))
        .filter(|jwk| !matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_)))
        .filter_map(|jwk| {
            let key = DecodingKey::from_jwk(&jwk).ok()?;
            let alg = match jwk.common.key_algorithm {
                None => None,
                Some(a) => Some(format!("{a:?}").parse::<Algorithm>().ok()?),
            };
            Some(Key {
                kid: jwk.common.key_id.clone(),
                alg,
                family: key.family(),
                key,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_tries_rfc_8414_then_openid() {
        assert_eq!(
            discovery_urls("http://127.0.0.1:9000"),
            [
                "http://127.0.0.1:9000/.well-known/oauth-authorization-server",
                "http://127.0.0.1:9000/.well-known/openid-configuration"
            ]
        );
        assert_eq!(
            discovery_urls("https://login.example.com/realms/team/"),
            [
                "https://login.example.com/.well-known/oauth-authorization-server/realms/team",
                "https://login.example.com/realms/team/.well-known/openid-configuration"
            ]
        );
    }

    #[test]
    fn only_public_signature_keys_are_kept() {
        let set: Vec<serde_json::Value> = serde_json::from_str(
            r#"[
              {"kty":"oct","k":"c2VjcmV0","kid":"shared","alg":"HS256"},
              {"kty":"EC","crv":"P-256","kid":"ec1","use":"sig","alg":"ES256",
               "x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
              {"kty":"EC","crv":"P-256","kid":"enc1","use":"enc",
               "x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
              {"kty":"weird","kid":"w"}
            ]"#,
        )
        .unwrap();
        let keys = usable_keys(set);
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].kid.as_deref(), Some("ec1"));
        assert_eq!(keys[0].alg, Some(Algorithm::ES256));
        assert_eq!(keys[0].family, AlgorithmFamily::Ec);
    }
}
