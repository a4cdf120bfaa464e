//! The control API driven through its real router with `oneshot`: a fake
//! [`Control`](super::Control) (see `testutil`) and the real in-memory
//! SQLite store.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

use super::testutil::{self, OPERATOR_SECRET, VIEWER_SECRET};
use super::{ApiState, router};
use crate::health::Transition;
use crate::store::{
    ActionLog, AuditEntry, CallStore, HealthStore, HealthWrite, InstanceRecord, Rows, StoreError,
    StoreErrorKind, Stores,
};

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    json: Value,
}

async fn send(
    app: &Router,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> Answer {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, testutil::HOST)
        .header(super::REQUEST_HEADER, "1");
    if let Some(t) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let req = match body {
        Some(b) => req
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(b.to_owned())),
        None => req.body(Body::empty()),
    }
    .unwrap();
    let res = app.clone().oneshot(req).await.unwrap();
    let (status, headers) = (res.status(), res.headers().clone());
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    let json = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!(
            "{method_path} answered non-JSON ({e}): {bytes:?}",
            method_path = path
        )
    });
    Answer {
        status,
        headers,
        json,
    }
}

async fn get(app: &Router, path: &str, token: Option<&str>) -> Answer {
    send(app, Method::GET, path, token, None).await
}

async fn post(app: &Router, path: &str, token: Option<&str>) -> Answer {
    send(app, Method::POST, path, token, None).await
}

async fn audit_of(store: &dyn ActionLog) -> Vec<(String, String, String, String)> {
    store
        .list(100)
        .await
        .unwrap()
        .rows
        .into_iter()
        .map(|a| (a.principal, a.action, a.target, a.outcome))
        .collect()
}

fn entry(
    principal: &str,
    action: &str,
    target: &str,
    outcome: &str,
) -> (String, String, String, String) {
    (
        principal.into(),
        action.into(),
        target.into(),
        outcome.into(),
    )
}

fn assert_error(a: &Answer, status: StatusCode, code: &str) {
    assert_eq!(a.status, status, "{}", a.json);
    assert_eq!(a.json["error"]["code"], code, "{}", a.json);
    assert!(
        a.json["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{}",
        a.json
    );
}

// === authentication ===

#[tokio::test]
async fn no_token_is_401_with_bearer_challenge() {
    let (state, control, store) = testutil::state(testutil::tokens());
    let app = router(state);
    for (method, path) in [
        (Method::GET, "/api/v1/health/instances"),
        (Method::POST, "/api/v1/health/instances/alpha/restart"),
    ] {
        let a = send(&app, method, path, None, None).await;
        assert_error(&a, StatusCode::UNAUTHORIZED, "unauthorized");
        assert_eq!(a.headers[header::WWW_AUTHENTICATE], "Bearer");
    }
    assert!(control.calls().is_empty());
    assert!(
        audit_of(&*store).await.is_empty(),
        "no principal, nothing to audit"
    );
}

#[tokio::test]
async fn unknown_or_malformed_token_is_401() {
    let (state, control, _store) = testutil::state(testutil::tokens());
    let app = router(state);
    let a = post(
        &app,
        "/api/v1/health/instances/alpha/restart",
        Some("not-a-configured-token"),
    )
    .await;
    assert_error(&a, StatusCode::UNAUTHORIZED, "unauthorized");
    assert_eq!(a.headers[header::WWW_AUTHENTICATE], "Bearer");

    let basic = Request::get("/api/v1/health/instances")
        .header(header::HOST, testutil::HOST)
        .header(header::AUTHORIZATION, format!("Basic {OPERATOR_SECRET}"))
        .body(Body::empty())
        .unwrap();
    assert_eq!(
        app.clone().oneshot(basic).await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    let prefix = &OPERATOR_SECRET[..OPERATOR_SECRET.len() - 1];
    assert_eq!(
        get(&app, "/api/v1/health/instances", Some(prefix))
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
    assert!(control.calls().is_empty());
}

#[tokio::test]
async fn bearer_scheme_is_case_insensitive() {
    let (state, ..) = testutil::state(testutil::tokens());
    let req = Request::get("/api/v1/health/instances")
        .header(header::HOST, testutil::HOST)
        .header(header::AUTHORIZATION, format!("bearer {VIEWER_SECRET}"))
        .body(Body::empty())
        .unwrap();
    assert_eq!(
        router(state).oneshot(req).await.unwrap().status(),
        StatusCode::OK
    );
}

// === reads ===

#[tokio::test]
async fn viewer_reads_instances_and_detail() {
    let (state, ..) = testutil::state(testutil::tokens());
    let app = router(state);
    let a = get(&app, "/api/v1/health/instances", Some(VIEWER_SECRET)).await;
    assert_eq!(a.status, StatusCode::OK);
    let names: Vec<_> = a.json["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "beta", "gamma"]);
    assert_eq!(a.json["instances"][0]["state"], "running");
    assert_eq!(a.json["instances"][0]["runtime"], "process");
    assert_eq!(a.json["instances"][0]["since"], 1_700_000_000_000i64);
    assert_eq!(a.json["instances"][0]["next_retry_at"], Value::Null);

    let d = get(&app, "/api/v1/health/instances/gamma", Some(VIEWER_SECRET)).await;
    assert_eq!(d.status, StatusCode::OK);
    assert_eq!(d.json["name"], "gamma");
    assert_eq!(d.json["state"], "quarantined");
    assert_eq!(d.json["quarantine_reason"], "crashed 5 times");
    assert!(d.json["transitions"].is_array());
}

#[tokio::test]
async fn unknown_backend_is_404_naming_it() {
    let (state, _control, store) = testutil::state(testutil::tokens());
    let app = router(state);
    let a = get(&app, "/api/v1/health/instances/nosuch", Some(VIEWER_SECRET)).await;
    assert_error(&a, StatusCode::NOT_FOUND, "not_found");
    assert!(
        a.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("'nosuch'"),
        "{}",
        a.json
    );

    let a = post(
        &app,
        "/api/v1/health/instances/nosuch/restart",
        Some(OPERATOR_SECRET),
    )
    .await;
    assert_error(&a, StatusCode::NOT_FOUND, "not_found");
    assert!(
        a.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("'nosuch'"),
        "{}",
        a.json
    );
    assert_eq!(
        audit_of(&*store).await,
        [entry(
            "ops",
            "restart",
            "nosuch",
            "error: no backend named 'nosuch'"
        )]
    );
}

// === actions ===

#[tokio::test]
async fn viewer_restart_is_403_and_audited_as_denied() {
    let (state, control, store) = testutil::state(testutil::tokens());
    let app = router(state);
    let a = post(
        &app,
        "/api/v1/health/instances/alpha/restart",
        Some(VIEWER_SECRET),
    )
    .await;
    assert_error(&a, StatusCode::FORBIDDEN, "forbidden");
    assert!(
        control.calls().is_empty(),
        "a viewer's request must not reach the monitor"
    );
    assert_eq!(
        audit_of(&*store).await,
        [entry("dash", "restart", "alpha", "denied: viewer role")]
    );
    for action in ["quarantine", "release"] {
        let a = post(
            &app,
            &format!("/api/v1/health/instances/alpha/{action}"),
            Some(VIEWER_SECRET),
        )
        .await;
        assert_eq!(a.status, StatusCode::FORBIDDEN);
    }
    assert_eq!(store.list(10).await.unwrap().rows.len(), 3);
}

#[tokio::test]
async fn operator_restart_answers_the_new_state_and_is_audited() {
    let (state, control, store) = testutil::state(testutil::tokens());
    let app = router(state);
    let before = std::time::SystemTime::now();
    let a = post(
        &app,
        "/api/v1/health/instances/alpha/restart",
        Some(OPERATOR_SECRET),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.json);
    assert_eq!(a.json["name"], "alpha");
    assert_eq!(a.json["state"], "restarting");
    assert_eq!(a.json["restart_count"], 1);
    assert_eq!(
        control.calls(),
        [("restart", "alpha".to_owned(), "ops".to_owned())]
    );
    let audit = store.list(10).await.unwrap().rows;
    assert_eq!(
        audit_of(&*store).await,
        [entry("ops", "restart", "alpha", "ok")]
    );
    assert!(audit[0].at >= before - std::time::Duration::from_millis(1));
}

#[tokio::test]
async fn quarantine_takes_an_optional_reason() {
    let (state, control, store) = testutil::state(testutil::tokens());
    let app = router(state);
    let a = send(
        &app,
        Method::POST,
        "/api/v1/health/instances/alpha/quarantine",
        Some(OPERATOR_SECRET),
        Some(r#"{"reason": "leaks memory"}"#),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.json);
    assert_eq!(a.json["state"], "quarantined");
    assert_eq!(a.json["quarantine_reason"], "leaks memory");

    let a = post(
        &app,
        "/api/v1/health/instances/beta/quarantine",
        Some(OPERATOR_SECRET),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.json);
    assert_eq!(a.json["quarantine_reason"], "quarantined by an operator");

    let bad = send(
        &app,
        Method::POST,
        "/api/v1/health/instances/alpha/quarantine",
        Some(OPERATOR_SECRET),
        Some(r#"{"reson": "typo"}"#),
    )
    .await;
    assert_error(&bad, StatusCode::BAD_REQUEST, "bad_request");
    let long = format!(r#"{{"reason": "{}"}}"#, "x".repeat(501));
    let bad = send(
        &app,
        Method::POST,
        "/api/v1/health/instances/alpha/quarantine",
        Some(OPERATOR_SECRET),
        Some(&long),
    )
    .await;
    assert_error(&bad, StatusCode::BAD_REQUEST, "bad_request");

    assert_eq!(
        control.calls().len(),
        2,
        "bad bodies never reach the monitor"
    );
    assert_eq!(
        audit_of(&*store).await,
        [
            entry("ops", "quarantine", "alpha", "ok"),
            entry("ops", "quarantine", "beta", "ok")
        ]
    );
}

#[tokio::test]
async fn conflict_is_409_and_audited_as_error() {
    let (state, _control, store) = testutil::state(testutil::tokens());
    let app = router(state);
    let a = post(
        &app,
        "/api/v1/health/instances/alpha/release",
        Some(OPERATOR_SECRET),
    )
    .await;
    assert_error(&a, StatusCode::CONFLICT, "conflict");
    assert_eq!(
        a.json["error"]["message"],
        "backend 'alpha' is not quarantined"
    );
    let a = post(
        &app,
        "/api/v1/health/instances/beta/restart",
        Some(OPERATOR_SECRET),
    )
    .await;
    assert_error(&a, StatusCode::CONFLICT, "conflict");

    let a = post(
        &app,
        "/api/v1/health/instances/gamma/release",
        Some(OPERATOR_SECRET),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.json["state"], "restarting");
    assert_eq!(
        audit_of(&*store).await,
        [
            entry(
                "ops",
                "release",
                "alpha",
                "error: backend 'alpha' is not quarantined"
            ),
            entry(
                "ops",
                "restart",
                "beta",
                "error: backend 'beta' is remote: Vigil cannot restart it"
            ),
            entry("ops", "release", "gamma", "ok"),
        ]
    );
}

#[tokio::test]
async fn internal_error_is_500_without_detail() {
    let (state, _control, store) = testutil::state(testutil::tokens());
    let app = router(state);
    let a = post(
        &app,
        "/api/v1/health/instances/oops/restart",
        Some(OPERATOR_SECRET),
    )
    .await;
    assert_error(&a, StatusCode::INTERNAL_SERVER_ERROR, "internal");
    assert!(
        !a.json.to_string().contains("secret detail"),
        "internal detail leaked: {}",
        a.json
    );
    let audit = audit_of(&*store).await;
    assert_eq!(audit.len(), 1);
    assert!(
        audit[0].3.starts_with("error: internal error:"),
        "{audit:?}"
    );
}

#[tokio::test]
async fn no_tokens_mode_acts_as_local_operator() {
    let (state, control, store) = testutil::state(Vec::new());
    let app = router(state);
    assert_eq!(
        get(&app, "/api/v1/health/instances", None).await.status,
        StatusCode::OK
    );
    let a = post(&app, "/api/v1/health/instances/alpha/restart", None).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.json);
    // A stray header changes nothing: there is nothing to match it against.
    let a = post(
        &app,
        "/api/v1/health/instances/alpha/quarantine",
        Some("whatever"),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.json);
    assert_eq!(
        control.calls(),
        [
            ("restart", "alpha".to_owned(), "local".to_owned()),
            ("quarantine", "alpha".to_owned(), "local".to_owned())
        ]
    );
    assert_eq!(
        audit_of(&*store).await,
        [
            entry("local", "restart", "alpha", "ok"),
            entry("local", "quarantine", "alpha", "ok")
        ]
    );
    assert_eq!(
        get(&app, "/api/v1/audit", None).await.status,
        StatusCode::OK
    );
}

/// A store whose every call fails.
struct BrokenStore;

fn broken() -> StoreError {
    StoreError::new(StoreErrorKind::Corrupt, "broken").context("store")
}

#[async_trait::async_trait]
impl HealthStore for BrokenStore {
    async fn write(&self, _: Vec<HealthWrite>) -> Result<(), StoreError> {
        Err(broken())
    }
    async fn transitions(&self, _: &str, _: usize) -> Result<Rows<Transition>, StoreError> {
        Err(broken())
    }
    async fn load_instances(&self) -> Result<Rows<InstanceRecord>, StoreError> {
        Err(broken())
    }
    async fn instance(&self, _: &str) -> Result<Option<InstanceRecord>, StoreError> {
        Err(broken())
    }
}

#[async_trait::async_trait]
impl crate::store::PinStore for BrokenStore {
    async fn approvals(&self) -> Result<(Vec<String>, Rows<crate::store::PinRecord>), StoreError> {
        Err(broken())
    }
    async fn approve(
        &self,
        _: &str,
        _: Vec<(crate::catalog::pin::PinKey, crate::catalog::digest::Digest)>,
        _: &str,
        _: std::time::SystemTime,
    ) -> Result<(), StoreError> {
        Err(broken())
    }
}

#[async_trait::async_trait]
impl crate::store::UpdateStore for BrokenStore {
    async fn save_update(&self, _: &crate::rollout::UpdateRecord) -> Result<(), StoreError> {
        Err(broken())
    }
    async fn updates(
        &self,
        _: &str,
        _: usize,
    ) -> Result<Rows<crate::rollout::UpdateRecord>, StoreError> {
        Err(broken())
    }
    async fn unfinished_updates(&self) -> Result<Rows<crate::rollout::UpdateRecord>, StoreError> {
        Err(broken())
    }
}

#[async_trait::async_trait]
impl ActionLog for BrokenStore {
    async fn record(&self, _: AuditEntry) -> Result<(), StoreError> {
        Err(broken())
    }
    async fn list(&self, _: usize) -> Result<Rows<AuditEntry>, StoreError> {
        Err(broken())
    }
}

#[async_trait::async_trait]
impl CallStore for BrokenStore {
    async fn append(&self, _: Vec<crate::audit::CallRecord>) -> Result<(), StoreError> {
        Err(broken())
    }
    async fn query(
        &self,
        _: &crate::audit::CallQuery,
    ) -> Result<Rows<crate::audit::StoredCall>, StoreError> {
        Err(broken())
    }
    async fn prune(&self, _: std::time::SystemTime) -> Result<usize, StoreError> {
        Err(broken())
    }
}

#[tokio::test]
async fn failing_audit_write_does_not_hide_the_result() {
    let (state, control, _store) = testutil::state(testutil::tokens());
    let app = router(ApiState {
        store: Some(Stores::of(Arc::new(BrokenStore))),
        ..state
    });
    let a = post(
        &app,
        "/api/v1/health/instances/alpha/restart",
        Some(OPERATOR_SECRET),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.json);
    assert_eq!(control.calls().len(), 1);
    let a = get(&app, "/api/v1/audit", Some(OPERATOR_SECRET)).await;
    assert_error(&a, StatusCode::INTERNAL_SERVER_ERROR, "internal");
}

// === audit log ===

#[tokio::test]
async fn without_a_store_actions_work_and_the_audit_log_is_503() {
    let (state, control, _store) = testutil::state(testutil::tokens());
    let app = router(ApiState {
        store: None,
        ..state
    });
    assert_eq!(
        post(
            &app,
            "/api/v1/health/instances/alpha/restart",
            Some(OPERATOR_SECRET)
        )
        .await
        .status,
        StatusCode::OK
    );
    assert_eq!(control.calls().len(), 1);
    assert_error(
        &get(&app, "/api/v1/audit", Some(OPERATOR_SECRET)).await,
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
    );
}

#[tokio::test]
async fn audit_log_is_for_operators_with_a_limit() {
    let (state, ..) = testutil::state(testutil::tokens());
    let app = router(state);
    post(
        &app,
        "/api/v1/health/instances/alpha/restart",
        Some(VIEWER_SECRET),
    )
    .await;
    post(
        &app,
        "/api/v1/health/instances/alpha/restart",
        Some(OPERATOR_SECRET),
    )
    .await;
    post(
        &app,
        "/api/v1/health/instances/alpha/quarantine",
        Some(OPERATOR_SECRET),
    )
    .await;

    assert_error(
        &get(&app, "/api/v1/audit", Some(VIEWER_SECRET)).await,
        StatusCode::FORBIDDEN,
        "forbidden",
    );
    let a = get(&app, "/api/v1/audit", Some(OPERATOR_SECRET)).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.json["entries"].as_array().unwrap().len(), 3);
    assert_eq!(a.json["entries"][0]["principal"], "dash");
    assert_eq!(a.json["entries"][0]["outcome"], "denied: viewer role");
    assert!(a.json["entries"][0]["at"].as_i64().is_some());

    let a = get(&app, "/api/v1/audit?limit=2", Some(OPERATOR_SECRET)).await;
    let actions: Vec<_> = a.json["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        ["restart", "quarantine"],
        "the newest two, oldest first"
    );
    assert_error(
        &get(&app, "/api/v1/audit?limit=many", Some(OPERATOR_SECRET)).await,
        StatusCode::BAD_REQUEST,
        "bad_request",
    );
}

// === routing ===

#[tokio::test]
async fn unknown_path_is_404_json() {
    let (state, ..) = testutil::state(testutil::tokens());
    let app = router(state);
    let a = get(&app, "/api/v2/nothing", Some(VIEWER_SECRET)).await;
    assert_error(&a, StatusCode::NOT_FOUND, "not_found");
    assert!(
        a.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/api/v2/nothing")
    );
    // Unauthenticated callers learn nothing about which paths exist.
    assert_eq!(
        get(&app, "/api/v2/nothing", None).await.status,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn wrong_method_is_405_json() {
    let (state, control, _store) = testutil::state(testutil::tokens());
    let app = router(state);
    let a = get(
        &app,
        "/api/v1/health/instances/alpha/restart",
        Some(OPERATOR_SECRET),
    )
    .await;
    assert_error(&a, StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed");
    assert_eq!(a.headers[header::ALLOW], "POST");
    let a = send(
        &app,
        Method::DELETE,
        "/api/v1/health/instances",
        Some(OPERATOR_SECRET),
        None,
    )
    .await;
    assert_error(&a, StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed");
    assert!(control.calls().is_empty());
}

#[tokio::test]
async fn serve_refuses_unauthenticated_non_loopback() {
    let (state, ..) = testutil::state(Vec::new());
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let err = super::serve_on(listener, state, tokio_util::sync::CancellationToken::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("without [[api.tokens]]"), "{err}");
}

#[tokio::test]
async fn quarantine_body_is_json_whatever_its_content_type() {
    // `curl -d '{"reason": "..."}'` sends application/x-www-form-urlencoded.
    let (state, ..) = testutil::state(testutil::tokens());
    let req = Request::post("/api/v1/health/instances/alpha/quarantine")
        .header(header::HOST, testutil::HOST)
        .header(header::AUTHORIZATION, format!("Bearer {OPERATOR_SECRET}"))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(r#"{"reason": "from curl"}"#))
        .unwrap();
    let res = router(state).oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let json: Value =
        serde_json::from_slice(&res.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(json["quarantine_reason"], "from curl");
}

/// A monitor whose restart waits until the test opens the gate.
struct GatedControl {
    started: tokio::sync::Notify,
    gate: tokio::sync::Notify,
}

impl super::Control for GatedControl {
    fn instances(&self) -> Vec<super::InstanceReport> {
        Vec::new()
    }
    fn instance(
        &self,
        name: &str,
    ) -> futures::future::BoxFuture<'_, Result<super::InstanceDetail, super::ControlError>> {
        let name = name.to_owned();
        Box::pin(async move { Err(super::ControlError::NotFound(name)) })
    }
    fn restart(
        &self,
        name: &str,
        _: &str,
    ) -> futures::future::BoxFuture<'_, Result<super::InstanceReport, super::ControlError>> {
        let name = name.to_owned();
        Box::pin(async move {
            self.started.notify_one();
            self.gate.notified().await;
            Ok(testutil::report(
                &name,
                "process",
                crate::health::HealthState::Restarting,
            ))
        })
    }
    fn quarantine(
        &self,
        name: &str,
        _: &str,
        _: Option<String>,
    ) -> futures::future::BoxFuture<'_, Result<super::InstanceReport, super::ControlError>> {
        let name = name.to_owned();
        Box::pin(async move { Err(super::ControlError::NotFound(name)) })
    }
    fn release(
        &self,
        name: &str,
        _: &str,
    ) -> futures::future::BoxFuture<'_, Result<super::InstanceReport, super::ControlError>> {
        let name = name.to_owned();
        Box::pin(async move { Err(super::ControlError::NotFound(name)) })
    }
}

#[tokio::test]
async fn a_client_hanging_up_does_not_lose_the_audit_entry() {
    let (state, _, store) = testutil::state(testutil::tokens());
    let control = Arc::new(GatedControl {
        started: tokio::sync::Notify::new(),
        gate: tokio::sync::Notify::new(),
    });
    let app = router(ApiState {
        control: control.clone(),
        ..state
    });
    let req = Request::post("/api/v1/health/instances/alpha/restart")
        .header(header::HOST, testutil::HOST)
        .header(header::AUTHORIZATION, format!("Bearer {OPERATOR_SECRET}"))
        .body(Body::empty())
        .unwrap();
    let call = tokio::spawn(app.oneshot(req));
    control.started.notified().await;
    call.abort(); // the client goes away mid-action
    control.gate.notify_one();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    while audit_of(&*store).await.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the action's audit entry never came"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(
        audit_of(&*store).await,
        [entry("ops", "restart", "alpha", "ok")]
    );
}

// === web pages: Host, Origin and the request header (guard.rs) ===

/// One request with exactly `headers` (no helper adds any).
async fn raw(app: &Router, method: Method, path: &str, headers: &[(&str, &str)]) -> Answer {
    let mut req = Request::builder().method(method).uri(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let res = app
        .clone()
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let (status, headers) = (res.status(), res.headers().clone());
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        headers,
        json: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    }
}

#[tokio::test]
async fn a_foreign_host_is_refused_on_every_route() {
    let (state, control, _) = testutil::state(Vec::new());
    let app = router(state);
    let evil = [("host", "evil.example:8081")];
    for (method, path) in [
        (Method::GET, "/api/v1/health/instances"),
        (Method::GET, "/api/v1/audit"),
        (Method::GET, "/api/v1/events"),
        (Method::GET, "/metrics"),
        (Method::GET, "/ui"),
        (Method::GET, "/ui/app.js"),
        (Method::GET, "/"),
        (Method::GET, "/no/such/path"),
        (Method::POST, "/api/v1/health/instances/alpha/restart"),
    ] {
        let a = raw(&app, method.clone(), path, &evil).await;
        assert_error(&a, StatusCode::FORBIDDEN, "host_not_allowed");
        assert_eq!(
            a.json["error"]["message"],
            "Host `evil.example:8081` is not a name this control API answers to (DNS rebinding protection): connect by an allowed name, or add it to [api] allowed_hosts",
            "{method} {path}"
        );
        if method == Method::GET && path != "/no/such/path" && path != "/api/v1/events" {
            for own in ["127.0.0.1:8081", "localhost:1234", "[::1]:8081"] {
                let a = raw(&app, Method::GET, path, &[("host", own)]).await;
                assert!(
                    a.status.is_success() || a.status.is_redirection(),
                    "{path} with {own}: {}",
                    a.status
                );
            }
        }
    }
    assert!(control.calls().is_empty());
    let a = raw(&app, Method::GET, "/ui", &[]).await;
    assert_error(&a, StatusCode::BAD_REQUEST, "bad_request");
}

#[tokio::test]
async fn mutating_requests_need_their_own_origin_and_a_request_header() {
    let (state, control, store) = testutil::state(Vec::new());
    let app = router(state);
    let restart = "/api/v1/health/instances/alpha/restart";
    let host = ("host", testutil::HOST);
    let cases: [(&[(&str, &str)], &str); 5] = [
        (
            &[
                host,
                ("x-vigil-request", "1"),
                ("origin", "http://127.0.0.1:9999"),
            ],
            "origin_not_allowed",
        ),
        (
            &[host, ("x-vigil-request", "1"), ("origin", "null")],
            "origin_not_allowed",
        ),
        (
            &[host, ("x-vigil-request", "1"), ("origin", "not an origin")],
            "origin_not_allowed",
        ),
        (
            &[
                host,
                ("sec-fetch-site", "cross-site"),
                ("sec-fetch-mode", "no-cors"),
            ],
            "origin_required",
        ),
        (
            &[host, ("content-type", "text/plain")],
            "request_header_missing",
        ),
    ];
    for (headers, code) in cases {
        let a = raw(&app, Method::POST, restart, headers).await;
        assert_error(&a, StatusCode::FORBIDDEN, code);
    }
    assert!(control.calls().is_empty() && audit_of(&*store).await.is_empty());
    // A foreign Origin is refused on reads too (an EventSource from
    // another page), while reads without one are fine.
    let a = raw(
        &app,
        Method::GET,
        "/api/v1/health/instances",
        &[host, ("origin", "http://evil.example")],
    )
    .await;
    assert_error(&a, StatusCode::FORBIDDEN, "origin_not_allowed");
    let a = raw(&app, Method::GET, "/api/v1/health/instances", &[host]).await;
    assert_eq!(a.status, StatusCode::OK);
    // Controls: the header alone; the API's own origin; a same-origin
    // browser fetch; a bearer header instead of the request header.
    for headers in [
        &[host, ("x-vigil-request", "1")][..],
        &[
            host,
            ("x-vigil-request", "1"),
            ("origin", "http://127.0.0.1:8081"),
        ],
        &[
            host,
            ("x-vigil-request", "1"),
            ("sec-fetch-site", "same-origin"),
            ("sec-fetch-mode", "cors"),
        ],
        &[host, ("authorization", "Bearer anything")],
    ] {
        let a = raw(&app, Method::POST, restart, headers).await;
        assert_eq!(a.status, StatusCode::OK, "{headers:?}: {}", a.json);
    }
    assert_eq!(control.calls().len(), 4);
}

#[tokio::test]
async fn allowed_origins_and_hosts_widen_the_rule() {
    let (mut state, control, _) = testutil::state(Vec::new());
    state.allowed_hosts = vec!["vigil.example.com".into()];
    state.allowed_origins = vec!["https://ops.example.com".into()];
    let app = router(state);
    let a = raw(
        &app,
        Method::POST,
        "/api/v1/health/instances/alpha/restart",
        &[
            ("host", "vigil.example.com"),
            ("origin", "https://ops.example.com"),
            ("x-vigil-request", "1"),
        ],
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.json);
    let a = raw(&app, Method::GET, "/ui", &[("host", "127.0.0.1:8081")]).await;
    assert_error(&a, StatusCode::FORBIDDEN, "host_not_allowed");
    assert_eq!(control.calls().len(), 1);
}

// === failed tokens (throttle.rs) and live tokens ===

fn from(peer: &str, token: &str, path: &str) -> Request<Body> {
    let addr: std::net::SocketAddr = peer.parse().unwrap();
    let mut req = Request::get(path)
        .header(header::HOST, testutil::HOST)
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Body::empty())
        .unwrap();
    req.extensions_mut()
        .insert(axum::extract::ConnectInfo(addr));
    req
}

#[tokio::test]
async fn repeated_unknown_tokens_cool_down_their_address_only() {
    let (mut state, ..) = testutil::state(testutil::tokens());
    state.failed_tokens.limit = 3;
    state.failed_tokens.cooldown = std::time::Duration::from_secs(30);
    let app = router(state);
    let path = "/api/v1/health/instances";
    let status = |req| {
        let app = app.clone();
        async move { app.oneshot(req).await.unwrap() }
    };
    for _ in 0..3 {
        let res = status(from("127.0.0.1:5000", "wrong-guess-0123456789", path)).await;
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    }
    let res = status(from("127.0.0.1:5001", OPERATOR_SECRET, path)).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = res.headers()[header::RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((29..=30).contains(&retry), "{retry}");
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    let json: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(json["error"]["code"], "too_many_failures");
    assert_eq!(
        json["error"]["message"],
        format!("too many failed token attempts from 127.0.0.1: try again in {retry} s")
    );
    // Another address is served.
    assert_eq!(
        status(from("127.0.0.2:5000", OPERATOR_SECRET, path))
            .await
            .status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn replaced_tokens_take_effect_on_the_next_request() {
    let (state, ..) = testutil::state(testutil::tokens());
    let tokens = state.tokens.clone();
    let app = router(state);
    let path = "/api/v1/health/instances";
    assert_eq!(
        get(&app, path, Some(OPERATOR_SECRET)).await.status,
        StatusCode::OK
    );
    let rotated = "rotated-operator-secret-9f8e7d6c";
    assert!(tokens.replace(vec![crate::config::ApiToken {
        name: "ops".into(),
        secret: rotated.into(),
        role: crate::config::Role::Operator,
    }]));
    assert_error(
        &get(&app, path, Some(OPERATOR_SECRET)).await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    );
    assert_eq!(get(&app, path, Some(rotated)).await.status, StatusCode::OK);
}

// === call audit ===

fn call(
    n: u64,
    principal: &str,
    backend: &str,
    outcome: crate::audit::Outcome,
) -> crate::audit::CallRecord {
    crate::audit::CallRecord {
        at: std::time::SystemTime::now() - std::time::Duration::from_secs(3600 - n),
        principal: principal.into(),
        issuer: None,
        session: Some("s-0a1b2c3d".into()),
        backend: backend.into(),
        method: crate::audit::Method::ToolsCall,
        name: format!("{backend}__t{n}"),
        outcome,
        duration_us: 1000 + n,
        arguments: None,
        search: None,
    }
}

fn ids(a: &Answer) -> Vec<i64> {
    a.json["calls"]
        .as_array()
        .unwrap_or_else(|| panic!("no calls: {}", a.json))
        .iter()
        .map(|c| c["id"].as_i64().unwrap())
        .collect()
}

#[tokio::test]
async fn viewers_read_the_call_audit_newest_first_with_filters_and_a_cursor() {
    use crate::audit::Outcome;
    let (state, _control, store) = testutil::state(testutil::tokens());
    store
        .append(vec![
            call(1, "key:alice", "files", Outcome::Ok),
            call(2, "key:bob", "files", Outcome::Error),
            call(3, "key:alice", "search", Outcome::Unavailable),
            call(4, "key:alice", "files", Outcome::RateLimited),
        ])
        .await
        .unwrap();
    let app = router(state);
    let a = get(&app, "/api/v1/audit/calls", Some(VIEWER_SECRET)).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.json);
    assert_eq!(ids(&a), [4, 3, 2, 1]);
    let first = &a.json["calls"][3];
    assert_eq!(
        (
            &first["principal"],
            &first["backend"],
            &first["method"],
            &first["name"],
            &first["outcome"],
            &first["duration_us"],
            &first["session"],
        ),
        (
            &Value::from("key:alice"),
            &Value::from("files"),
            &Value::from("tools/call"),
            &Value::from("files__t1"),
            &Value::from("ok"),
            &Value::from(1001),
            &Value::from("s-0a1b2c3d"),
        )
    );
    assert!(first["at"].as_i64().is_some_and(|ms| ms > 0));
    for (query, want) in [
        ("?principal=key:alice", vec![4, 3, 1]),
        ("?backend=files&outcome=rate_limited", vec![4]),
        ("?outcome=error", vec![2]),
        ("?limit=2", vec![4, 3]),
        ("?after=1", vec![2, 3, 4]),
        ("?after=2&limit=1", vec![3]),
        ("?after=4", vec![]),
        ("?since=10m", vec![]),
        ("?since=2h", vec![4, 3, 2, 1]),
        ("?since=2000-01-01T00:00:00Z&principal=key:bob", vec![2]),
        ("?principal=&backend=", vec![4, 3, 2, 1]),
    ] {
        let path = format!("/api/v1/audit/calls{query}");
        let a = get(&app, &path, Some(OPERATOR_SECRET)).await;
        assert_eq!(a.status, StatusCode::OK, "{query}: {}", a.json);
        assert_eq!(ids(&a), want, "{query}");
    }
}

#[tokio::test]
async fn bad_call_audit_queries_are_400_naming_the_parameter() {
    let (state, ..) = testutil::state(testutil::tokens());
    let app = router(state);
    for (query, says) in [
        (
            "outcome=fine",
            "outcome: unknown outcome `fine`: use one of ok, error, denied, rate_limited, unavailable",
        ),
        (
            "since=yesterday",
            "since: `yesterday` is neither an RFC 3339 time",
        ),
        ("limit=0", "limit: `0` is not a number from 1 to 10000"),
        (
            "limit=10001",
            "limit: `10001` is not a number from 1 to 10000",
        ),
        ("after=-3", "after: `-3` is not a row id"),
        ("colour=red", "unknown field `colour`"),
    ] {
        let a = get(
            &app,
            &format!("/api/v1/audit/calls?{query}"),
            Some(VIEWER_SECRET),
        )
        .await;
        assert_error(&a, StatusCode::BAD_REQUEST, "bad_request");
        let message = a.json["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{query}: {message}");
    }
    let a = get(&app, "/api/v1/audit/calls", None).await;
    assert_error(&a, StatusCode::UNAUTHORIZED, "unauthorized");
}

#[tokio::test]
async fn without_a_store_the_call_audit_is_503_naming_store() {
    let (state, ..) = testutil::state(testutil::tokens());
    let app = router(ApiState {
        store: None,
        ..state
    });
    let a = get(&app, "/api/v1/audit/calls", Some(VIEWER_SECRET)).await;
    assert_error(&a, StatusCode::SERVICE_UNAVAILABLE, "unavailable");
    assert!(
        a.json["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("[store]")),
        "{}",
        a.json
    );
    // A broken store is an internal error, its detail kept in the log.
    let (state, ..) = testutil::state(testutil::tokens());
    let app = router(ApiState {
        store: Some(Stores::of(Arc::new(BrokenStore))),
        ..state
    });
    let a = get(&app, "/api/v1/audit/calls", Some(VIEWER_SECRET)).await;
    assert_error(&a, StatusCode::INTERNAL_SERVER_ERROR, "internal");
}
