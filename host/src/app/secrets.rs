//! Which secrets are masked, and what the operator is told about the
//! policies in force: at start and after each reload.

use std::sync::Arc;

use super::App;
use crate::backend::Backend;
use crate::config::{Config, PolicyConfig};

impl App {
    /// Makes the secrets of the current backend set (and the API tokens
    /// and keys) the ones masked everywhere, and warns about credentials
    /// too short to be masked. `retiring`: backends a reload replaced or
    /// removed, whose secrets stay masked while they shut down (their
    /// last stderr lines and logs come after the swap). Built once per
    /// backend set: it reads every backend's config.
    pub(super) fn refresh_secrets(&self, retiring: &[Arc<Backend>]) {
        use crate::redact::configured;
        let set = self.front.backends();
        let current = set.iter().map(|b| &b.config);
        // The tokens in force: a reload may have rotated them.
        let tokens = self.api_tokens.current();
        let keys = self.front.mcp_keys().current();
        for warning in configured::too_short(&tokens, &keys, current.clone()) {
            tracing::warn!("{warning}");
        }
        let all = current.chain(retiring.iter().map(|b| &b.config));
        let keys = configured::auth_secrets(&keys, self.config().auth.oauth.as_ref());
        self.front
            .redactor()
            .replace(configured::secrets(&tokens, &keys, all));
    }
}

/// Says what `policies` let callers do: at start, and after a reload
/// that changed them.
pub(super) fn log_policies(config: &Config, policies: &[PolicyConfig]) {
    if policies.is_empty() {
        if config.auth.required() {
            tracing::info!(
                "no [[policy]]: every authenticated principal may list and call every tool, resource and prompt"
            );
        }
        return;
    }
    for (i, p) in policies.iter().enumerate() {
        tracing::info!(
            policy = i,
            principals = ?p.principals,
            allow = ?p.allow,
            deny = ?p.deny,
            rate = p.rate.map(|r| r.to_string()),
            rate_per_tool = p.rate_per_tool.map(|r| r.to_string()),
            "[[policy]] in force (the first entry naming a caller decides; callers no entry names may use nothing)"
        );
    }
}
