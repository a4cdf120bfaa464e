//! The event stream, `/metrics` and the dashboard's assets, through the
//! real router over a [`FakeControl`](super::testutil::FakeControl).

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

use super::router;
use super::testutil::{self, VIEWER_SECRET};
use crate::health::HealthState;

fn get(path: &str, token: Option<&str>) -> Request<Body> {
    let mut req = Request::get(path).header(header::HOST, testutil::HOST);
    if let Some(t) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    req.body(Body::empty()).unwrap()
}

/// Reads server-sent events off a response body, one at a time.
struct Events {
    body: Body,
    buffer: String,
}

impl Events {
    /// The next event as (event name, data as JSON); skips keep-alives.
    async fn next(&mut self) -> (String, Value) {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let (mut name, mut data) = (String::from("message"), String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event: ") {
                        name = v.to_owned();
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data.push_str(v);
                    }
                }
                if data.is_empty() {
                    continue; // a comment
                }
                return (name, serde_json::from_str(&data).unwrap());
            }
            let frame = tokio::time::timeout(Duration::from_secs(5), self.body.frame())
                .await
                .expect("an event within 5 s")
                .expect("the stream stays open")
                .unwrap();
            if let Ok(bytes) = frame.into_data() {
                self.buffer.push_str(std::str::from_utf8(&bytes).unwrap());
            }
        }
    }
}

async fn open(app: &Router, token: Option<&str>) -> Events {
    let res = app
        .clone()
        .oneshot(get("/api/v1/events", token))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.headers()[header::CONTENT_TYPE], "text/event-stream");
    Events {
        body: res.into_body(),
        buffer: String::new(),
    }
}

#[tokio::test]
async fn a_stream_starts_with_a_snapshot_then_carries_each_transition_with_its_report() {
    let (state, control, _) = testutil::state(testutil::tokens());
    let app = router(state);
    let mut events = open(&app, Some(VIEWER_SECRET)).await;

    let (name, hello) = events.next().await;
    assert_eq!(name, "hello");
    assert_eq!(hello["role"], "viewer");
    assert_eq!(hello["principal"], "dash");
    let names: Vec<&str> = hello["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "beta", "gamma"]);

    // The hub subscribes when the first stream opens; give it a moment to
    // do so by sending until the stream sees one.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while control.events.receiver_count() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the hub never subscribed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    control.transition(
        "alpha",
        HealthState::Offline,
        "killed by signal 9 (SIGKILL)",
    );
    let (name, t) = events.next().await;
    assert_eq!(name, "transition");
    assert_eq!(t["transition"]["backend"], "alpha");
    assert_eq!(t["transition"]["from"], "running");
    assert_eq!(t["transition"]["to"], "offline");
    assert_eq!(t["instance"]["state"], "offline");
    assert_eq!(t["instance"]["reason"], "killed by signal 9 (SIGKILL)");

    // A second stream's snapshot holds what happened before it opened.
    let mut late = open(&app, Some(testutil::OPERATOR_SECRET)).await;
    let (_, hello) = late.next().await;
    assert_eq!(hello["role"], "operator");
    let alpha = &hello["transitions"]["alpha"];
    assert_eq!(alpha.as_array().map(Vec::len), Some(1), "{hello}");
    assert_eq!(alpha[0]["to"], "offline");
}

#[tokio::test]
async fn the_stream_and_metrics_need_a_token() {
    let (state, _, _) = testutil::state(testutil::tokens());
    let app = router(state);
    for path in ["/api/v1/events", "/metrics"] {
        let res = app.clone().oneshot(get(path, None)).await.unwrap();
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED, "{path}");
    }
}

#[tokio::test]
async fn metrics_show_current_state_in_prometheus_text() {
    let (state, _, _) = testutil::state(testutil::tokens());
    let app = router(state);
    // Instrumented figures are process-wide: other tests may add to them.
    crate::metrics::get()
        .calls_of("metrics-test")
        .record(false, Duration::from_millis(3));
    let res = app
        .oneshot(get("/metrics", Some(VIEWER_SECRET)))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert!(
        res.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let text =
        String::from_utf8(res.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    for line in [
        "# TYPE vigil_backend_state gauge",
        r#"vigil_backend_state{backend="gamma",state="quarantined"} 1"#,
        r#"vigil_backend_state{backend="gamma",state="running"} 0"#,
        r#"vigil_backend_state{backend="alpha",state="running"} 1"#,
        "# TYPE vigil_backend_restarts_total counter",
        r#"vigil_backend_restarts_total{backend="gamma"} 5"#,
        "# TYPE vigil_tool_call_duration_seconds histogram",
        r#"vigil_tool_call_duration_seconds_bucket{backend="metrics-test",le="0.004"} 1"#,
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "no line {line:?} in:\n{text}"
        );
    }
}

#[tokio::test]
async fn the_dashboard_loads_without_a_token_under_a_strict_policy() {
    let (state, _, _) = testutil::state(testutil::tokens());
    let app = router(state);
    for (path, kind) in [
        ("/ui", "text/html"),
        ("/ui/app.js", "text/javascript"),
        ("/ui/app.css", "text/css"),
    ] {
        let res = app.clone().oneshot(get(path, None)).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{path}");
        let h = res.headers();
        assert!(
            h[header::CONTENT_TYPE].to_str().unwrap().starts_with(kind),
            "{path}"
        );
        let policy = h[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
        assert!(policy.contains("script-src 'self'") && policy.contains("default-src 'none'"));
    }
    // Anything else without a token still reveals nothing.
    let res = app.clone().oneshot(get("/ui/secret", None)).await.unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
}

#[test]
fn only_visible_moves_of_a_report_are_resent() {
    use super::events::moved_visibly;
    let mut was = testutil::report("alpha", "process", HealthState::Running);
    was.latency_ms = Some(4.0);
    was.error_rate = Some(0.10);
    was.calls_in_window = 100;
    let with = |f: &dyn Fn(&mut super::InstanceReport)| {
        let mut r = was.clone();
        f(&mut r);
        r
    };
    assert!(!moved_visibly(&was, &was));
    assert!(!moved_visibly(&was, &with(&|r| r.latency_ms = Some(4.8))));
    assert!(moved_visibly(&was, &with(&|r| r.latency_ms = Some(6.0))));
    // Under a millisecond is noise, however large the ratio.
    let mut fast = was.clone();
    fast.latency_ms = Some(0.4);
    assert!(!moved_visibly(&fast, &with(&|r| r.latency_ms = Some(1.2))));
    assert!(moved_visibly(&was, &with(&|r| r.latency_ms = None)));
    assert!(!moved_visibly(&was, &with(&|r| r.error_rate = Some(0.105))));
    assert!(moved_visibly(&was, &with(&|r| r.error_rate = Some(0.12))));
    assert!(!moved_visibly(&was, &with(&|r| r.calls_in_window = 110)));
    assert!(moved_visibly(&was, &with(&|r| r.calls_in_window = 200)));
    assert!(moved_visibly(&was, &with(&|r| r.restart_count = 1)));
    assert!(moved_visibly(
        &was,
        &with(&|r| r.state = HealthState::Degraded)
    ));
}
