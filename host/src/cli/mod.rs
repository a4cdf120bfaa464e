//! The operator commands that talk to a running gateway's control API:
//! `vigil status`, `vigil restart|quarantine|release NAME`.
//!
//! Exit codes (for scripts): 0 success (for `status`: every backend is
//! serving — running, degraded or unknown); 3 `status` found a backend that
//! is not serving; 2 the API could not be reached or answered garbage;
//! 4 the token was refused (401/403); 5 the backend does not exist or the
//! action does not apply (404/409).

mod table;

use std::process::ExitCode;
use std::time::Duration;

use serde_json::Value;

/// Options every command shares.
#[derive(Debug, Clone, clap::Args)]
pub struct ApiArgs {
    /// Base URL of the control API.
    #[arg(long, env = "VIGIL_API", default_value = "http://127.0.0.1:8081")]
    pub api: String,
    /// Bearer token (a `[[api.tokens]]` secret). Not needed when the API has
    /// no tokens configured.
    #[arg(long, env = "VIGIL_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Print the API's JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// The client-side commands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Show every backend's state, latency, error rate, restarts and next
    /// retry. Exit 0 if all are serving, 3 if any is not, 2 if the API cannot
    /// be reached, 4 if the token is refused.
    Status(ApiArgs),
    /// Restart a backend now (resets its failure count). Exit 0, 4 (token
    /// refused), 5 (no such backend / not restartable) or 2.
    Restart {
        /// The backend's configured name.
        name: String,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Quarantine a backend: stop it, no automatic restarts.
    Quarantine {
        name: String,
        /// Why (recorded in its history and the audit log).
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Release a quarantined backend (it goes to `restarting`).
    Release {
        name: String,
        #[command(flatten)]
        api: ApiArgs,
    },
}

/// Runs one command and returns its exit code.
pub async fn run(cmd: Command) -> ExitCode {
    let (api, result) = match &cmd {
        Command::Status(api) => (api, get(api, "/api/v1/health/instances").await),
        Command::Restart { name, api } => (api, post(api, &format!("/api/v1/health/instances/{}/restart", path_segment(name)), None).await),
        Command::Quarantine { name, reason, api } => {
            let body = serde_json::json!({ "reason": reason });
            (api, post(api, &format!("/api/v1/health/instances/{}/quarantine", path_segment(name)), Some(body)).await)
        }
        Command::Release { name, api } => (api, post(api, &format!("/api/v1/health/instances/{}/release", path_segment(name)), None).await),
    };
    let body = match result {
        Ok(body) => body,
        Err(failure) => {
            eprintln!("vigil: {}", failure.message);
            return ExitCode::from(failure.code);
        }
    };
    if api.json {
        println!("{}", serde_json::to_string_pretty(&body).unwrap_or_default());
    }
    match cmd {
        Command::Status(_) => {
            let rows = body["instances"].as_array().cloned().unwrap_or_default();
            if !api.json {
                print!("{}", table::render(&rows, std::time::SystemTime::now()));
            }
            let serving = |r: &Value| matches!(r["state"].as_str(), Some("running" | "degraded" | "unknown"));
            if rows.iter().all(serving) { ExitCode::SUCCESS } else { ExitCode::from(3) }
        }
        _ => {
            if !api.json {
                println!("{}: {} ({})", body["name"].as_str().unwrap_or("?"), body["state"].as_str().unwrap_or("?"), body["reason"].as_str().unwrap_or(""));
            }
            ExitCode::SUCCESS
        }
    }
}

/// Why a command failed, with its exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

fn path_segment(name: &str) -> String {
    // Backend names are [A-Za-z0-9_-]; anything else would not match one.
    name.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_').collect()
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap_or_default()
}

async fn get(api: &ApiArgs, path: &str) -> Result<Value, Failure> {
    let mut req = client().get(format!("{}{path}", api.api.trim_end_matches('/')));
    if let Some(t) = &api.token {
        req = req.bearer_auth(t);
    }
    answer(api, req.send().await).await
}

async fn post(api: &ApiArgs, path: &str, body: Option<Value>) -> Result<Value, Failure> {
    let mut req = client().post(format!("{}{path}", api.api.trim_end_matches('/')));
    if let Some(t) = &api.token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req.header("content-type", "application/json").body(b.to_string());
    }
    answer(api, req.send().await).await
}

async fn answer(api: &ApiArgs, sent: Result<reqwest::Response, reqwest::Error>) -> Result<Value, Failure> {
    let resp = sent.map_err(|e| Failure { code: 2, message: format!("cannot reach the control API at {}: {e}", api.api) })?;
    let status = resp.status();
    let bytes = resp.bytes().await.map_err(|e| Failure { code: 2, message: format!("reading the API's answer failed: {e}") })?;
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if status.is_success() {
        return Ok(body);
    }
    let message = body["error"]["message"].as_str().map(str::to_owned).unwrap_or_else(|| format!("HTTP {status}"));
    Err(Failure { code: exit_code(status.as_u16()), message })
}

/// The exit code for an API error status.
pub fn exit_code(status: u16) -> u8 {
    match status {
        401 | 403 => 4,
        404 | 409 => 5,
        _ => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_documented_exit_codes() {
        assert_eq!([401, 403, 404, 409, 500, 502].map(exit_code), [4, 4, 5, 5, 2, 2]);
    }
}
