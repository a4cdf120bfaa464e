//! The threads plugin code runs on, apart from the gateway's.
//!
//! A plugin call is guest code: it may spin until its deadline. On the
//! gateway's own async workers that would take a thread MCP traffic and the
//! API need (three busy probes on two CPUs once stalled calls for 11.9 s).
//! So every call runs on a small runtime of its own, and:
//! - its threads run at a lower scheduling priority (nice [`NICE`] on
//!   Linux): when MCP traffic and plugins both want the CPUs, the kernel
//!   gives them to MCP traffic first;
//! - guest code yields to that runtime at every epoch tick
//!   ([`super::sandbox::store`]), so one busy plugin does not hold a plugin
//!   thread from the other plugins either; the call's deadline is checked
//!   at each yield.
//!
//! Host calls a plugin makes (its target backend, HTTP) run on this runtime
//! too; they talk to the gateway's tasks through channels, which work
//! across runtimes.

use std::future::Future;

/// How much lower than the gateway's threads plugin threads are scheduled
/// (a nice value: 10 gives them about a tenth of the CPU when MCP traffic
/// wants it all, and everything when it wants nothing).
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

    /// Runs `call` on the plugin threads and waits for it. `Err` only when
    /// the runtime is shutting down or the call panicked.
    pub async fn run<T: Send + 'static>(
        &self,
        call: impl Future<Output = T> + Send + 'static,
    ) -> Result<T, String> {
        self.handle.spawn(call).await.map_err(|e| {
            if e.is_panic() {
                format!("the plugin host panicked: {e}")
            } else {
                "the plugin threads are shutting down".into()
            }
        })
    }
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

    #[tokio::test]
    async fn calls_run_on_threads_of_their_own_at_a_lower_priority() {
        let runner = Runner::new(1).unwrap();
        let (name, nice) = runner
            .run(async {
                let name = std::thread::current().name().map(str::to_owned);
                // SAFETY: getpriority(2) only reads the calling thread's nice value.
                #[cfg(target_os = "linux")]
                let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS as _, 0) };
                #[cfg(not(target_os = "linux"))]
                let nice = NICE;
                (name, nice)
            })
            .await
            .unwrap();
        assert_eq!(name.as_deref(), Some("vigil-plugin"));
        assert!(nice >= NICE, "plugin thread nice value {nice}");
    }

    #[tokio::test]
    async fn dropping_the_runner_inside_async_code_does_not_panic() {
        let runner = Runner::new(1).unwrap();
        assert_eq!(runner.run(async { 2 + 2 }).await, Ok(4));
        drop(runner);
    }
}
