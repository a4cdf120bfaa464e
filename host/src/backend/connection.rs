//! One MCP client connection to a backend: open it (start the process or
//! reach the URL, then the handshake), forward requests on it, list what the
//! backend advertises.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::*;
use rmcp::service::{
    ClientCacheConfig, PeerRequestOptions, RoleClient, RunningService, ServiceError,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use tokio_util::sync::CancellationToken;

use super::Bounds;
use super::client::BackendClient;
use super::error::{BackendError, HttpFailure};
use super::http_ping::{self, Direct, SessionTarget};
use super::inflight::{CAPABILITIES_KEY, FrontCall, Inflight};
use super::lifecycle::{self, Slot};
use super::listen;
use super::listing::StartDeadline;
use super::stream_watch::WatchedHttp;
use super::tap::{Relay, Tapped};
use super::wire::{Answer, KeepJson, Wire, WireRead};
use crate::catalog::BackendCatalog;
use crate::config::Protocol;
use crate::runtime::Endpoint;
use crate::runtime::process::StderrTail;

/// An open, initialized connection to a backend.
pub struct Connection {
    backend: Arc<str>,
    service: RunningService<RoleClient, BackendClient>,
    inflight: Arc<Inflight>,
    relay: Relay,
    request_timeout: Duration,
    list_limits: super::ListLimits,
    stderr: Option<StderrTail>,
    /// HTTP backends: the live session, for the direct probe ping.
    ping_target: Option<Arc<SessionTarget>>,
    era: lifecycle::Era,
    /// What the backend wrote of relayed answers and asks.
    wire: Arc<Wire>,
}

/// What a connection speaks, from its backend's configuration.
pub struct Opening<'a> {
    /// Reuse HTTP connections (`keep_alive`).
    pub keep_alive: bool,
    pub protocol: &'a Protocol,
    /// The era `auto` last found the backend in (shared by its connections).
    pub learned: &'a lifecycle::Learned,
    /// Take the backend's change notifications on this connection (a
    /// 2026-07-28 backend's `subscriptions/listen`): for connections whose
    /// catalog Vigil lists, not for lanes and sessions that share one.
    pub listen: bool,
    /// The connection serves handshake-era clients only (a client
    /// session's own, a lane, a handshake-era set's variant): `auto` asks
    /// `initialize` first (see [`lifecycle::begin`]).
    pub for_handshake_client: bool,
    /// The backend instance it reaches.
    pub instance: u64,
}

/// Opens an MCP connection over `endpoint` and completes the handshake
/// within the connect timeout. `stderr` (stdio backends) enriches errors.
#[allow(clippy::too_many_arguments)] // what a connection is made of; one caller each
pub async fn connect(
    backend: &Arc<str>,
    endpoint: Endpoint,
    client: BackendClient,
    inflight: Arc<Inflight>,
    relay: Relay,
    bounds: Bounds,
    how: Opening<'_>,
    stderr: Option<StderrTail>,
) -> Result<Connection, BackendError> {
    let Opening {
        keep_alive,
        protocol,
        learned,
        listen,
        for_handshake_client,
        instance,
    } = how;
    let choice = |probe| lifecycle::Choice {
        protocol,
        learned,
        probe,
        for_handshake_client,
        instance,
    };
    let backend = backend.clone();
    let mut ping_target = None;
    let wire = Wire::new(bounds.max_result);
    let mut client = client;
    client.attach(wire.clone());
    let service = match endpoint {
        Endpoint::Stdio { stdin, stdout } => {
            let stdout = WireRead::new(stdout, wire.clone());
            let transport = Tapped::new(
                AsyncRwTransport::new_client(stdout, stdin),
                relay.clone(),
                wire.clone(),
                backend.clone(),
            );
            let slot = Slot::new(transport);
            let started = lifecycle::begin(
                choice(false),
                &client,
                || slot.take(),
                || !relay.has_transport_ended(),
            );
            let service = handshake(&backend, started, bounds.connect, stderr.as_ref()).await?;
            slot.disarm();
            service
        }
        Endpoint::Http { url, headers } => {
            let mut custom = HashMap::new();
            for (k, v) in &headers {
                // Validated in config; skip defensively rather than panic.
                if let (Ok(k), Ok(v)) = (
                    http::HeaderName::from_bytes(k.as_bytes()),
                    http::HeaderValue::from_str(v),
                ) {
                    custom.insert(k, v);
                }
            }
            let cfg = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                .custom_headers(custom)
                .reinit_on_expired_session(true);
            let (closed_tx, closed_rx) = tokio::sync::mpsc::unbounded_channel();
            crate::background::spawn(relay_stream_closes(closed_rx, inflight.clone()));
            let target = Arc::new(SessionTarget::default());
            ping_target = Some(target.clone());
            let mut built = None;
            let mut transport = || {
                // Each try gets its own transport (rmcp's HTTP worker ends
                // with a failed lifecycle); they record into one target.
                let http =
                    WatchedHttp::new(closed_tx.clone(), keep_alive, target.clone(), wire.clone());
                match http {
                    Ok(http) => Some(Tapped::new(
                        StreamableHttpClientTransport::with_client(http, cfg.clone()),
                        relay.clone(),
                        wire.clone(),
                        backend.clone(),
                    )),
                    Err(e) => {
                        built = Some(e.to_string());
                        None
                    }
                }
            };
            let started =
                lifecycle::begin(choice(true), &client, &mut transport, || !target.refused());
            let started = handshake(&backend, started, bounds.connect, None).await;
            if let Some(reason) = built.take() {
                return Err(BackendError::Transport {
                    backend: backend.clone(),
                    reason,
                    stderr: vec![],
                });
            }
            started.map_err(|e| match e {
                BackendError::Handshake {
                    backend, reason, ..
                } if target.refused() => BackendError::Refused { backend, reason },
                other => other,
            })?
        }
    };
    // Vigil owns freshness (the poller, change notifications, the resync):
    // rmcp's response cache would serve lists Vigil asked to refresh, and
    // stale ones when the backend fails.
    service
        .peer()
        .set_response_cache_config(ClientCacheConfig::disabled())
        .await;
    let era = lifecycle::Era::of(
        &service
            .peer()
            .peer_info()
            .map(|i| i.protocol_version.clone())
            .unwrap_or(ProtocolVersion::LATEST_WITH_INITIALIZE),
    );
    tracing::debug!(backend = %backend, ?era, "backend lifecycle began");
    relay.set_era(era);
    if era == lifecycle::Era::Modern
        && listen
        && let Some(filter) = service
            .peer()
            .peer_info()
            .and_then(|i| listen::filter(&i.capabilities))
    {
        let listener = listen::Listener {
            backend: backend.clone(),
            peer: service.peer().clone(),
            downstream: client.downstream(),
            relay: relay.clone(),
            target: ping_target.clone(),
            session: client.session(),
        };
        crate::background::spawn(listener.run(filter, None));
    }
    Ok(Connection {
        backend,
        service,
        inflight,
        relay,
        request_timeout: bounds.request,
        list_limits: bounds.list,
        stderr,
        ping_target,
        era,
        wire,
    })
}

/// Waits for the lifecycle within the connect timeout.
async fn handshake<F>(
    backend: &Arc<str>,
    fut: F,
    timeout: Duration,
    stderr: Option<&StderrTail>,
) -> Result<RunningService<RoleClient, BackendClient>, BackendError>
where
    F: Future<Output = Result<RunningService<RoleClient, BackendClient>, lifecycle::Failed>>,
{
    let tail = || stderr.map(|t| t.lines()).unwrap_or_default();
    match tokio::time::timeout(timeout, fut).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(BackendError::Handshake {
            backend: backend.clone(),
            reason: e.reason,
            stderr: tail(),
        }),
        Err(_) => Err(BackendError::Handshake {
            backend: backend.clone(),
            reason: format!(
                "no answer to initialize or server/discover within {}",
                humantime::format_duration(timeout)
            ),
            stderr: tail(),
        }),
    }
}

/// Tells each client whose backend request lost its stream early.
/// Ends when the connection's HTTP client is dropped.
async fn relay_stream_closes(
    mut closed: tokio::sync::mpsc::UnboundedReceiver<super::stream_watch::Closed>,
    inflight: Arc<Inflight>,
) {
    while let Some((id, retry)) = closed.recv().await {
        if let Some(hook) = inflight.by_request(&id).and_then(|c| c.on_stream_closed) {
            hook(retry);
        }
    }
}

impl Connection {
    pub fn backend(&self) -> &Arc<str> {
        &self.backend
    }

    /// HTTP backends: the live backend session, as its requests carry it.
    pub(crate) fn session_target(&self) -> Option<&Arc<SessionTarget>> {
        self.ping_target.as_ref()
    }

    /// What the backend declared at the handshake.
    pub fn capabilities(&self) -> ServerCapabilities {
        self.service
            .peer()
            .peer_info()
            .map(|i| i.capabilities.clone())
            .unwrap_or_default()
    }

    /// Waits (at most `within`) until an HTTP session's standing GET stream
    /// was opened or refused (see `SessionTarget::standing_stream_settled`);
    /// at once for other connections.
    pub async fn standing_stream_settled(&self, within: Duration) {
        if self.era == lifecycle::Era::Handshake
            && let Some(target) = &self.ping_target
        {
            target.standing_stream_settled(within).await;
        }
    }

    /// The instructions the backend gave at the handshake (or discover).
    pub fn instructions(&self) -> Option<String> {
        self.service.peer().peer_info()?.instructions.clone()
    }

    pub fn is_closed(&self) -> bool {
        self.relay.has_transport_ended()
            || self.service.is_closed()
            || self.service.peer().is_transport_closed()
    }

    /// Resolves when the connection has ended (process exit, transport
    /// error, peer gone).
    pub async fn closed(&self) {
        self.relay.transport_ended().await
    }

    pub fn stderr_tail(&self) -> Vec<String> {
        self.stderr.as_ref().map(|t| t.lines()).unwrap_or_default()
    }

    /// Resolves when an HTTP backend's standing event stream failed or
    /// ended (the backend may be gone: worth a probe now). Never for stdio.
    pub async fn stream_broken(&self) {
        match &self.ping_target {
            Some(t) => t.broken().await,
            None => std::future::pending().await,
        }
    }

    /// Resolves when an HTTP backend's session was re-initialized (the
    /// backend was restarted and forgot it): what it offers may have
    /// changed. Never for stdio.
    pub async fn reinitialized(&self) {
        match &self.ping_target {
            Some(t) => t.reinitialized().await,
            None => std::future::pending().await,
        }
    }

    /// How many times an HTTP backend's session was re-initialized (0 for
    /// stdio): a change across a request means the request recovered a
    /// session the backend forgot, and the backend may offer other tools.
    pub fn reinitializations(&self) -> u64 {
        self.ping_target
            .as_ref()
            .map_or(0, |t| t.reinitializations())
    }

    /// The era the backend agreed to.
    pub fn era(&self) -> lifecycle::Era {
        self.era
    }

    /// The readiness round trip within `timeout`: `ping` where the
    /// backend's revision has it, `server/discover` on 2026-07-28 (which
    /// removed `ping`). HTTP backends get it straight on a pooled
    /// connection (see `http_ping`: the `ping` on the live session, or the
    /// connection's own `server/discover` again); whatever that cannot
    /// decide is repeated through rmcp within the rest of the budget.
    pub async fn ping(&self, timeout: Duration) -> Result<(), BackendError> {
        let modern = self.era == lifecycle::Era::Modern;
        let what = if modern { "server/discover" } else { "ping" };
        let start = tokio::time::Instant::now();
        if let Some(target) = &self.ping_target {
            let direct = if modern {
                http_ping::discover(target, timeout).await
            } else {
                http_ping::ping(target, timeout).await
            };
            match direct {
                Direct::Answered => {
                    tracing::debug!(backend = %self.backend, path = "direct", probe = what, "ping answered");
                    return Ok(());
                }
                Direct::TimedOut => {
                    return Err(BackendError::Timeout {
                        backend: self.backend.clone(),
                        timeout,
                    });
                }
                // A refusal by status says all a probe needs (rate limited,
                // or credentials refused): decided here, where the status
                // is typed (rmcp keeps only the wording of a 401 or 403).
                Direct::Undecided(HttpFailure::Status(status))
                    if matches!(status.as_u16(), 401 | 403 | 429) =>
                {
                    return Err(BackendError::Status {
                        backend: self.backend.clone(),
                        status,
                        reason: format!("the readiness probe ({what}) was refused"),
                    });
                }
                Direct::Undecided(why) => {
                    tracing::debug!(backend = %self.backend, %why, probe = what, "direct ping undecided; pinging through the MCP client");
                }
            }
        }
        let rest = timeout.saturating_sub(start.elapsed());
        let request = if modern {
            ClientRequest::DiscoverRequest(DiscoverRequest::new(DiscoverRequestParams {}))
        } else {
            ClientRequest::PingRequest(PingRequest::default())
        };
        self.probe_request(request, rest)
            .await
            .map(|_| tracing::debug!(backend = %self.backend, path = "mcp", probe = what, "ping answered"))
            .map_err(|e| match e {
                // Report the whole budget, not what was left of it.
                BackendError::Timeout { backend, .. } => BackendError::Timeout { backend, timeout },
                e => e,
            })
    }

    /// Sends one request with its own timeout (probes), relaying nothing.
    pub async fn probe_request(
        &self,
        request: ClientRequest,
        timeout: Duration,
    ) -> Result<ServerResult, BackendError> {
        let peer = self.service.peer();
        let handle = peer
            .send_request_with_option(request, PeerRequestOptions::with_timeout(timeout))
            .await
            .map_err(|e| self.service_error(e))?;
        handle
            .await_response()
            .await
            .map_err(|e| self.service_error(e))
    }

    /// Forwards `request` and waits for its answer, relaying the backend's
    /// progress and server→client requests to `front`, and the client's
    /// cancellation (`ct`) to the backend.
    pub async fn request(
        &self,
        request: ClientRequest,
        front: Option<FrontCall>,
        ct: &CancellationToken,
    ) -> Result<ServerResult, BackendError> {
        self.exchange(request, front, ct, false)
            .await
            .map(|(typed, _)| typed)
    }

    /// [`Self::request`] for a request whose result Vigil relays: the
    /// result as the backend wrote it (members, member order, numbers; see
    /// `wire`). A result larger than `limits.max_result_bytes` is
    /// [`BackendError::TooLarge`].
    pub async fn relay(
        &self,
        request: ClientRequest,
        front: Option<FrontCall>,
        ct: &CancellationToken,
    ) -> Result<serde_json::Value, BackendError> {
        let method = request.method().to_owned();
        let (typed, answer) = self.exchange(request, front, ct, true).await?;
        match answer {
            Some(Answer::Got(v)) => Ok(v),
            Some(Answer::TooLarge(bytes)) => Err(BackendError::TooLarge {
                backend: self.backend.clone(),
                method,
                bytes,
                limit: self.wire.max_result(),
            }),
            // Not seen by the wire (an HTTP backend's JSON body, which
            // rmcp's client reads itself): as rmcp decoded it.
            Some(Answer::Waiting) | None => {
                serde_json::to_value(typed).map_err(|e| BackendError::Transport {
                    backend: self.backend.clone(),
                    reason: format!("the backend's answer to {method} could not be relayed: {e}"),
                    stderr: vec![],
                })
            }
        }
    }

    /// Sends `request` and waits for its answer; `keep`: the wire keeps
    /// the result as JSON (returned beside rmcp's placeholder).
    async fn exchange(
        &self,
        mut request: ClientRequest,
        front: Option<FrontCall>,
        ct: &CancellationToken,
        keep: bool,
    ) -> Result<(ServerResult, Option<Answer>), BackendError> {
        let peer = self.service.peer();
        let mut options =
            PeerRequestOptions::with_timeout(self.request_timeout).reset_timeout_on_progress();
        // 2026-07-28 carries per request what a session held before: the
        // level of log messages the client wants (there is no
        // `logging/setLevel`) and what the client can be asked (rmcp would
        // put Vigil's own capabilities there).
        if self.era == lifecycle::Era::Modern
            && let Some(front) = front.as_ref()
        {
            let mut meta = RequestMetaObject::new();
            if let Some(log) = front.log {
                meta.set_log_level(log.level);
            }
            if let Some(caps) = front.declared_capabilities() {
                meta.0.0.insert(CAPABILITIES_KEY.into(), caps);
            }
            options.meta = Some(meta);
        }
        if keep {
            request.extensions_mut().insert(KeepJson);
        }
        let sending = self.inflight.sending();
        let handle = peer
            .send_request_with_option(request, options)
            .await
            .map_err(|e| self.service_error(e))?;
        let id = handle.id.clone();
        let _kept = keep.then(|| self.wire.guard(id.clone()));
        let outbox = front.as_ref().map(|f| f.outbox.clone());
        let _registration = front.map(|f| {
            self.inflight
                .register(id.clone(), handle.progress_token.clone(), f)
        });
        drop(sending);
        tokio::select! {
            r = handle.await_response() => {
                // Progress and logs sent before the answer reach the client
                // first: through the relay, then out of this client's own
                // queue (never waiting on another client's).
                self.relay.flush().await;
                if let Some(outbox) = outbox {
                    outbox.flush().await;
                }
                let typed = r.map_err(|e| self.service_error(e))?;
                let answer = keep.then(|| self.wire.take_answer(&id)).flatten();
                Ok((typed, answer))
            }
            _ = ct.cancelled() => {
                let note = CancelledNotification::new(CancelledNotificationParam::new(
                    Some(id),
                    Some("cancelled by the client".into()),
                ));
                let _ = peer.send_notification(note.into()).await;
                Err(BackendError::Cancelled { backend: self.backend.clone() })
            }
        }
    }

    /// The params of the backend's own request `id` (sampling, elicitation,
    /// roots) as it wrote them, if the wire kept them.
    pub fn asked(&self, id: &RequestId) -> Option<serde_json::Value> {
        self.wire.take_ask(id)
    }

    /// Asks the backend for `notifications/resources/updated` about `uri`:
    /// `resources/subscribe` in the handshake era; in 2026-07-28 (which has
    /// no such request) a `subscriptions/listen` stream for it, whose task
    /// the returned handle ends. An error if the backend refuses (including
    /// a stream that does not acknowledge `uri`).
    pub async fn watch_resource(
        &self,
        uri: &str,
    ) -> Result<Option<tokio::task::AbortHandle>, BackendError> {
        if self.era == lifecycle::Era::Handshake {
            let request = SubscribeRequest::new(SubscribeRequestParams::new(uri));
            self.request(request.into(), None, &CancellationToken::new())
                .await?;
            return Ok(None);
        }
        let mut filter = SubscriptionFilter::new();
        filter.resource_subscriptions = Some(vec![uri.to_owned()]);
        let peer = self.service.peer().clone();
        let sub = tokio::time::timeout(self.request_timeout, peer.listen(filter.clone()))
            .await
            .map_err(|_| BackendError::Timeout {
                backend: self.backend.clone(),
                timeout: self.request_timeout,
            })?
            .map_err(|e| self.service_error(e))?;
        let acknowledged = sub
            .acknowledged()
            .resource_subscriptions
            .as_ref()
            .is_some_and(|uris| uris.iter().any(|u| u == uri));
        if !acknowledged {
            return Err(BackendError::Mcp(rmcp::ErrorData::invalid_params(
                format!("backend '{}' does not offer updates of {uri}", self.backend),
                None,
            )));
        }
        let client = self.service.service();
        let listener = listen::Listener {
            backend: self.backend.clone(),
            peer,
            downstream: client.downstream(),
            relay: self.relay.clone(),
            target: None,
            session: client.session(),
        };
        Ok(Some(
            crate::background::spawn(listener.run(filter, Some(sub))).abort_handle(),
        ))
    }

    /// Undoes [`Self::watch_resource`] in the handshake era (a 2026-07-28
    /// watch ends with its task).
    pub async fn unwatch_resource(&self, uri: &str) -> Result<(), BackendError> {
        if self.era == lifecycle::Era::Handshake {
            let request = UnsubscribeRequest::new(UnsubscribeRequestParams::new(uri));
            self.request(request.into(), None, &CancellationToken::new())
                .await?;
        }
        Ok(())
    }

    /// Sends a notification (e.g. `roots/list_changed`) to the backend.
    pub async fn notify(&self, notification: ClientNotification) -> Result<(), BackendError> {
        self.service
            .peer()
            .send_notification(notification)
            .await
            .map_err(|e| self.service_error(e))
    }

    /// Lists everything the backend declared at the handshake, each page
    /// within the request timeout and the whole within `[limits]`.
    pub async fn list_catalog(&self) -> Result<BackendCatalog, BackendError> {
        self.list_within(None).await
    }

    /// [`Self::list_catalog`] for a fresh instance's first listing, which
    /// is part of its start: no page waits past the start's `deadline`.
    pub async fn list_first(
        &self,
        deadline: StartDeadline,
    ) -> Result<BackendCatalog, BackendError> {
        self.list_within(Some(deadline)).await
    }

    async fn list_within(
        &self,
        start: Option<StartDeadline>,
    ) -> Result<BackendCatalog, BackendError> {
        let none = CancellationToken::new();
        super::listing::list_catalog(
            &self.backend,
            &self.capabilities(),
            self.request_timeout,
            start,
            self.list_limits,
            |request| self.relay(request, None, &none),
        )
        .await
    }

    /// Closes the connection (for stdio: ends the process).
    pub async fn close(mut self) {
        let _ = self
            .service
            .close_with_timeout(Duration::from_secs(2))
            .await;
    }

    fn service_error(&self, e: ServiceError) -> BackendError {
        match e {
            ServiceError::McpError(e) => BackendError::Mcp(e),
            ServiceError::Timeout { timeout } => BackendError::Timeout {
                backend: self.backend.clone(),
                timeout,
            },
            other => match self.ping_target.as_ref().and_then(|t| t.refused_with()) {
                Some(status) => BackendError::Status {
                    backend: self.backend.clone(),
                    status,
                    reason: super::error::plain(other),
                },
                None => BackendError::Transport {
                    backend: self.backend.clone(),
                    reason: super::error::plain(other),
                    stderr: self.stderr_tail(),
                },
            },
        }
    }
}
