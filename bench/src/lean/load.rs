//! The lean load: N [`Session`]s, each on its own kept-alive connection,
//! calling the echo tool in a closed loop, recorded and CPU-sampled exactly
//! as the rmcp load is ([`crate::load::SessionRun`], [`crate::load::measure`]),
//! so both land in the same tables.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::time::Instant;

use super::client::{Endpoint, Session};
use crate::load::{self, Pids, Plan, Sample, SessionRun, Target, Window};

/// Longest a call may take before it counts as failed (its connection is
/// then replaced): far above any latency measured, it only keeps a lost
/// answer from stalling a session for the rest of the window.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Opens `plan.sessions` sessions on `target`, makes one checked call on
/// each (through Vigil that opens the backend session), warms up,
/// measures, closes. Ignores `plan.keep_alive`: a lean session always keeps
/// its connection.
pub async fn run_target(target: &Target, plan: &Plan, pids: &Pids) -> anyhow::Result<Sample> {
    let endpoint = Arc::new(Endpoint::parse(&target.url)?);
    let opened = futures::future::join_all((0..plan.sessions).map(|_| {
        let endpoint = endpoint.clone();
        async move {
            let mut s = tokio::time::timeout(CALL_TIMEOUT, Session::open(endpoint))
                .await
                .context("initialize timed out")??;
            tokio::time::timeout(CALL_TIMEOUT, s.call_echo(&target.tool, &plan.payload))
                .await
                .context("first call timed out")?
                .context("first call")?;
            anyhow::Ok(s)
        }
    }))
    .await;
    let mut sessions = Vec::with_capacity(opened.len());
    let mut failure = None;
    for r in opened {
        match r {
            Ok(s) => sessions.push(s),
            Err(e) => failure = failure.or(Some(e)),
        }
    }
    if let Some(e) = failure {
        futures::future::join_all(sessions.into_iter().map(Session::close)).await;
        return Err(e.context(format!(
            "opening {} lean session(s) on {}",
            plan.sessions, target.url
        )));
    }

    let window = Window::after_warmup(plan);
    let tasks: Vec<_> = sessions
        .into_iter()
        .map(|mut session| {
            let (tool, payload) = (target.tool.clone(), plan.payload.clone());
            tokio::spawn(async move {
                let run = session_loop(&mut session, &tool, &payload, window).await;
                (session, run)
            })
        })
        .collect();
    let (sample, sessions) = load::measure(tasks, window, pids).await?;
    futures::future::join_all(sessions.into_iter().map(Session::close)).await;
    Ok(sample)
}

async fn session_loop(
    session: &mut Session,
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
        let result = tokio::time::timeout(CALL_TIMEOUT, session.call_echo(tool, payload)).await;
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
