//! The restart policy's arithmetic: exponential backoff with jitter.

use std::time::Duration;

use crate::config::RestartPolicy;

/// The delay before restart attempt number `failures` (1 for the first
/// restart after a failure): `base · multiplier^(failures−1)`, capped at
/// `max`, then reduced by up to `jitter` of itself. `unit` is a uniform
/// random number in `[0, 1)` (passed in so tests are exact).
pub fn backoff(policy: &RestartPolicy, failures: u32, unit: f64) -> Duration {
    let exp = failures.saturating_sub(1).min(64) as i32;
    let raw = policy.base.as_secs_f64() * policy.multiplier.powi(exp);
    let capped = raw.min(policy.max.as_secs_f64());
    let jittered = capped * (1.0 - policy.jitter * unit.clamp(0.0, 1.0));
    Duration::from_secs_f64(jittered.max(0.0))
}

/// A uniform number in `[0, 1)` for jitter; not for anything secret.
pub fn jitter_unit() -> f64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(jitter: f64) -> RestartPolicy {
        RestartPolicy {
            base: Duration::from_secs(1),
            max: Duration::from_secs(30),
            multiplier: 2.0,
            jitter,
            ..RestartPolicy::default()
        }
    }

    #[test]
    fn grows_geometrically_up_to_the_cap() {
        let p = policy(0.0);
        let delays: Vec<u64> = (1..=7).map(|n| backoff(&p, n, 0.5).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30]);
    }

    #[test]
    fn jitter_only_shortens_and_stays_in_bounds() {
        let p = policy(0.25);
        for n in 1..20 {
            let full = backoff(&p, n, 0.0);
            for u in [0.0, 0.1, 0.5, 0.999] {
                let d = backoff(&p, n, u);
                assert!(d <= full, "attempt {n}: {d:?} > {full:?}");
                assert!(
                    d.as_secs_f64() >= full.as_secs_f64() * 0.75 - 1e-9,
                    "attempt {n}: {d:?} below the jitter floor"
                );
            }
        }
    }

    #[test]
    fn huge_failure_counts_do_not_overflow() {
        let p = policy(0.0);
        assert_eq!(backoff(&p, u32::MAX, 0.0), Duration::from_secs(30));
        assert_eq!(backoff(&p, 0, 0.0), Duration::from_secs(1));
    }

    #[test]
    fn jitter_unit_is_in_range() {
        for _ in 0..1000 {
            let u = jitter_unit();
            assert!((0.0..1.0).contains(&u));
        }
    }
}
