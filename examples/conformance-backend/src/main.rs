//! `vigil-conformance-backend`: an MCP server, over streamable HTTP at
//! `/mcp`, that implements everything the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`, server mode) expects of a server.
//! Vigil's conformance test runs the suite against it directly and through
//! the gateway, and compares the two (see `tests/conformance/`).

mod changes;
mod completion;
mod elicitation;
mod era;
mod fixtures;
mod logging;
mod mrtr;
mod prompts;
mod reconnect;
mod resources;
mod server;
mod session;
mod tools;

use std::{net::SocketAddr, sync::Arc};

use anyhow::Context;
use clap::Parser;
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

use crate::{
    changes::Changes,
    mrtr::Sealer,
    reconnect::ReconnectingSessionManager,
    server::ConformanceServer,
    session::{Session, Shared},
};

#[derive(Parser, Debug)]
#[command(
    version,
    about = "MCP server implementing the conformance suite's server scenarios"
)]
struct Args {
    /// Address to listen on; MCP is served at `/mcp`. Keep it on loopback:
    /// the server only accepts loopback `Host` headers (DNS-rebinding guard).
    #[arg(
        long,
        default_value = "127.0.0.1:3910",
        env = "CONFORMANCE_BACKEND_LISTEN"
    )]
    listen: SocketAddr,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,rmcp=warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();

    let shutdown = CancellationToken::new();
    let config =
        StreamableHttpServerConfig::default().with_cancellation_token(shutdown.child_token());
    let sessions = Arc::new(ReconnectingSessionManager::new(
        LocalSessionManager::default(),
        config.sse_retry,
    ));
    let shared = Shared {
        reconnector: sessions.clone(),
        changes: Changes::default(),
        sealer: Sealer::new()?,
    };
    let service = StreamableHttpService::new(
        move || Ok(ConformanceServer::new(Session::new(shared.clone()))),
        sessions,
        config,
    );
    let router = axum::Router::new().nest_service("/mcp", service);

    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let address = listener.local_addr().context("no local address")?;
    tracing::info!("MCP conformance backend serving http://{address}/mcp");

    tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            wait_for_signal().await;
            tracing::info!("shutting down");
            shutdown.cancel();
        }
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.cancelled_owned().await })
        .await
        .context("HTTP server failed")
}

/// Resolve on Ctrl-C or, on Unix, SIGTERM.
async fn wait_for_signal() {
    let interrupt = async {
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
        () = interrupt => {}
        () = terminate => {}
    }
}
