//! `${NAME}` references in the values that start or reach a backend.
//!
//! Secrets belong in Vigil's environment, not in `vigil.toml`: a value of a
//! backend's `command`, `args`, `env`, `cwd`, `url` or `headers` may say
//! `${NAME}` (or `${NAME:-default}`), and [`expand`] replaces it with the
//! variable's value when the config is loaded. The grammar is small on
//! purpose, and this module is the one place that knows it:
//!
//! - `${NAME}`: the value of `NAME`; unset is a config error naming the key
//!   and the variable (set but empty is the empty string).
//! - `${NAME:-default}`: `NAME` if set and not empty, else `default`
//!   (literal text, up to the first `}`).
//! - `$${`: a literal `${`. A `$` not followed by `{` is itself.
//!
//! `NAME` is letters, digits and `_`, not starting with a digit (what a
//! shell accepts). Anything else inside `${...}` is refused rather than
//! passed on, so a `${env:TOKEN}` pasted from a VS Code file is caught at
//! `vigil check`, not by the backend.

/// Why a value's references cannot be expanded. Each message says how to
/// fix it; the caller adds the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefError {
    /// `${NAME}` names a variable that is not set.
    #[error(
        "environment variable `{name}` is not set (referenced as `{text}`): set it in Vigil's environment, or give a default like `${{{name}:-value}}`"
    )]
    Unset { name: String, text: String },
    /// `${...}` holds something other than `NAME` or `NAME:-default`.
    #[error(
        "`{text}` is not a variable reference: write `${{NAME}}` or `${{NAME:-default}}` (NAME: letters, digits and `_`, not starting with a digit), or `$${{` for a literal `${{`"
    )]
    Malformed { text: String },
    /// `${` without a closing `}`.
    #[error("`${{` is not closed by `}}`: write `${{NAME}}`, or `$${{` for a literal `${{`")]
    Unclosed,
}

/// Whether `name` may be referenced as `${name}`: letters, digits and `_`,
/// not starting with a digit.
pub fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Writes `text` so that [`expand`] gives it back unchanged: every `${`
/// becomes `$${`.
pub fn escape(text: &str) -> String {
    text.replace("${", "$${")
}

/// `value` with every reference replaced from `env`; every problem in it
/// when some cannot be.
pub fn expand(value: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, Vec<RefError>> {
    expand_noting(value, env, &mut |_| {})
}

/// [`expand`], calling `noted` with each value taken from `env` (not the
/// defaults): they may be secrets, to be masked like header values.
pub fn expand_noting(
    value: &str,
    env: &dyn Fn(&str) -> Option<String>,
    noted: &mut dyn FnMut(&str),
) -> Result<String, Vec<RefError>> {
    let mut out = String::with_capacity(value.len());
    let mut errors = Vec::new();
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        if let Some(tail) = after.strip_prefix("$${") {
            out.push_str("${");
            rest = tail;
        } else if let Some(tail) = after.strip_prefix("${") {
            let Some(end) = tail.find('}') else {
                errors.push(RefError::Unclosed);
                return Err(errors);
            };
            let inner = &tail[..end];
            let text = format!("${{{inner}}}");
            let (name, default) = match inner.split_once(":-") {
                Some((name, default)) => (name, Some(default)),
                None => (inner, None),
            };
            if !is_var_name(name) {
                errors.push(RefError::Malformed { text });
            } else {
                match (env(name), default) {
                    (Some(v), Some(d)) if v.is_empty() => out.push_str(d),
                    (Some(v), _) => {
                        noted(&v);
                        out.push_str(&v);
                    }
                    (None, Some(d)) => out.push_str(d),
                    (None, None) => errors.push(RefError::Unset {
                        name: name.to_owned(),
                        text,
                    }),
                }
            }
            rest = &tail[end + 1..];
        } else {
            out.push('$');
            rest = &after[1..];
        }
    }
    out.push_str(rest);
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

/// The problems [`expand`] would find in `value` other than unset
/// variables: for values that are kept but not used (a disabled backend's).
pub fn check(value: &str) -> Vec<RefError> {
    match expand(value, &|_| Some(String::new())) {
        Ok(_) => Vec::new(),
        Err(errors) => errors,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "TOKEN" => Some("s3cret".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    fn ok(value: &str) -> String {
        expand(value, &env).unwrap_or_else(|e| panic!("{value}: {e:?}"))
    }

    #[test]
    fn references_are_replaced_and_the_rest_is_kept() {
        assert_eq!(ok("Bearer ${TOKEN}"), "Bearer s3cret");
        assert_eq!(ok("${TOKEN}${TOKEN}"), "s3crets3cret");
        assert_eq!(ok("no references"), "no references");
        assert_eq!(ok("${EMPTY}"), "");
        assert_eq!(ok("price: $5, $ {x} and $"), "price: $5, $ {x} and $");
    }

    #[test]
    fn defaults_apply_when_unset_or_empty() {
        assert_eq!(
            ok("${BASE:-https://api.example.com}/mcp"),
            "https://api.example.com/mcp"
        );
        assert_eq!(ok("${EMPTY:-fallback}"), "fallback");
        assert_eq!(ok("${TOKEN:-fallback}"), "s3cret");
        assert_eq!(ok("${MISSING:-}"), "");
    }

    #[test]
    fn a_double_dollar_writes_a_literal_reference() {
        assert_eq!(ok("$${TOKEN}"), "${TOKEN}");
        assert_eq!(ok("a$${b"), "a${b");
        assert_eq!(
            ok(&escape("keep ${this} and $${that}")),
            "keep ${this} and $${that}"
        );
    }

    #[test]
    fn every_unset_variable_is_named() {
        let e = expand("${A}-${TOKEN}-${B}", &env).unwrap_err();
        assert_eq!(
            e,
            vec![
                RefError::Unset {
                    name: "A".into(),
                    text: "${A}".into()
                },
                RefError::Unset {
                    name: "B".into(),
                    text: "${B}".into()
                },
            ]
        );
        assert_eq!(
            e[0].to_string(),
            "environment variable `A` is not set (referenced as `${A}`): set it in Vigil's environment, or give a default like `${A:-value}`"
        );
    }

    #[test]
    fn other_syntax_is_refused_with_the_fix() {
        for bad in ["${env:TOKEN}", "${input:key}", "${}", "${1X}", "${A B}"] {
            let e = expand(bad, &env).unwrap_err();
            assert_eq!(
                e,
                vec![RefError::Malformed {
                    text: bad.to_owned()
                }],
                "{bad}"
            );
        }
        assert_eq!(
            expand("${env:TOKEN}", &env).unwrap_err()[0].to_string(),
            "`${env:TOKEN}` is not a variable reference: write `${NAME}` or `${NAME:-default}` (NAME: letters, digits and `_`, not starting with a digit), or `$${` for a literal `${`"
        );
        assert_eq!(
            expand("x ${TOKEN", &env).unwrap_err(),
            vec![RefError::Unclosed]
        );
    }

    #[test]
    fn values_from_the_environment_are_noted_defaults_are_not() {
        let mut seen = Vec::new();
        let v = expand_noting("${TOKEN}/${MISSING:-d}/${EMPTY:-e}", &env, &mut |v| {
            seen.push(v.to_owned())
        })
        .unwrap();
        assert_eq!(v, "s3cret/d/e");
        assert_eq!(seen, ["s3cret"]);
    }

    #[test]
    fn check_ignores_unset_variables_only() {
        assert!(check("${ANYTHING} ${ELSE:-x}").is_empty());
        assert_eq!(check("${env:X}").len(), 1);
    }

    #[test]
    fn variable_names_are_what_a_shell_accepts() {
        for good in ["A", "_a", "GITHUB_TOKEN", "x1"] {
            assert!(is_var_name(good), "{good}");
        }
        for bad in ["", "1A", "A-B", "env:A", "Ä"] {
            assert!(!is_var_name(bad), "{bad}");
        }
    }
}
