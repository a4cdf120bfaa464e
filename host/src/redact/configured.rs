//! Which config values are secrets.
//!
//! Every value that may carry a credential counts, since Vigil cannot tell
//! a key from a region name: API token secrets, `[[auth.keys]]`; each backend's `env`
//! values (stdio), `headers` values (http), container `env` values; and the
//! userinfo (user and password) and every query and fragment value of its
//! `url`, both as written and percent-decoded. A value shorter than
//! [`MIN_SECRET`] is not masked; [`too_short`] names those whose key says
//! they are credentials, so config load can warn about them.

use crate::config::{ApiKey, ApiToken, BackendConfig, RuntimeKind, Transport};

use super::{MIN_SECRET, Secrets};

/// One secret value of the config and where it is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Configured {
    /// Where it is set, for messages: `backends.leaky.headers.X-Api-Key`.
    pub place: String,
    pub value: String,
    /// Its key names a credential (`*key*`, `*token*`, `*secret*`, a URL's
    /// password, ...): worth a warning when too short to mask.
    pub credential: bool,
}

/// The secrets of `tokens` and `backends`.
pub fn secrets<'a>(
    tokens: &[ApiToken],
    keys: &[ApiKey],
    backends: impl IntoIterator<Item = &'a BackendConfig>,
) -> Secrets {
    let all = configured(tokens, keys, backends);
    Secrets::new(all.iter().map(|c| c.value.as_str()))
}

/// `keys` and the other secrets of `[auth]` (the OAuth client secret of
/// introspection), as the key list [`secrets`] masks.
pub fn auth_secrets(keys: &[ApiKey], oauth: Option<&crate::config::OAuthConfig>) -> Vec<ApiKey> {
    let mut all = keys.to_vec();
    if let Some(i) = oauth.and_then(|o| o.introspection.as_ref()) {
        all.push(ApiKey {
            name: "oauth.introspection".into(),
            secret: i.client_secret.clone(),
        });
    }
    all
}

/// Every secret value of `tokens` and `backends`, with where it is set.
pub fn configured<'a>(
    tokens: &[ApiToken],
    keys: &[ApiKey],
    backends: impl IntoIterator<Item = &'a BackendConfig>,
) -> Vec<Configured> {
    let mut out: Vec<Configured> = tokens
        .iter()
        .map(|t| Configured {
            place: format!("api.tokens.{}", t.name),
            value: t.secret.clone(),
            credential: true,
        })
        .chain(keys.iter().map(|k| Configured {
            place: format!("auth.keys.{}", k.name),
            value: k.secret.clone(),
            credential: true,
        }))
        .collect();
    for b in backends {
        let at = format!("backends.{}", b.name);
        let mut add = |key: String, value: &str, credential: bool| {
            if !value.is_empty() {
                out.push(Configured {
                    credential: credential || names_credential(&key),
                    place: format!("{at}.{key}"),
                    value: value.to_owned(),
                });
            }
        };
        match &b.transport {
            Transport::Stdio { env, .. } => {
                for (k, v) in env {
                    add(format!("env.{k}"), v, false);
                }
            }
            Transport::Http { url, headers, .. } => {
                for (k, v) in headers {
                    add(format!("headers.{k}"), v, false);
                }
                for (key, value, credential) in url_parts(url) {
                    add(format!("url.{key}"), &value, credential);
                }
            }
        }
        if let RuntimeKind::Container(spec) = &b.runtime {
            for (k, v) in &spec.env {
                add(format!("env.{k}"), v, false);
            }
        }
        if let Some(t) = &b.token_exchange {
            add(
                "token_exchange.client_secret".to_owned(),
                &t.client_secret,
                true,
            );
        }
        // Values `${NAME}` references took from Vigil's environment,
        // wherever they went (a command line, a URL path).
        for v in &b.substituted {
            add("${...}".to_owned(), v, false);
        }
    }
    out
}

/// The configured secrets too short to be masked whose key names a
/// credential, as warnings naming where each is set and what to do.
pub fn too_short<'a>(
    tokens: &[ApiToken],
    keys: &[ApiKey],
    backends: impl IntoIterator<Item = &'a BackendConfig>,
) -> Vec<String> {
    let mut warnings: Vec<String> = configured(tokens, keys, backends)
        .into_iter()
        .filter(|c| {
            let bare = c.value.split_whitespace().last().unwrap_or(&c.value);
            c.credential && bare.chars().count() < MIN_SECRET
        })
        .map(|c| {
            format!(
                "{}: the value is shorter than {MIN_SECRET} characters, so Vigil cannot mask it in logs, reasons and errors; use a longer secret",
                c.place
            )
        })
        .collect();
    warnings.dedup();
    warnings
}

/// Whether a key's name says its value is a credential.
fn names_credential(key: &str) -> bool {
    const WORDS: [&str; 9] = [
        "key",
        "token",
        "secret",
        "pass",
        "pwd",
        "auth",
        "cred",
        "cookie",
        "signature",
    ];
    let key = key.to_ascii_lowercase();
    WORDS.iter().any(|w| key.contains(w))
}

/// The userinfo and each query and fragment value of `url`, as written and
/// percent-decoded: `(key, value, credential)`.
fn url_parts(url: &str) -> Vec<(String, String, bool)> {
    let Ok(parsed) = url::Url::parse(url) else {
        return Vec::new();
    };
    let decode = |s: &str| {
        percent_decode(s)
            .filter(|d| d != s)
            .into_iter()
            .chain(std::iter::once(s.to_owned()))
            .collect::<Vec<_>>()
    };
    let mut out = Vec::new();
    for v in decode(parsed.username()) {
        out.push(("user".to_owned(), v, false));
    }
    for v in parsed.password().map(decode).unwrap_or_default() {
        out.push(("password".to_owned(), v, true));
    }
    for (part, text) in [("query", parsed.query()), ("fragment", parsed.fragment())] {
        for pair in text.unwrap_or_default().split('&') {
            let (k, v) = pair.split_once('=').unwrap_or(("", pair));
            for v in decode(v) {
                out.push((format!("{part}.{k}"), v, false));
            }
        }
    }
    out
}

fn percent_decode(s: &str) -> Option<String> {
    url::form_urlencoded::parse(format!("x={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn config(text: &str) -> Config {
        Config::parse(text, std::path::Path::new("vigil.toml")).unwrap()
    }

    const CONFIG: &str = r#"
        [[backends]]
        name = "remote"
        transport = "http"
        url = "http://vigil-user:p%40ss-1234@127.0.0.1:3902/mcp?api_key=query-key-5678&region=eu#sig=abc"
        headers = { X-Api-Key = "header-key-3456", Authorization = "Bearer abc" }

        [[backends]]
        name = "files"
        transport = "stdio"
        command = "server"
        env = { TOKEN = "env-token-2468", PORT = "80", API_KEY = "k1" }
    "#;

    #[test]
    fn every_credential_carrying_value_is_a_secret() {
        let c = config(CONFIG);
        let found: Vec<(String, String)> = configured(&c.api.tokens, &c.auth.keys, &c.backends)
            .into_iter()
            .map(|c| (c.place, c.value))
            .collect();
        for (place, value) in [
            ("backends.remote.headers.X-Api-Key", "header-key-3456"),
            ("backends.remote.url.user", "vigil-user"),
            ("backends.remote.url.password", "p%40ss-1234"),
            ("backends.remote.url.password", "p@ss-1234"),
            ("backends.remote.url.query.api_key", "query-key-5678"),
            ("backends.remote.url.query.region", "eu"),
            ("backends.remote.url.fragment.sig", "abc"),
            ("backends.files.env.TOKEN", "env-token-2468"),
        ] {
            assert!(
                found.contains(&(place.to_owned(), value.to_owned())),
                "{place} = {value} missing from {found:?}"
            );
        }
        let s = secrets(&c.api.tokens, &c.auth.keys, &c.backends);
        assert_eq!(
            s.mask("p@ss-1234 / query-key-5678 / env-token-2468 / eu"),
            "*** / *** / *** / eu"
        );
    }

    #[test]
    fn short_credentials_are_named_and_short_ordinary_values_are_not() {
        let c = config(CONFIG);
        let warnings = too_short(&c.api.tokens, &c.auth.keys, &c.backends);
        assert_eq!(
            warnings,
            [
                "backends.remote.headers.Authorization: the value is shorter than 6 characters, so Vigil cannot mask it in logs, reasons and errors; use a longer secret",
                "backends.files.env.API_KEY: the value is shorter than 6 characters, so Vigil cannot mask it in logs, reasons and errors; use a longer secret",
            ]
        );
    }
}
