//! `vigil-bench capsets`: what listings per client capability set cost.
//!
//! One `vigil serve` in front of one stdio backend, the demo backend
//! (`vigil-demo-backend`, stdio). N client sessions (rmcp's streamable HTTP
//! client) are spread evenly over four capability sets declared in
//! `initialize`: `{}`, `{"sampling":{}}`, `{"elicitation":{"form":{}}}` and
//! `{"roots":{"listChanged":true}}`. Each session initializes and sends
//! `tools/list` once (the first round, sessions opened a few at a time);
//! once all are open, every session sends `tools/list` once more (the warm
//! round).
//!
//! Vigil's shared backend session declares no capabilities; a client of a
//! non-empty set is served by one more backend session per distinct set,
//! for a stdio backend one more process of the same command, and each set's
//! view of the catalog is built once (`docs/gateway.md`, "What each client
//! is shown"). With `--old-vigil`, the same run measures a build of the
//! previous design (the shared session declared everything, no per-set
//! sessions) too, old and new alternating in order round by round, and
//! prints ratios new / old.
//!
//! What is counted, and how: the backend is started by Vigil through
//! `/bin/sh -c 'exec vigil-demo-backend 2>>DIR/stderr-$$.log'`, with
//! `RUST_LOG` set so that the backend's MCP library logs every request it
//! receives and the capabilities its client declared. Each backend process
//! writes a log of its own, so the backend itself says how many processes
//! were started (log files), what each was declared, how many sessions it
//! initialized and how many `tools/list` (and other list) requests it
//! received. Alongside, Vigil's live child processes from `/proc`. Bytes per `tools/list` are
//! the HTTP body of one `tools/list` per set, sent by a plain HTTP client
//! after the rounds (rmcp's client does not expose bodies). Vigil's CPU is
//! its user + system time from `/proc/PID/stat`, in clock ticks (10 ms);
//! the backend processes' is their threads' scheduler time (ns), each
//! since it started. Resident memory of both from `/proc/PID/status`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use futures::StreamExt as _;
// `roots` is deprecated by SEP-2577 but part of the 2025 revisions these
// clients speak; the `roots` set answers `roots/list`.
#[allow(deprecated)]
use rmcp::model::ListRootsResult;
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::{ClientCacheConfig, RequestContext, RunningService, ServiceExt};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ErrorData, RoleClient};

use crate::machine::{self, Machine};
use crate::procs::{self, Server};
use crate::stats::Latency;
use crate::{load, resolve_bin_dir};

/// The capability sets, as each client declares them; session `i` declares
/// `SETS[i % 4]`.
const SETS: [(&str, &str); 4] = [
    ("none", "{}"),
    ("sampling", r#"{"sampling":{}}"#),
    ("elicitation", r#"{"elicitation":{"form":{}}}"#),
    ("roots", r#"{"roots":{"listChanged":true}}"#),
];

/// `RUST_LOG` of the backend processes: their MCP library logs each request
/// received (`received request`), the demo backend each `initialize`.
const BACKEND_LOG: &str = "warn,vigil_demo_backend=info,rmcp::service=debug";

/// The protocol revision of the plain HTTP client that reads the bodies.
const PROTOCOL: &str = "2025-11-25";

/// Benchmark tools/list with many sessions over a few capability sets.
#[derive(Debug, clap::Args)]
pub struct CapsetsArgs {
    /// Client sessions, spread evenly over the four capability sets.
    /// Comma-separate for a sweep, e.g. `--sessions 100,1000`; each
    /// count gets fresh processes.
    #[arg(long, value_delimiter = ',', default_value = "1000", value_parser = clap::value_parser!(u32).range(4..=20_000))]
    sessions: Vec<u32>,

    /// Measurements per build and session count; the order of the builds
    /// alternates (old, new, then new, old, ...), and the summary takes the
    /// median of each timing.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,

    /// Sessions opening (and, in the warm round, listing) at once.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=1000))]
    concurrency: u32,

    /// A `vigil` binary of the previous design, measured the same way in
    /// the same run (before the new one in odd rounds, after it in even
    /// ones); the summary prints ratios new / old.
    #[arg(long, value_name = "PATH")]
    old_vigil: Option<PathBuf>,

    /// Directory holding the `vigil` and `vigil-demo-backend` binaries (the
    /// demo backend serves both builds). Default:
    /// `${CARGO_TARGET_DIR:-target}/release`, else the directory of this
    /// binary.
    #[arg(long, value_name = "DIR")]
    bin_dir: Option<PathBuf>,

    /// Keep every measurement's config, Vigil's log and the backend
    /// processes' logs in this directory (default: a scratch directory,
    /// removed at the end).
    #[arg(long, value_name = "DIR")]
    log_dir: Option<PathBuf>,
}

/// What the backend and the process table say at one moment.
#[derive(Debug, Clone)]
struct Reading {
    at: Instant,
    /// The whole machine's CPU counters, and this bench's CPU seconds.
    machine: machine::CpuTimes,
    own_cpu: f64,
    /// Vigil's CPU seconds.
    vigil_cpu: f64,
    /// CPU seconds of Vigil's live child processes (the backends), each
    /// since it started (their live threads' scheduler time).
    backend_cpu: f64,
    /// Resident memory of Vigil, and of its live child processes together.
    vigil_rss_mib: f64,
    backend_rss_mib: f64,
    /// Vigil's live child processes.
    children: usize,
    /// Backend processes ever started (their log files).
    started: usize,
    /// `tools/list` requests the backend processes received, all together.
    listings: usize,
    /// Every list request they received (`tools/list`, `resources/list`,
    /// `resources/templates/list`, `prompts/list`).
    all_lists: usize,
    /// Sessions they initialized.
    initializes: usize,
    /// What each process's client (Vigil) declared, by process: the
    /// members of `sampling`, `elicitation`, `roots` that were present.
    declared: Vec<String>,
}

/// The HTTP body of one `tools/list` of a capability set.
#[derive(Debug, Clone)]
struct Body {
    set: &'static str,
    bytes: usize,
    content_type: String,
    tools: usize,
}

/// One build's figures for one session count.
#[derive(Debug, Clone)]
struct Figures {
    build: &'static str,
    sessions: u32,
    round: u32,
    /// At start (Vigil serving, before any client session), after the first
    /// round, after the warm round.
    start: Reading,
    first: Reading,
    warm: Reading,
    /// Latency of each session's `tools/list`, ns, sorted: first and warm
    /// round; and the first round by set.
    first_ns: Vec<u64>,
    warm_ns: Vec<u64>,
    first_by_set: Vec<Vec<u64>>,
    /// Latency of the first `tools/list` of each set (sessions 0..4, the
    /// first started of each set: the one that opens its backend session
    /// where the design has one), ns, by set.
    opening_ns: Vec<u64>,
    /// Tools each set was shown (first round; every session of a set must
    /// agree).
    tools_by_set: Vec<usize>,
    /// Wall seconds of the first round (open + list, all sessions) and of
    /// the warm round.
    first_secs: f64,
    warm_secs: f64,
    bodies: Vec<Body>,
    /// Listings the body probes (one plain session per set) added.
    probe_listings: usize,
}

impl Figures {
    fn lists(&self) -> f64 {
        f64::from(self.sessions)
    }
    /// Vigil's CPU ms over both rounds.
    fn vigil_cpu_ms(&self) -> f64 {
        (self.warm.vigil_cpu - self.start.vigil_cpu) * 1000.0
    }
    fn vigil_cpu_first_ms(&self) -> f64 {
        (self.first.vigil_cpu - self.start.vigil_cpu) * 1000.0
    }
    fn vigil_cpu_warm_ms(&self) -> f64 {
        (self.warm.vigil_cpu - self.first.vigil_cpu) * 1000.0
    }
    /// The backend processes' CPU ms, each since it started.
    fn backend_cpu_ms(&self) -> f64 {
        self.warm.backend_cpu * 1000.0
    }
    /// CPUs' worth used, from the start to the end of the warm round: the
    /// whole machine, and processes other than the bench, Vigil and its
    /// backends (near 0: an undisturbed measurement).
    fn busy_cores(&self) -> (f64, f64) {
        let (a, b) = (&self.start, &self.warm);
        let secs = b.at.duration_since(a.at).as_secs_f64();
        let busy = machine::busy_fraction(&a.machine, &b.machine) * machine::online_cpus() as f64;
        let ours =
            (b.vigil_cpu - a.vigil_cpu) + (b.backend_cpu - a.backend_cpu) + (b.own_cpu - a.own_cpu);
        (busy, (busy - ours / secs).max(0.0))
    }
}

pub async fn run(args: &CapsetsArgs) -> anyhow::Result<()> {
    let bins = resolve_bin_dir(args.bin_dir.as_deref())?;
    let backend = bins.join("vigil-demo-backend");
    let mut builds: Vec<(&'static str, PathBuf)> = Vec::new();
    if let Some(old) = &args.old_vigil {
        if !old.is_file() {
            bail!("--old-vigil {}: no such file", old.display());
        }
        builds.push(("old", old.clone()));
    }
    builds.push(("new", bins.join("vigil")));
    let (soft, hard) = crate::fanout::raise_fd_limit();
    if soft < 2 * libc::rlim_t::from(*args.sessions.iter().max().unwrap_or(&0)) + 256 {
        bail!(
            "the open-files limit is {soft} (hard {hard}); the bench needs about two per session"
        );
    }
    let (dir, _scratch) = procs::log_dir(args.log_dir.as_deref())?;

    println!("vigil-bench {} capsets", env!("CARGO_PKG_VERSION"));
    println!("{}", Machine::detect());
    for (name, path) in &builds {
        let v = procs::version(path).await.unwrap_or_else(|| "?".into());
        println!("{name}: {v} ({})", path.display());
    }
    println!(
        "plan: sessions {:?}, spread over {} capability sets ({}), {} at a time; per session: initialize, tools/list (first round); then tools/list on every session (warm round); {} round(s) per build, the order alternating; one stdio backend `demo` (vigil-demo-backend), [poller] off",
        args.sessions,
        SETS.len(),
        SETS.iter().map(|(_, c)| *c).collect::<Vec<_>>().join(" "),
        args.concurrency,
        args.rounds,
    );
    println!();

    let mut all = Vec::new();
    for &n in &args.sessions {
        for round in 1..=args.rounds {
            let mut order: Vec<&(&'static str, PathBuf)> = builds.iter().collect();
            if round % 2 == 0 {
                order.reverse();
            }
            for (build, vigil) in order {
                let f = measure(args, build, vigil, &backend, &dir, n, round)
                    .await
                    .with_context(|| format!("{build}, {n} sessions, round {round}"))?;
                print_line(&f);
                all.push(f);
            }
        }
    }
    println!();
    print_summary(&all, &args.sessions);
    Ok(())
}

async fn measure(
    args: &CapsetsArgs,
    build: &'static str,
    vigil_bin: &Path,
    backend: &Path,
    dir: &Path,
    n: u32,
    round: u32,
) -> anyhow::Result<Figures> {
    let dir = dir.join(format!("capsets-n{n}-r{round}-{build}"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("cannot clear {}", dir.display()))?;
    }
    let stderr_dir = dir.join("backend");
    std::fs::create_dir_all(&stderr_dir)
        .with_context(|| format!("cannot create {}", stderr_dir.display()))?;
    let port = procs::free_port()?;
    let config = dir.join("vigil.toml");
    std::fs::write(&config, vigil_config(port, n, backend, &stderr_dir))
        .with_context(|| format!("cannot write {}", config.display()))?;
    let mut vigil = Server::vigil(vigil_bin, &config, None, dir.join("vigil.log"))?;
    let url = format!("http://127.0.0.1:{port}/mcp");
    load::wait_ready(&mut vigil, &url, "demo__echo", Duration::from_secs(60)).await?;
    let pid = vigil.pid().context("vigil has no pid")?;
    // The start-up listing and the readiness check's are done once the
    // backend's own count of requests stops moving (its log is written
    // after it answers).
    let start = settled(pid, &stderr_dir, Duration::from_secs(10)).await;

    // First round: open, list once.
    let t0 = Instant::now();
    let opened: Vec<anyhow::Result<Opened>> = futures::stream::iter(0..n as usize)
        .map(|i| {
            let url = url.clone();
            async move {
                let set = i % SETS.len();
                let client = connect(&url, SETS[set].1).await?;
                let (ns, tools) = list(&client).await?;
                Ok(Opened {
                    index: i,
                    set,
                    client,
                    ns,
                    tools,
                })
            }
        })
        .buffer_unordered(args.concurrency as usize)
        .collect()
        .await;
    let first_secs = t0.elapsed().as_secs_f64();
    let first = reading(pid, &stderr_dir);
    let mut sessions = Vec::with_capacity(opened.len());
    let mut first_ns = Vec::with_capacity(opened.len());
    let mut first_by_set = vec![Vec::new(); SETS.len()];
    let mut opening_ns = vec![0; SETS.len()];
    let mut tools_by_set: Vec<Option<usize>> = vec![None; SETS.len()];
    let mut failure = None;
    for r in opened {
        match r {
            Ok(Opened {
                index,
                set,
                client,
                ns,
                tools,
            }) => {
                if index < SETS.len() {
                    opening_ns[index] = ns;
                }
                first_ns.push(ns);
                first_by_set[set].push(ns);
                match tools_by_set[set] {
                    None => tools_by_set[set] = Some(tools),
                    Some(t) if t != tools => {
                        failure = failure.or(Some(anyhow!(
                            "sessions of set {} were shown {t} and {tools} tools",
                            SETS[set].0
                        )))
                    }
                    Some(_) => {}
                }
                sessions.push(client);
            }
            Err(e) => failure = failure.or(Some(e)),
        }
    }
    if let Some(e) = failure {
        bail!(
            "{} of {n} sessions failed: {e:#}",
            n as usize - sessions.len()
        );
    }
    vigil.check_alive()?;

    // Warm round: every session lists once more.
    let t1 = Instant::now();
    let warm: Vec<anyhow::Result<u64>> = futures::stream::iter(&sessions)
        .map(|c| async move { list(c).await.map(|(ns, _)| ns) })
        .buffer_unordered(args.concurrency as usize)
        .collect()
        .await;
    let warm_secs = t1.elapsed().as_secs_f64();
    let warm_reading = reading(pid, &stderr_dir);
    let warm_ns = warm.into_iter().collect::<anyhow::Result<Vec<u64>>>()?;
    vigil.check_alive()?;

    // The bodies, one plain session per set, after the readings.
    let mut bodies = Vec::new();
    for (name, caps) in SETS {
        let body = list_body(&url, caps)
            .await
            .with_context(|| format!("the tools/list body of set {name}"))?;
        bodies.push(Body { set: name, ..body });
    }
    let after_probes = reading(pid, &stderr_dir);

    futures::stream::iter(sessions)
        .for_each_concurrent(64, |c| async move {
            let _ = tokio::time::timeout(Duration::from_secs(2), c.cancel()).await;
        })
        .await;
    vigil.check_alive()?;
    vigil.stop().await;

    let sorted = |mut v: Vec<u64>| {
        v.sort_unstable();
        v
    };
    Ok(Figures {
        build,
        sessions: n,
        round,
        start,
        first,
        probe_listings: after_probes.listings - warm_reading.listings,
        warm: warm_reading,
        first_ns: sorted(first_ns),
        warm_ns: sorted(warm_ns),
        first_by_set: first_by_set.into_iter().map(sorted).collect(),
        opening_ns,
        tools_by_set: tools_by_set.into_iter().map(|t| t.unwrap_or(0)).collect(),
        first_secs,
        warm_secs,
        bodies,
    })
}

/// Vigil's config: one stdio backend `demo`, the demo backend started
/// through `/bin/sh` so that each process's stderr goes to a file of its
/// own in `stderr_dir` (`stderr-PID.log`); the poller off (it would list
/// again during the run).
fn vigil_config(port: u16, sessions: u32, backend: &Path, stderr_dir: &Path) -> String {
    let q = |s: &str| format!("{s:?}");
    format!(
        "listen = \"127.0.0.1:{port}\"\nlog_level = \"warn\"\n\n\
         [limits]\nmax_sessions = {}\n\n\
         [poller]\ninterval = \"0s\"\n\n\
         [[backends]]\nname = \"demo\"\ntransport = \"stdio\"\ncommand = \"/bin/sh\"\n\
         args = [\"-c\", {}, {}, {}]\nenv = {{ RUST_LOG = {} }}\n",
        sessions + 100,
        q(r#"exec "$0" 2>>"$1/stderr-$$.log""#),
        q(&backend.display().to_string()),
        q(&stderr_dir.display().to_string()),
        q(BACKEND_LOG),
    )
}

/// The client side of one session: declares its set; answers `roots/list`
/// with no roots; sampling and elicitation are refused (rmcp's defaults),
/// which no `tools/list` asks for anyway.
#[derive(Clone)]
struct Declaring {
    capabilities: ClientCapabilities,
}

impl ClientHandler for Declaring {
    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::new(
            self.capabilities.clone(),
            Implementation::new("vigil-bench-capsets", env!("CARGO_PKG_VERSION")),
        );
        info.protocol_version = ProtocolVersion::LATEST_WITH_INITIALIZE;
        info
    }

    #[allow(deprecated)]
    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        Ok(ListRootsResult::default())
    }
}

type Client = RunningService<RoleClient, Declaring>;

/// A session of the first round: which it is, its set, and its first
/// `tools/list` (latency in ns, tools shown).
struct Opened {
    index: usize,
    set: usize,
    client: Client,
    ns: u64,
    tools: usize,
}

/// Opens a session declaring `capabilities` (JSON), with its own kept-alive
/// HTTP connections and rmcp's response cache off (every `tools/list`
/// reaches Vigil).
async fn connect(url: &str, capabilities: &str) -> anyhow::Result<Client> {
    let capabilities: ClientCapabilities =
        serde_json::from_str(capabilities).context("a capability set")?;
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .context("cannot build the HTTP client")?;
    let transport = StreamableHttpClientTransport::with_client(
        http,
        StreamableHttpClientTransportConfig::with_uri(url),
    );
    let client = tokio::time::timeout(
        Duration::from_secs(30),
        Declaring { capabilities }.serve(transport),
    )
    .await
    .map_err(|_| anyhow!("no answer to initialize within 30s"))?
    .context("MCP handshake with Vigil failed")?;
    client
        .set_response_cache_config(ClientCacheConfig::disabled())
        .await;
    Ok(client)
}

/// One `tools/list`: its latency in ns and how many tools it showed.
async fn list(client: &Client) -> anyhow::Result<(u64, usize)> {
    let t = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(30), client.list_tools(None))
        .await
        .map_err(|_| anyhow!("tools/list timed out"))?
        .context("tools/list")?;
    let ns = t.elapsed().as_nanos() as u64;
    if result.next_cursor.is_some() {
        bail!("tools/list answered with a next page; the bench counts one page per list");
    }
    Ok((ns, result.tools.len()))
}

/// One `tools/list` by a plain HTTP client declaring `capabilities`: the
/// size and type of the HTTP body, and the tools in it.
async fn list_body(url: &str, capabilities: &str) -> anyhow::Result<Body> {
    use reqwest::header::{ACCEPT, CONTENT_TYPE};
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .context("cannot build the HTTP client")?;
    let post = |session: Option<&str>, body: String| {
        let mut r = http
            .post(url)
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json, text/event-stream")
            .body(body);
        if let Some(id) = session {
            r = r
                .header("mcp-session-id", id)
                .header("mcp-protocol-version", PROTOCOL);
        }
        r.send()
    };
    let init = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"{PROTOCOL}","capabilities":{capabilities},"clientInfo":{{"name":"vigil-bench-capsets","version":"{}"}}}}}}"#,
        env!("CARGO_PKG_VERSION")
    );
    let answer = post(None, init).await?.error_for_status()?;
    let session = answer
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("initialize: no Mcp-Session-Id"))?;
    answer.bytes().await?;
    post(
        Some(&session),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.into(),
    )
    .await?
    .error_for_status()?
    .bytes()
    .await?;
    let answer = post(
        Some(&session),
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#.into(),
    )
    .await?
    .error_for_status()?;
    let content_type = answer
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = answer.bytes().await?;
    let tools = tools_in(&body, &content_type)?;
    let _ = http
        .delete(url)
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", PROTOCOL)
        .send()
        .await;
    Ok(Body {
        set: "",
        bytes: body.len(),
        content_type,
        tools,
    })
}

/// The number of tools in a `tools/list` answer (JSON, or an event stream
/// whose `data` holds the response to request 2).
fn tools_in(body: &[u8], content_type: &str) -> anyhow::Result<usize> {
    let text = std::str::from_utf8(body).context("the body is not UTF-8")?;
    let messages: Vec<String> = if content_type.starts_with("text/event-stream") {
        // Events are separated by blank lines; `data:` lines of one event join
        // with `\n`.
        text.split("\n\n")
            .map(|event| {
                event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(|d| d.strip_prefix(' ').unwrap_or(d))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .filter(|d| !d.is_empty())
            .collect()
    } else {
        vec![text.to_owned()]
    };
    for m in messages {
        let v: serde_json::Value =
            serde_json::from_str(&m).context("a message that is not JSON")?;
        if v["id"] == 2 {
            return v["result"]["tools"]
                .as_array()
                .map(Vec::len)
                .ok_or_else(|| anyhow!("the response to tools/list has no tools: {m}"));
        }
    }
    bail!("no response to tools/list in the body")
}

/// Vigil's CPU, its children's, and what the backend logs say.
/// A reading taken once two in a row, 50 ms apart, count the same backend
/// requests (or at `within`, whichever comes first).
async fn settled(vigil: u32, stderr_dir: &Path, within: Duration) -> Reading {
    let deadline = Instant::now() + within;
    let mut last = reading(vigil, stderr_dir);
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = reading(vigil, stderr_dir);
        let same = (now.started, now.initializes, now.all_lists)
            == (last.started, last.initializes, last.all_lists);
        if same || Instant::now() >= deadline {
            return now;
        }
        last = now;
    }
}

fn reading(vigil: u32, stderr_dir: &Path) -> Reading {
    let children = procs::children_of(vigil);
    let mut r = Reading {
        at: Instant::now(),
        machine: machine::cpu_times(),
        own_cpu: machine::process_cpu_seconds(None).unwrap_or(f64::NAN),
        started: 0,
        listings: 0,
        all_lists: 0,
        initializes: 0,
        declared: Vec::new(),
        vigil_cpu: machine::process_cpu_seconds(Some(vigil)).unwrap_or(f64::NAN),
        backend_cpu: children
            .iter()
            .filter_map(|&p| threads_cpu_seconds(p))
            .sum(),
        vigil_rss_mib: crate::probes::proc_status(vigil).rss_mib,
        backend_rss_mib: children
            .iter()
            .map(|&p| crate::probes::proc_status(p).rss_mib)
            .sum(),
        children: children.len(),
    };
    let Ok(dir) = std::fs::read_dir(stderr_dir) else {
        return r;
    };
    let mut files: Vec<PathBuf> = dir.filter_map(Result::ok).map(|e| e.path()).collect();
    files.sort();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        r.started += 1;
        let mut declared = None;
        for line in text.lines() {
            if let Some(request) = line
                .split_once("received request id=")
                .and_then(|(_, rest)| rest.split_once(" request="))
                .map(|(_, request)| request)
            {
                if request.starts_with("ListToolsRequest") {
                    r.listings += 1;
                }
                if request.starts_with("List") {
                    r.all_lists += 1;
                }
            } else if line.contains("session initialized") {
                r.initializes += 1;
            } else if declared.is_none() && line.contains("Service initialized as server") {
                declared = Some(declared_in(line));
            }
        }
        r.declared.push(declared.unwrap_or_else(|| "?".into()));
    }
    r
}

/// The client capabilities a backend process was declared, from its MCP
/// library's `Service initialized as server peer_info=...` line: the
/// present members among `sampling`, `elicitation`, `roots` (`-` for none).
fn declared_in(line: &str) -> String {
    let Some(caps) = line
        .split_once("capabilities: ClientCapabilities {")
        .and_then(|(_, rest)| rest.split_once(", client_info"))
        .map(|(caps, _)| caps)
    else {
        return "?".into();
    };
    let present: Vec<&str> = ["sampling", "elicitation", "roots"]
        .into_iter()
        .filter(|m| caps.contains(&format!("{m}: Some(")))
        .collect();
    if present.is_empty() {
        "-".into()
    } else {
        present.join("+")
    }
}

/// CPU seconds of a process's live threads from their scheduler statistics
/// (`/proc/PID/task/*/schedstat`, ns): finer than the clock ticks of
/// `/proc/PID/stat`, which a backend that starts and lists four times
/// in a few ms does not reach.
fn threads_cpu_seconds(pid: u32) -> Option<f64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let ns: u64 = tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Some(ns as f64 / 1e9)
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn print_line(f: &Figures) {
    let first = Latency::of(&f.first_ns);
    let warm = Latency::of(&f.warm_ns);
    let set_max: Vec<String> = f
        .first_by_set
        .iter()
        .zip(SETS)
        .map(|(v, (name, _))| format!("{name} {:.1}", ms(v.last().copied().unwrap_or(0))))
        .collect();
    println!(
        "{:>5} sessions, round {}, {}: backend processes started {} (alive {}; declared to each: {}), sessions initialized {} (+{} in the run), tools/list received {} (+{}), list requests of any kind {} (+{}) | first round {:.1}s: p50 {:.2} ms p99 {:.2} ms max {:.1} ms (max by set: {}; first list of each set: {}) | warm round {:.1}s: p50 {:.2} ms p99 {:.2} ms max {:.1} ms | CPU ms: Vigil {:.0} (first {:.0}, warm {:.0}), backends since start {:.1} | RSS MiB: Vigil {:.1}, backends {:.1} | CPUs busy {:.2} (others {:.2}) | tools shown {:?} | body probes added {} listing(s)",
        f.sessions,
        f.round,
        f.build,
        f.warm.started,
        f.warm.children,
        f.warm.declared.join(", "),
        f.warm.initializes,
        f.warm.initializes - f.start.initializes,
        f.warm.listings,
        f.warm.listings - f.start.listings,
        f.warm.all_lists,
        f.warm.all_lists - f.start.all_lists,
        f.first_secs,
        first.p50 / 1000.0,
        first.p99 / 1000.0,
        first.max / 1000.0,
        set_max.join(", "),
        f.opening_ns
            .iter()
            .map(|&n| format!("{:.1}", ms(n)))
            .collect::<Vec<_>>()
            .join(", "),
        f.warm_secs,
        warm.p50 / 1000.0,
        warm.p99 / 1000.0,
        warm.max / 1000.0,
        f.vigil_cpu_ms(),
        f.vigil_cpu_first_ms(),
        f.vigil_cpu_warm_ms(),
        f.backend_cpu_ms(),
        f.warm.vigil_rss_mib,
        f.warm.backend_rss_mib,
        f.busy_cores().0,
        f.busy_cores().1,
        f.tools_by_set,
        f.probe_listings,
    );
}

/// Median of some values (NaN if none).
fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// One summary row: a figure's text per build and, if both ran, new / old.
struct Row {
    label: &'static str,
    by_build: BTreeMap<&'static str, f64>,
    digits: usize,
    ratio: bool,
}

fn print_summary(all: &[Figures], counts: &[u32]) {
    let builds: Vec<&'static str> = ["old", "new"]
        .into_iter()
        .filter(|b| all.iter().any(|f| f.build == *b))
        .collect();
    for &n in counts {
        let of = |build: &str| -> Vec<&Figures> {
            all.iter()
                .filter(|f| f.sessions == n && f.build == build)
                .collect()
        };
        let figure = |label: &'static str,
                      digits: usize,
                      ratio: bool,
                      get: &dyn Fn(&Figures) -> f64|
         -> Row {
            Row {
                label,
                by_build: builds
                    .iter()
                    .map(|b| (*b, median(of(b).iter().map(|f| get(f)).collect())))
                    .collect(),
                digits,
                ratio,
            }
        };
        let lists = |f: &Figures| f.lists();
        let rows = vec![
            figure("backend processes started", 0, false, &|f| {
                f.warm.started as f64
            }),
            figure(
                "backend `tools/list` received during the run",
                0,
                false,
                &|f| (f.warm.listings - f.start.listings) as f64,
            ),
            figure(
                "backend list requests of any kind received during the run",
                0,
                false,
                &|f| (f.warm.all_lists - f.start.all_lists) as f64,
            ),
            figure(
                "backend sessions initialized during the run",
                0,
                false,
                &|f| (f.warm.initializes - f.start.initializes) as f64,
            ),
            figure(
                "backend `tools/list` received in all (with start-up)",
                0,
                false,
                &|f| f.warm.listings as f64,
            ),
            figure("bytes per `tools/list` body (every set)", 0, true, &|f| {
                f.bodies.iter().map(|b| b.bytes).max().unwrap_or(0) as f64
            }),
            figure("first round: p50 ms", 2, true, &|f| {
                Latency::of(&f.first_ns).p50 / 1000.0
            }),
            figure("first round: p99 ms", 2, true, &|f| {
                Latency::of(&f.first_ns).p99 / 1000.0
            }),
            figure("first round: max ms", 1, true, &|f| {
                Latency::of(&f.first_ns).max / 1000.0
            }),
            figure("first round: wall s (open + list)", 2, true, &|f| {
                f.first_secs
            }),
            figure(
                "first `tools/list` of each set (sessions 1-4): slowest ms",
                1,
                true,
                &|f| ms(f.opening_ns.iter().copied().max().unwrap_or(0)),
            ),
            figure("warm round: p50 ms", 2, true, &|f| {
                Latency::of(&f.warm_ns).p50 / 1000.0
            }),
            figure("warm round: p99 ms", 2, true, &|f| {
                Latency::of(&f.warm_ns).p99 / 1000.0
            }),
            figure("warm round: wall s", 2, true, &|f| f.warm_secs),
            figure("Vigil CPU ms, whole run (both rounds)", 0, true, &|f| {
                f.vigil_cpu_ms()
            }),
            figure(
                "Vigil CPU µs per session (open + first list)",
                0,
                true,
                &|f| f.vigil_cpu_first_ms() * 1000.0 / lists(f),
            ),
            figure("Vigil CPU µs per warm `tools/list`", 0, true, &|f| {
                f.vigil_cpu_warm_ms() * 1000.0 / lists(f)
            }),
            figure(
                "backend processes' CPU ms (each since it started)",
                1,
                true,
                &|f| f.backend_cpu_ms(),
            ),
            figure(
                "other processes' CPUs during the rounds (0: undisturbed)",
                2,
                false,
                &|f| f.busy_cores().1,
            ),
            figure("Vigil RSS MiB after the warm round", 1, true, &|f| {
                f.warm.vigil_rss_mib
            }),
            figure(
                "backend processes' RSS MiB after the warm round (together)",
                1,
                true,
                &|f| f.warm.backend_rss_mib,
            ),
        ];
        let rounds = of(builds[0]).len();
        println!(
            "{n} sessions ({} per set), median of {rounds} round(s) per build:",
            n / SETS.len() as u32
        );
        println!();
        let mut head = String::from("| |");
        let mut rule = String::from("|---|");
        for b in &builds {
            head.push_str(&format!(" {b} |"));
            rule.push_str("---:|");
        }
        if builds.len() == 2 {
            head.push_str(" new / old |");
            rule.push_str("---:|");
        }
        println!("{head}\n{rule}");
        for r in rows {
            let mut line = format!("| {} |", r.label);
            for b in &builds {
                line.push_str(&format!(" {:.*} |", r.digits, r.by_build[b]));
            }
            if builds.len() == 2 {
                let (old, new) = (r.by_build["old"], r.by_build["new"]);
                if r.ratio && old > 0.0 {
                    line.push_str(&format!(" {:.2} |", new / old));
                } else {
                    line.push_str(" |");
                }
            }
            println!("{line}");
        }
        println!();
        for b in &builds {
            if let Some(f) = of(b).first() {
                let bodies: Vec<String> = f
                    .bodies
                    .iter()
                    .map(|x| {
                        format!(
                            "{} {} B {} ({} tools)",
                            x.set, x.bytes, x.content_type, x.tools
                        )
                    })
                    .collect();
                println!("{b}: tools/list bodies by set: {}", bodies.join("; "));
                println!(
                    "{b}: capabilities declared to each backend process: {}",
                    f.warm.declared.join(", ")
                );
            }
        }
        println!();
    }
    println!(
        "Counts come from the backend processes' own logs (each process logs every request its MCP library receives and the capabilities its client declared, to a file of its own); \"during the run\" is from the moment Vigil served (its start-up listing done) until after the warm round. The body of each set's tools/list is read by a plain HTTP client after the rounds. Vigil's CPU is from /proc/PID/stat in 10 ms ticks, the backends' from their threads' scheduler time (ns)."
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_starts_the_backend_through_sh() {
        let c = vigil_config(
            7,
            1000,
            Path::new("/b/vigil-demo-backend"),
            Path::new("/d/backend"),
        );
        assert!(c.contains("max_sessions = 1100"));
        assert!(c.contains(
            r#"args = ["-c", "exec \"$0\" 2>>\"$1/stderr-$$.log\"", "/b/vigil-demo-backend", "/d/backend"]"#
        ));
        assert!(c.contains("[poller]\ninterval = \"0s\""));
    }

    #[test]
    fn sets_parse_as_client_capabilities() {
        for (_, caps) in SETS {
            let parsed: ClientCapabilities = serde_json::from_str(caps).unwrap();
            let back = serde_json::to_value(&parsed).unwrap();
            assert_eq!(
                back,
                serde_json::from_str::<serde_json::Value>(caps).unwrap()
            );
        }
    }

    #[test]
    fn tools_are_counted_in_json_and_sse() {
        let json = br#"{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"a"},{"name":"b"}]}}"#;
        assert_eq!(tools_in(json, "application/json").unwrap(), 2);
        let sse = b"id: 0\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"tools\":[]}}\n\n";
        assert_eq!(tools_in(sse, "text/event-stream").unwrap(), 0);
    }
}
