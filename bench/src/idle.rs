//! `vigil-bench idle`: what idle client sessions cost Vigil, with backend
//! sessions shared and with one backend session per client session.
//!
//! Ten lean backends over HTTP behind one `vigil serve`. N client sessions
//! (the lean client) each initialize, call one backend's `echo` (session
//! `i` calls backend `i mod 10`), then close their connection without
//! `DELETE`: idle sessions, holding no client socket. Two modes, each on a
//! Vigil process of its own, the same build:
//!
//! - **shared**: clients declare no capabilities, so their calls take the
//!   raw path and share one backend session per principal per backend
//!   (the lane, `docs/gateway.md`);
//! - **own**: clients declare `sampling`, so each call takes the typed path
//!   and each client session gets a backend session of its own, with its
//!   standing event stream: how every client session was served before
//!   backend sessions were shared.
//!
//! Reported per mode: Vigil's resident memory and open sockets before the
//! sessions (backends up, listed) and after all N are idle, the difference
//! per session, and the TCP connections Vigil holds to the backends.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use futures::StreamExt as _;

use crate::lean::client::{Endpoint, Session};
use crate::procs::{self, Server, WorkDir};
use crate::{load, resolve_bin_dir};

/// Backends behind Vigil.
const BACKENDS: usize = 10;
/// Sessions opened at once.
const OPEN_CONCURRENCY: usize = 32;

/// Benchmark idle client sessions: memory and sockets, shared vs own
/// backend sessions.
#[derive(Debug, clap::Args)]
pub struct IdleArgs {
    /// Idle client sessions to open (per mode).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=50_000))]
    sessions: u32,

    /// Which modes to run: `shared`, `own` or `both`.
    #[arg(long, default_value = "both", value_parser = ["shared", "own", "both"])]
    mode: String,

    /// Directory holding the `vigil` binary. Default:
    /// `${CARGO_TARGET_DIR:-target}/release`, else the directory of this
    /// binary.
    #[arg(long, value_name = "DIR")]
    bin_dir: Option<PathBuf>,

    /// Keep the configs and logs in this directory (default: a scratch
    /// directory, removed at the end).
    #[arg(long, value_name = "DIR")]
    log_dir: Option<PathBuf>,

    /// Seconds between the first reading (once memory and sockets stop
    /// moving after the last session went idle) and the second. rmcp keeps each finished request's events
    /// for 60 s so a client can resume its stream; past that, what is left
    /// is what an idle session holds.
    #[arg(long, default_value_t = 70, value_name = "SECS")]
    settle: u64,
}

/// One mode's figures.
struct Figures {
    mode: &'static str,
    sessions: u32,
    rss_before_mib: f64,
    rss_after_mib: f64,
    /// `--settle` seconds after `rss_after_mib`.
    rss_settled_mib: f64,
    settle: u64,
    sockets_before: u64,
    sockets_after: u64,
    backend_conns: u64,
    open_secs: f64,
}

pub async fn run(args: &IdleArgs) -> anyhow::Result<()> {
    let bins = resolve_bin_dir(args.bin_dir.as_deref())?;
    let (soft, _) = crate::fanout::raise_fd_limit();
    if soft < 4096 {
        bail!("the open-files limit is {soft}; the bench needs a few thousand");
    }
    let (log_dir, _scratch) = procs::log_dir(args.log_dir.as_deref())?;
    let work = WorkDir::at(&log_dir);
    let mut backends = Vec::new();
    let mut urls = Vec::new();
    for _ in 0..BACKENDS {
        let (server, url) = procs::lean_backend(&work, None).await?;
        backends.push(server);
        urls.push(url);
    }
    let modes: &[&'static str] = match args.mode.as_str() {
        "shared" => &["shared"],
        "own" => &["own"],
        _ => &["shared", "own"],
    };
    println!(
        "plan: {} idle client sessions per mode over {BACKENDS} lean HTTP backends; modes: {}",
        args.sessions,
        modes.join(", ")
    );
    let mut rows = Vec::new();
    for mode in modes {
        rows.push(
            one_mode(
                mode,
                args.sessions,
                args.settle,
                &bins.join("vigil"),
                &urls,
                &work,
            )
            .await?,
        );
    }
    print_table(&rows);
    drop(backends);
    Ok(())
}

async fn one_mode(
    mode: &'static str,
    sessions: u32,
    settle: u64,
    vigil: &std::path::Path,
    urls: &[String],
    work: &WorkDir,
) -> anyhow::Result<Figures> {
    let port = procs::free_port()?;
    let mut config = format!(
        "listen = \"127.0.0.1:{port}\"\nlog_level = \"warn\"\n\n[limits]\nmax_sessions = {}\n\n[api]\nlisten = \"127.0.0.1:0\"\n",
        sessions + 100
    );
    for (i, url) in urls.iter().enumerate() {
        config.push_str(&format!(
            "\n[[backends]]\nname = \"b{i}\"\ntransport = \"http\"\nurl = \"{url}\"\n"
        ));
    }
    let path = work.path().join(format!("idle-{mode}.toml"));
    std::fs::write(&path, config).with_context(|| format!("cannot write {}", path.display()))?;
    let mut server = Server::vigil(
        vigil,
        &path,
        None,
        work.path().join(format!("vigil-{mode}.log")),
    )?;
    let url = format!("http://127.0.0.1:{port}/mcp");
    load::wait_ready(
        &mut server,
        &url,
        &format!("b{}__echo", BACKENDS - 1),
        Duration::from_secs(60),
    )
    .await?;
    let pid = server.pid().context("vigil has no pid")?;
    let backend_ports: Vec<u16> = urls.iter().filter_map(|u| port_of(u)).collect();
    let (before, sockets_before) = procs::quiescent(pid).await;

    let endpoint = Arc::new(Endpoint::parse(&url)?);
    let capabilities = if mode == "own" {
        r#"{"sampling":{}}"#
    } else {
        "{}"
    };
    let t0 = std::time::Instant::now();
    let opened = futures::stream::iter(0..sessions)
        .map(|i| {
            let endpoint = endpoint.clone();
            async move {
                let mut s = Session::open_declaring(endpoint, capabilities).await?;
                s.call_echo(&format!("b{}__echo", i as usize % BACKENDS), "idle")
                    .await?;
                s.detach();
                anyhow::Ok(())
            }
        })
        .buffer_unordered(OPEN_CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    let open_secs = t0.elapsed().as_secs_f64();
    if let Some(e) = opened.into_iter().find_map(Result::err) {
        return Err(e.context(format!("{mode}: opening the idle sessions")));
    }
    server.check_alive()?;
    let (after, sockets_after) = procs::quiescent(pid).await;
    let backend_conns = connections_to(pid, &backend_ports);
    // The second reading is taken at a fixed time on purpose: what is
    // measured is what stays after rmcp's 60 s cache of finished requests.
    tokio::time::sleep(Duration::from_secs(settle)).await;
    server.check_alive()?;
    let figures = Figures {
        mode,
        sessions,
        rss_before_mib: before.rss_mib,
        rss_after_mib: after.rss_mib,
        rss_settled_mib: crate::probes::proc_status(pid).rss_mib,
        settle,
        sockets_before,
        sockets_after,
        backend_conns,
        open_secs,
    };
    server.stop().await;
    Ok(figures)
}

fn port_of(url: &str) -> Option<u16> {
    Endpoint::parse(url)
        .ok()?
        .authority
        .rsplit_once(':')?
        .1
        .parse()
        .ok()
}

/// Established TCP connections of `pid` to any of `ports` on loopback
/// (`/proc/PID/net/tcp`, matched by the socket inodes `pid` holds).
fn connections_to(pid: u32, ports: &[u16]) -> u64 {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .filter_map(|l| {
                    let l = l.to_string_lossy().into_owned();
                    l.strip_prefix("socket:[")?
                        .strip_suffix(']')
                        .map(str::to_owned)
                })
                .collect()
        })
        .unwrap_or_default();
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(remote), Some(state), Some(inode)) = (f.get(2), f.get(3), f.get(9)) else {
                return false;
            };
            let port = remote
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            *state == "01" && port.is_some_and(|p| ports.contains(&p)) && inodes.contains(*inode)
        })
        .count() as u64
}

fn print_table(rows: &[Figures]) {
    println!();
    println!(
        "| backend sessions | idle client sessions | Vigil RSS MiB: before / settled / {} s later | KiB per session: settled / {} s later | Vigil sockets: before / after | sockets per session | TCP connections to the backends | opened in s |",
        rows.first().map_or(0, |r| r.settle),
        rows.first().map_or(0, |r| r.settle),
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let per_kib = (r.rss_after_mib - r.rss_before_mib) * 1024.0 / f64::from(r.sessions);
        let settled_kib = (r.rss_settled_mib - r.rss_before_mib) * 1024.0 / f64::from(r.sessions);
        let per_socket = (r.sockets_after as f64 - r.sockets_before as f64) / f64::from(r.sessions);
        let label = match r.mode {
            "shared" => "shared (raw path, one lane per principal and backend)",
            _ => "own (typed path, one per client session)",
        };
        println!(
            "| {label} | {} | {:.0} / {:.0} / {:.0} | {per_kib:.1} / {settled_kib:.1} | {} / {} | {per_socket:.2} | {} | {:.1} |",
            r.sessions,
            r.rss_before_mib,
            r.rss_after_mib,
            r.rss_settled_mib,
            r.sockets_before,
            r.sockets_after,
            r.backend_conns,
            r.open_secs,
        );
    }
    if let [shared, own] = rows {
        let grow = |r: &Figures| r.rss_settled_mib - r.rss_before_mib;
        if grow(shared) > 0.0 {
            println!(
                "\nmemory per idle session (at {} s), own / shared: {:.1}x; sockets after, own / shared: {:.1}x",
                shared.settle,
                grow(own) / grow(shared),
                own.sockets_after as f64 / shared.sockets_after.max(1) as f64
            );
        }
    }
}
