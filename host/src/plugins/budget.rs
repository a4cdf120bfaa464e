//! What all calls of one loaded plugin share: the per-plugin side of its
//! limits (each call's own side lives in its store, [`super::sandbox`]).
//! One per [`super::Loaded`]; a new version of the plugin starts afresh.

use std::sync::Arc;

use tokio::sync::Semaphore;

use super::manifest::Manifest;

/// The per-plugin caps of one loaded plugin.
#[derive(Debug)]
pub struct Budget {
    /// Turns to run: `limits.concurrency` calls at once
    /// ([`super::admission`]).
    pub calls: Arc<Semaphore>,
    pub concurrency: u32,
}

impl Budget {
    pub fn new(manifest: &Manifest) -> Self {
        let concurrency = manifest.limits.concurrency;
        Self {
            calls: Arc::new(Semaphore::new(concurrency as usize)),
            concurrency,
        }
    }
}
