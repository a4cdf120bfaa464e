//! Backends: MCP client connections to the servers behind the gateway.
//!
//! Each configured backend has one [`Backend`]: the [`Instance`] serving it
//! (one run: the *shared* connection the supervisor opened over whatever
//! endpoint the runtime gave it, see `serving.rs`), its health [`Status`]
//! (written only by the supervisor), its call statistics (written by the
//! router) and a command channel to its supervisor. Streamable HTTP
//! backends also get a *lane* per caller ([`Backend::lane`]), one session
//! shared by client sessions whose calls carry nothing per session, and
//! one connection per client session that needs its own
//! ([`Backend::open_session_connection`]).

pub mod ask;
pub mod capset;
pub mod client;
mod connection;
pub mod error;
mod generation;
mod heard;
mod http_ping;
pub mod inflight;
pub mod instances;
mod kept_post;
mod lane;
mod lifecycle;
mod listen;
mod listing;
pub mod outbox;
pub mod pool;
pub(crate) mod raw_http;
mod reach;
mod serving;
mod set;
mod stream_watch;
mod tap;
#[cfg(test)]
pub(crate) mod testutil;
mod variants;
pub mod views;
pub mod wire;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use rmcp::model::ClientCapabilities;
use tokio::sync::{Notify, mpsc, oneshot};

pub use client::{BackendClient, Downstream, ListKind};
pub use connection::Connection;
pub use error::BackendError;
pub use generation::{Generation, Generations};
pub use inflight::{FrontCall, Inflight, StreamClosed};
pub use lane::Opened as OpenLane;
pub use lifecycle::Era;
pub use listing::{ListLimits, StartDeadline};
pub use outbox::Outbox;
pub use reach::reach;
pub use serving::Instance;
pub use set::BackendSet;
pub use tap::Relay;
pub use variants::Ready as VariantReady;

use crate::background::Background;
use crate::catalog::BackendCatalog;
use crate::config::{BackendConfig, Protocol, Transport};
use crate::health::published::{Published, Publisher};
use crate::health::stats::CallStats;
use crate::health::{HealthState, Status, advertisable};
use crate::runtime::{Endpoint, process::StderrTail};

/// What a backend supervisor reports to the gateway.
#[derive(Debug)]
pub struct BackendUpdate {
    pub backend: Arc<str>,
    /// [`Backend::uid`] of the sender: after a config reload replaced a
    /// backend, the old one's late updates are recognised and dropped.
    pub uid: u64,
    /// The backend left the configuration: forget its catalog.
    pub removed: bool,
    pub state: HealthState,
    /// The backend's catalog when (re)listed; `None` keeps the last one.
    pub catalog: Option<BackendCatalog>,
}

/// Time and size bounds of a backend connection.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub connect: Duration,
    pub request: Duration,
    /// Each listing of the backend's capabilities (`[limits]`).
    pub list: ListLimits,
    /// The largest result relayed (`limits.max_result_bytes`).
    pub max_result: usize,
}

/// An operator's request to a backend's supervisor. Serialized when it is
/// routed to the replica that supervises the backend
/// (`cluster::postgres::command`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Command {
    Restart {
        principal: String,
    },
    Quarantine {
        principal: String,
        reason: Option<String>,
    },
    Release {
        principal: String,
    },
}

/// The supervisor's answer: the new status, or why it refused.
pub type CommandReply = oneshot::Sender<Result<Status, String>>;

/// Why an operator command did not happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandError {
    /// The supervisor refused: the action does not apply in this state.
    Refused(String),
    /// No supervisor to ask (gateway shutting down).
    NoSupervisor(String),
}

/// One configured backend.
pub struct Backend {
    pub name: Arc<str>,
    /// Unique per `Backend` object (a reload that edits a backend makes a
    /// new one under the same name).
    pub uid: u64,
    pub config: BackendConfig,
    bounds: Bounds,
    downstream: Arc<dyn Downstream>,
    /// Where its connections' relay workers run.
    background: Background,
    /// The run serving it now (see `serving.rs`); replaced by the
    /// supervisor alone.
    serving: ArcSwap<Instance>,
    /// The backend sessions of clients that declared capabilities
    /// (`variants.rs`).
    variants: variants::Variants,
    /// Written by the supervisor alone (it takes the publisher).
    status: Published,
    inflight: Arc<Inflight>,
    refresh: Notify,
    /// Completed re-listings (for waiters), and whether one runs now.
    listings: tokio::sync::watch::Sender<u64>,
    listing: std::sync::atomic::AtomicBool,
    /// The era `protocol = "auto"` last found it speaking: a hint carried
    /// from one run to the next (same command, same server).
    learned: lifecycle::Learned,
    /// Outcomes of real `tools/call` traffic (application signal).
    pub stats: CallStats,
    /// The same outcomes as Prometheus series.
    pub call_metrics: crate::metrics::CallMetrics,
    commands: mpsc::UnboundedSender<(Command, CommandReply)>,
    command_rx: Mutex<Option<mpsc::UnboundedReceiver<(Command, CommandReply)>>>,
    /// Set on an instance run for one client (`instances.rs`).
    owned: Option<OwnedBy>,
    /// An update replaced it; it runs on for its drain and bake only
    /// (see [`Backend::retire`]).
    retired: std::sync::atomic::AtomicBool,
}

/// A fresh [`Backend::uid`].
fn next_uid() -> u64 {
    static NEXT_UID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT_UID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Whose instance a backend is, when it is one client's.
struct OwnedBy {
    /// The configured backend's [`Backend::uid`].
    parent_uid: u64,
    owner: instances::Owner,
}

/// How long a client session's new connection (or a lane) waits for its
/// standing GET stream before its first request goes out.
const STANDING_STREAM_WAIT: Duration = Duration::from_secs(2);

impl Backend {
    /// This instance's id: `NAME.iN`, URL-safe (a backend name is
    /// letters, digits, `-` and `_`). It names this `Backend` object only:
    /// a reload that edits the backend makes another instance, with
    /// another id, under the same name (and a rollout will keep two live
    /// at once). Unique within this process; ids shared by replicas come
    /// with the store that shares them.
    pub fn instance_id(&self) -> String {
        format!("{}.i{}", self.name, self.uid)
    }

    pub fn new(
        config: BackendConfig,
        bounds: Bounds,
        downstream: Arc<dyn Downstream>,
        background: Background,
    ) -> Arc<Self> {
        let calls = crate::metrics::get().calls_of(&config.name);
        Arc::new(Self::build(
            config, bounds, downstream, background, calls, None,
        ))
    }

    /// A new instance of this backend for one client, named `id` (see
    /// `instances.rs`): the same command, bounds and policies; its calls
    /// counted under this backend's name.
    fn instance_for(self: &Arc<Self>, id: &str, owner: instances::Owner) -> Arc<Self> {
        let mut config = self.config.clone();
        config.name = id.to_owned();
        config.share = crate::config::Share::All;
        Arc::new_cyclic(|me| {
            let downstream = Arc::new(instances::ForOwner {
                inner: self.downstream.clone(),
                parent: self.name.clone(),
                session: owner.session,
                caller: owner.caller.clone(),
                instance: me.clone(),
            });
            let owned = OwnedBy {
                parent_uid: self.uid,
                owner,
            };
            Self::build(
                config,
                self.bounds,
                downstream,
                self.background.clone(),
                self.call_metrics.clone(),
                Some(owned),
            )
        })
    }

    fn build(
        config: BackendConfig,
        bounds: Bounds,
        downstream: Arc<dyn Downstream>,
        background: Background,
        call_metrics: crate::metrics::CallMetrics,
        owned: Option<OwnedBy>,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            name: config.name.as_str().into(),
            uid: next_uid(),
            stats: CallStats::new(config.health.window),
            call_metrics,
            config,
            bounds,
            downstream,
            background,
            serving: ArcSwap::from_pointee(Instance::none()),
            variants: variants::Variants::default(),
            status: Published::new(Status::initial()),
            inflight: Arc::default(),
            refresh: Notify::new(),
            listings: tokio::sync::watch::Sender::new(0),
            listing: std::sync::atomic::AtomicBool::new(false),
            learned: lifecycle::Learned::default(),
            commands: tx,
            command_rx: Mutex::new(Some(rx)),
            owned,
            retired: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The [`Backend::uid`] of the configured backend this is an instance
    /// of (its own for a configured backend).
    fn parent_uid(&self) -> u64 {
        self.owned.as_ref().map_or(self.uid, |o| o.parent_uid)
    }

    /// The run serving the backend now. Held, it stays consistent: its
    /// connection, door and lanes are that run's even after the next one
    /// came up.
    pub fn serving(&self) -> Arc<Instance> {
        self.serving.load_full()
    }

    /// Whether clients are served by instances of their own (`share` is
    /// not `"all"`; never for such an instance itself).
    pub fn owns_instances(&self) -> bool {
        self.owned.is_none() && self.config.share != crate::config::Share::All
    }

    /// Whether client sessions get their own connection to this backend.
    pub fn per_session(&self) -> bool {
        matches!(self.config.transport, Transport::Http { .. })
    }

    /// Whether each client session reaches this backend with its own
    /// credentials and has its own catalog of it (`forward_auth`).
    pub fn forwards_auth(&self) -> bool {
        self.config.forward_auth
    }

    /// Which run serves (see [`Instance::number`]): a per-session
    /// connection or a variant opened on an earlier one is stale.
    pub fn instance(&self) -> u64 {
        self.serving.load().number()
    }

    /// A new run came up, with its shared connection (for the supervisor):
    /// it serves from now on. `runs`: what the runtime calls it; `url`:
    /// where it is reached, when not at the configured one.
    pub fn instance_up(
        &self,
        runs: Option<String>,
        shared: Option<Arc<Connection>>,
        url: Option<String>,
    ) {
        let old = self.serving.load_full();
        old.end();
        self.serving
            .store(Arc::new(Instance::new(old.number() + 1, runs, shared, url)));
    }

    /// The serving run ended (for the supervisor): no shared connection
    /// until the next one comes up, and the capability sets' sessions,
    /// which were of it, end too (`variants.rs`).
    pub fn instance_ended(&self) {
        self.serving.load().end();
        self.close_variants();
    }

    /// Whether no call is in flight on the serving run's shared
    /// connection (what an update's drain waits for).
    pub fn idle(&self) -> bool {
        self.inflight.is_empty()
    }

    /// An update replaced this backend (`retired`), or rolled back to it
    /// (`!retired`). While retired its supervisor records and announces
    /// nothing: the backend's name in the store and on the event bus is
    /// the new version's.
    pub fn retire(&self, retired: bool) {
        self.retired
            .store(retired, std::sync::atomic::Ordering::Release);
    }

    /// See [`Backend::retire`].
    pub fn retired(&self) -> bool {
        self.retired.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether HTTP connections to the backend are reused (`keep_alive`).
    pub fn keep_alive(&self) -> bool {
        matches!(
            self.config.transport,
            Transport::Http {
                keep_alive: true,
                ..
            }
        )
    }

    /// The largest answer relayed (`limits.max_result_bytes`).
    pub fn max_result(&self) -> usize {
        self.bounds.max_result
    }

    /// How long opening a connection (handshake included) may take.
    pub fn connect_timeout(&self) -> Duration {
        self.bounds.connect
    }

    pub fn state(&self) -> HealthState {
        self.status.state()
    }

    /// The last published status, shared (no copy of its strings).
    pub fn status(&self) -> Arc<Status> {
        self.status.snapshot()
    }

    /// The status's one writer; taken once, by the supervisor.
    pub fn take_status_publisher(&self) -> Option<Publisher> {
        self.status.take_publisher()
    }

    /// The protocol era of the shared connection, while one is open and
    /// the backend is advertisable.
    pub fn era(&self) -> Option<Era> {
        self.shared().map(|c| c.era())
    }

    /// The serving run's shared connection, if the backend is
    /// advertisable.
    pub fn shared(&self) -> Option<Arc<Connection>> {
        if !advertisable(self.state()) {
            return None;
        }
        self.serving.load().shared()
    }

    /// Asks the supervisor to re-list the backend's capabilities. Requests
    /// made while a listing runs are coalesced into one more listing.
    pub fn request_refresh(&self) {
        self.refresh.notify_one();
    }

    /// Resolves when a refresh was requested (for the supervisor).
    pub async fn refresh_requested(&self) {
        self.refresh.notified().await
    }

    /// Re-lists the backend and waits (up to `timeout`) until a listing
    /// completes. Single-flight: when a listing already runs (say, for the
    /// backend's own `list_changed`), this waits for that one instead of
    /// asking for another. `false` if none completed in time.
    pub async fn refresh_and_wait(&self, timeout: Duration) -> bool {
        let mut done = self.listings.subscribe();
        if !self.listing.load(std::sync::atomic::Ordering::Acquire) {
            self.request_refresh();
        }
        tokio::time::timeout(timeout, done.changed())
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Marks a re-listing as running (`true`) or finished (for the
    /// supervisor).
    /// `tell`: waiters hear that a listing finished now; without it they
    /// hear it from [`Backend::listing_applied`].
    pub fn set_listing(&self, running: bool, tell: bool) {
        self.listing
            .store(running, std::sync::atomic::Ordering::Release);
        if !running && tell {
            self.listings.send_modify(|n| *n += 1);
        }
    }

    /// What a listing found is in the catalog now (for the gateway, and
    /// for an instance's follower): waiters of
    /// [`Backend::refresh_and_wait`] see it when they wake.
    pub fn listing_applied(&self) {
        self.listings.send_modify(|n| *n += 1);
    }

    /// Sends an operator command to the supervisor and waits for its answer.
    pub async fn command(&self, cmd: Command) -> Result<Status, CommandError> {
        let (tx, rx) = oneshot::channel();
        self.commands.send((cmd, tx)).map_err(|_| {
            CommandError::NoSupervisor("the backend's supervisor is not running".into())
        })?;
        rx.await
            .map_err(|_| CommandError::NoSupervisor("the backend's supervisor stopped".into()))?
            .map_err(CommandError::Refused)
    }

    /// The command stream; taken once by the supervisor.
    pub fn take_commands(&self) -> Option<mpsc::UnboundedReceiver<(Command, CommandReply)>> {
        self.command_rx.lock().ok().and_then(|mut r| r.take())
    }

    /// Opens the shared connection over `endpoint` (for the supervisor).
    pub async fn open_shared_connection(
        &self,
        endpoint: Endpoint,
        stderr: Option<StderrTail>,
    ) -> Result<Connection, BackendError> {
        let owner = self.owned.as_ref().map(|o| &o.owner);
        let client = BackendClient::new(
            self.name.clone(),
            self.inflight.clone(),
            self.downstream.clone(),
            owner.and_then(|o| o.session),
            owner.and_then(|o| o.capabilities.clone()),
        )
        .with_roots(&self.config.roots)
        .with_client(owner.and_then(|o| o.client.clone()));
        let relay = Relay::spawn(
            self.inflight.clone(),
            self.downstream.clone(),
            self.name.clone(),
            None,
            &self.background,
        );
        connection::connect(
            &self.name,
            endpoint,
            client,
            self.inflight.clone(),
            relay,
            self.bounds,
            self.opening(
                true,
                owner.is_some_and(|o| o.for_handshake_client),
                &self.config.protocol,
            ),
            stderr,
        )
        .await
    }

    /// Opens a connection for one client session, mirroring that client's
    /// capabilities so the backend only asks for what the client can do.
    /// `authorization` (the client's own header, `forward_auth` backends
    /// only) is sent on every request of the connection.
    /// `downstream`, when given, wraps the backend's (see `pool.rs`).
    pub async fn open_session_connection(
        &self,
        session: u64,
        capabilities: Option<ClientCapabilities>,
        authorization: Option<&str>,
        client_era: Era,
        downstream: Option<Arc<dyn Downstream>>,
    ) -> Result<Connection, BackendError> {
        let own = Own {
            session: Some(session),
            capabilities,
            downstream: downstream.unwrap_or_else(|| self.downstream.clone()),
            listen: self.forwards_auth(),
            for_handshake_client: client_era == Era::Handshake,
        };
        let conn = self
            .open_connection(own, authorization, &self.config.protocol)
            .await?;
        // The client may be asked things, maybe on that stream.
        conn.standing_stream_settled(STANDING_STREAM_WAIT).await;
        Ok(conn)
    }

    fn opening<'a>(
        &'a self,
        listen: bool,
        for_handshake_client: bool,
        protocol: &'a Protocol,
    ) -> connection::Opening<'a> {
        connection::Opening {
            keep_alive: self.keep_alive(),
            protocol,
            learned: &self.learned,
            listen,
            for_handshake_client,
            instance: self.instance(),
        }
    }

    /// A connection of its own to an HTTP backend (a client session's, or a
    /// lane); `authorization` is sent only where the backend forwards it.
    async fn open_connection(
        &self,
        own: Own,
        authorization: Option<&str>,
        protocol: &Protocol,
    ) -> Result<Connection, BackendError> {
        let Transport::Http { url, headers, .. } = &self.config.transport else {
            return Err(BackendError::Transport {
                backend: self.name.clone(),
                reason: "stdio backends have one shared session".into(),
                stderr: vec![],
            });
        };
        let mut headers = headers.clone();
        if let Some(auth) = authorization.filter(|_| self.forwards_auth()) {
            headers.insert("authorization".into(), auth.to_owned());
        }
        let url = self
            .serving()
            .url()
            .map_or_else(|| url.clone(), str::to_owned);
        let endpoint = Endpoint::Http { url, headers };
        self.connect_own(endpoint, None, own, protocol).await
    }

    /// A connection of its own over `endpoint`: its own in-flight table
    /// and relay worker, so nothing it carries reaches another
    /// connection's callers.
    async fn connect_own(
        &self,
        endpoint: Endpoint,
        stderr: Option<StderrTail>,
        own: Own,
        protocol: &Protocol,
    ) -> Result<Connection, BackendError> {
        let inflight = Arc::<Inflight>::default();
        let client = BackendClient::new(
            self.name.clone(),
            inflight.clone(),
            own.downstream.clone(),
            own.session,
            own.capabilities,
        )
        .with_roots(&self.config.roots);
        let relay = Relay::spawn(
            inflight.clone(),
            own.downstream,
            self.name.clone(),
            own.session,
            &self.background,
        );
        connection::connect(
            &self.name,
            endpoint,
            client,
            inflight,
            relay,
            self.bounds,
            self.opening(own.listen, own.for_handshake_client, protocol),
            stderr,
        )
        .await
    }
}

/// Whose a connection of its own is ([`Backend::connect_own`]).
struct Own {
    /// The client session it belongs to, if one.
    session: Option<u64>,
    /// What it declares (none when `None`).
    capabilities: Option<ClientCapabilities>,
    /// Where its unsolicited traffic goes.
    downstream: Arc<dyn Downstream>,
    /// Its catalog is its own (see [`connection::Opening::listen`]).
    listen: bool,
    /// It serves handshake-era clients only (see
    /// [`connection::Opening::for_handshake_client`]).
    for_handshake_client: bool,
}
