//! `vigil-demo-backend`: a small MCP server used by Vigil's demo and its
//! end-to-end tests. It has tools that echo, add, sleep, hang, crash, call
//! back into the client (sampling, elicitation, roots), report progress and
//! log; a readme, a counter and an item template as resources; a `greet`
//! prompt with completion; and extra tools read from a file that can change
//! while it runs.
//!
//! Run with:
//!
//! ```text
//! # stdio: stdout carries the protocol, logs go to stderr
//! cargo run -p vigil-demo-backend
//! # streamable HTTP at http://127.0.0.1:3901/mcp
//! cargo run -p vigil-demo-backend -- --transport http --listen 127.0.0.1:3901 --name alpha
//! # also 100 independent endpoints /mcp/0 ... /mcp/99 in one process
//! cargo run -p vigil-demo-backend -- --transport http --endpoints 100
//! # with extra tools that follow a file
//! cargo run -p vigil-demo-backend -- --tools-file tools.json
//! # writing "stderr tick N" to stderr every 50 ms (dies when stderr breaks)
//! cargo run -p vigil-demo-backend -- --stderr-every 50
//! # releases gone wrong: crashes at start, is slow to listen, dies after 3 s
//! cargo run -p vigil-demo-backend -- --exit-at-start 3
//! cargo run -p vigil-demo-backend -- --transport http --start-delay 3000
//! cargo run -p vigil-demo-backend -- --transport http --exit-after 3000
//! ```
//!
//! Set `RUST_LOG` (default `info,rmcp=warn`) to change how much is logged.

mod hub;
mod prompts;
mod resources;
mod server;
mod tools;
mod watch;

use std::{net::SocketAddr, path::PathBuf, sync::Arc};

use anyhow::Context as _;
use axum::{
    extract::{Path, Request, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use clap::{Parser, ValueEnum};
use rmcp::{
    ServiceExt,
    transport::{
        StreamableHttpServerConfig, StreamableHttpService,
        streamable_http_server::session::local::LocalSessionManager,
    },
};
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

use crate::{hub::Hub, server::DemoServer, watch::ToolsWatcher};

/// A small MCP server for Vigil's demo and tests.
#[derive(Debug, Parser)]
#[command(name = "vigil-demo-backend", version, about)]
struct Args {
    /// How clients reach the server.
    #[arg(long, value_enum, default_value_t = Transport::Stdio)]
    transport: Transport,

    /// Address to listen on with `--transport http` (MCP is served at `/mcp`).
    #[arg(long, default_value = "127.0.0.1:3901")]
    listen: SocketAddr,

    /// Server name: reported in serverInfo, used in resource URIs
    /// (`demo://NAME/...`) and returned by the `whoami` tool. Also read
    /// from the environment, so a test can see what environment a
    /// launcher gave the server.
    #[arg(long, env = "VIGIL_DEMO_NAME", default_value = "demo")]
    name: String,

    /// JSON file of extra tools, `{"notify": bool, "tools": [{"name", "description"}]}`,
    /// polled every 100 ms. With notify=true a change sends
    /// notifications/tools/list_changed; with false it changes silently.
    /// Also read from the environment, so a container image can carry its
    /// own tools without changing the container's arguments.
    #[arg(long, env = "VIGIL_DEMO_TOOLS_FILE", value_name = "PATH")]
    tools_file: Option<PathBuf>,

    /// Extra value accepted in the HTTP `Host` header (repeatable; `*` accepts
    /// any). Loopback names (localhost, 127.0.0.1, ::1) are always accepted.
    #[arg(long, value_name = "HOST")]
    allow_host: Vec<String>,

    /// With `--transport http`, also serve N independent MCP endpoints at
    /// `/mcp/0` ... `/mcp/{N-1}`, each with its own sessions (one process
    /// standing in for many backends, e.g. for benchmarks). They share the
    /// server name, the extra tools and the counter. `/mcp` is served as well.
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    endpoints: u32,

    /// Write `stderr tick N` to stderr every MS milliseconds. A write that
    /// fails ends the process with status 141, as the default SIGPIPE action
    /// ends a C, Go or shell program whose stderr reader went away (tests
    /// use it to see that the reader keeps reading).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    stderr_every: Option<u64>,

    /// Exit with status CODE at start, before serving anything, saying so on
    /// stderr: a release that crashes at start. Also read from the
    /// environment (as are `--start-delay` and `--exit-after`), so a
    /// container image can set it with `ENV` without changing the
    /// container's arguments.
    #[arg(long, env = "VIGIL_DEMO_EXIT_AT_START", value_name = "CODE", value_parser = clap::value_parser!(i32).range(0..=255))]
    exit_at_start: Option<i32>,

    /// Wait MS milliseconds before listening (`http`) or reading stdin
    /// (`stdio`): a release that is slow to become ready.
    #[arg(long, env = "VIGIL_DEMO_START_DELAY_MS", value_name = "MS")]
    start_delay: Option<u64>,

    /// Serve normally, then exit with status 1 MS milliseconds after serving
    /// began (after any `--start-delay`), saying so on stderr: a release that
    /// crashes soon after it went live.
    #[arg(long, env = "VIGIL_DEMO_EXIT_AFTER_MS", value_name = "MS")]
    exit_after: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Transport {
    /// JSON-RPC over stdin/stdout.
    Stdio,
    /// MCP streamable HTTP.
    Http,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.endpoints > 0 && args.transport != Transport::Http {
        <Args as clap::CommandFactory>::command()
            .error(
                clap::error::ErrorKind::ArgumentConflict,
                "--endpoints needs --transport http",
            )
            .exit();
    }
    if let Some(code) = args.exit_at_start {
        say(&format!(
            "exiting with status {code} at start, as --exit-at-start (VIGIL_DEMO_EXIT_AT_START) asks"
        ));
        std::process::exit(code);
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,rmcp=warn")),
        )
        .init();

    let shutdown = CancellationToken::new();
    let mut watcher = args
        .tools_file
        .clone()
        .map(|path| ToolsWatcher::new(path, tools::builtin_names()));
    let initial_tools = match watcher.as_mut() {
        Some(watcher) => watcher.load().await,
        None => Vec::new(),
    };
    let hub = Arc::new(Hub::new(args.name.clone(), initial_tools));
    if let Some(ms) = args.stderr_every {
        tokio::spawn(tick_stderr(std::time::Duration::from_millis(ms)));
    }
    if let Some(watcher) = watcher {
        tokio::spawn(watcher.run(hub.clone(), shutdown.child_token()));
    }
    if let Some(ms) = args.start_delay {
        tracing::info!("waiting {ms} ms before serving (--start-delay)");
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
    if let Some(ms) = args.exit_after {
        tokio::spawn(exit_after(std::time::Duration::from_millis(ms)));
    }

    let result = match args.transport {
        Transport::Stdio => serve_stdio(hub).await,
        Transport::Http => serve_http(hub, &args, shutdown.clone()).await,
    };
    shutdown.cancel();
    result
}

/// Writes a numbered line to stderr every `every`, and exits with status 141
/// when a write fails (see `--stderr-every`).
async fn tick_stderr(every: std::time::Duration) {
    use std::io::Write as _;
    let mut tick = tokio::time::interval(every);
    for n in 1u64.. {
        tick.tick().await;
        if writeln!(std::io::stderr(), "stderr tick {n}").is_err() {
            std::process::exit(141);
        }
    }
}

/// Exits with status 1 once `after` has passed (see `--exit-after`).
async fn exit_after(after: std::time::Duration) {
    tokio::time::sleep(after).await;
    say(&format!(
        "exiting with status 1 after serving for {} ms, as --exit-after (VIGIL_DEMO_EXIT_AFTER_MS) asks",
        after.as_millis()
    ));
    std::process::exit(1);
}

/// Writes `vigil-demo-backend: MESSAGE` to stderr as one line in one write,
/// so that a reader of a container's log gets it whole.
fn say(message: &str) {
    use std::io::Write as _;
    let line = format!("vigil-demo-backend: {message}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// Serves one client over stdin/stdout until it disconnects.
async fn serve_stdio(hub: Arc<Hub>) -> anyhow::Result<()> {
    tracing::info!(name = hub.name(), "serving MCP over stdio");
    let service = DemoServer::new(hub)
        .serve(rmcp::transport::stdio())
        .await
        .context("MCP session over stdio failed to start")?;
    let reason = service
        .waiting()
        .await
        .context("MCP stdio session task failed")?;
    tracing::info!(?reason, "stdio session ended");
    Ok(())
}

/// The streamable HTTP MCP service of one endpoint.
type HttpService = StreamableHttpService<DemoServer, LocalSessionManager>;

/// Serves streamable HTTP at `/mcp` (and `/mcp/0` ... with `--endpoints`)
/// until Ctrl-C or SIGTERM.
async fn serve_http(hub: Arc<Hub>, args: &Args, shutdown: CancellationToken) -> anyhow::Result<()> {
    let mut config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(true)
        .with_cancellation_token(shutdown.child_token());
    if args.allow_host.iter().any(|host| host == "*") {
        config = config.disable_allowed_hosts();
    } else if !args.allow_host.is_empty() {
        let mut hosts = config.allowed_hosts.clone();
        hosts.extend(args.allow_host.iter().cloned());
        config = config.with_allowed_hosts(hosts);
    }
    // One service per endpoint, each with its own session manager, so the
    // endpoints are as independent as separate servers.
    let new_service = |config: StreamableHttpServerConfig| -> HttpService {
        let factory_hub = hub.clone();
        StreamableHttpService::new(
            move || Ok(DemoServer::new(factory_hub.clone())),
            Arc::new(LocalSessionManager::default()),
            config,
        )
    };
    let service = new_service(config.clone());
    let router = if args.endpoints == 0 {
        axum::Router::new().nest_service("/mcp", service)
    } else {
        let endpoints: Arc<Vec<HttpService>> = Arc::new(
            (0..args.endpoints)
                .map(|_| new_service(config.clone()))
                .collect(),
        );
        axum::Router::new()
            .route_service("/mcp", service)
            .route("/mcp/{n}", axum::routing::any(serve_endpoint))
            .with_state(endpoints)
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let local = listener.local_addr().unwrap_or(args.listen);
    if args.endpoints == 0 {
        tracing::info!(
            name = hub.name(),
            "serving MCP over streamable HTTP at http://{local}/mcp"
        );
    } else {
        tracing::info!(
            name = hub.name(),
            "serving MCP over streamable HTTP at http://{local}/mcp and http://{local}/mcp/0 ... /mcp/{}",
            args.endpoints - 1
        );
    }
    // Small SSE writes must not wait for the client's delayed ACK (Nagle).
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            shutdown_signal().await;
            tracing::info!("shutting down");
            shutdown.cancel();
        })
        .await
        .context("HTTP server failed")
}

/// `/mcp/{n}`: hands the request to endpoint `n`'s service.
async fn serve_endpoint(
    State(endpoints): State<Arc<Vec<HttpService>>>,
    Path(n): Path<String>,
    request: Request,
) -> Response {
    match n.parse::<usize>().ok().and_then(|n| endpoints.get(n)) {
        Some(service) => service.handle(request).await.into_response(),
        None => (
            StatusCode::NOT_FOUND,
            format!(
                "no MCP endpoint /mcp/{n}; this server has /mcp/0 ... /mcp/{}\n",
                endpoints.len() - 1
            ),
        )
            .into_response(),
    }
}

/// Resolves on Ctrl-C or (on Unix) SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::warn!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = terminate => {}
    }
}
