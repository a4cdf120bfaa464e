//! Watches the plugin directory: any change (a file added, replaced,
//! removed, its manifest edited) rescans it after a short settle, so a
//! file being copied in is read once, whole.
//!
//! Only changes count: opening or reading a file is not one. The scan
//! itself opens the directory and every file in it, so before, each scan
//! woke the watcher for the next one: the directory was rescanned (every
//! plugin read and hashed again, every refused file logged again) about
//! every [`SETTLE`], for good.

use std::sync::Arc;
use std::time::Duration;

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecursiveMode, Watcher};
use tokio_util::sync::CancellationToken;

use super::Plugins;

/// Quiet time after the last event before rescanning.
const SETTLE: Duration = Duration::from_millis(200);

/// Scans once, then rescans on every change until `shutdown`.
pub async fn run(plugins: Arc<Plugins>, shutdown: CancellationToken) {
    plugins.scan().await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok_and(|e| is_change(&e.kind)) {
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

/// Whether an event of `kind` may have changed what the directory holds:
/// everything but an access, except a file closed after writing (the end
/// of a copy).
fn is_change(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{CreateKind, ModifyKind, RemoveKind, RenameMode};

    #[test]
    fn reading_is_not_a_change() {
        for kind in [
            EventKind::Access(AccessKind::Open(AccessMode::Any)),
            EventKind::Access(AccessKind::Open(AccessMode::Read)),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
            EventKind::Access(AccessKind::Read),
            EventKind::Access(AccessKind::Any),
        ] {
            assert!(!is_change(&kind), "{kind:?}");
        }
        for kind in [
            EventKind::Create(CreateKind::File),
            EventKind::Modify(ModifyKind::Any),
            EventKind::Modify(ModifyKind::Name(RenameMode::To)),
            EventKind::Remove(RemoveKind::File),
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Any,
            EventKind::Other,
        ] {
            assert!(is_change(&kind), "{kind:?}");
        }
    }
}
