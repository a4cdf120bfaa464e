//! The load: N MCP client sessions, each calling one tool in a closed loop
//! (next call as soon as the previous answer arrives) for a fixed time.

use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, ProtocolVersion,
};
use rmcp::service::{RoleClient, RunningService, ServiceExt};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use tokio::time::Instant;

use crate::machine::{self, CpuTimes};
use crate::procs::Server;
use crate::report::TargetKind;

type Client = RunningService<RoleClient, ClientConfig>;

/// Where the calls go.
pub struct Target {
    pub kind: TargetKind,
    /// The MCP endpoint, `http://127.0.0.1:PORT/mcp`.
    pub url: String,
    /// The tool name as this endpoint advertises it.
    pub tool: String,
    /// Bearer tokens, session `i` sending `tokens[i % len]` (none: no
    /// `Authorization`).
    pub tokens: Vec<String>,
}

/// How one target is driven.
pub struct Plan {
    pub sessions: usize,
    pub warmup: Duration,
    pub duration: Duration,
    pub payload: String,
    pub keep_alive: bool,
}

/// The server processes whose CPU time is sampled.
pub struct Pids {
    pub backend: Option<u32>,
    pub vigil: Option<u32>,
}

/// What one target's measured window produced.
pub struct Sample {
    /// Latency of every successful call started inside the window, in ns.
    pub latencies_ns: Vec<u64>,
    /// Successful calls that completed inside the window.
    pub completed: u64,
    /// Failed calls started inside the window.
    pub errors: u64,
    /// First error seen, for the report.
    pub first_error: Option<String>,
    /// The measured window's length.
    pub window: Duration,
    /// CPU seconds spent inside the window: bench client, Vigil, backend.
    pub cpu_client: f64,
    pub cpu_vigil: f64,
    pub cpu_backend: f64,
    /// Fraction of all CPUs busy during the window (whole machine).
    pub machine_busy: f64,
    /// CPUs' worth of time used by processes other than these three during
    /// the window (other work on the machine disturbs the figures).
    pub other_cores: f64,
}

pub(crate) fn client_config() -> ClientConfig {
    let mut info = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("vigil-bench", env!("CARGO_PKG_VERSION")),
    );
    // The handshake version: session-based streamable HTTP, as Vigil's own
    // backend connections use.
    info.protocol_version = ProtocolVersion::LATEST_WITH_INITIALIZE;
    info
}

/// Opens one MCP session (initialize handshake included).
/// With `token`: `Authorization: Bearer <token>` on every request.
pub async fn connect_as(
    url: &str,
    keep_alive: bool,
    token: Option<&str>,
) -> anyhow::Result<Client> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url);
    if let Some(t) = token {
        config = config.auth_header(t);
    }
    let transport = if keep_alive {
        let http = reqwest::Client::builder()
            .build()
            .context("cannot build the HTTP client")?;
        StreamableHttpClientTransport::with_client(http, config)
    } else {
        StreamableHttpClientTransport::from_config(config)
    };
    let client = tokio::time::timeout(Duration::from_secs(10), client_config().serve(transport))
        .await
        .map_err(|_| anyhow!("no answer to initialize from {url} within 10s"))?
        .with_context(|| format!("MCP handshake with {url} failed"))?;
    Ok(client)
}

async fn close(client: Client) {
    let _ = tokio::time::timeout(Duration::from_secs(2), client.cancel()).await;
}

/// Waits until `url` answers MCP and lists `tool`, or the server exits, or
/// `within` passes.
pub async fn wait_ready(
    server: &mut Server,
    url: &str,
    tool: &str,
    within: Duration,
) -> anyhow::Result<()> {
    wait_ready_as(server, url, tool, None, within).await
}

/// [`wait_ready`] with a bearer token.
pub async fn wait_ready_as(
    server: &mut Server,
    url: &str,
    tool: &str,
    token: Option<&str>,
    within: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    let mut last = anyhow!("not tried");
    loop {
        server.check_alive()?;
        match probe(url, tool, token).await {
            Ok(()) => return Ok(()),
            Err(e) => last = e,
        }
        if Instant::now() >= deadline {
            return Err(last.context(format!(
                "{} at {url} not ready within {}s; last log lines:\n{}",
                server.name(),
                within.as_secs(),
                server.log_tail(20)
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn probe(url: &str, tool: &str, token: Option<&str>) -> anyhow::Result<()> {
    let client = connect_as(url, false, token).await?;
    let tools = tokio::time::timeout(Duration::from_secs(5), client.list_all_tools()).await;
    close(client).await;
    let tools = tools.map_err(|_| anyhow!("tools/list timed out"))??;
    if tools.iter().any(|t| t.name == tool) {
        Ok(())
    } else {
        bail!("{url} does not list tool {tool} yet")
    }
}

fn call_params(tool: &str, payload: &str) -> CallToolRequestParams {
    let mut args = serde_json::Map::new();
    args.insert("text".into(), serde_json::Value::String(payload.to_owned()));
    CallToolRequestParams::new(tool.to_owned()).with_arguments(args)
}

/// One checked call: the echo must come back unchanged.
async fn checked_call(
    client: &Client,
    params: &CallToolRequestParams,
    payload: &str,
) -> anyhow::Result<()> {
    let result = client.call_tool(params.clone()).await?;
    if result.is_error == Some(true) {
        bail!(
            "tool error: {:?}",
            result
                .content
                .first()
                .and_then(|c| c.as_text())
                .map(|t| &t.text)
        );
    }
    match result.content.first().and_then(|c| c.as_text()) {
        Some(t) if t.text == payload => Ok(()),
        other => bail!(
            "echo returned {:?}, expected the payload",
            other.map(|t| &t.text)
        ),
    }
}

/// The measured window of one target: calls that start before `start`
/// are warm-up.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub start: Instant,
    pub end: Instant,
}

impl Window {
    /// The plan's warm-up from now, then its measured time.
    pub fn after_warmup(plan: &Plan) -> Self {
        let start = Instant::now() + plan.warmup;
        Self {
            start,
            end: start + plan.duration,
        }
    }
}

/// Per-session result of the loop, recorded the same way for every client:
/// latencies of successful calls started inside the window, calls
/// completed inside it, failures started inside it.
pub struct SessionRun {
    latencies_ns: Vec<u64>,
    completed: u64,
    errors: u64,
    first_error: Option<String>,
}

impl SessionRun {
    pub fn new() -> Self {
        Self {
            latencies_ns: Vec::with_capacity(64 * 1024),
            completed: 0,
            errors: 0,
            first_error: None,
        }
    }

    /// A successful call that ran from `begin` to `end`.
    pub fn ok(&mut self, w: &Window, begin: Instant, end: Instant) {
        if begin >= w.start {
            self.latencies_ns.push((end - begin).as_nanos() as u64);
        }
        if end >= w.start && end <= w.end {
            self.completed += 1;
        }
    }

    /// A failed call that began at `begin`; `describe` is asked for the
    /// first one only.
    pub fn failed(&mut self, w: &Window, begin: Instant, describe: impl FnOnce() -> String) {
        if begin >= w.start {
            self.errors += 1;
            if self.first_error.is_none() {
                self.first_error = Some(describe());
            }
        }
    }
}

/// Opens `plan.sessions` sessions on `target`, warms up, measures, closes.
pub async fn run_target(target: &Target, plan: &Plan, pids: &Pids) -> anyhow::Result<Sample> {
    let params = call_params(&target.tool, &plan.payload);

    // Open all sessions, and make one checked call on each (through Vigil
    // this also opens the session's backend connection).
    let params_ref = &params;
    let opened = futures::future::join_all((0..plan.sessions).map(|i| async move {
        let params = params_ref;
        let token =
            (!target.tokens.is_empty()).then(|| target.tokens[i % target.tokens.len()].as_str());
        let client = connect_as(&target.url, plan.keep_alive, token).await?;
        checked_call(&client, params, &plan.payload)
            .await
            .context("first call")?;
        anyhow::Ok(client)
    }))
    .await;
    let mut clients = Vec::with_capacity(opened.len());
    let mut failure = None;
    for r in opened {
        match r {
            Ok(c) => clients.push(c),
            Err(e) => failure = failure.or(Some(e)),
        }
    }
    if let Some(e) = failure {
        for c in clients {
            close(c).await;
        }
        return Err(e.context(format!(
            "opening {} session(s) on {}",
            plan.sessions, target.url
        )));
    }

    let window = Window::after_warmup(plan);
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|client| {
            let params = params.clone();
            tokio::spawn(async move {
                let run = session_loop(&client, &params, window).await;
                (client, run)
            })
        })
        .collect();
    let (sample, clients) = measure(tasks, window, pids).await?;
    futures::future::join_all(clients.into_iter().map(close)).await;
    Ok(sample)
}

/// Samples the CPU of the bench, Vigil, the backend and the machine at the
/// window's start and end while the sessions' tasks run, then collects the
/// tasks: the merged sample, and the clients they hand back.
pub async fn measure<C>(
    tasks: Vec<tokio::task::JoinHandle<(C, SessionRun)>>,
    window: Window,
    pids: &Pids,
) -> anyhow::Result<(Sample, Vec<C>)> {
    tokio::time::sleep_until(window.start).await;
    let cpu0 = snapshot(pids);
    tokio::time::sleep_until(window.end).await;
    let cpu1 = snapshot(pids);

    let duration = window.end - window.start;
    let mut sample = Sample {
        latencies_ns: Vec::new(),
        completed: 0,
        errors: 0,
        first_error: None,
        window: duration,
        cpu_client: cpu1.client - cpu0.client,
        cpu_vigil: cpu1.vigil - cpu0.vigil,
        cpu_backend: cpu1.backend - cpu0.backend,
        machine_busy: machine::busy_fraction(&cpu0.machine, &cpu1.machine),
        other_cores: 0.0,
    };
    let cpus = machine::online_cpus() as f64;
    let ours = (sample.cpu_client + sample.cpu_vigil + sample.cpu_backend) / duration.as_secs_f64();
    sample.other_cores = (sample.machine_busy * cpus - ours).max(0.0);
    let mut clients = Vec::with_capacity(tasks.len());
    for task in tasks {
        let (client, run) = task.await.context("a session task panicked")?;
        sample.latencies_ns.extend(run.latencies_ns);
        sample.completed += run.completed;
        sample.errors += run.errors;
        sample.first_error = sample.first_error.or(run.first_error);
        clients.push(client);
    }
    Ok((sample, clients))
}

async fn session_loop(
    client: &Client,
    params: &CallToolRequestParams,
    window: Window,
) -> SessionRun {
    let mut run = SessionRun::new();
    loop {
        let begin = Instant::now();
        if begin >= window.end {
            break;
        }
        let result = client.call_tool(params.clone()).await;
        let end = Instant::now();
        match result {
            Ok(r) if r.is_error != Some(true) => run.ok(&window, begin, end),
            other => {
                run.failed(&window, begin, || match other {
                    Ok(r) => format!(
                        "tool error: {:?}",
                        r.content.first().and_then(|c| c.as_text()).map(|t| &t.text)
                    ),
                    Err(e) => e.to_string(),
                });
                // Do not spin on a broken session.
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
    run
}

struct Snapshot {
    client: f64,
    vigil: f64,
    backend: f64,
    machine: CpuTimes,
}

fn snapshot(pids: &Pids) -> Snapshot {
    Snapshot {
        client: machine::process_cpu_seconds(None).unwrap_or(0.0),
        vigil: pids
            .vigil
            .and_then(|p| machine::process_cpu_seconds(Some(p)))
            .unwrap_or(0.0),
        backend: pids
            .backend
            .and_then(|p| machine::process_cpu_seconds(Some(p)))
            .unwrap_or(0.0),
        machine: machine::cpu_times(),
    }
}
