//! `GET /api/v1/audit/calls`: the audit of MCP calls (viewer role).
//!
//! Query: `principal`, `issuer`, `backend`, `outcome` (`ok`, `error`, `denied`,
//! `rate_limited`, `unavailable`), `since` (RFC 3339, or a duration back
//! from now such as `10m`), `limit` (1..=10000, default 100) and `after`
//! (a row id). Answer: `{"calls": [{"id": ..., "at": ..., "principal": ...,
//! "issuer": ... (OAuth subjects only), "session": ..., "backend": ..., "method": ..., "name": ..., "outcome":
//! ..., "duration_us": ..., "arguments": ...}, ...]}` — the newest first,
//! or with `after` the rows of a larger id, oldest first (how `vigil audit
//! --follow` pages forward). A bad value is a 400 naming the parameter; no
//! store is a 503 naming `[store]`.

use std::time::SystemTime;

use axum::Json;
use axum::extract::Query;
use axum::extract::rejection::QueryRejection;
use serde::Serialize;

use super::ApiError;
use crate::audit::{CallQuery, RawCallQuery, StoredCall};
use crate::store::CallStore;

#[derive(Serialize)]
pub(super) struct Calls {
    calls: Vec<StoredCall>,
}

/// The handler's work, given the router's store.
pub(super) async fn list(
    store: Option<&dyn CallStore>,
    q: Result<Query<RawCallQuery>, QueryRejection>,
) -> Result<Json<Calls>, ApiError> {
    let Query(raw) = q.map_err(|e| {
        ApiError::BadRequest(format!(
            "bad query: {}; use ?principal=&issuer=&backend=&outcome=&since=&limit=&after=",
            e.body_text()
        ))
    })?;
    let q = CallQuery::parse(raw, SystemTime::now()).map_err(ApiError::BadRequest)?;
    let store = store.ok_or_else(|| {
        ApiError::Unavailable(
            "no call audit: the gateway runs without its state store ([store] optional = true, and the store could not be opened; see the gateway's log for why)".into(),
        )
    })?;
    let calls = store
        .query(&q)
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .logged("call audit");
    Ok(Json(Calls { calls }))
}
