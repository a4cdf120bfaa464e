//! The threads plugin code runs on, apart from the gateway's.
//!
//! A plugin call is guest code: it may spin until its deadline. On the
//! gateway's own async workers that would take a thread MCP traffic and the
//! API need (three busy probes on two CPUs once stalled calls for 11.9 s).
//! So a call gets one short poll on the caller's thread and, if it has not
//! finished by then, moves to a small runtime of its own:
//! - guest code yields every [`YIELD_FUEL`](super::engine::YIELD_FUEL)
//!   instructions ([`super::sandbox::store`]), so the first poll runs at
//!   most some tens of microseconds of guest code (or until the guest waits
//!   on a host call). Most calls — instantiate, read the config, report —
//!   end within it, and hopping to another thread and back would cost more
//!   than the call (a spawn and two thread wake-ups: the hop took a trivial
//!   call from 27 to 96 µs);
//! - the plugin threads run at a lower priority (nice [`NICE`] on Linux):
//!   when MCP traffic and plugins both want the CPUs, the kernel gives
//!   them mostly to MCP traffic, and plugins still progress. (`SCHED_IDLE`
//!   measured no better tail for MCP calls on a 2-CPU machine and starved
//!   plugins under load until their wall-clock deadlines expired.)
//! - a busy plugin yields at every slice, so it does not hold a plugin
//!   thread from the other plugins either; the call's deadline is checked
//!   at each epoch tick.
//!
//! What the first poll started stays where it was started: an outgoing
//! HTTP request begun in it is driven by a gateway task (I/O, no guest
//! code), a request to the target backend by the gateway's connection.
//! Tokio's timers and sockets work from any runtime.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::task::Poll;

/// How much lower than the gateway's threads plugin threads are scheduled
/// (a nice value: 10 gives them about a tenth of a CPU a gateway thread
/// wants too, and everything it leaves idle).
pub const NICE: i32 = 10;

/// The plugin runtime. Dropping it stops its threads without waiting for
/// calls in flight (they are cut off, as at a deadline).
pub struct Runner {
    rt: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
}

impl Runner {
    /// A runtime of `threads` worker threads for plugin calls.
    pub fn new(threads: usize) -> Result<Self, String> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("vigil-plugin")
            .on_thread_start(lower_priority)
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the plugin threads: {e}"))?;
        let handle = rt.handle().clone();
        Ok(Self {
            rt: Some(rt),
            handle,
        })
    }

    /// Runs `call`: one poll here, the rest (if any) on the plugin threads.
    /// `Err` only when the runtime is shutting down or the call panicked.
    pub async fn run<T: Send + 'static>(
        &self,
        call: impl Future<Output = T> + Send + 'static,
    ) -> Result<T, String> {
        let mut call = Box::pin(call);
        let first = std::future::poll_fn(|cx| {
            Poll::Ready(std::panic::catch_unwind(AssertUnwindSafe(|| {
                call.as_mut().poll(cx)
            })))
        })
        .await;
        match first {
            Ok(Poll::Ready(done)) => return Ok(done),
            Ok(Poll::Pending) => {}
            Err(panic) => return Err(panicked(&*panic)),
        }
        self.handle.spawn(call).await.map_err(|e| {
            if e.is_panic() {
                panicked(&*e.into_panic())
            } else {
                "the plugin threads are shutting down".into()
            }
        })
    }
}

fn panicked(panic: &(dyn std::any::Any + Send)) -> String {
    let what = panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message");
    format!("the plugin host panicked: {what}")
}

impl Drop for Runner {
    fn drop(&mut self) {
        // Dropping a runtime blocks; in the gateway's async context that
        // would panic. Calls in flight are abandoned, their stores freed.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// The default number of plugin threads: the machine's CPUs, at most 4 (a
/// plugin call is short; more threads only help many slow host calls,
/// which wait without a thread anyway).
pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(4)
}

/// Lowers the calling thread's priority to [`NICE`]. On Linux the nice
/// value is per thread; elsewhere plugin threads keep the gateway's.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: setpriority(2) with who = 0 changes only the calling
        // thread's nice value; it reads and writes no memory of ours.
        let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS as _, 0, NICE) };
        if rc != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "could not lower a plugin thread's priority");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn here() -> Option<String> {
        std::thread::current().name().map(str::to_owned)
    }

    /// The calling thread's nice value is at least NICE.
    fn lowered() -> bool {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: getpriority(2) only reads the calling thread's nice value.
            let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS as _, 0) };
            nice >= NICE
        }
        #[cfg(not(target_os = "linux"))]
        true
    }

    #[tokio::test]
    async fn a_call_done_in_its_first_poll_stays_on_the_callers_thread() {
        let runner = Runner::new(1).unwrap();
        let caller = here();
        let ran_on = runner.run(async { here() }).await.unwrap();
        assert_eq!(ran_on, caller);
        assert_ne!(ran_on.as_deref(), Some("vigil-plugin"));
    }

    #[tokio::test]
    async fn a_call_that_waits_moves_to_the_plugin_threads_at_a_lower_priority() {
        let runner = Runner::new(1).unwrap();
        let (before, after, low) = runner
            .run(async {
                let before = here();
                tokio::task::yield_now().await;
                (before, here(), lowered())
            })
            .await
            .unwrap();
        assert_ne!(before.as_deref(), Some("vigil-plugin"));
        assert_eq!(after.as_deref(), Some("vigil-plugin"));
        assert!(low, "the plugin thread was not lowered");
    }

    #[tokio::test]
    async fn a_panic_in_either_part_is_an_error_not_a_crash() {
        let runner = Runner::new(1).unwrap();
        let first = runner.run(async { panic!("at once") }).await;
        assert_eq!(first, Err("the plugin host panicked: at once".into()));
        let later = runner
            .run(async {
                tokio::task::yield_now().await;
                panic!("later {}", 2)
            })
            .await;
        assert_eq!(later, Err("the plugin host panicked: later 2".into()));
    }

    #[tokio::test]
    async fn dropping_the_runner_inside_async_code_does_not_panic() {
        let runner = Runner::new(1).unwrap();
        assert_eq!(runner.run(async { 2 + 2 }).await, Ok(4));
        drop(runner);
    }
}
