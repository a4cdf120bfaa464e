//! The instance serving a backend: what one run of it owns, replaced whole
//! when the next run comes up.
//!
//! A [`Backend`](super::Backend) is what the operator configured (name,
//! command or URL, policies, statistics, its supervisor's commands). Each
//! time its supervisor brings it up, a new [`Instance`] is published in
//! its place: the shared connection (and so the era it speaks), the
//! 2026-07-28 *door* (where it answers that revision without a session,
//! once known), the lanes of its callers, and whether a modern client was
//! bridged onto it. Nothing of one run leaks into the next: a lane, a door
//! or a bridge belongs to the instance it was opened on and ends with it
//! (no counter to compare), and whoever holds an instance (a call, a
//! generation) keeps a consistent view of it to the end.
//!
//! Two instances of one backend may be alive at once: a call that began on
//! the old one finishes on it while new calls take the new one, and a
//! rollout will start its new version as a second instance beside the one
//! serving. The generation says which instance serves each backend
//! (`Generation::serving`).
//!
//! Not here: the capability sets' variants (`variants.rs`), which outlive
//! a run on purpose (their last listing is shown until the next run lists
//! them again) and know which run they were opened on; the process or
//! container, whose handle is its supervisor's (one runtime per
//! supervisor).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use super::http_ping::{SessionTarget, Target};
use super::lane;
use super::{Connection, Era};

/// One run of a backend (see the module docs).
pub struct Instance {
    /// 1 for the first run that came up, one more for each next one; 0
    /// before any did.
    number: u64,
    /// What the runtime calls what runs (a container id, a process id),
    /// when it runs something.
    runs: Option<String>,
    /// Where the run is reached over HTTP when that is not the configured
    /// `url` (a version started beside another, see `app::rollouts`):
    /// connections of their own (a session's, a lane) go there too.
    url: Option<String>,
    /// The era the shared connection speaks (fixed for the run).
    era: Option<Era>,
    /// The shared connection; `None` once the run ended.
    shared: RwLock<Option<Arc<Connection>>>,
    /// HTTP backends: the sessions shared by calls with nothing per
    /// session, by caller.
    pub(super) lanes: lane::Lanes,
    /// Where this run answers a 2026-07-28 request without a session,
    /// once a 2026-07-28 variant opened in that era (a backend that speaks
    /// both); read without waiting by the raw path.
    door: Mutex<Option<Arc<SessionTarget>>>,
    /// A 2026-07-28 client was served over a handshake-era session of its
    /// caller on this run (it did not answer that client in its era).
    bridged: AtomicBool,
}

impl Instance {
    /// Before any run came up.
    pub(super) fn none() -> Self {
        Self::new(0, None, None, None)
    }

    /// Run `number`, with its shared connection (none for a backend whose
    /// supervisor opens none).
    pub(super) fn new(
        number: u64,
        runs: Option<String>,
        shared: Option<Arc<Connection>>,
        url: Option<String>,
    ) -> Self {
        Self {
            number,
            runs,
            url,
            era: shared.as_ref().map(|c| c.era()),
            shared: RwLock::new(shared),
            lanes: lane::Lanes::default(),
            door: Mutex::new(None),
            bridged: AtomicBool::new(false),
        }
    }

    /// Which run of its backend this is (see [`Instance::new`]).
    pub fn number(&self) -> u64 {
        self.number
    }

    /// What the runtime calls what runs, if it runs something.
    pub fn runs(&self) -> Option<&str> {
        self.runs.as_deref()
    }

    /// Where the run is reached, when not at the configured `url`.
    pub fn url(&self) -> Option<&str> {
        self.url.as_deref()
    }

    /// The era of the shared connection, while the run lasts.
    pub fn era(&self) -> Option<Era> {
        self.shared().and(self.era)
    }

    /// The shared connection, while the run lasts (whatever the health
    /// state says: [`Backend::shared`](super::Backend::shared) asks that).
    pub fn shared(&self) -> Option<Arc<Connection>> {
        self.shared
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The run ended (for the supervisor, through its backend): its
    /// shared connection, door and lanes go.
    pub(super) fn end(&self) {
        *self.shared.write().unwrap_or_else(|e| e.into_inner()) = None;
        *self.door.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.lanes.close_all();
    }

    /// Where a 2026-07-28 request reaches this run in its era without a
    /// session: the shared connection's destination when that speaks
    /// 2026-07-28, else the door once open. `None` while neither is known
    /// (the typed path then opens the door, or bridges the eras), after
    /// the run ended, and for a stdio backend.
    pub(crate) fn stateless_target(&self) -> Option<Arc<Target>> {
        let shared = self.shared()?;
        if shared.era() == Era::Modern {
            return shared.session_target()?.stateless();
        }
        self.door
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(|t| t.stateless())
    }

    /// A 2026-07-28 session of this run opened in that era: its
    /// destination is the door (for `variants.rs`).
    pub(super) fn open_door(&self, target: Arc<SessionTarget>) {
        if self.shared().is_some() {
            *self.door.lock().unwrap_or_else(|e| e.into_inner()) = Some(target);
        }
    }

    /// A 2026-07-28 client was served over a handshake-era session of its
    /// caller on this run.
    pub fn note_bridged(&self) {
        self.bridged.store(true, Ordering::Relaxed);
    }

    /// Whether [`Instance::note_bridged`] happened on this run.
    pub fn bridges_modern(&self) -> bool {
        self.bridged.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil;

    #[test]
    fn a_new_run_replaces_the_serving_instance_whole() {
        let b = testutil::stdio("");
        let before = b.serving();
        assert_eq!((before.number(), before.runs()), (0, None));
        b.instance_up(Some("4242".into()), None, None);
        let first = b.serving();
        assert_eq!((first.number(), first.runs()), (1, Some("4242")));
        assert_eq!(b.instance(), 1);
        first.note_bridged();
        assert!(b.serving().bridges_modern());
        // The next run starts with nothing of the first: not bridged, no
        // door, its own number. Whoever holds the first keeps it as it was.
        b.instance_ended();
        b.instance_up(Some("4343".into()), None, None);
        let second = b.serving();
        assert_eq!((second.number(), second.runs()), (2, Some("4343")));
        assert!(!second.bridges_modern());
        assert!(second.stateless_target().is_none());
        assert!(first.bridges_modern());
        assert_eq!(first.runs(), Some("4242"));
    }
}
