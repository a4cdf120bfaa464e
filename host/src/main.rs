//! The `vigil` binary: command line, logging, signals. Everything else lives
//! in the library.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use vigil::app::{self, App};
use vigil::config::Config;
use vigil::gateway;

/// Many small short-lived allocations on several threads (requests, JSON,
/// HTTP buffers): mimalloc serves them with less CPU than glibc's malloc
/// (see docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Vigil: one MCP endpoint in front of many MCP servers.
///
/// Vigil starts or connects to the MCP servers listed in its config file
/// ("backends"), merges their tools, resources and prompts into one catalog,
/// routes each request to the backend that owns it, relays what backends
/// send back (sampling, elicitation, roots, progress, logs, resource
/// updates), and pushes `list_changed` to every client when a backend's
/// capabilities change, fail or return.
#[derive(Parser)]
#[command(name = "vigil", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve MCP over streamable HTTP at http://LISTEN/mcp.
    ///
    /// Reads the config, starts every enabled backend and waits up to
    /// `startup_timeout` for them, then serves until SIGINT/SIGTERM. A bad
    /// config is refused with every problem listed (file, key, fix); under
    /// naming = "none" two backends exporting the same name refuse the start.
    Serve(ConfigArg),
    /// Serve one MCP session over stdin/stdout (for clients that launch
    /// their servers, like desktop apps). Logs go to stderr.
    Stdio(ConfigArg),
    /// Validate a config file and print what it defines, without starting
    /// anything. Exits 2 with every problem listed if the file is bad.
    Check(ConfigArg),
    /// Turn an MCP client's server list into a Vigil config.
    ///
    /// Reads the `mcpServers` JSON of Claude Desktop
    /// (claude_desktop_config.json), Cursor (.cursor/mcp.json) or Claude
    /// Code (.mcp.json), or VS Code's `servers` (.vscode/mcp.json, or
    /// `mcp.servers` in settings.json), and writes one [[backends]] per
    /// server. Every field not carried over exactly is reported on stderr
    /// with its JSON path; `${env:NAME}`, `${NAME}` and `${input:ID}`
    /// references stay references (`${NAME}`, read from Vigil's environment
    /// at load). Exits 2 if the file cannot be imported or --out exists.
    Import {
        /// The client's config file.
        file: PathBuf,
        /// Write the config to this file instead of stdout; an existing
        /// file is refused unless --force.
        #[arg(long, value_name = "FILE.toml")]
        out: Option<PathBuf>,
        /// Replace the --out file if it exists.
        #[arg(long, requires = "out")]
        force: bool,
    },
    /// Work with WebAssembly plugins (see docs/plugins.md).
    #[command(subcommand)]
    Plugin(PluginCommand),
    #[command(flatten)]
    Operator(vigil::cli::Command),
}

#[derive(Subcommand)]
enum PluginCommand {
    /// Validate a plugin as the plugin directory would, without running it:
    /// prints its world, `vigil:plugin` version, imports and exports, and
    /// its manifest's limits. Exits 2 with the reason if it would be refused.
    Check {
        /// The component, `NAME.wasm`.
        file: PathBuf,
        /// Its manifest (default: `NAME.toml` beside the file, if any).
        #[arg(long, value_name = "FILE.toml")]
        manifest: Option<PathBuf>,
        /// The largest plugin file accepted, as `[plugins] max_file_bytes`.
        #[arg(long, value_name = "BYTES", default_value_t = vigil::plugins::files::DEFAULT_MAX_PLUGIN)]
        max_file_bytes: u64,
    },
    /// Create a Rust plugin crate `NAME/` (in the current directory) that
    /// builds as is with `cargo build --release --target wasm32-wasip2`.
    New {
        name: String,
        #[arg(long, value_enum)]
        kind: KindArg,
        /// The vigil-sdk crate (default: the `sdk` directory of the source
        /// tree this vigil was built from).
        #[arg(long, value_name = "PATH")]
        sdk: Option<PathBuf>,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum KindArg {
    Probe,
    Notifier,
}

/// `vigil import`: notes and errors on stderr, the config on stdout or in
/// `--out`; 0 when written, 2 when the file cannot be imported or `--out`
/// exists, 1 when writing failed.
fn import_command(file: &Path, out: Option<&Path>, force: bool) -> ExitCode {
    use std::io::Write;

    use vigil::import::{ImportError, OutputError};

    let imported = match vigil::import::import_file(file) {
        Ok(i) => i,
        Err(e) => {
            if let ImportError::NothingImported { notes, .. } = &e {
                for n in notes {
                    eprintln!("{}", n.in_file(file));
                }
            }
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    for n in &imported.notes {
        eprintln!("{}", n.in_file(file));
    }
    match out {
        None => {
            // Written, not print!: a closed pipe is not worth a panic.
            if std::io::stdout()
                .lock()
                .write_all(imported.toml.as_bytes())
                .is_err()
            {
                return ExitCode::FAILURE;
            }
        }
        Some(path) => {
            if let Err(e) =
                vigil::import::write_config(path, &imported.toml, force, imported.literal_secrets)
            {
                eprintln!("error: {e}");
                return match e {
                    OutputError::Exists { .. } => ExitCode::from(2),
                    _ => ExitCode::FAILURE,
                };
            }
        }
    }
    let skipped = match imported.skipped {
        0 => String::new(),
        n => format!("; {n} not imported (see the warnings)"),
    };
    let to = out.map_or_else(|| "stdout".to_owned(), |p| p.display().to_string());
    eprintln!(
        "imported {} backend(s) from {} to {to}: {}{skipped}",
        imported.backends.len(),
        file.display(),
        imported.backends.join(", ")
    );
    if !imported.vars.is_empty() {
        let them = if imported.vars.len() == 1 {
            "it"
        } else {
            "them"
        };
        eprintln!(
            "it reads {} from the environment: set {them} for `vigil check` and `vigil serve`",
            imported.vars.join(", ")
        );
    }
    if imported.literal_secrets {
        let private = if out.is_some() {
            " (written readable by you only)"
        } else {
            ""
        };
        eprintln!(
            "it holds literal values that look like secrets{private}: keep it out of shared places, or replace them with ${{NAME}} references"
        );
    }
    if let Some(path) = out {
        eprintln!("next: vigil check --config {}", path.display());
    }
    ExitCode::SUCCESS
}

fn plugin_command(cmd: PluginCommand) -> ExitCode {
    match cmd {
        PluginCommand::New { name, kind, sdk } => {
            let kind = match kind {
                KindArg::Probe => vigil::plugins::Kind::Probe,
                KindArg::Notifier => vigil::plugins::Kind::Notifier,
            };
            let Some(sdk) = sdk.or_else(vigil::plugins::scaffold::default_sdk) else {
                eprintln!(
                    "error: this vigil was not built from a source tree that still has its sdk/: pass --sdk PATH"
                );
                return ExitCode::from(2);
            };
            match vigil::plugins::scaffold::new_plugin(Path::new("."), &name, kind, &sdk) {
                Ok(dir) => {
                    println!("created {} ({kind} plugin)", dir.display());
                    println!(
                        "  cd {} && cargo build --release --target wasm32-wasip2",
                        dir.display()
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
            }
        }
        PluginCommand::Check {
            file,
            manifest,
            max_file_bytes,
        } => match vigil::plugins::check_file(&file, manifest.as_deref(), max_file_bytes) {
            Ok(c) => {
                let i = &c.inspection;
                let m = &c.manifest;
                println!("{}: ok", file.display());
                println!("  world:    {} (vigil:plugin@{})", i.kind, i.version);
                println!("  sha256:   {}", c.sha256);
                println!("  exports:  {}", i.exports.join(", "));
                println!("  imports:");
                for name in &i.imports {
                    println!("    {name}");
                }
                println!(
                    "  limits:   memory {} MiB, deadline {}, disabled after {} failures",
                    m.limits.memory >> 20,
                    humantime::format_duration(m.limits.deadline),
                    m.limits.failures
                );
                let hosts = if m.allowed_hosts.is_empty() {
                    "none".to_owned()
                } else {
                    m.allowed_hosts.join(", ")
                };
                println!("  http:     {hosts}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {}: {e}", file.display());
                ExitCode::from(2)
            }
        },
    }
}

#[derive(clap::Args)]
struct ConfigArg {
    /// Path of the TOML config file (see docs/config.md for every key).
    #[arg(short, long, env = "VIGIL_CONFIG", default_value = "vigil.toml")]
    config: PathBuf,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let arg = match cli.command {
        Command::Plugin(cmd) => return plugin_command(cmd),
        Command::Import { file, out, force } => {
            return import_command(&file, out.as_deref(), force);
        }
        Command::Operator(cmd) => {
            return match tokio::runtime::Runtime::new() {
                Ok(rt) => rt.block_on(vigil::cli::run(cmd)),
                Err(e) => {
                    eprintln!("error: cannot start the async runtime: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Command::Serve(ref arg) | Command::Stdio(ref arg) | Command::Check(ref arg) => arg,
    };
    let config = match Config::load(&arg.config) {
        Ok(c) => c,
        Err(e) => {
            // A refused `url` is quoted: without its credentials.
            let e = vigil::redact::url::mask_urls(&e.to_string()).into_owned();
            eprintln!("error: invalid config\n{e}");
            return ExitCode::from(2);
        }
    };
    if let Command::Check(_) = cli.command {
        use std::io::Write;
        // Written, not println!: a closed pipe (`vigil check | head`) is
        // not worth a panic.
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "{}: ok, {} backend(s)",
            config.file.display(),
            config.backends.len()
        );
        for b in &config.backends {
            let transport = match b.transport {
                vigil::config::Transport::Stdio { .. } => "stdio",
                vigil::config::Transport::Http { .. } => "http",
            };
            let _ = writeln!(out, "  {} ({transport})", b.name);
        }
        let store = match &config.store.url {
            Some(url) => format!(
                "{} (PostgreSQL, from `{}`)",
                vigil::store::postgres::location(&url.config),
                url.var
            ),
            None => config
                .data_dir
                .join(vigil::store::sqlite::FILE_NAME)
                .display()
                .to_string(),
        };
        let _ = writeln!(
            out,
            "store: {store} ({})",
            if config.store.optional {
                "optional: serves without durable state if it cannot be opened"
            } else {
                "required: serve and stdio refuse to start if it cannot be opened"
            }
        );
        for warning in vigil::redact::configured::too_short(
            &config.api.tokens,
            &config.auth.keys,
            &config.backends,
        )
        .into_iter()
        .chain(vigil::gateway::isolation::pinned(
            &config.auth,
            &config.backends,
        )) {
            eprintln!("warning: {warning}");
        }
        return ExitCode::SUCCESS;
    }
    // One set of secrets for the log and the gateway; the gateway keeps it
    // current across config reloads.
    let redactor = vigil::redact::Redactor::new(vigil::redact::configured::secrets(
        &config.api.tokens,
        &vigil::redact::configured::auth_secrets(&config.auth.keys, config.auth.oauth.as_ref()),
        &config.backends,
    ));
    let exporter = match vigil::logging::init(&config, redactor.clone()) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let stdio = matches!(cli.command, Command::Stdio(_));
    let result = runtime.block_on(run(config, redactor.clone(), stdio));
    // Outside the runtime: the last export blocks.
    if let Some(e) = exporter {
        e.shutdown();
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", redactor.mask(&format!("{e:#}")));
            ExitCode::FAILURE
        }
    }
}

/// How long a shutdown waits for the background tasks (writers draining
/// included) before the process exits anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Serves until a signal (or, for stdio, until the client leaves), then
/// shuts down. Every background task runs on `tracker` and watches
/// `shutdown` (or a child of it); the order is:
///
/// 1. SIGTERM or Ctrl-C (or the end of serving) cancels `shutdown`.
/// 2. Everything watching it stops taking work: the MCP front and the
///    control API stop accepting and close their connections; the update
///    task, the poller, the resync workers, the relays and the plugin tasks
///    end; each supervisor leaves its loop and stops its backend (no
///    transition follows).
/// 3. The writers drain: the health store writer and the call audit close
///    their queues and write everything already in them, so every
///    transition a supervisor handed over before the signal is on disk.
/// 4. `tracker` and the tracker of the tasks below the gateway
///    (`background::detached`: process watchers, stderr pumps, connection
///    relays, which end with their processes and connections) are closed
///    and waited for, up to [`SHUTDOWN_GRACE`]; past it the process exits
///    with a WARN, and what is still queued is lost.
///
/// The same order runs when the start fails after the backends were
/// launched (a naming conflict), so their first transitions are kept too.
async fn run(config: Config, redactor: vigil::redact::Redactor, stdio: bool) -> anyhow::Result<()> {
    let tracker = TaskTracker::new();
    let shutdown = CancellationToken::new();
    tracker.spawn(on_signal(shutdown.clone()));
    match vigil::limits::raise_open_files() {
        Ok((before, after)) if after > before => {
            tracing::debug!(before, after, "raised the open-file limit")
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "serving with the current open-file limit"),
    }
    let caps = vigil::limits::ConnectionCaps::fit(
        vigil::limits::open_files(),
        config.backends.len(),
        config.limits.mcp.connections,
        config.limits.api.connections,
    );
    caps.log();
    let store = open_store(&config).await?;
    let result = serve(config, caps, store, redactor, stdio, &tracker, &shutdown).await;
    shutdown.cancel();
    tracker.close();
    let detached = vigil::background::detached();
    detached.close();
    let both = async { tokio::join!(tracker.wait(), detached.wait()) };
    if tokio::time::timeout(SHUTDOWN_GRACE, both).await.is_err() {
        tracing::warn!("shutdown grace period over; exiting with tasks still running");
    }
    result
}

/// Launches the gateway and the control API on `tracker` and serves MCP
/// until `shutdown` (or the end of stdio).
async fn serve(
    config: Config,
    caps: vigil::limits::ConnectionCaps,
    store: Option<vigil::store::Stores>,
    redactor: vigil::redact::Redactor,
    stdio: bool,
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let api = config.api.clone();
    let startup = App::launch(config, store.clone(), redactor, tracker, shutdown.clone()).await;
    // The control API answers while backends start (they show `starting`).
    let api_state =
        vigil::api::ApiState::new(startup.app.clone(), store, &api, startup.app.api_tokens())
            .with_limits(startup.app.config().limits.api)
            .with_cap(caps.api)
            .with_oauth(startup.app.front().oauth());
    let api_shutdown = shutdown.clone();
    tracker.spawn(async move {
        // Losing the control API must not stop MCP traffic: say so loudly
        // and keep serving.
        if let Err(e) = vigil::api::serve(api.listen, api_state, api_shutdown).await {
            tracing::error!(address = %api.listen, error = %e, "the control API cannot listen; serving MCP without it (set [api] listen to a free address)");
        }
    });
    let app = startup.settle(tracker).await?;
    let gw = app.front().clone();
    if !stdio {
        for warning in gw.isolation_warnings() {
            tracing::warn!("{warning}");
        }
    }
    tracker.spawn(app::reload_trigger::run(app, shutdown.clone()));
    if stdio {
        gateway::stdio::serve(gw, shutdown.clone()).await
    } else {
        gateway::http::serve(gw, caps.mcp, shutdown.clone())
            .await
            .map_err(Into::into)
    }
}

/// Opens the state store before any backend starts: refused (the start
/// fails with what, where and how to fix) unless `[store] optional = true`.
async fn open_store(config: &Config) -> anyhow::Result<Option<vigil::store::Stores>> {
    Ok(vigil::store::open(
        &config.data_dir,
        &config.store,
        config.cluster.replica.as_str(),
    )
    .await?)
}

/// Cancels `shutdown` on SIGTERM or Ctrl-C; ends quietly when something
/// else cancelled it first (stdio's client left, the start failed).
async fn on_signal(shutdown: CancellationToken) {
    tokio::select! {
        _ = shutdown.cancelled() => return,
        _ = signalled() => {}
    }
    tracing::info!("shutting down");
    shutdown.cancel();
}

/// Resolves on the first SIGTERM or Ctrl-C (Ctrl-C only where SIGTERM
/// cannot be listened for).
async fn signalled() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(t) => t,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
