//! OAuth 2.0 Protected Resource Metadata (RFC 9728) for `/mcp`: what an
//! MCP client reads after a 401 to learn which authorization servers
//! issue tokens for Vigil, for which resource, with which scopes.
//!
//! Served at the path RFC 9728 §3.1 derives from `resource`
//! (`/.well-known/oauth-protected-resource/mcp` for `…/mcp`) and at the
//! bare well-known path, which clients try when the challenge names
//! none. Public by design: no credentials, any origin.

use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::config::OAuthConfig;

const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// The metadata document of `config`.
pub fn document(config: &OAuthConfig) -> serde_json::Value {
    serde_json::json!({
        "resource": config.resource,
        "authorization_servers": config.issuers,
        "scopes_supported": config.required_scopes,
        "bearer_methods_supported": ["header"],
        "resource_name": "Vigil MCP gateway",
    })
}

/// The metadata routes for `config`.
pub fn routes(config: &OAuthConfig) -> Router {
    let body: Arc<str> = document(config).to_string().into();
    let serve = move || {
        let body = body.clone();
        async move { json(&body) }
    };
    let suffixed = url::Url::parse(&config.resource)
        .map(|u| u.path().trim_end_matches('/').to_owned())
        .unwrap_or_default();
    let mut router = Router::new().route(WELL_KNOWN, get(serve.clone()));
    if !suffixed.is_empty() {
        router = router.route(&format!("{WELL_KNOWN}{suffixed}"), get(serve));
    }
    router
}

fn json(body: &str) -> Response {
    let mut r = body.to_owned().into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("max-age=300"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_has_what_rfc_9728_and_the_mcp_spec_ask_for() {
        let c = OAuthConfig::example();
        let d = document(&c);
        assert_eq!(d["resource"], "http://127.0.0.1:8080/mcp");
        assert_eq!(d["authorization_servers"][0], "http://127.0.0.1:9000");
        assert_eq!(d["scopes_supported"][0], "mcp");
        assert_eq!(d["bearer_methods_supported"][0], "header");
    }
}
