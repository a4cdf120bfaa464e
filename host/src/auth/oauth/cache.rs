//! Validated tokens by hash, until they expire: the hot path pays for a
//! signature check once per token, not once per request.
//!
//! The key is the SHA-256 of the token, so the cache holds no usable
//! credential. The map is bounded: when full, expired entries go first,
//! and if that frees nothing the whole map is dropped (tokens are checked
//! again, which is only slower).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

use crate::auth::Principal;

/// Most tokens cached at once.
const CAPACITY: usize = 10_000;

pub struct TokenCache {
    map: Mutex<HashMap<[u8; 32], (Principal, SystemTime)>>,
}

pub fn hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl TokenCache {
    pub fn new() -> Self {
        TokenCache {
            map: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], (Principal, SystemTime)>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The principal of a token validated before, while it has not expired.
    pub fn get(&self, key: &[u8; 32], now: SystemTime) -> Option<Principal> {
        let map = self.lock();
        let (p, until) = map.get(key)?;
        (now < *until).then(|| p.clone())
    }

    /// Remembers `principal` for the token until `until`.
    pub fn put(&self, key: [u8; 32], principal: Principal, until: SystemTime, now: SystemTime) {
        if until <= now {
            return;
        }
        let mut map = self.lock();
        if map.len() >= CAPACITY {
            map.retain(|_, (_, u)| *u > now);
            if map.len() >= CAPACITY {
                map.clear();
            }
        }
        map.insert(key, (principal, until));
    }
}

/// `exp` (seconds since the epoch) as a time, capped at `max` from `now`.
pub fn expiry(exp: u64, now: SystemTime, max: Duration) -> SystemTime {
    let at = SystemTime::UNIX_EPOCH + Duration::from_secs(exp);
    at.min(now + max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_token_lasts_until_it_expires_and_no_longer() {
        let c = TokenCache::new();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let p = Principal::key("a");
        c.put(hash("t1"), p.clone(), now + Duration::from_secs(10), now);
        assert_eq!(c.get(&hash("t1"), now), Some(p.clone()));
        assert_eq!(c.get(&hash("t2"), now), None);
        assert_eq!(c.get(&hash("t1"), now + Duration::from_secs(10)), None);
        c.put(hash("old"), p, now, now);
        assert_eq!(
            c.get(&hash("old"), now),
            None,
            "an expired token is not cached"
        );
    }

    #[test]
    fn a_full_cache_drops_expired_entries_first() {
        let c = TokenCache::new();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        for i in 0..CAPACITY - 1 {
            c.put(
                hash(&i.to_string()),
                Principal::key("a"),
                now + Duration::from_secs(1),
                now,
            );
        }
        c.put(
            hash("long"),
            Principal::key("b"),
            now + Duration::from_secs(100),
            now,
        );
        let later = now + Duration::from_secs(2);
        c.put(
            hash("new"),
            Principal::key("c"),
            now + Duration::from_secs(100),
            later,
        );
        assert!(c.get(&hash("long"), later).is_some());
        assert!(c.get(&hash("new"), later).is_some());
        assert_eq!(c.lock().len(), 2);
        assert_eq!(
            expiry(2_000, now, Duration::from_secs(60)),
            now + Duration::from_secs(60)
        );
        assert_eq!(
            expiry(1_010, now, Duration::from_secs(60)),
            now + Duration::from_secs(10)
        );
    }
}
