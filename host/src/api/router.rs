//! The routes of the control API.
//!
//! | method and path | role | answer |
//! |---|---|---|
//! | `GET /api/v1/health/instances` | viewer | `{"instances": [InstanceReport]}` |
//! | `GET /api/v1/health/instances/{id}` | viewer | `InstanceDetail` (report + transitions + last exit) |
//! | `POST /api/v1/health/instances/{id}/restart` | operator | the new `InstanceReport` |
//! | `POST /api/v1/health/instances/{id}/quarantine` (body `{"reason": "..."}` optional) | operator | the new `InstanceReport` |
//! | `POST /api/v1/health/instances/{id}/release` | operator | the new `InstanceReport` |
//! | `GET /api/v1/audit?limit=N` | operator | `{"entries": [AuditEntry]}` |
//!
//! 401 without or with an unknown token, 403 for a viewer on an operator
//! route, 404 for an unknown backend, 409 when the action does not apply
//! (releasing a backend that is not quarantined, restarting a remote one).
//! Every mutating call, refused ones included, is written to the audit log.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::auth::{Principal, authenticate};
use super::error::ApiError;
use super::{Control, InstanceReport};
use crate::config::{ApiToken, Role};
use crate::store::{AuditEntry, Store};

/// What the handlers share.
#[derive(Clone)]
pub struct ApiState {
    pub control: Arc<dyn Control>,
    pub store: Option<Arc<dyn Store>>,
    pub tokens: Arc<Vec<ApiToken>>,
}

pub fn router(state: ApiState) -> Router {
    Router::new()
        .route("/api/v1/health/instances", get(list))
        .route("/api/v1/health/instances/{id}", get(detail))
        .route("/api/v1/health/instances/{id}/restart", post(restart))
        .route("/api/v1/health/instances/{id}/quarantine", post(quarantine))
        .route("/api/v1/health/instances/{id}/release", post(release))
        .route("/api/v1/audit", get(audit))
        .fallback(|| async { ApiError::not_found("no such API route; see docs/api.md") })
        .method_not_allowed_fallback(|| async { ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "method not allowed on this route") })
        .with_state(state)
}

/// Serves the API on `listen` until `shutdown`.
pub async fn serve(listen: SocketAddr, state: ApiState, shutdown: CancellationToken) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let address = listener.local_addr()?;
    if state.tokens.is_empty() {
        tracing::warn!(%address, "control API without tokens: anyone who can connect to this loopback address is an operator (add [[api.tokens]] to require tokens)");
    } else {
        tracing::info!(%address, tokens = state.tokens.len(), "control API listening");
    }
    axum::serve(listener, router(state)).with_graceful_shutdown(shutdown.cancelled_owned()).await
}

async fn list(State(s): State<ApiState>, headers: HeaderMap) -> Result<Json<Value>, ApiError> {
    authenticate(&headers, &s.tokens)?;
    Ok(Json(json!({"instances": s.control.instances()})))
}

async fn detail(State(s): State<ApiState>, headers: HeaderMap, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    authenticate(&headers, &s.tokens)?;
    let d = s.control.instance(&id).await?;
    Ok(Json(serde_json::to_value(d).map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?))
}

#[derive(Debug, Default, Deserialize)]
struct QuarantineBody {
    reason: Option<String>,
}

async fn restart(State(s): State<ApiState>, headers: HeaderMap, Path(id): Path<String>) -> Result<Json<InstanceReport>, ApiError> {
    let who = operator(&s, &headers, "restart", &id).await?;
    let r = s.control.restart(&id, &who.name).await;
    finish(&s, &who, "restart", &id, r).await
}

async fn quarantine(State(s): State<ApiState>, headers: HeaderMap, Path(id): Path<String>, body: Option<Json<QuarantineBody>>) -> Result<Json<InstanceReport>, ApiError> {
    let who = operator(&s, &headers, "quarantine", &id).await?;
    let reason = body.and_then(|Json(b)| b.reason);
    let r = s.control.quarantine(&id, &who.name, reason).await;
    finish(&s, &who, "quarantine", &id, r).await
}

async fn release(State(s): State<ApiState>, headers: HeaderMap, Path(id): Path<String>) -> Result<Json<InstanceReport>, ApiError> {
    let who = operator(&s, &headers, "release", &id).await?;
    let r = s.control.release(&id, &who.name).await;
    finish(&s, &who, "release", &id, r).await
}

#[derive(Debug, Deserialize)]
struct AuditQuery {
    limit: Option<usize>,
}

async fn audit(State(s): State<ApiState>, headers: HeaderMap, Query(q): Query<AuditQuery>) -> Result<Json<Value>, ApiError> {
    let who = authenticate(&headers, &s.tokens)?;
    if who.role != Role::Operator {
        return Err(ApiError::forbidden("reading the audit log needs an operator token"));
    }
    let Some(store) = s.store.clone() else {
        return Ok(Json(json!({"entries": []})));
    };
    let limit = q.limit.unwrap_or(100).min(10_000);
    let entries = tokio::task::spawn_blocking(move || store.audit(limit))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    Ok(Json(json!({"entries": entries})))
}

/// Authenticates an operator for a mutating call; a viewer's attempt is
/// refused and audited.
async fn operator(s: &ApiState, headers: &HeaderMap, action: &str, target: &str) -> Result<Principal, ApiError> {
    let who = authenticate(headers, &s.tokens)?;
    if who.role != Role::Operator {
        record(s, &who.name, action, target, "denied: viewer role").await;
        return Err(ApiError::forbidden(format!("{action} needs an operator token; '{}' is a viewer", who.name)));
    }
    Ok(who)
}

async fn finish(
    s: &ApiState,
    who: &Principal,
    action: &str,
    target: &str,
    result: Result<InstanceReport, super::ControlError>,
) -> Result<Json<InstanceReport>, ApiError> {
    let outcome = match &result {
        Ok(_) => "ok".to_owned(),
        Err(e) => format!("error: {e}"),
    };
    record(s, &who.name, action, target, &outcome).await;
    Ok(Json(result?))
}

/// Writes one audit entry before the answer goes out; a failed write is
/// logged and never hides the action's result.
async fn record(s: &ApiState, principal: &str, action: &str, target: &str, outcome: &str) {
    tracing::info!(principal, action, target, outcome, "control API action");
    let Some(store) = s.store.clone() else { return };
    let entry = AuditEntry {
        principal: principal.to_owned(),
        action: action.to_owned(),
        target: target.to_owned(),
        outcome: outcome.to_owned(),
        at: SystemTime::now(),
    };
    match tokio::task::spawn_blocking(move || store.record_audit(&entry)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::error!(error = %e, "could not write the audit log"),
        Err(e) => tracing::error!(error = %e, "could not write the audit log"),
    }
}

#[cfg(test)]
mod tests;
