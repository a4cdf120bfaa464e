//! The operator commands that talk to a running gateway's control API:
//! `vigil status`, `vigil restart NAME`, `vigil quarantine NAME [--reason R]`,
//! `vigil release NAME`, `vigil plugins`, `vigil events [--follow]` and
//! `vigil audit [--follow]` (the audit of MCP calls, see [`audit`]).
//!
//! Each takes `--api URL` (env `VIGIL_API`, default
//! `http://127.0.0.1:8081`), `--token T` (env `VIGIL_TOKEN`) and `--json`
//! (print the API's JSON instead of a table; for `events`, one JSON line
//! per event). Results go to stdout, errors to stderr, and the exit code
//! says what happened ([`Exit`]):
//!
//! | code | `status` | `plugins` | `events` / `audit` | `restart` / `quarantine` / `release` |
//! |---|---|---|---|---|
//! | 0 | every backend is serving (running, degraded or unknown) | every plugin active, or none | printed; with `--follow`: stopped by Ctrl-C | done |
//! | 2 | API unreachable or not answering like Vigil (also clap's code for a usage error) | same | same, on the first connection (later ones are retried); `audit` without a store (503) | same |
//! | 3 | some backend is not serving | some plugin disabled or rejected | — | — |
//! | 4 | token missing or refused (401), or role too weak (403) | same | same, on any connection | same |
//! | 5 | — | — | `audit`: a filter the API refused (400) | refused by the API: no such backend (404), the action does not apply now (409), bad input (400) |
//!
//! `main.rs` embeds [`Command`] with `#[command(flatten)]` and hands it to
//! [`run`] (inside a runtime) or [`run_blocking`].

pub mod audit;
mod client;
mod events;
mod sse;
mod table;
#[cfg(test)]
mod tests;

pub use client::{ApiClient, ClientError, Failure};
pub use events::{Collect, Sink, StdStreams};
pub use sse::{SseEvent, SseParser};
pub use table::{PluginRow, Row};

use std::process::ExitCode;
use std::time::SystemTime;

use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const STATUS_EXIT_CODES: &str = "\
Exit codes:
  0  every backend is serving (running, degraded or unknown)
  2  the API cannot be reached or did not answer like Vigil (also: usage error)
  3  some backend is not serving (starting, offline, restarting, updating, quarantined)
  4  the token is missing or refused (401/403)";

const PLUGINS_EXIT_CODES: &str = "\
Exit codes:
  0  every plugin is active, or there are none (or plugins are off)
  2  the API cannot be reached or did not answer like Vigil (also: usage error)
  3  some plugin is disabled (too many failures) or rejected (did not validate)
  4  the token is missing or refused (401/403)";

const EVENTS_EXIT_CODES: &str = "\
Exit codes:
  0  printed; with --follow: stopped by Ctrl-C (or stdout closed)
  2  the first connection failed: the API cannot be reached or did not answer
     like Vigil (also: usage error); later ones are retried
  4  the token is missing or refused (401/403), on any connection";

const AUDIT_EXIT_CODES: &str = "\
Exit codes:
  0  printed; with --follow: stopped by Ctrl-C (or stdout closed)
  2  the API cannot be reached or did not answer like Vigil, or the gateway runs
     without its state store (also: usage error); with --follow, later polls
     are retried
  4  the token is missing or refused (401/403)
  5  a filter the API refused (unknown outcome, unreadable --since)";

const ACTION_EXIT_CODES: &str = "\
Exit codes:
  0  done; the backend's new state is printed
  2  the API cannot be reached or did not answer like Vigil (also: usage error)
  4  the token is missing or refused (401), or is not an operator token (403)
  5  refused: no such backend (404), the action does not apply now (409), bad input (400)";

const UPDATE_EXIT_CODES: &str = "\
Exit codes:
  0  done: the update started (or, with --wait, succeeded), was approved or aborted, or is shown
  1  (--wait) the update was rolled back; the reason is printed
  2  the API cannot be reached or did not answer like Vigil (also: usage error)
  4  the token is missing or refused (401), or is not an operator token (403)
  5  refused: no such backend (404), an update already runs or nothing is held (409), bad input (400)";

/// Options every command shares.
#[derive(Debug, Clone, clap::Args)]
pub struct ApiArgs {
    /// Base URL of the control API (the gateway's `[api] listen`).
    #[arg(
        long,
        env = "VIGIL_API",
        default_value = "http://127.0.0.1:8081",
        value_name = "URL"
    )]
    pub api: String,
    /// Bearer token: the secret of one of the gateway's `[[api.tokens]]`.
    /// Not needed when the gateway has no tokens (loopback only).
    #[arg(
        long,
        env = "VIGIL_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,
    /// Print the API's JSON answer instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `vigil status`.
#[derive(Debug, Clone, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub api: ApiArgs,
}

/// `vigil plugins`.
#[derive(Debug, Clone, clap::Args)]
pub struct PluginsArgs {
    #[command(flatten)]
    pub api: ApiArgs,
}

/// `vigil events [--follow] [--backend NAME]...`.
#[derive(Debug, Clone, clap::Args)]
pub struct EventsArgs {
    /// Keep printing transitions as they happen, until Ctrl-C. Reconnects
    /// (with a note on stderr) when the stream ends, as when the gateway
    /// restarts.
    #[arg(short, long)]
    pub follow: bool,
    /// Show only this backend's transitions (repeat for several).
    #[arg(long = "backend", value_name = "NAME")]
    pub backends: Vec<String>,
    #[command(flatten)]
    pub api: ApiArgs,
}

/// `vigil audit [--follow] [filters]`.
#[derive(Debug, Clone, clap::Args)]
pub struct AuditArgs {
    /// Only this principal's calls (`key:NAME`, `local`, ...).
    #[arg(long, value_name = "PRINCIPAL")]
    pub principal: Option<String>,
    /// Only calls of principals this `[auth.oauth]` issuer vouched for.
    #[arg(long, value_name = "URL")]
    pub issuer: Option<String>,
    /// Only calls to this backend (its configured name).
    #[arg(long, value_name = "NAME")]
    pub backend: Option<String>,
    /// Only calls with this outcome: ok, error, denied, rate_limited or
    /// unavailable.
    #[arg(long, value_name = "OUTCOME")]
    pub outcome: Option<String>,
    /// Only calls since this time: RFC 3339 (2025-06-01T09:00:00Z) or a
    /// duration back from now (10m, 2h, 7d).
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// How many of the newest calls to show first.
    #[arg(long, value_name = "N", default_value_t = 100,
          value_parser = clap::value_parser!(u64).range(1..=crate::audit::MAX_LIMIT as u64))]
    pub limit: u64,
    /// Keep showing calls as they are recorded (polling every second)
    /// until Ctrl-C.
    #[arg(short, long)]
    pub follow: bool,
    #[command(flatten)]
    pub api: ApiArgs,
}

/// `vigil restart|release NAME`.
#[derive(Debug, Clone, clap::Args)]
pub struct ActionArgs {
    /// The backend's configured name.
    pub name: String,
    #[command(flatten)]
    pub api: ApiArgs,
}

/// `vigil quarantine NAME [--reason R]`.
#[derive(Debug, Clone, clap::Args)]
pub struct QuarantineArgs {
    /// The backend's configured name.
    pub name: String,
    /// Why (shown in `vigil status` and recorded in the transition log).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    #[command(flatten)]
    pub api: ApiArgs,
}

/// `vigil pins NAME` and `vigil approve NAME [--digest D]...`.
#[derive(Debug, Clone, clap::Args)]
pub struct PinsArgs {
    /// The backend's configured name.
    pub name: String,
    /// (approve) Approve only the held definitions of these digests (from
    /// `vigil pins`), all or none; without it, what is held when this
    /// command reads it.
    #[arg(long = "digest", value_name = "DIGEST")]
    pub digests: Vec<String>,
    #[command(flatten)]
    pub api: ApiArgs,
}

/// `vigil update NAME [--image IMAGE [--wait] | --approve | --abort]`.
#[derive(Debug, Clone, clap::Args)]
pub struct UpdateArgs {
    /// The backend's configured name.
    pub name: String,
    /// Start an update of a container backend to this image (a process
    /// backend's command line changes in the config file).
    #[arg(long, value_name = "IMAGE", conflicts_with_all = ["approve", "abort"])]
    pub image: Option<String>,
    /// With --image: wait until the update ends, and exit 1 if it was
    /// rolled back.
    #[arg(long, requires = "image")]
    pub wait: bool,
    /// Approve the held update (its catalog change, shown by `vigil
    /// update NAME`).
    #[arg(long, conflicts_with = "abort")]
    pub approve: bool,
    /// Abort the update in progress: the old version serves on.
    #[arg(long)]
    pub abort: bool,
    #[command(flatten)]
    pub api: ApiArgs,
}

/// `vigil search QUERY [--principal P] [--limit N] [--server S]`.
#[derive(Debug, Clone, clap::Args)]
pub struct SearchArgs {
    /// The task, in plain words, as a model would ask `find_tool`.
    pub query: String,
    /// Whose view: `local`, `key:NAME` or `sub:SUBJECT` (with --issuer);
    /// without it, every tool of every serving backend.
    #[arg(long, value_name = "PRINCIPAL")]
    pub principal: Option<String>,
    /// With a `sub:` principal: the issuer that vouches for it.
    #[arg(long, value_name = "URL")]
    pub issuer: Option<String>,
    /// With a `sub:` principal: one of its groups (repeat for more).
    #[arg(long = "group", value_name = "GROUP")]
    pub groups: Vec<String>,
    /// How many results (1..=20; default `[tool_search] limit`).
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// Only tools of this server (backend).
    #[arg(long, value_name = "NAME")]
    pub server: Option<String>,
    #[command(flatten)]
    pub api: ApiArgs,
}

/// The control-API commands.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// Show every backend of a running gateway: state, runtime, probe
    /// latency, error rate, restarts, next retry and the last reason.
    #[command(after_help = STATUS_EXIT_CODES)]
    Status(StatusArgs),
    /// Restart a backend now, resetting its failure count (not for remote
    /// backends). Needs an operator token.
    #[command(after_help = ACTION_EXIT_CODES)]
    Restart(ActionArgs),
    /// Stop a backend and hold it: no automatic restarts until `vigil
    /// release`. Survives a gateway restart. Needs an operator token.
    #[command(after_help = ACTION_EXIT_CODES)]
    Quarantine(QuarantineArgs),
    /// Take a backend out of quarantine; it is started again with a fresh
    /// failure count. Needs an operator token.
    #[command(after_help = ACTION_EXIT_CODES)]
    Release(ActionArgs),
    /// Show what the pin guard withholds of a backend ([backends.pin]
    /// on_change = "hold"): each new or changed definition, its digest and
    /// what it says now.
    #[command(after_help = ACTION_EXIT_CODES)]
    Pins(PinsArgs),
    /// Approve a backend's withheld definitions, so clients get them:
    /// those `vigil pins` shows now, or only the --digest ones. A
    /// definition that changed after it was read is not approved. Needs an
    /// operator token.
    #[command(after_help = ACTION_EXIT_CODES)]
    Approve(PinsArgs),
    /// Update a backend to a new version, which serves only once it is
    /// ready (`[backends.update]`); without an option, show its update in
    /// progress or its last one. Starting, approving and aborting need an
    /// operator token.
    #[command(after_help = UPDATE_EXIT_CODES)]
    Update(UpdateArgs),
    /// Show what `find_tool` would answer a query, with each result's
    /// score: for tuning tool descriptions. Needs an operator token.
    #[command(after_help = ACTION_EXIT_CODES)]
    Search(SearchArgs),
    /// Show the gateway's WebAssembly plugins: kind, version, state, calls,
    /// failures, and why one is disabled or rejected.
    #[command(after_help = PLUGINS_EXIT_CODES)]
    Plugins(PluginsArgs),
    /// Show recent health transitions (time, backend, from → to, reason);
    /// with --follow, keep showing them as they happen. --json prints every
    /// event of the stream as one JSON line instead.
    #[command(after_help = EVENTS_EXIT_CODES)]
    Events(EventsArgs),
    /// Show the audit of MCP calls: time, principal, backend, method,
    /// outcome, duration, session and name, oldest first; with --follow,
    /// keep showing them as they are recorded. --json prints the API's
    /// answer (with --follow: one JSON line per call).
    #[command(after_help = AUDIT_EXIT_CODES)]
    Audit(AuditArgs),
}

/// How a command ended; each is one process exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0.
    Ok,
    /// 2: unreachable, or an answer that is not the control API's.
    ApiError,
    /// 3: `status` found a backend that is not serving, or `plugins` a
    /// plugin that is not active.
    NotServing,
    /// 4: 401 or 403.
    Refused,
    /// 5: 400, 404 or 409 on an action.
    Rejected,
    /// 1: `update --wait` saw the update rolled back.
    RolledBack,
}

// === impl Exit ===

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::RolledBack => 1,
            Exit::ApiError => 2,
            Exit::NotServing => 3,
            Exit::Refused => 4,
            Exit::Rejected => 5,
        }
    }

    /// The exit for a failed call: `status` has no "rejected" outcome, so
    /// a 400/404/409 there means a wrong `--api`.
    pub fn of(failure: Failure, is_action: bool) -> Exit {
        match failure {
            Failure::Refused => Exit::Refused,
            Failure::Rejected if is_action => Exit::Rejected,
            Failure::Rejected | Failure::Api => Exit::ApiError,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> Self {
        ExitCode::from(e.code())
    }
}

/// What a command printed and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    pub exit: Exit,
    pub stdout: String,
    pub stderr: String,
}

// === impl Output ===

impl Output {
    fn ok(exit: Exit, stdout: String) -> Self {
        Output {
            exit,
            stdout,
            stderr: String::new(),
        }
    }

    fn failed(e: &ClientError, is_action: bool) -> Self {
        Output {
            exit: Exit::of(e.failure(), is_action),
            stdout: String::new(),
            stderr: format!("error: {e}\n"),
        }
    }
}

/// Runs `cmd`, prints its output and returns its exit code. `events
/// --follow` prints as events arrive and ends on Ctrl-C.
pub async fn run(cmd: Command) -> ExitCode {
    if let Command::Events(a) = &cmd {
        let stop = CancellationToken::new();
        if a.follow {
            let on_signal = stop.clone();
            tokio::spawn(async move {
                if tokio::signal::ctrl_c().await.is_ok() {
                    on_signal.cancel();
                }
            });
        }
        return events::run(a, &mut StdStreams, &stop).await.into();
    }
    if let Command::Audit(a) = &cmd {
        let stop = CancellationToken::new();
        if a.follow {
            let on_signal = stop.clone();
            tokio::spawn(async move {
                if tokio::signal::ctrl_c().await.is_ok() {
                    on_signal.cancel();
                }
            });
        }
        return audit::run(a, &mut StdStreams, &stop).await.into();
    }
    let out = execute(&cmd, SystemTime::now()).await;
    // A closed stdout (`| head`) is not worth a panic.
    let mut sink = StdStreams;
    let _ = sink.out(&out.stdout);
    sink.err(&out.stderr);
    out.exit.into()
}

/// [`run`] on a fresh current-thread runtime, for a synchronous `main`.
pub fn run_blocking(cmd: Command) -> ExitCode {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt.block_on(run(cmd)),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            Exit::ApiError.into()
        }
    }
}

/// Runs `cmd` without printing; times in the table are relative to `now`.
///
/// `events --follow` returns only when the stream fails for good (a
/// refused token): [`run`] stops it on Ctrl-C.
pub async fn execute(cmd: &Command, now: SystemTime) -> Output {
    match cmd {
        Command::Status(a) => status(&a.api, now).await,
        Command::Plugins(a) => plugins(&a.api).await,
        Command::Events(a) => {
            let mut out = Collect::default();
            let exit = events::run(a, &mut out, &CancellationToken::new()).await;
            Output {
                exit,
                stdout: out.stdout,
                stderr: out.stderr,
            }
        }
        Command::Audit(a) => {
            let mut out = Collect::default();
            let exit = audit::run(a, &mut out, &CancellationToken::new()).await;
            Output {
                exit,
                stdout: out.stdout,
                stderr: out.stderr,
            }
        }
        Command::Restart(a) => act(&a.api, "restart", &a.name, None, now).await,
        Command::Quarantine(a) => {
            act(
                &a.api,
                "quarantine",
                &a.name,
                Some(json!({ "reason": a.reason })),
                now,
            )
            .await
        }
        Command::Release(a) => act(&a.api, "release", &a.name, None, now).await,
        Command::Pins(a) => pins(a).await,
        Command::Approve(a) => approve(a).await,
        Command::Update(a) => update(a).await,
        Command::Search(a) => search(a).await,
    }
}

/// Runs `call` with a client for `args`.
async fn with_client<T>(
    args: &ApiArgs,
    call: impl AsyncFnOnce(ApiClient) -> Result<T, ClientError>,
) -> Result<T, ClientError> {
    call(ApiClient::new(&args.api, args.token.clone())?).await
}

/// The exit code for a list in which `down` of `total` are not as they
/// should be, and the table's closing line naming them (`what`: "not
/// serving", "not active"), empty when none is.
fn tally(what: &str, down: &[String], total: usize) -> (Exit, String) {
    if down.is_empty() {
        return (Exit::Ok, String::new());
    }
    let line = format!("\n{what}: {} of {total}: {}\n", down.len(), down.join(", "));
    (Exit::NotServing, line)
}

async fn status(args: &ApiArgs, now: SystemTime) -> Output {
    let value = match with_client(args, async |c| c.instances().await).await {
        Ok(v) => v,
        Err(e) => return Output::failed(&e, false),
    };
    let rows = match value.get("instances").map(Vec::<Row>::deserialize) {
        Some(Ok(rows)) => rows,
        _ => return Output::failed(&bad_answer(&args.api, "no `instances` list"), false),
    };
    let down: Vec<String> = rows
        .iter()
        .filter(|r| !r.serving())
        .map(|r| r.name.clone())
        .collect();
    let (exit, closing) = tally("not serving", &down, rows.len());
    let warnings: String = value
        .get("warnings")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|w| format!("\nwarning: {w}\n"))
        .collect();
    let stdout = if args.json {
        pretty(&value)
    } else if rows.is_empty() {
        "no backends configured\n".to_owned()
    } else {
        table::render(&rows, now) + &closing + &warnings
    };
    Output::ok(exit, stdout)
}

async fn plugins(args: &ApiArgs) -> Output {
    let value = match with_client(args, async |c| c.plugins().await).await {
        Ok(v) => v,
        Err(e) => return Output::failed(&e, false),
    };
    let dir = match value.get("dir") {
        Some(Value::Null) => None,
        Some(Value::String(d)) => Some(d.as_str()),
        _ => return Output::failed(&bad_answer(&args.api, "no `dir`"), false),
    };
    let rows = match value.get("plugins").map(Vec::<PluginRow>::deserialize) {
        Some(Ok(rows)) => rows,
        _ => return Output::failed(&bad_answer(&args.api, "no `plugins` list"), false),
    };
    let down: Vec<String> = rows
        .iter()
        .filter(|p| !p.active())
        .map(|p| format!("{} ({})", p.name, p.state))
        .collect();
    let (exit, closing) = tally("not active", &down, rows.len());
    let stdout = if args.json {
        pretty(&value)
    } else if let Some(dir) = dir {
        if rows.is_empty() {
            format!("no plugins in {dir}\n")
        } else {
            table::render_plugins(&rows) + &closing
        }
    } else {
        "plugins are off (no [plugins] dir)\n".to_owned()
    };
    Output::ok(exit, stdout)
}

async fn act(
    args: &ApiArgs,
    action: &str,
    name: &str,
    body: Option<Value>,
    now: SystemTime,
) -> Output {
    let value = match with_client(args, async |c| c.act(action, name, body).await).await {
        Ok(v) => v,
        Err(e) => return Output::failed(&e, true),
    };
    let row = match Row::deserialize(&value) {
        Ok(row) => row,
        Err(e) => {
            return Output::failed(
                &bad_answer(&args.api, &format!("not a backend report ({e})")),
                true,
            );
        }
    };
    let stdout = if args.json {
        pretty(&value)
    } else {
        table::render(std::slice::from_ref(&row), now)
    };
    Output::ok(Exit::Ok, stdout)
}

/// The held definitions of a pins answer, as lines.
fn held_lines(value: &Value) -> Result<Vec<String>, String> {
    let held = value
        .get("held")
        .and_then(Value::as_array)
        .ok_or("no `held` list")?;
    Ok(held
        .iter()
        .map(|h| {
            let text = |k: &str| h.get(k).and_then(Value::as_str).unwrap_or("?");
            let change = if h.get("approved").is_some_and(|a| !a.is_null()) {
                "changed"
            } else {
                "new"
            };
            let says = h
                .pointer("/definition/description")
                .and_then(Value::as_str)
                .map(|d| format!("\n    description: {d}"))
                .unwrap_or_default();
            format!(
                "{} {} ({change}) {}{says}",
                text("kind"),
                text("name"),
                text("digest")
            )
        })
        .collect())
}

async fn search(a: &SearchArgs) -> Output {
    let mut query = vec![("query", a.query.clone())];
    query.extend(a.principal.clone().map(|p| ("principal", p)));
    query.extend(a.issuer.clone().map(|i| ("issuer", i)));
    if !a.groups.is_empty() {
        query.push(("groups", a.groups.join(",")));
    }
    query.extend(a.limit.map(|l| ("limit", l.to_string())));
    query.extend(a.server.clone().map(|s| ("server", s)));
    let value = match with_client(&a.api, async |c| c.search(&query).await).await {
        Ok(v) => v,
        Err(e) => return Output::failed(&e, true),
    };
    if a.api.json {
        return Output::ok(Exit::Ok, pretty(&value));
    }
    let who = value
        .get("principal")
        .and_then(Value::as_str)
        .map_or_else(|| "every tool".to_owned(), |p| format!("as {p}"));
    let mut out = format!(
        "{:?} {who} (mode {}), generation {}, {} tools indexed\n",
        a.query,
        value.get("mode").and_then(Value::as_str).unwrap_or("?"),
        value.get("generation").and_then(Value::as_u64).unwrap_or(0),
        value.get("indexed").and_then(Value::as_u64).unwrap_or(0),
    );
    let results = value.get("results").and_then(Value::as_array);
    let rows: Vec<Vec<String>> = results
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, r)| {
            let text = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
            let first_line = text("description").lines().next().unwrap_or("").to_owned();
            vec![
                (i + 1).to_string(),
                format!(
                    "{:.2}",
                    r.get("score").and_then(Value::as_f64).unwrap_or(0.0)
                ),
                text("name"),
                text("server"),
                first_line.chars().take(70).collect(),
            ]
        })
        .collect();
    if rows.is_empty() {
        out.push_str("  nothing matched\n");
    } else {
        out.push_str(&columns(
            &["#", "SCORE", "TOOL", "SERVER", "DESCRIPTION"],
            &rows,
        ));
    }
    if let Some(h) = value.get("hint").and_then(Value::as_str) {
        out.push_str(&format!("  {h}\n"));
    }
    Output::ok(Exit::Ok, out)
}

/// `rows` under `header`, each column as wide as its widest cell.
fn columns(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut l = String::from(" ");
        for (cell, w) in cells.iter().zip(&widths) {
            l.push_str(&format!(" {cell:<w$}"));
        }
        l.trim_end().to_owned() + "\n"
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

async fn pins(a: &PinsArgs) -> Output {
    let value = match with_client(&a.api, async |c| c.pins(&a.name).await).await {
        Ok(v) => v,
        Err(e) => return Output::failed(&e, true),
    };
    if a.api.json {
        return Output::ok(Exit::Ok, pretty(&value));
    }
    match held_lines(&value) {
        Ok(lines) if lines.is_empty() => {
            Output::ok(Exit::Ok, format!("{}: nothing withheld\n", a.name))
        }
        Ok(lines) => Output::ok(
            Exit::Ok,
            format!(
                "{}: withheld until approved:\n{}\n",
                a.name,
                lines.join("\n")
            ),
        ),
        Err(why) => Output::failed(&bad_answer(&a.api.api, why.as_str()), true),
    }
}

async fn approve(a: &PinsArgs) -> Output {
    let digests: Vec<String> = if a.digests.is_empty() {
        let value = match with_client(&a.api, async |c| c.pins(&a.name).await).await {
            Ok(v) => v,
            Err(e) => return Output::failed(&e, true),
        };
        let held = value.get("held").and_then(Value::as_array);
        let digests: Vec<String> = held
            .into_iter()
            .flatten()
            .filter_map(|h| h.get("digest").and_then(Value::as_str).map(str::to_owned))
            .collect();
        if digests.is_empty() {
            return Output::ok(Exit::Ok, format!("{}: nothing withheld\n", a.name));
        }
        digests
    } else {
        a.digests.clone()
    };
    let body = json!({ "digests": digests });
    let value = match with_client(&a.api, async |c| {
        c.act("approve", &a.name, Some(body)).await
    })
    .await
    {
        Ok(v) => v,
        Err(e) => return Output::failed(&e, true),
    };
    if a.api.json {
        return Output::ok(Exit::Ok, pretty(&value));
    }
    let approved: Vec<String> = value
        .get("approved")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|h| {
            let text = |k: &str| h.get(k).and_then(Value::as_str).unwrap_or("?");
            format!("{} {} {}", text("kind"), text("name"), text("digest"))
        })
        .collect();
    Output::ok(
        Exit::Ok,
        format!("{}: approved\n{}\n", a.name, approved.join("\n")),
    )
}

/// How often `update --wait` asks how the update goes.
const UPDATE_POLL: std::time::Duration = std::time::Duration::from_millis(500);

async fn update(a: &UpdateArgs) -> Output {
    let (action, body) = match (&a.image, a.approve, a.abort) {
        (Some(image), _, _) => ("update", Some(json!({ "image": image }))),
        (None, true, _) => ("update/approve", None),
        (None, _, true) => ("update/abort", None),
        (None, false, false) => {
            return match with_client(&a.api, async |c| c.update(&a.name).await).await {
                Ok(v) => show_update(a, &v, false),
                Err(e) => Output::failed(&e, false),
            };
        }
    };
    let started = match with_client(&a.api, async |c| c.act(action, &a.name, body).await).await {
        Ok(v) => v,
        Err(e) => return Output::failed(&e, true),
    };
    if !a.wait {
        return show_update(a, &started, false);
    }
    let id = started.pointer("/update/id").cloned();
    loop {
        tokio::time::sleep(UPDATE_POLL).await;
        let now = match with_client(&a.api, async |c| c.update(&a.name).await).await {
            Ok(v) => v,
            Err(e) => return Output::failed(&e, false),
        };
        let same = now.pointer("/update/id").cloned() == id;
        let phase = now.pointer("/update/state").and_then(Value::as_str);
        if same && matches!(phase, Some("succeeded" | "rolled_back")) {
            return show_update(a, &now, true);
        }
    }
}

/// An update answer as lines (or JSON with --json); with `waited`, a
/// rollback is exit 1.
fn show_update(a: &UpdateArgs, value: &Value, waited: bool) -> Output {
    let Some(u) = value.get("update").filter(|u| !u.is_null()) else {
        return Output::ok(Exit::Ok, format!("{}: no update yet\n", a.name));
    };
    let text = |k: &str| u.get(k).and_then(Value::as_str).unwrap_or("?");
    let spec = |k: &str| {
        u.get(k)
            .map(|s| {
                s.get("image").and_then(Value::as_str).map_or_else(
                    || {
                        std::iter::once(s.get("command").and_then(Value::as_str).unwrap_or(""))
                            .chain(
                                s.get("args")
                                    .and_then(Value::as_array)
                                    .into_iter()
                                    .flatten()
                                    .filter_map(Value::as_str),
                            )
                            .collect::<Vec<_>>()
                            .join(" ")
                    },
                    str::to_owned,
                )
            })
            .unwrap_or_default()
    };
    let exit = if waited && text("state") == "rolled_back" {
        Exit::RolledBack
    } else {
        Exit::Ok
    };
    if a.api.json {
        return Output::ok(exit, pretty(value));
    }
    let mut out = format!(
        "{}: update {} {} → {} ({}, {}) by {}: {}\n",
        a.name,
        text("id"),
        spec("from"),
        spec("to"),
        text("strategy"),
        text("started_at"),
        text("principal"),
        text("state")
    );
    if let Some(reason) = u.get("reason").and_then(Value::as_str) {
        out.push_str(&format!("  reason: {reason}\n"));
    }
    for kind in ["tools", "prompts", "resource_templates"] {
        for change in ["added", "removed", "changed"] {
            let names: Vec<&str> = u
                .pointer(&format!("/diff/{kind}/{change}"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            if !names.is_empty() {
                out.push_str(&format!("  {kind} {change}: {}\n", names.join(", ")));
            }
        }
    }
    Output::ok(exit, out)
}

fn bad_answer(api: &str, reason: &str) -> ClientError {
    ClientError::BadAnswer {
        url: api.to_owned(),
        reason: reason.to_owned(),
    }
}

fn pretty(v: &Value) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string());
    s.push('\n');
    s
}
