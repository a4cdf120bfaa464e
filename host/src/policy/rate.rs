//! Token buckets of `rate` and `rate_per_tool` (governor's GCRA: a burst of
//! the whole rate, then one call per `per / count`).
//!
//! One keyed limiter per entry and kind; keys that have refilled are
//! swept every [`SWEEP_EVERY`] calls, so the table holds only callers
//! that are actually being limited.

use std::hash::Hash;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use governor::clock::Clock;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::config::Rate;

const SWEEP_EVERY: u64 = 4096;

pub struct Buckets<K: Hash + Eq + Clone> {
    pub rate: Rate,
    limiter: DefaultKeyedRateLimiter<K>,
    calls: AtomicU64,
}

impl<K: Hash + Eq + Clone> Buckets<K> {
    pub fn new(rate: Rate) -> Self {
        let count = NonZeroU32::new(rate.count).unwrap_or(NonZeroU32::MIN);
        let quota = Quota::with_period(rate.per / count.get())
            .unwrap_or_else(|| Quota::per_second(count))
            .allow_burst(count);
        Buckets {
            rate,
            limiter: RateLimiter::keyed(quota),
            calls: AtomicU64::new(0),
        }
    }

    /// Takes a token for `key`, or says how long until one is there.
    pub fn take(&self, key: &K) -> Result<(), Duration> {
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

    #[test]
    fn a_burst_of_the_rate_passes_and_the_next_call_waits_its_share() {
        let b = Buckets::new(Rate {
            count: 60,
            per: Duration::from_secs(60),
        });
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
}
