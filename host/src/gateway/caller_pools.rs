//! The backend connections of clients without a session.
//!
//! A 2026-07-28 client may send every request on its own, with no session
//! (`initialize` is gone), carrying its `Authorization` each time. What a
//! backend keeps per backend session must still be that client's caller's
//! alone: a `forward_auth` backend sees the client's credentials and is
//! listed with them, a backend that answers it only in the handshake era
//! serves it on a backend session of its caller, and a `share` backend
//! runs an instance of its caller's. Such requests share one [`Pool`] per
//! caller, credentials and capability set: the same principal with the
//! same `Authorization` finds the connections and catalogs its earlier
//! requests opened, and a caller with other credentials never does (the
//! key holds both, so one caller's connection never carries another's
//! token, and a refreshed token opens afresh). The capability set is in
//! the key because a backend session mirrors what its client declared.
//!
//! The same caller's requests also share the resource links its calls
//! returned (`links.rs`): a read of a resource its backend session made
//! goes to that session, as a handshake-era session's does.
//!
//! A pool nobody used for [`IDLE`] is dropped with its connections; at
//! most `[limits] max_sessions` are kept (the least recently used goes
//! first), like the sessions of handshake-era clients.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::auth::{CallerKey, Principal};
use crate::backend::capset::CapSet;
use crate::backend::pool::{Context, Pool};

/// How long a caller's pool outlives its last request: as long as an idle
/// handshake-era session (`streams::IDLE`).
pub const IDLE: Duration = super::streams::IDLE;

/// Who, with which credentials, declaring what.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    caller: CallerKey,
    authorization: Option<String>,
    /// What the client declares: a backend session mirrors it (the
    /// backend asks such a client only what it can answer).
    capset: CapSet,
}

struct Entry {
    caller: Caller,
    last_used: Instant,
}

/// What a sessionless caller's requests share.
#[derive(Clone)]
pub struct Caller {
    pub pool: Arc<Pool>,
    pub links: Arc<super::links::Links>,
}

pub struct CallerPools {
    ctx: Arc<Context>,
    max: usize,
    entries: Mutex<HashMap<Key, Entry>>,
}

impl CallerPools {
    pub fn new(ctx: Arc<Context>, max: usize) -> Self {
        Self {
            ctx,
            max: max.max(1),
            entries: Mutex::default(),
        }
    }

    /// The pool of `principal` with `authorization`, made on first use
    /// (its number from `new_id`).
    pub fn get(
        &self,
        principal: &Principal,
        authorization: Option<&str>,
        capset: &CapSet,
        new_id: impl FnOnce() -> u64,
    ) -> Caller {
        let key = Key {
            caller: principal.caller().clone(),
            authorization: authorization.map(str::to_owned),
            capset: capset.clone(),
        };
        let now = Instant::now();
        let mut entries = self.lock();
        if let Some(e) = entries.get_mut(&key) {
            e.last_used = now;
            return e.caller.clone();
        }
        entries.retain(|_, e| now.duration_since(e.last_used) < IDLE);
        if entries.len() >= self.max
            && let Some(oldest) = entries
                .iter()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(k, _)| k.clone())
        {
            entries.remove(&oldest);
        }
        let caller = Caller {
            pool: Pool::for_caller(new_id(), self.ctx.clone()),
            links: Arc::default(),
        };
        entries.insert(
            key,
            Entry {
                caller: caller.clone(),
                last_used: now,
            },
        );
        caller
    }

    /// Every pool in use (for the poller and the idle reaper); drops those
    /// unused for [`IDLE`].
    pub fn pools(&self) -> Vec<Arc<Pool>> {
        let now = Instant::now();
        let mut entries = self.lock();
        entries.retain(|_, e| now.duration_since(e.last_used) < IDLE);
        entries.values().map(|e| e.caller.pool.clone()).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Entry>> {
        // Each update is one insert, remove or timestamp: poisoning cannot
        // leave the map inconsistent.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Generations;
    use crate::config::Naming;

    fn pools(max: usize) -> CallerPools {
        let ctx = Context {
            generations: Generations::default(),
            naming: Naming::Prefix {
                separator: "__".into(),
            },
            exchanger: None,
            views: Default::default(),
            instances: crate::backend::instances::Instances::new(1),
        };
        CallerPools::new(Arc::new(ctx), max)
    }

    #[test]
    fn one_pool_per_caller_and_credentials() {
        let p = pools(10);
        let mut n = 0;
        let mut id = || {
            n += 1;
            n
        };
        let alice = Principal::key("alice");
        let a1 = p
            .get(&alice, Some("Bearer one"), &CapSet::default(), &mut id)
            .pool;
        assert!(Arc::ptr_eq(
            &a1,
            &p.get(&alice, Some("Bearer one"), &CapSet::default(), &mut id)
                .pool
        ));
        let a2 = p
            .get(&alice, Some("Bearer two"), &CapSet::default(), &mut id)
            .pool;
        assert!(!Arc::ptr_eq(&a1, &a2), "other credentials, other pool");
        let b1 = p
            .get(
                &Principal::key("bob"),
                Some("Bearer one"),
                &CapSet::default(),
                &mut id,
            )
            .pool;
        assert!(
            !Arc::ptr_eq(&a1, &b1),
            "another caller with the same header"
        );
        assert_eq!(p.pools().len(), 3);
    }

    #[test]
    fn the_least_recently_used_goes_at_the_limit() {
        let p = pools(2);
        let mut n = 0;
        let mut id = || {
            n += 1;
            n
        };
        let (a, b, c) = (
            Principal::key("a"),
            Principal::key("b"),
            Principal::key("c"),
        );
        let first = p.get(&a, None, &CapSet::default(), &mut id).pool;
        p.get(&b, None, &CapSet::default(), &mut id);
        p.get(&a, None, &CapSet::default(), &mut id); // a is used again: b is now the oldest
        p.get(&c, None, &CapSet::default(), &mut id);
        assert_eq!(p.pools().len(), 2);
        assert!(
            Arc::ptr_eq(&first, &p.get(&a, None, &CapSet::default(), &mut id).pool),
            "a was kept"
        );
    }
}
