//! Literal values that look like secrets. `vigil import` copies literal
//! values as they are (it cannot know the variable a user would want), so
//! it warns about each one that may be a credential: the new file holds it
//! too. A heuristic, tuned to say too much rather than too little.

/// Words that make a name (env key, header, flag, query parameter) a
/// secret's.
const SECRET_WORDS: [&str; 16] = [
    "token",
    "secret",
    "password",
    "passwd",
    "pass",
    "pwd",
    "key",
    "apikey",
    "auth",
    "authorization",
    "credential",
    "credentials",
    "cookie",
    "pat",
    "bearer",
    "private",
];

/// Prefixes of well-known credential formats.
const SECRET_PREFIXES: [&str; 13] = [
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "github_pat_",
    "glpat-",
    "sk-",
    "sk_live_",
    "xoxb-",
    "xoxp-",
    "AKIA",
    "AIza",
    "npm_",
];

/// Whether `name` names a secret: one of its words (split at `_`, `-`, `.`
/// and case changes are not split) is a secret word.
pub fn secret_name(name: &str) -> bool {
    let lower = name.trim_start_matches('-').to_ascii_lowercase();
    lower
        .split(['_', '-', '.'])
        .any(|w| SECRET_WORDS.contains(&w))
        || ["apikey", "accesskey", "secretkey", "authtoken"]
            .iter()
            .any(|w| lower.contains(w))
}

/// Whether `value` itself looks like a credential: a known format, an
/// `Authorization` scheme with a credential, or a long random-looking
/// string.
pub fn secret_value(value: &str) -> bool {
    let v = value.trim();
    if let Some(cred) = v
        .strip_prefix("Bearer ")
        .or_else(|| v.strip_prefix("Basic "))
        .or_else(|| v.strip_prefix("token "))
    {
        return cred.trim().len() >= 8;
    }
    if SECRET_PREFIXES
        .iter()
        .any(|p| v.starts_with(p) && v.len() >= p.len() + 8)
    {
        return true;
    }
    random_looking(v)
}

/// Whether a literal value named `name` (when it has one) should be
/// reported as a possible secret.
pub fn looks_secret(name: Option<&str>, value: &str) -> bool {
    let v = value.trim();
    if v.len() < 8 {
        return false;
    }
    secret_value(v) || (name.is_some_and(secret_name) && !plain(v))
}

/// Which part of `url` holds a credential, if any: its password, or a
/// query parameter named like a secret.
pub fn url_secret(url: &str) -> Option<String> {
    let parsed = url::Url::parse(url).ok()?;
    if parsed.password().is_some() {
        return Some("a password in the URL".to_owned());
    }
    parsed
        .query_pairs()
        .find(|(k, v)| !v.is_empty() && (secret_name(k) || secret_value(v)))
        .map(|(k, _)| format!("the query parameter `{k}`"))
}

/// Indexes of `args` that look like secrets: the value of a secret-named
/// flag (`--api-key VALUE`, `--token=VALUE`) or a credential by its
/// format.
pub fn arg_secrets(args: &[String]) -> Vec<usize> {
    let mut found = Vec::new();
    for (i, arg) in args.iter().enumerate() {
        let by_flag = i > 0
            && args[i - 1].starts_with('-')
            && !args[i - 1].contains('=')
            && !arg.starts_with('-')
            && looks_secret(Some(&args[i - 1]), arg);
        let inline = arg.starts_with('-')
            && arg
                .split_once('=')
                .is_some_and(|(flag, value)| looks_secret(Some(flag), value));
        if by_flag || inline || secret_value(arg) {
            found.push(i);
        }
    }
    found
}

/// Values that are obviously not credentials even under a secret-looking
/// name: numbers, booleans, paths, URLs without credentials.
fn plain(v: &str) -> bool {
    v.parse::<f64>().is_ok()
        || matches!(v, "true" | "false")
        || v.starts_with('/')
        || v.starts_with("./")
        || v.starts_with("~/")
        || (v.contains("://") && url_secret(v).is_none())
}

/// 20+ characters of base64/hex alphabet mixing digits and letters, or 32+
/// hex digits: what generated keys look like, and words and paths do not.
fn random_looking(v: &str) -> bool {
    if v.len() < 20
        || !v
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '+' | '/' | '='))
        || v.starts_with('/')
        || v.starts_with('-')
    {
        return false;
    }
    let digits = v.chars().filter(|c| c.is_ascii_digit()).count();
    let upper = v.chars().filter(|c| c.is_ascii_uppercase()).count();
    let lower = v.chars().filter(|c| c.is_ascii_lowercase()).count();
    let hex = v.len() >= 32 && v.chars().all(|c| c.is_ascii_hexdigit()) && digits > 0;
    hex || (digits >= 2 && upper >= 2 && lower >= 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_by_name_or_format_are_found() {
        assert!(looks_secret(
            Some("GITHUB_PERSONAL_ACCESS_TOKEN"),
            "ghp_abcdefghijklmnop1234"
        ));
        assert!(looks_secret(Some("BRAVE_API_KEY"), "plainlowercasekey"));
        assert!(looks_secret(Some("Authorization"), "Bearer abcdef123456"));
        assert!(looks_secret(Some("X-Api-Key"), "whatever-it-is"));
        assert!(looks_secret(None, "sk-proj-abcdefghijklmnop"));
        assert!(looks_secret(Some("OTHER"), "aB3dE5gH7jK9mN1pQ3sT"));
        assert!(looks_secret(None, "0123456789abcdef0123456789abcdef"));
    }

    #[test]
    fn ordinary_values_are_not_reported() {
        assert!(!looks_secret(Some("LOG_LEVEL"), "debugging-everything"));
        assert!(!looks_secret(Some("API_KEY"), "short"));
        assert!(!looks_secret(
            Some("AUTH_URL"),
            "https://auth.example.com/login"
        ));
        assert!(!looks_secret(Some("KEY_FILE"), "/etc/keys/server.pem"));
        assert!(!looks_secret(Some("TOKEN_TTL"), "3600000000"));
        assert!(!looks_secret(
            None,
            "@modelcontextprotocol/server-filesystem"
        ));
        assert!(!looks_secret(None, "/Users/me/Desktop/projects"));
        assert!(!looks_secret(
            Some("KEYBOARD_LAYOUT"),
            "dvorak-international"
        ));
    }

    #[test]
    fn urls_and_arguments_are_searched() {
        assert_eq!(
            url_secret("https://mcp.example.com/sse?api_key=abc123def456").as_deref(),
            Some("the query parameter `api_key`")
        );
        assert_eq!(
            url_secret("https://user:hunter22@mcp.example.com/").as_deref(),
            Some("a password in the URL")
        );
        assert_eq!(url_secret("https://mcp.example.com/mcp?region=eu"), None);
        let args: Vec<String> = [
            "-y",
            "@acme/server",
            "--api-key",
            "abcdefgh12345",
            "--token=zzzzzzzzzzzz",
            "--verbose",
            "ghp_abcdefghijklmnop1234",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(arg_secrets(&args), [3, 4, 6]);
    }
}
