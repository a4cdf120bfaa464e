//! `vigil-bench probes`: what health-probe fan-out costs. One Vigil
//! monitors N HTTP backends, all served by one `vigil-demo-backend
//! --endpoints N` process (`/mcp/0` ... `/mcp/{N-1}`, each its own MCP
//! service with its own sessions), probing each every `--interval`.
//!
//! For each N, two phases, each with a fresh backend process and a fresh
//! Vigil (own data dir): **probing** (`[health] interval = --interval`) and
//! the **idle baseline** (`interval = "1h"`: the same connections, no probes
//! in the window). Each phase waits until the control API reports every
//! instance `running`, lets the start-up settle, then for `--duration`
//! seconds samples `GET /api/v1/health/instances` once a second (every
//! instance's state and `latency_ms`, the round trip of its last probe) and
//! reads the CPU time of Vigil, the backend, this bench and the whole
//! machine from `/proc`. The API sampling is the same in both phases, so it
//! cancels out of the difference (the probing share).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::machine::{self, CpuTimes, Machine};
use crate::procs::{self, Server};
use crate::stats::percentile;
use crate::{load, resolve_bin_dir};

/// Goal: Vigil probing 1,000 backends every second uses under this share of
/// one CPU core.
pub const GOAL_VIGIL_CORE_SHARE: f64 = 0.10;

/// Interval of the idle baseline: long enough that no probe falls in the
/// window.
const IDLE_INTERVAL: &str = "1h";

/// Benchmark health-probe fan-out: one Vigil probing many HTTP backends.
#[derive(Debug, clap::Args)]
pub struct ProbeArgs {
    /// Backends Vigil monitors. Comma-separate for a sweep, e.g.
    /// `--backends 100,1000`; each count gets its own processes.
    #[arg(long, value_delimiter = ',', default_value = "1000", value_parser = clap::value_parser!(u32).range(1..=20_000))]
    backends: Vec<u32>,

    /// Probe interval (`[health] interval` in Vigil's config).
    #[arg(long, default_value = "1s", value_parser = parse_duration_literal)]
    interval: String,

    /// Probe timeout (`[health] timeout`).
    #[arg(long, default_value = "500ms", value_parser = parse_duration_literal)]
    timeout: String,

    /// Measured seconds per phase.
    #[arg(long, default_value_t = 60.0, value_name = "SECS")]
    duration: f64,

    /// Measured seconds of the idle baseline (interval = 1h); default
    /// `--duration`; 0 skips the baseline.
    #[arg(long, value_name = "SECS")]
    baseline_duration: Option<f64>,

    /// Seconds to wait after every instance is `running` before measuring
    /// (the start-up burst of handshakes and listings dies down, the first
    /// probes are due).
    #[arg(long, default_value_t = 5.0, value_name = "SECS")]
    settle: f64,

    /// Longest wait for every instance to be `running`.
    #[arg(long, default_value_t = 180.0, value_name = "SECS")]
    ready_timeout: f64,

    /// `keep_alive = true` on every backend: Vigil reuses HTTP connections
    /// to the backends (default: a new TCP connection per request).
    #[arg(long)]
    keep_alive: bool,

    /// Directory holding the `vigil` and `vigil-demo-backend` binaries.
    /// Default: `${CARGO_TARGET_DIR:-target}/release`, else the directory of
    /// this binary.
    #[arg(long, value_name = "DIR")]
    bin_dir: Option<PathBuf>,

    /// Keep the configs and logs of every phase in this directory (default:
    /// a scratch directory, removed at the end).
    #[arg(long, value_name = "DIR")]
    log_dir: Option<PathBuf>,

    /// Also write the results as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

/// Accepts what is safe to paste into the TOML config: digits and a unit.
pub(crate) fn parse_duration_literal(s: &str) -> Result<String, String> {
    let digits = s.chars().take_while(char::is_ascii_digit).count();
    let unit = &s[digits..];
    if digits == 0 || !matches!(unit, "ms" | "s" | "m" | "h") {
        return Err(format!("`{s}` is not a duration like 500ms, 1s, 5m, 1h"));
    }
    Ok(s.to_owned())
}

/// Seconds of a literal accepted by [`parse_duration_literal`].
pub(crate) fn literal_secs(s: &str) -> f64 {
    let digits = s.chars().take_while(char::is_ascii_digit).count();
    let n: f64 = s[..digits].parse().unwrap_or(0.0);
    match &s[digits..] {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => 0.0,
    }
}

/// One measured phase: N backends at one interval.
#[derive(Debug, Clone)]
struct Phase {
    backends: u32,
    interval: String,
    /// Seconds from `vigil serve` until every instance was `running`.
    startup_s: f64,
    window_s: f64,
    /// CPU seconds in the window.
    cpu_vigil: f64,
    cpu_backend: f64,
    cpu_bench: f64,
    machine_busy: f64,
    other_cores: f64,
    vigil_rss_mib: f64,
    vigil_peak_rss_mib: f64,
    vigil_threads: u64,
    vigil_fds: u64,
    backend_rss_mib: f64,
    /// API samples taken and how long the slowest took.
    samples: u32,
    failed_samples: u32,
    slowest_sample_ms: f64,
    /// Every `latency_ms` read, in ns, sorted.
    latencies_ns: Vec<u64>,
    /// Instance observations without a latency yet.
    no_latency: u64,
    /// Distinct instances not `running` in at least one sample.
    not_running_instances: usize,
    /// Observations (instance × sample) not `running`.
    not_running_observations: u64,
    /// State → observations, for everything not `running`.
    other_states: BTreeMap<String, u64>,
    /// WARN/ERROR lines in Vigil's log over the whole phase, and the first few.
    log_problems: u64,
    log_examples: Vec<String>,
}

impl Phase {
    fn vigil_core_share(&self) -> f64 {
        self.cpu_vigil / self.window_s
    }
    fn backend_core_share(&self) -> f64 {
        self.cpu_backend / self.window_s
    }
    fn latency_ms(&self, q: f64) -> Option<f64> {
        if self.latencies_ns.is_empty() {
            return None;
        }
        Some(percentile(&self.latencies_ns, q) as f64 / 1e6)
    }
    fn max_latency_ms(&self) -> Option<f64> {
        self.latencies_ns.last().map(|&n| n as f64 / 1e6)
    }

    fn line(&self) -> String {
        let l = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.2}"));
        format!(
            "{:>5} backends, interval {:>4}: up in {:>5.1}s | CPU vigil {:>5.1}% backend {:>5.1}% of a core | vigil RSS {:.0} MiB, {} threads, {} fds | probe ms p50 {} p90 {} p99 {} max {} ({} readings) | not running {} inst / {} obs | busy {:.0}% (others {:.2} CPUs){}",
            self.backends,
            self.interval,
            self.startup_s,
            self.vigil_core_share() * 100.0,
            self.backend_core_share() * 100.0,
            self.vigil_rss_mib,
            self.vigil_threads,
            self.vigil_fds,
            l(self.latency_ms(0.50)),
            l(self.latency_ms(0.90)),
            l(self.latency_ms(0.99)),
            l(self.max_latency_ms()),
            self.latencies_ns.len(),
            self.not_running_instances,
            self.not_running_observations,
            self.machine_busy * 100.0,
            self.other_cores,
            if self.failed_samples > 0 {
                format!(" | {} API samples failed", self.failed_samples)
            } else {
                String::new()
            },
        )
    }

    fn json(&self) -> Value {
        json!({
            "backends": self.backends,
            "interval": self.interval,
            "startup_s": self.startup_s,
            "window_s": self.window_s,
            "cpu_s": { "vigil": self.cpu_vigil, "backend": self.cpu_backend, "bench": self.cpu_bench },
            "vigil_core_share": self.vigil_core_share(),
            "backend_core_share": self.backend_core_share(),
            "machine_busy": self.machine_busy,
            "other_processes_cores": self.other_cores,
            "vigil": {
                "rss_mib": self.vigil_rss_mib,
                "peak_rss_mib": self.vigil_peak_rss_mib,
                "threads": self.vigil_threads,
                "fds": self.vigil_fds,
            },
            "backend_rss_mib": self.backend_rss_mib,
            "api_samples": self.samples,
            "api_samples_failed": self.failed_samples,
            "slowest_api_sample_ms": self.slowest_sample_ms,
            "probe_latency_ms": {
                "readings": self.latencies_ns.len(),
                "p50": self.latency_ms(0.50),
                "p90": self.latency_ms(0.90),
                "p99": self.latency_ms(0.99),
                "max": self.max_latency_ms(),
            },
            "readings_without_latency": self.no_latency,
            "not_running_instances": self.not_running_instances,
            "not_running_observations": self.not_running_observations,
            "other_states": self.other_states,
            "vigil_log_warnings_and_errors": self.log_problems,
        })
    }
}

/// The probing phase of a count and its idle baseline.
struct CountResult {
    probing: Phase,
    idle: Option<Phase>,
}

impl CountResult {
    /// Probes per second Vigil was asked to run.
    fn probes_per_s(&self) -> f64 {
        let every = literal_secs(&self.probing.interval);
        if every > 0.0 {
            self.probing.backends as f64 / every
        } else {
            0.0
        }
    }
    /// CPU share of the probing itself (probing minus idle), Vigil and backend.
    fn probing_share(&self) -> Option<(f64, f64)> {
        let idle = self.idle.as_ref()?;
        Some((
            self.probing.vigil_core_share() - idle.vigil_core_share(),
            self.probing.backend_core_share() - idle.backend_core_share(),
        ))
    }
}

pub async fn run(args: &ProbeArgs) -> anyhow::Result<()> {
    let baseline = args.baseline_duration.unwrap_or(args.duration);
    if !args.duration.is_finite()
        || args.duration < 1.0
        || !baseline.is_finite()
        || (baseline != 0.0 && baseline < 1.0)
        || !args.settle.is_finite()
        || args.settle < 0.0
        || !args.ready_timeout.is_finite()
        || args.ready_timeout <= 0.0
    {
        bail!(
            "--duration must be >= 1, --baseline-duration 0 or >= 1, --settle >= 0, --ready-timeout > 0"
        );
    }
    if literal_secs(&args.timeout) > literal_secs(&args.interval) {
        bail!("--timeout must not exceed --interval (Vigil refuses it)");
    }
    let bin_dir = resolve_bin_dir(args.bin_dir.as_deref())?;
    let bins = Bins {
        vigil: bin_dir.join("vigil"),
        backend: bin_dir.join("vigil-demo-backend"),
    };

    let machine = Machine::detect();
    println!("vigil-bench {} probes", env!("CARGO_PKG_VERSION"));
    println!("{machine}");
    println!(
        "plan: backends {:?}; per count a probing phase (interval {}, timeout {}) and {}; {}s settle + {}s measured, API sampled every 1s; Vigil backend HTTP {}",
        args.backends,
        args.interval,
        args.timeout,
        if baseline > 0.0 {
            format!("an idle baseline (interval {IDLE_INTERVAL}, {baseline}s measured)")
        } else {
            "no idle baseline".to_owned()
        },
        args.settle,
        args.duration,
        if args.keep_alive {
            "keep-alive"
        } else {
            "new connection per request (default)"
        },
    );
    if let Some(v) = procs::version(&bins.vigil).await {
        println!(
            "gateway: {v}, log_level = warn, one vigil-demo-backend process serving /mcp/0 ... /mcp/N-1"
        );
    }
    println!();

    let (dir, _scratch) = procs::log_dir(args.log_dir.as_deref())?;

    let mut results = Vec::new();
    for &n in &args.backends {
        let probing = run_phase(args, &bins, &dir, n, &args.interval, args.duration)
            .await
            .with_context(|| format!("{n} backends, interval {}", args.interval))?;
        println!("{}", probing.line());
        let idle = if baseline > 0.0 {
            let p = run_phase(args, &bins, &dir, n, IDLE_INTERVAL, baseline)
                .await
                .with_context(|| format!("{n} backends, interval {IDLE_INTERVAL}"))?;
            println!("{}", p.line());
            Some(p)
        } else {
            None
        };
        for p in std::iter::once(&probing).chain(idle.as_ref()) {
            if p.log_problems > 0 {
                println!(
                    "  vigil logged {} warning/error line(s) ({} backends, interval {}), e.g.:",
                    p.log_problems, p.backends, p.interval
                );
                for l in &p.log_examples {
                    println!("    {l}");
                }
            }
        }
        results.push(CountResult { probing, idle });
    }
    println!();
    println!("{}", table(&results));
    println!("{}", summary(&results));

    if let Some(path) = &args.json {
        let doc = json!({
            "machine": machine,
            "plan": {
                "backends": args.backends,
                "interval": args.interval,
                "timeout": args.timeout,
                "duration_s": args.duration,
                "baseline_duration_s": baseline,
                "settle_s": args.settle,
                "keep_alive": args.keep_alive,
            },
            "goal": { "vigil_core_share_max": GOAL_VIGIL_CORE_SHARE, "at_backends": 1000, "at_interval": "1s" },
            "results": results.iter().map(|r| json!({
                "backends": r.probing.backends,
                "probes_per_s": r.probes_per_s(),
                "probing": r.probing.json(),
                "idle": r.idle.as_ref().map(Phase::json),
                "probing_share": r.probing_share().map(|(v, b)| json!({ "vigil": v, "backend": b })),
            })).collect::<Vec<_>>(),
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
        println!("results written to {}", path.display());
    }
    Ok(())
}

struct Bins {
    vigil: PathBuf,
    backend: PathBuf,
}

/// `dir`, emptied (or made).
pub(crate) fn fresh_dir(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("cannot clear {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))
}

/// One demo backend process serving `n` MCP endpoints (`/mcp/0` ...) on a
/// free port, once its last endpoint answers (which proves the option took
/// effect); its log is `dir/backend.log`.
pub(crate) async fn many_endpoints(
    bin: &Path,
    n: u32,
    dir: &Path,
) -> anyhow::Result<(Server, u16)> {
    let port = procs::free_port()?;
    let mut backend = Server::spawn(
        "vigil-demo-backend",
        bin,
        &[
            "--transport".into(),
            "http".into(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--endpoints".into(),
            n.to_string(),
        ],
        &[("RUST_LOG", "warn")],
        None,
        dir.join("backend.log"),
    )?;
    load::wait_ready(
        &mut backend,
        &format!("http://127.0.0.1:{port}/mcp/{}", n - 1),
        "echo",
        Duration::from_secs(30),
    )
    .await?;
    Ok((backend, port))
}

/// Starts a backend process and a Vigil for `n` backends at `interval`,
/// waits for all of them to be running, measures, stops both.
async fn run_phase(
    args: &ProbeArgs,
    bins: &Bins,
    dir: &Path,
    n: u32,
    interval: &str,
    duration: f64,
) -> anyhow::Result<Phase> {
    let phase_dir = dir.join(format!("n{n}-{interval}"));
    // A fresh data dir: nothing restored from an earlier phase.
    fresh_dir(&phase_dir)?;
    let (mut backend, backend_port) = many_endpoints(&bins.backend, n, &phase_dir).await?;

    let vigil_port = procs::free_port()?;
    let api_port = procs::free_port()?;
    let config = phase_dir.join("vigil.toml");
    std::fs::write(
        &config,
        vigil_config(
            n,
            backend_port,
            vigil_port,
            api_port,
            interval,
            &args.timeout,
            args.keep_alive,
        ),
    )
    .with_context(|| format!("cannot write {}", config.display()))?;
    let vigil_log = phase_dir.join("vigil.log");
    let launched = Instant::now();
    let mut vigil = Server::vigil(&bins.vigil, &config, None, vigil_log.clone())?;
    let api = Api::new(api_port)?;
    wait_all_running(
        &api,
        &mut vigil,
        &mut backend,
        n,
        Duration::from_secs_f64(args.ready_timeout),
    )
    .await
    .with_context(|| match &args.log_dir {
        Some(_) => format!("Vigil's log is {}", vigil_log.display()),
        None => "run again with --log-dir DIR to keep Vigil's log".to_owned(),
    })?;
    let startup_s = launched.elapsed().as_secs_f64();

    let settle_end = Instant::now() + Duration::from_secs_f64(args.settle);
    while Instant::now() < settle_end {
        vigil.check_alive()?;
        backend.check_alive()?;
        tokio::time::sleep(Duration::from_millis(500).min(settle_end - Instant::now())).await;
    }

    let (vigil_pid, backend_pid) = (vigil.pid(), backend.pid());
    let mut phase = measure(&api, n, interval, duration, vigil_pid, backend_pid).await;
    phase.startup_s = startup_s;
    if let Some(pid) = vigil_pid {
        let status = proc_status(pid);
        phase.vigil_rss_mib = status.rss_mib;
        phase.vigil_peak_rss_mib = status.peak_rss_mib;
        phase.vigil_threads = status.threads;
        phase.vigil_fds = count_fds(pid);
    }
    if let Some(pid) = backend_pid {
        phase.backend_rss_mib = proc_status(pid).rss_mib;
    }
    vigil.check_alive()?;
    backend.check_alive()?;
    vigil.stop().await;
    backend.stop().await;
    let (count, examples) = log_problems(&vigil_log);
    phase.log_problems = count;
    phase.log_examples = examples;
    Ok(phase)
}

fn vigil_config(
    n: u32,
    backend_port: u16,
    vigil_port: u16,
    api_port: u16,
    interval: &str,
    timeout: &str,
    keep_alive: bool,
) -> String {
    let mut s = format!(
        "listen = \"127.0.0.1:{vigil_port}\"\nlog_level = \"warn\"\nstartup_timeout = \"60s\"\n\n\
         [health]\ninterval = \"{interval}\"\ntimeout = \"{timeout}\"\n\n\
         [api]\nlisten = \"127.0.0.1:{api_port}\"\n"
    );
    for i in 0..n {
        s.push_str(&format!(
            "\n[[backends]]\nname = \"b{i}\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:{backend_port}/mcp/{i}\"\n"
        ));
        if keep_alive {
            s.push_str("keep_alive = true\n");
        }
    }
    s
}

/// The control API, for the instances' states and probe latencies.
pub(crate) struct Api {
    client: reqwest::Client,
    url: String,
}

/// What one instance report says, as far as this bench cares.
pub(crate) struct Reading {
    pub(crate) name: String,
    pub(crate) state: String,
    latency_ms: Option<f64>,
}

impl Api {
    pub(crate) fn new(port: u16) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(5))
            .build()
            .context("cannot build the HTTP client")?;
        Ok(Self {
            client,
            url: format!("http://127.0.0.1:{port}/api/v1/health/instances"),
        })
    }

    pub(crate) async fn instances(&self) -> anyhow::Result<Vec<Reading>> {
        let answer = self.client.get(&self.url).send().await?;
        let status = answer.status();
        let body = answer.text().await?;
        if !status.is_success() {
            bail!("{} answered {status}: {body}", self.url);
        }
        let doc: Value = serde_json::from_str(&body)
            .with_context(|| format!("{} did not answer JSON", self.url))?;
        let list = doc["instances"]
            .as_array()
            .ok_or_else(|| anyhow!("{} answered without `instances`", self.url))?;
        Ok(list
            .iter()
            .map(|i| Reading {
                name: i["name"].as_str().unwrap_or_default().to_owned(),
                state: i["state"].as_str().unwrap_or_default().to_owned(),
                latency_ms: i["latency_ms"].as_f64(),
            })
            .collect())
    }
}

/// Polls the API until all `n` instances are `running`, either process
/// exits, or `within` passes (then it says which states are left).
pub(crate) async fn wait_all_running(
    api: &Api,
    vigil: &mut Server,
    backend: &mut Server,
    n: u32,
    within: Duration,
) -> anyhow::Result<()> {
    let start = Instant::now();
    let deadline = start + within;
    let mut last_report = start;
    loop {
        vigil.check_alive()?;
        backend.check_alive()?;
        let counts = api.instances().await.map(|list| {
            let mut counts = BTreeMap::new();
            for r in &list {
                *counts.entry(r.state.clone()).or_insert(0usize) += 1;
            }
            counts
        });
        if let Ok(c) = &counts
            && c.get("running").copied().unwrap_or(0) == n as usize
            && c.len() == 1
        {
            return Ok(());
        }
        if last_report.elapsed() >= Duration::from_secs(10)
            && let Ok(c) = &counts
        {
            println!(
                "  waiting for {n} backends to be running ({:.0}s): {c:?}",
                start.elapsed().as_secs_f64()
            );
            last_report = Instant::now();
        }
        if Instant::now() >= deadline {
            let seen = match counts {
                Ok(c) => format!("states: {c:?}"),
                Err(e) => format!("the API did not answer: {e:#}"),
            };
            bail!(
                "not all {n} backends running within {}s ({seen}); last lines of Vigil's log:\n{}",
                within.as_secs(),
                vigil.log_tail(20)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The measured window: CPU readings at both ends, one API sample a second.
async fn measure(
    api: &Api,
    n: u32,
    interval: &str,
    duration: f64,
    vigil: Option<u32>,
    backend: Option<u32>,
) -> Phase {
    let cpu = |pid: Option<u32>| {
        pid.and_then(|p| machine::process_cpu_seconds(Some(p)))
            .unwrap_or(0.0)
    };
    let samples = duration.floor().max(1.0) as u32;
    let window = Duration::from_secs_f64(duration);
    let start = Instant::now();
    let m0: CpuTimes = machine::cpu_times();
    let (v0, b0, s0) = (
        cpu(vigil),
        cpu(backend),
        machine::process_cpu_seconds(None).unwrap_or(0.0),
    );

    let mut latencies_ns = Vec::with_capacity(samples as usize * n as usize);
    let mut no_latency = 0u64;
    let mut not_running: HashSet<String> = HashSet::new();
    let mut not_running_observations = 0u64;
    let mut other_states: BTreeMap<String, u64> = BTreeMap::new();
    let mut failed_samples = 0u32;
    let mut slowest = Duration::ZERO;
    for k in 0..samples {
        tokio::time::sleep_until(start + Duration::from_secs(u64::from(k))).await;
        let t = Instant::now();
        let answer = api.instances().await;
        slowest = slowest.max(t.elapsed());
        match answer {
            Ok(list) => {
                for r in list {
                    match r.latency_ms {
                        Some(ms) => latencies_ns.push((ms * 1e6).round().max(0.0) as u64),
                        None => no_latency += 1,
                    }
                    if r.state != "running" {
                        not_running_observations += 1;
                        *other_states.entry(r.state).or_insert(0) += 1;
                        not_running.insert(r.name);
                    }
                }
            }
            Err(_) => failed_samples += 1,
        }
    }
    tokio::time::sleep_until(start + window).await;
    let window_s = start.elapsed().as_secs_f64();
    let m1 = machine::cpu_times();
    let (v1, b1, s1) = (
        cpu(vigil),
        cpu(backend),
        machine::process_cpu_seconds(None).unwrap_or(0.0),
    );
    latencies_ns.sort_unstable();

    let machine_busy = machine::busy_fraction(&m0, &m1);
    let ours = ((v1 - v0) + (b1 - b0) + (s1 - s0)) / window_s;
    Phase {
        backends: n,
        interval: interval.to_owned(),
        startup_s: 0.0,
        window_s,
        cpu_vigil: v1 - v0,
        cpu_backend: b1 - b0,
        cpu_bench: s1 - s0,
        machine_busy,
        other_cores: (machine_busy * machine::online_cpus() as f64 - ours).max(0.0),
        vigil_rss_mib: 0.0,
        vigil_peak_rss_mib: 0.0,
        vigil_threads: 0,
        vigil_fds: 0,
        backend_rss_mib: 0.0,
        samples,
        failed_samples,
        slowest_sample_ms: slowest.as_secs_f64() * 1000.0,
        latencies_ns,
        no_latency,
        not_running_instances: not_running.len(),
        not_running_observations,
        other_states,
        log_problems: 0,
        log_examples: Vec::new(),
    }
}

pub(crate) struct ProcStatus {
    pub(crate) rss_mib: f64,
    pub(crate) peak_rss_mib: f64,
    pub(crate) threads: u64,
}

/// Resident memory and threads from `/proc/PID/status`.
pub(crate) fn proc_status(pid: u32) -> ProcStatus {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    ProcStatus {
        rss_mib: field("VmRSS:") as f64 / 1024.0,
        peak_rss_mib: field("VmHWM:") as f64 / 1024.0,
        threads: field("Threads:"),
    }
}

/// Open file descriptors of a process.
pub(crate) fn count_fds(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64)
}

/// Counts WARN and ERROR lines of a Vigil log, and returns the first three,
/// leaving out the warning this setup causes on purpose (an API without
/// tokens on loopback).
pub(crate) fn log_problems(log: &Path) -> (u64, Vec<String>) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut count = 0;
    let mut examples: Vec<String> = Vec::new();
    for line in text.lines() {
        if line.contains("control API is unauthenticated") {
            continue;
        }
        if line.contains(" WARN ") || line.contains(" ERROR ") {
            count += 1;
            if examples.len() < 3 {
                let short: String = line.chars().take(300).collect();
                examples.push(short);
            }
        }
    }
    (count, examples)
}

fn table(results: &[CountResult]) -> String {
    let l = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.2}"));
    let mut s = String::from(
        "| backends | interval | up in s | vigil CPU, % of a core | backend CPU, % of a core | vigil RSS MiB | vigil fds | probe readings | p50 ms | p90 ms | p99 ms | max ms | not running (instances / readings) | machine busy (other procs, CPUs) |\n\
         |---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in results {
        for p in std::iter::once(&r.probing).chain(r.idle.as_ref()) {
            s.push_str(&format!(
                "| {} | {} | {:.1} | {:.1} | {:.1} | {:.0} | {} | {} | {} | {} | {} | {} | {} / {} | {:.0}% ({:.2}) |\n",
                p.backends,
                p.interval,
                p.startup_s,
                p.vigil_core_share() * 100.0,
                p.backend_core_share() * 100.0,
                p.vigil_rss_mib,
                p.vigil_fds,
                p.latencies_ns.len(),
                l(p.latency_ms(0.50)),
                l(p.latency_ms(0.90)),
                l(p.latency_ms(0.99)),
                l(p.max_latency_ms()),
                p.not_running_instances,
                p.not_running_observations,
                p.machine_busy * 100.0,
                p.other_cores,
            ));
        }
    }
    s
}

fn summary(results: &[CountResult]) -> String {
    let mut s = String::from(
        "| backends | probes/s | vigil CPU, % of a core (goal < 10 at 1,000 × 1s) | probing share: vigil / backend, % of a core | CPU per probe µs: vigil / backend |\n\
         |---:|---:|---:|---:|---:|\n",
    );
    for r in results {
        let share = r.probing.vigil_core_share();
        let goal = if r.probing.backends >= 1000 && literal_secs(&r.probing.interval) <= 1.0 {
            if share < GOAL_VIGIL_CORE_SHARE {
                " (met)"
            } else {
                " (not met)"
            }
        } else {
            ""
        };
        let rate = r.probes_per_s();
        let (split, per_probe) = match r.probing_share() {
            Some((v, b)) if rate > 0.0 => (
                format!("{:.1} / {:.1}", v * 100.0, b * 100.0),
                format!("{:.0} / {:.0}", v / rate * 1e6, b / rate * 1e6),
            ),
            _ => ("-".into(), "-".into()),
        };
        s.push_str(&format!(
            "| {} | {:.0} | {:.1}{goal} | {split} | {per_probe} |\n",
            r.probing.backends,
            rate,
            share * 100.0,
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duration_literals() {
        assert_eq!(parse_duration_literal("1s").as_deref(), Ok("1s"));
        assert_eq!(parse_duration_literal("500ms").as_deref(), Ok("500ms"));
        assert!(parse_duration_literal("1.5s").is_err());
        assert!(parse_duration_literal("s").is_err());
        assert!(parse_duration_literal("1s\"").is_err());
        assert_eq!(literal_secs("500ms"), 0.5);
        assert_eq!(literal_secs("1h"), 3600.0);
    }

    #[test]
    fn config_lists_every_backend() {
        let c = vigil_config(3, 4000, 4001, 4002, "1s", "500ms", false);
        assert!(c.contains("url = \"http://127.0.0.1:4000/mcp/2\""));
        assert!(c.contains("name = \"b0\""));
        assert_eq!(c.matches("[[backends]]").count(), 3);
        assert!(!c.contains("keep_alive"));
        assert!(c.contains("interval = \"1s\"\ntimeout = \"500ms\""));
    }
}
