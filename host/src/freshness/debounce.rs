//! Debounced change delivery: the first change after a quiet period is
//! delivered at once (after a [`GATHER`] of at most 10 ms, so changes that
//! happen together — five backends lost with one host — make one
//! delivery), later changes within the window are coalesced into one
//! trailing delivery, and every delivery carries a strictly increasing
//! generation.
//!
//! Two kinds of change share the window. Which backends are shown (a
//! backend lost, recovered, restarted — what flaps) is held to the window.
//! What shown backends list ([`Debouncer::content_changed`]: a backend
//! announced or was found to have other tools) is a change a client is
//! waiting for: it is delivered at most [`CONTENT_GAP`] after the last
//! delivery, even inside the window, so a backend that changes its tools
//! every second is heard every second, and one that changes them in a
//! loop no more often than that.
//!
//! The listener runs on the debouncer's own task, never on the caller's
//! (probes and the catalog owner only flip a flag). [`Debouncer::stop`]
//! cancels a pending trailing delivery and waits for one in flight.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long the leading delivery waits for changes that come together
/// (capped by the window).
pub const GATHER: Duration = Duration::from_millis(10);

/// The shortest time between two deliveries when the later one carries a
/// change of what shown backends list (see the module doc).
pub const CONTENT_GAP: Duration = Duration::from_secs(1);

/// One delivery to the listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// Starts at 1; strictly increasing.
    pub generation: u64,
}

/// What the debouncer calls for each delivery.
pub type Listener = Box<dyn Fn(Delivery) -> BoxFuture<'static, ()> + Send + Sync>;

pub struct Debouncer {
    changed: Arc<Notify>,
    /// Set (and `changed` notified) by [`Debouncer::content_changed`].
    content: Arc<Content>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// A pending change of what shown backends list.
#[derive(Default)]
struct Content {
    pending: std::sync::atomic::AtomicBool,
    /// Wakes a wait for the end of the window.
    wake: Notify,
}

impl Content {
    fn take(&self) -> bool {
        self.pending
            .swap(false, std::sync::atomic::Ordering::AcqRel)
    }
}

impl Debouncer {
    /// Starts the delivery task. `window` zero delivers every change at once
    /// (changes that arrive while a delivery runs are still coalesced).
    pub fn spawn(window: Duration, listener: Listener) -> Self {
        let changed = Arc::new(Notify::new());
        let content = Arc::new(Content::default());
        let stop = CancellationToken::new();
        let task = crate::background::spawn(run(
            window,
            listener,
            changed.clone(),
            content.clone(),
            stop.clone(),
        ));
        Self {
            changed,
            content,
            stop,
            task,
        }
    }

    /// Records a change of which backends are shown. Cheap and
    /// non-blocking.
    pub fn changed(&self) {
        self.changed.notify_one();
    }

    /// Records a change of what shown backends list: delivered within
    /// [`CONTENT_GAP`] of the last delivery. Cheap and non-blocking.
    pub fn content_changed(&self) {
        self.content
            .pending
            .store(true, std::sync::atomic::Ordering::Release);
        self.content.wake.notify_one();
        self.changed.notify_one();
    }

    /// Cancels a pending delivery and waits for the one in flight, if any.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

async fn run(
    window: Duration,
    listener: Listener,
    changed: Arc<Notify>,
    content: Arc<Content>,
    stop: CancellationToken,
) {
    let mut generation = 0u64;
    // The last delivery, and the end of its window (quiet after it).
    let mut last: Option<(Instant, Instant)> = None;
    loop {
        // Wait for a change (or stop).
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            _ = changed.notified() => {}
        }
        let now = Instant::now();
        match last {
            // Inside a window: coalesce everything until it ends, or until
            // the content gap ends once a content change is pending.
            Some((at, end)) if now < end => {
                let soon = (at + CONTENT_GAP).min(end);
                let mut due = if content.take() { soon } else { end };
                loop {
                    tokio::select! {
                        biased;
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep_until(due) => break,
                        _ = content.wake.notified() => {
                            if content.take() {
                                due = due.min(soon);
                            }
                        }
                    }
                }
                // Changes that came while we slept are covered by this one.
                drain(&changed);
                content.take();
                drain(&content.wake);
            }
            // Quiet: deliver at once (leading edge), with what comes together.
            _ => {
                let gather = GATHER.min(window);
                if !gather.is_zero() {
                    tokio::select! {
                        biased;
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(gather) => {}
                    }
                    drain(&changed);
                }
                content.take();
                drain(&content.wake);
            }
        }
        generation += 1;
        // Not cancelled by `stop`: a delivery in flight completes.
        listener(Delivery { generation }).await;
        let at = Instant::now();
        last = Some((at, at + window));
    }
}

/// Consumes a stored permit, if any.
fn drain(changed: &Notify) {
    use futures::FutureExt;
    let _ = changed.notified().now_or_never();
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    const WINDOW: Duration = Duration::from_secs(1);

    /// Deliveries as recorded: (generation, time since start).
    type Seen = Arc<Mutex<Vec<(u64, Duration)>>>;

    /// A debouncer whose deliveries are recorded.
    fn recorder(window: Duration) -> (Debouncer, Seen, Instant) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let start = Instant::now();
        let log = seen.clone();
        let d = Debouncer::spawn(
            window,
            Box::new(move |d| {
                log.lock().unwrap().push((d.generation, start.elapsed()));
                Box::pin(async {})
            }),
        );
        (d, seen, start)
    }

    /// A change, delivered (leading edge, after the gather).
    async fn lead(d: &Debouncer) {
        d.changed();
        settle().await;
        tokio::time::advance(GATHER).await;
        settle().await;
    }

    async fn settle() {
        // Let the delivery task run everything that is due now.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_change_is_delivered_at_once() {
        let (d, seen, _) = recorder(WINDOW);
        d.changed();
        settle().await;
        assert!(seen.lock().unwrap().is_empty(), "gathering");
        tokio::time::advance(GATHER).await;
        settle().await;
        assert_eq!(*seen.lock().unwrap(), vec![(1, GATHER)]);
        d.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn changes_that_come_together_make_one_leading_delivery() {
        let (d, seen, _) = recorder(WINDOW);
        for _ in 0..5 {
            d.changed();
            tokio::time::advance(Duration::from_millis(1)).await;
        }
        tokio::time::advance(GATHER).await;
        settle().await;
        assert_eq!(seen.lock().unwrap().len(), 1);
        tokio::time::advance(WINDOW * 2).await;
        settle().await;
        assert_eq!(
            seen.lock().unwrap().len(),
            1,
            "nothing left for a trailing delivery"
        );
        d.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn changes_within_the_window_coalesce_into_one_trailing_delivery() {
        let (d, seen, _) = recorder(WINDOW);
        lead(&d).await;
        for _ in 0..20 {
            tokio::time::advance(Duration::from_millis(40)).await;
            d.changed();
        }
        settle().await;
        assert_eq!(
            seen.lock().unwrap().len(),
            1,
            "nothing before the window ends"
        );
        // 810 ms passed; the window ends at 1010 ms.
        tokio::time::advance(Duration::from_millis(199)).await;
        settle().await;
        assert_eq!(
            seen.lock().unwrap().len(),
            1,
            "nothing before the window ends"
        );
        tokio::time::advance(Duration::from_millis(1)).await;
        settle().await;
        let got = seen.lock().unwrap().clone();
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(
            got[1],
            (2, GATHER + WINDOW),
            "trailing at the end of the window"
        );
        d.stop().await;
    }

    /// ```text
    /// 0 ms   lead (content change) → gen 1 at 10 ms
    /// 300 ms content change        → gen 2 at 1010 ms (CONTENT_GAP after gen 1)
    /// 1100 ms health flip          → gen 3 at the window's end (30 s after gen 2)
    /// ```
    #[tokio::test(start_paused = true)]
    async fn a_content_change_waits_only_the_content_gap() {
        let window = Duration::from_secs(30);
        let (d, seen, _) = recorder(window);
        d.content_changed();
        settle().await;
        tokio::time::advance(GATHER).await;
        settle().await;
        tokio::time::advance(Duration::from_millis(290)).await;
        d.content_changed();
        settle().await;
        tokio::time::advance(Duration::from_millis(709)).await;
        settle().await;
        assert_eq!(seen.lock().unwrap().len(), 1, "not before the gap ends");
        tokio::time::advance(Duration::from_millis(1)).await;
        settle().await;
        assert_eq!(
            seen.lock().unwrap().clone(),
            vec![(1, GATHER), (2, GATHER + CONTENT_GAP)]
        );
        tokio::time::advance(Duration::from_millis(90)).await;
        d.changed();
        settle().await;
        tokio::time::advance(window - Duration::from_millis(91)).await;
        settle().await;
        assert_eq!(
            seen.lock().unwrap().len(),
            2,
            "a health flip waits out the window"
        );
        tokio::time::advance(Duration::from_millis(1)).await;
        settle().await;
        assert_eq!(seen.lock().unwrap()[2], (3, GATHER + CONTENT_GAP + window));
        d.stop().await;
    }

    /// A content change arriving while a health flip waits for the window's
    /// end brings the delivery forward.
    #[tokio::test(start_paused = true)]
    async fn a_content_change_brings_a_pending_delivery_forward() {
        let (d, seen, _) = recorder(Duration::from_secs(30));
        lead(&d).await;
        d.changed();
        settle().await;
        tokio::time::advance(Duration::from_millis(500)).await;
        d.content_changed();
        settle().await;
        tokio::time::advance(CONTENT_GAP - Duration::from_millis(500)).await;
        settle().await;
        assert_eq!(
            seen.lock().unwrap().clone(),
            vec![(1, GATHER), (2, GATHER + CONTENT_GAP)]
        );
        d.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_quiet_window_the_next_change_leads_again() {
        let (d, seen, _) = recorder(WINDOW);
        lead(&d).await;
        tokio::time::advance(WINDOW * 3).await;
        lead(&d).await;
        let got = seen.lock().unwrap().clone();
        assert_eq!(got, vec![(1, GATHER), (2, WINDOW * 3 + GATHER * 2)]);
        d.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn generations_strictly_increase() {
        let (d, seen, _) = recorder(Duration::from_millis(100));
        for _ in 0..10 {
            d.changed();
            settle().await;
            tokio::time::advance(Duration::from_millis(70)).await;
            settle().await;
        }
        tokio::time::advance(WINDOW).await;
        settle().await;
        let gens: Vec<u64> = seen.lock().unwrap().iter().map(|(g, _)| *g).collect();
        assert!(gens.len() >= 2, "{gens:?}");
        assert!(gens.windows(2).all(|w| w[1] == w[0] + 1), "{gens:?}");
        d.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn stop_cancels_a_pending_delivery() {
        let (d, seen, _) = recorder(WINDOW);
        lead(&d).await;
        d.changed(); // pending: due at the end of the window
        settle().await;
        d.stop().await;
        tokio::time::advance(WINDOW * 2).await;
        settle().await;
        assert_eq!(seen.lock().unwrap().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn stop_waits_for_a_delivery_in_flight() {
        let finished = Arc::new(Mutex::new(false));
        let flag = finished.clone();
        let d = Debouncer::spawn(
            WINDOW,
            Box::new(move |_| {
                let flag = flag.clone();
                Box::pin(async move {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    *flag.lock().unwrap() = true;
                })
            }),
        );
        lead(&d).await;
        assert!(!*finished.lock().unwrap(), "in flight");
        d.stop().await;
        assert!(
            *finished.lock().unwrap(),
            "stop returned before the delivery ended"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_change_no_delivery() {
        let (d, seen, _) = recorder(WINDOW);
        tokio::time::advance(WINDOW * 5).await;
        settle().await;
        assert!(seen.lock().unwrap().is_empty());
        d.stop().await;
    }
}
