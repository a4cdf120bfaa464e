//! The lean load: N client sessions calling the echo tool in a closed
//! loop, recorded and CPU-sampled exactly as the rmcp load is
//! ([`crate::load::SessionRun`], [`crate::load::measure`]), so both land
//! in the same tables. A session is a [`Session`] on its own kept-alive
//! connection, or a [`Caller`](pipe::Caller) on a stdio server's pipes,
//! shared by all the sessions.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::time::Instant;

use super::client::{Endpoint, Era, Session};
use super::pipe;
use crate::load::{self, Pids, Plan, Sample, SessionRun, Target, Window};

/// Longest a call may take before it counts as failed (its connection is
/// then replaced): far above any latency measured, it only keeps a lost
/// answer from stalling a session for the rest of the window.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// What the load drives: one client session.
pub trait Caller: Send + 'static {
    /// Calls `tool` with `{"text": text}` and checks the echo.
    fn call(&mut self, tool: &str, text: &str) -> impl Future<Output = anyhow::Result<()>> + Send;
    /// Ends the session, best effort.
    fn end(self) -> impl Future<Output = ()> + Send;
}

impl Caller for Session {
    fn call(&mut self, tool: &str, text: &str) -> impl Future<Output = anyhow::Result<()>> + Send {
        self.call_echo(tool, text)
    }
    fn end(self) -> impl Future<Output = ()> + Send {
        self.close()
    }
}

impl Caller for pipe::Caller {
    fn call(&mut self, tool: &str, text: &str) -> impl Future<Output = anyhow::Result<()>> + Send {
        self.call_echo(tool, text)
    }
    async fn end(self) {}
}

/// Opens `plan.sessions` sessions of `era` on `target`, makes one checked
/// call on each (through Vigil that opens the backend session), warms up,
/// measures, closes. Ignores `plan.keep_alive`: a lean session always keeps
/// its connection.
pub async fn run_target(
    target: &Target,
    (era, call_tool): (Era, bool),
    plan: &Plan,
    pids: &Pids,
) -> anyhow::Result<Sample> {
    let endpoint = Arc::new(Endpoint::parse(&target.url)?);
    let opened = futures::future::join_all((0..plan.sessions).map(|_| {
        let endpoint = endpoint.clone();
        async move {
            let s = tokio::time::timeout(CALL_TIMEOUT, Session::open_era(endpoint, era, "{}"))
                .await
                .context("initialize timed out")??;
            anyhow::Ok(if call_tool { s.through_call_tool() } else { s })
        }
    }))
    .await;
    run_sessions(opened, &target.tool, plan, pids)
        .await
        .with_context(|| format!("{} lean session(s) on {}", plan.sessions, target.url))
}

/// [`run_target`] for `plan.sessions` callers sharing `peer`'s pipes,
/// calling its `echo`.
pub async fn run_pipe_target(
    peer: &Arc<pipe::Peer>,
    plan: &Plan,
    pids: &Pids,
) -> anyhow::Result<Sample> {
    let callers = (0..plan.sessions)
        .map(|_| Ok(pipe::Caller::new(peer.clone())))
        .collect();
    run_sessions(callers, "echo", plan, pids)
        .await
        .with_context(|| format!("{} caller(s) on the stdio backend's pipes", plan.sessions))
}

/// Makes a first checked call on each opened session, then runs the
/// window: warm-up, measurement, close.
async fn run_sessions<C: Caller>(
    opened: Vec<anyhow::Result<C>>,
    tool: &str,
    plan: &Plan,
    pids: &Pids,
) -> anyhow::Result<Sample> {
    let first_calls = futures::future::join_all(opened.into_iter().map(|s| async move {
        let mut s = s?;
        match tokio::time::timeout(CALL_TIMEOUT, s.call(tool, &plan.payload)).await {
            Ok(Ok(())) => Ok(s),
            Ok(Err(e)) => {
                s.end().await;
                Err(e.context("first call"))
            }
            Err(_) => {
                s.end().await;
                Err(anyhow::anyhow!("first call timed out"))
            }
        }
    }))
    .await;
    let mut sessions = Vec::with_capacity(first_calls.len());
    let mut failure = None;
    for r in first_calls {
        match r {
            Ok(s) => sessions.push(s),
            Err(e) => failure = failure.or(Some(e)),
        }
    }
    if let Some(e) = failure {
        futures::future::join_all(sessions.into_iter().map(C::end)).await;
        return Err(e.context("opening the sessions"));
    }

    let window = Window::after_warmup(plan);
    let tasks: Vec<_> = sessions
        .into_iter()
        .map(|mut session| {
            let (tool, payload) = (tool.to_owned(), plan.payload.clone());
            tokio::spawn(async move {
                let run = session_loop(&mut session, &tool, &payload, window).await;
                (session, run)
            })
        })
        .collect();
    let (sample, sessions) = load::measure(tasks, window, pids).await?;
    futures::future::join_all(sessions.into_iter().map(C::end)).await;
    Ok(sample)
}

async fn session_loop<C: Caller>(
    session: &mut C,
    tool: &str,
    payload: &str,
    window: Window,
) -> SessionRun {
    let mut run = SessionRun::new();
    loop {
        let begin = Instant::now();
        if begin >= window.end {
            break;
        }
        let result = tokio::time::timeout(CALL_TIMEOUT, session.call(tool, payload)).await;
        let end = Instant::now();
        match result {
            Ok(Ok(())) => run.ok(&window, begin, end),
            other => {
                run.failed(&window, begin, || match other {
                    Ok(Err(e)) => format!("{e:#}"),
                    _ => format!("no answer within {}s", CALL_TIMEOUT.as_secs()),
                });
                // Do not spin on a broken session.
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
    run
}
