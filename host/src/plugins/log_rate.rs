//! The rate cap on a plugin's `host.log` lines (`limits.log_rate`,
//! `limits.log_burst`): a token bucket shared by all calls of the plugin,
//! which also counts the lines it dropped so they can be reported.
//!
//! A bucket of our own rather than `governor`: the cap needs the count of
//! what it refused and the moment logging resumes (to say how many lines
//! were lost), which a GCRA limiter does not keep, and it is twenty lines
//! with no new dependency. Time is `tokio::time::Instant`, so the tests run
//! on a paused clock.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Least time between two reports of dropped lines of one plugin while it
/// keeps logging past its rate (the end of a call reports at once).
const REPORT_EVERY: Duration = Duration::from_secs(1);

/// One plugin's log bucket.
#[derive(Debug)]
pub struct LogRate {
    per_sec: f64,
    burst: f64,
    state: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
    /// Lines dropped and not reported yet.
    dropped: u64,
    last_report: Option<Instant>,
}

/// What [`LogRate::admit`] decided about one line.
#[derive(Debug, PartialEq, Eq)]
pub enum Admit {
    /// Write it; first report `dropped` lines lost before it (0: none, or
    /// reported less than [`REPORT_EVERY`] ago).
    Write { dropped: u64 },
    /// Drop it (counted).
    Drop,
}

impl LogRate {
    /// `per_sec` lines a second after a burst of `burst`, starting full.
    pub fn new(per_sec: u32, burst: u32) -> Self {
        Self {
            per_sec: f64::from(per_sec),
            burst: f64::from(burst),
            state: Mutex::new(Bucket {
                tokens: f64::from(burst),
                last: Instant::now(),
                dropped: 0,
                last_report: None,
            }),
        }
    }

    /// `limits.log_rate`, for messages.
    pub fn per_sec(&self) -> f64 {
        self.per_sec
    }

    /// `limits.log_burst`, for messages.
    pub fn burst(&self) -> f64 {
        self.burst
    }

    /// Decides about one line written at `now`.
    pub fn admit(&self, now: Instant) -> Admit {
        let mut b = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let elapsed = now.saturating_duration_since(b.last).as_secs_f64();
        b.tokens = (b.tokens + elapsed * self.per_sec).min(self.burst);
        b.last = now;
        if b.tokens < 1.0 {
            b.dropped += 1;
            return Admit::Drop;
        }
        b.tokens -= 1.0;
        let due = b
            .last_report
            .is_none_or(|at| now.saturating_duration_since(at) >= REPORT_EVERY);
        if b.dropped > 0 && due {
            b.last_report = Some(now);
            Admit::Write {
                dropped: std::mem::take(&mut b.dropped),
            }
        } else {
            Admit::Write { dropped: 0 }
        }
    }

    /// The lines dropped and not reported yet (now reported).
    pub fn take_dropped(&self, now: Instant) -> u64 {
        let mut b = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if b.dropped > 0 {
            b.last_report = Some(now);
        }
        std::mem::take(&mut b.dropped)
    }
}

/// Logs that `n` lines of `plugin` were dropped: one WARN naming the key.
pub fn report_dropped(plugin: &str, n: u64) {
    if n > 0 {
        tracing::warn!(
            plugin,
            dropped = n,
            limit = "limits.log_rate",
            "{n} plugin log lines dropped (limits.log_rate)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_then_the_rate_and_drops_are_counted_and_reported_once_logging_resumes() {
        let r = LogRate::new(10, 5);
        let t0 = Instant::now();
        let decide =
            |n: usize, at: Instant| -> Vec<Admit> { (0..n).map(|_| r.admit(at)).collect() };
        // The burst passes, the rest of an instant flood is dropped.
        let first = decide(8, t0);
        assert!(first[..5].iter().all(|a| *a == Admit::Write { dropped: 0 }));
        assert!(first[5..].iter().all(|a| *a == Admit::Drop));
        // A tenth of a second refills one line: it passes and reports the 3.
        let at = t0 + Duration::from_millis(100);
        assert_eq!(r.admit(at), Admit::Write { dropped: 3 });
        assert_eq!(r.admit(at), Admit::Drop);
        // Within a second of that report, resuming reports nothing yet ...
        let at = t0 + Duration::from_millis(300);
        assert_eq!(r.admit(at), Admit::Write { dropped: 0 });
        // ... and the end of the call takes what is left.
        assert_eq!(r.take_dropped(at), 1);
        assert_eq!(r.take_dropped(at), 0);
        // Over a long flood, at most burst + rate x time lines pass.
        let mut passed = 0;
        let start = t0 + Duration::from_secs(10);
        for i in 0..100_000u64 {
            let at = start + Duration::from_micros(i * 50); // 20,000 lines/s for 5 s
            if matches!(r.admit(at), Admit::Write { .. }) {
                passed += 1;
            }
        }
        assert!((50..=5 + 50 + 1).contains(&passed), "{passed}");
    }
}
