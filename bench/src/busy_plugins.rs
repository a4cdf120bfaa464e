//! `vigil-bench busy-plugins`: MCP `tools/call` latency through Vigil while
//! probe plugins that spin until their deadline run beside it, against the
//! same Vigil with no such plugin (goal: p99 within 2x the idle p99).
//!
//! One Vigil, one HTTP demo backend, one client session. The busy plugins
//! are copies of `tests/plugins/busy-loop` (twice the CPUs by default), each
//! a probe of the backend every 100 ms with a 2 s deadline: they want every
//! CPU all the time. Phases alternate idle, busy, idle, busy (ABAB per
//! round, so drift of the machine shows up in both): a phase adds or
//! removes the plugin files and waits until the control API shows them
//! loaded (and calls running) or gone.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};

use crate::load::{self, Pids, Plan, Target};
use crate::procs::{self, Server};
use crate::report::TargetKind;
use crate::stats::Latency;

#[derive(Debug, clap::Args)]
pub struct BusyArgs {
    /// The busy-loop component (`bash scripts/build-test-plugins.sh`).
    #[arg(
        long,
        value_name = "FILE",
        default_value = "target/test-plugins/busy-loop.wasm"
    )]
    wasm: PathBuf,
    /// Busy plugins (default: twice the CPUs).
    #[arg(long)]
    busy: Option<usize>,
    /// Measured seconds per phase.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Rounds of (idle, busy).
    #[arg(long, default_value_t = 2)]
    rounds: u32,
    /// Directory holding `vigil` and `vigil-demo-backend`.
    #[arg(long, value_name = "DIR")]
    bin_dir: Option<PathBuf>,
}

pub async fn run(args: &BusyArgs) -> anyhow::Result<()> {
    let wasm = std::fs::read(&args.wasm).with_context(|| {
        format!(
            "reading {} (build it with `bash scripts/build-test-plugins.sh`)",
            args.wasm.display()
        )
    })?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let busy = args.busy.unwrap_or(2 * cpus);
    let bin_dir = crate::resolve_bin_dir(args.bin_dir.as_deref())?;
    println!("vigil-bench {} busy-plugins", env!("CARGO_PKG_VERSION"));
    println!("{}", crate::machine::Machine::detect());
    println!(
        "plan: {busy} busy probe plugins (every 100 ms, 2 s deadline), {} round(s) x (idle, busy), {} s each, 1 session",
        args.rounds, args.duration
    );

    let work = procs::WorkDir::create()?;
    let dir = work.path().join("plugins");
    std::fs::create_dir_all(&dir)?;
    let (backend_port, vigil_port, api_port) = (
        procs::free_port()?,
        procs::free_port()?,
        procs::free_port()?,
    );
    let backend_url = format!("http://127.0.0.1:{backend_port}/mcp");
    let mut backend = Server::spawn(
        "vigil-demo-backend",
        &bin_dir.join("vigil-demo-backend"),
        &[
            "--transport".into(),
            "http".into(),
            "--listen".into(),
            format!("127.0.0.1:{backend_port}"),
            "--name".into(),
            "demo".into(),
        ],
        &[("RUST_LOG", "warn")],
        None,
        work.path().join("backend.log"),
    )?;
    load::wait_ready(&mut backend, &backend_url, "echo", Duration::from_secs(30)).await?;
    let names: Vec<String> = (0..busy).map(|i| format!("busy-{i}")).collect();
    let probes: Vec<String> = names
        .iter()
        .map(|n| format!("{{ plugin = \"{n}\", every = \"100ms\" }}"))
        .collect();
    let config = work.path().join("vigil.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:{vigil_port}\"\nlog_level = \"error\"\n\n[api]\nlisten = \"127.0.0.1:{api_port}\"\n\n[plugins]\ndir = \"{}\"\n\n[[backends]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{backend_url}\"\nprobes = [{}]\n",
            dir.display(),
            probes.join(", ")
        ),
    )?;
    let mut vigil = Server::vigil(
        &bin_dir.join("vigil"),
        &config,
        None,
        work.path().join("vigil.log"),
    )?;
    let vigil_url = format!("http://127.0.0.1:{vigil_port}/mcp");
    load::wait_ready(
        &mut vigil,
        &vigil_url,
        "demo__echo",
        Duration::from_secs(30),
    )
    .await?;
    let api = format!("http://127.0.0.1:{api_port}/api/v1/plugins");
    let target = Target {
        kind: TargetKind::Vigil,
        url: vigil_url,
        tool: "demo__echo".into(),
    };
    let pids = Pids {
        backend: backend.pid(),
        vigil: vigil.pid(),
    };
    let plan = Plan {
        sessions: 1,
        warmup: Duration::from_secs(1),
        duration: Duration::from_secs_f64(args.duration),
        payload: "x".repeat(64),
        keep_alive: false,
    };

    let (mut idle, mut loaded) = (Vec::new(), Vec::new());
    for round in 1..=args.rounds {
        for busy_phase in [false, true] {
            set_busy(&dir, &names, busy_phase.then_some(&wasm[..]))?;
            wait_plugins(&api, &names, busy_phase).await?;
            vigil.check_alive()?;
            let s = load::run_target(&target, &plan, &pids).await?;
            if s.errors > 0 {
                bail!(
                    "{} failed calls in round {round} ({}): {:?}",
                    s.errors,
                    phase(busy_phase),
                    s.first_error
                );
            }
            let mut ns = s.latencies_ns.clone();
            ns.sort_unstable();
            let l = Latency::of(&ns);
            println!(
                "round {round} {:>4}: {} calls, p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs, Vigil CPU {:.0}%",
                phase(busy_phase),
                s.completed,
                l.p50,
                l.p99,
                l.max,
                s.cpu_vigil * 100.0 / s.window.as_secs_f64()
            );
            if busy_phase { &mut loaded } else { &mut idle }.extend(ns);
        }
    }
    idle.sort_unstable();
    loaded.sort_unstable();
    let (i, b) = (Latency::of(&idle), Latency::of(&loaded));
    println!();
    println!("| tools/call through Vigil, 1 session | idle | {busy} busy plugins | busy / idle |");
    println!("|---|---:|---:|---:|");
    println!(
        "| p50 | {:.0} µs | {:.0} µs | {:.2}x |",
        i.p50,
        b.p50,
        b.p50 / i.p50
    );
    println!(
        "| p99 | {:.0} µs | {:.0} µs | {:.2}x |",
        i.p99,
        b.p99,
        b.p99 / i.p99
    );
    println!(
        "| max | {:.0} µs | {:.0} µs | {:.2}x |",
        i.max,
        b.max,
        b.max / i.max
    );
    println!(
        "goal: busy p99 within 2x the idle p99: {}",
        if b.p99 <= 2.0 * i.p99 {
            "met"
        } else {
            "NOT met"
        }
    );
    vigil.stop().await;
    backend.stop().await;
    Ok(())
}

fn phase(busy: bool) -> &'static str {
    if busy { "busy" } else { "idle" }
}

/// Writes (or removes) the busy plugins' files.
fn set_busy(dir: &Path, names: &[String], wasm: Option<&[u8]>) -> anyhow::Result<()> {
    for n in names {
        let file = dir.join(format!("{n}.wasm"));
        match wasm {
            Some(bytes) => {
                std::fs::write(
                    dir.join(format!("{n}.toml")),
                    "[limits]\ndeadline = \"2s\"\nfailures = 1000000\n",
                )?;
                std::fs::write(&file, bytes)?;
            }
            None => {
                let _ = std::fs::remove_file(&file);
            }
        }
    }
    Ok(())
}

/// Waits until the API shows every busy plugin calling (or none loaded).
async fn wait_plugins(api: &str, names: &[String], busy: bool) -> anyhow::Result<()> {
    let client = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let body: serde_json::Value =
            serde_json::from_str(&client.get(api).send().await?.text().await?)?;
        let plugins = body["plugins"].as_array().cloned().unwrap_or_default();
        let calling = |n: &String| {
            plugins.iter().any(|p| {
                p["name"] == n.as_str() && p["state"] == "active" && p["calls"].as_u64() > Some(0)
            })
        };
        let done = if busy {
            names.iter().all(calling)
        } else {
            !plugins
                .iter()
                .any(|p| names.iter().any(|n| p["name"] == n.as_str()))
        };
        if done {
            // Let the calls in flight of a removed plugin end.
            tokio::time::sleep(Duration::from_secs(if busy { 0 } else { 3 })).await;
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!(
                "the busy plugins were not {} within 60 s",
                if busy {
                    "loaded and calling"
                } else {
                    "unloaded"
                }
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
