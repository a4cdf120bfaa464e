//! Typed access to the plugin's configuration.

use std::fmt::Display;
use std::str::FromStr;

/// The plugin's configuration: string keys to string values.
///
/// Inside a component it comes from the host's `host.config()`: the
/// manifest's `[config]` table, overlaid for a probe with the arguments the
/// backend gives it. Values are always strings; [`Config::parse`] converts
/// them. Keys are matched exactly (case-sensitive); if a key appears more
/// than once, the last value wins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    entries: Vec<(String, String)>,
}

impl Config {
    /// Reads the configuration from the host (`vigil:plugin/host.config`).
    ///
    /// The export macros call it for you before each `check`/`notify`. Off
    /// `wasm32` there is no host and the result is empty.
    pub fn from_host() -> Config {
        #[cfg(target_arch = "wasm32")]
        {
            Config {
                entries: crate::bindings::probe::vigil::plugin::host::config(),
            }
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            Config::default()
        }
    }

    /// Builds a configuration from key/value pairs (for tests, mostly).
    pub fn from_pairs<I, K, V>(pairs: I) -> Config
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        Config {
            entries: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    /// The value of `key`, or `None` when it is not set. An empty value is
    /// returned as `Some("")`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The value of `key`, or `Err` naming the key when it is missing or
    /// blank (empty or only whitespace).
    pub fn require(&self, key: &str) -> Result<&str, String> {
        match self.get(key) {
            None => Err(format!("missing required config key `{key}`")),
            Some(v) if v.trim().is_empty() => Err(format!("config key `{key}` is empty")),
            Some(v) => Ok(v),
        }
    }

    /// The value of `key`, or `default` when it is not set.
    pub fn get_or<'a>(&'a self, key: &str, default: &'a str) -> &'a str {
        self.get(key).unwrap_or(default)
    }

    /// Parses the value of `key` with [`FromStr`] (after trimming
    /// whitespace): `Ok(None)` when the key is not set, `Err` naming the key,
    /// the value and the type when it does not parse.
    pub fn parse<T>(&self, key: &str) -> Result<Option<T>, String>
    where
        T: FromStr,
        T::Err: Display,
    {
        match self.get(key) {
            None => Ok(None),
            Some(raw) => raw.trim().parse::<T>().map(Some).map_err(|e| {
                format!(
                    "config key `{key}`: cannot parse {raw:?} as {}: {e}",
                    short_type_name::<T>()
                )
            }),
        }
    }

    /// Like [`Config::parse`], with `default` when the key is not set.
    pub fn parse_or<T>(&self, key: &str, default: T) -> Result<T, String>
    where
        T: FromStr,
        T::Err: Display,
    {
        Ok(self.parse(key)?.unwrap_or(default))
    }

    /// Like [`Config::parse`], but a missing key is an error too.
    pub fn require_parse<T>(&self, key: &str) -> Result<T, String>
    where
        T: FromStr,
        T::Err: Display,
    {
        self.require(key)?;
        Ok(self.parse(key)?.expect("key is present"))
    }

    /// All entries in the order the host gave them (duplicates included).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Whether no key is set.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// `u32` rather than `core::primitive::u32`, `Duration` rather than
/// `core::time::Duration`.
fn short_type_name<T>() -> &'static str {
    let full = std::any::type_name::<T>();
    match full.find('<') {
        Some(_) => full,
        None => full.rsplit("::").next().unwrap_or(full),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> Config {
        Config::from_pairs([
            ("url", "http://x"),
            ("n", " 42 "),
            ("bad", "4x"),
            ("blank", "  "),
            ("url", "http://y"),
        ])
    }

    #[test]
    fn get_last_wins() {
        assert_eq!(cfg().get("url"), Some("http://y"));
        assert_eq!(cfg().get("nope"), None);
        assert_eq!(cfg().get("blank"), Some("  "));
    }

    #[test]
    fn require_names_key() {
        assert_eq!(cfg().require("url"), Ok("http://y"));
        let e = cfg().require("token").unwrap_err();
        assert!(e.contains("`token`"), "{e}");
        let e = cfg().require("blank").unwrap_err();
        assert!(e.contains("`blank`") && e.contains("empty"), "{e}");
    }

    #[test]
    fn get_or_default() {
        assert_eq!(cfg().get_or("nope", "d"), "d");
        assert_eq!(cfg().get_or("url", "d"), "http://y");
    }

    #[test]
    fn parse_values() {
        assert_eq!(cfg().parse::<u32>("n"), Ok(Some(42)));
        assert_eq!(cfg().parse::<u32>("nope"), Ok(None));
        assert_eq!(cfg().parse_or::<u32>("nope", 7), Ok(7));
        let e = cfg().parse::<u32>("bad").unwrap_err();
        assert!(
            e.contains("`bad`") && e.contains("\"4x\"") && e.contains("u32"),
            "{e}"
        );
        assert!(
            cfg()
                .require_parse::<u32>("nope")
                .unwrap_err()
                .contains("`nope`")
        );
        assert_eq!(cfg().require_parse::<u32>("n"), Ok(42));
    }
}
