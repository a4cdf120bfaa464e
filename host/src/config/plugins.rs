//! `[plugins]` and each backend's `probes = [...]`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::Problems;
use crate::plugins::files::{DEFAULT_MAX_PLUGIN, MOST_MAX_PLUGIN};

/// The default `[plugins] cache`, in `data_dir`.
pub const DEFAULT_PLUGIN_CACHE: &str = "plugin-cache";

/// `[plugins]`.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginsConfig {
    /// `dir`: where `NAME.wasm` (+ `NAME.toml`) plugins are loaded from,
    /// relative to the config file. Unset: no plugins.
    pub dir: Option<PathBuf>,
    /// `cache`: compiled plugins, so restarts do not compile again.
    /// Default: `plugin-cache` in `data_dir`.
    pub cache: PathBuf,
    /// `threads`: the threads plugin calls run on, apart from the
    /// gateway's (default: the CPUs, at most 4).
    pub threads: Option<usize>,
    /// `max_file_bytes`: the largest `NAME.wasm` loaded; a larger file is
    /// refused by its size, unread. Default 64 MiB, at most 1 GiB.
    pub max_file_bytes: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPlugins {
    pub dir: Option<String>,
    pub cache: Option<String>,
    pub threads: Option<usize>,
    pub max_file_bytes: Option<u64>,
}

/// One `probes = [{ plugin = "NAME", every = "10s", ... }]` entry: a probe
/// plugin run against this backend.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginProbe {
    /// `plugin`: the plugin's name (its file name without `.wasm`).
    pub plugin: String,
    /// `every`: how often (default: the backend's health interval).
    pub every: Option<Duration>,
    /// Every other key: arguments, seen by the plugin as config values
    /// (over its manifest's `[config]`).
    pub args: BTreeMap<String, String>,
}

impl Problems {
    pub(super) fn plugins(
        &mut self,
        raw: Option<RawPlugins>,
        file: &Path,
        data_dir: &Path,
    ) -> PluginsConfig {
        let raw = raw.unwrap_or_default();
        let base = file.parent().unwrap_or(Path::new("."));
        let dir = match raw.dir {
            Some(d) if d.trim().is_empty() => {
                self.add(
                    "plugins.dir",
                    "must not be empty (leave it out to run without plugins)",
                );
                None
            }
            Some(d) => Some(base.join(d)),
            None => None,
        };
        let cache = match raw.cache {
            Some(c) if c.trim().is_empty() => {
                self.add("plugins.cache", "must not be empty");
                data_dir.join(DEFAULT_PLUGIN_CACHE)
            }
            Some(c) => base.join(c),
            None => data_dir.join(DEFAULT_PLUGIN_CACHE),
        };
        let threads = match raw.threads {
            Some(n) if !(1..=64).contains(&n) => {
                self.add("plugins.threads", format!("{n} is outside 1..=64"));
                None
            }
            n => n,
        };
        let max_file_bytes = match raw.max_file_bytes {
            None => DEFAULT_MAX_PLUGIN,
            Some(n) if n < 1024 => {
                self.add("plugins.max_file_bytes", "must be at least 1024");
                DEFAULT_MAX_PLUGIN
            }
            Some(n) if n > MOST_MAX_PLUGIN => {
                self.add(
                    "plugins.max_file_bytes",
                    format!("must be at most {MOST_MAX_PLUGIN} (1 GiB): each file is read into memory whole"),
                );
                DEFAULT_MAX_PLUGIN
            }
            Some(n) => n,
        };
        PluginsConfig {
            dir,
            cache,
            threads,
            max_file_bytes,
        }
    }

    pub(super) fn probes(&mut self, at: &str, raw: Vec<toml::Table>) -> Vec<PluginProbe> {
        let mut out = Vec::new();
        for (i, mut t) in raw.into_iter().enumerate() {
            let key = format!("{at}.probes[{i}]");
            let plugin = match t.remove("plugin") {
                Some(toml::Value::String(s)) if !s.trim().is_empty() => s,
                _ => {
                    self.add(
                        format!("{key}.plugin"),
                        "missing: name the probe plugin, like plugin = \"http-readiness\"",
                    );
                    continue;
                }
            };
            let every = match t.remove("every") {
                None => None,
                Some(toml::Value::String(s)) => {
                    Some(self.duration(&format!("{key}.every"), Some(s), "30s"))
                }
                Some(_) => {
                    self.add(format!("{key}.every"), "must be a duration, like \"10s\"");
                    None
                }
            };
            if every.is_some_and(|d| d.is_zero()) {
                self.add(format!("{key}.every"), "must be longer than zero");
            }
            let mut args = BTreeMap::new();
            for (k, v) in t {
                let text = match v {
                    toml::Value::String(s) => s,
                    toml::Value::Integer(n) => n.to_string(),
                    toml::Value::Float(f) => f.to_string(),
                    toml::Value::Boolean(b) => b.to_string(),
                    other => {
                        self.add(
                            format!("{key}.{k}"),
                            format!("`{other}` is not a string, number or boolean"),
                        );
                        continue;
                    }
                };
                args.insert(k, text);
            }
            out.push(PluginProbe {
                plugin,
                every,
                args,
            });
        }
        out
    }
}
