//! `vigil-bench access`: what knowing the caller costs a `tools/call`:
//! `[auth.oauth]` (JWT access tokens), a `[[policy]]` with rates and the
//! call audit, against the same Vigil build without them, in one run.
//!
//! One HTTP demo backend, two Vigils in front of it: `open` (no `[auth]`,
//! no policy, `[audit] calls = false`) and `guarded` (`[auth.oauth]` with an
//! issuer the bench serves itself — metadata and a JWKS — a policy entry
//! naming the sessions' group with an allow list, a deny, `rate` and
//! `rate_per_tool` high enough never to refuse, and the audit on). Each
//! session of `guarded` has its own token (its own principal), so the token
//! cache, the policy's buckets and the audit see as many callers as there
//! are sessions. Rounds alternate the order (ABBA). It prints latency,
//! throughput and Vigil's CPU per call of each, the added p50 and the
//! throughput ratio (goals: at most 20 µs, at least 0.95), and checks the
//! audit kept every call. It measures; it never fails on a threshold.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use axum::Router;
use axum::routing::get;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::json;

use crate::load::{self, Pids, Plan, Sample, Target};
use crate::procs::{self, Server};
use crate::report::TargetKind;
use crate::stats::Latency;

/// Goal: the added p50 of `guarded` over `open`, in microseconds.
pub const GOAL_ADDED_P50_US: f64 = 20.0;
/// Goal: `guarded` throughput at least this fraction of `open`'s.
pub const GOAL_THROUGHPUT_RATIO: f64 = 0.95;

/// A P-256 key made for this bench (PKCS#8 DER) and its public point: the
/// issuer the bench serves signs the sessions' tokens with it.
const EC_PKCS8: &str = "308187020100301306072a8648ce3d020106082a8648ce3d030107046d306b0201010420779ceda575ac5d7213943387dba4f292e284fdadfb0829c4d9407c635e78dd20a14403420004bf882cb0ff1b00c48826c547986c5f9abee30d13ce47c3673b2a386e5df0f82755bed8492c4afd9e0d2b764ffa3b23f0f219747173b84e646e9b0cf906bc85e6";
const EC_X: &str = "v4gssP8bAMSIJsVHmGxfmr7jDRPOR8NnOyo4bl3w-Cc";
const EC_Y: &str = "Vb7YSSxK_Z4NK3ZP-jsj8PIZdHFzuE5kbpsM-Qa8heY";

#[derive(Debug, clap::Args)]
pub struct AccessArgs {
    /// Concurrent client sessions (each its own principal on `guarded`).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    sessions: u32,
    /// Measured seconds per variant and round.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Unrecorded seconds before each measurement.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Rounds (ABBA order).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
    /// Directory holding `vigil` and `vigil-demo-backend`.
    #[arg(long, value_name = "DIR")]
    bin_dir: Option<PathBuf>,
    /// Bytes sent to `echo` per call.
    #[arg(long, default_value_t = 64)]
    payload: usize,
    /// What `guarded` turns on (comma-separated): `oauth`, `policy`, `audit`.
    /// Default all three; one at a time shows what each costs.
    #[arg(long, value_delimiter = ',', default_value = "oauth,policy,audit")]
    guard: Vec<String>,
    /// A new TCP connection per client request (rmcp's default) instead of
    /// keep-alive: the connection setup then dominates what is measured.
    #[arg(long)]
    new_connections: bool,
}

/// One Vigil of the comparison.
struct Variant {
    name: &'static str,
    server: Server,
    target: Target,
    api: String,
}

pub async fn run(args: &AccessArgs) -> anyhow::Result<()> {
    if !(args.duration > 0.0 && args.warmup >= 0.0) {
        bail!("--duration must be > 0 and --warmup >= 0");
    }
    let bin_dir = crate::resolve_bin_dir(args.bin_dir.as_deref())?;
    let machine = crate::machine::Machine::detect();
    println!("vigil-bench {} access", env!("CARGO_PKG_VERSION"));
    println!("{machine}");
    println!(
        "plan: {} session(s), {} round(s) x (open, guarded), warm-up {}s + {}s measured each, payload {} B, client HTTP {}",
        args.sessions,
        args.rounds,
        args.warmup,
        args.duration,
        args.payload,
        if args.new_connections {
            "new connection per request"
        } else {
            "keep-alive"
        }
    );
    let work = procs::WorkDir::create()?;
    let (mut backend, backend_url) = procs::demo_backend(&bin_dir, &work).await?;
    let issuer = serve_issuer().await?;

    let backend_toml = format!(
        "[[backends]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{backend_url}\"\nkeep_alive = true\n"
    );
    let open_config = format!("[audit]\ncalls = false\n\n{backend_toml}");
    let open = start_on(
        &bin_dir,
        &work,
        "open",
        procs::free_port()?,
        &open_config,
        None,
    )
    .await?;
    let guarded_port = procs::free_port()?;
    let resource = format!("http://127.0.0.1:{guarded_port}/mcp");
    let guarded_config = format!(
        "[auth.oauth]\nissuers = [\"{issuer}\"]\nrequired_scopes = [\"mcp\"]\n\n\
         [[policy]]\nprincipals = [\"group:bench\"]\nallow = [\"demo__*\"]\ndeny = [\"demo__crash\"]\n\
         rate = \"100000000/min\"\nrate_per_tool = \"100000000/min\"\n\n{backend_toml}"
    );
    let tokens: Vec<String> = (0..args.sessions)
        .map(|i| sign(&issuer, &resource, &format!("bench-{i}")))
        .collect::<anyhow::Result<_>>()?;
    let guarded = start_on(
        &bin_dir,
        &work,
        "guarded",
        guarded_port,
        &guarded_config,
        Some(&tokens[0]),
    )
    .await?;
    let mut variants = [open, guarded];
    variants[1].target.tokens = tokens;
    if let Some(v) = procs::version(&bin_dir.join("vigil")).await {
        println!(
            "gateway: {v}; guarded turns on {:?} (oauth: an issuer served by the bench, ES256; policy: one entry with allow, deny, rate and rate_per_tool; audit: the call audit)",
            args.guard
        );
    }
    println!();

    let backend_pid = backend.pid();
    let plan = Plan {
        sessions: args.sessions as usize,
        warmup: Duration::from_secs_f64(args.warmup),
        duration: Duration::from_secs_f64(args.duration),
        payload: "x".repeat(args.payload),
        keep_alive: !args.new_connections,
    };
    let mut samples: [Vec<Sample>; 2] = [Vec::new(), Vec::new()];
    for round in 1..=args.rounds {
        let order: [usize; 2] = if round % 2 == 1 { [0, 1] } else { [1, 0] };
        for i in order {
            let v = &mut variants[i];
            v.server.check_alive()?;
            backend.check_alive()?;
            let pids = Pids {
                backend: backend_pid,
                vigil: v.server.pid(),
            };
            let s = load::run_target(&v.target, &plan, &pids)
                .await
                .with_context(|| format!("{} round {round}", v.name))?;
            let mut sorted = s.latencies_ns.clone();
            sorted.sort_unstable();
            let l = Latency::of(&sorted);
            println!(
                "round {round} {:<8} {:>8.0} calls/s  p50 {:>7.1} µs  p99 {:>7.1} µs  vigil {:>5.1} µs CPU/call  errors {}{}",
                v.name,
                s.completed as f64 / s.window.as_secs_f64(),
                l.p50,
                l.p99,
                s.cpu_vigil / s.completed.max(1) as f64 * 1e6,
                s.errors,
                s.first_error
                    .as_deref()
                    .map(|e| format!(" (first: {e})"))
                    .unwrap_or_default(),
            );
            samples[i].push(s);
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    println!();
    let figures: Vec<(f64, Latency, f64)> = samples
        .iter()
        .map(|ss| {
            let mut all: Vec<u64> = ss
                .iter()
                .flat_map(|s| s.latencies_ns.iter().copied())
                .collect();
            all.sort_unstable();
            let calls: u64 = ss.iter().map(|s| s.completed).sum();
            let secs: f64 = ss.iter().map(|s| s.window.as_secs_f64()).sum();
            let cpu: f64 = ss.iter().map(|s| s.cpu_vigil).sum();
            (
                calls as f64 / secs,
                Latency::of(&all),
                cpu / calls.max(1) as f64 * 1e6,
            )
        })
        .collect();
    println!("variant    calls/s    p50 µs    p90 µs    p99 µs   vigil CPU µs/call");
    for (v, (tput, l, cpu)) in variants.iter().zip(&figures) {
        println!(
            "{:<8} {:>9.0} {:>9.1} {:>9.1} {:>9.1} {:>12.1}",
            v.name, tput, l.p50, l.p90, l.p99, cpu
        );
    }
    let added = figures[1].1.p50 - figures[0].1.p50;
    let ratio = figures[1].0 / figures[0].0;
    println!(
        "\nadded p50: {added:+.1} µs (goal ≤ {GOAL_ADDED_P50_US} µs: {}); throughput guarded/open: {ratio:.3} (goal ≥ {GOAL_THROUGHPUT_RATIO}: {}); added CPU per call: {:+.1} µs",
        if added <= GOAL_ADDED_P50_US {
            "met"
        } else {
            "not met"
        },
        if ratio >= GOAL_THROUGHPUT_RATIO {
            "met"
        } else {
            "not met"
        },
        figures[1].2 - figures[0].2,
    );
    audit_check(&variants[1].api).await;
    for v in variants {
        v.server.stop().await;
    }
    backend.stop().await;
    Ok(())
}

/// Says how many calls the guarded Vigil's audit holds and dropped.
async fn audit_check(api: &str) {
    let http = reqwest::Client::new();
    let newest = async {
        let r = http
            .get(format!("{api}/api/v1/audit/calls?limit=1"))
            .send()
            .await
            .ok()?;
        let v: serde_json::Value = serde_json::from_slice(&r.bytes().await.ok()?).ok()?;
        v["calls"][0]["id"].as_u64()
    };
    let dropped = async {
        let r = http.get(format!("{api}/metrics")).send().await.ok()?;
        let text = String::from_utf8(r.bytes().await.ok()?.to_vec()).ok()?;
        Some(
            text.lines()
                .filter(|l| l.starts_with("vigil_audit_dropped_total"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .fold(0.0, |a, b| a + b),
        )
    };
    match (newest.await, dropped.await) {
        (Some(rows), Some(dropped)) => println!("audit: {rows} calls recorded, {dropped} dropped"),
        _ => println!("audit: could not read the guarded Vigil's audit"),
    }
}

/// Starts the Vigil `name` on `port` with `body` below its listeners;
/// `token` opens its readiness probe.
async fn start_on(
    bin_dir: &std::path::Path,
    work: &procs::WorkDir,
    name: &'static str,
    port: u16,
    body: &str,
    token: Option<&str>,
) -> anyhow::Result<Variant> {
    let dir = work.path().join(name);
    std::fs::create_dir_all(&dir)?;
    let api_port = procs::free_port()?;
    let config = dir.join("vigil.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:{port}\"\nlog_level = \"warn\"\n\n[api]\nlisten = \"127.0.0.1:{api_port}\"\n\n{body}"
        ),
    )?;
    let mut server = Server::vigil(&bin_dir.join("vigil"), &config, None, dir.join("vigil.log"))?;
    let url = format!("http://127.0.0.1:{port}/mcp");
    load::wait_ready_as(
        &mut server,
        &url,
        "demo__echo",
        token,
        Duration::from_secs(30),
    )
    .await?;
    Ok(Variant {
        name,
        server,
        target: Target {
            kind: TargetKind::Vigil,
            url,
            tool: "demo__echo".into(),
            tokens: Vec::new(),
        },
        api: format!("http://127.0.0.1:{api_port}"),
    })
}

/// An access token of the bench's issuer for `resource`, principal
/// `sub:<sub>` in group `bench`, valid for an hour.
fn sign(issuer: &str, resource: &str, sub: &str) -> anyhow::Result<String> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let claims = json!({"iss": issuer, "aud": resource, "sub": sub, "scope": "mcp",
                        "groups": ["bench"], "iat": now, "exp": now + 3600});
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some("bench".into());
    let key = EncodingKey::from_ec_der(&hex_decode(EC_PKCS8));
    Ok(jsonwebtoken::encode(&header, &claims, &key)?)
}

fn hex_decode(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .filter_map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

/// Serves an authorization server's metadata and JWKS on a free loopback
/// port for the rest of the run; returns its issuer URL.
async fn serve_issuer() -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let issuer = format!("http://{}", listener.local_addr()?);
    let metadata = Arc::new(json!({
        "issuer": issuer,
        "jwks_uri": format!("{issuer}/jwks"),
        "token_endpoint": format!("{issuer}/token"),
    }));
    let jwks = Arc::new(
        json!({"keys": [{"kty": "EC", "crv": "P-256", "kid": "bench", "use": "sig",
                                         "alg": "ES256", "x": EC_X, "y": EC_Y}]}),
    );
    let app = Router::new()
        .route(
            "/.well-known/oauth-authorization-server",
            get(move || {
                let m = metadata.clone();
                async move { axum::Json((*m).clone()) }
            }),
        )
        .route(
            "/jwks",
            get(move || {
                let j = jwks.clone();
                async move { axum::Json((*j).clone()) }
            }),
        );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(issuer)
}
