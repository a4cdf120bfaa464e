//! What the raw path needs to know of each client session, found by its
//! `Mcp-Session-Id` without entering rmcp: whose session it is, whether its
//! calls may take the raw path, and its raw calls in flight (so that a
//! `notifications/cancelled` for one reaches the backend).
//!
//! A session is entered when its client finished the handshake
//! (`notifications/initialized`) and leaves when its handler is dropped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use rmcp::model::ClientCapabilities;
use tokio_util::sync::CancellationToken;

use super::links::Links;

/// One client session, as the raw path sees it.
pub struct Front {
    /// Whether nothing per session can flow on its calls: the client
    /// declared no sampling, elicitation or roots, and has not set a log
    /// level. Cleared for good by `logging/setLevel`.
    raw: AtomicBool,
    /// Raw calls in flight, by the client's request id as written.
    inflight: Mutex<HashMap<String, CancellationToken>>,
    /// The session's resource links (its `FrontSession`'s, shared).
    links: Arc<Links>,
    /// Its id's tag ([`crate::redact::session_tag`]), as the audit records
    /// its calls: hashed once, not on every call.
    tag: Box<str>,
}

impl Front {
    fn new(id: &str, capabilities: Option<&ClientCapabilities>, links: Arc<Links>) -> Self {
        let plain = capabilities
            .is_some_and(|c| c.sampling.is_none() && c.elicitation.is_none() && c.roots.is_none());
        Self {
            raw: AtomicBool::new(plain),
            inflight: Mutex::default(),
            links,
            tag: crate::redact::session_tag(id).into(),
        }
    }

    /// The session's tag, as the audit names it.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// The resources this session's calls linked to (see `links.rs`).
    pub fn links(&self) -> &Arc<Links> {
        &self.links
    }

    /// Whether this session's calls may take the raw path.
    pub fn raw(&self) -> bool {
        self.raw.load(Ordering::Acquire)
    }

    /// The client set a log level: what reaches it is filtered per session
    /// from now on, which only its own backend sessions do.
    pub fn set_log_level(&self) {
        self.raw.store(false, Ordering::Release);
    }

    fn calls(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancellationToken>> {
        self.inflight.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes a raw call in flight under the client's id `id`; it is
    /// forgotten when the guard drops. The token fires if the client
    /// cancels it.
    pub fn start(self: &Arc<Self>, id: &str) -> InFlight {
        let cancel = CancellationToken::new();
        self.calls().insert(id.to_owned(), cancel.clone());
        InFlight {
            front: self.clone(),
            id: id.to_owned(),
            cancel,
        }
    }

    /// Cancels the raw call the client knows as `id`; `false` if none runs.
    pub fn cancel(&self, id: &str) -> bool {
        match self.calls().get(id) {
            Some(c) => {
                c.cancel();
                true
            }
            None => false,
        }
    }

    /// Whether any raw call is in flight (a cheap test before reading a
    /// cancellation).
    pub fn busy(&self) -> bool {
        !self.calls().is_empty()
    }
}

/// A raw call in flight (see [`Front::start`]).
pub struct InFlight {
    front: Arc<Front>,
    id: String,
    pub cancel: CancellationToken,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.front.calls().remove(&self.id);
    }
}

/// Every session that finished its handshake, by `Mcp-Session-Id`.
#[derive(Default)]
pub struct Fronts {
    by_id: RwLock<HashMap<Arc<str>, Arc<Front>>>,
}

impl Fronts {
    /// Enters the session its client knows as `id`, whose client declared
    /// `capabilities`; `links` are the session's (see `links.rs`).
    pub fn enter(
        &self,
        id: &str,
        capabilities: Option<&ClientCapabilities>,
        links: Arc<Links>,
    ) -> Arc<Front> {
        let front = Arc::new(Front::new(id, capabilities, links));
        self.by_id
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.into(), front.clone());
        front
    }

    pub fn get(&self, id: &str) -> Option<Arc<Front>> {
        self.by_id
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
    }

    pub fn leave(&self, id: &str) {
        self.by_id
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(json: serde_json::Value) -> ClientCapabilities {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn only_clients_that_declared_nothing_per_session_go_raw() {
        assert!(Front::new("s1", Some(&caps(serde_json::json!({}))), Arc::default()).raw());
        for declared in [
            serde_json::json!({"sampling": {}}),
            serde_json::json!({"elicitation": {}}),
            serde_json::json!({"roots": {"listChanged": true}}),
        ] {
            assert!(
                !Front::new("s1", Some(&caps(declared.clone())), Arc::default()).raw(),
                "{declared}"
            );
        }
        assert!(
            !Front::new("s1", None, Arc::default()).raw(),
            "no handshake seen"
        );
        let f = Front::new("s1", Some(&caps(serde_json::json!({}))), Arc::default());
        f.set_log_level();
        assert!(!f.raw(), "a log level is per session");
    }

    #[test]
    fn a_cancellation_reaches_the_call_in_flight_until_it_ends() {
        let fronts = Fronts::default();
        let f = fronts.enter("s1", Some(&caps(serde_json::json!({}))), Arc::default());
        assert!(Arc::ptr_eq(&fronts.get("s1").unwrap(), &f));
        assert_eq!(f.tag(), crate::redact::session_tag("s1"));
        let call = f.start("7");
        assert!(f.busy());
        assert!(!f.cancel("8"));
        assert!(f.cancel("7"));
        assert!(call.cancel.is_cancelled());
        drop(call);
        assert!(!f.busy() && !f.cancel("7"));
        fronts.leave("s1");
        assert!(fronts.get("s1").is_none());
    }
}
