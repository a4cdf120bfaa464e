//! What all calls of one loaded plugin share: the per-plugin side of its
//! limits (each call's own side lives in its store, [`super::sandbox`]).
//! One per [`super::Loaded`]; a new version of the plugin starts afresh.

use std::sync::Arc;

use tokio::sync::Semaphore;

use super::http_limits::InFlight;
use super::log_rate::LogRate;
use super::manifest::Manifest;

/// The per-plugin caps of one loaded plugin.
#[derive(Debug)]
pub struct Budget {
    /// Turns to run: `limits.concurrency` calls at once
    /// ([`super::admission`]).
    pub calls: Arc<Semaphore>,
    /// Outbound HTTP requests in flight over all the plugin's calls
    /// (`limits.http_concurrency_plugin`).
    pub http: Arc<Semaphore>,
    /// Its size, for messages.
    pub http_cap: u32,
    /// `host.log` lines (`limits.log_rate`, `limits.log_burst`).
    pub log: LogRate,
}

impl Budget {
    pub fn new(manifest: &Manifest) -> Self {
        let l = &manifest.limits;
        Self {
            calls: Arc::new(Semaphore::new(l.concurrency as usize)),
            http: InFlight::plugin_semaphore(l.http_concurrency_plugin),
            http_cap: l.http_concurrency_plugin,
            log: LogRate::new(l.log_rate, l.log_burst),
        }
    }
}
