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

// === the event-stream parser ===

/// Every rule at once: a BOM, CRLF, LF and lone-CR line ends, comments,
/// `retry`, multi-line data (one line with no colon), an event with no
/// `event:`, one with no data, unknown fields, a non-ASCII character, and
/// an unfinished event at the end.
const SAMPLE: &[u8] = b"\xEF\xBB\xBF: welcome\r\n\
retry: 10\r\n\
\r\n\
event: hello\r\n\
data: {\"a\":1}\r\n\
\r\n\
id: 7\n\
event: transition\n\
data: line one\n\
data:line two\n\
data\n\
\n\
data: plain \xE2\x86\x92 \xC3\xA9\r\
\r\
event: nodata\n\
id: 9\n\
\n\
:keep-alive\n\
\n\
data:  two spaces\n\
unknown: field\n\
\n\
event: tail\n\
data: never ends\n";

fn sample_events() -> Vec<SseEvent> {
    let ev = |event: &str, data: &str, id: Option<&str>| SseEvent {
        event: event.into(),
        data: data.into(),
        id: id.map(Into::into),
    };
    vec![
        ev("hello", "{\"a\":1}", None),
        ev("transition", "line one\nline two\n", Some("7")),
        ev("message", "plain → é", None),
        ev("message", " two spaces", None),
    ]
}

fn parse(chunks: &[&[u8]]) -> (Vec<SseEvent>, Option<std::time::Duration>) {
    let mut p = SseParser::new();
    let mut events = Vec::new();
    for c in chunks {
        events.extend(p.push(c).unwrap());
    }
    (events, p.retry())
}

#[test]
fn sse_parser_reads_every_rule() {
    let (events, retry) = parse(&[SAMPLE]);
    assert_eq!(events, sample_events());
    assert_eq!(retry, Some(std::time::Duration::from_millis(10)));
}

#[test]
fn sse_parser_gives_the_same_events_however_the_stream_is_cut() {
    let expected = (sample_events(), Some(std::time::Duration::from_millis(10)));
    for i in 0..=SAMPLE.len() {
        for j in i..=SAMPLE.len() {
            let got = parse(&[&SAMPLE[..i], &SAMPLE[i..j], &SAMPLE[j..]]);
            assert_eq!(got, expected, "cut at {i} and {j}");
        }
    }
    let bytes: Vec<&[u8]> = SAMPLE.chunks(1).collect();
    assert_eq!(parse(&bytes), expected, "byte by byte");
}

#[test]
fn sse_parser_limits_an_endless_line() {
    let mut p = SseParser::new();
    let chunk = vec![b'x'; 1 << 20];
    let mut failed = false;
    for _ in 0..20 {
        if p.push(&chunk).is_err() {
            failed = true;
            break;
        }
    }
    assert!(failed, "16 MiB without a line end is refused");
}

#[test]
fn transition_lines_and_json_lines() {
    let t = events::TransitionRow {
        backend: "alpha".into(),
        from: "running".into(),
        to: "offline".into(),
        reason: "exited with code 1\nstderr: boom".into(),
        at: 1_700_000_000_123,
    };
    assert_eq!(
        events::transition_line(&t, 6),
        "2023-11-14T22:13:20.123Z  alpha   running     → offline      exited with code 1 stderr: boom\n"
    );
    let mut t = t;
    t.reason.clear();
    assert_eq!(
        events::transition_line(&t, 0),
        "2023-11-14T22:13:20.123Z  alpha  running     → offline\n"
    );
    let ev = |event: &str, data: &str, id: Option<&str>| SseEvent {
        event: event.into(),
        data: data.into(),
        id: id.map(Into::into),
    };
    assert_eq!(
        events::json_line(&ev("transition", r#"{"b": [1, 2]}"#, Some("12"))),
        "{\"event\":\"transition\",\"id\":12,\"data\":{\"b\": [1, 2]}}\n"
    );
    assert_eq!(
        events::json_line(&ev("hello", "{\"b\":\n1}", None)),
        "{\"event\":\"hello\",\"id\":null,\"data\":{\"b\":1}}\n"
    );
    assert_eq!(
        events::json_line(&ev("message", "not \"json\"", Some("x"))),
        "{\"event\":\"message\",\"id\":\"x\",\"data\":\"not \\\"json\\\"\"}\n"
    );
}

// === plugins ===

fn plugin_row(name: &str, state: &str) -> PluginRow {
    PluginRow {
        name: name.into(),
        kind: Some("probe".into()),
        version: Some("0.1.0".into()),
        state: state.into(),
        reason: None,
        calls: 0,
        failures: 0,
        consecutive_failures: 0,
        last_error: None,
    }
}

#[test]
fn plugins_table() {
    let mut a = plugin_row("latency-probe", "active");
    a.calls = 1200;
    a.failures = 3;
    a.last_error = Some("deadline of 500ms exceeded".into());
    let mut b = plugin_row("slack", "disabled");
    b.kind = Some("notifier".into());
    b.calls = 9;
    b.failures = 5;
    b.consecutive_failures = 5;
    b.reason = Some("disabled after 5 consecutive failures".into());
    b.last_error = Some("http 500".into());
    let mut c = plugin_row("broken", "rejected");
    c.kind = None;
    c.version = None;
    c.reason = Some(format!("not a component: {}", "x".repeat(200)));
    let table = table::render_plugins(&[a, b, c]);
    let expected = format!(
        "\
NAME           KIND      VERSION  STATE     CALLS  FAILURES        LAST-ERROR/REASON
latency-probe  probe     0.1.0    active    1200   3               deadline of 500ms exceeded
slack          notifier  0.1.0    disabled  9      5 (5 in a row)  disabled after 5 consecutive failures
broken         -         -        rejected  0      0               not a component: {}…
",
        "x".repeat(80 - 1 - "not a component: ".len())
    );
    assert_eq!(table, expected);
    assert!(plugin_row("x", "active").active());
    for state in ["disabled", "rejected", "from-the-future"] {
        assert!(!plugin_row("x", state).active(), "{state}");
    }
}

/// [`testutil`]'s backends, plus plugins and a transition feed.
struct Fixture {
    inner: testutil::FakeControl,
    plugins: (Option<String>, Vec<crate::plugins::PluginInfo>),
    feed: tokio::sync::broadcast::Sender<crate::health::Transition>,
}

impl Fixture {
    fn new(plugins: (Option<String>, Vec<crate::plugins::PluginInfo>)) -> Self {
        Fixture {
            inner: testutil::FakeControl::new(),
            plugins,
            feed: tokio::sync::broadcast::channel(64).0,
        }
    }
}

impl crate::api::Control for Fixture {
    fn instances(&self) -> Vec<crate::api::InstanceReport> {
        self.inner.instances()
    }
    fn plugins(&self) -> (Option<String>, Vec<crate::plugins::PluginInfo>) {
        self.plugins.clone()
    }
    fn subscribe(&self) -> Option<tokio::sync::broadcast::Receiver<crate::health::Transition>> {
        Some(self.feed.subscribe())
    }
    fn instance(
        &self,
        name: &str,
    ) -> futures::future::BoxFuture<'_, Result<crate::api::InstanceDetail, crate::api::ControlError>>
    {
        self.inner.instance(name)
    }
    fn restart(
        &self,
        name: &str,
        principal: &str,
    ) -> futures::future::BoxFuture<'_, Result<crate::api::InstanceReport, crate::api::ControlError>>
    {
        self.inner.restart(name, principal)
    }
    fn quarantine(
        &self,
        name: &str,
        principal: &str,
        reason: Option<String>,
    ) -> futures::future::BoxFuture<'_, Result<crate::api::InstanceReport, crate::api::ControlError>>
    {
        self.inner.quarantine(name, principal, reason)
    }
    fn release(
        &self,
        name: &str,
        principal: &str,
    ) -> futures::future::BoxFuture<'_, Result<crate::api::InstanceReport, crate::api::ControlError>>
    {
        self.inner.release(name, principal)
    }
}

async fn serve_fixture(control: std::sync::Arc<Fixture>) -> (SocketAddr, CancellationToken) {
    let state = testutil::api_state(control, None, testutil::tokens());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    tokio::spawn(crate::api::serve_on(listener, state, stop.clone()));
    (addr, stop)
}

fn plugin_info(name: &str, state: &'static str) -> crate::plugins::PluginInfo {
    crate::plugins::PluginInfo {
        name: name.into(),
        kind: Some(crate::plugins::Kind::Probe),
        version: Some("0.1.0".into()),
        state,
        reason: None,
        file: format!("/plugins/{name}.wasm"),
        sha256: Some("ab".repeat(32)),
        calls: 4,
        failures: 0,
        consecutive_failures: 0,
        last_error: None,
        last_duration_ms: Some(2),
        limit_hits: 0,
        last_limit: None,
        shed: 0,
        loaded_at: SystemTime::UNIX_EPOCH,
        from_cache: false,
    }
}

#[tokio::test]
async fn plugins_against_a_served_api() {
    let plugins = |a: &ApiArgs| Command::Plugins(PluginsArgs { api: a.clone() });
    let mut disabled = plugin_info("pager", "disabled");
    disabled.kind = Some(crate::plugins::Kind::Notifier);
    disabled.reason = Some("disabled after 3 consecutive failures".into());
    let cases = [
        (
            Fixture::new((
                Some("/plugins".into()),
                vec![plugin_info("good", "active"), disabled],
            )),
            Exit::NotServing,
        ),
        (
            Fixture::new((Some("/plugins".into()), vec![plugin_info("good", "active")])),
            Exit::Ok,
        ),
        (
            Fixture::new((Some("/plugins".into()), Vec::new())),
            Exit::Ok,
        ),
        (Fixture::new((None, Vec::new())), Exit::Ok),
    ];
    let mut outputs = Vec::new();
    for (fixture, exit) in cases {
        let (addr, stop) = serve_fixture(std::sync::Arc::new(fixture)).await;
        let text = execute(
            &plugins(&args(addr, Some(VIEWER_SECRET), false)),
            SystemTime::now(),
        )
        .await;
        assert_eq!(text.exit, exit, "{text:?}");
        let json = execute(
            &plugins(&args(addr, Some(VIEWER_SECRET), true)),
            SystemTime::now(),
        )
        .await;
        assert_eq!(json.exit, exit, "{json:?}");
        let v: Value = serde_json::from_str(&json.stdout).unwrap();
        assert!(v["plugins"].is_array(), "{v}");
        let refused = execute(
            &plugins(&args(addr, Some("wrong"), false)),
            SystemTime::now(),
        )
        .await;
        assert_eq!(refused.exit, Exit::Refused, "{refused:?}");
        outputs.push(text.stdout);
        stop.cancel();
    }
    assert_eq!(
        outputs[0],
        "\
NAME   KIND      VERSION  STATE     CALLS  FAILURES  LAST-ERROR/REASON
good   probe     0.1.0    active    4      0         -
pager  notifier  0.1.0    disabled  4      0         disabled after 3 consecutive failures

not active: 1 of 2: pager (disabled)
"
    );
    assert_eq!(outputs[2], "no plugins in /plugins\n");
    assert_eq!(outputs[3], "plugins are off (no [plugins] dir)\n");

    let addr = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let out = execute(&plugins(&args(addr, None, false)), SystemTime::now()).await;
    assert_eq!(out.exit, Exit::ApiError, "{out:?}");
}

// === events ===

/// Lines as they are printed, for a test to watch.
struct Lines(tokio::sync::mpsc::UnboundedSender<(bool, String)>);

impl Sink for Lines {
    fn out(&mut self, text: &str) -> std::io::Result<()> {
        let _ = self.0.send((true, text.to_owned()));
        Ok(())
    }
    fn err(&mut self, text: &str) {
        let _ = self.0.send((false, text.to_owned()));
    }
}

fn events_args(addr: SocketAddr, follow: bool, json: bool, backends: &[&str]) -> EventsArgs {
    EventsArgs {
        follow,
        backends: backends.iter().map(|b| b.to_string()).collect(),
        api: args(addr, Some(VIEWER_SECRET), json),
    }
}

/// Runs `vigil events --follow` until `step` says it has seen enough
/// (`Some(true)`) of what the command printed so far, then stops it as
/// Ctrl-C would. `step` runs on every line and every 10 ms, so it can also
/// act (send events); `None` gives up. Fails the test after 10 s.
async fn follow_until(
    args: EventsArgs,
    mut step: impl FnMut(&Collect) -> Option<bool>,
) -> (Exit, Collect) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let stop = stop.clone();
        async move {
            let mut sink = Lines(tx);
            events::run(&args, &mut sink, &stop).await
        }
    });
    let mut seen = Collect::default();
    let watched = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            match step(&seen) {
                Some(true) => return true,
                Some(false) => {}
                None => return false,
            }
            tokio::select! {
                line = rx.recv() => match line {
                    Some((true, t)) => seen.stdout.push_str(&t),
                    Some((false, t)) => seen.stderr.push_str(&t),
                    None => return false,
                },
                _ = tokio::time::sleep(std::time::Duration::from_millis(10)) => {}
            }
        }
    })
    .await;
    stop.cancel();
    let exit = tokio::time::timeout(std::time::Duration::from_secs(5), task)
        .await
        .expect("events stops when cancelled")
        .unwrap();
    while let Ok((out, t)) = rx.try_recv() {
        if out {
            seen.stdout.push_str(&t);
        } else {
            seen.stderr.push_str(&t);
        }
    }
    assert!(
        matches!(watched, Ok(true)),
        "never got there: exit {exit:?}\nstdout:\n{}\nstderr:\n{}",
        seen.stdout,
        seen.stderr
    );
    (exit, seen)
}

fn transition(backend: &str, from: &str, to: &str, reason: &str, at: i64) -> Value {
    json!({"backend": backend, "from": from, "to": to, "reason": reason, "at": at})
}

const T0: i64 = 1_700_000_000_000;

/// One answer of [`scripted`]: raw bytes, sent in small pieces.
enum Answer {
    /// A 200 event stream with this body, then the connection closes.
    Stream(String),
    /// The same, but held open after the body.
    StreamOpen(String),
    /// Any whole response.
    Raw(String),
}

/// A server that answers its `n`th connection with `answers[n]` and then
/// stops listening, so further connections are refused. Returns the
/// request heads it read.
async fn scripted(answers: Vec<Answer>) -> (SocketAddr, tokio::task::JoinHandle<Vec<String>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut heads = Vec::new();
        let mut held = Vec::new();
        for answer in answers {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = conn.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                head.extend_from_slice(&buf[..n]);
            }
            heads.push(String::from_utf8_lossy(&head).into_owned());
            let (body, open) = match answer {
                Answer::Raw(r) => {
                    conn.write_all(r.as_bytes()).await.unwrap();
                    continue;
                }
                Answer::Stream(b) => (b, false),
                Answer::StreamOpen(b) => (b, true),
            };
            conn.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n",
            )
            .await
            .unwrap();
            for piece in body.as_bytes().chunks(13) {
                if conn.write_all(piece).await.is_err() {
                    break;
                }
                let _ = conn.flush().await;
                tokio::task::yield_now().await;
            }
            if open {
                held.push(conn);
            }
        }
        drop(listener);
        heads
    });
    (addr, task)
}

fn sse(event: &str, id: Option<u64>, data: &Value) -> String {
    let id = id.map(|i| format!("id: {i}\n")).unwrap_or_default();
    format!("event: {event}\n{id}data: {data}\n\n")
}

fn hello(transitions: Value) -> Value {
    json!({
        "principal": "dash",
        "role": "viewer",
        "instances": [{"name": "alpha"}, {"name": "search"}],
        "transitions": transitions,
        "plugins": {"dir": null, "plugins": []},
    })
}

#[tokio::test]
async fn events_prints_the_snapshot_and_exits() {
    let body = format!(
        "retry: 2000\n{}{}",
        sse(
            "hello",
            None,
            &hello(json!({
                "search": [transition("search", "starting", "running", "ready", T0 + 5)],
                "alpha": [
                    transition("alpha", "starting", "running", "ready", T0),
                    transition("alpha", "running", "offline", "exited with code 1", T0 + 9),
                ],
            }))
        ),
        sse(
            "transition",
            Some(1),
            &json!({"transition": transition("alpha", "offline", "restarting", "", T0 + 10), "instance": null})
        ),
    );
    // Held open: the command must not wait for more.
    let (addr, server) = scripted(vec![
        Answer::StreamOpen(body.clone()),
        Answer::StreamOpen(body.clone()),
        Answer::StreamOpen(body),
    ])
    .await;
    let run = |follow: bool, json: bool, backends: &[&str]| {
        let cmd = Command::Events(events_args(addr, follow, json, backends));
        async move {
            tokio::time::timeout(
                std::time::Duration::from_secs(10),
                execute(&cmd, SystemTime::now()),
            )
            .await
            .expect("events without --follow ends after the snapshot")
        }
    };
    let out = run(false, false, &[]).await;
    assert_eq!(out.exit, Exit::Ok, "{out:?}");
    assert_eq!(
        out.stdout,
        "\
2023-11-14T22:13:20.000Z  alpha   starting    → running      ready
2023-11-14T22:13:20.005Z  search  starting    → running      ready
2023-11-14T22:13:20.009Z  alpha   running     → offline      exited with code 1
"
    );
    assert_eq!(out.stderr, "");

    let out = run(false, false, &["search", "nosuch"]).await;
    assert_eq!(
        out.stdout,
        "2023-11-14T22:13:20.005Z  search  starting    → running      ready\n"
    );
    assert_eq!(
        out.stderr,
        "warning: no backend named nosuch (backends: alpha, search)\n"
    );

    let out = run(false, true, &[]).await;
    assert_eq!(out.exit, Exit::Ok, "{out:?}");
    let lines: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{}", out.stdout);
    assert_eq!(
        (
            &lines[0]["event"],
            &lines[0]["id"],
            &lines[0]["data"]["principal"]
        ),
        (&json!("hello"), &Value::Null, &json!("dash"))
    );

    let heads = server.await.unwrap();
    assert!(
        heads[0].starts_with("GET /api/v1/events HTTP/1.1\r\n")
            && heads[0]
                .to_lowercase()
                .contains("accept: text/event-stream")
            && heads[0].contains(&format!("Bearer {VIEWER_SECRET}")),
        "{}",
        heads[0]
    );
}

#[tokio::test]
async fn events_follow_reconnects_and_fills_in_what_it_missed() {
    let t = |n: i64, backend: &str, from: &str, to: &str| {
        transition(backend, from, to, &format!("step {n}"), T0 + n)
    };
    let h1 = t(1, "alpha", "starting", "running");
    let h2 = t(2, "search", "starting", "running");
    let t3 = t(3, "alpha", "running", "offline");
    let t4 = t(4, "alpha", "offline", "restarting");
    let t5 = t(5, "search", "running", "degraded");
    let t6 = t(6, "search", "degraded", "running");
    let ev = |id: u64, t: &Value| {
        sse(
            "transition",
            Some(id),
            &json!({"transition": t, "instance": null}),
        )
    };
    let first = format!(
        "retry: 10\n{}: keep-alive\n\n{}{}{}",
        sse(
            "hello",
            None,
            &hello(json!({"alpha": [h1], "search": [h2]}))
        ),
        // Sent again: it happened between subscribing and the snapshot.
        ev(1, &h2),
        sse("instances", Some(2), &json!({"instances": []})),
        ev(3, &t3),
    );
    let second = format!(
        "{}{}{}",
        // t4 happened while disconnected.
        sse(
            "hello",
            None,
            &hello(json!({"alpha": [h1, t3, t4], "search": [h2]}))
        ),
        ev(1, &t5),
        // Fell behind: t6 only in the new snapshot.
        sse(
            "hello",
            None,
            &hello(json!({"alpha": [h1, t3, t4], "search": [h2, t5, t6]}))
        ),
    );
    let (addr, _server) = scripted(vec![Answer::Stream(first), Answer::Stream(second)]).await;
    let (exit, out) = follow_until(events_args(addr, true, false, &[]), |seen| {
        Some(seen.stdout.contains("step 6") && seen.stderr.contains("retrying"))
    })
    .await;
    assert_eq!(exit, Exit::Ok);
    assert_eq!(
        out.stdout,
        "\
2023-11-14T22:13:20.001Z  alpha   starting    → running      step 1
2023-11-14T22:13:20.002Z  search  starting    → running      step 2
2023-11-14T22:13:20.003Z  alpha   running     → offline      step 3
2023-11-14T22:13:20.004Z  alpha   offline     → restarting   step 4
2023-11-14T22:13:20.005Z  search  running     → degraded     step 5
2023-11-14T22:13:20.006Z  search  degraded    → running      step 6
"
    );
    let notes: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(
        notes[0],
        "note: the event stream ended; reconnecting in 10ms"
    );
    assert_eq!(notes[1], "note: reconnected");
    assert_eq!(
        notes[2],
        "note: this client fell behind the event stream; resuming from a new snapshot"
    );
    assert_eq!(
        notes[3],
        "note: the event stream ended; reconnecting in 10ms"
    );
    assert!(
        notes[4].starts_with("note: cannot reach the control API at")
            && notes[4].ends_with("retrying in 20ms"),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn events_follow_json_and_backend_filter() {
    let body = format!(
        "retry: 10\n{}{}{}",
        sse("hello", None, &hello(json!({}))),
        sse(
            "transition",
            Some(1),
            &json!({"transition": transition("search", "running", "offline", "x", T0), "instance": null})
        ),
        sse(
            "transition",
            Some(2),
            &json!({"transition": transition("alpha", "running", "offline", "y", T0 + 1), "instance": null})
        ),
    );
    let (addr, _server) = scripted(vec![Answer::StreamOpen(body)]).await;
    let (exit, out) = follow_until(events_args(addr, true, true, &["alpha"]), |seen| {
        Some(seen.stdout.lines().count() == 2)
    })
    .await;
    assert_eq!(exit, Exit::Ok);
    let lines: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["event"], "hello");
    assert_eq!(
        (
            &lines[1]["event"],
            &lines[1]["id"],
            &lines[1]["data"]["transition"]["backend"]
        ),
        (&json!("transition"), &json!(2), &json!("alpha"))
    );
}

#[tokio::test]
async fn events_first_connection_failures_end_it() {
    let run = |addr: SocketAddr, follow: bool| {
        let cmd = Command::Events(events_args(addr, follow, false, &[]));
        async move {
            tokio::time::timeout(
                std::time::Duration::from_secs(10),
                execute(&cmd, SystemTime::now()),
            )
            .await
            .expect("a failed first connection ends events")
        }
    };
    // Nothing listens.
    let free = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let out = run(free, true).await;
    assert_eq!(out.exit, Exit::ApiError, "{out:?}");
    assert!(
        out.stderr
            .starts_with("error: cannot reach the control API"),
        "{}",
        out.stderr
    );

    // Not an event stream; a stream that ends before its hello; a first
    // event that is not a hello.
    let (addr, _s) = scripted(vec![
        Answer::Raw(
            "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: 2\r\n\r\nhi".into(),
        ),
        Answer::Stream(": nothing\n\n".into()),
        Answer::Stream(sse("transition", Some(1), &json!({}))),
    ])
    .await;
    for expected in [
        "not an event stream",
        "ended before its `hello`",
        "not `hello`",
    ] {
        let out = run(addr, true).await;
        assert_eq!(out.exit, Exit::ApiError, "{out:?}");
        assert!(out.stderr.contains(expected), "{expected}: {}", out.stderr);
    }

    // A refused token ends it on a reconnection too.
    let (addr, _s) = scripted(vec![
        Answer::Stream(format!("retry: 10\n{}", sse("hello", None, &hello(json!({}))))),
        Answer::Raw(
            "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: 62\r\n\r\n{\"error\":{\"code\":\"unauthorized\",\"message\":\"unknown token xx\"}}".into(),
        ),
    ])
    .await;
    let out = run(addr, true).await;
    assert_eq!(out.exit, Exit::Refused, "{out:?}");
    assert!(
        out.stderr.contains("note: the event stream ended")
            && out.stderr.contains("error: unknown token"),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn events_against_a_served_api() {
    let fixture = std::sync::Arc::new(Fixture::new((None, Vec::new())));
    let (addr, stop) = serve_fixture(fixture.clone()).await;

    let out = execute(
        &Command::Events(EventsArgs {
            follow: false,
            backends: Vec::new(),
            api: args(addr, Some("wrong-token"), false),
        }),
        SystemTime::now(),
    )
    .await;
    assert_eq!(out.exit, Exit::Refused, "{out:?}");

    let feed = fixture.feed.clone();
    let mut sent = false;
    let (exit, out) = follow_until(events_args(addr, true, false, &["alpha", "beta"]), |seen| {
        // Once the gateway side listens for transitions.
        if !sent && feed.receiver_count() > 0 {
            sent = true;
            for (backend, to, n) in [
                ("alpha", "offline", 1),
                ("gamma", "starting", 2),
                ("beta", "running", 3),
            ] {
                let t = crate::health::Transition {
                    backend: backend.into(),
                    from: crate::health::HealthState::Running,
                    to: to.parse().unwrap(),
                    reason: format!("live {n}"),
                    at: crate::health::unix_ms::from_ms(T0 + n),
                };
                feed.send(t).unwrap();
            }
        }
        Some(seen.stdout.contains("live 3"))
    })
    .await;
    assert_eq!(exit, Exit::Ok);
    assert_eq!(
        out.stdout,
        "\
2023-11-14T22:13:20.001Z  alpha  running     → offline      live 1
2023-11-14T22:13:20.003Z  beta   running     → running      live 3
"
    );
    assert_eq!(out.stderr, "");
    stop.cancel();
}

#[test]
fn parses_plugins_and_events() {
    let cli = Cli::try_parse_from([
        "vigil",
        "events",
        "-f",
        "--backend",
        "a",
        "--backend",
        "b",
        "--json",
    ])
    .unwrap();
    let Top::Control(Command::Events(e)) = cli.command else {
        panic!("not events")
    };
    assert!(e.follow && e.api.json, "{e:?}");
    assert_eq!(e.backends, ["a", "b"]);
    let cli = Cli::try_parse_from(["vigil", "events"]).unwrap();
    let Top::Control(Command::Events(e)) = cli.command else {
        panic!("not events")
    };
    assert!(!e.follow && e.backends.is_empty(), "{e:?}");
    assert!(matches!(
        Cli::try_parse_from(["vigil", "plugins", "--api", "h:1"])
            .unwrap()
            .command,
        Top::Control(Command::Plugins(_))
    ));
    for (command, text) in [
        ("plugins", "3  some plugin is disabled"),
        (
            "events",
            "4  the token is missing or refused (401/403), on any connection",
        ),
    ] {
        let help = Cli::command()
            .find_subcommand_mut(command)
            .unwrap()
            .render_long_help()
            .to_string();
        assert!(help.contains(text), "{help}");
    }
}

// === audit ===

fn call_record(
    n: i64,
    principal: &str,
    outcome: crate::audit::Outcome,
) -> crate::audit::CallRecord {
    crate::audit::CallRecord {
        at: crate::health::unix_ms::from_ms(T0 + n),
        principal: principal.into(),
        issuer: None,
        session: Some(format!("s-0000000{n}")),
        backend: "alpha".into(),
        method: crate::audit::Method::ToolsCall,
        name: format!("alpha__tool{n}"),
        outcome,
        duration_us: 1_200,
        arguments: None,
        search: None,
    }
}

/// The control API over `testutil`'s fake backends and a store holding
/// `calls`, on 127.0.0.1:<ephemeral>.
async fn serve_calls(
    calls: &[crate::audit::CallRecord],
) -> (
    SocketAddr,
    CancellationToken,
    std::sync::Arc<crate::store::sqlite::SqliteStore>,
) {
    use crate::store::CallStore;
    let (state, _control, store) = testutil::state(testutil::tokens());
    store.append(calls.to_vec()).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    tokio::spawn(crate::api::serve_on(listener, state, stop.clone()));
    (addr, stop, store)
}

fn audit_args(addr: SocketAddr, token: &str, json: bool) -> AuditArgs {
    AuditArgs {
        principal: None,
        issuer: None,
        backend: None,
        outcome: None,
        since: None,
        limit: 100,
        follow: false,
        api: args(addr, Some(token), json),
    }
}

#[tokio::test]
async fn audit_against_a_served_api() {
    use crate::audit::Outcome;
    let (addr, stop, _store) = serve_calls(&[
        call_record(1, "key:alice", Outcome::Ok),
        call_record(2, "key:bob", Outcome::Error),
        call_record(3, "key:alice", Outcome::Unavailable),
    ])
    .await;
    let run = |a: AuditArgs| async move { execute(&Command::Audit(a), SystemTime::now()).await };

    let out = run(audit_args(addr, VIEWER_SECRET, false)).await;
    assert_eq!(out.exit, Exit::Ok, "{out:?}");
    assert_eq!(
        out.stdout,
        "\
TIME                      PRINCIPAL  BACKEND  METHOD      OUTCOME      DURATION  SESSION     NAME
2023-11-14T22:13:20.001Z  key:alice  alpha    tools/call  ok           1.2ms     s-00000001  alpha__tool1
2023-11-14T22:13:20.002Z  key:bob    alpha    tools/call  error        1.2ms     s-00000002  alpha__tool2
2023-11-14T22:13:20.003Z  key:alice  alpha    tools/call  unavailable  1.2ms     s-00000003  alpha__tool3
",
        "oldest first, like a log"
    );

    let mut a = audit_args(addr, VIEWER_SECRET, true);
    a.principal = Some("key:alice".into());
    a.limit = 1;
    let out = run(a).await;
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["calls"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(
        (
            v["calls"][0]["id"].as_i64(),
            v["calls"][0]["outcome"].as_str()
        ),
        (Some(3), Some("unavailable"))
    );

    let mut a = audit_args(addr, VIEWER_SECRET, false);
    a.outcome = Some("fine".into());
    let out = run(a).await;
    assert_eq!(out.exit, Exit::Rejected, "{out:?}");
    assert!(
        out.stderr.contains("unknown outcome `fine`"),
        "{}",
        out.stderr
    );

    let mut a = audit_args(addr, VIEWER_SECRET, false);
    a.backend = Some("nosuch".into());
    let out = run(a).await;
    assert_eq!(
        (out.exit, out.stdout.as_str()),
        (Exit::Ok, "no calls recorded match\n")
    );

    let out = run(audit_args(addr, "wrong-token", false)).await;
    assert_eq!(out.exit, Exit::Refused, "{out:?}");
    stop.cancel();
}

#[tokio::test]
async fn audit_follow_prints_each_new_call_once() {
    use crate::audit::Outcome;
    use crate::store::CallStore;
    let (addr, stop, store) = serve_calls(&[call_record(1, "key:alice", Outcome::Ok)]).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let halt = CancellationToken::new();
    let mut a = audit_args(addr, VIEWER_SECRET, true);
    a.follow = true;
    let task = tokio::spawn({
        let halt = halt.clone();
        async move { audit::run(&a, &mut Lines(tx), &halt).await }
    });
    let mut seen = String::new();
    let mut added = false;
    let done = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        while let Some((out, text)) = rx.recv().await {
            assert!(out, "no notes expected: {text}");
            seen.push_str(&text);
            if !added && seen.contains("alpha__tool1") {
                added = true;
                store
                    .append(vec![
                        call_record(2, "key:bob", Outcome::Error),
                        call_record(3, "key:bob", Outcome::Ok),
                    ])
                    .await
                    .unwrap();
            }
            if seen.contains("alpha__tool3") {
                return;
            }
        }
    })
    .await;
    halt.cancel();
    let exit = tokio::time::timeout(std::time::Duration::from_secs(5), task)
        .await
        .expect("audit --follow stops when cancelled")
        .unwrap();
    assert!(done.is_ok(), "never saw the new calls:\n{seen}");
    assert_eq!(exit, Exit::Ok);
    let ids: Vec<i64> = seen
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    assert_eq!(ids, [1, 2, 3], "one JSON line per call, each once:\n{seen}");
    stop.cancel();
}

#[test]
fn parses_audit() {
    let cli = Cli::try_parse_from([
        "vigil",
        "audit",
        "--follow",
        "--principal",
        "key:ci",
        "--outcome",
        "error",
        "--since",
        "10m",
        "--limit",
        "5",
        "--json",
    ])
    .unwrap();
    let Top::Control(Command::Audit(a)) = cli.command else {
        panic!("not audit")
    };
    assert!(a.follow && a.api.json, "{a:?}");
    assert_eq!(
        (
            a.principal.as_deref(),
            a.outcome.as_deref(),
            a.since.as_deref(),
            a.limit
        ),
        (Some("key:ci"), Some("error"), Some("10m"), 5)
    );
    let Top::Control(Command::Audit(a)) = Cli::try_parse_from(["vigil", "audit"]).unwrap().command
    else {
        panic!("not audit")
    };
    assert_eq!((a.limit, a.follow), (100, false));
    for bad in ["0", "10001", "many"] {
        assert!(
            Cli::try_parse_from(["vigil", "audit", "--limit", bad]).is_err(),
            "--limit {bad}"
        );
    }
}
