//! Test helpers: an in-memory [`Control`] with three backends and the
//! tokens the tests authenticate with.
//!
//! | backend | runtime | state | notes |
//! |---|---|---|---|
//! | `alpha` | process | running | restart, quarantine work |
//! | `beta` | remote | offline | restart is a conflict (remote) |
//! | `gamma` | container | quarantined | release works |
//! | `oops` | — | — | every action is an internal error |

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;

use super::{ApiState, Control, ControlError, InstanceDetail, InstanceReport};
use crate::config::{ApiToken, Role};
use crate::health::HealthState;
use crate::store::sqlite::SqliteStore;

pub const OPERATOR_SECRET: &str = "operator-secret-0123456789";
pub const VIEWER_SECRET: &str = "viewer-secret-0123456789";

/// One operator token `ops` and one viewer token `dash`.
pub fn tokens() -> Vec<ApiToken> {
    vec![
        ApiToken {
            name: "ops".into(),
            secret: OPERATOR_SECRET.into(),
            role: Role::Operator,
        },
        ApiToken {
            name: "dash".into(),
            secret: VIEWER_SECRET.into(),
            role: Role::Viewer,
        },
    ]
}

pub fn report(name: &str, runtime: &'static str, state: HealthState) -> InstanceReport {
    InstanceReport {
        name: name.into(),
        instance: format!("{name}.i1"),
        state,
        runtime,
        since: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        latency_ms: Some(12.5),
        error_rate: Some(0.0),
        calls_in_window: 10,
        restart_count: 0,
        consecutive_failures: 0,
        next_retry_at: None,
        quarantine_reason: None,
        reason: "ready".into(),
        withheld: 0,
        update: None,
    }
}

/// What a [`FakeControl`] was asked to do: (action, backend, principal).
pub type Call = (&'static str, String, String);

pub struct FakeControl {
    backends: Mutex<Vec<InstanceReport>>,
    pub calls: Mutex<Vec<Call>>,
    /// Transitions for event streams: tests send, the API subscribes.
    pub events: tokio::sync::broadcast::Sender<crate::health::Transition>,
}

// === impl FakeControl ===

impl FakeControl {
    pub fn new() -> Self {
        let mut gamma = report("gamma", "container", HealthState::Quarantined);
        gamma.quarantine_reason = Some("crashed 5 times".into());
        gamma.restart_count = 5;
        FakeControl {
            backends: Mutex::new(vec![
                report("alpha", "process", HealthState::Running),
                report("beta", "remote", HealthState::Offline),
                gamma,
            ]),
            calls: Mutex::new(Vec::new()),
            events: tokio::sync::broadcast::channel(16).0,
        }
    }

    /// Moves `name` to `to` and announces it, as a supervisor would.
    pub fn transition(&self, name: &str, to: HealthState, reason: &str) {
        let mut backends = self.backends.lock().unwrap();
        let b = backends.iter_mut().find(|b| b.name == name).unwrap();
        let t = crate::health::Transition {
            backend: name.to_owned(),
            from: b.state,
            to,
            reason: reason.to_owned(),
            at: std::time::SystemTime::now(),
        };
        b.state = to;
        b.reason = reason.to_owned();
        drop(backends);
        let _ = self.events.send(t);
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    fn act(
        &self,
        action: &'static str,
        name: &str,
        principal: &str,
        f: impl FnOnce(&mut InstanceReport) -> Result<(), String>,
    ) -> Result<InstanceReport, ControlError> {
        self.calls
            .lock()
            .unwrap()
            .push((action, name.to_owned(), principal.to_owned()));
        if name == "oops" {
            return Err(ControlError::Internal(
                "the supervisor's channel is closed (secret detail)".into(),
            ));
        }
        let mut backends = self.backends.lock().unwrap();
        let b = backends
            .iter_mut()
            .find(|b| b.name == name)
            .ok_or_else(|| ControlError::NotFound(name.to_owned()))?;
        f(b).map_err(ControlError::Conflict)?;
        Ok(b.clone())
    }
}

impl Control for FakeControl {
    fn instances(&self) -> Vec<InstanceReport> {
        self.backends.lock().unwrap().clone()
    }

    fn subscribe(&self) -> Option<tokio::sync::broadcast::Receiver<crate::health::Transition>> {
        Some(self.events.subscribe())
    }

    fn instance(&self, name: &str) -> BoxFuture<'_, Result<InstanceDetail, ControlError>> {
        let found = self
            .backends
            .lock()
            .unwrap()
            .iter()
            .find(|b| b.name == name)
            .cloned();
        let name = name.to_owned();
        Box::pin(async move {
            let report = found.ok_or(ControlError::NotFound(name))?;
            Ok(InstanceDetail {
                report,
                transitions: Vec::new(),
                last_exit: None,
            })
        })
    }

    fn restart(
        &self,
        name: &str,
        principal: &str,
    ) -> BoxFuture<'_, Result<InstanceReport, ControlError>> {
        let r = self.act("restart", name, principal, |b| {
            if b.runtime == "remote" {
                return Err(format!(
                    "backend '{}' is remote: Vigil cannot restart it",
                    b.name
                ));
            }
            b.state = HealthState::Restarting;
            b.restart_count += 1;
            b.quarantine_reason = None;
            b.next_retry_at = Some(SystemTime::now() + Duration::from_secs(5));
            Ok(())
        });
        Box::pin(async move { r })
    }

    fn quarantine(
        &self,
        name: &str,
        principal: &str,
        reason: Option<String>,
    ) -> BoxFuture<'_, Result<InstanceReport, ControlError>> {
        let r = self.act("quarantine", name, principal, |b| {
            b.state = HealthState::Quarantined;
            b.quarantine_reason =
                Some(reason.unwrap_or_else(|| "quarantined by an operator".into()));
            Ok(())
        });
        Box::pin(async move { r })
    }

    fn release(
        &self,
        name: &str,
        principal: &str,
    ) -> BoxFuture<'_, Result<InstanceReport, ControlError>> {
        let r = self.act("release", name, principal, |b| {
            if b.state != HealthState::Quarantined {
                return Err(format!("backend '{}' is not quarantined", b.name));
            }
            b.state = HealthState::Restarting;
            b.quarantine_reason = None;
            Ok(())
        });
        Box::pin(async move { r })
    }
}

/// An API over a fresh [`FakeControl`] and in-memory SQLite store.
pub fn state(tokens: Vec<ApiToken>) -> (ApiState, Arc<FakeControl>, Arc<SqliteStore>) {
    let control = Arc::new(FakeControl::new());
    let store = Arc::new(SqliteStore::open_in_memory().expect("in-memory store"));
    (
        api_state(
            control.clone(),
            Some(crate::store::Stores::of(store.clone())),
            tokens,
        ),
        control,
        store,
    )
}

/// The `Host` the tests' requests name (one of the default allowed hosts).
pub const HOST: &str = "127.0.0.1:8081";

/// An API over `control` with the default `[api]` settings and `tokens`.
pub fn api_state(
    control: Arc<dyn super::Control>,
    store: Option<crate::store::Stores>,
    tokens: Vec<ApiToken>,
) -> ApiState {
    let mut api = crate::config::Config::parse("", std::path::Path::new("vigil.toml"))
        .expect("the empty config is valid")
        .api;
    api.tokens = tokens.clone();
    ApiState::new(control, store, &api, Arc::new(super::Tokens::new(tokens)))
}
