//! Runtimes: the only code that starts, stops, restarts or inspects a
//! backend. They never decide *whether* to restart — the health monitor
//! does, through the supervisor.
//!
//! - [`process`]: a child process speaking MCP on its stdio; its exit is
//!   seen at once from the child's wait, with exit code and signal.
//! - [`container`]: a container through the Docker Engine API (bollard);
//!   MCP over the container's HTTP port; death seen from the events stream.
//! - [`remote`]: an HTTP backend Vigil does not own: nothing to start, never
//!   restarted.
//! - [`stderr`]: a process's stderr, read to its end in bounded lines.
//!
//! [`Runtime`] is the seam for other engines (a Kubernetes runtime driving
//! Deployments would be one more implementation).

pub mod container;
pub mod process;
pub mod remote;
pub mod stderr;

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::oneshot;

/// How to speak MCP to a started backend.
pub enum Endpoint {
    /// Over the child's stdin/stdout.
    Stdio {
        stdin: ChildStdin,
        stdout: ChildStdout,
    },
    /// Over streamable HTTP.
    Http {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

/// How a backend instance ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exit {
    pub code: Option<i64>,
    pub signal: Option<i32>,
    pub oom_killed: bool,
    /// Human summary, e.g. "exited with code 1" or "killed by signal 9 (SIGKILL)".
    pub summary: String,
}

/// A started instance.
pub struct Started {
    pub endpoint: Endpoint,
    /// Resolves once when the instance ends (never for remote backends).
    /// Dropping the sender without a value means the runtime lost track of
    /// it (e.g. the engine's event stream broke): liveness is then unknown.
    pub exited: oneshot::Receiver<Exit>,
    /// Process id or container id, for logs and reports.
    pub id: String,
}

/// What the runtime says about an instance right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspection {
    pub running: bool,
    pub exit: Option<Exit>,
    /// Restarts the engine itself counted (containers), if any.
    pub engine_restart_count: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The runtime's own machinery failed (engine socket unreachable, ...):
    /// says nothing about the backend, so never a reason to restart it.
    #[error("runtime unavailable: {0}")]
    Infrastructure(String),
    /// Starting or stopping the backend failed.
    #[error("{0}")]
    Failed(String),
}

/// Starts, stops and inspects one backend's instances.
pub trait Runtime: Send + Sync + 'static {
    /// `process`, `container` or `remote`.
    fn kind(&self) -> &'static str;
    /// Whether Vigil owns the lifecycle (may start and restart it).
    fn owns_lifecycle(&self) -> bool {
        true
    }
    /// Whether a fresh instance may refuse connections for a moment after
    /// `start` returns (a container's server binding its port): the first
    /// connect then retries refused connections within `connect_timeout`.
    fn binds_after_start(&self) -> bool {
        false
    }
    /// Whether each replica runs its own instance (a process: it lives on
    /// the replica's machine). Otherwise the instance is shared by every
    /// replica, and one of them supervises it at a time (`cluster::lease`).
    fn replica_local(&self) -> bool {
        true
    }
    /// Where a running shared instance is reached, for a replica that
    /// follows a backend another replica supervises; `None` for a
    /// replica-local runtime.
    fn endpoint(&self) -> Option<Endpoint> {
        None
    }
    /// The instance already running with this configuration, if any,
    /// watched like one [`Runtime::start`] started: what a replica taking
    /// over supervision continues with instead of starting another.
    /// `Ok(None)`: none is (start one).
    fn adopt(&self) -> BoxFuture<'_, Result<Option<Started>, RuntimeError>> {
        Box::pin(async { Ok(None) })
    }
    /// Starts a new instance (stopping any previous one first).
    fn start(&self) -> BoxFuture<'_, Result<Started, RuntimeError>>;
    /// Stops the current instance, if any.
    fn stop(&self) -> BoxFuture<'_, Result<(), RuntimeError>>;
    /// Inspects the current instance.
    fn inspect(&self) -> BoxFuture<'_, Result<Inspection, RuntimeError>>;
}

/// "killed by signal 9 (SIGKILL)" / "exited with code 1".
pub fn describe_exit(code: Option<i64>, signal: Option<i32>, oom_killed: bool) -> String {
    let killed = |sig: i32| {
        format!(
            "killed by signal {sig}{}",
            signal_name(sig)
                .map(|n| format!(" ({n})"))
                .unwrap_or_default()
        )
    };
    let mut s = match (code, signal) {
        (Some(c), Some(sig)) => format!("exited with code {c}: {}", killed(sig)),
        (None, Some(sig)) => killed(sig),
        (Some(c), None) => format!("exited with code {c}"),
        (None, None) => "exited".to_owned(),
    };
    if oom_killed {
        s.push_str(", out of memory");
    }
    s
}

fn signal_name(sig: i32) -> Option<&'static str> {
    Some(match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        6 => "SIGABRT",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        15 => "SIGTERM",
        _ => return None,
    })
}

/// The runtime that runs `b`, and its stderr tail for process backends.
/// Config validation pairs stdio with the process runtime only, so the
/// transport decides: stdio runs a process, HTTP a container or a remote.
pub fn for_backend(
    b: &crate::config::BackendConfig,
) -> (std::sync::Arc<dyn Runtime>, Option<process::StderrTail>) {
    use std::sync::Arc;
    match runs(b) {
        Runs::Process(rt) => {
            let tail = rt.stderr();
            (Arc::new(rt), Some(tail))
        }
        Runs::Http { url, headers } => match &b.runtime {
            crate::config::RuntimeKind::Container(spec) => (
                Arc::new(container::ContainerRuntime::new(
                    &b.name,
                    spec.clone(),
                    url.to_owned(),
                    headers.clone(),
                )),
                None,
            ),
            _ => (
                Arc::new(remote::RemoteRuntime::new(url.to_owned(), headers.clone())),
                None,
            ),
        },
    }
}

/// What a backend's transport runs.
pub enum Runs<'a> {
    /// A stdio backend's process (its command, arguments, environment and
    /// directory), not started.
    Process(process::ProcessRuntime),
    /// An HTTP backend's address and configured headers.
    Http {
        url: &'a str,
        headers: &'a BTreeMap<String, String>,
    },
}

/// What `b` runs: the one place a stdio backend's process is described,
/// for its supervisor and for each capability set's own process.
pub fn runs(b: &crate::config::BackendConfig) -> Runs<'_> {
    match &b.transport {
        crate::config::Transport::Stdio {
            command,
            args,
            env,
            cwd,
        } => Runs::Process(process::ProcessRuntime::new(
            &b.name,
            command.clone(),
            args.clone(),
            env.clone(),
            cwd.clone(),
        )),
        crate::config::Transport::Http { url, headers, .. } => Runs::Http { url, headers },
    }
}
