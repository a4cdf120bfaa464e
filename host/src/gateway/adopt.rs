//! Adopting a session this replica does not have: one another replica
//! opened (behind a load balancer, or after that replica died), or this
//! one before a restart.
//!
//! A sealed id says everything the session *is* (`cluster::session_id`):
//! whose it is, the revision and the client's declared capabilities and
//! info. When a request comes on an id that resolves but whose session
//! rmcp here does not know, [`super::session_ids`] tells [`Adoptions`]
//! what that session is, and rmcp restores it under its own id: it asks
//! its session store ([`Adoptions`] is one, rmcp's `SessionStore`), makes a
//! session worker with that id, and replays the `initialize` handshake
//! with the parameters the store gave, before it serves the request.
//! Nothing is stored for this: the id carries it. The session's handler
//! then restores what the session kept (its log level and subscriptions,
//! from the session book) and tells the client its lists may have changed
//! (`super::session`, on a restored `initialized`).
//!
//! What adoption cannot bring back: calls in flight on the replica that
//! died, its per-session stdio instances and their state, a handshake-era
//! backend's parked MRTR calls, and notifications that replica had not
//! delivered (`docs/cluster.md`).

use std::collections::HashMap;
use std::sync::Mutex;

use rmcp::model::InitializeRequestParams;
use rmcp::transport::streamable_http_server::session::{
    SessionState, SessionStore, SessionStoreError,
};

use crate::cluster::session_id::SessionFacts;

/// The sessions about to be adopted, by rmcp's id, with the handshake to
/// replay for each; rmcp's session store.
#[derive(Default)]
pub struct Adoptions {
    pending: Mutex<HashMap<String, InitializeRequestParams>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A session announced to [`Adoptions`]; forgotten when dropped, whether
/// rmcp took it or not.
pub struct Expected<'a> {
    adoptions: &'a Adoptions,
    local: String,
}

impl Drop for Expected<'_> {
    fn drop(&mut self) {
        lock(&self.adoptions.pending).remove(&self.local);
    }
}

impl Adoptions {
    /// Tells rmcp, for the request about to run, that session `facts.local`
    /// is `facts`'s, should it not know it.
    pub fn expect(&self, facts: &SessionFacts) -> Expected<'_> {
        lock(&self.pending).insert(facts.local.clone(), initialize_params(facts));
        Expected {
            adoptions: self,
            local: facts.local.clone(),
        }
    }
}

/// The `initialize` parameters of the session `facts` describe: its
/// revision, and the capabilities and client info it declared (empty when
/// they did not fit in the id, or do not read as such).
pub fn initialize_params(facts: &SessionFacts) -> InitializeRequestParams {
    let declared = |d: &Option<crate::cluster::session_id::Declared>| d.as_ref().map(|d| d.value());
    let params = |capabilities: Option<serde_json::Value>, client: Option<serde_json::Value>| {
        serde_json::from_value::<InitializeRequestParams>(serde_json::json!({
            "protocolVersion": facts.revision,
            "capabilities": capabilities.unwrap_or_else(|| serde_json::json!({})),
            "clientInfo": client.unwrap_or_else(|| serde_json::json!({"name": "", "version": ""})),
        }))
    };
    params(declared(&facts.capabilities), declared(&facts.client))
        .or_else(|e| {
            tracing::debug!(error = %e, "a sealed session's declared capabilities or client info do not read as such; adopting it without them");
            params(None, None)
        })
        .unwrap_or_else(|_| {
            InitializeRequestParams::new(Default::default(), rmcp::model::Implementation::default())
        })
}

#[async_trait::async_trait]
impl SessionStore for Adoptions {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        Ok(lock(&self.pending)
            .get(session_id)
            .cloned()
            .map(SessionState::new))
    }

    /// Nothing to keep: the sealed id carries it.
    async fn store(&self, _: &str, _: &SessionState) -> Result<(), SessionStoreError> {
        Ok(())
    }

    async fn delete(&self, _: &str) -> Result<(), SessionStoreError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Principal;
    use crate::cluster::session_id::Declared;

    fn facts() -> SessionFacts {
        let mut f = SessionFacts::new(
            "local-1".into(),
            Principal::key("bob").caller(),
            "2025-06-18".into(),
        );
        f.capabilities = Some(Declared::of(
            &serde_json::json!({"roots": {"listChanged": true}}),
        ));
        f.client = Some(Declared::of(
            &serde_json::json!({"name": "inspector", "version": "0.9"}),
        ));
        f
    }

    #[tokio::test]
    async fn an_expected_session_is_loaded_with_its_handshake_until_dropped() {
        let a = Adoptions::default();
        assert!(a.load("local-1").await.unwrap().is_none(), "not expected");
        let expected = a.expect(&facts());
        let state = a.load("local-1").await.unwrap().expect("expected");
        let p = state.initialize_params;
        assert_eq!(p.protocol_version.as_str(), "2025-06-18");
        assert_eq!(p.client_info.name, "inspector");
        assert!(p.capabilities.roots.is_some());
        drop(expected);
        assert!(a.load("local-1").await.unwrap().is_none(), "forgotten");
    }

    #[test]
    fn declared_values_that_do_not_read_are_left_out() {
        let mut f = facts();
        f.client = Some(Declared::of(&serde_json::json!("not an object")));
        let p = initialize_params(&f);
        assert_eq!(p.protocol_version.as_str(), "2025-06-18");
        assert_eq!(p.client_info.name, "");
    }
}
