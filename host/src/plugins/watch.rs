//! Watches the plugin directory: any change (a file added, replaced,
//! removed, its manifest edited) rescans it after a short settle, so a
//! file being copied in is read once, whole.

use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio_util::sync::CancellationToken;

use super::Plugins;

/// Quiet time after the last event before rescanning.
const SETTLE: Duration = Duration::from_millis(200);

/// Scans once, then rescans on every change until `shutdown`.
pub async fn run(plugins: Arc<Plugins>, shutdown: CancellationToken) {
    plugins.scan().await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok() {
            let _ = tx.send(());
        }
    });
    let mut watcher = match watcher {
        Ok(w) => w,
        Err(e) => {
            tracing::error!(error = %e, "cannot watch the plugin directory; changes need a restart");
            return;
        }
    };
    if let Err(e) = watcher.watch(plugins.dir(), RecursiveMode::NonRecursive) {
        tracing::error!(dir = %plugins.dir().display(), error = %e, "cannot watch the plugin directory; changes need a restart");
        return;
    }
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            got = rx.recv() => if got.is_none() { return },
        }
        // Let a burst of events (a copy in progress) settle.
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(SETTLE) => break,
                _ = rx.recv() => {}
            }
        }
        plugins.scan().await;
    }
}
