//! The session book: where a client session is opened, found and closed,
//! by its sealed id ([`super::session_id`]).
//!
//! The seam several replicas stand on: [`SessionBook`] is what the front
//! asks; [`LocalBook`] answers from the id itself and a list of closed
//! ids kept in memory (one replica); `cluster::postgres::book` keeps that
//! list, and what changes during a session, where every replica reads it.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use async_trait::async_trait;

use super::session_id::{Sealer, SessionFacts, Unsealed};

/// Why an id names no session that may be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error(transparent)]
    Unsealed(#[from] Unsealed),
    /// Closed by its client (HTTP DELETE): stays closed until it expires.
    #[error("the session was closed")]
    Closed,
}

/// Why a session could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("no random nonce for a session id: {0}")]
pub struct OpenError(#[from] getrandom::Error);

/// What changes during a session that a replica adopting it must know:
/// the client's log level (`logging/setLevel`) and the resources it
/// subscribed to. Only the handshake era has either; a 2026-07-28 request
/// carries its own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Kept {
    pub log_level: Option<String>,
    pub subscriptions: BTreeSet<String>,
}

/// One change to what a session [`Kept`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    LogLevel(String),
    Subscribed(String),
    Unsubscribed(String),
}

impl Kept {
    fn apply(&mut self, change: Change) {
        match change {
            Change::LogLevel(level) => self.log_level = Some(level),
            Change::Subscribed(uri) => {
                self.subscriptions.insert(uri);
            }
            Change::Unsubscribed(uri) => {
                self.subscriptions.remove(&uri);
            }
        }
    }
}

/// Sessions by their sealed ids.
#[async_trait]
pub trait SessionBook: Send + Sync + 'static {
    /// Opens a session with `facts`; returns the id its client uses.
    async fn open(&self, facts: &SessionFacts) -> Result<String, OpenError>;
    /// The facts of the session `id` names, verified without a lookup of
    /// the session itself: sealed by this gateway (or a replica sharing its
    /// key), unexpired, not closed.
    async fn resolve(&self, id: &str) -> Result<SessionFacts, Refused>;
    /// Whether the session `facts` names was closed on another replica:
    /// asked before a replica adopts a session (a round trip to a shared
    /// book), where [`SessionBook::resolve`] knows only the closes this
    /// replica heard of. One replica: never.
    async fn closed_elsewhere(&self, _facts: &SessionFacts) -> bool {
        false
    }
    /// Closes the session `id` names: every later [`SessionBook::resolve`]
    /// of it is refused, until it would have expired anyway.
    async fn close(&self, id: &str);
    /// Records `change` to what the session `id` names [`Kept`].
    async fn update(&self, id: &str, change: Change) -> Result<(), Refused>;
    /// What the session `id` names has kept so far.
    async fn kept(&self, id: &str) -> Result<Kept, Refused>;
}

/// One replica's book: ids are verified by their seal; closed ones, and
/// what open ones kept, are remembered in memory (a restart forgets them:
/// an id closed before a restart opens again, and finds no session
/// behind it; the sessions behind kept state end with the process too).
pub struct LocalBook {
    sealer: Sealer,
    /// Closed ids, with when each expires (then it is refused anyway and
    /// forgotten here).
    closed: Mutex<HashMap<String, u64>>,
    /// What open sessions kept, for those that kept anything, with when
    /// each id expires (then forgotten at the next change).
    kept: Mutex<HashMap<String, (u64, Kept)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Each change is one insert, remove or retain: poisoning cannot leave
    // it half done.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Seconds since 1970 now (0 for a clock before it).
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl LocalBook {
    pub fn new(sealer: Sealer) -> Self {
        LocalBook {
            sealer,
            closed: Mutex::default(),
            kept: Mutex::default(),
        }
    }

    fn closed(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        lock(&self.closed)
    }
}

#[async_trait]
impl SessionBook for LocalBook {
    async fn open(&self, facts: &SessionFacts) -> Result<String, OpenError> {
        Ok(self.sealer.seal(facts)?)
    }

    async fn resolve(&self, id: &str) -> Result<SessionFacts, Refused> {
        let facts = self.sealer.open(id)?;
        if self.closed().contains_key(id) {
            return Err(Refused::Closed);
        }
        Ok(facts)
    }

    async fn close(&self, id: &str) {
        let Ok(facts) = self.sealer.open(id) else {
            return; // not an open session: nothing to remember
        };
        let now = facts.issued.max(unix_now());
        lock(&self.kept).remove(id);
        let mut closed = self.closed();
        closed.retain(|_, expires| *expires > now);
        closed.insert(id.to_owned(), facts.expires);
    }

    async fn update(&self, id: &str, change: Change) -> Result<(), Refused> {
        let facts = self.resolve(id).await?;
        let now = unix_now();
        let mut kept = lock(&self.kept);
        kept.retain(|_, (expires, _)| *expires > now);
        kept.entry(id.to_owned())
            .or_insert_with(|| (facts.expires, Kept::default()))
            .1
            .apply(change);
        Ok(())
    }

    async fn kept(&self, id: &str) -> Result<Kept, Refused> {
        self.resolve(id).await?;
        Ok(lock(&self.kept)
            .get(id)
            .map(|(_, k)| k.clone())
            .unwrap_or_default())
    }
}

/// The book `config` calls for: ids sealed under `[cluster] key_env`'s key
/// (every replica's, with `previous_key_env`'s still opened during a
/// rotation), else under the key kept in `data_dir` (`cluster::key`), so a
/// restart keeps them valid. A key that cannot be kept there is made for
/// this run only (logged): ids then end with the process, as the sessions
/// behind them do anyway.
pub fn for_config(config: &crate::config::Config) -> std::sync::Arc<dyn SessionBook> {
    if let Some(key) = &config.cluster.key {
        let previous = config.cluster.previous_key.as_ref().map(|k| &k.key);
        return std::sync::Arc::new(LocalBook::new(Sealer::new(&key.key, previous)));
    }
    let key = super::key::load_or_create(&config.data_dir).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "session ids are sealed with a key of this run only: clients reconnecting after a restart open new sessions");
        let mut k = [0u8; 32];
        if let Err(e) = getrandom::fill(&mut k) {
            // No entropy at all: the MRTR states are off too (logged).
            // A key from the clock and the process keeps ids unguessable
            // across runs only, so say it loudly.
            tracing::error!(error = %e, "no random bytes for the session key: ids are sealed with a key derived from the start time");
            use sha2::Digest as _;
            let seed = format!("{:?}{}", std::time::SystemTime::now(), std::process::id());
            k.copy_from_slice(&sha2::Sha256::digest(seed.as_bytes()));
        }
        k
    });
    std::sync::Arc::new(LocalBook::new(Sealer::new(&key, None)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Principal;

    fn book() -> LocalBook {
        LocalBook::new(Sealer::new(&[3; 32], None))
    }

    fn facts(local: &str) -> SessionFacts {
        SessionFacts::new(
            local.into(),
            Principal::key("bob").caller(),
            "2025-06-18".into(),
        )
    }

    #[tokio::test]
    async fn an_opened_session_resolves_until_it_is_closed() {
        let b = book();
        let id = b.open(&facts("one")).await.unwrap();
        let other = b.open(&facts("two")).await.unwrap();
        assert_eq!(b.resolve(&id).await.unwrap().local, "one");
        b.close(&id).await;
        assert_eq!(b.resolve(&id).await, Err(Refused::Closed));
        // Closing one leaves the others.
        assert_eq!(b.resolve(&other).await.unwrap().local, "two");
    }

    #[tokio::test]
    async fn ids_of_another_book_or_altered_are_refused_and_not_remembered() {
        let b = book();
        let foreign = LocalBook::new(Sealer::new(&[4; 32], None))
            .open(&facts("x"))
            .await
            .unwrap();
        assert_eq!(
            b.resolve(&foreign).await,
            Err(Refused::Unsealed(Unsealed::Forged))
        );
        b.close(&foreign).await;
        assert!(b.closed().is_empty(), "a forged id is not kept");
        assert_eq!(
            b.resolve("not-an-id").await,
            Err(Refused::Unsealed(Unsealed::Malformed))
        );
    }

    #[tokio::test]
    async fn a_book_with_the_same_key_resolves_the_others_ids() {
        // What lets another replica (or this one after a restart) adopt a
        // session: the id alone says what it is.
        let a = book();
        let id = a.open(&facts("kept")).await.unwrap();
        let b = book();
        let f = b.resolve(&id).await.unwrap();
        assert_eq!(
            (f.local.as_str(), f.revision.as_str()),
            ("kept", "2025-06-18")
        );
        assert!(f.caller.is(Principal::key("bob").caller()));
        assert!(!f.caller.is(Principal::key("alice").caller()));
    }

    #[tokio::test]
    async fn what_a_session_kept_is_read_back_and_ends_with_it() {
        let b = book();
        let id = b.open(&facts("one")).await.unwrap();
        let other = b.open(&facts("two")).await.unwrap();
        assert_eq!(b.kept(&id).await.unwrap(), Kept::default());
        b.update(&id, Change::LogLevel("debug".into()))
            .await
            .unwrap();
        b.update(&id, Change::Subscribed("file:///a".into()))
            .await
            .unwrap();
        b.update(&id, Change::Subscribed("file:///b".into()))
            .await
            .unwrap();
        b.update(&id, Change::Unsubscribed("file:///a".into()))
            .await
            .unwrap();
        let kept = b.kept(&id).await.unwrap();
        assert_eq!(kept.log_level.as_deref(), Some("debug"));
        assert_eq!(
            kept.subscriptions.iter().collect::<Vec<_>>(),
            vec!["file:///b"]
        );
        // Another session kept nothing of it.
        assert_eq!(b.kept(&other).await.unwrap(), Kept::default());
        // Closed: its state is forgotten and no change is taken.
        b.close(&id).await;
        assert!(lock(&b.kept).is_empty());
        assert_eq!(
            b.update(&id, Change::LogLevel("info".into())).await,
            Err(Refused::Closed)
        );
        assert_eq!(b.kept(&id).await, Err(Refused::Closed));
        // A forged id changes nothing.
        assert!(matches!(
            b.update("s1.forged", Change::LogLevel("info".into())).await,
            Err(Refused::Unsealed(_))
        ));
        assert!(lock(&b.kept).is_empty());
    }
}
