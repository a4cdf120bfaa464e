//! RFC 7662 introspection of tokens that are not JWTs: Vigil asks each
//! trusted issuer that has an `introspection_endpoint`, authenticating as
//! the configured client, and takes the first that calls the token
//! active. The answer is held to the same rules as a JWT: the issuer it
//! names, the audience, the expiry.

use super::claims::Claims;
use super::{OAuth, Refusal, invalid};
use crate::config::Introspection;

/// Largest introspection answer read.
const MAX_ANSWER: usize = 64 << 10;

pub async fn introspect(
    oauth: &OAuth,
    creds: &Introspection,
    token: &str,
) -> Result<Claims, Refusal> {
    let mut unreachable = Vec::new();
    for issuer in oauth.issuers() {
        let endpoint = match issuer.metadata().await {
            Ok(m) => match &m.introspection_endpoint {
                Some(e) => e.clone(),
                None => continue,
            },
            Err(e) => {
                unreachable.push(e);
                continue;
            }
        };
        let body = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("token", token)
            .append_pair("token_type_hint", "access_token")
            .finish();
        let bytes = match oauth
            .post_form(
                &endpoint,
                &creds.client_id,
                &creds.client_secret,
                body,
                MAX_ANSWER,
            )
            .await
        {
            Ok((status, bytes)) if status.is_success() => bytes,
            Ok((status, _)) => {
                unreachable.push(format!("POST {endpoint}: HTTP {status}"));
                continue;
            }
            Err(e) => {
                unreachable.push(e);
                continue;
            }
        };
        let Ok(answer) = serde_json::from_slice::<Answer>(&bytes) else {
            unreachable.push(format!("POST {endpoint}: the answer is not RFC 7662 JSON"));
            continue;
        };
        if !answer.active {
            continue;
        }
        let mut claims = answer.claims;
        match claims.iss.as_deref() {
            None => claims.iss = Some(issuer.url.clone()),
            Some(iss) if iss == issuer.url => {}
            Some(_) => return Err(invalid("the introspected token names another issuer")),
        }
        check(&claims, &oauth.config().resource, oauth.config().clock_skew)?;
        return Ok(claims);
    }
    if unreachable.is_empty() {
        Err(invalid("the token is not active at any trusted issuer"))
    } else {
        Err(Refusal::Unavailable(format!(
            "the token could not be introspected: {}",
            unreachable.join("; ")
        )))
    }
}

#[derive(serde::Deserialize)]
struct Answer {
    #[serde(default)]
    active: bool,
    #[serde(flatten)]
    claims: Claims,
}

/// The audience must include `resource` (an answer without `aud` cannot
/// show the token was meant for Vigil), and `exp` must not have passed.
fn check(claims: &Claims, resource: &str, skew: std::time::Duration) -> Result<(), Refusal> {
    let aud = match claims.rest.get("aud") {
        Some(serde_json::Value::String(a)) => vec![a.as_str()],
        Some(serde_json::Value::Array(a)) => a.iter().filter_map(|v| v.as_str()).collect(),
        _ => Vec::new(),
    };
    if !aud.contains(&resource) {
        return Err(invalid(
            "the token's audience (aud) is not this server's resource: request the token with resource set to it",
        ));
    }
    if let Some(exp) = claims.exp {
        let now = jsonwebtoken::get_current_timestamp();
        if exp + skew.as_secs() <= now {
            return Err(Refusal::Invalid {
                why: "the token expired".into(),
                counts: false,
            });
        }
    }
    Ok(())
}
