//! [`LogLimit`]: at most one log line per interval for a kind of event
//! anyone on the network can cause (refused cross-origin requests,
//! lockouts), with the count of the events not logged.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Decides whether an event gets its own log line.
#[derive(Debug)]
pub(crate) struct LogLimit {
    every: Duration,
    last: Option<Instant>,
    /// Events since the last line that got none.
    suppressed: u64,
}

// === impl LogLimit ===

impl LogLimit {
    pub(crate) fn new(every: Duration) -> Self {
        LogLimit {
            every,
            last: None,
            suppressed: 0,
        }
    }

    /// `Some(n)`: log this event, saying `n` more happened since the last
    /// line; `None`: count it and stay silent.
    pub(crate) fn admit(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(last) if now.saturating_duration_since(last) < self.every => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }
}

/// A [`LogLimit`] shared by the tasks that meet its event: one lock, one
/// decision (`Some(n)`: log, with `n` not logged since).
#[derive(Debug)]
pub(crate) struct SharedLogLimit(Mutex<LogLimit>);

impl SharedLogLimit {
    pub(crate) fn new(every: Duration) -> Self {
        SharedLogLimit(Mutex::new(LogLimit::new(every)))
    }

    /// [`LogLimit::admit`] now. A poisoned lock (a panic mid-update of two
    /// counters) still decides.
    pub(crate) fn admit(&self) -> Option<u64> {
        let mut limit = self.0.lock().unwrap_or_else(|e| e.into_inner());
        limit.admit(Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_with_the_count_in_between() {
        let start = Instant::now();
        let mut limit = LogLimit::new(Duration::from_secs(10));
        assert_eq!(limit.admit(start), Some(0));
        for s in 1..10 {
            assert_eq!(limit.admit(start + Duration::from_secs(s)), None);
        }
        assert_eq!(limit.admit(start + Duration::from_secs(10)), Some(9));
        assert_eq!(limit.admit(start + Duration::from_secs(30)), Some(0));
    }
}
