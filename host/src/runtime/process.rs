//! The process runtime: a child process speaking MCP on its stdin/stdout.
//!
//! The child runs in its own process group, so stopping it also stops what
//! it spawned. Its exit is seen the moment it happens (the waiter task owns
//! the child's `wait`), with exit code or signal; its stderr is read to the
//! end, logged under `vigil::backend::stderr` and the last lines are kept
//! for error reasons (see `stderr.rs`).

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::sync::{oneshot, watch};

use super::{Endpoint, Exit, Inspection, Runtime, RuntimeError, Started, describe_exit};

/// Lines of stderr kept for error messages.
const STDERR_TAIL: usize = 20;
/// How long `stop` waits for the child to die after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// The last lines a process wrote to stderr.
#[derive(Clone, Default)]
pub struct StderrTail(Arc<Mutex<VecDeque<String>>>);

impl StderrTail {
    pub fn lines(&self) -> Vec<String> {
        self.0
            .lock()
            .map(|l| l.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub fn last(&self) -> Option<String> {
        self.0.lock().ok().and_then(|l| l.back().cloned())
    }

    pub(crate) fn push(&self, line: String) {
        if let Ok(mut t) = self.0.lock() {
            if t.len() == STDERR_TAIL {
                t.pop_front();
            }
            t.push_back(line);
        }
    }
}

pub struct ProcessRuntime {
    backend: Arc<str>,
    command: String,
    args: Vec<String>,
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    stderr: StderrTail,
    current: Mutex<Option<Instance>>,
}

/// The running child, as seen from outside its waiter task.
struct Instance {
    pid: Option<u32>,
    /// Ask the waiter to kill the child.
    kill: Option<oneshot::Sender<()>>,
    /// `Some` once the child has exited.
    exit: watch::Receiver<Option<Exit>>,
}

impl ProcessRuntime {
    pub fn new(
        backend: &str,
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
    ) -> Self {
        Self {
            backend: backend.into(),
            command,
            args,
            env,
            cwd,
            stderr: StderrTail::default(),
            current: Mutex::new(None),
        }
    }

    /// The last lines the current (or last) instance wrote to stderr.
    pub fn stderr(&self) -> StderrTail {
        self.stderr.clone()
    }

    fn take_current(&self) -> Option<Instance> {
        self.current.lock().ok().and_then(|mut c| c.take())
    }

    async fn stop_instance(instance: Instance) {
        let Instance {
            pid,
            kill,
            mut exit,
        } = instance;
        if exit.borrow().is_some() {
            return;
        }
        // SIGTERM the group first for a clean exit, then SIGKILL.
        if let Some(pid) = pid {
            signal_group(pid, Signal::SIGTERM);
            // A stopped (SIGSTOP) process only acts on SIGTERM once continued.
            signal_group(pid, Signal::SIGCONT);
        }
        if tokio::time::timeout(STOP_GRACE, exit.wait_for(Option::is_some))
            .await
            .is_err()
            && let Some(kill) = kill
        {
            let _ = kill.send(());
            let _ = tokio::time::timeout(STOP_GRACE, exit.wait_for(Option::is_some)).await;
        }
    }

    fn spawn_child(&self) -> Result<Started, RuntimeError> {
        let mut cmd = tokio::process::Command::new(&self.command);
        cmd.args(&self.args)
            .envs(&self.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        if let Some(cwd) = &self.cwd {
            cmd.current_dir(cwd);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| RuntimeError::Failed(format!("cannot start `{}`: {e}", self.command)))?;
        let pid = child.id();
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(RuntimeError::Failed(
                "the child's stdio could not be captured".into(),
            ));
        };
        if let Some(stderr) = child.stderr.take() {
            crate::background::spawn(super::stderr::pump(
                self.backend.clone(),
                stderr,
                self.stderr.clone(),
            ));
        }
        let (kill_tx, kill_rx) = oneshot::channel();
        let (exit_tx, exit_rx) = watch::channel(None);
        let (exited_tx, exited_rx) = oneshot::channel();
        let backend = self.backend.clone();
        crate::background::spawn(async move {
            let status = tokio::select! {
                s = child.wait() => s,
                _ = kill_rx => {
                    let _ = child.start_kill();
                    child.wait().await
                }
            };
            let exit = match status {
                Ok(status) => {
                    use std::os::unix::process::ExitStatusExt;
                    let (code, signal) = (status.code().map(i64::from), status.signal());
                    Exit {
                        code,
                        signal,
                        oom_killed: false,
                        summary: describe_exit(code, signal, false),
                    }
                }
                Err(e) => Exit {
                    summary: format!("lost track of the process: {e}"),
                    ..Exit::default()
                },
            };
            tracing::debug!(%backend, exit = %exit.summary, "backend process ended");
            let _ = exit_tx.send(Some(exit.clone()));
            let _ = exited_tx.send(exit);
        });
        if let Ok(mut current) = self.current.lock() {
            *current = Some(Instance {
                pid,
                kill: Some(kill_tx),
                exit: exit_rx,
            });
        }
        Ok(Started {
            endpoint: Endpoint::Stdio { stdin, stdout },
            exited: exited_rx,
            id: pid
                .map(|p| format!("pid {p}"))
                .unwrap_or_else(|| "pid ?".into()),
        })
    }
}

/// Sends `sig` to the process group led by `pid` (the child and what it
/// spawned). A vanished group is not an error worth reporting.
fn signal_group(pid: u32, sig: Signal) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = killpg(Pid::from_raw(pid), sig);
    }
}

impl Runtime for ProcessRuntime {
    fn kind(&self) -> &'static str {
        "process"
    }

    fn start(&self) -> BoxFuture<'_, Result<Started, RuntimeError>> {
        Box::pin(async move {
            if let Some(old) = self.take_current() {
                Self::stop_instance(old).await;
            }
            self.spawn_child()
        })
    }

    fn stop(&self) -> BoxFuture<'_, Result<(), RuntimeError>> {
        Box::pin(async move {
            if let Some(old) = self.take_current() {
                Self::stop_instance(old).await;
            }
            Ok(())
        })
    }

    fn inspect(&self) -> BoxFuture<'_, Result<Inspection, RuntimeError>> {
        Box::pin(async move {
            let exit = self
                .current
                .lock()
                .ok()
                .and_then(|c| c.as_ref().map(|i| i.exit.borrow().clone()));
            Ok(match exit {
                None => Inspection {
                    running: false,
                    exit: None,
                    engine_restart_count: None,
                },
                Some(exit) => Inspection {
                    running: exit.is_none(),
                    exit,
                    engine_restart_count: None,
                },
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> ProcessRuntime {
        ProcessRuntime::new(
            "t",
            "sh".into(),
            vec!["-c".into(), script.into()],
            BTreeMap::new(),
            None,
        )
    }

    #[tokio::test]
    async fn an_exit_is_reported_with_its_code_and_stderr() {
        let rt = sh("echo 'about to fail' >&2; exit 3");
        let started = rt.start().await.unwrap();
        let exit = tokio::time::timeout(Duration::from_secs(10), started.exited)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((exit.code, exit.signal), (Some(3), None));
        assert_eq!(exit.summary, "exited with code 3");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while rt.stderr().last().is_none() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(rt.stderr().last().as_deref(), Some("about to fail"));
        assert!(!rt.inspect().await.unwrap().running);
    }

    #[tokio::test]
    async fn a_kill_9_is_reported_as_sigkill() {
        let rt = sh("sleep 30");
        let started = rt.start().await.unwrap();
        assert!(rt.inspect().await.unwrap().running);
        let pid: u32 = started.id.trim_start_matches("pid ").parse().unwrap();
        std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap();
        let exit = tokio::time::timeout(Duration::from_secs(10), started.exited)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(exit.signal, Some(9));
        assert_eq!(exit.summary, "killed by signal 9 (SIGKILL)");
    }

    #[tokio::test]
    async fn stop_ends_the_child() {
        let rt = sh("sleep 30 & wait");
        let started = rt.start().await.unwrap();
        rt.stop().await.unwrap();
        let exit = tokio::time::timeout(Duration::from_secs(10), started.exited)
            .await
            .unwrap()
            .unwrap();
        assert!(exit.signal.is_some(), "{exit:?}");
        assert!(!rt.inspect().await.unwrap().running);
    }

    #[tokio::test]
    async fn a_missing_command_fails_to_start_with_its_name() {
        let rt = ProcessRuntime::new(
            "t",
            "/nonexistent/mcp-server".into(),
            vec![],
            BTreeMap::new(),
            None,
        );
        let Err(RuntimeError::Failed(msg)) = rt.start().await else {
            panic!("expected a start failure")
        };
        assert!(msg.contains("/nonexistent/mcp-server"), "{msg}");
    }
}
