//! `[audit]`: the audit of MCP calls (`crate::audit`), kept in the state
//! store. Both keys apply live: a config reload puts them in force without
//! a restart.

use std::time::Duration;

use serde::Deserialize;

use super::Problems;

/// The shortest `keep`: the pruner runs hourly, and a shorter retention
/// would delete rows an operator is still reading about a fresh incident.
pub const MIN_KEEP: Duration = Duration::from_secs(3600);
/// The longest `keep`, ten years.
pub const MAX_KEEP: Duration = Duration::from_secs(3650 * 24 * 3600);
/// `keep` when the file does not say.
pub const DEFAULT_KEEP: Duration = Duration::from_secs(30 * 24 * 3600);

/// `[audit]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditConfig {
    /// `calls`: record MCP calls at all. Default `true`; `false` turns the
    /// call audit off (the control API's action log stays). Applies live.
    pub calls: bool,
    /// `arguments`: also record each call's arguments, with every
    /// configured secret in them masked (`***`). Default `false`:
    /// arguments may hold what a user typed, which not every operator may
    /// read. Applies live, from the next call on.
    pub arguments: bool,
    /// `keep`: how long records are kept; older ones are deleted at start
    /// and every hour. Default `30d`; at least `1h`, at most `3650d`.
    /// Applies live (a shorter `keep` prunes at once).
    pub keep: Duration,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            calls: true,
            arguments: false,
            keep: DEFAULT_KEEP,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAudit {
    pub calls: Option<bool>,
    pub arguments: Option<bool>,
    pub keep: Option<String>,
}

impl Problems {
    pub(super) fn audit(&mut self, raw: Option<RawAudit>) -> AuditConfig {
        let raw = raw.unwrap_or_default();
        let keep = match raw.keep {
            None => DEFAULT_KEEP,
            Some(text) => match humantime::parse_duration(text.trim()) {
                Ok(d) if d < MIN_KEEP => {
                    self.add(
                        "audit.keep",
                        format!("`{text}` is too short: keep records at least \"1h\""),
                    );
                    DEFAULT_KEEP
                }
                Ok(d) if d > MAX_KEEP => {
                    self.add(
                        "audit.keep",
                        format!("`{text}` is too long: at most \"3650d\" (ten years)"),
                    );
                    DEFAULT_KEEP
                }
                Ok(d) => d,
                Err(e) => {
                    self.add(
                        "audit.keep",
                        format!(
                            "`{text}` is not a duration ({e}): write it like \"30d\", \"12h\" or \"2w\""
                        ),
                    );
                    DEFAULT_KEEP
                }
            },
        };
        AuditConfig {
            calls: raw.calls.unwrap_or(true),
            arguments: raw.arguments.unwrap_or(false),
            keep,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::Config;

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(text, Path::new("vigil.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_keep_thirty_days_without_arguments() {
        assert_eq!(parse("").unwrap().audit, AuditConfig::default());
        assert_eq!(
            AuditConfig::default(),
            AuditConfig {
                calls: true,
                arguments: false,
                keep: Duration::from_secs(30 * 86400)
            }
        );
        let c = parse("[audit]\narguments = true\nkeep = \"90d\"\n").unwrap();
        assert_eq!(
            c.audit,
            AuditConfig {
                calls: true,
                arguments: true,
                keep: Duration::from_secs(90 * 86400)
            }
        );
        assert!(!parse("[audit]\ncalls = false\n").unwrap().audit.calls);
        assert_eq!(
            parse("[audit]\nkeep = \"1h\"\n").unwrap().audit.keep,
            MIN_KEEP
        );
    }

    #[test]
    fn bad_keep_values_name_the_key_and_the_fix() {
        for (keep, says) in [
            ("a month", "is not a duration"),
            ("thirty", "is not a duration"),
            ("59m", "is too short: keep records at least \"1h\""),
            ("3651d", "is too long: at most \"3650d\""),
        ] {
            let e = parse(&format!("[audit]\nkeep = \"{keep}\"\n")).unwrap_err();
            assert!(
                e.contains(&format!("vigil.toml: audit.keep: `{keep}` {says}")),
                "{keep}: {e}"
            );
        }
        let e = parse("[audit]\nkeep = \"a month\"\n").unwrap_err();
        assert!(e.contains("write it like \"30d\""), "{e}");
        // Spelt out is fine too.
        assert_eq!(
            parse("[audit]\nkeep = \"30 days\"\n").unwrap().audit.keep,
            DEFAULT_KEEP
        );
    }

    #[test]
    fn unknown_keys_and_wrong_types_are_refused() {
        let e = parse("[audit]\nargs = true\n").unwrap_err();
        assert!(e.contains("unknown field `args`"), "{e}");
        let e = parse("[audit]\narguments = \"yes\"\n").unwrap_err();
        assert!(e.contains("audit") || e.contains("bool"), "{e}");
    }
}
