//! `vigil-bench plugins`: the plugin host, in process (the `vigil` library):
//! load time from a cold and a warm compiled-code cache, instantiate + call
//! time of a trivial probe, calls per second on one core, and resident
//! memory per loaded plugin with a thousand distinct plugins loaded.
//!
//! The plugin is `tests/plugins/good-probe` (built by
//! `scripts/build-test-plugins.sh`) called with `mode = "degraded"`: one
//! config read, one report, no I/O. Distinct plugins for the memory figure
//! are that component with a different custom section appended (a valid
//! component with its own hash, so each is compiled and cached on its own).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use vigil::plugins::{Plugins, Target, Verdict};

/// Goals (the plugins issue; the call goal from the second sandbox round).
const GOAL_WARM_LOAD_MS: f64 = 10.0;
const GOAL_CALL_US: f64 = 20.0;
const GOAL_THOUSAND_MIB: f64 = 1024.0;

#[derive(Debug, clap::Args)]
pub struct PluginArgs {
    /// The trivial probe component.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "target/test-plugins/good-probe.wasm"
    )]
    wasm: PathBuf,
    /// Cold and warm loads measured (each cold one with an empty cache).
    #[arg(long, default_value_t = 5)]
    loads: u32,
    /// Calls measured one by one for the latency distribution.
    #[arg(long, default_value_t = 5_000)]
    calls: u32,
    /// Seconds of back-to-back calls for calls per second.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Distinct plugins loaded for the memory figure.
    #[arg(long, default_value_t = 1_000)]
    count: u32,
    /// Where the compiled copies for the memory figure are cached between
    /// runs (compiling a thousand takes a while the first time).
    #[arg(long, value_name = "DIR")]
    cache: Option<PathBuf>,
}

fn rss_mib() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as f64;
    pages * page / (1 << 20) as f64
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// `bytes` with a custom section named `vigil-bench` holding `n` appended.
fn distinct(bytes: &[u8], n: u32) -> Vec<u8> {
    fn leb(mut v: usize, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }
    let name = b"vigil-bench";
    let mut payload = Vec::new();
    leb(name.len(), &mut payload);
    payload.extend_from_slice(name);
    payload.extend_from_slice(&n.to_le_bytes());
    let mut out = bytes.to_vec();
    out.push(0); // custom section id
    leb(payload.len(), &mut out);
    out.extend_from_slice(&payload);
    out
}

/// A fresh registry of `dir` with its cache at `cache`, scanned; the scan's
/// duration.
async fn load(dir: &Path, cache: &Path) -> anyhow::Result<(Arc<Plugins>, Duration)> {
    let plugins = Plugins::new(
        dir.to_owned(),
        Some(cache.to_owned()),
        None,
        vigil::plugins::files::DEFAULT_MAX_PLUGIN,
    )?;
    let t0 = Instant::now();
    plugins.scan().await;
    let took = t0.elapsed();
    let refused: Vec<_> = plugins
        .list()
        .into_iter()
        .filter(|p| p.state != "active")
        .collect();
    if !refused.is_empty() {
        bail!("plugins refused: {refused:?}");
    }
    Ok((plugins, took))
}

pub async fn run(args: &PluginArgs) -> anyhow::Result<()> {
    let bytes = std::fs::read(&args.wasm).with_context(|| {
        format!(
            "reading {} (build it with `bash scripts/build-test-plugins.sh`)",
            args.wasm.display()
        )
    })?;
    let scratch = std::env::temp_dir().join(format!("vigil-bench-plugins-{}", std::process::id()));
    let one = scratch.join("one");
    std::fs::create_dir_all(&one)?;
    std::fs::write(one.join("good-probe.wasm"), &bytes)?;
    println!("vigil-bench {} plugins", env!("CARGO_PKG_VERSION"));
    println!("{}", crate::machine::Machine::detect());
    println!(
        "plugin: {} ({} KiB)",
        args.wasm.display(),
        bytes.len() / 1024
    );

    // Load times: cold (empty cache: compile), then warm (deserialize).
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    for i in 0..args.loads {
        let cache = scratch.join(format!("cache-{i}"));
        let (_, c) = load(&one, &cache).await?;
        let (p, w) = load(&one, &cache).await?;
        if !p.list().iter().all(|i| i.from_cache) {
            bail!("the second load did not come from the cache");
        }
        cold.push(c.as_secs_f64() * 1e3);
        warm.push(w.as_secs_f64() * 1e3);
    }
    let (cold_ms, warm_ms) = (median(&mut cold), median(&mut warm));

    // Instantiate + call, one at a time.
    let (plugins, _) = load(&one, &scratch.join("cache-0")).await?;
    let args_map = BTreeMap::from([("mode".to_owned(), "degraded".to_owned())]);
    let target = || Target {
        name: "bench".into(),
        conn: None,
    };
    for _ in 0..200 {
        plugins.probe("good-probe", target(), &args_map).await;
    }
    let mut lat = Vec::with_capacity(args.calls as usize);
    for _ in 0..args.calls {
        let t0 = Instant::now();
        let r = plugins.probe("good-probe", target(), &args_map).await;
        lat.push(t0.elapsed().as_secs_f64() * 1e6);
        if !matches!(r.verdict, Verdict::Degraded(_)) {
            bail!("unexpected verdict: {:?}", r.verdict);
        }
    }
    lat.sort_by(|a, b| a.total_cmp(b));
    let (p50, p99) = (quantile(&lat, 0.5), quantile(&lat, 0.99));

    // Calls per second on this (current-thread) runtime: one core.
    let until = Instant::now() + Duration::from_secs_f64(args.seconds);
    let mut n = 0u64;
    let t0 = Instant::now();
    while Instant::now() < until {
        plugins.probe("good-probe", target(), &args_map).await;
        n += 1;
    }
    let cps = n as f64 / t0.elapsed().as_secs_f64();
    drop(plugins);

    // Memory: `count` distinct plugins loaded at once.
    let many = scratch.join("many");
    std::fs::create_dir_all(&many)?;
    for i in 0..args.count {
        std::fs::write(many.join(format!("p{i:05}.wasm")), distinct(&bytes, i))?;
    }
    let cache = args.cache.clone().unwrap_or_else(|| {
        PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| ".".into()))
            .join(".cache/vigil-bench/plugin-cache")
    });
    // Compile (or find in the cache) every copy in a registry that is then
    // dropped, so the measured one loads all from the cache, as after a restart.
    let (warmup, warmup_took) = load(&many, &cache).await?;
    drop(warmup);
    let before = rss_mib();
    let (plugins, took) = load(&many, &cache).await?;
    let after = rss_mib();
    let loaded = plugins.list().len();
    let per_plugin_kib = (after - before) * 1024.0 / loaded as f64;
    std::fs::remove_dir_all(&scratch).ok();

    println!();
    println!("| measure | value | goal |");
    println!("|---|---:|---|");
    println!(
        "| load, cold cache (compile), median of {} | {cold_ms:.1} ms | - |",
        args.loads
    );
    println!(
        "| load, warm cache, median of {} | {warm_ms:.2} ms | ≤ {GOAL_WARM_LOAD_MS} ms: {} |",
        args.loads,
        verdict(warm_ms <= GOAL_WARM_LOAD_MS)
    );
    println!(
        "| instantiate + call, p50 / p99 of {} | {p50:.1} / {p99:.1} µs | ≤ {GOAL_CALL_US} µs: {} |",
        args.calls,
        verdict(p50 <= GOAL_CALL_US)
    );
    println!("| calls per second, one core | {cps:.0} | - |");
    println!(
        "| {loaded} distinct plugins loaded: RSS growth | {:.0} MiB ({per_plugin_kib:.0} KiB each) | within {GOAL_THOUSAND_MIB} MiB: {} |",
        after - before,
        verdict(after - before <= GOAL_THOUSAND_MIB * f64::from(args.count) / 1000.0)
    );
    println!(
        "| loading them from the cache | {:.2} s ({:.2} ms each); first compile this run: {:.1} s | - |",
        took.as_secs_f64(),
        took.as_secs_f64() * 1e3 / loaded as f64,
        warmup_took.as_secs_f64()
    );
    println!("| RSS after loading them | {after:.0} MiB | - |");
    Ok(())
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}
