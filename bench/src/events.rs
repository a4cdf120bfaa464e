//! `vigil-bench events`: what the control API's event stream
//! (`GET /api/v1/events`, the dashboard's feed) costs and how fast it
//! delivers, with many backends and many open dashboards.
//!
//! One `vigil-demo-backend --endpoints N` process serves N MCP endpoints and
//! one `vigil serve` monitors them as N remote HTTP backends (as in
//! `probes.rs`), with a moderate health interval (`--interval`, default
//! 10s). Once every instance is `running` and the start-up has settled, in
//! one run:
//!
//! 1. **0 streams**: Vigil's CPU over `--window` seconds before any stream
//!    was ever opened (the event hub starts with the first stream).
//! 2. **1 stream**: one stream opened alone (time to its `hello`, its size),
//!    then the same window; then one more stream opened alone, read to its
//!    `hello` and closed (the `hello` with the hub already running).
//! 3. **N streams, idle**: the other N-1 opened at once (time to each
//!    `hello`), then the same window: CPU, and the bytes each stream
//!    received (the 2 s `instances` pushes).
//! 4. **Transitions, one at a time**: for K backends, `POST .../quarantine`
//!    then `POST .../release`, each waiting until every stream has the
//!    resulting `transition` event (`to` = `quarantined`, then
//!    `restarting`). Latency = receipt at a stream minus the moment the
//!    bench sent the request (one clock: the bench's); also receipt minus
//!    the transition's own `at` (Vigil's wall clock, same machine, whole
//!    ms).
//! 5. **Bursts**: the K quarantines sent at once, until every stream has all
//!    K; then the K releases the same way. Vigil's CPU over each burst.
//! 6. **0 streams after closing**: every stream closed, the same window.
//!
//! The stream readers are this bench's tasks on one runtime worker: they
//! compete with Vigil for the machine's CPUs, and their receipt times
//! include their own scheduling. They stay cheap: one task per stream, a
//! byte count per chunk, a scan for the blank line ending each event, and
//! JSON parsing only of `transition` events (and, on stream 0 alone, of
//! everything, for the event sizes and report counts).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, anyhow, bail};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::fanout::raise_fd_limit;
use crate::machine::{self, Machine};
use crate::probes::{self, Api, literal_secs, parse_duration_literal};
use crate::procs::{self, Server};
use crate::resolve_bin_dir;

/// Benchmark the control API's event stream: delivery latency and Vigil's
/// CPU with many backends and many open streams.
#[derive(Debug, clap::Args)]
pub struct EventArgs {
    /// Backends Vigil monitors (all served by one demo backend process).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=20_000))]
    backends: u32,

    /// Event streams (dashboards) opened on `GET /api/v1/events`.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    streams: u32,

    /// Backends quarantined and released, one at a time and then in bursts.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=20_000))]
    transitions: u32,

    /// Probe interval (`[health] interval`). Every probe moves a backend's
    /// `latency_ms`, so it sets how many reports each 2 s `instances` push
    /// carries (about backends × 2 s / interval).
    #[arg(long, default_value = "10s", value_parser = parse_duration_literal)]
    interval: String,

    /// Probe timeout (`[health] timeout`).
    #[arg(long, default_value = "5s", value_parser = parse_duration_literal)]
    timeout: String,

    /// Seconds of each CPU window (0 streams, 1 stream, N idle streams, 0
    /// after closing).
    #[arg(long, default_value_t = 10.0, value_name = "SECS")]
    window: f64,

    /// Seconds to wait after every instance is `running`, and after opening
    /// or closing streams, before a window.
    #[arg(long, default_value_t = 5.0, value_name = "SECS")]
    settle: f64,

    /// Longest wait for every instance to be `running`.
    #[arg(long, default_value_t = 180.0, value_name = "SECS")]
    ready_timeout: f64,

    /// Longest wait for every stream's `hello`, and for every stream to get
    /// one transition (or a whole burst).
    #[arg(long, default_value_t = 30.0, value_name = "SECS")]
    deadline: f64,

    /// Directory holding the `vigil` and `vigil-demo-backend` binaries.
    /// Default: `${CARGO_TARGET_DIR:-target}/release`, else the directory of
    /// this binary.
    #[arg(long, value_name = "DIR")]
    bin_dir: Option<PathBuf>,

    /// Keep the config and logs in this directory (default: a scratch
    /// directory, removed at the end).
    #[arg(long, value_name = "DIR")]
    log_dir: Option<PathBuf>,

    /// Also write the results as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

/// Milliseconds since the Unix epoch on a monotonic base: the wall clock
/// read once, advanced by `Instant`, so differences never jump.
#[derive(Clone, Copy)]
struct Clock {
    base: std::time::Instant,
    base_ms: f64,
}

impl Clock {
    fn new() -> Self {
        let base_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0);
        Self {
            base: std::time::Instant::now(),
            base_ms,
        }
    }
    fn now(&self) -> f64 {
        self.base_ms + self.base.elapsed().as_secs_f64() * 1000.0
    }
}

/// A stream's first `hello`.
#[derive(Debug, Clone, Copy)]
struct Hello {
    /// From sending the request to the end of the event, ms.
    ms: f64,
    /// The event's bytes on the wire.
    bytes: usize,
    /// When it ended (bench clock, ms since the epoch).
    t: f64,
}

/// One event stream 0 received (the others only count).
#[derive(Debug, Clone)]
struct Seen {
    kind: &'static str,
    bytes: usize,
    /// Reports in an `instances` event (or in a `hello`).
    reports: usize,
    /// Backends with transitions in a `hello`, and the transitions listed.
    hello_histories: usize,
    hello_transitions: usize,
}

/// A transition the bench caused and waits for on every stream.
#[derive(Debug, Clone)]
struct Expect {
    backend: String,
    to: &'static str,
    /// When the request was sent.
    sent: f64,
    /// When the API answered, and with which status.
    answered: Option<f64>,
    status: Option<u16>,
    /// The transition's own `at` (ms since the epoch, whole ms).
    at: Option<f64>,
    /// Receipt per stream.
    receipts: Vec<Option<f64>>,
    heard: usize,
}

impl Expect {
    fn latencies(&self) -> impl Iterator<Item = f64> + '_ {
        self.receipts.iter().flatten().map(move |t| t - self.sent)
    }
    fn last(&self) -> Option<f64> {
        self.receipts
            .iter()
            .flatten()
            .copied()
            .reduce(f64::max)
            .map(|t| t - self.sent)
    }
}

#[derive(Default)]
struct Inner {
    hellos: Vec<Option<Hello>>,
    /// `hello`s after a stream's first (it fell behind and was resynced).
    resyncs: u64,
    /// Why a stream ended, if it did.
    ended: Vec<Option<String>>,
    pending: HashMap<(String, &'static str), usize>,
    expects: Vec<Expect>,
    /// Events and bytes by type, all streams.
    by_kind: BTreeMap<&'static str, (u64, u64)>,
    /// Stream 0's events.
    log0: Vec<Seen>,
}

/// What every stream reader reports to.
struct Board {
    clock: Clock,
    streams: usize,
    bytes: AtomicU64,
    inner: Mutex<Inner>,
    notify: Notify,
}

impl Board {
    fn new(clock: Clock, streams: usize) -> Self {
        Self {
            clock,
            streams,
            bytes: AtomicU64::new(0),
            inner: Mutex::new(Inner {
                hellos: vec![None; streams],
                ended: vec![None; streams],
                ..Inner::default()
            }),
            notify: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a transition to wait for; its `sent` is now (call right
    /// before sending, or [`Board::sent`] later).
    fn expect(&self, backend: &str, to: &'static str) -> usize {
        let mut inner = self.lock();
        let ix = inner.expects.len();
        inner.expects.push(Expect {
            backend: backend.to_owned(),
            to,
            sent: self.clock.now(),
            answered: None,
            status: None,
            at: None,
            receipts: vec![None; self.streams],
            heard: 0,
        });
        inner.pending.insert((backend.to_owned(), to), ix);
        ix
    }

    fn sent(&self, ix: usize) {
        let now = self.clock.now();
        self.lock().expects[ix].sent = now;
    }

    fn answered(&self, ix: usize, status: Option<u16>) {
        let now = self.clock.now();
        let mut inner = self.lock();
        inner.expects[ix].answered = Some(now);
        inner.expects[ix].status = status;
    }

    /// One complete event from stream `id`, ended at `t`.
    fn event(&self, id: usize, block: &[u8], wire: usize, t: f64, opened: f64) {
        let (kind, data) = parse_event(block);
        let Some(kind) = kind else {
            // A keep-alive comment, or `retry:` alone.
            return;
        };
        let kind = known_kind(kind);
        // Parse only what is needed, outside the lock: of a `transition`,
        // the three fields (the report in it is skipped unbuilt).
        let transition = (kind == "transition")
            .then(|| serde_json::from_slice::<TransitionEvent<'_>>(&data).ok())
            .flatten()
            .map(|e| (e.transition.backend, e.transition.to, e.transition.at));
        let seen = (id == 0).then(|| {
            let v: Value = serde_json::from_slice(&data).unwrap_or(Value::Null);
            let histories = v["transitions"].as_object();
            Seen {
                kind,
                bytes: wire,
                reports: v["instances"].as_array().map_or(0, Vec::len),
                hello_histories: histories.map_or(0, |h| h.len()),
                hello_transitions: histories.map_or(0, |h| {
                    h.values().map(|l| l.as_array().map_or(0, Vec::len)).sum()
                }),
            }
        });

        let mut inner = self.lock();
        let e = inner.by_kind.entry(kind).or_default();
        e.0 += 1;
        e.1 += wire as u64;
        if let Some(s) = seen {
            inner.log0.push(s);
        }
        match kind {
            "hello" => {
                if inner.hellos[id].is_none() {
                    inner.hellos[id] = Some(Hello {
                        ms: t - opened,
                        bytes: wire,
                        t,
                    });
                } else {
                    inner.resyncs += 1;
                }
                self.notify.notify_waiters();
            }
            "transition" => {
                if let Some((backend, to, at)) = transition
                    && let Some(&ix) = inner.pending.get(&(backend.into_owned(), to_static(&to)))
                {
                    let e = &mut inner.expects[ix];
                    // Not an earlier transition of the same kind.
                    let fresh = at.is_none_or(|at| at >= e.sent.floor() - 1.0);
                    if fresh && e.receipts[id].is_none() {
                        e.receipts[id] = Some(t);
                        e.at = e.at.or(at);
                        e.heard += 1;
                        if e.heard == self.streams {
                            let key = (e.backend.clone(), e.to);
                            inner.pending.remove(&key);
                        }
                        self.notify.notify_waiters();
                    }
                }
            }
            _ => {}
        }
    }

    fn ended(&self, id: usize, why: String) {
        self.lock().ended[id] = Some(why);
        self.notify.notify_waiters();
    }

    /// Waits until `done` holds, `within` passes or a server exits; returns
    /// whether `done` held.
    async fn wait(
        &self,
        within: Duration,
        servers: &mut [&mut Server],
        done: impl Fn(&Inner) -> bool,
    ) -> anyhow::Result<bool> {
        let deadline = Instant::now() + within;
        loop {
            let notified = self.notify.notified();
            if done(&self.lock()) {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            for s in servers.iter_mut() {
                s.check_alive()?;
            }
            let _ = tokio::time::timeout(Duration::from_millis(100), notified).await;
        }
    }
}

/// The fields of a `transition` event the bench reads.
#[derive(Deserialize)]
struct TransitionEvent<'a> {
    #[serde(borrow)]
    transition: TransitionFields<'a>,
}

#[derive(Deserialize)]
struct TransitionFields<'a> {
    #[serde(borrow)]
    backend: Cow<'a, str>,
    #[serde(borrow)]
    to: Cow<'a, str>,
    at: Option<f64>,
}

/// Event types as static strings (anything else is `other`).
fn known_kind(kind: &str) -> &'static str {
    match kind {
        "hello" => "hello",
        "transition" => "transition",
        "instances" => "instances",
        "plugins" => "plugins",
        "message" => "message",
        _ => "other",
    }
}

/// The transition targets the bench waits for, as static strings.
fn to_static(s: &str) -> &'static str {
    match s {
        "quarantined" => "quarantined",
        "restarting" => "restarting",
        _ => "other",
    }
}

/// The `event:` name and the `data:` of one SSE event block (without its
/// terminating blank line). No name and no data: a comment.
fn parse_event(block: &[u8]) -> (Option<&str>, Cow<'_, [u8]>) {
    let mut kind = None;
    let mut data: Option<Cow<'_, [u8]>> = None;
    for line in block.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() || line[0] == b':' {
            continue;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"event" => kind = std::str::from_utf8(value).ok(),
            b"data" => {
                data = Some(match data {
                    None => Cow::Borrowed(value),
                    Some(d) => {
                        let mut d = d.into_owned();
                        d.push(b'\n');
                        d.extend_from_slice(value);
                        Cow::Owned(d)
                    }
                })
            }
            _ => {}
        }
    }
    // An event without a name is a `message`.
    let kind = kind.or(data.as_ref().map(|_| "message"));
    (kind, data.unwrap_or(Cow::Borrowed(b"")))
}

/// Opens one more stream, reads its `hello` and closes it.
async fn one_hello(client: &reqwest::Client, url: &str, clock: Clock) -> anyhow::Result<Hello> {
    let opened = clock.now();
    let mut answer = client
        .get(url)
        .header("accept", "text/event-stream")
        .send()
        .await?;
    if !answer.status().is_success() {
        bail!("{url} answered {}", answer.status());
    }
    let mut buf: Vec<u8> = Vec::new();
    while let Some(chunk) = answer.chunk().await? {
        let t = clock.now();
        let from = buf.len().saturating_sub(1);
        buf.extend_from_slice(&chunk);
        if let Some(i) = find_blank_line(&buf[from..]) {
            let end = from + i;
            if parse_event(&buf[..end]).0 != Some("hello") {
                bail!("the stream did not start with a hello");
            }
            return Ok(Hello {
                ms: t - opened,
                bytes: end + 2,
                t,
            });
        }
    }
    bail!("the stream ended before its hello")
}

/// Reads one stream until it ends or its task is aborted.
async fn read_stream(id: usize, client: reqwest::Client, url: String, board: Arc<Board>) {
    let opened = board.clock.now();
    let result: anyhow::Result<()> = async {
        let mut answer = client
            .get(&url)
            .header("accept", "text/event-stream")
            .send()
            .await?;
        if !answer.status().is_success() {
            let status = answer.status();
            bail!("{url} answered {status}: {}", answer.text().await?);
        }
        let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
        // Where to resume looking for the blank line.
        let mut scanned = 0usize;
        while let Some(chunk) = answer.chunk().await? {
            let t = board.clock.now();
            board.bytes.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            buf.extend_from_slice(&chunk);
            let mut start = 0usize;
            loop {
                let from = scanned.max(start);
                match find_blank_line(&buf[from..]) {
                    Some(i) => {
                        let end = from + i;
                        board.event(id, &buf[start..end], end + 2 - start, t, opened);
                        start = end + 2;
                        scanned = start;
                    }
                    None => {
                        // A trailing `\n` may pair with the next chunk's.
                        scanned = buf.len().saturating_sub(1).max(start);
                        break;
                    }
                }
            }
            buf.drain(..start);
            scanned -= start;
        }
        Ok(())
    }
    .await;
    board.ended(
        id,
        match result {
            Ok(()) => "the server ended the stream".to_owned(),
            Err(e) => format!("{e:#}"),
        },
    );
}

fn find_blank_line(b: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = b[from..].iter().position(|&c| c == b'\n') {
        let at = from + i;
        if b.get(at + 1) == Some(&b'\n') {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// CPU and traffic over one window.
#[derive(Debug, Clone)]
struct Window {
    label: &'static str,
    streams: usize,
    secs: f64,
    cpu_vigil: f64,
    cpu_backend: f64,
    cpu_bench: f64,
    machine_busy: f64,
    other_cores: f64,
    /// Bytes all streams received in the window.
    bytes: u64,
    /// Stream 0's `instances` events in the window: count, mean bytes, mean
    /// reports.
    instances_events: usize,
    instances_mean_bytes: f64,
    instances_mean_reports: f64,
    vigil_rss_mib: f64,
    vigil_threads: u64,
    vigil_fds: u64,
}

impl Window {
    fn vigil_pct(&self) -> f64 {
        self.cpu_vigil / self.secs * 100.0
    }
    fn bytes_per_stream_s(&self) -> f64 {
        if self.streams == 0 {
            0.0
        } else {
            self.bytes as f64 / self.streams as f64 / self.secs
        }
    }
    fn line(&self) -> String {
        format!(
            "{:<24} {:>4} streams: CPU vigil {:>5.1}% backend {:>4.1}% bench {:>4.1}% of a core | {:>7.0} B/s per stream ({} `instances` events on stream 0, {:.0} reports / {:.0} B each) | vigil RSS {:.0} MiB, {} threads, {} fds | busy {:.0}% (others {:.2} CPUs)",
            self.label,
            self.streams,
            self.vigil_pct(),
            self.cpu_backend / self.secs * 100.0,
            self.cpu_bench / self.secs * 100.0,
            self.bytes_per_stream_s(),
            self.instances_events,
            self.instances_mean_reports,
            self.instances_mean_bytes,
            self.vigil_rss_mib,
            self.vigil_threads,
            self.vigil_fds,
            self.machine_busy * 100.0,
            self.other_cores,
        )
    }
    fn json(&self) -> Value {
        json!({
            "label": self.label,
            "streams": self.streams,
            "window_s": self.secs,
            "cpu_s": { "vigil": self.cpu_vigil, "backend": self.cpu_backend, "bench": self.cpu_bench },
            "vigil_core_share": self.cpu_vigil / self.secs,
            "machine_busy": self.machine_busy,
            "other_processes_cores": self.other_cores,
            "bytes": self.bytes,
            "bytes_per_stream_per_s": self.bytes_per_stream_s(),
            "stream0_instances_events": self.instances_events,
            "instances_event_mean_bytes": self.instances_mean_bytes,
            "instances_event_mean_reports": self.instances_mean_reports,
            "vigil": { "rss_mib": self.vigil_rss_mib, "threads": self.vigil_threads, "fds": self.vigil_fds },
        })
    }
}

/// The processes whose CPU is read.
#[derive(Clone, Copy)]
struct Pids {
    vigil: Option<u32>,
    backend: Option<u32>,
}

#[derive(Clone, Copy)]
struct CpuMark {
    vigil: f64,
    backend: f64,
    bench: f64,
    machine: machine::CpuTimes,
    at: Instant,
}

impl CpuMark {
    fn take(p: Pids) -> Self {
        let cpu = |pid: Option<u32>| {
            pid.and_then(|p| machine::process_cpu_seconds(Some(p)))
                .unwrap_or(0.0)
        };
        Self {
            vigil: cpu(p.vigil),
            backend: cpu(p.backend),
            bench: machine::process_cpu_seconds(None).unwrap_or(0.0),
            machine: machine::cpu_times(),
            at: Instant::now(),
        }
    }
}

async fn window(
    label: &'static str,
    streams: usize,
    secs: f64,
    pids: Pids,
    board: &Board,
    servers: &mut [&mut Server],
) -> anyhow::Result<Window> {
    let log_from = board.lock().log0.len();
    let b0 = board.bytes.load(Ordering::Relaxed);
    let m0 = CpuMark::take(pids);
    let end = m0.at + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        for s in servers.iter_mut() {
            s.check_alive()?;
        }
        tokio::time::sleep(Duration::from_millis(500).min(end - Instant::now())).await;
    }
    let m1 = CpuMark::take(pids);
    let b1 = board.bytes.load(Ordering::Relaxed);
    let secs = (m1.at - m0.at).as_secs_f64();
    let (n, bytes, reports) = {
        let inner = board.lock();
        let inst: Vec<&Seen> = inner.log0[log_from..]
            .iter()
            .filter(|s| s.kind == "instances")
            .collect();
        (
            inst.len(),
            inst.iter().map(|s| s.bytes).sum::<usize>(),
            inst.iter().map(|s| s.reports).sum::<usize>(),
        )
    };
    let mean = |x: usize| if n == 0 { 0.0 } else { x as f64 / n as f64 };
    let busy = machine::busy_fraction(&m0.machine, &m1.machine);
    let ours = (m1.vigil - m0.vigil) + (m1.backend - m0.backend) + (m1.bench - m0.bench);
    let status = pids.vigil.map(probes::proc_status);
    let w = Window {
        label,
        streams,
        secs,
        cpu_vigil: m1.vigil - m0.vigil,
        cpu_backend: m1.backend - m0.backend,
        cpu_bench: m1.bench - m0.bench,
        machine_busy: busy,
        other_cores: (busy * machine::online_cpus() as f64 - ours / secs).max(0.0),
        bytes: b1 - b0,
        instances_events: n,
        instances_mean_bytes: mean(bytes),
        instances_mean_reports: mean(reports),
        vigil_rss_mib: status.as_ref().map_or(0.0, |s| s.rss_mib),
        vigil_threads: status.as_ref().map_or(0, |s| s.threads),
        vigil_fds: pids.vigil.map_or(0, probes::count_fds),
    };
    println!("{}", w.line());
    Ok(w)
}

/// Delivery figures of a set of caused transitions.
#[derive(Debug, Clone)]
struct Delivery {
    label: &'static str,
    events: usize,
    /// (event, stream) pairs expected and received.
    expected: usize,
    received: usize,
    /// Receipt − request sent, every pair, ms, sorted.
    latency: Vec<f64>,
    /// Receipt − `at`, every pair, ms, sorted.
    since_at: Vec<f64>,
    /// Per event: last stream's receipt − sent, ms, sorted.
    last: Vec<f64>,
    /// Per event: `at` − sent, ms, sorted.
    sent_to_at: Vec<f64>,
    /// Per event: the API's answer − sent, ms, sorted.
    answer: Vec<f64>,
    /// Bursts: from the first request sent to the last receipt anywhere, ms.
    all_in: Option<f64>,
    /// Bursts: CPU seconds over `all_in`.
    cpu_vigil: Option<f64>,
    cpu_backend: Option<f64>,
    cpu_bench: Option<f64>,
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

/// Nearest-rank quantile of sorted values (NaN if empty).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn fmt(v: f64) -> String {
    if v.is_nan() {
        "-".to_owned()
    } else {
        format!("{v:.1}")
    }
}

impl Delivery {
    fn of(label: &'static str, expects: &[Expect], streams: usize) -> Self {
        Self {
            label,
            events: expects.len(),
            expected: expects.len() * streams,
            received: expects.iter().map(|e| e.heard).sum(),
            latency: sorted(expects.iter().flat_map(Expect::latencies).collect()),
            since_at: sorted(
                expects
                    .iter()
                    .filter_map(|e| e.at.map(|at| (e, at)))
                    .flat_map(|(e, at)| e.receipts.iter().flatten().map(move |t| t - at))
                    .collect(),
            ),
            last: sorted(expects.iter().filter_map(Expect::last).collect()),
            sent_to_at: sorted(
                expects
                    .iter()
                    .filter_map(|e| e.at.map(|at| at - e.sent))
                    .collect(),
            ),
            answer: sorted(
                expects
                    .iter()
                    .filter_map(|e| e.answered.map(|a| a - e.sent))
                    .collect(),
            ),
            all_in: None,
            cpu_vigil: None,
            cpu_backend: None,
            cpu_bench: None,
        }
    }

    fn line(&self) -> String {
        let q = |v: &[f64], p: f64| fmt(quantile(v, p));
        let mut s = format!(
            "{:<20} {} events: received {}/{} | ms after the request: p50 {} p99 {} max {} | last stream per event: p50 {} max {} | receipt - at: p50 {} p99 {} max {} | request -> at p50 {} | API answer p50 {}",
            self.label,
            self.events,
            self.received,
            self.expected,
            q(&self.latency, 0.5),
            q(&self.latency, 0.99),
            q(&self.latency, 1.0),
            q(&self.last, 0.5),
            q(&self.last, 1.0),
            q(&self.since_at, 0.5),
            q(&self.since_at, 0.99),
            q(&self.since_at, 1.0),
            q(&self.sent_to_at, 0.5),
            q(&self.answer, 0.5),
        );
        if let (Some(all), Some(v), Some(d), Some(b)) = (
            self.all_in,
            self.cpu_vigil,
            self.cpu_backend,
            self.cpu_bench,
        ) {
            s.push_str(&format!(
                " | all in after {all:.1} ms, CPU vigil {:.0} ms, backend {:.0} ms, bench {:.0} ms",
                v * 1000.0,
                d * 1000.0,
                b * 1000.0
            ));
        }
        s
    }

    fn json(&self) -> Value {
        let q = |v: &[f64]| {
            json!({
                "p50": nan_null(quantile(v, 0.5)),
                "p99": nan_null(quantile(v, 0.99)),
                "max": nan_null(quantile(v, 1.0)),
            })
        };
        json!({
            "label": self.label,
            "events": self.events,
            "expected_pairs": self.expected,
            "received_pairs": self.received,
            "latency_ms": q(&self.latency),
            "receipt_minus_at_ms": q(&self.since_at),
            "last_stream_ms": q(&self.last),
            "request_to_at_ms": q(&self.sent_to_at),
            "api_answer_ms": q(&self.answer),
            "all_in_ms": self.all_in,
            "cpu_s": self.cpu_vigil.map(|v| json!({ "vigil": v, "backend": self.cpu_backend, "bench": self.cpu_bench })),
        })
    }
}

fn nan_null(v: f64) -> Value {
    if v.is_nan() { Value::Null } else { json!(v) }
}

/// `hello` figures.
struct Hellos {
    /// Stream 0, opened alone (it starts the hub).
    first: Hello,
    /// One more stream opened alone while stream 0 was open and idle (the
    /// hub running), read up to its `hello` and closed.
    alone: Hello,
    /// Streams 1..N, opened at once: ms and bytes, sorted.
    rest_ms: Vec<f64>,
    rest_bytes: Vec<usize>,
    /// From opening streams 1..N until the last had its hello, ms.
    rest_all_in: f64,
    /// Stream 0's hello: reports, backends with a history, transitions listed.
    reports: usize,
    histories: usize,
    transitions: usize,
}

struct Bins {
    vigil: PathBuf,
    backend: PathBuf,
}

pub async fn run(args: &EventArgs) -> anyhow::Result<()> {
    if !args.window.is_finite()
        || args.window < 1.0
        || !args.settle.is_finite()
        || args.settle < 0.0
        || !args.ready_timeout.is_finite()
        || args.ready_timeout <= 0.0
        || !args.deadline.is_finite()
        || args.deadline <= 0.0
    {
        bail!("--window must be >= 1, --settle >= 0, --ready-timeout and --deadline > 0");
    }
    if literal_secs(&args.timeout) > literal_secs(&args.interval) {
        bail!("--timeout must not exceed --interval (Vigil refuses it)");
    }
    if args.transitions > args.backends {
        bail!("--transitions must not exceed --backends");
    }
    let bin_dir = resolve_bin_dir(args.bin_dir.as_deref())?;
    let bins = Bins {
        vigil: bin_dir.join("vigil"),
        backend: bin_dir.join("vigil-demo-backend"),
    };
    let (soft, hard) = raise_fd_limit();
    let machine = Machine::detect();
    let (n, streams, k) = (
        args.backends,
        args.streams as usize,
        args.transitions as usize,
    );
    println!("vigil-bench {} events", env!("CARGO_PKG_VERSION"));
    println!("{machine}");
    println!(
        "plan: {n} backends ([health] interval {}, timeout {}), {streams} streams on GET /api/v1/events; CPU windows of {}s (0 streams, 1, {streams} idle, 0 after closing), {}s settle before each; {k} quarantine + release one at a time, then {k} quarantines and {k} releases at once; bench: one runtime worker, one task per stream, fd limit {soft} (hard {hard})",
        args.interval, args.timeout, args.window, args.settle,
    );
    if let Some(v) = procs::version(&bins.vigil).await {
        println!(
            "gateway: {v}, log_level = warn, one vigil-demo-backend process serving /mcp/0 ... /mcp/{}",
            n - 1
        );
    }
    println!();

    let (dir, _scratch) = procs::log_dir(args.log_dir.as_deref())?;
    let dir = dir.join(format!("events-n{n}-s{streams}"));
    probes::fresh_dir(&dir)?;
    let (mut backend, backend_port) = probes::many_endpoints(&bins.backend, n, &dir).await?;

    let (vigil_port, api_port) = (procs::free_port()?, procs::free_port()?);
    let config = dir.join("vigil.toml");
    std::fs::write(
        &config,
        vigil_config(
            n,
            backend_port,
            vigil_port,
            api_port,
            &args.interval,
            &args.timeout,
        ),
    )
    .with_context(|| format!("cannot write {}", config.display()))?;
    let vigil_log = dir.join("vigil.log");
    let launched = Instant::now();
    let mut vigil = Server::vigil(&bins.vigil, &config, None, vigil_log.clone())?;
    let api = Api::new(api_port)?;
    let ready = Duration::from_secs_f64(args.ready_timeout);
    probes::wait_all_running(&api, &mut vigil, &mut backend, n, ready)
        .await
        .with_context(|| match &args.log_dir {
            Some(_) => format!("Vigil's log is {}", vigil_log.display()),
            None => "run again with --log-dir DIR to keep Vigil's log".to_owned(),
        })?;
    println!(
        "{n} backends running after {:.1}s",
        launched.elapsed().as_secs_f64()
    );
    let pids = Pids {
        vigil: vigil.pid(),
        backend: backend.pid(),
    };
    let settle = Duration::from_secs_f64(args.settle);
    let within = Duration::from_secs_f64(args.deadline);
    settle_for(settle, &mut [&mut vigil, &mut backend]).await?;

    let clock = Clock::new();
    let board = Arc::new(Board::new(clock, streams));
    let mut windows = Vec::new();

    // 1. No stream has ever been opened: the hub has not started.
    windows.push(
        window(
            "0 streams (hub not started)",
            0,
            args.window,
            pids,
            &board,
            &mut [&mut vigil, &mut backend],
        )
        .await?,
    );

    // 2. One stream, alone.
    let events_url = format!("http://127.0.0.1:{api_port}/api/v1/events");
    let stream_client = reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(Duration::from_secs(5))
        .pool_max_idle_per_host(0)
        .build()
        .context("cannot build the HTTP client")?;
    let mut readers: Vec<JoinHandle<()>> = Vec::with_capacity(streams);
    readers.push(tokio::spawn(read_stream(
        0,
        stream_client.clone(),
        events_url.clone(),
        board.clone(),
    )));
    wait_hellos(&board, 0..1, within, &mut [&mut vigil, &mut backend]).await?;
    let first = board.lock().hellos[0].expect("waited for");
    let (reports, histories, transitions) = board
        .lock()
        .log0
        .iter()
        .find(|s| s.kind == "hello")
        .map_or((0, 0, 0), |s| {
            (s.reports, s.hello_histories, s.hello_transitions)
        });
    println!(
        "stream 0 alone: hello after {:.1} ms, {} bytes ({reports} reports, {histories} backends with transitions, {transitions} transitions)",
        first.ms, first.bytes
    );
    settle_for(settle, &mut [&mut vigil, &mut backend]).await?;
    windows.push(
        window(
            "1 stream, idle",
            1,
            args.window,
            pids,
            &board,
            &mut [&mut vigil, &mut backend],
        )
        .await?,
    );
    let alone = tokio::time::timeout(within, one_hello(&stream_client, &events_url, clock))
        .await
        .map_err(|_| anyhow!("no hello within {}s", args.deadline))?
        .context("one more stream, alone")?;
    println!(
        "one more stream alone (hub running): hello after {:.1} ms, {} bytes",
        alone.ms, alone.bytes
    );
    settle_for(Duration::from_secs(1), &mut [&mut vigil, &mut backend]).await?;

    // 3. The other N-1 at once, then idle.
    let opening = clock.now();
    for id in 1..streams {
        readers.push(tokio::spawn(read_stream(
            id,
            stream_client.clone(),
            events_url.clone(),
            board.clone(),
        )));
    }
    wait_hellos(&board, 0..streams, within, &mut [&mut vigil, &mut backend]).await?;
    let hellos = {
        let inner = board.lock();
        let rest: Vec<Hello> = inner.hellos[1..].iter().flatten().copied().collect();
        let last_t = rest.iter().map(|h| h.t).fold(f64::NAN, f64::max);
        Hellos {
            first,
            alone,
            rest_ms: sorted(rest.iter().map(|h| h.ms).collect()),
            rest_bytes: {
                let mut b: Vec<usize> = rest.iter().map(|h| h.bytes).collect();
                b.sort_unstable();
                b
            },
            rest_all_in: last_t - opening,
            reports,
            histories,
            transitions,
        }
    };
    if streams > 1 {
        println!(
            "streams 1..{streams} at once: hello ms p50 {} p99 {} max {}, bytes {}..{}; all {} had theirs {:.0} ms after the first was opened",
            fmt(quantile(&hellos.rest_ms, 0.5)),
            fmt(quantile(&hellos.rest_ms, 0.99)),
            fmt(quantile(&hellos.rest_ms, 1.0)),
            hellos.rest_bytes.first().copied().unwrap_or(0),
            hellos.rest_bytes.last().copied().unwrap_or(0),
            streams - 1,
            hellos.rest_all_in,
        );
        settle_for(settle, &mut [&mut vigil, &mut backend]).await?;
        windows.push(
            window(
                "N streams, idle",
                streams,
                args.window,
                pids,
                &board,
                &mut [&mut vigil, &mut backend],
            )
            .await?,
        );
    }

    // 4. Transitions one at a time.
    // Actions need `X-Vigil-Request` (or a token): a page on another
    // origin cannot send it, so the control API refuses POSTs without it.
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        "x-vigil-request",
        reqwest::header::HeaderValue::from_static("1"),
    );
    let post = reqwest::Client::builder()
        .no_proxy()
        .default_headers(headers)
        .timeout(Duration::from_secs(10))
        .build()
        .context("cannot build the HTTP client")?;
    let instance_url = |name: &str, action: &str| {
        format!("http://127.0.0.1:{api_port}/api/v1/health/instances/{name}/{action}")
    };
    let names: Vec<String> = (0..k).map(|i| format!("b{}", i * n as usize / k)).collect();
    let mut seq = Vec::with_capacity(2 * k);
    for name in &names {
        for (action, to) in [("quarantine", "quarantined"), ("release", "restarting")] {
            let ix = board.expect(name, to);
            let answer = post.post(instance_url(name, action)).send().await;
            board.answered(ix, answer.as_ref().ok().map(|a| a.status().as_u16()));
            let answer = answer.with_context(|| format!("{action} {name}"))?;
            if !answer.status().is_success() {
                bail!(
                    "{action} {name}: {} {}",
                    answer.status(),
                    answer.text().await.unwrap_or_default()
                );
            }
            let all = board
                .wait(within, &mut [&mut vigil, &mut backend], |i| {
                    i.expects[ix].heard == streams
                })
                .await?;
            if !all {
                println!(
                    "  {action} {name}: only {} of {streams} streams had the transition after {}s",
                    board.lock().expects[ix].heard,
                    args.deadline
                );
            }
            seq.push(ix);
        }
    }
    let sequential = {
        let inner = board.lock();
        let e: Vec<Expect> = seq.iter().map(|&i| inner.expects[i].clone()).collect();
        Delivery::of("one at a time", &e, streams)
    };
    println!("{}", sequential.line());
    probes::wait_all_running(&api, &mut vigil, &mut backend, n, ready).await?;
    settle_for(Duration::from_secs(2), &mut [&mut vigil, &mut backend]).await?;

    // 5. Bursts: all K quarantines at once, then all K releases.
    let mut bursts = Vec::new();
    for (label, action, to) in [
        ("burst: quarantine", "quarantine", "quarantined"),
        ("burst: release", "release", "restarting"),
    ] {
        let ixs: Vec<usize> = names.iter().map(|name| board.expect(name, to)).collect();
        let m0 = CpuMark::take(pids);
        let first_sent = clock.now();
        let answers = futures::future::join_all(names.iter().zip(&ixs).map(|(name, &ix)| {
            let (post, board, url) = (&post, &board, instance_url(name, action));
            async move {
                board.sent(ix);
                let answer = post.post(url).send().await;
                board.answered(ix, answer.as_ref().ok().map(|a| a.status().as_u16()));
                answer
            }
        }))
        .await;
        let all = board
            .wait(within, &mut [&mut vigil, &mut backend], |i| {
                ixs.iter().all(|&ix| i.expects[ix].heard == streams)
            })
            .await?;
        let m1 = CpuMark::take(pids);
        for (name, a) in names.iter().zip(answers) {
            let a = a.with_context(|| format!("{action} {name}"))?;
            if !a.status().is_success() {
                bail!("{action} {name}: {}", a.status());
            }
        }
        let mut d = {
            let inner = board.lock();
            let e: Vec<Expect> = ixs.iter().map(|&i| inner.expects[i].clone()).collect();
            let last = e
                .iter()
                .flat_map(|e| e.receipts.iter().flatten().copied())
                .fold(f64::NAN, f64::max);
            let mut d = Delivery::of(label, &e, streams);
            d.all_in = Some(last - first_sent);
            d
        };
        d.cpu_vigil = Some(m1.vigil - m0.vigil);
        d.cpu_backend = Some(m1.backend - m0.backend);
        d.cpu_bench = Some(m1.bench - m0.bench);
        if !all {
            println!(
                "  {label}: not every stream had all {k} transitions after {}s",
                args.deadline
            );
        }
        println!("{}", d.line());
        bursts.push(d);
        settle_for(Duration::from_secs(1), &mut [&mut vigil, &mut backend]).await?;
    }
    probes::wait_all_running(&api, &mut vigil, &mut backend, n, ready).await?;

    // 6. Every stream closed.
    for r in &readers {
        r.abort();
    }
    for r in readers {
        let _ = r.await;
    }
    settle_for(settle, &mut [&mut vigil, &mut backend]).await?;
    windows.push(
        window(
            "0 streams (all closed)",
            0,
            args.window,
            pids,
            &board,
            &mut [&mut vigil, &mut backend],
        )
        .await?,
    );

    vigil.check_alive()?;
    backend.check_alive()?;
    vigil.stop().await;
    backend.stop().await;
    let (problems, examples) = probes::log_problems(&vigil_log);

    let inner = board.lock();
    let ended: Vec<&String> = inner.ended.iter().flatten().collect();
    println!();
    println!("{}", window_table(&windows));
    println!(
        "{}",
        delivery_table(std::iter::once(&sequential).chain(&bursts))
    );
    println!("{}", hello_table(&hellos, streams));
    println!(
        "events received, all streams: {}; hellos after a stream's first (resyncs): {}; streams that ended before being closed: {}",
        inner
            .by_kind
            .iter()
            .map(|(k, (c, b))| format!("{k} {c} ({b} B)"))
            .collect::<Vec<_>>()
            .join(", "),
        inner.resyncs,
        ended.len(),
    );
    if let Some(e) = ended.first() {
        println!("  e.g. {e}");
    }
    if problems > 0 {
        println!("vigil logged {problems} warning/error line(s), e.g.:");
        for l in &examples {
            println!("  {l}");
        }
    }
    println!();
    println!(
        "{}",
        summary(&windows, &sequential, &bursts, &hellos, streams)
    );

    if let Some(path) = &args.json {
        let doc = json!({
            "machine": machine,
            "plan": {
                "backends": n,
                "streams": streams,
                "transitions": k,
                "interval": args.interval,
                "timeout": args.timeout,
                "window_s": args.window,
                "settle_s": args.settle,
            },
            "windows": windows.iter().map(Window::json).collect::<Vec<_>>(),
            "delivery": std::iter::once(&sequential).chain(&bursts).map(Delivery::json).collect::<Vec<_>>(),
            "hello": {
                "alone_hub_running": { "ms": hellos.alone.ms, "bytes": hellos.alone.bytes },
                "first": { "ms": hellos.first.ms, "bytes": hellos.first.bytes,
                           "reports": hellos.reports, "backends_with_transitions": hellos.histories,
                           "transitions": hellos.transitions },
                "rest_ms": { "p50": nan_null(quantile(&hellos.rest_ms, 0.5)),
                             "p99": nan_null(quantile(&hellos.rest_ms, 0.99)),
                             "max": nan_null(quantile(&hellos.rest_ms, 1.0)) },
                "rest_bytes": { "min": hellos.rest_bytes.first(), "max": hellos.rest_bytes.last() },
                "rest_all_in_ms": nan_null(hellos.rest_all_in),
            },
            "events_by_type": inner.by_kind.iter().map(|(k, (c, b))| (k.to_string(), json!({ "events": c, "bytes": b }))).collect::<serde_json::Map<_, _>>(),
            "resyncs": inner.resyncs,
            "streams_ended_early": ended.len(),
            "vigil_log_warnings_and_errors": problems,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
        println!("results written to {}", path.display());
    }
    Ok(())
}

async fn settle_for(d: Duration, servers: &mut [&mut Server]) -> anyhow::Result<()> {
    let end = Instant::now() + d;
    while Instant::now() < end {
        for s in servers.iter_mut() {
            s.check_alive()?;
        }
        tokio::time::sleep(Duration::from_millis(500).min(end - Instant::now())).await;
    }
    Ok(())
}

/// Waits until streams `ids` each have a `hello`; fails naming what is
/// missing (and why a stream ended, if one did).
async fn wait_hellos(
    board: &Board,
    ids: std::ops::Range<usize>,
    within: Duration,
    servers: &mut [&mut Server],
) -> anyhow::Result<()> {
    let all = board
        .wait(within, servers, |i| {
            ids.clone()
                .all(|id| i.hellos[id].is_some() || i.ended[id].is_some())
        })
        .await?;
    let inner = board.lock();
    let missing = ids.clone().filter(|&id| inner.hellos[id].is_none()).count();
    if all && missing == 0 {
        return Ok(());
    }
    let why = ids
        .clone()
        .find_map(|id| inner.ended[id].clone())
        .unwrap_or_else(|| format!("no hello within {}s", within.as_secs_f64()));
    Err(anyhow!(
        "{missing} of {} streams had no hello: {why}",
        ids.len()
    ))
}

fn vigil_config(
    n: u32,
    backend_port: u16,
    vigil_port: u16,
    api_port: u16,
    interval: &str,
    timeout: &str,
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
    }
    s
}

fn window_table(windows: &[Window]) -> String {
    let mut s = String::from(
        "| phase | streams | vigil CPU, % of a core | backend CPU, % | bench CPU, % | bytes/s per stream | `instances` events (stream 0) | reports per event | bytes per event | vigil RSS MiB | vigil fds | machine busy (other procs, CPUs) |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for w in windows {
        s.push_str(&format!(
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.0} | {} | {:.0} | {:.0} | {:.0} | {} | {:.0}% ({:.2}) |\n",
            w.label,
            w.streams,
            w.vigil_pct(),
            w.cpu_backend / w.secs * 100.0,
            w.cpu_bench / w.secs * 100.0,
            w.bytes_per_stream_s(),
            w.instances_events,
            w.instances_mean_reports,
            w.instances_mean_bytes,
            w.vigil_rss_mib,
            w.vigil_fds,
            w.machine_busy * 100.0,
            w.other_cores,
        ));
    }
    s
}

fn delivery_table<'a>(rows: impl Iterator<Item = &'a Delivery>) -> String {
    let mut s = String::from(
        "| transitions | events | received (event × stream) | after request, ms: p50 / p99 / max | last stream per event, ms: p50 / max | receipt − `at`, ms: p50 / p99 / max | request → `at`, ms p50 | API answer, ms p50 | burst: all in, ms | burst CPU ms: vigil / backend / bench |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for d in rows {
        let q = |v: &[f64], p: f64| fmt(quantile(v, p));
        s.push_str(&format!(
            "| {} | {} | {}/{} | {} / {} / {} | {} / {} | {} / {} / {} | {} | {} | {} | {} |\n",
            d.label,
            d.events,
            d.received,
            d.expected,
            q(&d.latency, 0.5),
            q(&d.latency, 0.99),
            q(&d.latency, 1.0),
            q(&d.last, 0.5),
            q(&d.last, 1.0),
            q(&d.since_at, 0.5),
            q(&d.since_at, 0.99),
            q(&d.since_at, 1.0),
            q(&d.sent_to_at, 0.5),
            q(&d.answer, 0.5),
            d.all_in.map_or("-".into(), fmt),
            match (d.cpu_vigil, d.cpu_backend, d.cpu_bench) {
                (Some(v), Some(k), Some(b)) => {
                    format!("{:.0} / {:.0} / {:.0}", v * 1000.0, k * 1000.0, b * 1000.0)
                }
                _ => "-".into(),
            },
        ));
    }
    s
}

fn hello_table(h: &Hellos, streams: usize) -> String {
    let mut s =
        String::from("| `hello` | streams | ms: p50 / p99 / max | bytes |\n|---|---:|---:|---:|\n");
    s.push_str(&format!(
        "| first stream, alone ({} reports, {} backends with transitions, {} transitions) | 1 | {:.1} | {} |\n",
        h.reports, h.histories, h.transitions, h.first.ms, h.first.bytes
    ));
    s.push_str(&format!(
        "| one more stream, alone, hub running (read to its `hello`, closed) | 1 | {:.1} | {} |\n",
        h.alone.ms, h.alone.bytes
    ));
    if streams > 1 {
        s.push_str(&format!(
            "| the others, opened at once (all had theirs {:.0} ms after the first was opened) | {} | {} / {} / {} | {}..{} |\n",
            h.rest_all_in,
            streams - 1,
            fmt(quantile(&h.rest_ms, 0.5)),
            fmt(quantile(&h.rest_ms, 0.99)),
            fmt(quantile(&h.rest_ms, 1.0)),
            h.rest_bytes.first().copied().unwrap_or(0),
            h.rest_bytes.last().copied().unwrap_or(0),
        ));
    }
    s
}

fn summary(
    windows: &[Window],
    seq: &Delivery,
    bursts: &[Delivery],
    h: &Hellos,
    streams: usize,
) -> String {
    let find = |label: &str| windows.iter().find(|w| w.label == label);
    let zero = find("0 streams (hub not started)");
    let busy = find("N streams, idle").or(find("1 stream, idle"));
    let mut s = String::from("| | value |\n|---|---:|\n");
    if let (Some(z), Some(b)) = (zero, busy) {
        s.push_str(&format!(
            "| vigil CPU, % of a core: 0 streams / {} idle streams | {:.1} / {:.1} ({}) |\n",
            b.streams,
            z.vigil_pct(),
            b.vigil_pct(),
            if z.cpu_vigil > 0.0 {
                format!("{:.1}×", b.cpu_vigil / b.secs / (z.cpu_vigil / z.secs))
            } else {
                "∞ ×".into()
            },
        ));
        s.push_str(&format!(
            "| idle stream traffic, bytes/s per stream | {:.0} |\n",
            b.bytes_per_stream_s()
        ));
    }
    if let Some(c) = find("0 streams (all closed)") {
        s.push_str(&format!(
            "| vigil CPU, % of a core, after every stream closed | {:.1} |\n",
            c.vigil_pct()
        ));
    }
    let q = |v: &[f64], p: f64| fmt(quantile(v, p));
    s.push_str(&format!(
        "| one transition at a time: receipt − request, ms p50 / p99 / max ({} pairs) | {} / {} / {} |\n",
        seq.received,
        q(&seq.latency, 0.5),
        q(&seq.latency, 0.99),
        q(&seq.latency, 1.0),
    ));
    s.push_str(&format!(
        "| one at a time: last of {streams} streams, ms p50 / max over {} events | {} / {} |\n",
        seq.events,
        q(&seq.last, 0.5),
        q(&seq.last, 1.0),
    ));
    for b in bursts {
        s.push_str(&format!(
            "| {} of {}: every stream has all, ms; vigil CPU ms | {} ; {} |\n",
            b.label,
            b.events,
            b.all_in.map_or("-".into(), fmt),
            b.cpu_vigil
                .map_or("-".into(), |v| format!("{:.0}", v * 1000.0)),
        ));
    }
    s.push_str(&format!(
        "| `hello` bytes; ms: first stream (starts the hub), one alone (hub running), {} at once p50 / max | {} ; {:.1}, {:.1}, {} / {} |\n",
        streams.saturating_sub(1),
        h.first.bytes,
        h.first.ms,
        h.alone.ms,
        q(&h.rest_ms, 0.5),
        q(&h.rest_ms, 1.0),
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_blocks() {
        let (k, d) = parse_event(b"id: 3\nevent: transition\ndata: {\"a\":1}");
        assert_eq!(k, Some("transition"));
        assert_eq!(&*d, b"{\"a\":1}");
        let (k, d) = parse_event(b"event: hello\nretry: 2000\ndata: x\ndata: y");
        assert_eq!(k, Some("hello"));
        assert_eq!(&*d, b"x\ny");
        assert_eq!(parse_event(b":").0, None);
        assert_eq!(parse_event(b"data:z").0, Some("message"));
    }

    #[test]
    fn blank_lines() {
        assert_eq!(find_blank_line(b"a\nb\n\nc"), Some(3));
        assert_eq!(find_blank_line(b"a\nb\n"), None);
        assert_eq!(find_blank_line(b"\n\n"), Some(0));
    }

    #[test]
    fn config_lists_every_backend() {
        let c = vigil_config(3, 4000, 4001, 4002, "10s", "5s");
        assert_eq!(c.matches("[[backends]]").count(), 3);
        assert!(c.contains("interval = \"10s\"\ntimeout = \"5s\""));
    }
}
