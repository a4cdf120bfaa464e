//! The process's instrumented metrics: counters and histograms that the
//! code paths doing the work update as they go (tool calls, probes, plugin
//! calls, fan-outs, the poller). One process-wide set, like a logger: the
//! paths that count are many and deep, and threading a handle through each
//! would couple them all to the API that exports them.
//!
//! What can be read off current state at scrape time (each backend's state
//! and restart count, live sessions, plugin totals) is not here: the
//! control API's `/metrics` reads it from its owners then (see
//! `api/metrics.rs`), so there is no second copy to drift.

use std::sync::OnceLock;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// A backend's label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BackendLabel {
    pub backend: String,
}

/// A plugin's label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabel {
    pub plugin: String,
}

/// A listener's label (`mcp` or `api`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabel {
    pub listener: String,
}

/// A connection the listener cut off, and why (the `[limits]` key).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CutLabel {
    pub listener: String,
    pub reason: String,
}

/// A caller of `/mcp` (`key:NAME`, `sub:SUBJECT`, `local`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PrincipalLabel {
    pub principal: String,
}

/// An update's labels: its backend and how it ended (`succeeded`,
/// `rolled_back`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpdateLabel {
    pub backend: String,
    pub outcome: String,
}

/// A health transition's labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TransitionLabel {
    pub backend: String,
    pub to: String,
}

/// Why call-audit records were not stored (`queue_full`, `shut_down`,
/// `write_failed`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

/// How a routed request reached its backend: `path` is `raw` (forwarded as
/// bytes, see `gateway::raw`) or `typed` (through rmcp), `method` the
/// JSON-RPC method.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ForwardLabel {
    pub method: &'static str,
    pub path: &'static str,
}

/// What a store round trip was for (`lease`, `listen`, `health`, …).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabel {
    pub op: &'static str,
}

type Hist<L> = Family<L, Histogram, fn() -> Histogram>;

/// Buckets from 0.5 ms to ~16 s: gateway hops are sub-millisecond, slow
/// backends take seconds.
fn latency_buckets() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.0005, 2.0, 16,
    ))
}

/// Every instrumented metric. Cloning a family clones a handle.
pub struct Metrics {
    pub tool_calls: Family<BackendLabel, Counter>,
    pub tool_call_errors: Family<BackendLabel, Counter>,
    pub tool_call_duration: Hist<BackendLabel>,
    pub probe_duration: Hist<BackendLabel>,
    pub probe_failures: Family<BackendLabel, Counter>,
    pub transitions: Family<TransitionLabel, Counter>,
    pub quarantines: Family<BackendLabel, Counter>,
    pub list_changed_sent: Counter,
    pub relay_dropped: Counter,
    pub catalog_changes: Counter,
    pub poller_listings: Family<BackendLabel, Counter>,
    pub poller_timeouts: Family<BackendLabel, Counter>,
    pub plugin_calls: Family<PluginLabel, Counter>,
    pub plugin_failures: Family<PluginLabel, Counter>,
    pub plugin_call_duration: Hist<PluginLabel>,
    pub notifications_sent: Family<PluginLabel, Counter>,
    pub connections_open: Family<ListenerLabel, Gauge>,
    pub connections_refused: Family<ListenerLabel, Counter>,
    pub connections_cut: Family<CutLabel, Counter>,
    pub sessions_refused: Counter,
    pub rate_limited: Family<PrincipalLabel, Counter>,
    pub audit_dropped: Family<ReasonLabel, Counter>,
    pub forwarded: Family<ForwardLabel, Counter>,
    pub instances: Family<BackendLabel, Gauge>,
    /// Cluster (PostgreSQL store): round trips and failures by purpose.
    pub store_round_trips: Family<OpLabel, Counter>,
    pub store_errors: Family<OpLabel, Counter>,
    /// Sessions this replica adopted (opened elsewhere, or before a
    /// restart).
    pub adoptions: Counter,
    /// Cluster notifications received from the store.
    pub notifications_heard: Counter,
    /// Replicas alive as this one last read them (0 without a cluster).
    pub replicas_seen: Gauge,
    /// Call-audit records handed to the writer and not yet written (or
    /// given up on): what a store outage holds.
    pub audit_queued: Gauge,
    /// 1 for each shared backend whose supervision lease this replica
    /// holds, 0 once it no longer does.
    pub leases_held: Family<BackendLabel, Gauge>,
    /// Definitions the pin guard withholds, by backend.
    pins_withheld: Family<BackendLabel, Gauge>,
    /// Updates that ended, by backend and outcome.
    updates: Family<UpdateLabel, Counter>,
    /// Updates waiting for an operator's approval, by backend (0 or 1).
    updates_pending: Family<BackendLabel, Gauge>,
    /// `find_tool` searches, and how long each took.
    searches: Counter,
    search_duration: Histogram,
    /// Re-indexings of a backend's tools for `find_tool`.
    reindexed: Family<BackendLabel, Counter>,
    /// Documents in the tool-search index, and their estimated bytes.
    index_documents: Gauge,
    index_bytes: Gauge,
}

/// The process's metrics.
pub fn get() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| Metrics {
        tool_calls: Family::default(),
        tool_call_errors: Family::default(),
        tool_call_duration: Family::new_with_constructor(latency_buckets),
        probe_duration: Family::new_with_constructor(latency_buckets),
        probe_failures: Family::default(),
        transitions: Family::default(),
        quarantines: Family::default(),
        list_changed_sent: Counter::default(),
        relay_dropped: Counter::default(),
        catalog_changes: Counter::default(),
        poller_listings: Family::default(),
        poller_timeouts: Family::default(),
        plugin_calls: Family::default(),
        plugin_failures: Family::default(),
        plugin_call_duration: Family::new_with_constructor(latency_buckets),
        notifications_sent: Family::default(),
        connections_open: Family::default(),
        connections_refused: Family::default(),
        connections_cut: Family::default(),
        rate_limited: Family::default(),
        sessions_refused: Counter::default(),
        audit_dropped: Family::default(),
        forwarded: Family::default(),
        instances: Family::default(),
        store_round_trips: Family::default(),
        store_errors: Family::default(),
        adoptions: Counter::default(),
        notifications_heard: Counter::default(),
        replicas_seen: Gauge::default(),
        audit_queued: Gauge::default(),
        leases_held: Family::default(),
        pins_withheld: Family::default(),
        updates: Family::default(),
        updates_pending: Family::default(),
        searches: Counter::default(),
        search_duration: Histogram::new(
            prometheus_client::metrics::histogram::exponential_buckets(0.00005, 2.0, 16),
        ),
        reindexed: Family::default(),
        index_documents: Gauge::default(),
        index_bytes: Gauge::default(),
    })
}

/// One backend's `tools/call` series, looked up once when the backend is
/// created: the call path then touches no map and allocates nothing.
#[derive(Clone, Debug)]
pub struct CallMetrics {
    calls: Counter,
    errors: Counter,
    duration: Histogram,
}

impl CallMetrics {
    /// A `tools/call` ended (`ok`: an answer that is not an error) after
    /// `took`.
    pub fn record(&self, ok: bool, took: Duration) {
        self.calls.inc();
        if !ok {
            self.errors.inc();
        }
        self.duration.observe(took.as_secs_f64());
    }
}

/// One listener's connection series, looked up once per listener.
#[derive(Clone, Debug)]
pub struct ListenerMetrics {
    name: String,
    open: Gauge,
    pub refused: Counter,
}

/// Counts a connection open until dropped.
pub struct OpenConnection(Gauge);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl ListenerMetrics {
    /// A connection was accepted; it counts as open until the guard drops.
    pub fn opened(&self) -> OpenConnection {
        self.open.inc();
        OpenConnection(self.open.clone())
    }

    /// A connection was cut off for passing `reason` (a `[limits]` key).
    pub fn cut(&self, reason: &str) {
        get()
            .connections_cut
            .get_or_create(&CutLabel {
                listener: self.name.clone(),
                reason: reason.to_owned(),
            })
            .inc();
    }
}

impl Metrics {
    /// The connection series of listener `name`.
    pub fn listener(&self, name: &str) -> ListenerMetrics {
        let l = ListenerLabel {
            listener: name.to_owned(),
        };
        ListenerMetrics {
            name: name.to_owned(),
            open: self.connections_open.get_or_create(&l).clone(),
            refused: self.connections_refused.get_or_create(&l).clone(),
        }
    }

    /// The `tools/call` series of `backend`.
    pub fn calls_of(&self, backend: &str) -> CallMetrics {
        let l = backend_label(backend);
        CallMetrics {
            calls: self.tool_calls.get_or_create(&l).clone(),
            errors: self.tool_call_errors.get_or_create(&l).clone(),
            duration: self.tool_call_duration.get_or_create(&l).clone(),
        }
    }

    /// A readiness probe of `backend` answered (`Some(latency)`) or failed.
    pub fn probe(&self, backend: &str, latency: Option<Duration>) {
        let l = backend_label(backend);
        match latency {
            Some(t) => self
                .probe_duration
                .get_or_create(&l)
                .observe(t.as_secs_f64()),
            None => {
                self.probe_failures.get_or_create(&l).inc();
            }
        }
    }

    /// A health transition of `backend` into state `to`.
    pub fn transition(&self, backend: &str, to: &str) {
        self.transitions
            .get_or_create(&TransitionLabel {
                backend: backend.to_owned(),
                to: to.to_owned(),
            })
            .inc();
        if to == "quarantined" {
            self.quarantines
                .get_or_create(&backend_label(backend))
                .inc();
        }
    }

    /// A plugin call ended after `took`.
    pub fn plugin_call(&self, plugin: &str, ok: bool, took: Duration) {
        let l = PluginLabel {
            plugin: plugin.to_owned(),
        };
        self.plugin_calls.get_or_create(&l).inc();
        if !ok {
            self.plugin_failures.get_or_create(&l).inc();
        }
        self.plugin_call_duration
            .get_or_create(&l)
            .observe(took.as_secs_f64());
    }

    /// `n` call-audit records were not stored, for `reason`.
    pub fn count_audit_dropped(&self, reason: &str, n: u64) {
        self.audit_dropped
            .get_or_create(&ReasonLabel {
                reason: reason.to_owned(),
            })
            .inc_by(n);
    }

    /// A routed `method` request went to its backend by `path` (`raw` or
    /// `typed`).
    /// `delta` instances of `backend` run for one client began (1) or
    /// ended (-1) (`share`).
    pub fn instances(&self, backend: &str, delta: i64) {
        self.instances
            .get_or_create(&backend_label(backend))
            .inc_by(delta);
    }

    /// How many of `backend`'s definitions the pin guard withholds now.
    pub fn pins_withheld(&self, backend: &str, n: usize) {
        self.pins_withheld
            .get_or_create(&backend_label(backend))
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// An update of `backend` ended with `outcome`.
    pub fn update_ended(&self, backend: &str, outcome: &str) {
        self.updates
            .get_or_create(&UpdateLabel {
                backend: backend.to_owned(),
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    /// Whether an update of `backend` waits for an operator's approval.
    pub fn update_pending(&self, backend: &str, pending: bool) {
        self.updates_pending
            .get_or_create(&backend_label(backend))
            .set(i64::from(pending));
    }

    /// One `find_tool` search took `took`.
    pub fn tool_search(&self, took: std::time::Duration, _results: usize) {
        self.searches.inc();
        self.search_duration.observe(took.as_secs_f64());
    }

    /// `backend`'s tools were indexed again; the index holds `documents`
    /// of about `bytes`.
    pub fn reindexed(&self, backend: &str, documents: usize, bytes: usize) {
        self.reindexed.get_or_create(&backend_label(backend)).inc();
        self.index_documents.set(documents as i64);
        self.index_bytes.set(bytes as i64);
    }

    /// Whether this replica holds the supervision lease of `backend`.
    pub fn lease_held(&self, backend: &str, held: bool) {
        self.leases_held
            .get_or_create(&backend_label(backend))
            .set(i64::from(held));
    }

    /// A round trip to the shared store for `op`, and whether it failed.
    pub fn store_op(&self, op: &'static str, ok: bool) {
        let l = OpLabel { op };
        self.store_round_trips.get_or_create(&l).inc();
        if !ok {
            self.store_errors.get_or_create(&l).inc();
        }
    }

    pub fn forwarded(&self, method: &'static str, path: &'static str) {
        self.forwarded
            .get_or_create(&ForwardLabel { method, path })
            .inc();
    }

    /// Registers every instrumented metric in `registry` under `vigil_`.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("vigil");
        r.register(
            "tool_calls",
            "tools/call requests routed to a backend",
            self.tool_calls.clone(),
        );
        r.register(
            "tool_call_errors",
            "tools/call requests that failed or answered isError",
            self.tool_call_errors.clone(),
        );
        r.register_with_unit(
            "tool_call_duration",
            "Time from routing a tools/call to its answer",
            Unit::Seconds,
            self.tool_call_duration.clone(),
        );
        r.register_with_unit(
            "probe_duration",
            "Round trip of successful built-in readiness probes",
            Unit::Seconds,
            self.probe_duration.clone(),
        );
        r.register(
            "probe_failures",
            "Built-in readiness probes that failed",
            self.probe_failures.clone(),
        );
        r.register(
            "health_transitions",
            "Health state changes, by the state entered",
            self.transitions.clone(),
        );
        r.register(
            "quarantines",
            "Times a backend entered quarantine",
            self.quarantines.clone(),
        );
        r.register(
            "list_changed_sent",
            "list_changed notifications written to client sessions",
            self.list_changed_sent.clone(),
        );
        r.register(
            "relay_dropped",
            "Backend notifications (progress, log messages) dropped because a client session did not take them (see [limits] relay_queue)",
            self.relay_dropped.clone(),
        );
        r.register(
            "catalog_changes",
            "Rebuilds of the merged catalog that changed what clients see (from any source: health, backend list_changed, the poller)",
            self.catalog_changes.clone(),
        );
        r.register(
            "poller_listings",
            "Re-listings started by the capability poller",
            self.poller_listings.clone(),
        );
        r.register(
            "poller_timeouts",
            "Poller re-listings that did not complete in time",
            self.poller_timeouts.clone(),
        );
        r.register(
            "plugin_calls",
            "Calls into a WebAssembly plugin",
            self.plugin_calls.clone(),
        );
        r.register(
            "plugin_failures",
            "Plugin calls that trapped, hit a limit or returned an error",
            self.plugin_failures.clone(),
        );
        r.register_with_unit(
            "plugin_call_duration",
            "Duration of plugin calls, instantiation included",
            Unit::Seconds,
            self.plugin_call_duration.clone(),
        );
        r.register(
            "connections",
            "Open connections per listener (mcp, api)",
            self.connections_open.clone(),
        );
        r.register(
            "connections_refused",
            "Connections refused (503) because the listener was at its [limits] connection cap",
            self.connections_refused.clone(),
        );
        r.register(
            "connections_cut",
            "Connections the listener cut off, by the [limits] bound they passed (read_timeout, write_timeout)",
            self.connections_cut.clone(),
        );
        r.register(
            "sessions_refused",
            "MCP sessions refused because limits.max_sessions were open",
            self.sessions_refused.clone(),
        );
        r.register(
            "rate_limited",
            "Calls refused by a [[policy]] rate or rate_per_tool, per principal",
            self.rate_limited.clone(),
        );
        r.register(
            "audit_dropped",
            "Call-audit records not stored, by reason: queue_full (the store did not keep up), shut_down, write_failed",
            self.audit_dropped.clone(),
        );
        r.register(
            "backend_instances",
            "Instances of a backend run for one client session or caller (share = \"session\" or \"principal\") live now",
            self.instances.clone(),
        );
        r.register(
            "requests_forwarded",
            "Routed requests sent to a backend, by method and path: raw (forwarded as bytes on a shared backend session) or typed (through the MCP client)",
            self.forwarded.clone(),
        );
        r.register(
            "store_round_trips",
            "Round trips to the shared PostgreSQL store by purpose (lease, listen, session, replica)",
            self.store_round_trips.clone(),
        );
        r.register(
            "store_errors",
            "Round trips to the shared PostgreSQL store that failed, by purpose",
            self.store_errors.clone(),
        );
        r.register(
            "session_adoptions",
            "Client sessions this replica adopted: opened by another replica (or before a restart) and continued here",
            self.adoptions.clone(),
        );
        r.register(
            "cluster_notifications",
            "Notifications from other replicas heard through the store (LISTEN/NOTIFY)",
            self.notifications_heard.clone(),
        );
        r.register(
            "audit_queued",
            "Call-audit records waiting to be written (held while the store is out of reach)",
            self.audit_queued.clone(),
        );
        r.register(
            "cluster_replicas",
            "Replicas sharing the store that are alive, as this replica last read them",
            self.replicas_seen.clone(),
        );
        r.register(
            "pins_withheld",
            "Definitions (tools, prompts, resource templates) of a backend the pin guard withholds until an operator approves them",
            self.pins_withheld.clone(),
        );
        r.register(
            "updates",
            "Updates of a backend that ended, by outcome (succeeded, rolled_back)",
            self.updates.clone(),
        );
        r.register(
            "updates_pending_approval",
            "1 while an update of a backend waits for an operator to approve or abort its catalog change",
            self.updates_pending.clone(),
        );
        r.register(
            "tool_searches",
            "find_tool searches answered",
            self.searches.clone(),
        );
        r.register(
            "tool_search_duration_seconds",
            "How long ranking one find_tool query took (the index's search and the caller's filter)",
            self.search_duration.clone(),
        );
        r.register(
            "tool_search_reindexed",
            "Times a backend's tools were indexed again for find_tool (its listing changed)",
            self.reindexed.clone(),
        );
        r.register(
            "tool_search_index_documents",
            "Tools in the find_tool index (every backend's last listing, whatever its health)",
            self.index_documents.clone(),
        );
        r.register(
            "tool_search_index_bytes",
            "Estimated memory of the find_tool index's documents",
            self.index_bytes.clone(),
        );
        r.register(
            "lease_held",
            "1 while this replica holds the supervision lease of a shared backend (it supervises it), 0 once it no longer does",
            self.leases_held.clone(),
        );
        r.register(
            "notifications_sent",
            "Health events a notifier plugin delivered",
            self.notifications_sent.clone(),
        );
    }
}

fn backend_label(backend: &str) -> BackendLabel {
    BackendLabel {
        backend: backend.to_owned(),
    }
}
