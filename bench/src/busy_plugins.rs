//! `vigil-bench busy-plugins`: MCP `tools/call` latency through Vigil while
//! probe plugins that spin until their deadline run beside it, against the
//! same Vigil with no such plugin (goal: p99 within 2x the idle p99).
//!
//! One Vigil, one HTTP demo backend, one client session. The busy plugins
//! are copies of `tests/plugins/busy-loop` (twice the CPUs by default), each
//! probing a backend entry of its own (the same demo server) every 100 ms
//! with a 2 s deadline: they want every CPU all the time. Each round runs
//! three phases, idle, floor and busy (so drift of the machine shows up in
//! each). The floor phase has no plugin but as many threads of the bench
//! spinning under `SCHED_IDLE` as Vigil has plugin threads: what any
//! CPU-bound neighbour at the lowest priority costs on this machine, the
//! least busy plugins can cost. A phase adds or removes the plugin files and
//! waits until the control API shows them
//! loaded (and calls running) or gone. With `--baseline-bin-dir`, each
//! round measures another build the same way first (same backend; each
//! build's Vigil runs only during its own phases); failed calls and
//! sessions that could not open are counted and reported, not fatal (an
//! old build may fail them).

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
    /// Each check spins this long and answers healthy (default: spins until
    /// its deadline, a failure each time).
    #[arg(long, value_name = "MS")]
    spin_ms: Option<u64>,
    /// `[plugins] threads` for the Vigil of `--bin-dir` (default: Vigil's).
    #[arg(long, value_name = "N")]
    plugin_threads: Option<usize>,
    /// Another build's directory (an older `vigil`) measured the same way in
    /// the same run, round by round, for an old-vs-new comparison.
    #[arg(long, value_name = "DIR")]
    baseline_bin_dir: Option<PathBuf>,
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
    let mut builds = vec![("new", bin_dir.clone())];
    if let Some(old) = &args.baseline_bin_dir {
        builds.insert(0, ("old", crate::resolve_bin_dir(Some(old))?));
    }
    println!("vigil-bench {} busy-plugins", env!("CARGO_PKG_VERSION"));
    println!("{}", crate::machine::Machine::detect());
    println!(
        "plan: {busy} busy probe plugins (every 100 ms, 2 s deadline), {} round(s) x (idle, busy) per build, {} s each, 1 session",
        args.rounds, args.duration
    );
    for (label, dir) in &builds {
        println!("{label}: {}", dir.display());
    }

    let work = procs::WorkDir::create()?;
    let (backend, backend_url) = procs::demo_backend(&bin_dir, &work).await?;
    let names: Vec<String> = (0..busy).map(|i| format!("busy-{i}")).collect();
    let plan = Plan {
        sessions: 1,
        warmup: Duration::from_secs(1),
        duration: Duration::from_secs_f64(args.duration),
        payload: "x".repeat(64),
        keep_alive: false,
    };
    let mut results: Vec<Build> = builds
        .iter()
        .map(|(label, _)| Build {
            label,
            idle: Phase::default(),
            floor: Phase::default(),
            busy: Phase::default(),
        })
        .collect();
    // The floor: what any CPU-bound neighbour at the lowest priority costs
    // on this machine, as many spinning threads as Vigil has plugin threads.
    let spinners = args.plugin_threads.unwrap_or_else(|| cpus.min(4));

    // Each build's Vigil runs only during its own phases, so one build's
    // plugins (or an old build stuck on them) never load the other's.
    for round in 1..=args.rounds {
        for ((label, dir), build) in builds.iter().zip(&mut results) {
            let at = work.path().join(format!("{label}-{round}"));
            let threads = if *label == "new" {
                args.plugin_threads
            } else {
                None
            };
            let mut rig = Rig::start(dir, &at, &backend_url, &backend, &names, threads).await?;
            for stage in [Stage::Idle, Stage::Floor, Stage::Busy] {
                let busy_phase = stage == Stage::Busy;
                set_busy(
                    &rig.plugins,
                    &names,
                    busy_phase.then_some(&wasm[..]),
                    args.spin_ms,
                )?;
                wait_plugins(&rig.api, &names, busy_phase).await?;
                rig.vigil.check_alive()?;
                let _spinning = (stage == Stage::Floor).then(|| Spinners::start(spinners));
                let into = match stage {
                    Stage::Idle => &mut build.idle,
                    Stage::Floor => &mut build.floor,
                    Stage::Busy => &mut build.busy,
                };
                let head = format!("round {round} {label} {:>5}", stage.name());
                match load::run_target(&rig.target, &plan, &rig.pids).await {
                    Ok(s) => {
                        let mut ns = s.latencies_ns.clone();
                        ns.sort_unstable();
                        let l = Latency::of(&ns);
                        println!(
                            "{head}: {} calls, {} failed, p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs, Vigil CPU {:.0}%",
                            s.completed,
                            s.errors,
                            l.p50,
                            l.p99,
                            l.max,
                            s.cpu_vigil * 100.0 / s.window.as_secs_f64()
                        );
                        if let Some(e) = &s.first_error {
                            println!("  first failure: {e}");
                        }
                        into.latencies.extend(ns);
                        into.completed += s.completed;
                        into.errors += s.errors;
                    }
                    // An old build may not even open the session.
                    Err(e) => {
                        println!("{head}: no session: {e:#}");
                        into.errors += 1;
                    }
                }
            }
            rig.vigil.stop().await;
        }
    }

    println!();
    println!(
        "| tools/call through Vigil, 1 session | idle | floor: {spinners} spinning threads | {busy} busy plugins | busy / idle | busy / floor |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for rig in &mut results {
        let (i, f, b) = (rig.idle.latency(), rig.floor.latency(), rig.busy.latency());
        // A phase without a completed call has no latency to show.
        let none = [&rig.idle, &rig.floor, &rig.busy].map(|p| p.latencies.is_empty());
        let us = |v: f64, empty: bool| {
            if empty {
                "-".to_owned()
            } else {
                format!("{v:.0} µs")
            }
        };
        let ratio = |a: f64, b: f64, empty: bool| {
            if empty {
                "-".to_owned()
            } else {
                format!("{:.2}x", a / b)
            }
        };
        let row = |what: &str, i: f64, f: f64, b: f64| {
            println!(
                "| {}: {what} | {} | {} | {} | {} | {} |",
                rig.label,
                us(i, none[0]),
                us(f, none[1]),
                us(b, none[2]),
                ratio(b, i, none[2] || none[0]),
                ratio(b, f, none[2] || none[1]),
            )
        };
        row("p50", i.p50, f.p50, b.p50);
        row("p99", i.p99, f.p99, b.p99);
        row("max", i.max, f.max, b.max);
        println!(
            "| {}: calls completed / failed | {} / {} | {} / {} | {} / {} | {:.2}x | {:.2}x |",
            rig.label,
            rig.idle.completed,
            rig.idle.errors,
            rig.floor.completed,
            rig.floor.errors,
            rig.busy.completed,
            rig.busy.errors,
            rig.busy.completed as f64 / rig.idle.completed.max(1) as f64,
            rig.busy.completed as f64 / rig.floor.completed.max(1) as f64
        );
    }
    for rig in &mut results {
        let (i, b) = (rig.idle.latency(), rig.busy.latency());
        println!(
            "{}: goal (no failed call, busy p99 within 2x the idle p99): {}",
            rig.label,
            if rig.busy.errors == 0 && b.p99 <= 2.0 * i.p99 {
                "met"
            } else {
                "NOT met"
            }
        );
    }
    backend.stop().await;
    Ok(())
}

/// What one build's phases measured, over all rounds.
struct Build {
    label: &'static str,
    idle: Phase,
    floor: Phase,
    busy: Phase,
}

/// What runs beside Vigil in a phase.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Nothing.
    Idle,
    /// Threads of this bench spinning under `SCHED_IDLE`, no plugin.
    Floor,
    /// The busy plugins.
    Busy,
}

impl Stage {
    fn name(self) -> &'static str {
        match self {
            Stage::Idle => "idle",
            Stage::Floor => "floor",
            Stage::Busy => "busy",
        }
    }
}

/// Threads spinning at the lowest priority until dropped.
struct Spinners {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Spinners {
    fn start(n: usize) -> Self {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    #[cfg(target_os = "linux")]
                    {
                        let param = libc::sched_param { sched_priority: 0 };
                        // SAFETY: changes only the calling thread's policy;
                        // reads `param`, a valid local.
                        unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
                    }
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        n = std::hint::black_box(n.wrapping_add(1));
                    }
                })
            })
            .collect();
        Self { stop, threads }
    }
}

impl Drop for Spinners {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// One build's Vigil in front of the shared backend, and its plugin
/// directory.
struct Rig {
    vigil: Server,
    plugins: PathBuf,
    api: String,
    target: Target,
    pids: Pids,
}

#[derive(Default)]
struct Phase {
    latencies: Vec<u64>,
    completed: u64,
    errors: u64,
}

impl Phase {
    fn latency(&mut self) -> Latency {
        self.latencies.sort_unstable();
        Latency::of(&self.latencies)
    }
}

impl Rig {
    /// Starts `bin_dir`'s Vigil with its files under `work`.
    async fn start(
        bin_dir: &Path,
        work: &Path,
        backend_url: &str,
        backend: &Server,
        names: &[String],
        threads: Option<usize>,
    ) -> anyhow::Result<Self> {
        let plugins = work.join("plugins");
        std::fs::create_dir_all(&plugins)?;
        let (vigil_port, api_port) = (procs::free_port()?, procs::free_port()?);
        // Each busy plugin probes a backend of its own (all the same demo
        // server), as on a gateway with several backends: their calls run
        // at the same time, not one after another in one supervisor.
        let mut config = format!(
            "listen = \"127.0.0.1:{vigil_port}\"\nlog_level = \"error\"\n\n[api]\nlisten = \"127.0.0.1:{api_port}\"\n\n[plugins]\ndir = \"{}\"\n{}\n[[backends]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{backend_url}\"\n",
            plugins.display(),
            threads
                .map(|n| format!("threads = {n}\n"))
                .unwrap_or_default()
        );
        for (i, n) in names.iter().enumerate() {
            config.push_str(&format!(
                "\n[[backends]]\nname = \"probed-{i}\"\ntransport = \"http\"\nurl = \"{backend_url}\"\nprobes = [{{ plugin = \"{n}\", every = \"100ms\" }}]\n"
            ));
        }
        let file = work.join("vigil.toml");
        std::fs::write(&file, config)?;
        let mut vigil = Server::vigil(&bin_dir.join("vigil"), &file, None, work.join("vigil.log"))?;
        let url = format!("http://127.0.0.1:{vigil_port}/mcp");
        load::wait_ready(&mut vigil, &url, "demo__echo", Duration::from_secs(30)).await?;
        let pids = Pids {
            backend: backend.pid(),
            vigil: vigil.pid(),
        };
        Ok(Self {
            vigil,
            plugins,
            api: format!("http://127.0.0.1:{api_port}/api/v1/plugins"),
            target: Target {
                kind: TargetKind::Vigil,
                url,
                tool: "demo__echo".into(),
                tokens: Vec::new(),
            },
            pids,
        })
    }
}

/// Writes (or removes) the busy plugins' files.
fn set_busy(
    dir: &Path,
    names: &[String],
    wasm: Option<&[u8]>,
    spin_ms: Option<u64>,
) -> anyhow::Result<()> {
    for n in names {
        let file = dir.join(format!("{n}.wasm"));
        match wasm {
            Some(bytes) => {
                let spin = spin_ms
                    .map(|ms| format!("[config]\nspin_ms = \"{ms}\"\n"))
                    .unwrap_or_default();
                std::fs::write(
                    dir.join(format!("{n}.toml")),
                    format!("[limits]\ndeadline = \"2s\"\nfailures = 1000000\n{spin}"),
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
    // An old build's API may stall while busy plugins hold its threads:
    // ask again until the deadline.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let body: serde_json::Value = match client.get(api).send().await {
            Ok(r) => serde_json::from_str(&r.text().await.unwrap_or_default()).unwrap_or_default(),
            Err(_) => serde_json::Value::Null,
        };
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
