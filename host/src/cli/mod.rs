//! The operator commands that talk to a running gateway's control API:
//! `vigil status`, `vigil restart NAME`, `vigil quarantine NAME [--reason R]`
//! and `vigil release NAME`.
//!
//! Each takes `--api URL` (env `VIGIL_API`, default
//! `http://127.0.0.1:8081`), `--token T` (env `VIGIL_TOKEN`) and `--json`
//! (print the API's JSON instead of a table). Results go to stdout, errors
//! to stderr, and the exit code says what happened ([`Exit`]):
//!
//! | code | `status` | `restart` / `quarantine` / `release` |
//! |---|---|---|
//! | 0 | every backend is serving (running, degraded or unknown) | done |
//! | 2 | API unreachable or not answering like Vigil (also clap's code for a usage error) | same |
//! | 3 | some backend is not serving | — |
//! | 4 | token missing or refused (401), or role too weak (403) | same |
//! | 5 | — | refused by the API: no such backend (404), the action does not apply now (409), bad input (400) |
//!
//! `main.rs` embeds [`Command`] with `#[command(flatten)]` and hands it to
//! [`run`] (inside a runtime) or [`run_blocking`].

mod client;
mod table;
#[cfg(test)]
mod tests;

pub use client::{ApiClient, ClientError, Failure};
pub use table::Row;

use std::process::ExitCode;
use std::time::SystemTime;

use serde::Deserialize;
use serde_json::{Value, json};

const STATUS_EXIT_CODES: &str = "\
Exit codes:
  0  every backend is serving (running, degraded or unknown)
  2  the API cannot be reached or did not answer like Vigil (also: usage error)
  3  some backend is not serving (starting, offline, restarting, updating, quarantined)
  4  the token is missing or refused (401/403)";

const ACTION_EXIT_CODES: &str = "\
Exit codes:
  0  done; the backend's new state is printed
  2  the API cannot be reached or did not answer like Vigil (also: usage error)
  4  the token is missing or refused (401), or is not an operator token (403)
  5  refused: no such backend (404), the action does not apply now (409), bad input (400)";

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
}

/// How a command ended; each is one process exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0.
    Ok,
    /// 2: unreachable, or an answer that is not the control API's.
    ApiError,
    /// 3: `status` found a backend that is not serving.
    NotServing,
    /// 4: 401 or 403.
    Refused,
    /// 5: 400, 404 or 409 on an action.
    Rejected,
}

// === impl Exit ===

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
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

/// Runs `cmd`, prints its output and returns its exit code.
pub async fn run(cmd: Command) -> ExitCode {
    let out = execute(&cmd, SystemTime::now()).await;
    print!("{}", out.stdout);
    eprint!("{}", out.stderr);
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
pub async fn execute(cmd: &Command, now: SystemTime) -> Output {
    match cmd {
        Command::Status(a) => status(&a.api, now).await,
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
    }
}

async fn status(args: &ApiArgs, now: SystemTime) -> Output {
    let answer = match ApiClient::new(&args.api, args.token.clone()) {
        Ok(client) => client.instances().await,
        Err(e) => Err(e),
    };
    let value = match answer {
        Ok(v) => v,
        Err(e) => return Output::failed(&e, false),
    };
    let rows = match value.get("instances").map(Vec::<Row>::deserialize) {
        Some(Ok(rows)) => rows,
        _ => return Output::failed(&bad_answer(&args.api, "no `instances` list"), false),
    };
    let down: Vec<&str> = rows
        .iter()
        .filter(|r| !r.serving())
        .map(|r| r.name.as_str())
        .collect();
    let exit = if down.is_empty() {
        Exit::Ok
    } else {
        Exit::NotServing
    };
    let stdout = if args.json {
        pretty(&value)
    } else if rows.is_empty() {
        "no backends configured\n".to_owned()
    } else {
        let mut t = table::render(&rows, now);
        if !down.is_empty() {
            t.push_str(&format!(
                "\nnot serving: {} of {}: {}\n",
                down.len(),
                rows.len(),
                down.join(", ")
            ));
        }
        t
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
    let answer = match ApiClient::new(&args.api, args.token.clone()) {
        Ok(client) => client.act(action, name, body).await,
        Err(e) => Err(e),
    };
    let value = match answer {
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
