//! What triggers a config reload: `SIGHUP`, or a change of the config file.
//!
//! The file is watched through its directory (editors and config tools
//! replace files by renaming a new one over the old, which a watch on the
//! file itself would lose). Bursts of file events (write, then rename) are
//! coalesced: a reload runs once the file has been quiet for `SETTLE`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use super::App;

const SETTLE: Duration = Duration::from_millis(200);

/// Runs until `shutdown`, reloading `app` on SIGHUP and on changes of its
/// config file. Failures to set up a trigger are logged; the other stays.
pub async fn run(app: Arc<App>, shutdown: CancellationToken) {
    let (tx, mut rx) = mpsc::unbounded_channel::<&'static str>();
    let _watcher = watch_file(app.config().file.clone(), tx.clone());
    // Aborted when `run` ends: the listener never outlives it.
    let _sighup = spawn_sighup(tx, shutdown.clone());
    loop {
        let cause = tokio::select! {
            _ = shutdown.cancelled() => return,
            c = rx.recv() => match c { Some(c) => c, None => return },
        };
        // Let a burst of events settle into one reload.
        let mut cause = cause;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(SETTLE) => break,
                c = rx.recv() => match c { Some(c) => cause = c, None => return },
            }
        }
        match app.reload().await {
            Ok(s) => {
                tracing::info!(cause, added = ?s.added, removed = ?s.removed, changed = ?s.changed, updating = ?s.updated, applied = ?s.applied, "config reloaded");
                if !s.needs_restart.is_empty() {
                    tracing::warn!(keys = ?s.needs_restart, "config changes that take effect only after a restart of vigil");
                }
            }
            Err(e) => tracing::error!(cause, error = %e, "config reload refused"),
        }
    }
}

/// Watches the config file's directory; `None` (logged) if it cannot.
fn watch_file(
    file: PathBuf,
    tx: mpsc::UnboundedSender<&'static str>,
) -> Option<notify::RecommendedWatcher> {
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    let name = file.file_name()?.to_owned();
    let handler = move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else { return };
        if event.kind.is_access() {
            return;
        }
        if event
            .paths
            .iter()
            .any(|p| p.file_name() == Some(name.as_os_str()))
        {
            let _ = tx.send("config file changed");
        }
    };
    let mut watcher = match notify::recommended_watcher(handler) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch the config file; reload with SIGHUP");
            return None;
        }
    };
    if let Err(e) = watcher.watch(&dir, RecursiveMode::NonRecursive) {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot watch the config file's directory; reload with SIGHUP");
        return None;
    }
    Some(watcher)
}

/// Sends "SIGHUP" on `tx` for each SIGHUP until `shutdown`; `None`
/// (logged) if the signal cannot be listened for.
fn spawn_sighup(
    tx: mpsc::UnboundedSender<&'static str>,
    shutdown: CancellationToken,
) -> Option<AbortOnDropHandle<()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP");
            return None;
        }
    };
    Some(AbortOnDropHandle::new(crate::background::spawn(
        async move {
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    s = hup.recv() => {
                        if s.is_none() || tx.send("SIGHUP").is_err() {
                            return;
                        }
                    }
                }
            }
        },
    )))
}
