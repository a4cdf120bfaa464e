//! `vigil-bench`: how much a trip through Vigil costs.
//!
//! Starts a backend and a `vigil serve` in front of it on free loopback
//! ports, for each of two client/backend pairs (`calls.rs`): **rmcp**
//! (rmcp's client, the demo backend `vigil-demo-backend --transport http`)
//! and **lean** (the bench's own minimal client and backend, `lean/`, which
//! cost little enough per call that Vigil's own cost shows). Then it drives
//! `tools/call echo` over MCP streamable HTTP with N concurrent client
//! sessions, straight at the backend ("direct") and through Vigil ("vigil",
//! tool `demo__echo`), in the same run. For each it prints calls, throughput
//! and latency percentiles, the CPU each process spent per call, and the
//! ratios the project's goals are stated in: through-Vigil throughput at
//! least 0.8x direct with the rmcp pair and 0.5x with the lean pair, p50
//! overhead at most 100 µs with one session, Vigil's CPU at most 60 µs per
//! call. It measures; it never fails on a threshold.
//!
//! `--pair lean-stdio` measures the lean backend over stdio instead: Vigil
//! runs it as its stdio backend, and directly the bench drives its pipes.
//!
//! `vigil-bench instructions` counts the instructions Vigil executes per
//! call under callgrind, a figure that a noisy machine does not move, for
//! a 2025-11-25 client, a 2026-07-28 client or both (see
//! `instructions.rs`).
//!
//! `vigil-bench probes` measures health-probe fan-out instead: one Vigil
//! probing many HTTP backends (see `probes.rs`). `vigil-bench fanout`
//! measures how fast a backend's recovery reaches many live client sessions
//! as `tools/list_changed` (see `fanout.rs`). `vigil-bench idle` measures
//! what idle client sessions cost Vigil, with backend sessions shared and
//! with one per client session (see `idle.rs`). `vigil-bench events`
//! measures the control API's event stream (the dashboard's feed) with many
//! backends and many open streams: delivery latency and Vigil's CPU (see
//! `events.rs`). `vigil-bench access` measures what `[auth.oauth]`, a
//! `[[policy]]` and the call audit add to a call (see `access.rs`).
//! `vigil-bench capsets` measures `tools/list` by many client sessions over
//! a few capability sets: backend listings, bytes, time and Vigil's CPU per
//! list (see `capsets.rs`). `vigil-bench eras` measures a plain call and an
//! MRTR round trip by clients of both protocol eras, directly and through
//! Vigils reaching the backend in either era and with `auto`, with the way
//! (raw or typed) each went (see `eras.rs`). `vigil-bench instances` measures a backend
//! process per client session (`share = "session"`) against one shared
//! process: first-call latency, memory per instance, churn (see
//! `instances.rs`).
//!
//! ```text
//! cargo build --release -p vigil -p vigil-demo-backend -p vigil-bench
//! target/release/vigil-bench --sessions 1,8,32
//! target/release/vigil-bench --pair lean-stdio --sessions 1,8,32
//! target/release/vigil-bench instructions --pair lean --client 2025-11-25,2026-07-28
//! target/release/vigil-bench probes --backends 100,1000
//! target/release/vigil-bench fanout --sessions 100,1000
//! target/release/vigil-bench idle --sessions 10000
//! target/release/vigil-bench events --backends 1000 --streams 100
//! target/release/vigil-bench access --sessions 8
//! target/release/vigil-bench eras
//! target/release/vigil-bench capsets --sessions 1000 --old-vigil OLD/vigil
//! target/release/vigil-bench instances
//! ```

mod access;
mod busy_plugins;
mod calls;
mod capsets;
mod eras;
mod events;
mod fanout;
mod idle;
mod instances;
mod instructions;
mod lean;
mod load;
mod machine;
mod plugins;
mod probes;
mod procs;
mod report;
mod stats;
mod tool_search;

use std::path::{Path, PathBuf};

use anyhow::bail;
use clap::{Parser, Subcommand};

use crate::report::Pair;

/// Goal: through-Vigil throughput at least this fraction of direct, with
/// the rmcp pair.
pub const GOAL_THROUGHPUT_RATIO_RMCP: f64 = 0.8;
/// Goal: through-Vigil throughput at least this fraction of direct, with
/// the lean pair (whose direct figures are far higher).
pub const GOAL_THROUGHPUT_RATIO_LEAN: f64 = 0.5;
/// Goal: through-Vigil p50 at most this many microseconds above direct...
pub const GOAL_P50_OVERHEAD_US: f64 = 100.0;
/// ... with this many sessions (above it the CPUs saturate and the
/// overhead is queueing).
pub const GOAL_P50_OVERHEAD_SESSIONS: u32 = 1;
/// Goal: Vigil's CPU time per routed call at most this many microseconds.
pub const GOAL_VIGIL_CPU_US: f64 = 60.0;

/// Benchmarks of Vigil: tools/call against the demo backend and the lean
/// backend (over HTTP and over stdio), directly and through Vigil (the
/// default, or `calls`),
/// instructions per call under callgrind (`instructions`), health-probe fan-out
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
    /// tools/call against the demo backend and against the lean backend
    /// (over HTTP, or over stdio with `--pair lean-stdio`), directly and
    /// through Vigil (what `vigil-bench` without a subcommand runs).
    Calls(Args),
    /// Instructions Vigil executes per tools/call, counted by valgrind's
    /// callgrind (repeatable where the CPU time per call is noisy), for a
    /// 2025-11-25 client, a 2026-07-28 client or both side by side.
    Instructions(instructions::InstructionsArgs),
    /// The lean MCP backend the bench starts as a process of its own.
    #[command(hide = true)]
    LeanBackend(lean::backend::BackendArgs),
    /// Health-probe fan-out: one Vigil probing many HTTP backends (one demo
    /// backend process serving them all); Vigil's CPU, memory and the probe
    /// latency distribution, against an idle baseline.
    Probes(probes::ProbeArgs),
    /// list_changed fan-out: a backend recovers, many live client sessions
    /// on Vigil hear of it; time from the recorded recovery to each
    /// session's notification.
    Fanout(fanout::FanoutArgs),
    /// Idle client sessions over ten HTTP backends: Vigil's memory and
    /// sockets with backend sessions shared, and with one per client
    /// session.
    Idle(idle::IdleArgs),
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
    /// Both protocol eras: a plain tools/call and an MRTR round trip (the
    /// backend asks the client for a name) by a 2025-11-25 and a
    /// 2026-07-28 client, directly and through Vigils reaching the backend
    /// in either era and with `protocol = "auto"`, and which way (raw or
    /// typed) Vigil forwarded each.
    Eras(eras::ErasArgs),
    /// tools/list by many client sessions over four capability sets, one
    /// stdio backend: backend processes and listings made, bytes and time
    /// per list, Vigil's CPU; with `--old-vigil`, against the previous
    /// design in the same run.
    Capsets(capsets::CapsetsArgs),
    /// A backend process per client session (`share = "session"`) against
    /// one shared process (`share = "all"`), one stdio backend: first-call
    /// latency, memory per instance, sessions opening and closing.
    Instances(instances::InstancesArgs),
    /// find_tool in process (no network), over catalogs of real tool
    /// definitions: latency at 500 and 5,000 tools and where it goes,
    /// re-indexing a backend while searches run, tools/list bytes in
    /// search mode against passthrough, index memory per 1,000 tools.
    ToolSearch(tool_search::ToolSearchArgs),
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

    /// Which client/backend pairs to measure: `rmcp` (rmcp's client, the
    /// demo backend), `lean` (the bench's lean client and backend),
    /// `lean-stdio` (the lean backend over stdio: through Vigil as its
    /// stdio backend, and directly with the bench driving its pipes),
    /// `both` (rmcp and lean), `all`.
    #[arg(long, value_enum, default_value_t = PairChoice::Both)]
    pair: PairChoice,

    /// The protocol revision of the lean client's sessions through Vigil
    /// (lean pair: also directly): `2025-11-25` (`initialize`, a session)
    /// or `2026-07-28` (`server/discover`, sessionless requests; Vigil
    /// reaches the lean backend's 2026-07-28 door under `protocol =
    /// "auto"`). With `lean-stdio` the direct baseline always speaks
    /// 2025-11-25 on the pipes.
    #[arg(long, value_enum, default_value_t = lean::client::Era::Handshake, value_name = "REVISION")]
    client_protocol: lean::client::Era,

    /// Let the rmcp pair's clients keep HTTP connections alive between
    /// requests. By default they use rmcp's stock HTTP client, which opens a
    /// new TCP connection per request (the same client Vigil uses for its
    /// backends). The lean client always keeps its connection.
    #[arg(long)]
    keep_alive: bool,

    /// `keep_alive` of the backend in Vigil's config: `true` (Vigil's
    /// default: connections to the backend are reused) or `false` (a new
    /// connection per backend request, Vigil's behaviour before).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    backend_keep_alive: bool,

    /// `protocol` of the backend in Vigil's config: `auto` (the default:
    /// with these dual-era backends, the handshake era for 2025 clients
    /// and the 2026-07-28 door for 2026-07-28 ones), `2026-07-28`
    /// (stateless requests with `_meta`; HTTP pairs) or a handshake
    /// revision.
    #[arg(long, default_value = "auto", value_name = "REVISION")]
    backend_protocol: String,

    /// Worker threads of the bench client's runtime (default: one per CPU).
    #[arg(long, value_name = "N")]
    client_threads: Option<usize>,

    /// Pin Vigil to these CPUs (e.g. `1` or `2-3`), so it does not compete
    /// with the load for CPU. Linux only.
    #[arg(long, value_name = "CPUS", value_parser = parse_cpus)]
    pin_vigil: Option<CpuList>,

    /// Pin the bench client and the backends to these CPUs (e.g. `0`).
    #[arg(long, value_name = "CPUS", value_parser = parse_cpus)]
    pin_load: Option<CpuList>,

    /// Through Vigil, make each call as tool search's `call_tool` (Vigil
    /// in `always_listed` mode), to compare with a run without it: the
    /// lean pairs only.
    #[arg(long)]
    call_tool: bool,

    /// Also write the results as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

/// `--pair`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PairChoice {
    /// rmcp's client, the demo backend (HTTP).
    Rmcp,
    /// The lean client, the lean backend (HTTP).
    Lean,
    /// The lean client through Vigil, the lean backend over stdio.
    LeanStdio,
    /// rmcp and lean.
    Both,
    /// rmcp, lean and lean-stdio.
    All,
}

impl PairChoice {
    pub fn pairs(self) -> Vec<Pair> {
        match self {
            Self::Rmcp => vec![Pair::Rmcp],
            Self::Lean => vec![Pair::Lean],
            Self::LeanStdio => vec![Pair::LeanStdio],
            Self::Both => vec![Pair::Rmcp, Pair::Lean],
            Self::All => vec![Pair::Rmcp, Pair::Lean, Pair::LeanStdio],
        }
    }
}

impl Args {
    /// The pairs to measure, in the order they run.
    pub fn pairs(&self) -> Vec<Pair> {
        self.pair.pairs()
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli.command {
        None => main_calls(cli.calls),
        Some(Command::Calls(args)) => main_calls(args),
        Some(Command::Instructions(args)) => run_async(None, instructions::run(&args)),
        Some(Command::LeanBackend(args)) if args.stdio => match lean::stdio::run(&args.name) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                std::process::ExitCode::FAILURE
            }
        },
        Some(Command::LeanBackend(args)) => run_one_thread(lean::backend::run(&args)),
        Some(Command::Probes(args)) => main_probes(args),
        Some(Command::Fanout(args)) => main_fanout(args),
        Some(Command::Idle(args)) => run_async(None, idle::run(&args)),
        Some(Command::Plugins(args)) => main_plugins(args),
        Some(Command::BusyPlugins(args)) => run_async(None, busy_plugins::run(&args)),
        Some(Command::Events(args)) => main_events(args),
        Some(Command::Access(args)) => run_async(None, access::run(&args)),
        Some(Command::Eras(args)) => run_async(None, eras::run(&args)),
        Some(Command::Capsets(args)) => run_async(None, capsets::run(&args)),
        Some(Command::Instances(args)) => run_async(None, instances::run(&args)),
        Some(Command::ToolSearch(args)) => match tool_search::run(&args) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                std::process::ExitCode::FAILURE
            }
        },
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
    run_on(builder, work)
}

/// [`run_async`] on a current-thread runtime: no worker threads, no
/// cross-thread wake-ups (the lean backend).
fn run_one_thread(
    work: impl std::future::Future<Output = anyhow::Result<()>>,
) -> std::process::ExitCode {
    run_on(tokio::runtime::Builder::new_current_thread(), work)
}

fn run_on(
    mut builder: tokio::runtime::Builder,
    work: impl std::future::Future<Output = anyhow::Result<()>>,
) -> std::process::ExitCode {
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
    run_async(args.client_threads.map(|n| n.max(1)), calls::run(&args))
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
