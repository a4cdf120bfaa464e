//! Retention: deletes call records older than `[audit] keep`, at start and
//! then every [`EVERY`] (and at once after a reload changed `keep`). A
//! record therefore lives at most `keep` + [`EVERY`]; `keep` is at least an
//! hour, so that is at most twice what was asked.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use super::handle::Settings;
use crate::store::CallStore;

/// Time between two prunes.
pub(super) const EVERY: Duration = Duration::from_secs(3600);

/// Prunes until `shutdown`. A failed prune is a WARN; the next one retries.
pub(super) async fn run(
    store: Arc<dyn CallStore>,
    settings: Arc<Settings>,
    shutdown: CancellationToken,
) {
    loop {
        let keep = settings.current().keep;
        if let Some(cutoff) = SystemTime::now().checked_sub(keep) {
            let keep = humantime::format_duration(keep).to_string();
            match store.prune(cutoff).await {
                Ok(0) => {}
                Ok(rows) => {
                    tracing::info!(rows, %keep, "call audit: deleted records older than [audit] keep")
                }
                Err(e) => {
                    tracing::warn!(kind = %e.kind(), error = %e, "call audit: could not delete old records; retrying in an hour")
                }
            }
        }
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            _ = settings.changed.notified() => {}
            _ = tokio::time::sleep(EVERY) => {}
        }
    }
}
