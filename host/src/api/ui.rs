//! The dashboard: one page and its script and style, compiled into the
//! binary (no CDN, no build step). They hold no data and are served
//! without a token; the page asks for one and then reads
//! `GET /api/v1/events` and acts through the API like any client.

use axum::Router;
use axum::http::header;
use axum::response::{IntoResponse, Redirect};
use axum::routing::get;

const INDEX: &str = include_str!("ui/index.html");
const SCRIPT: &str = include_str!("ui/app.js");
const STYLE: &str = include_str!("ui/app.css");

/// Only this origin's script, style and API; no inline code, no frames.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

pub(super) fn router() -> Router {
    Router::new()
        .route("/", get(|| async { Redirect::temporary("/ui") }))
        .route("/ui", get(|| asset("text/html; charset=utf-8", INDEX)))
        .route("/ui/", get(|| async { Redirect::permanent("/ui") }))
        .route(
            "/ui/app.js",
            get(|| asset("text/javascript; charset=utf-8", SCRIPT)),
        )
        .route(
            "/ui/app.css",
            get(|| asset("text/css; charset=utf-8", STYLE)),
        )
}

async fn asset(kind: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CONTENT_SECURITY_POLICY, POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
}
