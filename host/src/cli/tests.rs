//! Exit-code mapping, URL building, argument parsing, and the commands run
//! against the real control API served on an ephemeral loopback port.

use std::net::SocketAddr;
use std::time::SystemTime;

use clap::{CommandFactory, Parser};
use reqwest::StatusCode;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::api::testutil::{self, OPERATOR_SECRET, VIEWER_SECRET};

fn api_error(status: StatusCode, code: Option<&str>) -> ClientError {
    ClientError::Api {
        status,
        code: code.map(Into::into),
        message: "m".into(),
    }
}

#[test]
fn exit_codes_of_failures() {
    let unreachable = ClientError::Unreachable {
        url: "u".into(),
        reason: "connection refused".into(),
    };
    let cases = [
        (unreachable, Exit::ApiError, Exit::ApiError),
        (
            api_error(StatusCode::UNAUTHORIZED, Some("unauthorized")),
            Exit::Refused,
            Exit::Refused,
        ),
        (
            api_error(StatusCode::FORBIDDEN, Some("forbidden")),
            Exit::Refused,
            Exit::Refused,
        ),
        (
            api_error(StatusCode::NOT_FOUND, Some("not_found")),
            Exit::ApiError,
            Exit::Rejected,
        ),
        (
            api_error(StatusCode::CONFLICT, Some("conflict")),
            Exit::ApiError,
            Exit::Rejected,
        ),
        (
            api_error(StatusCode::BAD_REQUEST, Some("bad_request")),
            Exit::ApiError,
            Exit::Rejected,
        ),
        // Not the control API's JSON: a wrong --api, not a missing backend.
        (
            api_error(StatusCode::NOT_FOUND, None),
            Exit::ApiError,
            Exit::ApiError,
        ),
        (
            api_error(StatusCode::INTERNAL_SERVER_ERROR, Some("internal")),
            Exit::ApiError,
            Exit::ApiError,
        ),
        (
            ClientError::BadAnswer {
                url: "u".into(),
                reason: "not JSON".into(),
            },
            Exit::ApiError,
            Exit::ApiError,
        ),
    ];
    for (e, status, action) in cases {
        assert_eq!(Exit::of(e.failure(), false), status, "status: {e:?}");
        assert_eq!(Exit::of(e.failure(), true), action, "action: {e:?}");
    }
    let codes: Vec<u8> = [
        Exit::Ok,
        Exit::ApiError,
        Exit::NotServing,
        Exit::Refused,
        Exit::Rejected,
    ]
    .map(Exit::code)
    .into();
    assert_eq!(codes, [0, 2, 3, 4, 5]);
}

#[test]
fn urls_keep_a_prefix_and_encode_names() {
    let c = ApiClient::new("http://127.0.0.1:8081", None).unwrap();
    assert_eq!(
        c.url(&["health", "instances"]).as_str(),
        "http://127.0.0.1:8081/api/v1/health/instances"
    );
    let c = ApiClient::new("https://ops.example/vigil/", None).unwrap();
    assert_eq!(
        c.url(&["health", "instances", "a b/c", "restart"]).as_str(),
        "https://ops.example/vigil/api/v1/health/instances/a%20b%2Fc/restart"
    );
    let c = ApiClient::new("localhost:9000", None).unwrap();
    assert_eq!(
        c.url(&["audit"]).as_str(),
        "http://localhost:9000/api/v1/audit"
    );
    assert!(matches!(
        ApiClient::new("ftp://x", None),
        Err(ClientError::BadUrl { .. })
    ));
    assert!(matches!(
        ApiClient::new("http://", None),
        Err(ClientError::BadUrl { .. })
    ));
}

/// `main.rs`'s shape: the commands flattened into the binary's own.
#[derive(clap::Parser)]
#[command(name = "vigil")]
struct Cli {
    #[command(subcommand)]
    command: Top,
}

#[derive(clap::Subcommand)]
enum Top {
    Serve,
    #[command(flatten)]
    Control(Command),
}

#[test]
fn parses_as_flattened_subcommands() {
    Cli::command().debug_assert();
    let cli = Cli::try_parse_from([
        "vigil",
        "quarantine",
        "db",
        "--reason",
        "disk full",
        "--api",
        "http://h:1",
        "--token",
        "t",
        "--json",
    ])
    .unwrap();
    let Top::Control(Command::Quarantine(q)) = cli.command else {
        panic!("not quarantine")
    };
    assert_eq!(
        (
            q.name.as_str(),
            q.reason.as_deref(),
            q.api.api.as_str(),
            q.api.token.as_deref(),
            q.api.json
        ),
        ("db", Some("disk full"), "http://h:1", Some("t"), true)
    );
    let help = Cli::command()
        .find_subcommand_mut("restart")
        .unwrap()
        .render_long_help()
        .to_string();
    assert!(
        help.contains("Exit codes:") && help.contains("5  refused"),
        "{help}"
    );
    let help = Cli::command()
        .find_subcommand_mut("status")
        .unwrap()
        .render_long_help()
        .to_string();
    assert!(help.contains("3  some backend is not serving"), "{help}");
}

// === against a served API ===

/// The control API over `testutil`'s fake backends on 127.0.0.1:<ephemeral>.
async fn serve(tokens: Vec<crate::config::ApiToken>) -> (SocketAddr, CancellationToken) {
    let (state, ..) = testutil::state(tokens);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    tokio::spawn(crate::api::serve_on(listener, state, stop.clone()));
    (addr, stop)
}

fn args(addr: SocketAddr, token: Option<&str>, json: bool) -> ApiArgs {
    ApiArgs {
        api: format!("http://{addr}"),
        token: token.map(Into::into),
        json,
    }
}

#[tokio::test]
async fn status_against_a_served_api() {
    let (addr, stop) = serve(testutil::tokens()).await;
    let out = execute(
        &Command::Status(StatusArgs {
            api: args(addr, Some(VIEWER_SECRET), false),
        }),
        SystemTime::now(),
    )
    .await;
    assert_eq!(out.exit, Exit::NotServing, "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        lines[0]
            == "NAME   STATE        RUNTIME    LATENCY  ERRORS    RESTARTS  NEXT-RETRY  REASON",
        "{}",
        out.stdout
    );
    assert!(
        lines[1] == "alpha  running      process    12ms     0% of 10  0         -           ready",
        "{}",
        out.stdout
    );
    assert!(
        lines[3].starts_with("gamma  quarantined  container")
            && lines[3].ends_with("crashed 5 times"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.ends_with("not serving: 2 of 3: beta, gamma\n"),
        "{}",
        out.stdout
    );
    assert!(out.stderr.is_empty());

    let json = execute(
        &Command::Status(StatusArgs {
            api: args(addr, Some(VIEWER_SECRET), true),
        }),
        SystemTime::now(),
    )
    .await;
    assert_eq!(json.exit, Exit::NotServing);
    let v: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(v["instances"][0]["name"], "alpha");

    let refused = execute(
        &Command::Status(StatusArgs {
            api: args(addr, Some("wrong-token"), false),
        }),
        SystemTime::now(),
    )
    .await;
    assert_eq!(refused.exit, Exit::Refused, "{refused:?}");
    assert!(
        refused.stderr.contains("unknown token") && refused.stderr.contains("--token"),
        "{}",
        refused.stderr
    );
    stop.cancel();
}

#[tokio::test]
async fn actions_against_a_served_api() {
    let (addr, stop) = serve(testutil::tokens()).await;
    let run = |cmd: Command| async move { execute(&cmd, SystemTime::now()).await };
    let action = |name: &str, token: &str| ActionArgs {
        name: name.into(),
        api: args(addr, Some(token), false),
    };

    let out = run(Command::Restart(action("alpha", OPERATOR_SECRET))).await;
    assert_eq!(out.exit, Exit::Ok, "{out:?}");
    assert!(
        out.stdout
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("alpha  restarting"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("in 5s") || out.stdout.contains("in 4s"),
        "{}",
        out.stdout
    );

    let out = run(Command::Restart(action("alpha", VIEWER_SECRET))).await;
    assert_eq!(out.exit, Exit::Refused, "{out:?}");
    assert!(out.stderr.contains("operator"), "{}", out.stderr);

    let out = run(Command::Release(action("alpha", OPERATOR_SECRET))).await;
    assert_eq!(out.exit, Exit::Rejected, "{out:?}");
    assert!(out.stderr.contains("not quarantined"), "{}", out.stderr);

    let out = run(Command::Release(action("nosuch", OPERATOR_SECRET))).await;
    assert_eq!(out.exit, Exit::Rejected, "{out:?}");
    assert!(out.stderr.contains("'nosuch'"), "{}", out.stderr);

    let q = QuarantineArgs {
        name: "alpha".into(),
        reason: Some("disk full".into()),
        api: args(addr, Some(OPERATOR_SECRET), true),
    };
    let out = run(Command::Quarantine(q)).await;
    assert_eq!(out.exit, Exit::Ok, "{out:?}");
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        (v["state"].as_str(), v["quarantine_reason"].as_str()),
        (Some("quarantined"), Some("disk full"))
    );
    stop.cancel();
}

#[tokio::test]
async fn unauthenticated_loopback_needs_no_token() {
    let (addr, stop) = serve(Vec::new()).await;
    let out = execute(
        &Command::Restart(ActionArgs {
            name: "alpha".into(),
            api: args(addr, None, false),
        }),
        SystemTime::now(),
    )
    .await;
    assert_eq!(out.exit, Exit::Ok, "{out:?}");
    stop.cancel();
}

#[tokio::test]
async fn unreachable_api_is_exit_2() {
    // A port that was just free: nothing listens on it.
    let addr = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let out = execute(
        &Command::Status(StatusArgs {
            api: args(addr, None, false),
        }),
        SystemTime::now(),
    )
    .await;
    assert_eq!(out.exit, Exit::ApiError, "{out:?}");
    assert!(
        out.stderr
            .starts_with("error: cannot reach the control API at"),
        "{}",
        out.stderr
    );
    let out = execute(
        &Command::Release(ActionArgs {
            name: "x".into(),
            api: args(addr, None, false),
        }),
        SystemTime::now(),
    )
    .await;
    assert_eq!(out.exit, Exit::ApiError, "{out:?}");
}
