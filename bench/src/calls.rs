//! `vigil-bench [calls]`: `tools/call echo` directly and through Vigil,
//! with two client/backend pairs.
//!
//! - **rmcp**: rmcp's streamable HTTP client against the demo backend (an
//!   rmcp server), the pair of the earlier figures;
//! - **lean**: the bench's own client against its own backend (`lean/`),
//!   which cost tens of µs per call, so Vigil's cost is not hidden behind
//!   theirs.
//!
//! Each pair has its own backend process and its own Vigil (one HTTP
//! backend `demo`, so the tool is `demo__echo` either way, and each Vigil's
//! CPU is that pair's alone). All four run for the whole bench; for each
//! session count, each pair runs its rounds in ABBA order (direct, vigil,
//! then vigil, direct, ...) before the next pair.

use std::time::Duration;

use anyhow::{Context as _, bail};

use crate::load::{self, Pids, Plan, Target};
use crate::procs::{self, Server};
use crate::report::{self, Measurement, Pair, TargetKind};
use crate::{Args, lean, machine};

/// One pair's processes and targets.
struct PairRun {
    pair: Pair,
    backend: Server,
    vigil: Server,
    direct: Target,
    via: Target,
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
                "pair lean: the bench's lean client (one kept-alive connection per session) against `vigil-bench lean-backend` (one thread)"
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
            "gateway: {v}, one Vigil per pair with one HTTP backend `demo`, log_level = warn, backend keep_alive = {}, protocol = {}",
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
            let pids = Pids {
                backend: run.backend.pid(),
                vigil: run.vigil.pid(),
            };
            for round in 1..=args.rounds {
                let order = if round % 2 == 1 {
                    [&run.direct, &run.via]
                } else {
                    [&run.via, &run.direct]
                };
                for target in order {
                    run.backend.check_alive()?;
                    run.vigil.check_alive()?;
                    let sample = match run.pair {
                        Pair::Rmcp => load::run_target(target, &plan, &pids).await,
                        Pair::Lean => lean::load::run_target(target, &plan, &pids).await,
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
    let (backend, backend_url) = match pair {
        Pair::Rmcp => procs::demo_backend_pinned(bin_dir, work, pin_load).await?,
        Pair::Lean => procs::lean_backend(work, pin_load).await?,
    };
    let vigil_port = procs::free_port()?;
    let vigil_url = format!("http://127.0.0.1:{vigil_port}/mcp");
    // A directory per Vigil: its data dir is beside its config.
    let dir = work.path().join(pair.to_string());
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let config = dir.join("vigil.toml");
    std::fs::write(
        &config,
        procs::vigil_config(
            vigil_port,
            &backend_url,
            args.backend_keep_alive,
            &args.backend_protocol,
            "",
            "",
        ),
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
    Ok(PairRun {
        pair,
        backend,
        vigil,
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
