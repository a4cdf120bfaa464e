//! Backends: MCP client connections to the servers behind the gateway.
//!
//! Each configured backend has one [`Backend`] with a *shared* connection
//! kept up by its supervisor ([`Backend::run`]): connect, list capabilities,
//! publish them, wait for the connection to end or for a refresh request,
//! reconnect with exponential backoff. Streamable HTTP backends also get one
//! extra connection per client session ([`Backend::open_session_connection`])
//! so each client has its own backend session. This module keeps no health
//! verdicts beyond "connected or not": the health monitor will own those.

pub mod client;
mod connection;
mod error;
pub mod inflight;
mod state;
mod stream_watch;
mod tap;

use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rmcp::model::ClientCapabilities;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

pub use client::{BackendClient, Downstream, ListKind};
pub use connection::Connection;
pub use error::BackendError;
pub use inflight::{FrontCall, Inflight, StreamClosed};
pub use state::{BackendState, advertisable};

use crate::catalog::BackendCatalog;
use crate::config::{BackendConfig, Transport};

/// What a backend supervisor reports to the gateway.
#[derive(Debug)]
pub struct BackendUpdate {
    pub backend: Arc<str>,
    pub state: BackendState,
    /// The backend's catalog when connected; `None` otherwise.
    pub catalog: Option<BackendCatalog>,
}

/// Timing knobs of a backend connection.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    pub request: Duration,
    pub reconnect_initial: Duration,
    pub reconnect_max: Duration,
}

/// One configured backend and its shared connection.
pub struct Backend {
    pub name: Arc<str>,
    pub config: BackendConfig,
    timeouts: Timeouts,
    downstream: Arc<dyn Downstream>,
    shared: RwLock<Option<Arc<Connection>>>,
    state: RwLock<BackendState>,
    inflight: Arc<Inflight>,
    refresh: Notify,
}

impl Backend {
    pub fn new(config: BackendConfig, timeouts: Timeouts, downstream: Arc<dyn Downstream>) -> Arc<Self> {
        Arc::new(Self {
            name: config.name.as_str().into(),
            config,
            timeouts,
            downstream,
            shared: RwLock::new(None),
            state: RwLock::new(BackendState::Connecting),
            inflight: Arc::default(),
            refresh: Notify::new(),
        })
    }

    /// Whether client sessions get their own connection to this backend.
    pub fn per_session(&self) -> bool {
        matches!(self.config.transport, Transport::Http { .. })
    }

    pub fn state(&self) -> BackendState {
        self.state.read().map(|s| s.clone()).unwrap_or(BackendState::Connecting)
    }

    /// The shared connection, if the backend is advertisable.
    pub fn shared(&self) -> Option<Arc<Connection>> {
        if !advertisable(&self.state()) {
            return None;
        }
        self.shared.read().ok().and_then(|s| s.clone())
    }

    /// Asks the supervisor to re-list the backend's capabilities. Requests
    /// made while a listing runs are coalesced into one more listing.
    pub fn request_refresh(&self) {
        self.refresh.notify_one();
    }

    /// Opens a connection for one client session, mirroring that client's
    /// capabilities so the backend only asks for what the client can do.
    pub async fn open_session_connection(
        &self,
        session: u64,
        capabilities: Option<ClientCapabilities>,
    ) -> Result<Connection, BackendError> {
        let inflight = Arc::<Inflight>::default();
        let client = BackendClient::new(self.name.clone(), inflight.clone(), self.downstream.clone(), Some(session), capabilities);
        let relay = tap::Relay::spawn(inflight.clone(), self.downstream.clone(), self.name.clone(), Some(session));
        connection::connect(&self.config, client, inflight, relay, self.timeouts.connect, self.timeouts.request).await
    }

    fn set(&self, state: BackendState, conn: Option<Arc<Connection>>) {
        if let Ok(mut s) = self.state.write() {
            *s = state;
        }
        if let Ok(mut c) = self.shared.write() {
            *c = conn;
        }
    }

    /// The supervisor: keeps the shared connection up until `shutdown`.
    /// Every state change is sent on `updates`.
    pub async fn run(self: Arc<Self>, updates: mpsc::UnboundedSender<BackendUpdate>, shutdown: CancellationToken) {
        let mut backoff = self.timeouts.reconnect_initial;
        let publish = |state: BackendState, catalog: Option<BackendCatalog>| {
            let _ = updates.send(BackendUpdate { backend: self.name.clone(), state, catalog });
        };
        loop {
            let client = BackendClient::new(self.name.clone(), self.inflight.clone(), self.downstream.clone(), None, None);
            let relay = tap::Relay::spawn(self.inflight.clone(), self.downstream.clone(), self.name.clone(), None);
            let attempt = async {
                let conn = connection::connect(&self.config, client, self.inflight.clone(), relay, self.timeouts.connect, self.timeouts.request).await?;
                let catalog = conn.list_catalog().await?;
                Ok::<_, BackendError>((conn, catalog))
            };
            let attempt = tokio::select! {
                r = attempt => r,
                _ = shutdown.cancelled() => break,
            };
            match attempt {
                Ok((conn, catalog)) => {
                    let conn = Arc::new(conn);
                    tracing::info!(backend = %self.name, tools = catalog.tools.len(), resources = catalog.resources.len(), prompts = catalog.prompts.len(), "backend connected");
                    self.set(BackendState::Connected, Some(conn.clone()));
                    publish(BackendState::Connected, Some(catalog));
                    backoff = self.timeouts.reconnect_initial;
                    let reason = self.serve_connected(&conn, &publish, &shutdown).await;
                    let Some(reason) = reason else {
                        self.set(BackendState::Down { reason: "gateway shutting down".into(), since: SystemTime::now() }, None);
                        break;
                    };
                    tracing::warn!(backend = %self.name, %reason, "backend connection lost");
                    let down = BackendState::Down { reason, since: SystemTime::now() };
                    self.set(down.clone(), None);
                    publish(down, None);
                    if let Ok(conn) = Arc::try_unwrap(conn) {
                        conn.close().await;
                    }
                }
                Err(e) => {
                    tracing::warn!(backend = %self.name, error = %e, retry_in = ?backoff, "backend unavailable");
                    let down = BackendState::Down { reason: e.to_string(), since: SystemTime::now() };
                    self.set(down.clone(), None);
                    publish(down, None);
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = shutdown.cancelled() => break,
            }
            backoff = (backoff * 2).min(self.timeouts.reconnect_max);
        }
    }

    /// Serves a connected backend until its connection ends (returns why) or
    /// shutdown (returns `None`). Refresh requests re-list on the way.
    async fn serve_connected(
        &self,
        conn: &Arc<Connection>,
        publish: &impl Fn(BackendState, Option<BackendCatalog>),
        shutdown: &CancellationToken,
    ) -> Option<String> {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return None,
                _ = conn.closed() => {
                    let tail = conn.stderr_tail();
                    return Some(match tail.last() {
                        Some(line) => format!("connection closed (last stderr line: {line})"),
                        None => "connection closed".into(),
                    });
                }
                _ = self.refresh.notified() => {
                    match conn.list_catalog().await {
                        Ok(catalog) => publish(BackendState::Connected, Some(catalog)),
                        Err(e) if e.is_connection_lost() => return Some(e.to_string()),
                        Err(e) => tracing::warn!(backend = %self.name, error = %e, "re-listing failed; keeping the cached catalog"),
                    }
                }
            }
        }
    }
}
