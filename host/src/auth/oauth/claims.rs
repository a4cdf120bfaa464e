//! What a validated token says about its caller: the principal claim,
//! groups and scopes, read the same way from a JWT and from an
//! introspection answer.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::{Refusal, invalid};
use crate::auth::Principal;
use crate::config::OAuthConfig;

/// The issuer of a token not yet verified: only to pick its keys.
#[derive(Deserialize)]
pub struct Peek {
    pub iss: Option<String>,
}

/// A token's claims.
#[derive(Debug, Deserialize)]
pub struct Claims {
    pub iss: Option<String>,
    pub exp: Option<u64>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

impl Claims {
    /// The principal, once the token has every required scope.
    pub fn principal(&self, config: &OAuthConfig) -> Result<Principal, Refusal> {
        let scopes = self.scopes();
        let missing: Vec<String> = config
            .required_scopes
            .iter()
            .filter(|s| !scopes.contains(&s.as_str()))
            .cloned()
            .collect();
        if !missing.is_empty() {
            return Err(Refusal::Scope(missing));
        }
        let subject = match self.rest.get(&config.principal_claim) {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => {
                return Err(invalid(format!(
                    "the token has no `{}` claim to name its principal ([auth.oauth] principal_claim)",
                    config.principal_claim
                )));
            }
        };
        let groups = strings(self.rest.get(&config.groups_claim));
        Ok(Principal::subject(
            self.iss.as_deref().unwrap_or_default(),
            &subject,
            groups.iter().copied(),
            scopes.iter().copied(),
        ))
    }

    /// `scope` (space-separated, RFC 9068 and RFC 7662) or `scp` (a list,
    /// as some servers write it).
    fn scopes(&self) -> Vec<&str> {
        match self.rest.get("scope") {
            Some(Value::String(s)) => s.split_whitespace().collect(),
            _ => strings(self.rest.get("scp")),
        }
    }
}

/// A claim that is one string or a list of strings.
fn strings(v: Option<&Value>) -> Vec<&str> {
    match v {
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> OAuthConfig {
        OAuthConfig::example()
    }

    fn claims(json: &str) -> Claims {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn the_principal_carries_its_groups_and_scopes() {
        let p = claims(
            r#"{"iss":"http://127.0.0.1:9000","sub":"alice","exp":1,"scope":"mcp tools:read","groups":["ops","dev"]}"#,
        )
        .principal(&config())
        .unwrap();
        assert_eq!(p.id(), "sub:alice");
        assert_eq!(p.issuer(), Some("http://127.0.0.1:9000"));
        let m: Vec<&str> = p.memberships().iter().map(|s| &**s).collect();
        assert_eq!(
            m,
            ["group:ops", "group:dev", "scope:mcp", "scope:tools:read"]
        );
        let one = claims(r#"{"iss":"i","sub":"bob","scp":["mcp"],"groups":"ops"}"#)
            .principal(&config())
            .unwrap();
        let m: Vec<&str> = one.memberships().iter().map(|s| &**s).collect();
        assert_eq!(m, ["group:ops", "scope:mcp"]);
    }

    #[test]
    fn a_missing_scope_or_subject_is_refused() {
        assert_eq!(
            claims(r#"{"iss":"i","sub":"a","scope":"other"}"#)
                .principal(&config())
                .unwrap_err(),
            Refusal::Scope(vec!["mcp".into()])
        );
        let e = claims(r#"{"iss":"i","scope":"mcp"}"#)
            .principal(&config())
            .unwrap_err();
        assert!(matches!(e, Refusal::Invalid { why, .. } if why.contains("no `sub` claim")));
    }
}
