//! `vigil-bench [calls]`: `tools/call echo` directly and through Vigil,
//! with up to three client/backend pairs.
//!
//! - **rmcp**: rmcp's streamable HTTP client against the demo backend (an
//!   rmcp server), the pair of the earlier figures;
//! - **lean**: the bench's own client against its own backend (`lean/`),
//!   which cost tens of µs per call, so Vigil's cost is not hidden behind
//!   theirs;
//! - **lean-stdio**: the lean backend over stdio. Through Vigil it is
//!   Vigil's stdio backend (a process Vigil starts) and the lean client
//!   calls Vigil over HTTP; directly, the bench starts another one and
//!   drives its pipes itself (`lean/pipe.rs`), its sessions sharing the
//!   pipe as Vigil's client sessions share Vigil's.
//!
//! Each pair has its own backend process and its own Vigil (one backend
//! `demo`, so the tool is `demo__echo` either way, and each Vigil's CPU is
//! that pair's alone). All run for the whole bench; for each session
//! count, each pair runs its rounds in ABBA order (direct, vigil, then
//! vigil, direct, ...) before the next pair.

use std::time::Duration;

use anyhow::{Context as _, bail};

use crate::lean::pipe::Peer;
use crate::load::{self, Pids, Plan, Target};
use crate::procs::{self, Server};
use crate::report::{self, Measurement, Pair, TargetKind};
use crate::{Args, lean, machine};

/// One pair's processes and targets.
struct PairRun {
    pair: Pair,
    /// The backend the direct target calls.
    backend: DirectBackend,
    vigil: Server,
    /// Vigil's own backend process, if Vigil started it (stdio); else the
    /// direct backend is Vigil's too.
    vigil_backend: Option<u32>,
    direct: Target,
    via: Target,
}

/// The backend of a pair's direct target.
enum DirectBackend {
    /// A server process the clients reach over HTTP.
    Http(Box<Server>),
    /// A stdio server whose pipes the bench drives.
    Pipe(std::sync::Arc<Peer>),
}

impl DirectBackend {
    fn pid(&self) -> Option<u32> {
        match self {
            Self::Http(s) => s.pid(),
            Self::Pipe(p) => p.pid(),
        }
    }

    fn check_alive(&mut self) -> anyhow::Result<()> {
        match self {
            Self::Http(s) => s.check_alive(),
            Self::Pipe(p) => p.check_alive(),
        }
    }

    async fn stop(self) {
        match self {
            Self::Http(s) => s.stop().await,
            // Its stdin closes and it is killed with the last handle.
            Self::Pipe(p) => drop(p),
        }
    }
}

pub async fn run(args: &Args) -> anyhow::Result<()> {
    if !args.duration.is_finite()
        || args.duration <= 0.0
        || !args.warmup.is_finite()
        || args.warmup < 0.0
    {
        bail!("--duration must be > 0 and --warmup >= 0");
    }
    let bin_dir = crate::resolve_bin_dir(args.bin_dir.as_deref())?;
    let machine = machine::Machine::detect();
    let pairs = args.pairs();
    if args.call_tool && pairs.contains(&Pair::Rmcp) {
        bail!("--call-tool drives the lean client: use --pair lean or --pair lean-stdio");
    }
    println!("vigil-bench {}", env!("CARGO_PKG_VERSION"));
    println!("{machine}");
    println!(
        "plan: sessions {:?}, pairs {}, {} round(s) x (direct, vigil) per pair, warm-up {}s + {}s measured per target, payload {} B",
        args.sessions,
        pairs
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(" and "),
        args.rounds,
        args.warmup,
        args.duration,
        args.payload,
    );
    for pair in &pairs {
        match pair {
            Pair::Rmcp => println!(
                "pair rmcp: rmcp's streamable HTTP client, HTTP {}, against vigil-demo-backend",
                if args.keep_alive {
                    "keep-alive"
                } else {
                    "new connection per request (rmcp default)"
                },
            ),
            Pair::Lean => println!(
                "pair lean: the bench's lean client ({}, one kept-alive connection per session) against `vigil-bench lean-backend` (one thread){}",
                args.client_protocol,
                if args.call_tool {
                    "; through Vigil each call is tool search's `call_tool` of `demo__echo`"
                } else {
                    ""
                }
            ),
            Pair::LeanStdio => println!(
                "pair lean-stdio: `vigil-bench lean-backend --stdio` (one thread); through Vigil as its stdio backend, the lean client ({}) calling Vigil; direct, the bench's sessions sharing the backend's pipes (2025-11-25)",
                args.client_protocol
            ),
        }
    }
    if args.pin_vigil.is_some() || args.pin_load.is_some() {
        println!(
            "pinning: vigil on CPUs {}, bench client and backends on CPUs {}",
            args.pin_vigil
                .as_ref()
                .map_or("any".into(), |c| format!("{:?}", c.0)),
            args.pin_load
                .as_ref()
                .map_or("any".into(), |c| format!("{:?}", c.0)),
        );
    }

    let work = procs::WorkDir::create()?;
    let mut runs = Vec::new();
    for &pair in &pairs {
        runs.push(start_pair(pair, args, &bin_dir, &work).await?);
    }
    if let Some(v) = procs::version(&bin_dir.join("vigil")).await {
        println!(
            "gateway: {v}, one Vigil per pair with one backend `demo` (HTTP; lean-stdio: stdio), log_level = warn, HTTP backend keep_alive = {}, protocol = {}",
            args.backend_keep_alive, args.backend_protocol
        );
    }
    println!();

    let mut measurements: Vec<Measurement> = Vec::new();
    for &n in &args.sessions {
        let plan = Plan {
            sessions: n as usize,
            warmup: Duration::from_secs_f64(args.warmup),
            duration: Duration::from_secs_f64(args.duration),
            payload: "x".repeat(args.payload),
            keep_alive: args.keep_alive,
        };
        for run in &mut runs {
            for round in 1..=args.rounds {
                let order = if round % 2 == 1 {
                    [&run.direct, &run.via]
                } else {
                    [&run.via, &run.direct]
                };
                for target in order {
                    run.backend.check_alive()?;
                    run.vigil.check_alive()?;
                    let pids = Pids {
                        backend: match target.kind {
                            TargetKind::Vigil => run.vigil_backend.or(run.backend.pid()),
                            TargetKind::Direct => run.backend.pid(),
                        },
                        vigil: run.vigil.pid(),
                    };
                    let era = args.client_protocol;
                    let sample = match (run.pair, target.kind, &run.backend) {
                        (Pair::Rmcp, ..) => load::run_target(target, &plan, &pids).await,
                        (_, TargetKind::Direct, DirectBackend::Pipe(peer)) => {
                            lean::load::run_pipe_target(peer, &plan, &pids).await
                        }
                        _ => {
                            let call_tool = args.call_tool && target.kind == TargetKind::Vigil;
                            lean::load::run_target(target, (era, call_tool), &plan, &pids).await
                        }
                    }
                    .with_context(|| {
                        format!(
                            "{} pair, {} with {n} session(s), round {round}",
                            run.pair, target.kind
                        )
                    })?;
                    let m = Measurement::new(run.pair, target.kind, n, round, sample);
                    println!("{}", m.line());
                    measurements.push(m);
                    // Let closed sessions drain before the next target starts.
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
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

    for run in runs {
        run.vigil.stop().await;
        run.backend.stop().await;
    }
    Ok(())
}

/// Starts a pair's backend and its Vigil, both ready.
async fn start_pair(
    pair: Pair,
    args: &Args,
    bin_dir: &std::path::Path,
    work: &procs::WorkDir,
) -> anyhow::Result<PairRun> {
    let pin_load = args.pin_load.as_ref().map(|c| c.0.as_slice());
    // A directory per Vigil: its data dir is beside its config.
    let dir = work.path().join(pair.to_string());
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let (stdio_command, stdio_args) = procs::lean_stdio_command()?;
    let (backend, backend_url) = match pair {
        Pair::Rmcp => {
            let (s, url) = procs::demo_backend_pinned(bin_dir, work, pin_load).await?;
            (DirectBackend::Http(Box::new(s)), url)
        }
        Pair::Lean => {
            let (s, url) = procs::lean_backend(work, pin_load).await?;
            (DirectBackend::Http(Box::new(s)), url)
        }
        Pair::LeanStdio => {
            let peer = Peer::start(&stdio_command, &stdio_args, &dir.join("direct-stdio.log"))
                .await
                .context("the direct stdio backend")?;
            // With --pin-load it inherits the bench's pinning.
            (DirectBackend::Pipe(peer), String::new())
        }
    };
    let vigil_port = procs::free_port()?;
    let vigil_url = format!("http://127.0.0.1:{vigil_port}/mcp");
    let spec = match pair {
        Pair::LeanStdio => procs::BackendSpec::Stdio {
            command: &stdio_command,
            args: &stdio_args,
        },
        _ => procs::BackendSpec::Http {
            url: &backend_url,
            keep_alive: args.backend_keep_alive,
        },
    };
    let config = dir.join("vigil.toml");
    // With `--call-tool`, tool search lists the meta-tools and `demo__echo`
    // (so readiness is seen as before), and the calls go through `call_tool`.
    let tables = if args.call_tool {
        "[tool_search]\nmode = \"always_listed\"\nalways_listed = [\"demo__echo\"]\n"
    } else {
        ""
    };
    std::fs::write(
        &config,
        procs::vigil_config_for(vigil_port, 0, &spec, &args.backend_protocol, "", tables),
    )
    .with_context(|| format!("cannot write {}", config.display()))?;
    let mut vigil = Server::vigil(
        &bin_dir.join("vigil"),
        &config,
        args.pin_vigil.as_ref().map(|c| c.0.as_slice()),
        dir.join("vigil.log"),
    )?;
    load::wait_ready(
        &mut vigil,
        &vigil_url,
        "demo__echo",
        Duration::from_secs(30),
    )
    .await?;
    let vigil_backend = match (pair, vigil.pid()) {
        (Pair::LeanStdio, Some(pid)) => {
            let child = procs::only_child(pid, Duration::from_secs(5)).await?;
            // Vigil's children inherit its pinning; the backend belongs
            // with the load.
            if let Some(cpus) = pin_load {
                procs::pin_process(child, cpus)?;
            }
            Some(child)
        }
        _ => None,
    };
    Ok(PairRun {
        pair,
        backend,
        vigil,
        vigil_backend,
        direct: Target {
            kind: TargetKind::Direct,
            url: backend_url,
            tool: "echo".into(),
            tokens: Vec::new(),
        },
        via: Target {
            kind: TargetKind::Vigil,
            url: vigil_url,
            tool: "demo__echo".into(),
            tokens: Vec::new(),
        },
    })
}
