//! `vigil-bench`: how much a trip through Vigil costs.
//!
//! Starts the demo backend (`vigil-demo-backend --transport http`) and a
//! `vigil serve` in front of it on free loopback ports, then drives
//! `tools/call echo` over MCP streamable HTTP with N concurrent client
//! sessions, first straight at the backend ("direct") and then through Vigil
//! ("vigil", tool `demo__echo`), in the same run. For each it prints calls,
//! throughput and latency percentiles, the CPU each process spent per call,
//! and the ratios the project's goals are stated in: through-Vigil throughput
//! at least 0.8x direct, p50 overhead at most 150 µs. It measures; it never
//! fails on a threshold.
//!
//! `vigil-bench probes` measures health-probe fan-out instead: one Vigil
//! probing many HTTP backends (see `probes.rs`). `vigil-bench fanout`
//! measures how fast a backend's recovery reaches many live client sessions
//! as `tools/list_changed` (see `fanout.rs`). `vigil-bench events`
//! measures the control API's event stream (the dashboard's feed) with many
//! backends and many open streams: delivery latency and Vigil's CPU (see
//! `events.rs`). `vigil-bench access` measures what `[auth.oauth]`, a
//! `[[policy]]` and the call audit add to a call (see `access.rs`).
//!
//! ```text
//! cargo build --release -p vigil -p vigil-demo-backend -p vigil-bench
//! target/release/vigil-bench --sessions 1,8,32
//! target/release/vigil-bench probes --backends 100,1000
//! target/release/vigil-bench fanout --sessions 100,1000
//! target/release/vigil-bench events --backends 1000 --streams 100
//! target/release/vigil-bench access --sessions 8
//! ```

mod access;
mod busy_plugins;
mod events;
mod fanout;
mod load;
mod machine;
mod plugins;
mod probes;
mod procs;
mod report;
mod stats;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};

use crate::load::{Plan, Target};
use crate::procs::Server;
use crate::report::{Measurement, TargetKind};

/// Goal: through-Vigil throughput at least this fraction of direct.
pub const GOAL_THROUGHPUT_RATIO: f64 = 0.8;
/// Goal: through-Vigil p50 at most this many microseconds above direct.
pub const GOAL_P50_OVERHEAD_US: f64 = 150.0;

/// Benchmarks of Vigil: tools/call against the demo backend, directly and
/// through Vigil (the default, or `calls`), health-probe fan-out
/// (`probes`), list_changed fan-out to client sessions (`fanout`), the plugin
/// host (`plugins`) and the control API's event stream (`events`).
#[derive(Debug, Parser)]
#[command(name = "vigil-bench", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,

    #[command(flatten)]
    calls: Args,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// tools/call against the demo backend, directly and through Vigil (what
    /// `vigil-bench` without a subcommand runs).
    Calls(Args),
    /// Health-probe fan-out: one Vigil probing many HTTP backends (one demo
    /// backend process serving them all); Vigil's CPU, memory and the probe
    /// latency distribution, against an idle baseline.
    Probes(probes::ProbeArgs),
    /// list_changed fan-out: a backend recovers, many live client sessions
    /// on Vigil hear of it; time from the recorded recovery to each
    /// session's notification.
    Fanout(fanout::FanoutArgs),
    /// The plugin host in process: load time from a cold and a warm
    /// compiled-code cache, instantiate + call time of a trivial probe,
    /// calls per second on one core, memory per loaded plugin.
    Plugins(plugins::PluginArgs),
    /// MCP tools/call latency through Vigil while probe plugins spin until
    /// their deadlines beside it, against the same Vigil without them.
    BusyPlugins(busy_plugins::BusyArgs),
    /// tools/call through Vigil with `[auth.oauth]`, a `[[policy]]` and the
    /// call audit, against the same build without them.
    Access(access::AccessArgs),
    /// The control API's event stream (`GET /api/v1/events`, the
    /// dashboard's feed): one Vigil with many backends, many open streams;
    /// time to `hello`, transition delivery latency, Vigil's CPU with 0 and
    /// N idle streams and during bursts.
    Events(events::EventArgs),
}

// The options of the tools/call benchmark (no doc comment: clap would take
// it as the whole program's description).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Concurrent client sessions. Comma-separate (or repeat) for a sweep in
    /// one run, e.g. `--sessions 1,8,32`.
    #[arg(long, value_delimiter = ',', default_value = "8", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    sessions: Vec<u32>,

    /// Measured seconds per target and round.
    #[arg(long, default_value_t = 10.0, value_name = "SECS")]
    duration: f64,

    /// Seconds of unrecorded calls before each measurement (Vigil opens its
    /// backend session lazily on a client session's first call).
    #[arg(long, default_value_t = 2.0, value_name = "SECS")]
    warmup: f64,

    /// Rounds per session count. Round 1 runs direct then vigil, round 2
    /// vigil then direct, and so on (ABBA), so slow drift of the machine
    /// cancels out; the summary merges the rounds.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,

    /// Directory holding the `vigil` and `vigil-demo-backend` binaries.
    /// Default: `${CARGO_TARGET_DIR:-target}/release`, else the directory of
    /// this binary.
    #[arg(long, value_name = "DIR")]
    bin_dir: Option<PathBuf>,

    /// Bytes of text sent to `echo` (and returned) per call.
    #[arg(long, default_value_t = 64, value_name = "BYTES")]
    payload: usize,

    /// Let the bench's clients keep HTTP connections alive between requests.
    /// By default they use rmcp's stock HTTP client, which opens a new TCP
    /// connection per request (the same client Vigil uses for its backends).
    #[arg(long)]
    keep_alive: bool,

    /// Let Vigil keep its HTTP connections to the backend alive
    /// (`keep_alive = true` on the backend in Vigil's config).
    #[arg(long)]
    backend_keep_alive: bool,

    /// Worker threads of the bench client's runtime (default: one per CPU).
    #[arg(long, value_name = "N")]
    client_threads: Option<usize>,

    /// Pin Vigil to these CPUs (e.g. `1` or `2-3`), so it does not compete
    /// with the load for CPU. Linux only.
    #[arg(long, value_name = "CPUS", value_parser = parse_cpus)]
    pin_vigil: Option<CpuList>,

    /// Pin the bench client and the demo backend to these CPUs (e.g. `0`).
    #[arg(long, value_name = "CPUS", value_parser = parse_cpus)]
    pin_load: Option<CpuList>,

    /// Also write the results as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli.command {
        None => main_calls(cli.calls),
        Some(Command::Calls(args)) => main_calls(args),
        Some(Command::Probes(args)) => main_probes(args),
        Some(Command::Fanout(args)) => main_fanout(args),
        Some(Command::Plugins(args)) => main_plugins(args),
        Some(Command::BusyPlugins(args)) => run_async(None, busy_plugins::run(&args)),
        Some(Command::Events(args)) => main_events(args),
        Some(Command::Access(args)) => run_async(None, access::run(&args)),
    }
}

fn main_probes(args: probes::ProbeArgs) -> std::process::ExitCode {
    // One worker: the bench only samples, it should take little CPU.
    run_async(Some(1), probes::run(&args))
}

fn main_plugins(args: plugins::PluginArgs) -> std::process::ExitCode {
    // One worker: "calls per second on one core".
    run_async(Some(1), plugins::run(&args))
}

fn main_events(args: events::EventArgs) -> std::process::ExitCode {
    // One worker: the stream readers compete with Vigil for the CPUs, so
    // they get one thread between them.
    run_async(Some(1), events::run(&args))
}

fn main_fanout(args: fanout::FanoutArgs) -> std::process::ExitCode {
    // Default worker count: the sessions' notifications arrive in parallel.
    run_async(None, fanout::run(&args))
}

/// Runs a subcommand on its own runtime until it ends, Ctrl-C or SIGTERM.
fn run_async(
    workers: Option<usize>,
    work: impl std::future::Future<Output = anyhow::Result<()>>,
) -> std::process::ExitCode {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = workers {
        builder.worker_threads(n);
    }
    let runtime = match builder.enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        tokio::select! {
            r = work => r,
            _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
            _ = terminated() => Err(anyhow::anyhow!("terminated")),
        }
    });
    // Children are spawned with kill_on_drop: dropping the runtime (and the
    // future holding them) kills whatever is still running.
    drop(runtime);
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Resolves on SIGTERM (never if it cannot be watched), so the bench can
/// stop its servers instead of dying with them still running.
async fn terminated() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut s) => {
            s.recv().await;
        }
        Err(_) => std::future::pending::<()>().await,
    }
}

fn main_calls(args: Args) -> std::process::ExitCode {
    // Before the runtime exists, so every worker thread inherits it.
    if let Some(CpuList(cpus)) = &args.pin_load
        && let Err(e) = procs::pin_current_process(cpus)
    {
        eprintln!("error: cannot pin the bench to CPUs {cpus:?}: {e}");
        return std::process::ExitCode::FAILURE;
    }
    run_async(args.client_threads.map(|n| n.max(1)), run(&args))
}

async fn run(args: &Args) -> anyhow::Result<()> {
    if !args.duration.is_finite()
        || args.duration <= 0.0
        || !args.warmup.is_finite()
        || args.warmup < 0.0
    {
        bail!("--duration must be > 0 and --warmup >= 0");
    }
    let bin_dir = resolve_bin_dir(args.bin_dir.as_deref())?;
    let vigil_bin = bin_dir.join("vigil");
    let backend_bin = bin_dir.join("vigil-demo-backend");

    let machine = machine::Machine::detect();
    println!("vigil-bench {}", env!("CARGO_PKG_VERSION"));
    println!("{machine}");
    println!(
        "plan: sessions {:?}, {} round(s) x (direct, vigil), warm-up {}s + {}s measured per target, payload {} B, client HTTP {}",
        args.sessions,
        args.rounds,
        args.warmup,
        args.duration,
        args.payload,
        if args.keep_alive {
            "keep-alive"
        } else {
            "new connection per request (rmcp default)"
        },
    );
    if args.pin_vigil.is_some() || args.pin_load.is_some() {
        println!(
            "pinning: vigil on CPUs {}, bench client and backend on CPUs {}",
            args.pin_vigil
                .as_ref()
                .map_or("any".into(), |c| format!("{:?}", c.0)),
            args.pin_load
                .as_ref()
                .map_or("any".into(), |c| format!("{:?}", c.0)),
        );
    }

    let work = procs::WorkDir::create()?;
    let backend_port = procs::free_port()?;
    let vigil_port = procs::free_port()?;
    let backend_url = format!("http://127.0.0.1:{backend_port}/mcp");
    let vigil_url = format!("http://127.0.0.1:{vigil_port}/mcp");

    let mut backend = Server::spawn(
        "vigil-demo-backend",
        &backend_bin,
        &[
            "--transport".into(),
            "http".into(),
            "--listen".into(),
            format!("127.0.0.1:{backend_port}"),
            "--name".into(),
            "demo".into(),
        ],
        &[("RUST_LOG", "warn")],
        args.pin_load.as_ref().map(|c| c.0.as_slice()),
        work.path().join("backend.log"),
    )?;
    load::wait_ready(&mut backend, &backend_url, "echo", Duration::from_secs(30)).await?;

    let config = work.path().join("vigil.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:{vigil_port}\"\nlog_level = \"warn\"\n\n[api]\nlisten = \"127.0.0.1:0\"\n\n[[backends]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{backend_url}\"\nkeep_alive = {}\n",
            args.backend_keep_alive
        ),
    )
    .with_context(|| format!("cannot write {}", config.display()))?;
    let mut vigil = Server::vigil(
        &vigil_bin,
        &config,
        args.pin_vigil.as_ref().map(|c| c.0.as_slice()),
        work.path().join("vigil.log"),
    )?;
    load::wait_ready(
        &mut vigil,
        &vigil_url,
        "demo__echo",
        Duration::from_secs(30),
    )
    .await?;
    if let Some(v) = procs::version(&vigil_bin).await {
        println!(
            "gateway: {v}, one HTTP backend (vigil-demo-backend), log_level = warn, backend keep_alive = {}",
            args.backend_keep_alive
        );
    }
    println!();

    let direct = Target {
        kind: TargetKind::Direct,
        url: backend_url.clone(),
        tool: "echo".into(),
        tokens: Vec::new(),
    };
    let via = Target {
        kind: TargetKind::Vigil,
        url: vigil_url.clone(),
        tool: "demo__echo".into(),
        tokens: Vec::new(),
    };
    let pids = load::Pids {
        backend: backend.pid(),
        vigil: vigil.pid(),
    };

    let mut measurements: Vec<Measurement> = Vec::new();
    for &n in &args.sessions {
        let plan = Plan {
            sessions: n as usize,
            warmup: Duration::from_secs_f64(args.warmup),
            duration: Duration::from_secs_f64(args.duration),
            payload: "x".repeat(args.payload),
            keep_alive: args.keep_alive,
        };
        for round in 1..=args.rounds {
            let order = if round % 2 == 1 {
                [&direct, &via]
            } else {
                [&via, &direct]
            };
            for target in order {
                backend.check_alive()?;
                vigil.check_alive()?;
                let sample = load::run_target(target, &plan, &pids)
                    .await
                    .with_context(|| {
                        format!("{} with {n} session(s), round {round}", target.kind)
                    })?;
                let m = Measurement::new(target.kind, n, round, sample);
                println!("{}", m.line());
                measurements.push(m);
                // Let closed sessions drain before the next target starts.
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
        println!();
    }

    let summary = report::Summary::new(&measurements);
    println!("{}", summary.table());
    println!("{}", summary.goals());
    if let Some(path) = &args.json {
        let doc = report::json(&machine, args, &measurements, &summary);
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
        println!("results written to {}", path.display());
    }

    vigil.stop().await;
    backend.stop().await;
    Ok(())
}

/// A set of CPU numbers.
#[derive(Debug, Clone)]
pub struct CpuList(pub Vec<usize>);

/// Parses a CPU list: `0`, `0,2`, `1-3`.
fn parse_cpus(s: &str) -> Result<CpuList, String> {
    let mut cpus = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || format!("`{part}` is not a CPU number or range (e.g. 0,2-3)");
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) =
                    (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                if a > b {
                    return Err(bad());
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().map_err(|_| bad())?),
        }
    }
    if cpus.is_empty() {
        return Err("empty CPU list".into());
    }
    Ok(CpuList(cpus))
}

/// Finds the directory holding both server binaries.
pub(crate) fn resolve_bin_dir(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    let has_both =
        |dir: &Path| dir.join("vigil").is_file() && dir.join("vigil-demo-backend").is_file();
    if let Some(dir) = explicit {
        if has_both(dir) {
            return Ok(dir.to_path_buf());
        }
        bail!(
            "{} does not hold both `vigil` and `vigil-demo-backend`; build them with \
             `cargo build --release -p vigil -p vigil-demo-backend`",
            dir.display()
        );
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| "target".into());
    let mut candidates = vec![target.join("release")];
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
    {
        candidates.push(dir);
    }
    for dir in &candidates {
        if has_both(dir) {
            return Ok(dir.clone());
        }
    }
    bail!(
        "cannot find `vigil` and `vigil-demo-backend` in {}; build them with \
         `cargo build --release -p vigil -p vigil-demo-backend` or pass --bin-dir",
        candidates
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(" or ")
    )
}
