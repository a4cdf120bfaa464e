//! Where backend traffic that answers no request goes: list changes to
//! the update task (as asks to list again), log messages and resource
//! updates to the sessions they are for.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::sessions::Sessions;
use crate::backend::{Downstream, ListKind};
use crate::redact::Redactor;

/// Relays backend traffic that is not an answer to a request.
pub(super) struct Fanout {
    pub(super) sessions: Arc<Sessions>,
    pub(super) refresh: mpsc::UnboundedSender<Arc<str>>,
    /// A backend's log messages are its log lines: masked like Vigil's.
    pub(super) redactor: Redactor,
}

impl Downstream for Fanout {
    fn list_changed(&self, backend: &Arc<str>, _kind: ListKind) {
        let _ = self.refresh.send(backend.clone());
    }
    fn log(
        &self,
        _backend: &Arc<str>,
        session: Option<u64>,
        mut params: rmcp::model::LoggingMessageNotificationParam,
    ) {
        self.redactor.mask_json(&mut params.data);
        self.sessions.log(session, params)
    }
    fn resource_updated(&self, _backend: &Arc<str>, session: Option<u64>, uri: String) {
        self.sessions.resource_updated(session, uri);
    }
    fn lane_log(
        &self,
        _backend: &Arc<str>,
        principal: &crate::auth::CallerKey,
        mut params: rmcp::model::LoggingMessageNotificationParam,
    ) {
        self.redactor.mask_json(&mut params.data);
        self.sessions.lane_log(principal, params)
    }
    fn variant_listed(&self, _backend: &Arc<str>) {
        self.sessions.resync_all();
    }
    fn lane_listed(&self, _backend: &Arc<str>, caller: &crate::auth::CallerKey) {
        self.sessions.lane_listed(caller);
    }
    fn caller_log(
        &self,
        _backend: &Arc<str>,
        caller: &crate::auth::CallerKey,
        mut params: rmcp::model::LoggingMessageNotificationParam,
    ) {
        self.redactor.mask_json(&mut params.data);
        self.sessions.caller_log(caller, params)
    }
    fn caller_resource_updated(
        &self,
        _backend: &Arc<str>,
        caller: &crate::auth::CallerKey,
        uri: String,
    ) {
        self.sessions.caller_resource_updated(caller, uri);
    }
}
