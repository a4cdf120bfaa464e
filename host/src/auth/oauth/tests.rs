//! Validation rules against tokens signed here with a fixed test key (no
//! server: the issuer's keys are known already). The end-to-end tests run
//! the same rules against a real authorization server.

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header};
use serde_json::json;

use super::issuer::{Issuer, Key};
use super::*;

const ISS: &str = "http://127.0.0.1:9000";
const RESOURCE: &str = "http://127.0.0.1:8080/mcp";
/// A P-256 key made for these tests (PKCS#8 DER) and its public point.
const EC_PKCS8: &str = "308187020100301306072a8648ce3d020106082a8648ce3d030107046d306b0201010420779ceda575ac5d7213943387dba4f292e284fdadfb0829c4d9407c635e78dd20a14403420004bf882cb0ff1b00c48826c547986c5f9abee30d13ce47c3673b2a386e5df0f82755bed8492c4afd9e0d2b764ffa3b23f0f219747173b84e646e9b0cf906bc85e6";
const EC_X: &str = "v4gssP8bAMSIJsVHmGxfmr7jDRPOR8NnOyo4bl3w-Cc";
const EC_Y: &str = "Vb7YSSxK_Z4NK3ZP-jsj8PIZdHFzuE5kbpsM-Qa8heY";

fn config() -> OAuthConfig {
    OAuthConfig::example()
}

fn oauth() -> OAuth {
    let key = Key {
        kid: Some("k1".into()),
        alg: Some(Algorithm::ES256),
        family: AlgorithmFamily::Ec,
        key: DecodingKey::from_ec_components(EC_X, EC_Y).unwrap(),
    };
    OAuth::with_issuers(config(), vec![Issuer::with_keys(ISS, vec![key])])
}

fn now() -> u64 {
    jsonwebtoken::get_current_timestamp()
}

fn claims() -> serde_json::Value {
    json!({"iss": ISS, "aud": RESOURCE, "sub": "alice", "exp": now() + 600,
           "scope": "mcp", "groups": ["ops"]})
}

fn sign(kid: Option<&str>, claims: &serde_json::Value) -> String {
    let mut header = Header::new(Algorithm::ES256);
    header.kid = kid.map(str::to_owned);
    let key = EncodingKey::from_ec_der(&hex::decode(EC_PKCS8).unwrap());
    jsonwebtoken::encode(&header, claims, &key).unwrap()
}

fn why(r: Result<Principal, Refusal>) -> String {
    match r {
        Err(Refusal::Invalid { why, .. }) => why,
        other => panic!("not refused as invalid: {other:?}"),
    }
}

#[tokio::test]
async fn a_good_token_names_its_subject_groups_and_scopes() {
    let o = oauth();
    let p = o.validate(&sign(Some("k1"), &claims())).await.unwrap();
    assert_eq!(p.id(), "sub:alice");
    assert_eq!(p.issuer(), Some(ISS));
    assert!(p.memberships().iter().any(|m| &**m == "group:ops"));
    // Without a kid every key of the algorithm's family is tried.
    assert_eq!(
        o.validate(&sign(None, &claims())).await.unwrap().id(),
        "sub:alice"
    );
}

// Paused time: the unknown key id waits out the refetch interval at once.
#[tokio::test(start_paused = true)]
async fn each_bad_token_is_refused_with_its_reason() {
    let o = oauth();
    let mut c = claims();
    c["aud"] = json!("http://127.0.0.1:9999/mcp");
    assert!(why(o.validate(&sign(Some("k1"), &c)).await).contains("audience"));
    let mut c = claims();
    c["iss"] = json!("http://127.0.0.1:9001");
    assert!(
        why(o.validate(&sign(Some("k1"), &c)).await).contains("not one of [auth.oauth] issuers")
    );
    let mut c = claims();
    c["exp"] = json!(now() - 120);
    match o.validate(&sign(Some("k1"), &c)).await {
        Err(Refusal::Invalid { why, counts }) => {
            assert_eq!(why, "the token expired");
            assert!(
                !counts,
                "an expired token is a client's to refresh, not an attack"
            );
        }
        other => panic!("{other:?}"),
    }
    let mut c = claims();
    c["exp"] = json!(now() - 10);
    assert!(
        o.validate(&sign(Some("k1"), &c)).await.is_ok(),
        "within clock_skew"
    );
    let mut c = claims();
    c["nbf"] = json!(now() + 600);
    assert!(why(o.validate(&sign(Some("k1"), &c)).await).contains("not valid yet"));
    assert!(why(o.validate(&sign(Some("other"), &claims())).await).contains("unknown kid"));
    let mut c = claims();
    c["scope"] = json!("other");
    assert_eq!(
        o.validate(&sign(Some("k1"), &c)).await.unwrap_err(),
        Refusal::Scope(vec!["mcp".into()])
    );
    let mut c = claims();
    c.as_object_mut().unwrap().remove("aud");
    assert!(why(o.validate(&sign(Some("k1"), &c)).await).contains("no `aud` claim"));
}

#[tokio::test]
async fn forged_signatures_none_and_hmac_are_refused() {
    let o = oauth();
    let good = sign(Some("k1"), &claims());
    let (head, rest) = good.split_once('.').unwrap();
    let (_, sig) = rest.split_once('.').unwrap();
    // Another payload under the real signature.
    let mut c = claims();
    c["sub"] = json!("mallory");
    let other = sign(Some("k1"), &c);
    let payload = other.split('.').nth(1).unwrap();
    assert!(why(o.validate(&format!("{head}.{payload}.{sig}")).await).contains("signature"));
    // alg none: a header the library cannot even read.
    let none = format!("{}.{payload}.", b64(r#"{"alg":"none","typ":"JWT"}"#));
    assert!(
        why(o.validate(&none).await).contains("alg none is refused"),
        "{none}"
    );
    // HS256 with the public key's bytes as the secret: the classic
    // algorithm-confusion forgery.
    let hmac = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims(),
        &EncodingKey::from_secret(EC_X.as_bytes()),
    )
    .unwrap();
    assert!(why(o.validate(&hmac).await).contains("shared-secret algorithm"));
    assert!(why(o.validate("opaque-token-value").await).contains("not a JWT"));
}

#[tokio::test]
async fn a_validated_token_is_served_from_the_cache() {
    let o = oauth();
    let t = sign(Some("k1"), &claims());
    let p = o.validate(&t).await.unwrap();
    assert_eq!(o.cache.get(&cache::hash(&t), SystemTime::now()), Some(p));
}

/// Unpadded base64url, for hand-made token segments.
fn b64(text: &str) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = text.as_bytes();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().fold(0u32, |n, b| (n << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
        for i in 0..=chunk.len() {
            out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}
