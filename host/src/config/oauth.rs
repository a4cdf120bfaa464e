//! `[auth.oauth]`: Vigil as an OAuth 2.1 resource server, the way the MCP
//! authorization spec describes it.
//!
//! Clients get access tokens from one of the trusted `issuers` for the
//! audience `resource` and send them as `Authorization: Bearer`. Vigil
//! discovers each issuer's metadata (RFC 8414, or OpenID Connect discovery),
//! checks JWT access tokens against the issuer's published keys, and, when
//! `introspection` is set, asks the issuer about opaque tokens (RFC 7662).
//! Everything here is restart-only: a reload that changes it says so.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::Problems;

/// `[auth.oauth]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOAuth {
    #[serde(default)]
    pub issuers: Vec<String>,
    pub resource: Option<String>,
    #[serde(default)]
    pub required_scopes: Vec<String>,
    pub principal_claim: Option<String>,
    pub groups_claim: Option<String>,
    pub clock_skew: Option<String>,
    pub introspection: Option<RawIntrospection>,
}

/// `[auth.oauth.introspection]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIntrospection {
    pub client_id: Option<String>,
    pub client_secret_env: Option<String>,
    pub client_secret_file: Option<String>,
}

/// `token_exchange = { ... }` on a `forward_auth` backend, as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTokenExchange {
    pub audience: Option<String>,
    pub scope: Option<String>,
    pub client_id: Option<String>,
    pub client_secret_env: Option<String>,
    pub client_secret_file: Option<String>,
}

/// RFC 8693 token exchange for a `forward_auth` backend: the client's
/// token for Vigil is traded at its issuer for one for `audience`, the
/// backend's own.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenExchange {
    pub audience: String,
    pub scope: Option<String>,
    pub client_id: String,
    pub client_secret: String,
}

impl std::fmt::Debug for TokenExchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenExchange")
            .field("audience", &self.audience)
            .field("scope", &self.scope)
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

/// `[auth.oauth]`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthConfig {
    /// Trusted authorization servers, as their metadata names them: a
    /// token's `iss` must be one of these exactly.
    pub issuers: Vec<String>,
    /// The audience tokens must carry (RFC 8707 resource indicator), and
    /// the `resource` of Vigil's protected resource metadata.
    pub resource: String,
    /// Scopes every token must have (403 `insufficient_scope` otherwise).
    pub required_scopes: Vec<String>,
    /// The claim whose value names the principal `sub:<value>`.
    pub principal_claim: String,
    /// The claim listing the caller's groups (`group:<value>` principals);
    /// absent from a token: no groups.
    pub groups_claim: String,
    /// Leeway on `exp` and `nbf`.
    pub clock_skew: Duration,
    /// RFC 7662 introspection of tokens that are not JWTs.
    pub introspection: Option<Introspection>,
}

/// How Vigil authenticates to the issuer's introspection endpoint (HTTP
/// Basic, RFC 7662 §2.1).
#[derive(Clone, PartialEq, Eq)]
pub struct Introspection {
    pub client_id: String,
    pub client_secret: String,
}

impl std::fmt::Debug for Introspection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Introspection")
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

impl OAuthConfig {
    /// What unit tests validate against: issuer `http://127.0.0.1:9000`,
    /// resource `http://127.0.0.1:8080/mcp`, scope `mcp`, the default claims.
    #[cfg(test)]
    pub fn example() -> Self {
        OAuthConfig {
            issuers: vec!["http://127.0.0.1:9000".into()],
            resource: "http://127.0.0.1:8080/mcp".into(),
            required_scopes: vec!["mcp".into()],
            principal_claim: "sub".into(),
            groups_claim: "groups".into(),
            clock_skew: Duration::from_secs(30),
            introspection: None,
        }
    }

    /// Where Vigil serves its protected resource metadata for `resource`:
    /// the well-known path inserted between host and path (RFC 9728 §3.1).
    pub fn metadata_url(&self) -> String {
        metadata_url(&self.resource)
    }
}

/// RFC 9728 §3.1: `https://host/mcp` → `https://host/.well-known/oauth-protected-resource/mcp`.
pub fn metadata_url(resource: &str) -> String {
    match url::Url::parse(resource) {
        Ok(u) => {
            let path = u.path().trim_end_matches('/');
            let mut base = u.clone();
            base.set_path("");
            base.set_query(None);
            base.set_fragment(None);
            let origin = base.as_str().trim_end_matches('/');
            format!("{origin}/.well-known/oauth-protected-resource{path}")
        }
        Err(_) => String::new(),
    }
}

/// Whether `u` may be reached over plain HTTP: only on this machine.
fn loopback(u: &url::Url) -> bool {
    match u.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

impl Problems {
    /// `[auth.oauth]`; `listen` gives the default `resource`, `base` the
    /// directory relative secret files are found in.
    pub(super) fn oauth(
        &mut self,
        raw: RawOAuth,
        listen: SocketAddr,
        base: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> OAuthConfig {
        const AT: &str = "auth.oauth";
        if raw.issuers.is_empty() {
            self.add(
                format!("{AT}.issuers"),
                "missing: list the authorization servers whose tokens Vigil trusts, e.g. issuers = [\"https://login.example.com\"]",
            );
        }
        for (i, iss) in raw.issuers.iter().enumerate() {
            if let Some(problem) = url_problem(iss, "an issuer") {
                self.add(format!("{AT}.issuers[{i}]"), problem);
            }
        }
        let resource = match raw.resource {
            Some(r) => {
                if let Some(problem) = url_problem(&r, "the resource") {
                    self.add(format!("{AT}.resource"), problem);
                }
                r
            }
            None if listen.ip().is_unspecified() => {
                self.add(
                    format!("{AT}.resource"),
                    format!(
                        "missing: listen = \"{listen}\" is not an address clients use, so Vigil cannot tell which audience tokens must carry: \
                         set resource to the URL of /mcp as clients reach it, e.g. resource = \"https://mcp.example.com/mcp\""
                    ),
                );
                String::new()
            }
            None => format!("http://{listen}/mcp"),
        };
        for (i, s) in raw.required_scopes.iter().enumerate() {
            if s.is_empty() || s.contains(char::is_whitespace) || s.contains('"') {
                self.add(
                    format!("{AT}.required_scopes[{i}]"),
                    format!("{s:?} is not a scope: a scope is one word without spaces or quotes"),
                );
            }
        }
        let claim = |p: &mut Problems, key: &str, v: Option<String>, default: &str| {
            let v = v.unwrap_or_else(|| default.to_owned());
            if v.is_empty() {
                p.add(
                    format!("{AT}.{key}"),
                    "must not be empty: name a claim of the access tokens",
                );
            }
            v
        };
        let principal_claim = claim(self, "principal_claim", raw.principal_claim, "sub");
        let groups_claim = claim(self, "groups_claim", raw.groups_claim, "groups");
        let clock_skew = self.duration(&format!("{AT}.clock_skew"), raw.clock_skew, "30s");
        if clock_skew > Duration::from_secs(300) {
            self.add(
                format!("{AT}.clock_skew"),
                "is more than 5 minutes: fix the clocks (NTP) rather than accept tokens that long after they expire",
            );
        }
        let introspection = raw
            .introspection
            .and_then(|r| self.introspection(r, base, env));
        OAuthConfig {
            issuers: raw.issuers,
            resource,
            required_scopes: raw.required_scopes,
            principal_claim,
            groups_claim,
            clock_skew,
            introspection,
        }
    }

    fn introspection(
        &mut self,
        raw: RawIntrospection,
        base: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Option<Introspection> {
        const AT: &str = "auth.oauth.introspection";
        let client_id = self.client_id(AT, raw.client_id, "introspection endpoint");
        let secret =
            self.client_secret(AT, raw.client_secret_env, raw.client_secret_file, base, env)?;
        Some(Introspection {
            client_id: client_id?,
            client_secret: secret,
        })
    }

    /// `token_exchange` of backend `at`.
    pub(super) fn token_exchange(
        &mut self,
        at: &str,
        raw: RawTokenExchange,
        base: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Option<TokenExchange> {
        let at = format!("{at}.token_exchange");
        let audience = raw.audience.filter(|a| !a.is_empty());
        if audience.is_none() {
            self.add(
                format!("{at}.audience"),
                "missing: the audience the backend's tokens must carry (its resource URL, or the name its authorization server gives it)",
            );
        }
        let client_id = self.client_id(&at, raw.client_id, "token endpoint");
        let secret = self.client_secret(
            &at,
            raw.client_secret_env,
            raw.client_secret_file,
            base,
            env,
        );
        Some(TokenExchange {
            audience: audience?,
            scope: raw.scope.filter(|s| !s.is_empty()),
            client_id: client_id?,
            client_secret: secret?,
        })
    }

    fn client_id(&mut self, at: &str, id: Option<String>, endpoint: &str) -> Option<String> {
        match id.filter(|i| !i.is_empty()) {
            Some(id) => Some(id),
            None => {
                self.add(
                    format!("{at}.client_id"),
                    format!(
                        "missing: the client id Vigil authenticates with at the issuer's {endpoint}"
                    ),
                );
                None
            }
        }
    }

    /// A client secret from `client_secret_env` or `client_secret_file`.
    fn client_secret(
        &mut self,
        at: &str,
        var: Option<String>,
        file: Option<String>,
        base: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Option<String> {
        match (var, file) {
            (Some(var), None) => env(&var).or_else(|| {
                self.add(
                    format!("{at}.client_secret_env"),
                    format!("environment variable `{var}` is not set"),
                );
                None
            }),
            (None, Some(file)) => super::auth::read_secret_file(&base.join(file))
                .map_err(|why| self.add(format!("{at}.client_secret_file"), why))
                .ok(),
            (Some(_), Some(_)) => {
                self.add(
                    at,
                    "set either client_secret_env or client_secret_file, not both",
                );
                None
            }
            (None, None) => {
                self.add(
                    at,
                    "missing: set client_secret_env = \"VAR\" or client_secret_file = \"PATH\" (secrets are never written in the config file)",
                );
                None
            }
        }
    }
}

/// What is wrong with `text` as the URL of `what`, if anything: it must be
/// absolute, without query or fragment, and HTTPS unless on this machine.
fn url_problem(text: &str, what: &str) -> Option<String> {
    let u = match url::Url::parse(text) {
        Ok(u) => u,
        Err(e) => {
            return Some(format!(
                "`{text}` is not a URL ({e}): write {what} like \"https://login.example.com\""
            ));
        }
    };
    if u.query().is_some() || u.fragment().is_some() {
        return Some(format!(
            "`{text}` has a query or fragment: {what} is a plain URL"
        ));
    }
    match u.scheme() {
        "https" => None,
        "http" if loopback(&u) => None,
        "http" => Some(format!(
            "`{text}` is plain HTTP to another machine: tokens and keys would travel unprotected; use https://"
        )),
        other => Some(format!("`{text}` has scheme `{other}`: use https://")),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::with_env_at;
    use super::*;

    fn load(text: &str, vars: &[(&str, &str)]) -> Result<super::super::Config, String> {
        let dir = std::env::temp_dir().join(format!("vigil-oauth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        with_env_at(text, &dir.join("vigil.toml"), vars).map_err(|e| e.to_string())
    }

    #[test]
    fn with_two_issuers_a_policy_of_token_principals_says_whose() {
        let base = "listen = \"127.0.0.1:8080\"\n[auth.oauth]\nissuers = [\"https://a.example\", \"https://b.example\"]\n";
        let with = |entry: &str| {
            load(
                &format!("{base}[[policy]]\n{entry}\nallow = [\"*\"]\n"),
                &[],
            )
        };
        let e = with("principals = [\"sub:alice\", \"key:ci\"]").unwrap_err();
        assert!(
            e.contains("policy[0].issuer: missing: \"sub:alice\" name principals of OAuth tokens, and 2 issuers are configured")
                && e.contains("issuer = one of \"https://a.example\", \"https://b.example\""),
            "{e}"
        );
        let e = with("principals = [\"sub:alice\"]\nissuer = \"https://c.example\"").unwrap_err();
        assert!(
            e.contains("`https://c.example` is not one of [auth.oauth] issuers"),
            "{e}"
        );
        // Said: one issuer, or any; keys and `*` need nothing.
        let c = with("principals = [\"sub:alice\"]\nissuer = \"https://b.example\"").unwrap();
        assert_eq!(
            c.policies[0].issuer,
            Some(super::super::PolicyIssuer::Is("https://b.example".into()))
        );
        let c = with("principals = [\"group:ops\"]\nissuer = \"*\"").unwrap();
        assert_eq!(c.policies[0].issuer, Some(super::super::PolicyIssuer::Any));
        assert!(with("principals = [\"key:ci\", \"*\"]").is_ok());
        // One issuer: nothing to say.
        let one = "listen = \"127.0.0.1:8080\"\n[auth.oauth]\nissuers = [\"https://a.example\"]\n[[policy]]\nprincipals = [\"sub:alice\"]\nallow = [\"*\"]\n";
        assert!(load(one, &[]).is_ok());
        // Without [auth.oauth] an issuer names nobody.
        let e = load("[[policy]]\nprincipals = [\"sub:alice\"]\nissuer = \"https://a.example\"\nallow = [\"*\"]\n", &[]).unwrap_err();
        assert!(
            e.contains("policy[0].issuer: names an issuer, but [auth.oauth] is not configured"),
            "{e}"
        );
    }

    #[test]
    fn oauth_defaults_to_the_listen_url_and_the_usual_claims() {
        let c = load(
            "listen = \"127.0.0.1:8080\"\n[auth.oauth]\nissuers = [\"http://127.0.0.1:9000\"]\nrequired_scopes = [\"mcp\"]\n",
            &[],
        )
        .unwrap();
        let o = c.auth.oauth.as_ref().unwrap();
        assert!(c.auth.required());
        assert_eq!(o.resource, "http://127.0.0.1:8080/mcp");
        assert_eq!(
            (o.principal_claim.as_str(), o.groups_claim.as_str()),
            ("sub", "groups")
        );
        assert_eq!(o.clock_skew, Duration::from_secs(30));
        assert_eq!(o.introspection, None);
        let wide = load(
            "listen = \"0.0.0.0:8080\"\n[auth.oauth]\nissuers = [\"https://login.example.com\"]\nresource = \"https://mcp.example.com/mcp\"\n\
             [auth.oauth.introspection]\nclient_id = \"vigil\"\nclient_secret_env = \"S\"\n",
            &[("S", "introspection-secret")],
        )
        .unwrap();
        let o = wide.auth.oauth.unwrap();
        assert_eq!(o.resource, "https://mcp.example.com/mcp");
        assert_eq!(
            o.introspection.unwrap().client_secret,
            "introspection-secret"
        );
    }

    #[test]
    fn forward_auth_under_oauth_needs_an_exchange_or_an_explicit_passthrough() {
        let oauth = "[auth.oauth]\nissuers = [\"http://127.0.0.1:9000\"]\n";
        let backend =
            "[[backends]]\nname = \"gh\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:9/mcp\"\n";
        let e = load(&format!("{oauth}{backend}forward_auth = true\n"), &[]).unwrap_err();
        assert!(
            e.contains(
                "backends[0].forward_auth: with [auth.oauth] the client's token is for Vigil"
            ),
            "{e}"
        );
        let exchange = "forward_auth = true\ntoken_exchange = { audience = \"https://gh.example/mcp\", client_id = \"vigil\", client_secret_env = \"S\" }\n";
        let c = load(
            &format!("{oauth}{backend}{exchange}"),
            &[("S", "exchange-secret")],
        )
        .unwrap();
        let x = c.backends[0].token_exchange.as_ref().unwrap();
        assert_eq!(
            (x.audience.as_str(), x.client_secret.as_str()),
            ("https://gh.example/mcp", "exchange-secret")
        );
        assert!(
            !format!("{x:?}").contains("exchange-secret"),
            "Debug hides the secret"
        );
        let p = load(
            &format!("{oauth}{backend}forward_auth = \"passthrough\"\n"),
            &[],
        )
        .unwrap();
        assert!(p.backends[0].forward_auth && p.backends[0].passthrough);
        // Without [auth], forward_auth = true forwards the client's header as before.
        assert!(load(&format!("{backend}forward_auth = true\n"), &[]).is_ok());
        let no_oauth =
            load(&format!("{backend}{exchange}"), &[("S", "exchange-secret")]).unwrap_err();
        assert!(no_oauth.contains("token_exchange trades the client's token for Vigil at its issuer, and needs [auth.oauth]"), "{no_oauth}");
        let stray = load(&format!("{oauth}{backend}token_exchange = {{ audience = \"a\", client_id = \"v\", client_secret_env = \"S\" }}\n"), &[("S", "x")]).unwrap_err();
        assert!(
            stray.contains("backends[0].token_exchange: only applies with forward_auth = true"),
            "{stray}"
        );
        let keys = "[[auth.keys]]\nname = \"a\"\nkey_env = \"K\"\n";
        let k = load(
            &format!("{keys}{backend}forward_auth = \"passthrough\"\n"),
            &[("K", "7c1f0e8b4f9c2b7e1a0d8c3f6b5e9a2d")],
        )
        .unwrap_err();
        assert!(k.contains("with [[auth.keys]] only there is none"), "{k}");
    }

    #[test]
    fn oauth_mistakes_name_the_key_and_the_fix() {
        let e = load(
            "listen = \"0.0.0.0:8080\"\n[auth.oauth]\nissuers = [\"http://login.example.com\"]\n\
             required_scopes = [\"two words\"]\nclock_skew = \"1h\"\nprincipal_claim = \"\"\n\
             [auth.oauth.introspection]\nclient_secret_env = \"UNSET\"\n",
            &[],
        )
        .unwrap_err();
        for want in [
            "auth.oauth.issuers[0]: `http://login.example.com` is plain HTTP to another machine",
            "auth.oauth.resource: missing: listen = \"0.0.0.0:8080\"",
            "auth.oauth.required_scopes[0]: \"two words\" is not a scope",
            "auth.oauth.clock_skew: is more than 5 minutes",
            "auth.oauth.principal_claim: must not be empty",
            "auth.oauth.introspection.client_id: missing",
            "auth.oauth.introspection.client_secret_env: environment variable `UNSET` is not set",
        ] {
            assert!(e.contains(want), "{want:?} not in {e}");
        }
        let none = load("[auth.oauth]\n", &[]).unwrap_err();
        assert!(none.contains("auth.oauth.issuers: missing"), "{none}");
    }

    #[test]
    fn metadata_lives_under_the_well_known_prefix_of_the_resource() {
        assert_eq!(
            metadata_url("http://127.0.0.1:8080/mcp"),
            "http://127.0.0.1:8080/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            metadata_url("https://mcp.example.com/"),
            "https://mcp.example.com/.well-known/oauth-protected-resource"
        );
        assert_eq!(
            metadata_url("https://mcp.example.com/team/mcp"),
            "https://mcp.example.com/.well-known/oauth-protected-resource/team/mcp"
        );
    }

    #[test]
    fn issuer_urls_must_be_https_off_this_machine() {
        assert_eq!(url_problem("https://login.example.com", "an issuer"), None);
        assert_eq!(url_problem("http://127.0.0.1:9000", "an issuer"), None);
        assert_eq!(
            url_problem("http://localhost:9000/realms/x", "an issuer"),
            None
        );
        assert!(
            url_problem("http://login.example.com", "an issuer")
                .unwrap()
                .contains("use https://")
        );
        assert!(
            url_problem("login.example.com", "an issuer")
                .unwrap()
                .contains("is not a URL")
        );
        assert!(
            url_problem("https://a.example/?x=1", "an issuer")
                .unwrap()
                .contains("query")
        );
    }
}
