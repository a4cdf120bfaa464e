//! `[store]`: how Vigil treats its state store (`vigil.db` in `data_dir`).
//!
//! `data_dir` stays a top-level key: the directory holds more than the
//! store (the compiled-plugin cache lives there by default).

use serde::Deserialize;

use super::Problems;

/// `[store]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StoreConfig {
    /// `optional`: when the store cannot be opened, serve without durable
    /// state instead of refusing to start. Default `false`: without the
    /// store a restart forgets every quarantine and starts backends an
    /// operator held, which an operator must choose, not discover. Checked
    /// when `vigil serve` / `vigil stdio` open the store
    /// ([`crate::store::open`]).
    pub optional: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    pub optional: Option<bool>,
}

impl Problems {
    pub(super) fn store(&mut self, raw: Option<RawStore>) -> StoreConfig {
        let raw = raw.unwrap_or_default();
        StoreConfig {
            optional: raw.optional.unwrap_or(false),
        }
    }
}
