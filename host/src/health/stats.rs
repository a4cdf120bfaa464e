//! Application signals: outcomes and latency of real `tools/call` traffic
//! over a sliding window. The router records; the monitor reads.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// A sliding window of call outcomes for one backend.
pub struct CallStats {
    window: Duration,
    calls: Mutex<VecDeque<(Instant, bool, Duration)>>,
}

/// What the window holds right now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowSummary {
    pub calls: u64,
    pub errors: u64,
    /// Median latency of the calls in the window.
    pub p50: Option<Duration>,
}

impl WindowSummary {
    pub fn error_rate(&self) -> Option<f64> {
        (self.calls > 0).then(|| self.errors as f64 / self.calls as f64)
    }
}

/// Upper bound on remembered calls, so a flood cannot grow memory.
const MAX_CALLS: usize = 10_000;

impl CallStats {
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            calls: Mutex::new(VecDeque::new()),
        }
    }

    /// Records one finished call.
    pub fn record(&self, ok: bool, latency: Duration) {
        let now = Instant::now();
        let mut calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        Self::expire(&mut calls, now, self.window);
        if calls.len() == MAX_CALLS {
            calls.pop_front();
        }
        calls.push_back((now, ok, latency));
    }

    pub fn summary(&self) -> WindowSummary {
        let mut calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        Self::expire(&mut calls, Instant::now(), self.window);
        let errors = calls.iter().filter(|(_, ok, _)| !ok).count() as u64;
        let mut lat: Vec<Duration> = calls.iter().map(|(_, _, l)| *l).collect();
        lat.sort_unstable();
        WindowSummary {
            calls: calls.len() as u64,
            errors,
            p50: lat.get(lat.len() / 2).copied(),
        }
    }

    fn expire(calls: &mut VecDeque<(Instant, bool, Duration)>, now: Instant, window: Duration) {
        while calls
            .front()
            .is_some_and(|(t, _, _)| now.duration_since(*t) > window)
        {
            calls.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn old_calls_leave_the_window() {
        // calls at 0s (error) and 30s (ok); window 60s → at 70s only the ok one is left.
        let s = CallStats::new(Duration::from_secs(60));
        s.record(false, Duration::from_millis(5));
        tokio::time::advance(Duration::from_secs(30)).await;
        s.record(true, Duration::from_millis(7));
        assert_eq!(s.summary().error_rate(), Some(0.5));
        tokio::time::advance(Duration::from_secs(40)).await;
        let w = s.summary();
        assert_eq!(
            (w.calls, w.errors, w.p50),
            (1, 0, Some(Duration::from_millis(7)))
        );
    }
}
