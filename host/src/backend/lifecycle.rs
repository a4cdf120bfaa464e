//! How a connection to a backend begins: the protocol era it speaks.
//!
//! Revisions up to 2025-11-25 open a session with `initialize`; 2026-07-28
//! has none: the client asks `server/discover` and sends every request with
//! its own `_meta` (revision, client capabilities), which rmcp adds once
//! discovery chose the revision. Which one a backend gets is its `protocol`
//! key ([`Protocol`]): a revision, or `auto` (see [`begin`]).
//!
//! A stdio backend is one process with one pair of pipes, so `auto`'s
//! second try must reuse the transport rmcp dropped with the failed first;
//! [`Returnable`] hands it back.

use std::sync::{Arc, Mutex};

use rmcp::ServiceExt;
use rmcp::model::{ProtocolVersion, RequestMetaObject};
use rmcp::service::{
    ClientInitializeError, ClientLifecycleMode, ClientServiceExt, RoleClient, RunningService,
    RxJsonRpcMessage, TxJsonRpcMessage,
};
use rmcp::transport::Transport;

use super::client::BackendClient;
use crate::config::Protocol;

/// The era a connection speaks, from what the backend agreed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// A session opened by `initialize` (revisions up to 2025-11-25).
    Handshake,
    /// No session: `server/discover` and self-contained requests.
    Modern,
}

impl Era {
    pub fn of(version: &ProtocolVersion) -> Era {
        if version.has_initialize() {
            Era::Handshake
        } else {
            Era::Modern
        }
    }
}

/// The era `auto` found a backend to speak, remembered across its
/// connections: each session's or lane's connection to a backend that
/// speaks only 2026-07-28 then starts with `server/discover` instead of
/// paying a refused `initialize` first. Only an order: a backend that
/// changed era since is still reached by the fallback, and the new era is
/// remembered.
///
/// Also remembers the instance of the backend that refused a handshake-era
/// client's `initialize` (see [`begin`]), so each instance is asked once.
#[derive(Debug, Default)]
pub struct Learned {
    era: std::sync::atomic::AtomicU8,
    /// 1 + the instance that refused `initialize`; 0: none did.
    refused_session: std::sync::atomic::AtomicU64,
}

impl Learned {
    const MODERN: u8 = 2;
    const HANDSHAKE: u8 = 1;

    /// The era last recorded, if any.
    fn get(&self) -> Option<Era> {
        match self.era.load(std::sync::atomic::Ordering::Relaxed) {
            Self::MODERN => Some(Era::Modern),
            Self::HANDSHAKE => Some(Era::Handshake),
            _ => None,
        }
    }

    /// Records the era a connection began in.
    pub fn record(&self, era: Era) {
        let v = match era {
            Era::Modern => Self::MODERN,
            Era::Handshake => Self::HANDSHAKE,
        };
        self.era.store(v, std::sync::atomic::Ordering::Relaxed);
    }

    fn session_refused(&self, instance: u64) -> bool {
        self.refused_session
            .load(std::sync::atomic::Ordering::Relaxed)
            == instance + 1
    }

    fn record_session_refused(&self, instance: u64) {
        self.refused_session
            .store(instance + 1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// How `auto` chooses for one connection ([`begin`]).
pub struct Choice<'a> {
    pub protocol: &'a Protocol,
    pub learned: &'a Learned,
    /// Over HTTP: knowing nothing yet, ask `server/discover` first.
    pub probe: bool,
    /// The connection serves handshake-era clients only.
    pub for_handshake_client: bool,
    /// The backend instance it reaches.
    pub instance: u64,
}

/// Why no lifecycle began (both tries' reasons when `auto` fell back).
#[derive(Debug)]
pub struct Failed {
    pub reason: String,
}

/// Whether a failed first try is worth following with the other era
/// (`auto`): the backend answered, just not in that era. A timeout (silent
/// backend) or a transport that ended (process gone, nothing listening) is
/// not.
fn refused(e: &ClientInitializeError) -> bool {
    match e {
        ClientInitializeError::JsonRpcError(_)
        | ClientInitializeError::ExpectedInitResult(_)
        | ClientInitializeError::ExpectedInitResponse(_) => true,
        // Streamable HTTP reports an HTTP error status (400, 404, 405 from
        // a server without that era) as a transport error of its request;
        // whether the connection was refused is told by the caller
        // (`reached`).
        ClientInitializeError::TransportError { context, .. } => {
            context.contains("initialize") || context.contains("discover")
        }
        _ => false,
    }
}

/// Begins the lifecycle `protocol` asks for over transports from `next`
/// (asked once, and again when `auto` tries the other era), with a fresh
/// handler from `client` for each try. `reached` says, after a failed try,
/// whether anything answered at all (HTTP: not a refused connection).
///
/// `auto` asks what `learned` says the backend spoke last. Knowing nothing
/// yet, over HTTP (`probe`), it asks `server/discover` first, as a
/// 2026-07-28 client does: a backend that also lists a handshake revision
/// speaks both eras and is begun again with `initialize` (its 2026-07-28
/// clients get a 2026-07-28 session of their own, `variants.rs`); one that
/// speaks only 2026-07-28 is kept as discovered; one that refuses gets
/// `initialize`. Over stdio (one era on one pair of pipes) the handshake
/// comes first. The era that began is recorded.
///
/// A connection serving only handshake-era clients asks `initialize` first even
/// where the backend was found speaking 2026-07-28 only: some servers list
/// only their newest revision in `server/discover` yet take a session, and
/// only a session carries what they ask of that client during a call
/// (sampling, elicitation as requests) and its `resources/subscribe`. A
/// refusal is remembered for the instance, and what such a connection
/// found is not recorded: the shared connection's era stays its own.
pub async fn begin<T, N>(
    choice: Choice<'_>,
    client: &BackendClient,
    mut next: N,
    reached: impl Fn() -> bool,
) -> Result<RunningService<RoleClient, BackendClient>, Failed>
where
    T: Transport<RoleClient> + 'static,
    N: FnMut() -> Option<T>,
{
    let transport = || {
        next().ok_or_else(|| Failed {
            reason: "the backend's transport is gone".into(),
        })
    };
    let mut transport = transport;
    let latest = [ProtocolVersion::LATEST];
    let Choice {
        protocol,
        learned,
        probe,
        for_handshake_client,
        instance,
    } = choice;
    match protocol {
        Protocol::Handshake(version) => {
            let mut handler = client.clone();
            handler.offer(version.clone());
            handler.serve(transport()?).await.map_err(failed)
        }
        Protocol::Modern(version) => {
            try_era(client, transport()?, Some(std::slice::from_ref(version)))
                .await
                .map_err(failed)
        }
        Protocol::Auto => {
            let AutoFirst {
                discover,
                probing,
                session_first,
            } = auto_first(
                learned.get(),
                probe,
                for_handshake_client && !learned.session_refused(instance),
            );
            let first = discover.then_some(&latest[..]);
            let service = match try_era(client, transport()?, first).await {
                Ok(service) if probing && speaks_handshake_too(&service).await => {
                    // Speaks both eras: a session, for every relay of it.
                    tracing::debug!(
                        "server/discover lists a handshake revision too; beginning with initialize"
                    );
                    let _ = service.cancel().await;
                    try_era(client, transport()?, None).await.map_err(failed)
                }
                Ok(service) => Ok(service),
                Err(e) if refused(&e) && reached() => {
                    if session_first {
                        learned.record_session_refused(instance);
                    }
                    let why = super::error::plain(&e);
                    let (tried, then) = names(first.is_some());
                    tracing::debug!(reason = %why, "{tried} refused; trying {then}");
                    let second = if first.is_some() {
                        None
                    } else {
                        Some(&latest[..])
                    };
                    try_era(client, transport()?, second)
                        .await
                        .map_err(|second| Failed {
                            reason: format!(
                                "{tried} failed ({why}), and so did {then} ({})",
                                super::error::plain(&second)
                            ),
                        })
                }
                Err(e) => Err(failed(e)),
            }?;
            if !session_first {
                learned.record(era_of(&service));
            }
            Ok(service)
        }
    }
}

/// What `auto` asks first ([`auto_first`]).
#[derive(Debug, PartialEq, Eq)]
struct AutoFirst {
    /// `server/discover` (else `initialize`).
    discover: bool,
    /// Nothing is known yet: a discovered backend is asked whether it
    /// speaks the handshake era too.
    probing: bool,
    /// A handshake-era client's connection tries a session against what
    /// was learned.
    session_first: bool,
}

/// What `auto` asks first, from the era `known` of the backend, whether
/// the connection may `probe` (HTTP) and whether it may try a session for
/// a handshake-era client (not refused on this instance).
fn auto_first(known: Option<Era>, probe: bool, may_try_session: bool) -> AutoFirst {
    let probing = probe && known.is_none();
    let session_first = may_try_session && known == Some(Era::Modern);
    AutoFirst {
        discover: !session_first && (known == Some(Era::Modern) || probing),
        probing,
        session_first,
    }
}

/// Whether a backend begun with `server/discover` lists a handshake
/// revision Vigil speaks among its supported ones (rmcp keeps only the
/// revision it chose, so the result is asked for again; rmcp answers from
/// its response cache when it kept the first).
async fn speaks_handshake_too(service: &RunningService<RoleClient, BackendClient>) -> bool {
    match service.peer().discover(RequestMetaObject::new()).await {
        Ok(found) => found
            .supported_versions
            .iter()
            .any(|v| v.has_initialize() && ProtocolVersion::KNOWN_VERSIONS.contains(v)),
        Err(_) => false,
    }
}

fn era_of(service: &RunningService<RoleClient, BackendClient>) -> Era {
    service
        .peer()
        .peer_info()
        .map_or(Era::Handshake, |i| Era::of(&i.protocol_version))
}

/// One try: `server/discover` offering `modern` (in order of preference),
/// or (`None`) the handshake.
async fn try_era<T: Transport<RoleClient> + 'static>(
    client: &BackendClient,
    transport: T,
    modern: Option<&[ProtocolVersion]>,
) -> Result<RunningService<RoleClient, BackendClient>, ClientInitializeError> {
    match modern {
        Some(versions) => {
            let mode = ClientLifecycleMode::Discover {
                preferred_versions: versions.to_vec(),
            };
            client.clone().serve_with_lifecycle(transport, mode).await
        }
        None => client.clone().serve(transport).await,
    }
}

/// What the first and the second try of `auto` ask, for messages.
fn names(modern_first: bool) -> (&'static str, &'static str) {
    if modern_first {
        ("server/discover", "initialize")
    } else {
        ("initialize", "server/discover")
    }
}

fn failed(e: ClientInitializeError) -> Failed {
    Failed {
        reason: super::error::plain(&e),
    }
}

/// A transport that goes back to its [`Slot`] when dropped while armed:
/// rmcp drops the transport of a failed lifecycle, and a stdio backend has
/// only the one pair of pipes. Disarmed once a lifecycle began, it then
/// ends with the connection like any transport.
pub struct Returnable<T> {
    inner: Option<T>,
    slot: Slot<T>,
}

/// Where a dropped [`Returnable`] puts its transport, and whether it does.
pub struct Slot<T>(Arc<Mutex<SlotState<T>>>);

struct SlotState<T> {
    armed: bool,
    returned: Option<T>,
}

impl<T> Clone for Slot<T> {
    fn clone(&self) -> Self {
        Slot(self.0.clone())
    }
}

impl<T> Slot<T> {
    /// A slot holding `transport`, armed.
    pub fn new(transport: T) -> Slot<T> {
        Slot(Arc::new(Mutex::new(SlotState {
            armed: true,
            returned: Some(transport),
        })))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, SlotState<T>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The transport, if it is (back) in the slot, wrapped to return again.
    pub fn take(&self) -> Option<Returnable<T>> {
        let inner = self.state().returned.take()?;
        Some(Returnable {
            inner: Some(inner),
            slot: self.clone(),
        })
    }

    /// From now on a dropped transport is simply dropped.
    pub fn disarm(&self) {
        let mut s = self.state();
        s.armed = false;
        s.returned = None;
    }
}

impl<T> Drop for Returnable<T> {
    fn drop(&mut self) {
        let mut s = self.slot.state();
        if s.armed {
            s.returned = self.inner.take();
        }
    }
}

impl<T: Transport<RoleClient>> Returnable<T> {
    fn inner(&mut self) -> &mut T {
        // Only `Drop` takes the transport out.
        self.inner
            .as_mut()
            .expect("a Returnable holds its transport until dropped")
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Returnable<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner().send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.inner().receive()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner().close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A transport that only counts its drops.
    struct Pipes(Arc<std::sync::atomic::AtomicUsize>);

    impl Drop for Pipes {
        fn drop(&mut self) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[test]
    fn auto_asks_a_handshake_era_client_for_a_session_unless_refused() {
        let first = |known, probe, may| auto_first(known, probe, may);
        // Shared connections: learned order, discover to probe over HTTP.
        assert!(first(None, true, false).discover && first(None, true, false).probing);
        assert!(
            !first(None, false, false).discover,
            "stdio: handshake first"
        );
        assert!(first(Some(Era::Modern), true, false).discover);
        assert!(!first(Some(Era::Handshake), true, false).discover);
        // A handshake-era client's own connection: a session first where
        // the backend was found in 2026-07-28 and has not refused one.
        let tried = first(Some(Era::Modern), true, true);
        assert!(!tried.discover && tried.session_first, "{tried:?}");
        assert!(!first(Some(Era::Handshake), true, true).session_first);
        assert!(
            !first(None, true, true).session_first,
            "nothing learned: probe as usual"
        );
    }

    #[test]
    fn a_refused_session_is_remembered_for_its_instance_only() {
        let learned = Learned::default();
        assert!(!learned.session_refused(0));
        learned.record_session_refused(3);
        assert!(learned.session_refused(3));
        assert!(!learned.session_refused(4), "a new instance is asked again");
    }

    #[test]
    fn an_armed_slot_gets_its_transport_back_and_a_disarmed_one_lets_it_go() {
        let drops = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let slot = Slot::new(Pipes(drops.clone()));
        let first = slot.take().expect("the transport starts in the slot");
        assert!(slot.take().is_none(), "lent out once at a time");
        drop(first); // a failed lifecycle drops it
        assert_eq!(drops.load(std::sync::atomic::Ordering::SeqCst), 0);
        let second = slot.take().expect("back after the failed try");
        slot.disarm(); // the lifecycle began
        drop(second);
        assert_eq!(
            drops.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "dropped for good"
        );
        assert!(slot.take().is_none());
    }

    #[test]
    fn era_follows_whether_the_revision_has_a_handshake() {
        assert_eq!(Era::of(&ProtocolVersion::V_2025_11_25), Era::Handshake);
        assert_eq!(Era::of(&ProtocolVersion::V_2024_11_05), Era::Handshake);
        assert_eq!(Era::of(&ProtocolVersion::V_2026_07_28), Era::Modern);
    }
}
