//! `[auth]`: who may use the MCP endpoint.
//!
//! Without `[auth]` anyone who can reach `/mcp` lists and calls every tool.
//! That is fine on a loopback listener (the user who started Vigil), and
//! nowhere else: a wider `listen` without credentials is refused unless the
//! operator says `allow_anonymous = true`, which starts with a loud WARN.
//!
//! `[[auth.keys]]` are static API keys (`Authorization: Bearer <key>`), each
//! a principal `key:NAME`. Their secrets come from the environment or a file
//! private to Vigil's user, never from the config file itself (which is
//! shared, committed and shown in diffs).

use std::net::SocketAddr;
use std::path::Path;

use serde::Deserialize;

use super::Problems;
use super::token_strength;

/// `[auth]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAuth {
    pub allow_anonymous: Option<bool>,
    #[serde(default)]
    pub keys: Vec<RawKey>,
    pub oauth: Option<super::oauth::RawOAuth>,
}

/// One `[[auth.keys]]` entry as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKey {
    pub name: Option<String>,
    pub key_env: Option<String>,
    pub key_file: Option<String>,
}

/// `[auth]`: how MCP clients prove who they are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthConfig {
    /// `allow_anonymous`: serve a non-loopback `listen` without credentials.
    pub allow_anonymous: bool,
    /// `[[auth.keys]]`, applied live by a config reload.
    pub keys: Vec<ApiKey>,
    /// `[auth.oauth]`: access tokens of trusted authorization servers.
    pub oauth: Option<super::oauth::OAuthConfig>,
}

impl AuthConfig {
    /// Whether requests to `/mcp` must carry credentials.
    pub fn required(&self) -> bool {
        !self.keys.is_empty() || self.oauth.is_some()
    }
}

/// One `[[auth.keys]]` entry with its secret resolved.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey {
    /// The principal is `key:NAME`.
    pub name: String,
    pub secret: String,
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKey")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Largest key file read (a key is a line of text).
const MAX_KEY_FILE: u64 = 64 << 10;

impl Problems {
    /// `[auth]`, checked against `listen` (the MCP endpoint's address).
    /// Relative `key_file` paths are resolved against `base` (the config
    /// file's directory).
    pub(super) fn auth(
        &mut self,
        raw: Option<RawAuth>,
        listen: SocketAddr,
        base: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> AuthConfig {
        let raw = raw.unwrap_or_default();
        let allow_anonymous = raw.allow_anonymous.unwrap_or(false);
        let mut keys = Vec::new();
        let mut names = std::collections::HashSet::new();
        for (i, k) in raw.keys.into_iter().enumerate() {
            let at = format!("auth.keys[{i}]");
            let name = k.name.unwrap_or_default();
            if name.is_empty() {
                self.add(
                    format!("{at}.name"),
                    "missing: name the key (its principal is key:NAME, used by [[policy]] and the audit)",
                );
            } else if let Some(bad) = name
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
            {
                self.add(
                    format!("{at}.name"),
                    format!("`{name}` has `{bad}`: use letters, digits, `-`, `_` and `.`"),
                );
            } else if !names.insert(name.clone()) {
                self.add(format!("{at}.name"), format!("duplicate key name `{name}`"));
            }
            let secret = match (k.key_env, k.key_file) {
                (Some(var), None) => match env(&var) {
                    Some(s) => Some((format!("{at}.key_env"), format!("the key in `{var}`"), s)),
                    None => {
                        self.add(
                            format!("{at}.key_env"),
                            format!("environment variable `{var}` is not set"),
                        );
                        None
                    }
                },
                (None, Some(file)) => {
                    let path = base.join(&file);
                    match read_secret_file(&path) {
                        Ok(s) => Some((
                            format!("{at}.key_file"),
                            format!("the key in {}", path.display()),
                            s,
                        )),
                        Err(why) => {
                            self.add(format!("{at}.key_file"), why);
                            None
                        }
                    }
                }
                (Some(_), Some(_)) => {
                    self.add(at.clone(), "set either key_env or key_file, not both");
                    None
                }
                (None, None) => {
                    self.add(
                        at.clone(),
                        "missing: set key_env = \"VAR\" or key_file = \"PATH\" (keys are never written in the config file)",
                    );
                    None
                }
            };
            if let Some((key, what, secret)) = secret {
                if let Some(weak) = token_strength::weakness(&secret) {
                    self.add(key, format!("{what} {weak}"));
                } else if keys.iter().any(|k: &ApiKey| k.secret == secret) {
                    self.add(key, format!("{what} is the same as another key's"));
                } else {
                    keys.push(ApiKey { name, secret });
                }
            }
        }
        let oauth = raw.oauth.map(|o| self.oauth(o, listen, base, env));
        let auth = AuthConfig {
            allow_anonymous,
            keys,
            oauth,
        };
        if !listen.ip().is_loopback() && !auth.required() && !allow_anonymous && names.is_empty() {
            self.add(
                "auth",
                format!(
                    "missing: listen = \"{listen}\" is not a loopback address, so anyone who can reach it could call every tool; \
                     add [[auth.keys]] (name = \"...\", key_env = \"VAR\") or [auth.oauth] so clients must authenticate, \
                     or set [auth] allow_anonymous = true to serve it open on purpose"
                ),
            );
        }
        auth
    }
}

/// The secret in `path`: one line, trimmed. The file must be a regular
/// file of Vigil's user (or root) that neither group nor others may read.
pub(super) fn read_secret_file(path: &Path) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let shown = path.display();
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open {shown}: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot stat {shown}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{shown} is not a regular file"));
    }
    let (owner, me) = (meta.uid(), crate::private_fs::euid());
    if owner != me && owner != 0 {
        return Err(format!(
            "{shown} belongs to uid {owner}, not to Vigil's user (uid {me}): `chown {me} {shown}`"
        ));
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "{shown} is readable or writable by others (mode {mode:03o}): `chmod 600 {shown}`"
        ));
    }
    if meta.len() > MAX_KEY_FILE {
        return Err(format!(
            "{shown} is {} bytes; a key file holds one key (at most {MAX_KEY_FILE} bytes)",
            meta.len()
        ));
    }
    let mut text = String::new();
    file.take(MAX_KEY_FILE)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    let key = text.trim();
    if key.is_empty() {
        return Err(format!("{shown} is empty"));
    }
    Ok(key.to_owned())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    use super::super::Config;
    use super::super::tests::with_env_at;

    const KEY: &str = "7c1f0e8b4f9c2b7e1a0d8c3f6b5e9a2d";

    fn load(text: &str, base: &Path, vars: &[(&str, &str)]) -> Result<Config, String> {
        with_env_at(text, &base.join("vigil.toml"), vars).map_err(|e| e.to_string())
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("vigil-auth-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_wide_listen_needs_auth_or_an_explicit_anonymous() {
        let dir = scratch("listen");
        let e = load("listen = \"0.0.0.0:8080\"\n", &dir, &[]).unwrap_err();
        assert!(
            e.contains("auth: missing: listen = \"0.0.0.0:8080\" is not a loopback address"),
            "{e}"
        );
        assert!(e.contains("allow_anonymous = true"), "{e}");
        let open = load(
            "listen = \"0.0.0.0:8080\"\n[auth]\nallow_anonymous = true\n",
            &dir,
            &[],
        )
        .unwrap();
        assert!(open.auth.allow_anonymous && !open.auth.required());
        let keyed = load(
            "listen = \"0.0.0.0:8080\"\n[[auth.keys]]\nname = \"ci-bot\"\nkey_env = \"K\"\n",
            &dir,
            &[("K", KEY)],
        )
        .unwrap();
        assert_eq!(keyed.auth.keys[0].name, "ci-bot");
        assert_eq!(keyed.auth.keys[0].secret, KEY);
        assert!(
            load("", &dir, &[]).unwrap().auth.keys.is_empty(),
            "loopback needs nothing"
        );
    }

    #[test]
    fn key_mistakes_name_the_key_and_the_fix() {
        let dir = scratch("mistakes");
        let e = load(
            "[[auth.keys]]\nname = \"a b\"\nkey_env = \"K\"\n\
             [[auth.keys]]\nname = \"c\"\nkey_env = \"UNSET\"\n\
             [[auth.keys]]\nname = \"d\"\n\
             [[auth.keys]]\nname = \"e\"\nkey_env = \"WEAK\"\n\
             [[auth.keys]]\nkey_env = \"K\"\n",
            &dir,
            &[("K", KEY), ("WEAK", "abc")],
        )
        .unwrap_err();
        for want in [
            "auth.keys[0].name: `a b` has ` `",
            "auth.keys[1].key_env: environment variable `UNSET` is not set",
            "auth.keys[2]: missing: set key_env = \"VAR\" or key_file = \"PATH\"",
            "auth.keys[3].key_env: the key in `WEAK`",
            "auth.keys[4].name: missing",
        ] {
            assert!(e.contains(want), "{want:?} not in {e}");
        }
        assert!(!e.contains("abc"), "the weak secret is not echoed: {e}");
        let inline = Config::parse(
            "[[auth.keys]]\nname = \"x\"\nkey = \"inline-inline-inline\"\n",
            &dir.join("vigil.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(inline.contains("unknown field `key`"), "{inline}");
    }

    #[test]
    fn a_key_file_must_be_private_and_is_read_trimmed() {
        let dir = scratch("file");
        let file = dir.join("ci.key");
        std::fs::write(&file, format!("{KEY}\n")).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let text = "[[auth.keys]]\nname = \"ci\"\nkey_file = \"ci.key\"\n";
        let e = load(text, &dir, &[]).unwrap_err();
        assert!(
            e.contains("is readable or writable by others (mode 644): `chmod 600"),
            "{e}"
        );
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let c = load(text, &dir, &[]).unwrap();
        assert_eq!(c.auth.keys[0].secret, KEY);
        let missing = load(
            "[[auth.keys]]\nname = \"ci\"\nkey_file = \"nope.key\"\n",
            &dir,
            &[],
        )
        .unwrap_err();
        assert!(
            missing.contains("auth.keys[0].key_file: cannot open"),
            "{missing}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn keys_and_forward_auth_do_not_mix() {
        let dir = scratch("forward");
        let e = load(
            "[[auth.keys]]\nname = \"a\"\nkey_env = \"K\"\n\
             [[backends]]\nname = \"gh\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:9/mcp\"\nforward_auth = true\n",
            &dir,
            &[("K", KEY)],
        )
        .unwrap_err();
        assert!(e.contains("backends[0].forward_auth: with [auth]"), "{e}");
        assert!(e.contains("token passthrough"), "{e}");
    }
}
