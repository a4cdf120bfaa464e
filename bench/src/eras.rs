//! `vigil-bench eras`: what each protocol era costs through Vigil, in one
//! run: a plain `tools/call` and a call that asks the client a question
//! (MRTR), by a client of each era, directly and through Vigil in front of
//! a backend reached in each era.
//!
//! One HTTP demo backend (it speaks both eras) and three Vigils in front of
//! it: `vigil-hs` reaches it in the handshake era (`protocol =
//! "2025-11-25"`), `vigil-26` in 2026-07-28 (`protocol = "2026-07-28"`),
//! `vigil-auto` as `protocol = "auto"` does by default: this dual backend's
//! 2025 clients are served in the handshake era, its 2026-07-28 clients
//! through the backend's 2026-07-28 door, which the first request of their
//! capability set opens (typed) and the rest go through raw. Clients are
//! rmcp's: a handshake-era one (`initialize`, a session) and a 2026-07-28
//! one (`server/discover`, self-contained requests), each keeping its HTTP
//! connection alive. Calls:
//!
//! - `echo`: one request each way;
//! - `ask_user` (MRTR): the backend asks for a name. A handshake-era client
//!   is sent `elicitation/create` during its call; a 2026-07-28 client gets
//!   an input-required result and calls again with the answer. Through
//!   Vigil the question crosses eras where client and backend differ
//!   (Vigil parks the backend's call and seals a `requestState`, or asks
//!   the client a real request and retries the backend itself).
//!
//! Each (client era, call) is measured directly and through every Vigil,
//! one session calling in a loop, rounds in rotating order; it prints
//! p50/p99 per call, the ratio and added p50 of each through-Vigil figure
//! against the same client's direct one, Vigil's CPU per call, and which
//! way Vigil forwarded the measured calls (`vigil_requests_forwarded_total
//! {method="tools/call"}` of its control API, read at each window's start
//! and end): raw or typed, per call. Every answer is checked, and so is
//! the path of the plain echo where it must be raw (a 2025 client through
//! `vigil-hs` and `vigil-auto`, a 2026-07-28 client through `vigil-26` and
//! `vigil-auto`): the run fails after its table if one of those was not.
//! It never fails on a threshold.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationCapability, Implementation, ProtocolVersion,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ErrorData, RoleClient};

use crate::procs::{self, Server};
use crate::stats::Latency;

#[derive(Debug, clap::Args)]
pub struct ErasArgs {
    /// Measured seconds per target and round.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Unrecorded seconds before each measurement.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Rounds; each runs the three paths of a case in a rotated order.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
    /// Directory holding `vigil` and `vigil-demo-backend`.
    #[arg(long, value_name = "DIR")]
    bin_dir: Option<PathBuf>,
}

/// The era a bench client speaks.
#[derive(Debug, Clone, Copy, PartialEq)]
enum ClientEra {
    Handshake,
    Modern,
}

impl std::fmt::Display for ClientEra {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Handshake => "2025-11-25 client",
            Self::Modern => "2026-07-28 client",
        })
    }
}

/// What one call does.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Call {
    Echo,
    Ask,
}

impl Call {
    fn tool(self) -> &'static str {
        match self {
            Self::Echo => "echo",
            Self::Ask => "ask_user",
        }
    }

    fn arguments(self) -> serde_json::Map<String, serde_json::Value> {
        let (key, value) = match self {
            Self::Echo => ("text", "bench"),
            Self::Ask => ("message", "your name?"),
        };
        let mut args = serde_json::Map::new();
        args.insert(key.into(), value.into());
        args
    }

    /// The text the call must answer.
    fn expected(self) -> &'static str {
        match self {
            Self::Echo => "bench",
            Self::Ask => "user accept: {\"name\":\"bench\"}",
        }
    }
}

/// Where a call goes: the backend itself, or one of the Vigils.
struct Path {
    name: &'static str,
    url: String,
    prefix: &'static str,
    /// Vigil's process, whose CPU time per call is reported (`None`: direct).
    vigil_pid: Option<u32>,
    /// Vigil's control API, `http://127.0.0.1:PORT` (`None`: direct).
    api: Option<String>,
}

/// What one measured window gave.
struct Window {
    latencies: Vec<u64>,
    /// Vigil's user + system CPU seconds over the window, when known.
    vigil_cpu: Option<f64>,
    /// `tools/call` requests Vigil forwarded (raw, typed) over the window.
    forwarded: Option<(u64, u64)>,
}

/// The paths whose plain echo by a client of `era` must be raw.
fn raw_expected(what: Call, era: ClientEra, path: &str) -> bool {
    what == Call::Echo
        && match era {
            ClientEra::Handshake => matches!(path, "vigil-hs" | "vigil-auto"),
            ClientEra::Modern => matches!(path, "vigil-26" | "vigil-auto"),
        }
}

/// Answers every elicitation with the name `bench`. It declares the
/// `elicitation` capability only for `ask_user`: a client that declares
/// nothing is what a plain tool caller looks like, and its 2025-era calls
/// may take Vigil's raw path.
#[derive(Clone)]
struct Answering {
    elicitation: bool,
}

impl ClientHandler for Answering {
    fn get_info(&self) -> ClientConfig {
        let mut caps = ClientCapabilities::default();
        if self.elicitation {
            caps.elicitation = Some(ElicitationCapability::default());
        }
        let mut info = ClientConfig::new(
            caps,
            Implementation::new("vigil-bench-eras", env!("CARGO_PKG_VERSION")),
        );
        info.protocol_version = ProtocolVersion::LATEST_WITH_INITIALIZE;
        info
    }

    async fn create_elicitation(
        &self,
        _request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        Ok(ElicitResult::new(ElicitationAction::Accept)
            .with_content(serde_json::json!({"name": "bench"})))
    }
}

type Client = RunningService<RoleClient, Answering>;

async fn connect(url: &str, era: ClientEra, what: Call) -> anyhow::Result<Client> {
    let http = reqwest::Client::builder()
        .build()
        .context("cannot build the HTTP client")?;
    let transport = StreamableHttpClientTransport::with_client(
        http,
        StreamableHttpClientTransportConfig::with_uri(url),
    );
    let mode = match era {
        ClientEra::Handshake => ClientLifecycleMode::Initialize,
        ClientEra::Modern => ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::LATEST],
        },
    };
    tokio::time::timeout(
        Duration::from_secs(10),
        Answering {
            elicitation: what == Call::Ask,
        }
        .serve_with_lifecycle(transport, mode),
    )
    .await
    .map_err(|_| anyhow!("{url}: no answer to the {era}'s start within 10s"))?
    .with_context(|| format!("{url}: the {era} could not start"))
}

/// One call, checked.
async fn call(client: &Client, params: &CallToolRequestParams, what: Call) -> anyhow::Result<()> {
    let result = client.call_tool(params.clone()).await?;
    let text = result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.as_str());
    if result.is_error == Some(true) || text != Some(what.expected()) {
        bail!("{} answered {text:?}", what.tool());
    }
    Ok(())
}

/// One session calling in a loop: latencies of the measured window.
async fn measure(
    path: &Path,
    era: ClientEra,
    what: Call,
    args: &ErasArgs,
) -> anyhow::Result<Window> {
    let cpu = || {
        path.vigil_pid
            .and_then(|pid| crate::machine::process_cpu_seconds(Some(pid)))
    };
    let client = connect(&path.url, era, what).await?;
    let params = CallToolRequestParams::new(format!("{}{}", path.prefix, what.tool()))
        .with_arguments(what.arguments());
    // Read outside the CPU window: before its start, after its end.
    let forwarded = async || match &path.api {
        Some(api) => procs::forwarded(api, "tools/call").await.map(Some),
        None => Ok(None),
    };
    let start = Instant::now() + Duration::from_secs_f64(args.warmup);
    let end = start + Duration::from_secs_f64(args.duration);
    let mut latencies = Vec::new();
    let mut at_start = None;
    loop {
        let begin = Instant::now();
        if begin >= end {
            break;
        }
        if begin >= start && at_start.is_none() {
            let f = forwarded().await?;
            at_start = Some((cpu(), f));
        }
        let begin = if at_start.is_some() {
            Instant::now()
        } else {
            begin
        };
        call(&client, &params, what)
            .await
            .with_context(|| format!("{era} via {}", path.name))?;
        if at_start.is_some() {
            latencies.push(begin.elapsed().as_nanos() as u64);
        }
    }
    let cpu_at_end = cpu();
    let forwarded_at_end = forwarded().await?;
    let (cpu_at_start, forwarded_at_start) = at_start.unwrap_or((None, None));
    let vigil_cpu = match (cpu_at_start, cpu_at_end) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    let forwarded = match (forwarded_at_start, forwarded_at_end) {
        (Some(a), Some(b)) => Some((b.0.saturating_sub(a.0), b.1.saturating_sub(a.1))),
        _ => None,
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), client.cancel()).await;
    Ok(Window {
        latencies,
        vigil_cpu,
        forwarded,
    })
}

pub async fn run(args: &ErasArgs) -> anyhow::Result<()> {
    if !(args.duration.is_finite() && args.duration > 0.0 && args.warmup >= 0.0) {
        bail!("--duration must be > 0 and --warmup >= 0");
    }
    let bin_dir = crate::resolve_bin_dir(args.bin_dir.as_deref())?;
    let machine = crate::machine::Machine::detect();
    println!("vigil-bench {} eras", env!("CARGO_PKG_VERSION"));
    println!("{machine}");
    println!(
        "plan: one session calling in a loop, warm-up {}s + {}s per target, {} round(s) per case in rotating order",
        args.warmup, args.duration, args.rounds
    );

    let work = procs::WorkDir::create()?;
    let (mut backend, backend_url) = procs::demo_backend(&bin_dir, &work).await?;
    let mut vigils: Vec<Server> = Vec::new();
    let mut paths = vec![Path {
        name: "direct",
        url: backend_url.clone(),
        prefix: "",
        vigil_pid: None,
        api: None,
    }];
    for (name, protocol) in [
        ("vigil-hs", "2025-11-25"),
        ("vigil-26", "2026-07-28"),
        ("vigil-auto", "auto"),
    ] {
        let port = procs::free_port()?;
        let api_port = procs::free_port()?;
        let dir = work.path().join(name);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let config = dir.join("vigil.toml");
        let backend = procs::BackendSpec::Http {
            url: &backend_url,
            keep_alive: true,
        };
        std::fs::write(
            &config,
            procs::vigil_config_for(port, api_port, &backend, protocol, "", ""),
        )?;
        let url = format!("http://127.0.0.1:{port}/mcp");
        let mut vigil =
            Server::vigil(&bin_dir.join("vigil"), &config, None, dir.join("vigil.log"))?;
        crate::load::wait_ready(&mut vigil, &url, "demo__echo", Duration::from_secs(30)).await?;
        paths.push(Path {
            name,
            url,
            prefix: "demo__",
            vigil_pid: vigil.pid(),
            api: Some(format!("http://127.0.0.1:{api_port}")),
        });
        vigils.push(vigil);
    }
    println!(
        "paths: direct = the demo backend; vigil-hs = Vigil reaching it in the handshake era; vigil-26 = Vigil reaching it in 2026-07-28; vigil-auto = protocol \"auto\" (2025 clients in the handshake era, 2026-07-28 clients through the backend's 2026-07-28 door)"
    );
    println!();

    let mut rows = Vec::new();
    for what in [Call::Echo, Call::Ask] {
        for era in [ClientEra::Handshake, ClientEra::Modern] {
            let mut merged: Vec<Vec<u64>> = vec![Vec::new(); paths.len()];
            let mut vigil_cpu: Vec<Option<f64>> =
                paths.iter().map(|p| p.vigil_pid.map(|_| 0.0)).collect();
            let mut forwarded: Vec<Option<(u64, u64)>> = paths
                .iter()
                .map(|p| p.api.as_ref().map(|_| (0, 0)))
                .collect();
            for round in 0..args.rounds as usize {
                for k in 0..paths.len() {
                    let i = (k + round) % paths.len();
                    backend.check_alive()?;
                    for v in &mut vigils {
                        v.check_alive()?;
                    }
                    let window = measure(&paths[i], era, what, args).await?;
                    merged[i].extend(window.latencies);
                    vigil_cpu[i] = match (vigil_cpu[i], window.vigil_cpu) {
                        (Some(sum), Some(w)) => Some(sum + w),
                        _ => None,
                    };
                    forwarded[i] = match (forwarded[i], window.forwarded) {
                        (Some(sum), Some(w)) => Some((sum.0 + w.0, sum.1 + w.1)),
                        _ => None,
                    };
                }
            }
            let figures: Vec<Latency> = merged
                .iter_mut()
                .map(|l| {
                    l.sort_unstable();
                    Latency::of(l)
                })
                .collect();
            let calls: Vec<usize> = merged.iter().map(Vec::len).collect();
            rows.push(Row {
                what,
                era,
                figures,
                calls,
                vigil_cpu,
                forwarded,
            });
        }
    }
    print_table(&paths, &rows);

    for v in vigils {
        v.stop().await;
    }
    backend.stop().await;

    // The echoes that must have gone raw, every one of them.
    let mut off_path = Vec::new();
    for row in &rows {
        for (i, path) in paths.iter().enumerate() {
            if !raw_expected(row.what, row.era, path.name) {
                continue;
            }
            let calls = row.calls[i] as u64;
            if row.forwarded[i] != Some((calls, 0)) {
                off_path.push(format!(
                    "{} by a {} via {}: {} of {calls} calls",
                    row.what.tool(),
                    row.era,
                    path.name,
                    forwarded_label(row.forwarded[i], row.calls[i])
                ));
            }
        }
    }
    if !off_path.is_empty() {
        bail!(
            "calls that should have taken the raw path did not:\n{}",
            off_path.join("\n")
        );
    }
    println!(
        "path check: every plain echo that should go raw did (2025-11-25 via vigil-hs and vigil-auto, 2026-07-28 via vigil-26 and vigil-auto)."
    );
    Ok(())
}

/// Which way Vigil forwarded a row's calls, per call: `raw`, `typed`, or
/// both with their counts per call (`-`: direct, or not known).
fn forwarded_label(forwarded: Option<(u64, u64)>, calls: usize) -> String {
    let Some((raw, typed)) = forwarded else {
        return "-".into();
    };
    if calls == 0 {
        return "-".into();
    }
    let per = |n: u64| n as f64 / calls as f64;
    match (raw, typed) {
        (0, 0) => "none".into(),
        (r, 0) if r == calls as u64 => "raw".into(),
        (0, t) if t == calls as u64 => "typed".into(),
        (r, 0) => format!("raw {:.2}", per(r)),
        (0, t) => format!("typed {:.2}", per(t)),
        (r, t) => format!("raw {:.2} + typed {:.2}", per(r), per(t)),
    }
}

/// One (call, client era): a figure per path.
struct Row {
    what: Call,
    era: ClientEra,
    figures: Vec<Latency>,
    calls: Vec<usize>,
    /// Vigil's CPU seconds over all rounds, per path (`None`: direct).
    vigil_cpu: Vec<Option<f64>>,
    /// `tools/call` requests forwarded (raw, typed) over all rounds, per
    /// path (`None`: direct).
    forwarded: Vec<Option<(u64, u64)>>,
}

fn print_table(paths: &[Path], rows: &[Row]) {
    println!(
        "{:<9} {:<18} {:<11} {:>7} {:>9} {:>9} {:>10} {:>8} {:>14}  forwarded",
        "call", "client", "path", "calls", "p50 µs", "p99 µs", "+p50 µs", "p50 x", "vigil CPU µs",
    );
    for row in rows {
        let Row {
            what,
            era,
            figures,
            calls,
            vigil_cpu,
            forwarded,
        } = row;
        let direct = figures[0].p50;
        for (i, path) in paths.iter().enumerate() {
            let f = figures[i];
            let cpu = match vigil_cpu[i] {
                Some(seconds) if calls[i] > 0 => format!("{:.0}", seconds * 1e6 / calls[i] as f64),
                _ => "-".to_owned(),
            };
            let (added, ratio) = if i == 0 {
                ("-".to_owned(), "-".to_owned())
            } else {
                (
                    format!("{:+.0}", f.p50 - direct),
                    format!("{:.2}", f.p50 / direct.max(f64::MIN_POSITIVE)),
                )
            };
            println!(
                "{:<9} {:<18} {:<11} {:>7} {:>9.0} {:>9.0} {:>10} {:>8} {:>14}  {}",
                what.tool(),
                era.to_string(),
                path.name,
                calls[i],
                f.p50,
                f.p99,
                added,
                ratio,
                cpu,
                forwarded_label(forwarded[i], calls[i])
            );
        }
    }
    println!();
    println!("+p50 / p50 x: against the same client's call directly to the backend.");
    println!(
        "vigil CPU µs: Vigil's user + system CPU over the measured windows, per call (an ask_user call through Vigil is all its requests)."
    );
    println!(
        "forwarded: the tools/call requests Vigil sent the backend over the measured windows (vigil_requests_forwarded_total), raw or typed, per call."
    );
}
