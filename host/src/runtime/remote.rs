//! The remote runtime: an HTTP backend Vigil does not own. Nothing to start
//! or stop; it is probed, hidden when down, and never restarted.

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use tokio::sync::oneshot;

use super::{Endpoint, Inspection, Runtime, RuntimeError, Started};

pub struct RemoteRuntime {
    url: String,
    headers: BTreeMap<String, String>,
    /// Keeps each instance's exit sender alive: a remote backend never
    /// "exits" as far as the runtime can tell.
    holders: std::sync::Mutex<Vec<oneshot::Sender<super::Exit>>>,
}

impl RemoteRuntime {
    /// Where the backend is reached: its configured URL and headers.
    fn http(&self) -> Endpoint {
        Endpoint::Http {
            url: self.url.clone(),
            headers: self.headers.clone(),
        }
    }

    pub fn new(url: String, headers: BTreeMap<String, String>) -> Self {
        Self {
            url,
            headers,
            holders: Default::default(),
        }
    }
}

impl Runtime for RemoteRuntime {
    fn kind(&self) -> &'static str {
        "remote"
    }

    fn owns_lifecycle(&self) -> bool {
        false
    }

    fn replica_local(&self) -> bool {
        false
    }

    fn endpoint(&self) -> Option<Endpoint> {
        Some(self.http())
    }

    /// A remote backend is always "running": adopting it is starting it.
    fn adopt(&self) -> BoxFuture<'_, Result<Option<Started>, RuntimeError>> {
        Box::pin(async { self.start().await.map(Some) })
    }

    fn start(&self) -> BoxFuture<'_, Result<Started, RuntimeError>> {
        let (tx, rx) = oneshot::channel();
        if let Ok(mut h) = self.holders.lock() {
            h.clear();
            h.push(tx);
        }
        let started = Started {
            endpoint: self.http(),
            exited: rx,
            id: self.url.clone(),
        };
        Box::pin(async move { Ok(started) })
    }

    fn stop(&self) -> BoxFuture<'_, Result<(), RuntimeError>> {
        Box::pin(async { Ok(()) })
    }

    fn inspect(&self) -> BoxFuture<'_, Result<Inspection, RuntimeError>> {
        Box::pin(async {
            Ok(Inspection {
                running: true,
                exit: None,
                engine_restart_count: None,
            })
        })
    }
}
