use std::sync::Mutex;
use std::time::SystemTime;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use futures::future::BoxFuture;
use http_body_util::BodyExt;
use tower::ServiceExt;

use super::*;
use crate::api::{ControlError, InstanceDetail};
use crate::health::HealthState;
use crate::store::sqlite::SqliteStore;

/// A backend `b` that can be restarted, quarantined and released; `r` is remote.
struct FakeControl {
    state: Mutex<HealthState>,
}

fn report(name: &str, state: HealthState) -> InstanceReport {
    InstanceReport {
        name: name.into(),
        state,
        runtime: "process",
        since: SystemTime::UNIX_EPOCH,
        latency_ms: Some(1.5),
        error_rate: None,
        calls_in_window: 0,
        restart_count: 0,
        consecutive_failures: 0,
        next_retry_at: None,
        quarantine_reason: None,
        reason: "ready".into(),
    }
}

impl FakeControl {
    fn set(&self, name: &str, to: HealthState, need: Option<HealthState>) -> Result<InstanceReport, ControlError> {
        if name != "b" {
            return Err(ControlError::NotFound(name.into()));
        }
        let mut s = self.state.lock().unwrap();
        if need.is_some_and(|n| n != *s) {
            return Err(ControlError::Conflict(format!("backend 'b' is not {}", need.unwrap())));
        }
        *s = to;
        Ok(report("b", to))
    }
}

impl Control for FakeControl {
    fn instances(&self) -> Vec<InstanceReport> {
        vec![report("b", *self.state.lock().unwrap())]
    }
    fn instance(&self, name: &str) -> BoxFuture<'_, Result<InstanceDetail, ControlError>> {
        let r = if name == "b" {
            Ok(InstanceDetail { report: report("b", *self.state.lock().unwrap()), transitions: vec![], last_exit: None })
        } else {
            Err(ControlError::NotFound(name.into()))
        };
        Box::pin(async move { r })
    }
    fn restart(&self, name: &str, _p: &str) -> BoxFuture<'_, Result<InstanceReport, ControlError>> {
        let r = self.set(name, HealthState::Restarting, None);
        Box::pin(async move { r })
    }
    fn quarantine(&self, name: &str, _p: &str, _r: Option<String>) -> BoxFuture<'_, Result<InstanceReport, ControlError>> {
        let r = self.set(name, HealthState::Quarantined, None);
        Box::pin(async move { r })
    }
    fn release(&self, name: &str, _p: &str) -> BoxFuture<'_, Result<InstanceReport, ControlError>> {
        let r = self.set(name, HealthState::Restarting, Some(HealthState::Quarantined));
        Box::pin(async move { r })
    }
}

const VIEWER: &str = "viewer-secret-0123456789";
const OPERATOR: &str = "operator-secret-0123456789";

fn state(tokens: bool) -> (ApiState, Arc<SqliteStore>) {
    let store = Arc::new(SqliteStore::open_in_memory().unwrap());
    let tokens = if tokens {
        vec![
            ApiToken { name: "dash".into(), secret: VIEWER.into(), role: Role::Viewer },
            ApiToken { name: "ops".into(), secret: OPERATOR.into(), role: Role::Operator },
        ]
    } else {
        vec![]
    };
    let s = ApiState { control: Arc::new(FakeControl { state: Mutex::new(HealthState::Running) }), store: Some(store.clone()), tokens: Arc::new(tokens) };
    (s, store)
}

async fn call(s: &ApiState, method: &str, path: &str, token: Option<&str>) -> (StatusCode, serde_json::Value) {
    let mut req = Request::builder().method(method).uri(path);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let resp = router(s.clone()).oneshot(req.body(Body::empty()).unwrap()).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null))
}

#[tokio::test]
async fn no_token_and_unknown_token_are_401() {
    let (s, _) = state(true);
    let (st, body) = call(&s, "GET", "/api/v1/health/instances", None).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"]["code"], "unauthorized");
    let (st, _) = call(&s, "GET", "/api/v1/health/instances", Some("nope-nope-nope-nope")).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_viewer_reads_but_cannot_act_and_the_attempt_is_audited() {
    let (s, store) = state(true);
    let (st, body) = call(&s, "GET", "/api/v1/health/instances", Some(VIEWER)).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(body["instances"][0]["name"], "b");
    assert_eq!(body["instances"][0]["state"], "running");
    let (st, body) = call(&s, "POST", "/api/v1/health/instances/b/restart", Some(VIEWER)).await;
    assert_eq!(st, StatusCode::FORBIDDEN, "{body}");
    let audit = store.audit(10).unwrap();
    assert_eq!(audit.len(), 1);
    assert_eq!((audit[0].principal.as_str(), audit[0].action.as_str(), audit[0].outcome.as_str()), ("dash", "restart", "denied: viewer role"));
    let (st, _) = call(&s, "GET", "/api/v1/audit", Some(VIEWER)).await;
    assert_eq!(st, StatusCode::FORBIDDEN, "the audit log is for operators");
}

#[tokio::test]
async fn an_operator_acts_and_every_action_is_audited() {
    let (s, _) = state(true);
    let (st, body) = call(&s, "POST", "/api/v1/health/instances/b/restart", Some(OPERATOR)).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(body["state"], "restarting");
    let (st, body) = call(&s, "POST", "/api/v1/health/instances/b/release", Some(OPERATOR)).await;
    assert_eq!(st, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "conflict");
    let (st, _) = call(&s, "POST", "/api/v1/health/instances/b/quarantine", Some(OPERATOR)).await;
    assert_eq!(st, StatusCode::OK);
    let (st, _) = call(&s, "POST", "/api/v1/health/instances/b/release", Some(OPERATOR)).await;
    assert_eq!(st, StatusCode::OK);
    let (st, body) = call(&s, "GET", "/api/v1/audit?limit=10", Some(OPERATOR)).await;
    assert_eq!(st, StatusCode::OK);
    let got: Vec<(String, String)> = body["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["action"].as_str().unwrap().to_owned(), e["outcome"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(got.len(), 4);
    assert_eq!(got[0], ("restart".into(), "ok".into()));
    assert!(got[1].0 == "release" && got[1].1.starts_with("error: backend 'b' is not quarantined"), "{got:?}");
    assert_eq!(got[3], ("release".into(), "ok".into()));
}

#[tokio::test]
async fn unknown_backends_routes_and_methods_are_json_errors() {
    let (s, _) = state(true);
    let (st, body) = call(&s, "GET", "/api/v1/health/instances/zzz", Some(VIEWER)).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    assert!(body["error"]["message"].as_str().unwrap().contains("zzz"));
    let (st, body) = call(&s, "POST", "/api/v1/health/instances/zzz/restart", Some(OPERATOR)).await;
    assert_eq!(st, StatusCode::NOT_FOUND, "{body}");
    let (st, body) = call(&s, "GET", "/api/v1/nothing", Some(VIEWER)).await;
    assert_eq!((st, body["error"]["code"].as_str()), (StatusCode::NOT_FOUND, Some("not_found")));
    let (st, body) = call(&s, "DELETE", "/api/v1/health/instances", Some(OPERATOR)).await;
    assert_eq!((st, body["error"]["code"].as_str()), (StatusCode::METHOD_NOT_ALLOWED, Some("method_not_allowed")));
}

#[tokio::test]
async fn without_tokens_everyone_is_the_local_operator() {
    let (s, store) = state(false);
    let (st, _) = call(&s, "POST", "/api/v1/health/instances/b/restart", None).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(store.audit(1).unwrap()[0].principal, "local");
}
