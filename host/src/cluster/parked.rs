//! Parked calls: the table of MRTR calls waiting for their clients'
//! answers (the front's `mrtr`), and which replica holds each.
//!
//! The seam several replicas will stand on. A parked call holds live
//! channels to the backend call still running on this process, so it can
//! never move to another replica: what replicas share is *where* a call
//! is parked. Each table belongs to one replica ([`ParkedCalls::replica`]);
//! the front seals that id into the call's `requestState` as a hint, and
//! refuses a retry whose hint names another replica exactly as it refuses
//! a state that names no call. A cluster layer will instead forward such
//! a retry to the replica the hint names (or that replica's table will
//! say where it went).
//!
//! Contract of an implementation:
//!
//! - [`ParkedCalls::park`] numbers each call (never 0: callers keep 0 for
//!   states that name no call) and refuses one when `max` unexpired calls
//!   wait already, handing it back (so its backend request can be
//!   answered with an error); memory never grows past that;
//! - [`ParkedCalls::take`] hands a call out once: a second take of the
//!   same number finds nothing; a call `ready` refuses stays parked;
//! - [`ParkedCalls::sweep`] drops expired calls (their backend requests
//!   then end with an error as their channels close).
//!
//! [`LocalParked`] is one replica's table: a map in memory.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use super::replica::ReplicaId;

/// The calls parked on one replica; `P` is what the front keeps of one.
pub trait ParkedCalls<P>: Send + Sync + 'static {
    /// The replica whose table this is: the hint sealed with each call.
    fn replica(&self) -> &ReplicaId;
    /// Parks `call` until `expires_ms` (milliseconds since 1970); its
    /// number, or the call back when the table is full.
    fn park(&self, call: P, expires_ms: u64) -> Result<u64, Full<P>>;
    /// Takes call `id` if it is parked and `ready` says yes, in one step
    /// (`ready` runs while no other take of `id` can); `None` otherwise.
    fn take(&self, id: u64, ready: &mut dyn FnMut(&P) -> bool) -> Option<P>;
    /// Drops the calls whose expiry is before `now_ms`.
    fn sweep(&self, now_ms: u64);
}

/// A call refused because `max` calls wait already; the call is handed back.
#[derive(thiserror::Error)]
#[error("{max} calls wait for their clients' answers already")]
pub struct Full<P> {
    pub call: P,
    pub max: usize,
}

impl<P> fmt::Debug for Full<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Full").field("max", &self.max).finish()
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One replica's parked calls, in memory.
pub struct LocalParked<P> {
    replica: ReplicaId,
    max: usize,
    next: AtomicU64,
    calls: Mutex<HashMap<u64, (P, u64)>>,
}

impl<P> LocalParked<P> {
    /// An empty table of `replica`'s holding at most `max` calls.
    pub fn new(replica: ReplicaId, max: usize) -> Self {
        LocalParked {
            replica,
            max,
            next: AtomicU64::new(1),
            calls: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (P, u64)>> {
        // Each change is one insert, remove or retain: poisoning cannot
        // leave it half done.
        self.calls.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<P: Send + 'static> ParkedCalls<P> for LocalParked<P> {
    fn replica(&self) -> &ReplicaId {
        &self.replica
    }

    fn park(&self, call: P, expires_ms: u64) -> Result<u64, Full<P>> {
        let mut calls = self.lock();
        let now = now_ms();
        calls.retain(|_, (_, expires)| *expires >= now);
        if calls.len() >= self.max {
            return Err(Full {
                call,
                max: self.max,
            });
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        calls.insert(id, (call, expires_ms));
        Ok(id)
    }

    fn take(&self, id: u64, ready: &mut dyn FnMut(&P) -> bool) -> Option<P> {
        let mut calls = self.lock();
        if !ready(&calls.get(&id)?.0) {
            return None;
        }
        calls.remove(&id).map(|(call, _)| call)
    }

    fn sweep(&self, now_ms: u64) {
        self.lock().retain(|_, (_, expires)| *expires >= now_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(max: usize) -> Box<dyn ParkedCalls<&'static str>> {
        Box::new(LocalParked::new(ReplicaId::new("r1").unwrap(), max))
    }

    #[test]
    fn a_call_is_taken_once_and_only_when_ready() {
        let t = table(4);
        let later = now_ms() + 60_000;
        let a = t.park("a", later).unwrap();
        let b = t.park("b", later).unwrap();
        assert!(a != 0 && b != 0 && a != b, "numbered from 1, each its own");
        assert_eq!(t.take(a, &mut |_| false), None, "not ready: stays");
        assert_eq!(t.take(a, &mut |c| *c == "a"), Some("a"));
        assert_eq!(t.take(a, &mut |_| true), None, "taken once");
        assert_eq!(t.take(99, &mut |_| true), None);
        assert_eq!(t.take(b, &mut |_| true), Some("b"));
        assert_eq!(t.replica().as_str(), "r1");
    }

    #[test]
    fn the_table_is_bounded_by_unexpired_calls_and_swept() {
        let t = table(2);
        let (past, later) = (now_ms() - 1, now_ms() + 60_000);
        let old = t.park("old", past).unwrap();
        t.park("one", later).unwrap();
        // The expired one makes room.
        let two = t.park("two", later).unwrap();
        assert_eq!(t.take(old, &mut |_| true), None);
        let full = t.park("three", later).unwrap_err();
        assert_eq!((full.call, full.max), ("three", 2));
        t.sweep(later + 1);
        assert_eq!(t.take(two, &mut |_| true), None, "swept");
        assert!(t.park("four", later).is_ok());
    }
}
