//! The control API's routes, handlers and listener.
//!
//! | route | role | answer |
//! |---|---|---|
//! | `GET /api/v1/health/instances` | viewer | `{"instances": [InstanceReport, ...], "warnings": [...]}` (warnings only when some) |
//! | `GET /api/v1/health/instances/{id}` | viewer | `InstanceDetail` (report + transitions + last exit) |
//! | `POST /api/v1/health/instances/{id}/restart` | operator | the updated `InstanceReport` |
//! | `POST /api/v1/health/instances/{id}/quarantine` | operator | same; optional body `{"reason": "..."}` |
//! | `POST /api/v1/health/instances/{id}/release` | operator | same |
//! | `GET /api/v1/audit?limit=N` | operator | `{"entries": [AuditEntry, ...]}`, oldest first (N ≤ 1000, default 100) |
//! | `GET /api/v1/audit/calls?principal=&backend=&outcome=&since=&limit=&after=` | viewer | `{"calls": [StoredCall, ...]}` (see [`super::calls`]) |
//! | `GET /api/v1/plugins` | viewer | `{"dir": ..., "plugins": [PluginInfo, ...]}` |
//! | `GET /api/v1/events` | viewer | server-sent events: a `hello` snapshot, then changes (see [`super::events`]) |
//! | `GET /metrics` | viewer | Prometheus text format (see [`super::metrics`]) |
//! | `GET /ui`, `/ui/*` | none | the dashboard's page and assets (no data; the page calls the API with a token) |
//!
//! Errors are [`ApiError`]s: 400 bad query or body, 401 no or unknown token
//! (with `WWW-Authenticate: Bearer`; unknown paths too, so they reveal
//! nothing), 403 role too weak or a request a web page could have made
//! (see [`super::guard`]), 404 unknown backend or path, 405 wrong method,
//! 409 the action does not apply now (releasing a backend that is not
//! quarantined, restarting a remote one), 429 too many unknown tokens from
//! the caller's address (with `Retry-After`; see [`super::throttle`]), 500
//! internal (detail only in the log), 503 audit log asked for while running
//! without a store.
//!
//! Every restart, quarantine and release — carried out, failed, or refused
//! to a viewer — leaves one audit entry with the caller's token name (or
//! `local`). The action and its audit entry run in their own task, so a
//! client hanging up cannot cancel an action half-way or lose its entry.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{Method, StatusCode, Uri};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::auth::{self, Auth, Principal, Tokens};
use super::guard::Guard;
use super::{ApiError, Control, ControlError, InstanceDetail, InstanceReport, PinsReport};
use crate::auth::throttle::Throttle;
use crate::catalog::digest::Digest;
use crate::config::{ApiConfig, FailedTokens};
use crate::rollout::UpdateRecord;
use crate::store::{ActionLog, AuditEntry, Stores};

/// Audit entries returned when `limit` is not given.
const DEFAULT_AUDIT_LIMIT: usize = 100;
/// The most audit entries one request may ask for.
const MAX_AUDIT_LIMIT: usize = 1000;
/// The longest quarantine reason accepted, in characters.
const MAX_REASON_CHARS: usize = 500;

/// What the control API needs.
#[derive(Clone)]
pub struct ApiState {
    /// The health monitor, read and acted through.
    pub control: Arc<dyn Control>,
    /// Where audit entries go (`actions`) and the call audit is read from
    /// (`calls`). Without a store (it failed to open) actions still work
    /// and are logged, and `GET /api/v1/audit` and `/audit/calls` answer
    /// 503.
    pub store: Option<Stores>,
    /// `[[api.tokens]]`, live (a config reload replaces them); empty means
    /// unauthenticated loopback mode, where every caller is the operator
    /// `local`.
    pub tokens: Arc<Tokens>,
    /// `[api] allowed_hosts`: the `Host` names served (see `guard.rs`).
    pub allowed_hosts: Vec<String>,
    /// `[api] allowed_origins`: `Origin`s allowed besides the API's own.
    pub allowed_origins: Vec<String>,
    /// `[api] failed_token_*`: the cool-down after repeated unknown tokens.
    pub failed_tokens: FailedTokens,
    /// `[limits] api_connections` and the listener timeouts.
    pub limits: crate::config::ListenerLimits,
    /// The connections the listener holds: `api_connections`, fitted to
    /// the open-file limit (see [`crate::limits::ConnectionCaps`]).
    pub cap: crate::limits::Cap,
    /// `[auth.oauth]`'s validator, for `[api] roles`.
    pub oauth: Option<Arc<crate::auth::oauth::OAuth>>,
    /// `[api] roles`: roles of OAuth principals.
    pub roles: crate::config::ApiRoles,
}

// === impl ApiState ===

impl ApiState {
    /// The API of `control` configured by `api`, with `tokens` (the live
    /// set, shared with whoever reloads the config).
    pub fn new(
        control: Arc<dyn Control>,
        store: Option<Stores>,
        api: &ApiConfig,
        tokens: Arc<Tokens>,
    ) -> Self {
        ApiState {
            control,
            store,
            tokens,
            allowed_hosts: api.allowed_hosts.clone(),
            allowed_origins: api.allowed_origins.clone(),
            failed_tokens: api.failed_tokens,
            limits: crate::config::LimitsConfig::default().api,
            cap: crate::limits::Cap::configured(
                crate::config::LimitsConfig::default().api.connections,
            ),
            oauth: None,
            roles: api.roles.clone(),
        }
    }

    /// Accepting `[auth.oauth]` tokens with `[api] roles`.
    pub fn with_oauth(mut self, oauth: Option<Arc<crate::auth::oauth::OAuth>>) -> Self {
        self.oauth = oauth;
        self
    }

    /// With the listener bounds of `[limits]` (the defaults otherwise).
    pub fn with_limits(mut self, limits: crate::config::ListenerLimits) -> Self {
        self.limits = limits;
        self.cap = crate::limits::Cap::configured(limits.connections);
        self
    }

    /// Holding at most `cap` connections (`api_connections` fitted to the
    /// open-file limit; as configured otherwise).
    pub fn with_cap(mut self, cap: crate::limits::Cap) -> Self {
        self.cap = cap;
        self
    }
}

/// What handlers share.
struct Shared {
    control: Arc<dyn Control>,
    store: Option<Stores>,
    events: Arc<super::events::Hub>,
}

type St = State<Arc<Shared>>;

/// The control API as a `Router`: every route (and the 404/405 answers)
/// behind the [`guard`](super::guard) against web pages, and all but the
/// dashboard's assets behind token authentication.
pub fn router(state: ApiState) -> Router {
    build(state, CancellationToken::new())
}

/// [`router`], whose event streams end when `closing` fires.
fn build(state: ApiState, closing: CancellationToken) -> Router {
    let metrics = Arc::new(super::metrics::registry(state.control.clone()));
    let guard = Arc::new(Guard::new(&state.allowed_hosts, &state.allowed_origins));
    let auth = Arc::new(Auth {
        tokens: state.tokens,
        throttle: Throttle::new(state.failed_tokens, "control API"),
        oauth: state.oauth.filter(|_| !state.roles.is_empty()),
        roles: state.roles,
    });
    let shared = Arc::new(Shared {
        events: super::events::Hub::new(state.control.clone(), closing),
        control: state.control,
        store: state.store,
    });
    let authenticated = Router::new()
        .route("/api/v1/health/instances", get(list))
        .route("/api/v1/health/instances/{id}", get(detail))
        .route("/api/v1/health/instances/{id}/restart", post(restart))
        .route("/api/v1/health/instances/{id}/quarantine", post(quarantine))
        .route("/api/v1/health/instances/{id}/release", post(release))
        .route("/api/v1/health/instances/{id}/pins", get(pins))
        .route("/api/v1/health/instances/{id}/approve", post(approve))
        .route(
            "/api/v1/health/instances/{id}/update",
            get(last_update).post(update),
        )
        .route(
            "/api/v1/health/instances/{id}/update/approve",
            post(approve_update),
        )
        .route(
            "/api/v1/health/instances/{id}/update/abort",
            post(abort_update),
        )
        .route("/api/v1/search", get(search))
        .route("/api/v1/audit", get(audit))
        .route("/api/v1/audit/calls", get(calls))
        .route("/api/v1/plugins", get(plugins))
        .route("/api/v1/events", get(events))
        .route("/metrics", get(super::metrics::scrape).with_state(metrics))
        .fallback(not_found)
        // After the routes: it only reaches routes that exist when called.
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            auth,
            auth::authenticate,
        ))
        .with_state(shared);
    // The dashboard's page and assets hold no data: a browser loads them
    // without a token, and the page then calls the API with one. The
    // guard covers them too: a rebound name gets nothing from this port.
    super::ui::router()
        .merge(authenticated)
        .layer(axum::middleware::from_fn_with_state(
            guard,
            super::guard::guard,
        ))
}

/// Binds `listen` and serves the control API until `shutdown` fires.
///
/// # Errors
///
/// The address cannot be bound (the message names it), or see
/// [`serve_on`].
pub async fn serve(
    listen: SocketAddr,
    state: ApiState,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let listener = TcpListener::bind(listen).await.map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("control API: cannot listen on {listen}: {e}"),
        )
    })?;
    serve_on(listener, state, shutdown).await
}

/// Serves the control API on a bound listener until `shutdown` fires.
///
/// Logs once where it listens and, without tokens, that every caller is
/// the operator `local`.
///
/// # Errors
///
/// Refuses to serve without tokens on a non-loopback address (config
/// validation already forbids it; this is the last line), and returns the
/// server's I/O errors.
pub async fn serve_on(
    listener: TcpListener,
    state: ApiState,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let address = listener.local_addr()?;
    let tokens = state.tokens.current();
    if tokens.is_empty() && (state.roles.is_empty() || state.oauth.is_none()) {
        if !address.ip().is_loopback() {
            return Err(std::io::Error::other(format!(
                "control API: refusing to serve on {address} without [[api.tokens]]: anyone who can connect would be an operator"
            )));
        }
        tracing::warn!(%address, "control API is unauthenticated (no [[api.tokens]]): every caller on loopback acts as operator `local`");
    } else {
        tracing::info!(%address, tokens = tokens.len(), "serving the control API");
    }
    let limits = crate::config::ListenerLimits {
        connections: state.cap.connections,
        ..state.limits
    };
    let refusal = serde_json::json!({
        "error": format!(
            "the control API is at its connection limit ({}): retry in a moment, or raise the limit",
            state.cap.describe("api_connections")
        ),
    });
    // The listener gives every request its peer address (`ConnectInfo`),
    // which keys the failed-token cool-down (see `throttle.rs`).
    let listener_ = crate::listener::Listener {
        name: "api",
        limits,
        refusal: ("application/json", refusal.to_string()),
    };
    listener_
        .serve(listener, build(state, shutdown.clone()), shutdown)
        .await
}

// === read handlers ===

#[derive(Serialize)]
struct Instances {
    instances: Vec<InstanceReport>,
    /// Present only when there is something to say.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
}

async fn list(State(s): St) -> Json<Instances> {
    Json(Instances {
        instances: s.control.instances(),
        warnings: s.control.warnings(),
    })
}

#[derive(Serialize)]
struct Plugins {
    /// Where plugins are loaded from; `null` when plugins are off.
    dir: Option<String>,
    plugins: Vec<crate::plugins::PluginInfo>,
}

/// `GET /api/v1/plugins`: every plugin file, loaded or refused.
async fn plugins(State(s): St) -> Json<Plugins> {
    let (dir, plugins) = s.control.plugins();
    Json(Plugins { dir, plugins })
}

async fn detail(State(s): St, BackendId(id): BackendId) -> Result<Json<InstanceDetail>, ApiError> {
    Ok(Json(s.control.instance(&id).await?))
}

/// `GET /api/v1/events`: see [`super::events`].
async fn events(
    State(s): St,
    Extension(who): Extension<Principal>,
) -> impl axum::response::IntoResponse {
    s.events.stream(&who).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AuditQuery {
    limit: Option<usize>,
}

#[derive(Serialize)]
struct AuditEntries {
    entries: Vec<AuditEntry>,
}

async fn audit(
    State(s): St,
    Extension(who): Extension<Principal>,
    q: Result<Query<AuditQuery>, QueryRejection>,
) -> Result<Json<AuditEntries>, ApiError> {
    who.require_operator()?;
    let Query(q) =
        q.map_err(|e| ApiError::BadRequest(format!("bad query: {}; use ?limit=N", e.body_text())))?;
    let limit = q.limit.unwrap_or(DEFAULT_AUDIT_LIMIT).min(MAX_AUDIT_LIMIT);
    let store = s.store.as_ref().ok_or_else(|| {
        ApiError::Unavailable(
            "no audit log: the gateway runs without its state store (see its log for why)".into(),
        )
    })?;
    let entries = store
        .actions
        .list(limit)
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .logged("audit log");
    Ok(Json(AuditEntries { entries }))
}

/// `GET /api/v1/search?query=...[&principal=...&limit=N&server=...]`:
/// what `find_tool` would answer, with scores; operators only (it shows
/// what any principal may use).
async fn search(
    State(s): St,
    Extension(who): Extension<Principal>,
    q: Result<Query<super::SearchRequest>, QueryRejection>,
) -> Result<Json<super::SearchReport>, ApiError> {
    who.require_operator()?;
    let Query(q) = q.map_err(|e| {
        ApiError::BadRequest(format!(
            "bad query: {}; use ?query=TEXT[&principal=key:NAME&limit=N&server=NAME]",
            e.body_text()
        ))
    })?;
    Ok(Json(s.control.search(q).await?))
}

/// `GET /api/v1/audit/calls`: see [`super::calls`].
async fn calls(
    State(s): St,
    q: Result<Query<crate::audit::RawCallQuery>, QueryRejection>,
) -> Result<Json<super::calls::Calls>, ApiError> {
    super::calls::list(s.store.as_ref().map(|s| &*s.calls), q).await
}

// === action handlers ===

async fn restart(
    State(s): St,
    Extension(who): Extension<Principal>,
    BackendId(id): BackendId,
) -> Result<Json<Acted>, ApiError> {
    act(s, who, Action::Restart, id).await
}

/// `GET /api/v1/health/instances/{id}/pins`: what the pin guard holds
/// back of a backend.
async fn pins(State(s): St, BackendId(id): BackendId) -> Result<Json<PinsReport>, ApiError> {
    Ok(Json(s.control.pins(&id)?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ApproveBody {
    digests: Vec<Digest>,
}

/// `POST /api/v1/health/instances/{id}/approve` with `{"digests": [...]}`:
/// the digests of the held definitions the operator reviewed.
async fn approve(
    State(s): St,
    Extension(who): Extension<Principal>,
    BackendId(id): BackendId,
    body: Bytes,
) -> Result<Json<Acted>, ApiError> {
    let body: ApproveBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError::BadRequest(format!(
            "bad body: {e}; send {{\"digests\": [\"...\"]}} with the digests GET .../pins shows"
        ))
    })?;
    act(
        s,
        who,
        Action::Approve {
            digests: body.digests,
        },
        id,
    )
    .await
}

/// An update, as the update endpoints answer it.
#[derive(Serialize)]
struct UpdateAnswer {
    update: Option<Box<UpdateRecord>>,
}

/// `GET /api/v1/health/instances/{id}/update`: the update in progress,
/// else the last one (`null`: none).
async fn last_update(
    State(s): St,
    BackendId(id): BackendId,
) -> Result<Json<UpdateAnswer>, ApiError> {
    Ok(Json(UpdateAnswer {
        update: s.control.last_update(&id).await?.map(Box::new),
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateBody {
    image: String,
}

/// `POST /api/v1/health/instances/{id}/update` with `{"image": "..."}`:
/// starts an update of a container backend (202: it goes on after the
/// answer). A command line or environment is never taken here: through
/// the API they would let an operator token run programs as Vigil; they
/// change in the config file.
async fn update(
    State(s): St,
    Extension(who): Extension<Principal>,
    BackendId(id): BackendId,
    body: Bytes,
) -> Result<(StatusCode, Json<Acted>), ApiError> {
    let body: UpdateBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError::BadRequest(format!(
            "bad body: {e}; send {{\"image\": \"localhost/my-mcp:2\"}} (only the image changes through the API; a command line or environment changes in the config file)"
        ))
    })?;
    let acted = act(s, who, Action::Update { image: body.image }, id).await?;
    Ok((StatusCode::ACCEPTED, acted))
}

/// `POST /api/v1/health/instances/{id}/update/approve`: the held update
/// goes on.
async fn approve_update(
    State(s): St,
    Extension(who): Extension<Principal>,
    BackendId(id): BackendId,
) -> Result<Json<Acted>, ApiError> {
    act(s, who, Action::DecideUpdate { approve: true }, id).await
}

/// `POST /api/v1/health/instances/{id}/update/abort`: the update in
/// progress is rolled back.
async fn abort_update(
    State(s): St,
    Extension(who): Extension<Principal>,
    BackendId(id): BackendId,
) -> Result<Json<Acted>, ApiError> {
    act(s, who, Action::DecideUpdate { approve: false }, id).await
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct QuarantineBody {
    reason: Option<String>,
}

/// The body is read as JSON whatever its content type (`curl -d` sends a
/// form type), and may be empty.
async fn quarantine(
    State(s): St,
    Extension(who): Extension<Principal>,
    BackendId(id): BackendId,
    body: Bytes,
) -> Result<Json<Acted>, ApiError> {
    let body: QuarantineBody = if body.iter().all(u8::is_ascii_whitespace) {
        QuarantineBody::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            ApiError::BadRequest(format!(
                "bad body: {e}; send {{\"reason\": \"...\"}} or nothing"
            ))
        })?
    };
    if body
        .reason
        .as_ref()
        .is_some_and(|r| r.chars().count() > MAX_REASON_CHARS)
    {
        return Err(ApiError::BadRequest(format!(
            "reason: at most {MAX_REASON_CHARS} characters"
        )));
    }
    act(
        s,
        who,
        Action::Quarantine {
            reason: body.reason,
        },
        id,
    )
    .await
}

async fn release(
    State(s): St,
    Extension(who): Extension<Principal>,
    BackendId(id): BackendId,
) -> Result<Json<Acted>, ApiError> {
    act(s, who, Action::Release, id).await
}

/// A mutating call on one backend.
enum Action {
    Restart,
    Quarantine { reason: Option<String> },
    Release,
    Approve { digests: Vec<Digest> },
    Update { image: String },
    DecideUpdate { approve: bool },
}

/// What an action answers: the backend's report, or (an approval) its
/// pin guard.
#[derive(Serialize)]
#[serde(untagged)]
enum Acted {
    Report(InstanceReport),
    Pins(PinsReport),
    Update(UpdateAnswer),
}

impl Acted {
    /// What the audit says of it beyond "ok": the definitions approved.
    fn outcome(&self) -> String {
        match self {
            Acted::Report(_) => "ok".to_owned(),
            Acted::Pins(p) => {
                let items: Vec<String> = p
                    .approved
                    .iter()
                    .map(|a| format!("{} {} {}", a.key.kind.as_str(), a.key.name, a.digest))
                    .collect();
                format!("ok: approved {}", items.join(", "))
            }
            Acted::Update(UpdateAnswer { update: Some(u) }) => format!(
                "ok: update {} from {} to {} ({})",
                u.id,
                u.from.label(),
                u.to.label(),
                u.phase.as_str()
            ),
            Acted::Update(UpdateAnswer { update: None }) => "ok".to_owned(),
        }
    }
}

impl Action {
    fn name(&self) -> &'static str {
        match self {
            Action::Restart => "restart",
            Action::Quarantine { .. } => "quarantine",
            Action::Release => "release",
            Action::Approve { .. } => "approve",
            Action::Update { .. } => "update",
            Action::DecideUpdate { approve: true } => "approve_update",
            Action::DecideUpdate { approve: false } => "abort_update",
        }
    }

    async fn run(
        self,
        control: &dyn Control,
        target: &str,
        principal: &str,
    ) -> Result<Acted, ControlError> {
        Ok(match self {
            Action::Restart => Acted::Report(control.restart(target, principal).await?),
            Action::Quarantine { reason } => {
                Acted::Report(control.quarantine(target, principal, reason).await?)
            }
            Action::Release => Acted::Report(control.release(target, principal).await?),
            Action::Approve { digests } => {
                Acted::Pins(control.approve(target, principal, digests).await?)
            }
            Action::Update { image } => Acted::Update(UpdateAnswer {
                update: Some(Box::new(control.update(target, principal, image).await?)),
            }),
            Action::DecideUpdate { approve } => Acted::Update(UpdateAnswer {
                update: Some(Box::new(
                    control.decide_update(target, principal, approve).await?,
                )),
            }),
        })
    }
}

/// Checks the role, carries out `action` on `target`, and audits the
/// outcome — `ok`, `denied: viewer role` or `error: ...` — whatever it is.
async fn act(
    s: Arc<Shared>,
    who: Principal,
    action: Action,
    target: String,
) -> Result<Json<Acted>, ApiError> {
    let task = crate::background::spawn(async move {
        let name = action.name();
        let result = match who.require_operator() {
            Err(denied) => Err((denied, "denied: viewer role".to_owned())),
            Ok(()) => action
                .run(&*s.control, &target, &who.name)
                .await
                .map_err(|e| {
                    let outcome = format!("error: {e}");
                    (ApiError::from(e), outcome)
                }),
        };
        let outcome = match &result {
            Ok(acted) => acted.outcome(),
            Err((_, outcome)) => outcome.clone(),
        };
        tracing::info!(principal = %who.name, action = name, %target, %outcome, "control action");
        if let Some(store) = &s.store {
            let entry = AuditEntry {
                principal: who.name,
                action: name.to_owned(),
                target,
                outcome,
                at: SystemTime::now(),
            };
            record_audit(&*store.actions, entry).await;
        }
        result.map(Json).map_err(|(e, _)| e)
    });
    task.await
        .map_err(|e| ApiError::Internal(format!("control action task: {e}")))?
}

/// Writes `entry`; a failure is logged and otherwise ignored, so it never
/// hides the action's result.
async fn record_audit(store: &dyn ActionLog, entry: AuditEntry) {
    let (principal, action, target) = (
        entry.principal.clone(),
        entry.action.clone(),
        entry.target.clone(),
    );
    if let Err(e) = store.record(entry).await {
        tracing::error!(%principal, %action, %target, kind = %e.kind(), error = %e, "audit entry not recorded");
    }
}

// === extractors and fallbacks ===

/// The `{id}` path segment: a backend name.
struct BackendId(String);

impl<S: Send + Sync> FromRequestParts<S> for BackendId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(id) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| {
                ApiError::BadRequest(format!("bad backend name in path: {}", e.body_text()))
            })?;
        Ok(BackendId(id))
    }
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::NotFound(format!("no API route at {}", uri.path()))
}

async fn method_not_allowed(method: Method) -> ApiError {
    ApiError::MethodNotAllowed(method.to_string())
}
