//! `vigil-bench instances`: what a backend process per client session
//! costs (`share = "session"` on a stdio backend, issue 30).
//!
//! Two `vigil serve` of the same build run side by side for the whole run,
//! each in front of the demo backend over stdio (`vigil-demo-backend
//! --transport stdio --name alpha`, backend `alpha`, tool `alpha__echo`),
//! with every other setting at its default: one with `share = "all"` (one
//! process for every client), one with `share = "session"` (a process per
//! client session, started on its first call and stopped when the session
//! ends, besides the configured backend's shared process). The clients are
//! the lean client (`lean/client.rs`), which spends little CPU per request,
//! so the times are Vigil's and the backend's. Three phases:
//!
//! 1. **first call**: N sessions per Vigil, the Vigil that goes first
//!    alternating: open (initialize + initialized), a first `tools/call`
//!    (with `"session"` it starts the process), a second one, `DELETE`;
//!    then the bench waits until the session's process is gone (how long a
//!    stop takes), so that no stop overlaps the next measurement;
//! 2. **memory**: K sessions per Vigil call once and stay open; Vigil's
//!    resident memory and its backend processes' against before, the
//!    instances the control API lists, then all K end;
//! 3. **churn**: M sessions open, call once and end, one at a time and C at
//!    a time; then the bench waits (up to a deadline) until only the shared
//!    process is left. Another count at the deadline is a process left
//!    behind: the bench reports it and exits non-zero.
//!
//! A failed call (a session whose call Vigil refused) is counted in its
//! phase and reported at the end, also with a non-zero exit: every figure
//! is printed first.
//!
//! Backend processes are Vigil's children named `vigil-demo-backend` in
//! `/proc` (Vigil starts them itself, each in a process group of its own);
//! zombies among them (ended, not yet reaped by Vigil) are counted apart.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::StreamExt as _;

use crate::lean::client::{Endpoint, Session};
use crate::machine::{self, Machine};
use crate::probes::{Api, proc_status};
use crate::procs::{self, Server};
use crate::stats::Latency;
use crate::{load, resolve_bin_dir};

/// The backend's name in both configs, and the tool called through Vigil.
const BACKEND: &str = "alpha";
const TOOL: &str = "alpha__echo";
/// How often the bench looks for Vigil's backend processes while it waits
/// for one to go.
const POLL: Duration = Duration::from_millis(5);

/// Benchmark per-session backend processes (`share = "session"`) against
/// one shared process (`share = "all"`).
#[derive(Debug, clap::Args)]
pub struct InstancesArgs {
    /// Sessions per Vigil in the first-call phase.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    sessions: u32,

    /// Sessions per Vigil holding an instance at once in the memory phase
    /// (at most `[limits] max_instances`, 64 by default, which the bench
    /// leaves as it is).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=64))]
    instances: u32,

    /// Sessions per Vigil and concurrency in the churn phase.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    churn: u32,

    /// Sessions at a time in the concurrent churn (the other runs one at a
    /// time).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(2..=64))]
    concurrency: u32,

    /// Longest wait, in seconds, for the per-session processes to be gone
    /// after their sessions ended.
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    deadline: u64,

    /// Directory holding the `vigil` and `vigil-demo-backend` binaries.
    /// Default: `${CARGO_TARGET_DIR:-target}/release`, else the directory
    /// of this binary.
    #[arg(long, value_name = "DIR")]
    bin_dir: Option<PathBuf>,

    /// Keep both configs and Vigils' logs in this directory (default: a
    /// scratch directory, removed at the end).
    #[arg(long, value_name = "DIR")]
    log_dir: Option<PathBuf>,
}

/// One Vigil under test.
struct Gateway {
    share: &'static str,
    server: Server,
    pid: u32,
    endpoint: Arc<Endpoint>,
    api: Api,
}

/// Vigil's backend processes at one moment.
struct Backends {
    running: Vec<u32>,
    zombies: usize,
}

impl Gateway {
    async fn start(
        share: &'static str,
        vigil: &Path,
        demo: &Path,
        dir: &Path,
    ) -> anyhow::Result<Self> {
        // Each in a directory of its own: the default data dir is beside
        // the config.
        let dir = dir.join(format!("share-{share}"));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let (port, api_port) = (procs::free_port()?, procs::free_port()?);
        let config = dir.join("vigil.toml");
        std::fs::write(&config, vigil_config(port, api_port, demo, share))
            .with_context(|| format!("cannot write {}", config.display()))?;
        let mut server = Server::vigil(vigil, &config, None, dir.join("vigil.log"))?;
        let url = format!("http://127.0.0.1:{port}/mcp");
        load::wait_ready(&mut server, &url, TOOL, Duration::from_secs(60)).await?;
        let pid = server.pid().context("vigil has no pid")?;
        let gw = Self {
            share,
            server,
            pid,
            endpoint: Arc::new(Endpoint::parse(&url)?),
            api: Api::new(api_port)?,
        };
        let (_, n) = gw.settle_to(1, Duration::from_secs(10)).await;
        if n != 1 {
            bail!("share = {share:?}: {n} backend processes once Vigil served, expected 1");
        }
        Ok(gw)
    }

    fn per_session(&self) -> bool {
        self.share == "session"
    }

    fn backends(&self) -> Backends {
        backends_of(self.pid)
    }

    /// Waits until Vigil runs `want` backend processes, or `within` passes:
    /// how long that took, and how many there are.
    async fn settle_to(&self, want: usize, within: Duration) -> (Duration, usize) {
        let t = Instant::now();
        loop {
            let n = self.backends().running.len();
            if n == want || t.elapsed() >= within {
                return (t.elapsed(), n);
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Vigil's config: the demo backend over stdio, `share` as given, all else
/// default (`[limits] max_instances` 64, `session_idle` 10 min).
fn vigil_config(port: u16, api_port: u16, demo: &Path, share: &str) -> String {
    format!(
        "listen = \"127.0.0.1:{port}\"\nlog_level = \"warn\"\n\n\
         [api]\nlisten = \"127.0.0.1:{api_port}\"\n\n\
         [[backends]]\nname = \"{BACKEND}\"\ntransport = \"stdio\"\ncommand = {:?}\n\
         args = [\"--transport\", \"stdio\", \"--name\", \"{BACKEND}\"]\n\
         env = {{ RUST_LOG = \"warn\" }}\nshare = \"{share}\"\n",
        demo.display().to_string()
    )
}

/// The demo backend processes among `vigil`'s children (`comm` is cut to
/// 15 bytes; a zombie has no command line left, but its `comm`).
fn backends_of(vigil: u32) -> Backends {
    let mut b = Backends {
        running: Vec::new(),
        zombies: 0,
    };
    for pid in procs::children_of(vigil) {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if !"vigil-demo-backend".starts_with(&stat[open + 1..close]) {
            continue;
        }
        if stat[close + 1..].split_whitespace().next() == Some("Z") {
            b.zombies += 1;
        } else {
            b.running.push(pid);
        }
    }
    b
}

fn ns_since(t: Instant) -> u64 {
    t.elapsed().as_nanos() as u64
}

/// Phase 1, one session: its times in ns.
struct Trip {
    open: u64,
    first: u64,
    second: u64,
    /// From the `DELETE` answered to its process gone (0 with `"all"`).
    stop: u64,
}

/// One first-call session. The outer error ends the run (a process left
/// behind); the inner one is a failed call, counted and reported: the
/// session is still ended and its process awaited.
async fn trip(gw: &Gateway, deadline: Duration) -> anyhow::Result<anyhow::Result<Trip>> {
    let t = Instant::now();
    let mut s = Session::open(gw.endpoint.clone()).await?;
    let open = ns_since(t);
    let calls = async {
        let t = Instant::now();
        s.call_echo(TOOL, "first").await.context("first call")?;
        let first = ns_since(t);
        let t = Instant::now();
        s.call_echo(TOOL, "second").await.context("second call")?;
        let second = ns_since(t);
        let want = if gw.per_session() { 2 } else { 1 };
        let running = gw.backends().running.len();
        if running != want {
            bail!("{running} backend processes during a session, expected {want}");
        }
        Ok((first, second))
    }
    .await;
    s.end().await?;
    let t = Instant::now();
    let (_, left) = gw.settle_to(1, deadline).await;
    if left != 1 {
        bail!("{left} backend processes {deadline:?} after a session ended, expected 1");
    }
    let stop = if gw.per_session() { ns_since(t) } else { 0 };
    Ok(calls.map(|(first, second)| Trip {
        open,
        first,
        second,
        stop,
    }))
}

/// Sessions whose call failed, and the first error.
#[derive(Default)]
struct Failed {
    count: usize,
    first: Option<String>,
}

impl Failed {
    fn add(&mut self, e: &anyhow::Error) {
        self.count += 1;
        self.first.get_or_insert_with(|| format!("{e:#}"));
    }
}

/// Phase 2's figures for one Vigil (RSS in MiB).
struct Memory {
    vigil_before: f64,
    vigil_with: f64,
    vigil_after: f64,
    shared_before: f64,
    shared_with: f64,
    /// Each process beyond the shared one.
    instances: Vec<f64>,
    /// Instances the control API listed (`alpha.sN`).
    listed: usize,
    /// From the last `DELETE` answered to only the shared process left.
    stopped_in: Duration,
    left: usize,
    failed: Failed,
}

async fn memory(gw: &Gateway, k: usize, deadline: Duration) -> anyhow::Result<Memory> {
    let (before, _) = procs::quiescent(gw.pid).await;
    let shared = gw.backends().running;
    let rss = |pids: &[u32]| pids.iter().map(|&p| proc_status(p).rss_mib).sum::<f64>();
    let shared_before = rss(&shared);
    let mut sessions = Vec::with_capacity(k);
    let mut failed = Failed::default();
    for _ in 0..k {
        let mut s = Session::open(gw.endpoint.clone()).await?;
        // A failed call is counted and made once more, so that every
        // session holds its instance.
        if let Err(e) = s.call_echo(TOOL, "memory").await {
            failed.add(&e);
            s.call_echo(TOOL, "memory again").await?;
        }
        sessions.push(s);
    }
    let (with, _) = procs::quiescent(gw.pid).await;
    let instances: Vec<f64> = gw
        .backends()
        .running
        .into_iter()
        .filter(|p| !shared.contains(p))
        .map(|p| proc_status(p).rss_mib)
        .collect();
    let prefix = format!("{BACKEND}.");
    let listed = gw
        .api
        .instances()
        .await?
        .iter()
        .filter(|r| r.name.starts_with(&prefix))
        .count();
    let shared_with = rss(&shared);
    for s in sessions {
        s.end().await?;
    }
    let (stopped_in, left) = gw.settle_to(1, deadline).await;
    let (after, _) = procs::quiescent(gw.pid).await;
    Ok(Memory {
        vigil_before: before.rss_mib,
        vigil_with: with.rss_mib,
        vigil_after: after.rss_mib,
        shared_before,
        shared_with,
        instances,
        listed,
        stopped_in,
        left,
        failed,
    })
}

/// Phase 3's figures for one Vigil and concurrency.
struct Churn {
    share: &'static str,
    concurrency: usize,
    /// Each session's open + call + `DELETE`, ns, sorted.
    sessions: Vec<u64>,
    failed: Failed,
    wall: Duration,
    /// Most backend processes (and zombies) seen at once during the run.
    peak: usize,
    peak_zombies: usize,
    /// From the last session's end to only the shared process left.
    settled_in: Duration,
    left: usize,
}

async fn churn(gw: &Gateway, n: usize, concurrency: usize, deadline: Duration) -> Churn {
    let done = AtomicBool::new(false);
    let work = async {
        let t = Instant::now();
        let results: Vec<anyhow::Result<u64>> = futures::stream::iter(0..n)
            .map(|_| async {
                let t = Instant::now();
                let mut s = Session::open(gw.endpoint.clone()).await?;
                // Ended whether or not the call worked: no session is left.
                let called = s.call_echo(TOOL, "churn").await;
                s.end().await?;
                called.map(|()| ns_since(t))
            })
            .buffer_unordered(concurrency)
            .collect()
            .await;
        done.store(true, Ordering::Release);
        (results, t.elapsed())
    };
    // Sampled beside the work: processes still stopping pile up here.
    let sample = async {
        let (mut peak, mut zombies) = (0, 0);
        while !done.load(Ordering::Acquire) {
            let b = gw.backends();
            peak = peak.max(b.running.len());
            zombies = zombies.max(b.zombies);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        (peak, zombies)
    };
    let ((results, wall), (peak, peak_zombies)) = futures::join!(work, sample);
    let (settled_in, left) = gw.settle_to(1, deadline).await;
    let mut sessions = Vec::with_capacity(n);
    let mut failed = Failed::default();
    for r in results {
        match r {
            Ok(ns) => sessions.push(ns),
            Err(e) => failed.add(&e),
        }
    }
    sessions.sort_unstable();
    Churn {
        share: gw.share,
        concurrency,
        sessions,
        failed,
        wall,
        peak,
        peak_zombies,
        settled_in,
        left,
    }
}

/// CPU readings for the "other processes" figure of a phase: the whole
/// machine against the bench, both Vigils and their backend processes
/// (live, and ended ones Vigil reaped).
struct Usage {
    at: Instant,
    machine: machine::CpuTimes,
    ours: f64,
}

impl Usage {
    fn now(gateways: &[&Gateway]) -> Self {
        let tree = |pid: u32| {
            machine::process_cpu_seconds(Some(pid)).unwrap_or(0.0)
                + machine::reaped_children_cpu_seconds(pid).unwrap_or(0.0)
                + procs::children_of(pid)
                    .into_iter()
                    .filter_map(|c| machine::process_cpu_seconds(Some(c)))
                    .sum::<f64>()
        };
        Self {
            at: Instant::now(),
            machine: machine::cpu_times(),
            ours: machine::process_cpu_seconds(None).unwrap_or(0.0)
                + gateways.iter().map(|g| tree(g.pid)).sum::<f64>(),
        }
    }

    /// CPUs' worth used by other processes since `self` (near 0: an
    /// undisturbed phase).
    fn others_since(&self, gateways: &[&Gateway]) -> f64 {
        let end = Self::now(gateways);
        let secs = end.at.duration_since(self.at).as_secs_f64().max(1e-9);
        let busy =
            machine::busy_fraction(&self.machine, &end.machine) * machine::online_cpus() as f64;
        (busy - (end.ours - self.ours) / secs).max(0.0)
    }
}

pub async fn run(args: &InstancesArgs) -> anyhow::Result<()> {
    let bins = resolve_bin_dir(args.bin_dir.as_deref())?;
    let (vigil, demo) = (bins.join("vigil"), bins.join("vigil-demo-backend"));
    let (dir, _scratch) = procs::log_dir(args.log_dir.as_deref())?;
    let deadline = Duration::from_secs(args.deadline);

    println!("vigil-bench {} instances", env!("CARGO_PKG_VERSION"));
    println!("{}", Machine::detect());
    println!(
        "vigil: {} ({})",
        procs::version(&vigil).await.unwrap_or_else(|| "?".into()),
        vigil.display()
    );
    println!(
        "plan: two Vigils side by side, backend `{BACKEND}` = vigil-demo-backend over stdio, share = \"all\" and share = \"session\"; first call: {} sessions each; memory: {} sessions each holding on; churn: {} sessions each, 1 and {} at a time; lean client",
        args.sessions, args.instances, args.churn, args.concurrency
    );
    let mut all = Gateway::start("all", &vigil, &demo, &dir).await?;
    let mut own = Gateway::start("session", &vigil, &demo, &dir).await?;
    let both = [&all, &own];

    // 1. First call.
    let usage = Usage::now(&both);
    let (mut trips_all, mut trips_own) = (Vec::new(), Vec::new());
    let (mut failed_all, mut failed_own) = (Failed::default(), Failed::default());
    for i in 0..args.sessions {
        let order = if i % 2 == 0 {
            [&all, &own]
        } else {
            [&own, &all]
        };
        for gw in order {
            let t = trip(gw, deadline)
                .await
                .with_context(|| format!("share = {:?}, first-call session {}", gw.share, i + 1))?;
            let (trips, failed) = if gw.per_session() {
                (&mut trips_own, &mut failed_own)
            } else {
                (&mut trips_all, &mut failed_all)
            };
            match t {
                Ok(t) => trips.push(t),
                Err(e) => failed.add(&e),
            }
        }
    }
    let others_first = usage.others_since(&both);
    println!();
    print_first(
        &trips_all,
        &trips_own,
        [failed_all.count, failed_own.count],
        others_first,
    );
    if trips_all.is_empty() || trips_own.is_empty() {
        bail!("no first-call session succeeded on one of the Vigils");
    }

    // 2. Memory.
    let usage = Usage::now(&both);
    let k = args.instances as usize;
    let mem_all = memory(&all, k, deadline)
        .await
        .context("share = \"all\", memory")?;
    let mem_own = memory(&own, k, deadline)
        .await
        .context("share = \"session\", memory")?;
    let others_memory = usage.others_since(&both);
    print_memory(k, &mem_all, &mem_own, others_memory);

    // 3. Churn.
    let mut churns = Vec::new();
    for concurrency in [1, args.concurrency as usize] {
        for gw in [&all, &own] {
            let usage = Usage::now(&both);
            let c = churn(gw, args.churn as usize, concurrency, deadline).await;
            churns.push((c, usage.others_since(&both)));
        }
    }
    print_churn(&churns);
    // Memory that stays after every session ended: what a leak would grow.
    let (end_all, _) = procs::quiescent(all.pid).await;
    let (end_own, _) = procs::quiescent(own.pid).await;
    println!(
        "Vigil RSS MiB after the churn: all {:.1}, session {:.1} (after the memory phase: {:.1}, {:.1})",
        end_all.rss_mib, end_own.rss_mib, mem_all.vigil_after, mem_own.vigil_after
    );
    println!();

    let mut problems = Vec::new();
    let mut failures = |what: String, f: &Failed, of: usize| {
        if let Some(e) = &f.first {
            problems.push(format!(
                "{what}: {} of {of} sessions' calls failed; first: {e}",
                f.count
            ));
        }
    };
    let n = args.sessions as usize;
    failures("share = \"all\", first call".into(), &failed_all, n);
    failures("share = \"session\", first call".into(), &failed_own, n);
    failures("share = \"all\", memory".into(), &mem_all.failed, k);
    failures("share = \"session\", memory".into(), &mem_own.failed, k);
    for (c, _) in &churns {
        failures(
            format!("share = {:?}, churn {} at a time", c.share, c.concurrency),
            &c.failed,
            c.sessions.len() + c.failed.count,
        );
    }
    for (name, m) in [("all", &mem_all), ("session", &mem_own)] {
        if m.left != 1 {
            problems.push(format!(
                "share = {name:?}: {} backend processes {}s after the memory phase's sessions ended, expected 1",
                m.left, args.deadline
            ));
        }
    }
    for (c, _) in &churns {
        if c.left != 1 {
            problems.push(format!(
                "share = {:?}, churn {} at a time: {} backend processes {}s after the last session ended, expected 1",
                c.share, c.concurrency, c.left, args.deadline
            ));
        }
    }
    all.server.check_alive()?;
    own.server.check_alive()?;
    all.server.stop().await;
    own.server.stop().await;
    if !problems.is_empty() {
        for p in &problems {
            eprintln!("error: {p}");
        }
        bail!("{} problem(s), see above", problems.len());
    }
    Ok(())
}

fn ms(us: f64) -> f64 {
    us / 1000.0
}

fn print_first(all: &[Trip], own: &[Trip], failed: [usize; 2], others: f64) {
    let lat = |trips: &[Trip], get: fn(&Trip) -> u64| {
        let mut v: Vec<u64> = trips.iter().map(get).collect();
        v.sort_unstable();
        Latency::of(&v)
    };
    println!(
        "First call: sessions measured {} (all) and {} (session), failed {} and {}; ms (median / p90); other processes {others:.2} CPUs",
        all.len(),
        own.len(),
        failed[0],
        failed[1]
    );
    println!();
    println!("| | share = \"all\" | share = \"session\" | session / all (medians) |");
    println!("|---|---:|---:|---:|");
    let rows = [
        (
            "open (initialize + initialized)",
            lat(all, |t| t.open),
            lat(own, |t| t.open),
        ),
        (
            "first `tools/call`",
            lat(all, |t| t.first),
            lat(own, |t| t.first),
        ),
        (
            "second `tools/call`",
            lat(all, |t| t.second),
            lat(own, |t| t.second),
        ),
    ];
    for (label, a, o) in rows {
        println!(
            "| {label} | {:.2} / {:.2} | {:.2} / {:.2} | {:.2} |",
            ms(a.p50),
            ms(a.p90),
            ms(o.p50),
            ms(o.p90),
            o.p50 / a.p50
        );
    }
    let stop = lat(own, |t| t.stop);
    println!(
        "| `DELETE` answered → its process gone | | {:.2} / {:.2} (max {:.2}) | |",
        ms(stop.p50),
        ms(stop.p90),
        ms(stop.max)
    );
    println!();
}

fn print_memory(k: usize, all: &Memory, own: &Memory, others: f64) {
    let per_session_kib = |m: &Memory| (m.vigil_with - m.vigil_before) * 1024.0 / k as f64;
    let inst = |m: &Memory| {
        let mut v = m.instances.clone();
        v.sort_by(f64::total_cmp);
        let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
        (
            v.len(),
            mean,
            v.first().copied().unwrap_or(0.0),
            v.last().copied().unwrap_or(0.0),
        )
    };
    println!(
        "Memory: {k} sessions per Vigil, each after one call, held open; RSS (VmRSS); other processes {others:.2} CPUs"
    );
    if all.failed.count + own.failed.count > 0 {
        println!(
            "({} and {} first calls failed and were made again)",
            all.failed.count, own.failed.count
        );
    }
    println!();
    println!("| | share = \"all\" | share = \"session\" |");
    println!("|---|---:|---:|");
    println!(
        "| Vigil RSS MiB: before / with the sessions / after they ended | {:.1} / {:.1} / {:.1} | {:.1} / {:.1} / {:.1} |",
        all.vigil_before,
        all.vigil_with,
        all.vigil_after,
        own.vigil_before,
        own.vigil_with,
        own.vigil_after
    );
    println!(
        "| Vigil RSS growth per session, KiB | {:.0} | {:.0} |",
        per_session_kib(all),
        per_session_kib(own)
    );
    let (na, ..) = inst(all);
    let (no, mean, min, max) = inst(own);
    println!(
        "| backend processes besides the shared one / instances in the control API | {na} / {} | {no} / {} |",
        all.listed, own.listed
    );
    println!(
        "| shared process RSS MiB: before / with the sessions | {:.1} / {:.1} | {:.1} / {:.1} |",
        all.shared_before, all.shared_with, own.shared_before, own.shared_with
    );
    println!("| RSS per instance process MiB: mean (min–max) | | {mean:.1} ({min:.1}–{max:.1}) |");
    println!(
        "| last `DELETE` answered → {} processes gone, ms (left after) | {:.0} ({}) | {:.0} ({}) |",
        k,
        all.stopped_in.as_secs_f64() * 1000.0,
        all.left,
        own.stopped_in.as_secs_f64() * 1000.0,
        own.left
    );
    println!();
    let vigil_kib = per_session_kib(own) - per_session_kib(all);
    println!(
        "per instance: Vigil +{vigil_kib:.0} KiB (session minus all, per session), its process {mean:.1} MiB: {:.1} MiB in all",
        mean + vigil_kib / 1024.0
    );
    println!();
}

fn print_churn(rows: &[(Churn, f64)]) {
    println!("Churn: sessions that open, call once and end (`DELETE`)");
    println!();
    println!(
        "| share | at a time | sessions | wall s | ms per session (wall / sessions) | each session ms: median / p90 / max | failed | most backend processes at once (zombies) | back to 1 process after, ms | processes left | other processes, CPUs |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (c, others) in rows {
        let l = Latency::of(&c.sessions);
        let n = c.sessions.len() + c.failed.count;
        println!(
            "| {} | {} | {n} | {:.2} | {:.2} | {:.2} / {:.2} / {:.2} | {} | {} ({}) | {:.0} | {} | {others:.2} |",
            c.share,
            c.concurrency,
            c.wall.as_secs_f64(),
            c.wall.as_secs_f64() * 1000.0 / n.max(1) as f64,
            ms(l.p50),
            ms(l.p90),
            ms(l.max),
            c.failed.count,
            c.peak,
            c.peak_zombies,
            c.settled_in.as_secs_f64() * 1000.0,
            c.left,
        );
    }
    println!();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The generated config is one Vigil accepts, with the share asked for.
    #[test]
    fn config_is_valid_with_the_share() {
        use vigil::config::{Config, Share, Transport};
        let c = vigil_config(7, 8, Path::new("/b/vigil-demo-backend"), "session");
        let c = Config::parse(&c, Path::new("/d/vigil.toml")).unwrap();
        let b = &c.backends[0];
        assert_eq!((b.name.as_str(), b.share), (BACKEND, Share::Session));
        let Transport::Stdio { command, args, .. } = &b.transport else {
            panic!("not stdio: {:?}", b.transport)
        };
        assert_eq!(command, "/b/vigil-demo-backend");
        assert_eq!(args, &["--transport", "stdio", "--name", BACKEND]);
        assert_eq!(c.api.listen.port(), 8);
    }
}
