//! `[store]`: which state store Vigil uses, and how it treats one it
//! cannot open.
//!
//! By default the store is embedded: SQLite, `vigil.db` in `data_dir`.
//! `url_env` names an environment variable holding a PostgreSQL URL, for
//! several replicas sharing one store; the URL is read when the config is,
//! and checked then (its syntax, never the network).
//!
//! `data_dir` stays a top-level key: the directory holds more than the
//! store (the compiled-plugin cache lives there by default).

use std::fmt;

use serde::Deserialize;
use tokio_postgres::config::SslMode;

use super::Problems;

/// `[store]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StoreConfig {
    /// `optional`: when the store cannot be opened, serve without durable
    /// state instead of refusing to start. Default `false`: without the
    /// store a restart forgets every quarantine and starts backends an
    /// operator held, which an operator must choose, not discover. Checked
    /// when `vigil serve` / `vigil stdio` open the store
    /// ([`crate::store::open`]). For PostgreSQL it applies to a database
    /// that answers but cannot be used (migrated by a newer Vigil); a
    /// server out of reach at start (down, refusing the login, without the
    /// database yet) is waited for with backoff while Vigil serves, whatever
    /// `optional` says.
    pub optional: bool,
    /// `url_env`: the name of the environment variable that holds the
    /// PostgreSQL URL (`postgres://USER:PASSWORD@HOST:5432/DATABASE`).
    /// Default: none, the embedded SQLite store. Kept to say, at start,
    /// why the embedded store is used when the variable is unset or empty.
    pub url_env: Option<String>,
    /// The PostgreSQL store `url_env` selects: `Some` when the variable is
    /// set and not empty (then its URL parsed), else `None`, the embedded
    /// SQLite store.
    pub url: Option<StoreUrl>,
}

/// A PostgreSQL store's connection settings, as read from the variable
/// `url_env` names. `Debug` shows the variable, never the URL: it may
/// hold a password.
#[derive(Clone, PartialEq, Eq)]
pub struct StoreUrl {
    /// The variable it was read from, for messages.
    pub var: String,
    /// The parsed URL.
    pub config: tokio_postgres::Config,
}

impl fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreUrl")
            .field("var", &self.var)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    pub optional: Option<bool>,
    pub url_env: Option<String>,
}

/// How a PostgreSQL URL is written, for messages. Without userinfo in
/// the URL itself: printed errors mask every URL's userinfo (`redact`).
const URL_FORM: &str = "a URL like postgres://HOST:5432/DATABASE, with USER:PASSWORD@ before HOST";

impl Problems {
    pub(super) fn store(
        &mut self,
        raw: Option<RawStore>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> StoreConfig {
        let raw = raw.unwrap_or_default();
        let url = raw
            .url_env
            .as_deref()
            .and_then(|var| self.store_url(var, env));
        StoreConfig {
            optional: raw.optional.unwrap_or(false),
            url_env: raw.url_env,
            url,
        }
    }

    /// The URL in `var`, parsed; `None` when it is unset or empty, or bad
    /// (then a problem names the variable, never its value).
    fn store_url(&mut self, var: &str, env: &dyn Fn(&str) -> Option<String>) -> Option<StoreUrl> {
        const KEY: &str = "store.url_env";
        if var.trim().is_empty() {
            self.add(
                KEY,
                "must not be empty: name the environment variable that holds the PostgreSQL URL, e.g. \"VIGIL_STORE_URL\"",
            );
            return None;
        }
        let value = env(var).filter(|v| !v.trim().is_empty())?;
        let config: tokio_postgres::Config = match value.trim().parse() {
            Ok(c) => c,
            Err(e) => {
                // The driver's text is its kind; what is wrong is its cause
                // ("invalid value for option `port`"), which never quotes
                // the URL.
                let why = std::error::Error::source(&e)
                    .map_or_else(|| e.to_string(), |c| format!("{e}: {c}"));
                self.add(
                    KEY,
                    format!(
                        "`{var}` does not hold a PostgreSQL URL ({why}): set it to {URL_FORM}, or unset it for the embedded store"
                    ),
                );
                return None;
            }
        };
        if config.get_hosts().is_empty() {
            self.add(
                KEY,
                format!("the URL in `{var}` names no host: set it to {URL_FORM}"),
            );
            return None;
        }
        if !matches!(config.get_ssl_mode(), SslMode::Disable | SslMode::Prefer) {
            self.add(
                KEY,
                format!(
                    "the URL in `{var}` asks for TLS (sslmode), which the store does not speak yet: \
                     leave sslmode out (or set sslmode=disable) and keep the connection on a private network"
                ),
            );
            return None;
        }
        Some(StoreUrl {
            var: var.to_owned(),
            config,
        })
    }
}
