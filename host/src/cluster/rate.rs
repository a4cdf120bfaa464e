//! Rate limiting: where the token buckets of `[[policy]] rate` and
//! `rate_per_tool` are kept.
//!
//! The seam several replicas will stand on. [`Rates`] is what the policy
//! layer asks, once per entry and kind, for the buckets of one rate;
//! [`RateLimits::take`] is asked per call. The trait sits here, not in
//! `policy`, because where buckets live is a deployment's choice (one
//! replica's memory, or a store every replica shares), picked by the
//! composition root like the session book; what a rate *means* (which
//! entry decides, which rates apply) stays in `policy`.
//!
//! Contract of an implementation:
//!
//! - a rate `N/per` allows a burst of `N` calls, then one call per
//!   `per / N` (GCRA), counted per key;
//! - keys are callers ([`CallerKey`]: the principal *and* the issuer that
//!   vouched for it, so the same subject of two issuers has two buckets),
//!   or a caller and a tool, prompt or resource name;
//! - [`RateLimits::take`] never blocks and never fails for want of its
//!   store: it answers now, with how long until a token is there when
//!   there is none;
//! - the buckets of an entry are its own: [`Rates`] is asked again when an
//!   entry is new or edited, and such an entry starts with full buckets.
//!
//! [`LocalRates`] keeps governor's keyed limiters in memory (one replica;
//! a restart refills every bucket). [`SharedRates`] does too, each
//! replica at its share of the rate among the replicas alive: a limit
//! holds across replicas without a store round trip per call.

use std::hash::Hash;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use governor::clock::Clock;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::auth::CallerKey;
use crate::config::{PolicyConfig, Rate};

/// The buckets of one rate, one bucket per key.
pub trait RateLimits<K>: Send + Sync + 'static {
    /// Takes a token for `key`, or says how long until one is there.
    fn take(&self, key: &K) -> Result<(), Duration>;
}

/// The key of a `rate_per_tool` bucket: a caller and a tool or prompt
/// name, or a resource URI.
pub type ToolKey = (CallerKey, String);

/// The `[[policy]]` entry some buckets belong to.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    /// Its place in the file (`policy[N]`).
    pub index: usize,
    pub config: &'a PolicyConfig,
}

/// Where buckets are kept: makes the buckets of one rate of one entry.
pub trait Rates: Send + Sync + 'static {
    /// The buckets of `entry`'s `rate`: one per caller.
    fn per_caller(&self, entry: Entry<'_>, rate: Rate) -> Box<dyn RateLimits<CallerKey>>;
    /// The buckets of `entry`'s `rate_per_tool`: one per caller and name.
    fn per_tool(&self, entry: Entry<'_>, rate: Rate) -> Box<dyn RateLimits<ToolKey>>;
}

/// One replica's buckets, in memory ([`Buckets`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct LocalRates;

impl Rates for LocalRates {
    fn per_caller(&self, _: Entry<'_>, rate: Rate) -> Box<dyn RateLimits<CallerKey>> {
        Box::new(Buckets::new(rate))
    }

    fn per_tool(&self, _: Entry<'_>, rate: Rate) -> Box<dyn RateLimits<ToolKey>> {
        Box::new(Buckets::new(rate))
    }
}

/// How many calls between two sweeps of the keys that have refilled, so
/// the table holds only callers that are actually being limited.
const SWEEP_EVERY: u64 = 4096;

/// Governor's keyed limiter for one rate (its GCRA: a burst of the whole
/// rate, then one call per `per / count`).
pub struct Buckets<K: Hash + Eq + Clone> {
    limiter: DefaultKeyedRateLimiter<K>,
    calls: AtomicU64,
}

impl<K: Hash + Eq + Clone> Buckets<K> {
    pub fn new(rate: Rate) -> Self {
        Self::share(rate, 1)
    }

    /// One replica's share of `rate` among `replicas`: a burst of
    /// `count / replicas` (rounded up, at least one), then one call per
    /// `per × replicas / count`.
    pub fn share(rate: Rate, replicas: usize) -> Self {
        let n = u32::try_from(replicas.max(1)).unwrap_or(u32::MAX);
        let count = NonZeroU32::new(rate.count).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(count.get().div_ceil(n)).unwrap_or(NonZeroU32::MIN);
        let quota = Quota::with_period(rate.per * n / count.get())
            .unwrap_or_else(|| Quota::per_second(count))
            .allow_burst(burst);
        Buckets {
            limiter: RateLimiter::keyed(quota),
            calls: AtomicU64::new(0),
        }
    }
}

/// The buckets of replicas sharing one limit: each replica enforces its
/// share of every rate among the replicas alive (`live`, as it last read
/// them: `cluster::postgres::replicas`), without a store round trip per
/// call. Behind a balancer that spreads a caller's calls evenly, the
/// caller gets the limit's allowance within a few calls (the shares'
/// rounding); one that sends all of a caller's calls to one replica gives
/// it that replica's share only. When the number of replicas changes,
/// each replica's buckets start again, full, at the new share.
pub struct SharedRates {
    live: Arc<dyn Fn() -> usize + Send + Sync>,
}

impl SharedRates {
    pub fn new(live: Arc<dyn Fn() -> usize + Send + Sync>) -> SharedRates {
        SharedRates { live }
    }
}

impl Rates for SharedRates {
    fn per_caller(&self, _: Entry<'_>, rate: Rate) -> Box<dyn RateLimits<CallerKey>> {
        Box::new(Shares::new(rate, self.live.clone()))
    }

    fn per_tool(&self, _: Entry<'_>, rate: Rate) -> Box<dyn RateLimits<ToolKey>> {
        Box::new(Shares::new(rate, self.live.clone()))
    }
}

/// One rate's buckets at this replica's current share.
struct Shares<K: Hash + Eq + Clone> {
    rate: Rate,
    live: Arc<dyn Fn() -> usize + Send + Sync>,
    current: arc_swap::ArcSwap<(usize, Buckets<K>)>,
}

impl<K: Hash + Eq + Clone> Shares<K> {
    fn new(rate: Rate, live: Arc<dyn Fn() -> usize + Send + Sync>) -> Self {
        let n = live().max(1);
        Shares {
            rate,
            live,
            current: arc_swap::ArcSwap::from_pointee((n, Buckets::share(rate, n))),
        }
    }
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static> RateLimits<K> for Shares<K> {
    fn take(&self, key: &K) -> Result<(), Duration> {
        let n = (self.live)().max(1);
        let mut current = self.current.load();
        if current.0 != n {
            self.current
                .store(Arc::new((n, Buckets::share(self.rate, n))));
            current = self.current.load();
        }
        current.1.take(key)
    }
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static> RateLimits<K> for Buckets<K> {
    fn take(&self, key: &K) -> Result<(), Duration> {
        if self.calls.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            self.limiter.retain_recent();
        }
        self.limiter
            .check_key(key)
            .map_err(|not_until| not_until.wait_time_from(self.limiter.clock().now()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Principal;

    /// An entry letting everyone use everything (its rates are the test's).
    fn everyone() -> PolicyConfig {
        PolicyConfig {
            principals: vec!["*".into()],
            allow: vec!["*".into()],
            deny: vec![],
            rate: None,
            rate_per_tool: None,
            issuer: None,
            tool_search: None,
        }
    }

    const PER_MINUTE: Rate = Rate {
        count: 60,
        per: Duration::from_secs(60),
    };

    #[test]
    fn a_burst_of_the_rate_passes_and_the_next_call_waits_its_share() {
        let b = Buckets::new(PER_MINUTE);
        for i in 0..60 {
            assert!(b.take(&"a").is_ok(), "call {i} of 60");
        }
        let wait = b.take(&"a").unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
        assert!(b.take(&"b").is_ok(), "another key has its own bucket");
    }

    #[test]
    fn local_buckets_through_the_seam_are_per_caller_and_issuer() {
        let config = everyone();
        let entry = Entry {
            index: 0,
            config: &config,
        };
        let rates: &dyn Rates = &LocalRates;
        let two = Rate {
            count: 2,
            per: Duration::from_secs(60),
        };
        let callers = rates.per_caller(entry, two);
        let tools = rates.per_tool(entry, two);
        let of = |issuer| Principal::subject(issuer, "alice", [], []).caller().clone();
        let (a, b) = (of("https://a.example"), of("https://b.example"));
        for _ in 0..2 {
            assert_eq!(callers.take(&a), Ok(()));
        }
        let wait = callers.take(&a).unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(30),
            "{wait:?}"
        );
        assert_eq!(callers.take(&b), Ok(()), "same subject, other issuer");
        // Per tool: each name its own bucket, each its own rate.
        let read = (a.clone(), "read".to_owned());
        for _ in 0..2 {
            assert_eq!(tools.take(&read), Ok(()));
        }
        assert!(tools.take(&read).is_err());
        assert_eq!(tools.take(&(a, "write".to_owned())), Ok(()));
        assert_eq!(tools.take(&(b, "read".to_owned())), Ok(()));
    }

    #[test]
    fn three_replicas_each_allow_a_third_and_a_fourth_replica_changes_the_share() {
        let live = Arc::new(AtomicU64::new(3));
        let count = {
            let live = live.clone();
            Arc::new(move || live.load(Ordering::Relaxed) as usize)
        };
        let rates = SharedRates::new(count);
        let config = everyone();
        let entry = Entry {
            index: 0,
            config: &config,
        };
        let callers = rates.per_caller(entry, PER_MINUTE);
        let alice = Principal::key("alice").caller().clone();
        let passed = (0..100).filter(|_| callers.take(&alice).is_ok()).count();
        assert_eq!(passed, 20, "a third of the burst of 60");
        let wait = callers.take(&alice).unwrap_err();
        assert!(
            wait > Duration::from_secs(2) && wait <= Duration::from_secs(3),
            "one call per 3 s here: {wait:?}"
        );
        // A fourth replica: a quarter each, from a full bucket.
        live.store(4, Ordering::Relaxed);
        let passed = (0..100).filter(|_| callers.take(&alice).is_ok()).count();
        assert_eq!(passed, 15);
    }
}
