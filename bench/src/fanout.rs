//! `vigil-bench fanout`: how fast a backend's recovery reaches every live
//! client session as `notifications/tools/list_changed`.
//!
//! Two demo backends over HTTP, `alpha` (stays up) and `beta` (killed and
//! restarted on the same port), behind one `vigil serve`. N client sessions
//! are open on Vigil's `/mcp`, each recording the wall-clock time of every
//! `list_changed` it receives. Each round: SIGKILL beta, wait until every
//! session has heard of the failure, wait out the debounce window (so the
//! recovery is a leading-edge change, delivered at once), start beta again,
//! and wait until every session has heard of the recovery. The recovery time
//! is the `at` of beta's last transition to `running` from the control API
//! (whole milliseconds); each session's latency is its first receipt after
//! the restart minus that time.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, anyhow, bail};
use futures::StreamExt as _;
use rmcp::ClientHandler;
use rmcp::model::ClientConfig;
use rmcp::service::{NotificationContext, RoleClient, RunningService, ServiceExt};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::Value;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::machine::{self, Machine};
use crate::probes::{literal_secs, parse_duration_literal};
use crate::procs::{self, Server};
use crate::{load, resolve_bin_dir};

/// Goal: the last of 1,000 sessions gets its `list_changed` within this many
/// ms of the recovery being recorded (beyond the debounce window; a
/// leading-edge delivery has no debounce wait).
pub const GOAL_LAST_MS: f64 = 50.0;

/// Sessions opened at once while setting up.
const OPEN_CONCURRENCY: usize = 64;

/// Benchmark list_changed fan-out: a backend recovers, N sessions hear of it.
#[derive(Debug, clap::Args)]
pub struct FanoutArgs {
    /// Live client sessions on Vigil. Comma-separate for a sweep, e.g.
    /// `--sessions 100,1000`; each count gets its own processes.
    #[arg(long, value_delimiter = ',', default_value = "1000", value_parser = clap::value_parser!(u32).range(1..=20_000))]
    sessions: Vec<u32>,

    /// Kill/restart rounds per session count.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    rounds: u32,

    /// `[freshness] debounce` in Vigil's config.
    #[arg(long, default_value = "1s", value_parser = parse_duration_literal)]
    debounce: String,

    /// Longest wait for every session to receive a list_changed (failure or
    /// recovery), per round.
    #[arg(long, default_value_t = 30.0, value_name = "SECS")]
    deadline: f64,

    /// Directory holding the `vigil` and `vigil-demo-backend` binaries.
    /// Default: `${CARGO_TARGET_DIR:-target}/release`, else the directory of
    /// this binary.
    #[arg(long, value_name = "DIR")]
    bin_dir: Option<PathBuf>,

    /// Keep the configs and logs in this directory (default: a scratch
    /// directory, removed at the end).
    #[arg(long, value_name = "DIR")]
    log_dir: Option<PathBuf>,
}

/// Milliseconds since the Unix epoch, sub-millisecond precision.
fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// First `list_changed` receipt per session in the current round.
struct Board {
    first: Mutex<Vec<Option<f64>>>,
    heard: AtomicUsize,
    total: AtomicUsize,
    notify: Notify,
}

impl Board {
    fn new(n: usize) -> Self {
        Self {
            first: Mutex::new(vec![None; n]),
            heard: AtomicUsize::new(0),
            total: AtomicUsize::new(0),
            notify: Notify::new(),
        }
    }

    fn record(&self, id: usize, at: f64) {
        self.total.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first.lock().unwrap_or_else(|e| e.into_inner());
        if first[id].is_none() {
            first[id] = Some(at);
            self.heard.fetch_add(1, Ordering::SeqCst);
            self.notify.notify_waiters();
        }
    }

    fn clear(&self) {
        let mut first = self.first.lock().unwrap_or_else(|e| e.into_inner());
        first.iter_mut().for_each(|f| *f = None);
        self.heard.store(0, Ordering::SeqCst);
        self.total.store(0, Ordering::SeqCst);
    }

    fn receipts(&self) -> Vec<f64> {
        let first = self.first.lock().unwrap_or_else(|e| e.into_inner());
        first.iter().flatten().copied().collect()
    }

    /// Waits until `n` sessions have a receipt or `within` passes; checks the
    /// servers meanwhile. Returns how many have one.
    async fn wait_all(
        &self,
        n: usize,
        within: Duration,
        servers: &mut [&mut Server],
    ) -> anyhow::Result<usize> {
        let deadline = Instant::now() + within;
        loop {
            let notified = self.notify.notified();
            let heard = self.heard.load(Ordering::SeqCst);
            if heard >= n || Instant::now() >= deadline {
                return Ok(heard);
            }
            for s in servers.iter_mut() {
                s.check_alive()?;
            }
            let _ = tokio::time::timeout(Duration::from_millis(100), notified).await;
        }
    }
}

/// The client side of one session: records each tools/list_changed.
#[derive(Clone)]
struct Recorder {
    id: usize,
    board: Arc<Board>,
}

impl ClientHandler for Recorder {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.board.record(self.id, now_ms());
        std::future::ready(())
    }

    fn get_info(&self) -> ClientConfig {
        load::client_config()
    }
}

type Session = RunningService<RoleClient, Recorder>;

async fn open_session(url: &str, id: usize, board: Arc<Board>) -> anyhow::Result<Session> {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url),
    );
    let client = tokio::time::timeout(
        Duration::from_secs(30),
        Recorder { id, board }.serve(transport),
    )
    .await
    .map_err(|_| anyhow!("no answer to initialize within 30s"))?
    .context("MCP handshake with Vigil failed")?;
    // One request after the handshake: by its answer the session is fully
    // set up on both sides.
    tokio::time::timeout(Duration::from_secs(30), client.list_tools(None))
        .await
        .map_err(|_| anyhow!("tools/list timed out"))?
        .context("tools/list")?;
    Ok(client)
}

/// One kill/restart round.
struct Round {
    /// Sessions that heard of the failure.
    failure_heard: usize,
    /// Sessions that heard of the recovery.
    heard: usize,
    /// list_changed notifications received after the restart (all sessions).
    notifications: usize,
    /// Receipt minus recovery, ms, sorted.
    latencies: Vec<f64>,
    /// ms from starting beta's process to the recovery being recorded.
    restart_to_recovery: f64,
    /// Vigil's and this bench's CPU ms from the restart until the last
    /// session heard (clock ticks: 10 ms steps).
    vigil_cpu_ms: f64,
    bench_cpu_ms: f64,
}

impl Round {
    fn first(&self) -> f64 {
        self.latencies.first().copied().unwrap_or(f64::NAN)
    }
    fn last(&self) -> f64 {
        self.latencies.last().copied().unwrap_or(f64::NAN)
    }
    fn q(&self, q: f64) -> f64 {
        quantile(&self.latencies, q)
    }
}

/// Nearest-rank quantile of sorted values (NaN if empty).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

struct CountResult {
    sessions: u32,
    rounds: Vec<Round>,
}

pub async fn run(args: &FanoutArgs) -> anyhow::Result<()> {
    if !args.deadline.is_finite() || args.deadline <= 0.0 {
        bail!("--deadline must be > 0");
    }
    let bin_dir = resolve_bin_dir(args.bin_dir.as_deref())?;
    let bins = Bins {
        vigil: bin_dir.join("vigil"),
        backend: bin_dir.join("vigil-demo-backend"),
    };
    let (soft, hard) = raise_fd_limit();
    let machine = Machine::detect();
    println!("vigil-bench {} fanout", env!("CARGO_PKG_VERSION"));
    println!("{machine}");
    println!(
        "plan: sessions {:?}; {} round(s) each: SIGKILL beta, wait for every session's list_changed, wait {} + 500ms, restart beta on the same port, wait for every session's list_changed (deadline {}s); [freshness] debounce {}, [health] interval 1s timeout 500ms, [restart] base 100ms max 200ms jitter 0 max_restarts 1000000, [poller] off; bench fd limit {soft} (hard {hard})",
        args.sessions, args.rounds, args.debounce, args.deadline, args.debounce,
    );
    if let Some(v) = procs::version(&bins.vigil).await {
        println!(
            "gateway: {v}, log_level = warn, backends alpha and beta (vigil-demo-backend --transport http)"
        );
    }
    println!();

    let (dir, _scratch) = procs::log_dir(args.log_dir.as_deref())?;

    let mut results = Vec::new();
    for &n in &args.sessions {
        let r = run_count(args, &bins, &dir, n)
            .await
            .with_context(|| format!("{n} sessions"))?;
        results.push(r);
    }
    println!();
    println!("{}", table(&results, &args.debounce));
    println!(
        "Latencies are a session's first list_changed receipt after the restart minus the recovery's `at` \
         (beta's last transition to running, control API, whole ms: up to 1 ms too high). The recovery is a \
         leading-edge change (the previous one was more than the debounce window earlier), delivered at once \
         after a gather of at most 10 ms, so the goal \"under {GOAL_LAST_MS:.0} ms beyond the debounce window\" \
         applies to last - recovery. The bench's sessions run on the same machine and take CPU during the fan-out too."
    );
    Ok(())
}

struct Bins {
    vigil: PathBuf,
    backend: PathBuf,
}

/// Raises this process's soft open-files limit to the hard one; returns both.
pub(crate) fn raise_fd_limit() -> (libc::rlim_t, libc::rlim_t) {
    // SAFETY: getrlimit/setrlimit on a properly sized, initialized struct.
    unsafe {
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) != 0 {
            return (0, 0);
        }
        if l.rlim_cur < l.rlim_max {
            let want = libc::rlimit {
                rlim_cur: l.rlim_max,
                rlim_max: l.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                l = want;
            }
        }
        (l.rlim_cur, l.rlim_max)
    }
}

fn spawn_backend(bins: &Bins, dir: &Path, name: &str, port: u16) -> anyhow::Result<Server> {
    Server::spawn(
        if name == "alpha" { "alpha" } else { "beta" },
        &bins.backend,
        &[
            "--transport".into(),
            "http".into(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--name".into(),
            name.into(),
        ],
        &[("RUST_LOG", "warn")],
        None,
        dir.join(format!("{name}.log")),
    )
}

fn vigil_config(
    vigil_port: u16,
    api_port: u16,
    alpha_port: u16,
    beta_port: u16,
    debounce: &str,
) -> String {
    format!(
        "listen = \"127.0.0.1:{vigil_port}\"\nlog_level = \"warn\"\n\n\
         [api]\nlisten = \"127.0.0.1:{api_port}\"\n\n\
         [health]\ninterval = \"1s\"\ntimeout = \"500ms\"\n\n\
         [restart]\nbase = \"100ms\"\nmax = \"200ms\"\njitter = 0.0\nmax_restarts = 1000000\n\n\
         [freshness]\ndebounce = \"{debounce}\"\n\n\
         [poller]\ninterval = \"0s\"\n\n\
         [[backends]]\nname = \"alpha\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:{alpha_port}/mcp\"\n\n\
         [[backends]]\nname = \"beta\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:{beta_port}/mcp\"\n"
    )
}

async fn run_count(
    args: &FanoutArgs,
    bins: &Bins,
    dir: &Path,
    n: u32,
) -> anyhow::Result<CountResult> {
    let dir = dir.join(format!("fanout-n{n}"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("cannot clear {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;

    let (alpha_port, beta_port) = (procs::free_port()?, procs::free_port()?);
    let mut alpha = spawn_backend(bins, &dir, "alpha", alpha_port)?;
    let mut beta = spawn_backend(bins, &dir, "beta", beta_port)?;
    for (s, port) in [(&mut alpha, alpha_port), (&mut beta, beta_port)] {
        load::wait_ready(
            s,
            &format!("http://127.0.0.1:{port}/mcp"),
            "echo",
            Duration::from_secs(30),
        )
        .await?;
    }

    let (vigil_port, api_port) = (procs::free_port()?, procs::free_port()?);
    let config = dir.join("vigil.toml");
    std::fs::write(
        &config,
        vigil_config(vigil_port, api_port, alpha_port, beta_port, &args.debounce),
    )
    .with_context(|| format!("cannot write {}", config.display()))?;
    let mut vigil = Server::vigil(&bins.vigil, &config, None, dir.join("vigil.log"))?;
    let url = format!("http://127.0.0.1:{vigil_port}/mcp");
    for tool in ["alpha__echo", "beta__echo"] {
        load::wait_ready(&mut vigil, &url, tool, Duration::from_secs(60)).await?;
    }
    let api = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()
        .context("cannot build the HTTP client")?;
    let beta_url = format!("http://127.0.0.1:{api_port}/api/v1/health/instances/beta");

    // Open the sessions.
    let board = Arc::new(Board::new(n as usize));
    let opening = Instant::now();
    let opened: Vec<anyhow::Result<Session>> = futures::stream::iter(0..n as usize)
        .map(|id| {
            let (url, board) = (url.clone(), board.clone());
            async move { open_session(&url, id, board).await }
        })
        .buffer_unordered(OPEN_CONCURRENCY)
        .collect()
        .await;
    let mut sessions = Vec::with_capacity(opened.len());
    let mut failure = None;
    for r in opened {
        match r {
            Ok(s) => sessions.push(s),
            Err(e) => failure = failure.or(Some(e)),
        }
    }
    if let Some(e) = failure {
        bail!(
            "{} of {n} sessions did not open: {e:#}",
            n as usize - sessions.len()
        );
    }
    let opened_in = opening.elapsed().as_secs_f64();
    // Let the standing GET streams settle before the first round.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let vigil_fds = vigil
        .pid()
        .and_then(|p| std::fs::read_dir(format!("/proc/{p}/fd")).ok())
        .map_or(0, |d| d.count());
    println!("{n} sessions open in {opened_in:.1}s; Vigil has {vigil_fds} open fds");

    let within = Duration::from_secs_f64(args.deadline);
    let quiet = Duration::from_secs_f64(literal_secs(&args.debounce)) + Duration::from_millis(500);
    let mut rounds = Vec::new();
    for k in 1..=args.rounds {
        // The failure.
        board.clear();
        beta.kill().await;
        let failure_heard = board
            .wait_all(n as usize, within, &mut [&mut vigil, &mut alpha])
            .await?;
        if failure_heard < n as usize {
            println!(
                "  round {k}: only {failure_heard} of {n} sessions heard of the failure within {}s",
                args.deadline
            );
        }
        tokio::time::sleep(quiet).await;

        // The recovery.
        board.clear();
        let cpu0 = vigil
            .pid()
            .and_then(|p| machine::process_cpu_seconds(Some(p)));
        let own0 = machine::process_cpu_seconds(None);
        let restarted = now_ms();
        beta = spawn_backend(bins, &dir, "beta", beta_port)?;
        let heard = board
            .wait_all(n as usize, within, &mut [&mut vigil, &mut alpha, &mut beta])
            .await?;
        let cpu1 = vigil
            .pid()
            .and_then(|p| machine::process_cpu_seconds(Some(p)));
        let own1 = machine::process_cpu_seconds(None);
        // Late duplicates (a trailing delivery) show in `notifications`.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let recovery = recovery_at(&api, &beta_url, restarted)
            .await
            .with_context(|| format!("round {k}"))?;
        let latencies = sorted(board.receipts().iter().map(|t| t - recovery).collect());
        let round = Round {
            failure_heard,
            heard,
            notifications: board.total.load(Ordering::SeqCst),
            latencies,
            restart_to_recovery: recovery - restarted,
            vigil_cpu_ms: match (cpu0, cpu1) {
                (Some(a), Some(b)) => (b - a) * 1000.0,
                _ => f64::NAN,
            },
            bench_cpu_ms: match (own0, own1) {
                (Some(a), Some(b)) => (b - a) * 1000.0,
                _ => f64::NAN,
            },
        };
        println!(
            "{n:>5} sessions, round {k}: heard {}/{n} (failure {}/{n}), {} notifications | ms after recovery: first {:.2} p50 {:.2} p99 {:.2} last {:.2} | restart->recovery {:.0} ms | CPU vigil {:.0} ms, bench {:.0} ms",
            round.heard,
            round.failure_heard,
            round.notifications,
            round.first(),
            round.q(0.50),
            round.q(0.99),
            round.last(),
            round.restart_to_recovery,
            round.vigil_cpu_ms,
            round.bench_cpu_ms,
        );
        rounds.push(round);
    }

    futures::stream::iter(sessions)
        .for_each_concurrent(OPEN_CONCURRENCY, |s| async move {
            let _ = tokio::time::timeout(Duration::from_secs(2), s.cancel()).await;
        })
        .await;
    vigil.check_alive()?;
    vigil.stop().await;
    alpha.stop().await;
    beta.stop().await;
    Ok(CountResult {
        sessions: n,
        rounds,
    })
}

/// The `at` (ms since epoch) of beta's last transition to `running`, which
/// must be after `since` (ms since epoch, less a 1 ms rounding allowance).
async fn recovery_at(api: &reqwest::Client, url: &str, since: f64) -> anyhow::Result<f64> {
    let answer = api.get(url).send().await?;
    let status = answer.status();
    let body = answer.text().await?;
    if !status.is_success() {
        bail!("{url} answered {status}: {body}");
    }
    let doc: Value =
        serde_json::from_str(&body).with_context(|| format!("{url} did not answer JSON"))?;
    let at = doc["transitions"]
        .as_array()
        .ok_or_else(|| anyhow!("{url} answered without `transitions`"))?
        .iter()
        .rev()
        .find(|t| t["to"].as_str() == Some("running"))
        .and_then(|t| t["at"].as_f64())
        .ok_or_else(|| anyhow!("no transition to running in {url}"))?;
    if at < since.floor() - 1.0 {
        bail!("beta's last transition to running ({at}) is older than the restart ({since:.0})");
    }
    Ok(at)
}

fn table(results: &[CountResult], debounce: &str) -> String {
    let f = |v: f64| {
        if v.is_nan() {
            "-".to_owned()
        } else {
            format!("{v:.1}")
        }
    };
    let mut s = String::from(
        "| sessions | rounds | debounce | heard (all rounds) | first ms, median | per-round median ms, median | last ms (last − recovery), median | last ms, max | CPU ms per fan-out, median: Vigil / bench | goal: last < 50 ms at 1,000 |\n\
         |---:|---:|---|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for r in results {
        let over =
            |g: fn(&Round) -> f64| sorted(r.rounds.iter().map(g).filter(|v| !v.is_nan()).collect());
        let lasts = over(Round::last);
        let heard: usize = r.rounds.iter().map(|x| x.heard).sum();
        let expected = r.sessions as usize * r.rounds.len();
        let max_last = lasts.last().copied().unwrap_or(f64::NAN);
        let goal = if r.sessions < 1000 {
            "-"
        } else if heard == expected && max_last < GOAL_LAST_MS {
            "met (every round)"
        } else if heard == expected && quantile(&lasts, 0.5) < GOAL_LAST_MS {
            "met at the median, not every round"
        } else {
            "not met"
        };
        s.push_str(&format!(
            "| {} | {} | {debounce} | {heard}/{expected} | {} | {} | {} | {} | {} / {} | {goal} |\n",
            r.sessions,
            r.rounds.len(),
            f(quantile(&over(Round::first), 0.5)),
            f(quantile(&over(|x| x.q(0.5)), 0.5)),
            f(quantile(&lasts, 0.5)),
            f(max_last),
            f(quantile(&over(|x| x.vigil_cpu_ms), 0.5)),
            f(quantile(&over(|x| x.bench_cpu_ms), 0.5)),
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_has_both_backends() {
        let c = vigil_config(1, 2, 3, 4, "1s");
        assert!(c.contains("url = \"http://127.0.0.1:3/mcp\""));
        assert!(
            c.contains("name = \"beta\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:4/mcp\"")
        );
        assert!(c.contains("[freshness]\ndebounce = \"1s\""));
        assert!(c.contains("[poller]\ninterval = \"0s\""));
    }

    #[test]
    fn quantiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 50.0);
        assert_eq!(quantile(&v, 1.0), 100.0);
        assert!(quantile(&[], 0.5).is_nan());
    }
}
