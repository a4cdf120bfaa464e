//! One start attempt of a backend instance: run it, connect, list what it
//! offers, all by one deadline.
//!
//! The start owns what it needs (the backend, its runtime, its stderr
//! tail) rather than borrowing the supervisor, so the supervisor stays free
//! to answer operator commands while a start takes its time; a command that
//! ends the attempt drops it, and the supervisor then stops the runtime.
//!
//! `connect_timeout` bounds the whole start, counted from when the runtime
//! reports the instance started: a container's refused connections are
//! retried until then, the handshake has at most that long, and no page of
//! the first listing waits past it (a backend that never answers its
//! `tools/list`, or answers with a line rmcp drops, fails its start there
//! instead of holding it for `request_timeout`).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::backend::{Backend, BackendError, Connection, StartDeadline, reach};
use crate::catalog::BackendCatalog;
use crate::runtime::process::StderrTail;
use crate::runtime::{Endpoint, Exit, Runtime, RuntimeError, Started};

/// A started instance, once its endpoint is in use.
pub(super) struct Instance {
    pub(super) exited: oneshot::Receiver<Exit>,
    pub(super) id: String,
    /// Where it is reached over HTTP, when the runtime said (a candidate
    /// container's URL differs from the configured one).
    pub(super) url: Option<String>,
}

/// Why a start attempt failed.
pub(super) enum StartFailure {
    /// The runtime's machinery failed: not the backend's fault.
    Infrastructure(String),
    /// The backend failed to come up; `exit` is how its instance ended,
    /// when that is known.
    Backend {
        reason: String,
        exit: Option<String>,
    },
}

impl From<RuntimeError> for StartFailure {
    fn from(e: RuntimeError) -> StartFailure {
        match e {
            RuntimeError::Infrastructure(m) => StartFailure::Infrastructure(m),
            RuntimeError::Failed(reason) => StartFailure::Backend { reason, exit: None },
        }
    }
}

/// What a start comes up with: the shared connection (none for a
/// `forward_auth` backend), the instance, and its first catalog.
pub(super) type Up = (Option<Connection>, Instance, BackendCatalog);

/// One start attempt; see the module docs.
pub(super) struct Start {
    pub(super) backend: Arc<Backend>,
    pub(super) runtime: Arc<dyn Runtime>,
    pub(super) stderr: Option<StderrTail>,
    /// Whether this replica supervises the instance (stops it when it
    /// fails to come up); a follower only connects to it.
    pub(super) owner: bool,
}

impl Start {
    /// Starts the runtime, connects, lists (each client session lists a
    /// `forward_auth` backend itself: its shared catalog is empty).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops whatever connection it made; the instance
    /// it may have started is the runtime's to stop (the supervisor does).
    pub(super) async fn run(self) -> Result<Up, StartFailure> {
        let started = self.runtime.start().await?;
        self.up(started).await
    }

    /// Connects to an instance already started (or adopted, or run by
    /// another replica) and lists it, by one deadline.
    ///
    /// # Cancel safety
    ///
    /// As [`Start::run`].
    pub(super) async fn up(self, started: Started) -> Result<Up, StartFailure> {
        let Started {
            endpoint,
            mut exited,
            id,
        } = started;
        let url = match &endpoint {
            Endpoint::Http { url, .. } => Some(url.clone()),
            Endpoint::Stdio { .. } => None,
        };
        let deadline = StartDeadline {
            at: Instant::now() + self.backend.connect_timeout(),
            connect_timeout: self.backend.connect_timeout(),
        };
        let conn = match self.connect(endpoint, deadline.at, &mut exited).await {
            Ok(c) => c,
            Err((e, early_exit)) => {
                // A process that died during the handshake explains it best;
                // its exit also flushes the stderr we quote.
                let exit = match early_exit {
                    Some(exit) => Some(exit),
                    None => tokio::time::timeout(Duration::from_millis(500), &mut exited)
                        .await
                        .ok()
                        .and_then(Result::ok),
                };
                let (why, quoted, exit) = match exit {
                    Some(exit) => (
                        format!("{} during the MCP handshake", exit.summary),
                        false,
                        Some(exit.summary),
                    ),
                    None => (e.to_string(), e.quotes_stderr(), None),
                };
                self.stop().await;
                return Err(StartFailure::Backend {
                    reason: with_stderr(self.stderr.as_ref(), why, quoted),
                    exit,
                });
            }
        };
        let Some(conn) = conn else {
            return Ok((
                None,
                Instance { exited, id, url },
                BackendCatalog::default(),
            ));
        };
        let catalog = match conn.list_first(deadline).await {
            Ok(c) => c,
            Err(e) => {
                conn.close().await;
                self.stop().await;
                return Err(StartFailure::Backend {
                    reason: format!("listing capabilities failed: {e}"),
                    exit: None,
                });
            }
        };
        Ok((Some(conn), Instance { exited, id, url }, catalog))
    }

    /// Stops the instance that failed to come up, if it is this replica's
    /// to stop.
    async fn stop(&self) {
        if self.owner {
            let _ = self.runtime.stop().await;
        }
    }

    /// Opens the shared connection. When the runtime says a fresh instance
    /// may not accept connections yet ([`Runtime::binds_after_start`]), a
    /// refused connection is retried until `deadline`, unless the instance
    /// exits meanwhile (then its exit comes with the error, taken from
    /// `exited`, which must not be polled again). Otherwise one attempt.
    async fn connect(
        &self,
        endpoint: Endpoint,
        deadline: Instant,
        exited: &mut oneshot::Receiver<Exit>,
    ) -> Result<Option<Connection>, (BackendError, Option<Exit>)> {
        const PAUSE: Duration = Duration::from_millis(100);
        let retry = self.runtime.binds_after_start();
        let (url, headers) = match endpoint {
            Endpoint::Http { url, headers } if retry => (url, headers),
            endpoint => return self.attach(endpoint).await.map_err(|e| (e, None)),
        };
        loop {
            let endpoint = Endpoint::Http {
                url: url.clone(),
                headers: headers.clone(),
            };
            match self.attach(endpoint).await {
                Err(e @ BackendError::Refused { .. }) if Instant::now() + PAUSE < deadline => {
                    tracing::debug!(backend = %self.backend.name, error = %e, "connection refused; the container may still be binding its port");
                    tokio::select! {
                        _ = tokio::time::sleep(PAUSE) => {}
                        exit = &mut *exited => return Err((e, exit.ok())),
                    }
                }
                other => return other.map_err(|e| (e, None)),
            }
        }
    }

    /// Opens the shared connection over `endpoint`. A `forward_auth`
    /// backend gets none (Vigil has no credentials of its own for it): its
    /// endpoint only has to answer (see `backend::reach`).
    async fn attach(&self, endpoint: Endpoint) -> Result<Option<Connection>, BackendError> {
        match endpoint {
            Endpoint::Http { url, headers } if self.backend.forwards_auth() => reach(
                &self.backend.name,
                &url,
                &headers,
                self.backend.connect_timeout(),
            )
            .await
            .map(|_| None),
            endpoint => self
                .backend
                .open_shared_connection(endpoint, self.stderr.clone())
                .await
                .map(Some),
        }
    }
}

/// Adds the last stderr line of a process backend to a reason, unless
/// the reason `quoted` one already.
pub(super) fn with_stderr(stderr: Option<&StderrTail>, reason: String, quoted: bool) -> String {
    match stderr.and_then(|t| t.last()) {
        Some(line) if !quoted => {
            format!("{reason} (last stderr line: {line})")
        }
        _ => reason,
    }
}
