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
//! # with extra tools that follow a file
//! cargo run -p vigil-demo-backend -- --tools-file tools.json
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
    /// (`demo://NAME/...`) and returned by the `whoami` tool.
    #[arg(long, default_value = "demo")]
    name: String,

    /// JSON file of extra tools, `{"notify": bool, "tools": [{"name", "description"}]}`,
    /// polled every 100 ms. With notify=true a change sends
    /// notifications/tools/list_changed; with false it changes silently.
    #[arg(long, value_name = "PATH")]
    tools_file: Option<PathBuf>,

    /// Extra value accepted in the HTTP `Host` header (repeatable; `*` accepts
    /// any). Loopback names (localhost, 127.0.0.1, ::1) are always accepted.
    #[arg(long, value_name = "HOST")]
    allow_host: Vec<String>,
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
    if let Some(watcher) = watcher {
        tokio::spawn(watcher.run(hub.clone(), shutdown.child_token()));
    }

    let result = match args.transport {
        Transport::Stdio => serve_stdio(hub).await,
        Transport::Http => serve_http(hub, &args, shutdown.clone()).await,
    };
    shutdown.cancel();
    result
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

/// Serves streamable HTTP at `/mcp` until Ctrl-C or SIGTERM.
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
    let factory_hub = hub.clone();
    let service = StreamableHttpService::new(
        move || Ok(DemoServer::new(factory_hub.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let local = listener.local_addr().unwrap_or(args.listen);
    tracing::info!(
        name = hub.name(),
        "serving MCP over streamable HTTP at http://{local}/mcp"
    );
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
