//! `vigil-bench instructions`: how many instructions Vigil executes per
//! `tools/call`, counted by valgrind's callgrind.
//!
//! Why: CPU time per call on a shared 2-vCPU VM drifts by 10 % and more
//! between runs; an instruction count of the same work does not. It is the
//! figure to compare builds by (before and after the data-plane rewrite),
//! and clients of the two protocol eras by.
//!
//! How: the backend of the pair (the lean backend, or the rmcp demo
//! backend) runs natively, or, for `lean-stdio`, Vigil starts the lean
//! backend over stdio itself (valgrind does not follow children, so it
//! runs natively too); Vigil runs under `valgrind --tool=callgrind
//! --instr-atstart=no` (uninstrumented, so start-up is quick) with one
//! backend `demo` (`protocol = "auto"`), generous timeouts (valgrind makes
//! it ~50x slower), health probes once an hour and the tools poller off
//! (no background work in the windows). Once Vigil lists `demo__echo`,
//! the bench turns instrumentation on (`callgrind_control -i on`), opens
//! one lean client session of the revision measured (2025-11-25: a
//! session, whose plain calls take the raw path on the backend's lane;
//! 2026-07-28: sessionless calls, raw through the backend's 2026-07-28
//! door, which the first of them opens), makes the warm-up calls, then
//! measures two windows, each framed by `callgrind_control --zero` and
//! `--dump`: K calls, then 2K calls, one at a time. Each dump holds the Ir
//! (instructions executed, all of Vigil's threads) since the zero; the
//! per-call figure is (Ir(2K) − Ir(K)) / K, which cancels whatever a
//! window costs once (the zero and dump themselves, a timer that fires per
//! window). Both windows' own Ir / calls are printed too; if they disagree
//! by more than a few percent something other than calls ran in a window.
//! The top functions of the 2K window by inclusive and by self Ir follow
//! (from `callgrind_annotate`).
//!
//! Which way the windows' calls went is read from the control API's
//! `vigil_requests_forwarded_total{method="tools/call"}` before the first
//! window and after the second: behind an HTTP backend every one of them
//! must have been raw, else the run fails (after printing its figures).
//! Each (pair, client revision) gets a Vigil of its own; with both
//! revisions the table ends with their ratio per pair.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};

use crate::lean::client::{Endpoint, Era, Session};
use crate::procs::{self, Server};
use crate::report::Pair;
use crate::{PairChoice, load};

#[derive(Debug, clap::Args)]
pub struct InstructionsArgs {
    /// Calls in the first measured window (K); the second has 2K.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..))]
    calls: u64,
    /// Unmeasured calls first: Vigil's backend session opens, its caches
    /// and valgrind's translations fill.
    #[arg(long, default_value_t = 300)]
    warmup_calls: u64,
    /// The backend behind Vigil: `lean` (the bench's lean backend), `rmcp`
    /// (the demo backend), `lean-stdio` (the lean backend over stdio,
    /// started by Vigil: the typed path), `both` (rmcp and lean) or `all`,
    /// one after the other.
    #[arg(long, value_enum, default_value_t = PairChoice::Lean)]
    pair: PairChoice,
    /// Bytes of text echoed per call.
    #[arg(long, default_value_t = 64)]
    payload: usize,
    /// `keep_alive` of Vigil's backend, as for `calls` (default `true`,
    /// Vigil's default).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    backend_keep_alive: bool,
    /// Directory holding `vigil` and `vigil-demo-backend` (as for `calls`).
    #[arg(long, value_name = "DIR")]
    bin_dir: Option<PathBuf>,
    /// Keep the config, the logs and the callgrind files here (default: a
    /// scratch directory, removed at the end).
    #[arg(long, value_name = "DIR")]
    log_dir: Option<PathBuf>,
    /// How many functions to list by inclusive and by self Ir (0: none).
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Longest wait for Vigil under valgrind to list `demo__echo`, seconds.
    #[arg(long, default_value_t = 300)]
    startup_timeout: u64,
    /// Protocol revisions of the lean client, each measured with a Vigil
    /// of its own: `2025-11-25` (a session) and `2026-07-28` (sessionless
    /// requests). Comma-separate for both in one run, e.g. `--client
    /// 2025-11-25,2026-07-28`.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "2025-11-25",
        value_name = "REVISION"
    )]
    client: Vec<Era>,
}

/// What one pair's measurement found.
struct Counts {
    /// (calls, Ir) of each window.
    windows: [(u64, u64); 2],
    /// The 2K window's dump, for `callgrind_annotate`.
    dump: PathBuf,
    /// `tools/call` requests Vigil forwarded raw and typed from before the
    /// first window to after the second.
    forwarded: (u64, u64),
}

impl Counts {
    fn per_call(&self) -> f64 {
        let [(k1, ir1), (k2, ir2)] = self.windows;
        (ir2 as f64 - ir1 as f64) / (k2 - k1) as f64
    }
}

pub async fn run(args: &InstructionsArgs) -> anyhow::Result<()> {
    let bin_dir = crate::resolve_bin_dir(args.bin_dir.as_deref())?;
    for tool in ["valgrind", "callgrind_control"] {
        which(tool).with_context(|| format!("`{tool}` is needed (valgrind's callgrind)"))?;
    }
    let mut clients = args.client.clone();
    clients.dedup();
    let (dir, _scratch) = procs::log_dir(args.log_dir.as_deref())?;
    println!("vigil-bench {} instructions", env!("CARGO_PKG_VERSION"));
    println!("{}", crate::machine::Machine::detect());
    if let Some(v) = procs::version(&bin_dir.join("vigil")).await {
        println!("gateway: {v}, under valgrind --tool=callgrind, backend protocol = \"auto\"");
    }
    println!(
        "plan: per backend and client revision ({}), a Vigil of its own and one lean client session: {} warm-up call(s), then windows of {} and {} calls; payload {} B, backend keep_alive = {}",
        clients
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        args.warmup_calls,
        args.calls,
        2 * args.calls,
        args.payload,
        args.backend_keep_alive
    );
    println!();
    let mut results = Vec::new();
    let mut off_path = Vec::new();
    for pair in args.pair.pairs() {
        for &era in &clients {
            let label = format!("{pair}, {era} client");
            let counts = measure(
                pair,
                era,
                args,
                &bin_dir,
                &dir.join(format!("{pair}-{era}")),
            )
            .await
            .with_context(|| label.clone())?;
            let [(k1, ir1), (k2, ir2)] = counts.windows;
            println!(
                "{label}: window 1: {k1} calls, {ir1} Ir ({:.0} Ir/call); window 2: {k2} calls, {ir2} Ir ({:.0} Ir/call)",
                ir1 as f64 / k1 as f64,
                ir2 as f64 / k2 as f64,
            );
            let path = path_of(counts.forwarded, k1 + k2);
            println!(
                "{label}: Vigil executes {:.0} instructions per call ((Ir(2K) − Ir(K)) / K); tools/call forwarded in the windows: {} raw, {} typed ({path})",
                counts.per_call(),
                counts.forwarded.0,
                counts.forwarded.1,
            );
            // Behind an HTTP backend every call of the windows goes raw;
            // a stdio backend has no raw path.
            if pair != Pair::LeanStdio && counts.forwarded != (k1 + k2, 0) {
                off_path.push(format!(
                    "{label}: {} of {} calls raw, {} typed",
                    counts.forwarded.0,
                    k1 + k2,
                    counts.forwarded.1
                ));
            }
            for inclusive in [true, false] {
                if args.top == 0 {
                    break;
                }
                let by = if inclusive { "inclusive" } else { "self" };
                match top_functions(&counts.dump, args.top, inclusive).await {
                    Ok(table) => println!(
                        "{label}: top {} functions by {by} Ir (window 2):\n{table}",
                        args.top
                    ),
                    Err(e) => println!("{label}: no function table: {e:#}"),
                }
            }
            println!();
            results.push((pair, era, path, counts.per_call()));
        }
    }
    println!(
        "| backend behind Vigil | client | path | Vigil instructions per call |\n|---|---|---|---:|"
    );
    for (pair, era, path, per_call) in &results {
        println!("| {pair} | {era} | {path} | {per_call:.0} |");
    }
    if clients.len() > 1 {
        println!();
        let (first, others) = (clients[0], &clients[1..]);
        println!(
            "| backend behind Vigil | {} |\n|---|{}",
            others
                .iter()
                .map(|e| format!("{e} / {first}"))
                .collect::<Vec<_>>()
                .join(" | "),
            "---:|".repeat(others.len())
        );
        for pair in args.pair.pairs() {
            let of = |era: Era| {
                results
                    .iter()
                    .find(|r| r.0 == pair && r.1 == era)
                    .map(|r| r.3)
            };
            let ratios: Vec<String> = others
                .iter()
                .map(|&e| match (of(e), of(first)) {
                    (Some(a), Some(b)) if b > 0.0 => format!("{:.3}", a / b),
                    _ => "-".into(),
                })
                .collect();
            println!("| {pair} | {} |", ratios.join(" | "));
        }
    }
    if args.log_dir.is_some() {
        println!(
            "\ncallgrind files, configs and logs kept in {}",
            dir.display()
        );
    }
    if !off_path.is_empty() {
        bail!(
            "calls that should have taken the raw path did not:\n{}",
            off_path.join("\n")
        );
    }
    Ok(())
}

/// How `calls` calls went, from the forwarded counter's (raw, typed).
fn path_of((raw, typed): (u64, u64), calls: u64) -> String {
    match (raw, typed) {
        (r, 0) if r == calls => "raw".into(),
        (0, t) if t == calls => "typed".into(),
        (r, t) => format!("{r} raw + {t} typed of {calls}"),
    }
}

/// One (pair, client revision): backend natively, Vigil under callgrind,
/// the two windows.
async fn measure(
    pair: Pair,
    era: Era,
    args: &InstructionsArgs,
    bin_dir: &Path,
    dir: &Path,
) -> anyhow::Result<Counts> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    // Earlier dumps in a kept directory would be mistaken for this run's.
    for f in dumps(dir)? {
        let _ = std::fs::remove_file(f);
    }
    let work = procs::WorkDir::at(dir);
    let (stdio_command, stdio_args) = procs::lean_stdio_command()?;
    let (backend, backend_url) = match pair {
        Pair::Rmcp => {
            let (s, url) = procs::demo_backend(bin_dir, &work).await?;
            (Some(s), url)
        }
        Pair::Lean => {
            let (s, url) = procs::lean_backend(&work, None).await?;
            (Some(s), url)
        }
        Pair::LeanStdio => (None, String::new()),
    };
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
    let port = procs::free_port()?;
    let api_port = procs::free_port()?;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let api = format!("http://127.0.0.1:{api_port}");
    let config = dir.join("vigil.toml");
    std::fs::write(
        &config,
        procs::vigil_config_for(
            port,
            api_port,
            &spec,
            "auto",
            "request_timeout = \"300s\"\nconnect_timeout = \"120s\"\nstartup_timeout = \"600s\"\n",
            "[health]\ninterval = \"1h\"\ntimeout = \"120s\"\n\n[poller]\ninterval = \"0s\"\n\n\
             [limits]\nread_timeout = \"600s\"\nidle_timeout = \"600s\"\nwrite_timeout = \"600s\"\n",
        ),
    )
    .with_context(|| format!("cannot write {}", config.display()))?;
    let out_file = dir.join("callgrind.out");
    let vigil_args = vec![
        "--tool=callgrind".to_owned(),
        "--instr-atstart=no".to_owned(),
        format!("--callgrind-out-file={}", out_file.display()),
        bin_dir.join("vigil").display().to_string(),
        "serve".to_owned(),
        "--config".to_owned(),
        config.display().to_string(),
    ];
    let mut vigil = Server::spawn(
        "vigil (callgrind)",
        Path::new("valgrind"),
        &vigil_args,
        &[],
        None,
        dir.join("vigil.log"),
    )?;
    let pid = vigil
        .pid()
        .ok_or_else(|| anyhow!("vigil under valgrind has no pid"))?;
    let result = async {
        load::wait_ready(
            &mut vigil,
            &url,
            "demo__echo",
            Duration::from_secs(args.startup_timeout),
        )
        .await?;
        control(pid, &["-i", "on"]).await?;
        let mut session = Session::open_era(Arc::new(Endpoint::parse(&url)?), era, "{}")
            .await
            .context("opening the lean session")?;
        let payload = "x".repeat(args.payload);
        calls(&mut session, args.warmup_calls, &payload)
            .await
            .context("warm-up")?;
        let before = procs::forwarded(&api, "tools/call").await?;
        let mut windows = [(0, 0); 2];
        let mut dump = PathBuf::new();
        for (i, k) in [args.calls, 2 * args.calls].into_iter().enumerate() {
            control(pid, &["--zero"]).await?;
            calls(&mut session, k, &payload).await?;
            dump = dump_counts(pid, dir, &format!("window-{}", i + 1)).await?;
            windows[i] = (k, total_ir(&dump)?);
            vigil.check_alive()?;
        }
        let after = procs::forwarded(&api, "tools/call").await?;
        session.close().await;
        anyhow::Ok(Counts {
            windows,
            dump,
            forwarded: (
                after.0.saturating_sub(before.0),
                after.1.saturating_sub(before.1),
            ),
        })
    }
    .await;
    // Under valgrind, a clean exit writes a final dump (and takes a while).
    vigil.stop_within(Duration::from_secs(60)).await;
    if let Some(backend) = backend {
        backend.stop().await;
    }
    result
}

/// `k` checked calls, one after the other.
async fn calls(session: &mut Session, k: u64, payload: &str) -> anyhow::Result<()> {
    for i in 0..k {
        tokio::time::timeout(
            Duration::from_secs(300),
            session.call_echo("demo__echo", payload),
        )
        .await
        .map_err(|_| anyhow!("call {i} got no answer within 300s"))?
        .with_context(|| format!("call {i}"))?;
    }
    Ok(())
}

/// Runs `callgrind_control ARGS PID`.
async fn control(pid: u32, args: &[&str]) -> anyhow::Result<String> {
    let out = tokio::process::Command::new("callgrind_control")
        .args(args)
        .arg(pid.to_string())
        .output()
        .await
        .context("cannot run callgrind_control")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() || text.contains("Error") {
        bail!(
            "callgrind_control {} failed: {}{}",
            args.join(" "),
            text,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(text)
}

/// Asks for a dump and returns the new file once it is complete.
async fn dump_counts(pid: u32, dir: &Path, label: &str) -> anyhow::Result<PathBuf> {
    let before = dumps(dir)?;
    control(pid, &[&format!("--dump={label}")]).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let new: Vec<PathBuf> = dumps(dir)?
            .into_iter()
            .filter(|f| !before.contains(f))
            .collect();
        if let Some(f) = new.first() {
            // Written whole once its totals line is there.
            if total_ir(f).is_ok() {
                return Ok(f.clone());
            }
        }
        if tokio::time::Instant::now() > deadline {
            bail!("no callgrind dump appeared in {}", dir.display());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The callgrind dump files in `dir`.
fn dumps(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let path = entry?.path();
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("callgrind.out"))
        {
            files.push(path);
        }
    }
    Ok(files)
}

/// The `totals:` (or `summary:`) Ir of a callgrind dump.
fn total_ir(file: &Path) -> anyhow::Result<u64> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    parse_totals(&text).ok_or_else(|| anyhow!("{}: no totals line", file.display()))
}

/// The first event count of the `totals:` line (callgrind's default event
/// is Ir), else of `summary:`.
fn parse_totals(text: &str) -> Option<u64> {
    let find = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
    };
    find("totals:").or_else(|| find("summary:"))
}

/// The first `n` functions of `callgrind_annotate`, by inclusive Ir
/// (`--inclusive=yes`) or by their own, with the crate-registry prefix of
/// paths and the binary's name cut off.
async fn top_functions(dump: &Path, n: usize, inclusive: bool) -> anyhow::Result<String> {
    let out = tokio::process::Command::new("callgrind_annotate")
        .arg(format!(
            "--inclusive={}",
            if inclusive { "yes" } else { "no" }
        ))
        .arg(dump)
        .output()
        .await
        .context("cannot run callgrind_annotate")?;
    if !out.status.success() {
        bail!(
            "callgrind_annotate failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    // The function table follows the header line that names the columns.
    let mut lines = text.lines().skip_while(|l| !l.contains("file:function"));
    let header = lines.next().ok_or_else(|| anyhow!("no function table"))?;
    let rows = lines
        .filter(|l| !l.trim().is_empty() && !l.starts_with("---"))
        .take(n)
        .map(shorten);
    Ok(std::iter::once(header.to_owned())
        .chain(rows)
        .collect::<Vec<_>>()
        .join("\n"))
}

/// A `callgrind_annotate` row without the registry prefix of its path
/// (`.../index.crates.io-HASH/`) and the ` [binary]` it ends with.
fn shorten(row: &str) -> String {
    let mut row = row.to_owned();
    if let Some(i) = row.find("index.crates.io-")
        && let Some(slash) = row[i..].find('/')
    {
        let start = row[..i].rfind(' ').map_or(0, |s| s + 1);
        row.replace_range(start..i + slash + 1, "");
    }
    if row.ends_with(']')
        && let Some(i) = row.rfind(" [")
    {
        row.truncate(i);
    }
    row
}

fn which(program: &str) -> anyhow::Result<()> {
    let found = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
        .unwrap_or(false);
    if found {
        Ok(())
    } else {
        bail!("`{program}` is not on PATH")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_of_a_dump() {
        let dump = "version: 1\ncreator: callgrind-3.19.0\npid: 7\ncmd: vigil serve\n\
                    events: Ir\nsummary: 999\n\nfl=(1) a.rs\nfn=(1) main\n3 10\n\ntotals: 123456789\n";
        assert_eq!(parse_totals(dump), Some(123_456_789));
        assert_eq!(parse_totals("events: Ir\nsummary: 42\n"), Some(42));
        assert_eq!(parse_totals("events: Ir\n"), None);
    }

    #[test]
    fn rows_are_shortened() {
        let row = "186,422,255 (101.7%)  /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/axum-0.8.9/src/util.rs:poll'2 [/x/vigil]";
        assert_eq!(
            shorten(row),
            "186,422,255 (101.7%)  axum-0.8.9/src/util.rs:poll'2"
        );
        let row = "1,000 (0.5%)  ???:memcpy [/usr/lib/libc.so.6]";
        assert_eq!(shorten(row), "1,000 (0.5%)  ???:memcpy");
    }

    #[test]
    fn per_call_is_the_difference_over_k() {
        let c = Counts {
            windows: [
                (1000, 5_000_000 + 1000 * 700),
                (2000, 5_000_000 + 2000 * 700),
            ],
            dump: PathBuf::new(),
            forwarded: (3000, 0),
        };
        assert_eq!(c.per_call(), 700.0);
        assert_eq!(path_of(c.forwarded, 3000), "raw");
        assert_eq!(path_of((0, 3000), 3000), "typed");
        assert_eq!(path_of((2999, 1), 3000), "2999 raw + 1 typed of 3000");
    }
}
