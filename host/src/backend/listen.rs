//! A 2026-07-28 backend's change notifications, taken through
//! `subscriptions/listen` (that revision has no standing GET stream and no
//! session to push `list_changed` on).
//!
//! One subscription per connection for the lists the backend can change,
//! and one per resource a client watches (see `gateway::resource_watch`).
//! When one ends abruptly (the backend restarted, the stream broke) it is
//! opened again after a pause, and what it covers is announced as changed
//! once it is back: a change made while nobody listened has no
//! notification.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{ServerNotification, SubscriptionFilter};
use rmcp::service::{Peer, RoleClient, Subscription, SubscriptionEnd};

use super::client::{Downstream, ListKind};
use super::http_ping::SessionTarget;
use super::tap::Relay;

/// Pause before listening again after a subscription ended.
const RELISTEN: Duration = Duration::from_secs(1);

/// What the listener reports to and where.
pub struct Listener {
    pub backend: Arc<str>,
    pub peer: Peer<RoleClient>,
    pub downstream: Arc<dyn Downstream>,
    /// Ends the listener with the connection.
    pub relay: Relay,
    /// HTTP backends: told when the subscription's stream broke (worth a
    /// probe now), as for a handshake session's GET stream.
    pub target: Option<Arc<SessionTarget>>,
    /// The client session a per-session connection belongs to.
    pub session: Option<u64>,
}

impl Listener {
    /// Listens until the connection ends; `first` is a subscription already
    /// open for `filter` (its acknowledgment checked by the caller).
    pub async fn run(self, filter: SubscriptionFilter, first: Option<Subscription>) {
        tokio::select! {
            _ = self.relay.transport_ended() => {}
            _ = self.listen(filter, first) => {}
        }
    }

    async fn listen(&self, filter: SubscriptionFilter, mut first: Option<Subscription>) {
        let mut again = false;
        loop {
            let opened = match first.take() {
                Some(sub) => Ok(sub),
                None => self.peer.listen(filter.clone()).await,
            };
            let mut sub = match opened {
                Ok(sub) => sub,
                Err(e) => {
                    // Not offered, or the backend is down: the poller and
                    // the probes still cover it.
                    tracing::debug!(backend = %self.backend, error = %e, "subscriptions/listen refused");
                    if self.peer.is_transport_closed() {
                        return;
                    }
                    if again {
                        tokio::time::sleep(RELISTEN).await;
                        continue;
                    }
                    return;
                }
            };
            tracing::debug!(backend = %self.backend, accepted = ?sub.acknowledged(), "listening for backend changes");
            if again {
                self.missed(&filter);
            }
            loop {
                match sub.next().await {
                    Ok(Some(n)) => self.notified(n),
                    Ok(None) => break,
                    Err(e) => {
                        tracing::debug!(backend = %self.backend, error = %e, "subscription failed");
                        break;
                    }
                }
            }
            if !matches!(sub.end(), Some(SubscriptionEnd::Graceful(_)))
                && let Some(target) = &self.target
            {
                target.stream_broken();
            }
            if self.peer.is_transport_closed() {
                return;
            }
            again = true;
            tokio::time::sleep(RELISTEN).await;
        }
    }

    /// Announces everything `filter` covers as changed.
    fn missed(&self, filter: &SubscriptionFilter) {
        let lists = [
            (filter.tools_list_changed, ListKind::Tools),
            (filter.resources_list_changed, ListKind::Resources),
            (filter.prompts_list_changed, ListKind::Prompts),
        ];
        for (_, kind) in lists.into_iter().filter(|(on, _)| *on == Some(true)) {
            self.downstream.list_changed(&self.backend, kind);
        }
        for uri in filter.resource_subscriptions.iter().flatten() {
            self.downstream
                .resource_updated(&self.backend, self.session, uri.clone());
        }
    }

    fn notified(&self, n: ServerNotification) {
        let kind = match n {
            ServerNotification::ToolListChangedNotification(_) => ListKind::Tools,
            ServerNotification::ResourceListChangedNotification(_) => ListKind::Resources,
            ServerNotification::PromptListChangedNotification(_) => ListKind::Prompts,
            ServerNotification::ResourceUpdatedNotification(u) => {
                self.downstream
                    .resource_updated(&self.backend, self.session, u.params.uri);
                return;
            }
            other => {
                tracing::trace!(backend = %self.backend, notification = ?other, "unrequested notification on the subscription");
                return;
            }
        };
        self.downstream.list_changed(&self.backend, kind);
    }
}

/// The lists a backend's capabilities say can change.
pub fn filter(caps: &rmcp::model::ServerCapabilities) -> Option<SubscriptionFilter> {
    let changes = |c: Option<bool>| c.filter(|on| *on);
    let mut f = SubscriptionFilter::new();
    f.tools_list_changed = changes(caps.tools.as_ref().and_then(|t| t.list_changed));
    f.resources_list_changed = changes(caps.resources.as_ref().and_then(|r| r.list_changed));
    f.prompts_list_changed = changes(caps.prompts.as_ref().and_then(|p| p.list_changed));
    let any = f.tools_list_changed.is_some()
        || f.resources_list_changed.is_some()
        || f.prompts_list_changed.is_some();
    any.then_some(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(v: serde_json::Value) -> rmcp::model::ServerCapabilities {
        serde_json::from_value(v).expect("capabilities parse")
    }

    #[test]
    fn listens_only_for_lists_the_backend_says_can_change() {
        let f = filter(&caps(serde_json::json!({
            "tools": {"listChanged": true},
            "resources": {"listChanged": false},
            "prompts": {}
        })))
        .expect("tools can change");
        assert_eq!(f.tools_list_changed, Some(true));
        assert_eq!(f.resources_list_changed, None);
        assert_eq!(f.prompts_list_changed, None);
        assert!(filter(&caps(serde_json::json!({"tools": {}}))).is_none());
    }
}
