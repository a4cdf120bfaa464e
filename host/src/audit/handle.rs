//! [`CallAudit`]: the handle the call paths record through. Recording is a
//! `try_send` into the bounded queue of the store's batched writer
//! ([`crate::store::Writer`], set up in `writer.rs`), never a wait: its one
//! task takes the queue in batches and the store sees one transaction per
//! batch. A record that finds the queue full is counted, never lost
//! silently ([`CallAudit::dropped`], the metric `vigil_audit_dropped_total`,
//! a WARN at most every 10 s).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::CallRecord;
use crate::config::AuditConfig;
use crate::log_limit::LogLimit;
use crate::redact::Redactor;
use crate::store::{CallStore, Writer};

/// Records the queue holds before `record` drops: a burst of several
/// thousand calls arriving while a batch is being written is all kept.
pub const QUEUE: usize = 16 * 1024;

/// How often at most a WARN about dropped records is logged.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Cheap to clone (one `Arc`); every clone records into the same queue.
///
/// Without a store (`[store] optional = true` and it could not be
/// opened) it is [`CallAudit::off`]: recording does nothing, and the
/// control API's `GET /api/v1/audit/calls` answers 503 naming `[store]`.
#[derive(Clone, Default)]
pub struct CallAudit(Option<Arc<Shared>>);

struct Shared {
    writer: Writer<super::writer::Records>,
    settings: Arc<Settings>,
    counters: Arc<Counters>,
}

/// `[audit]` in force, replaced live by a config reload.
pub(super) struct Settings {
    current: ArcSwap<AuditConfig>,
    /// Woken when `keep` may have changed, so the pruner applies it now.
    pub(super) changed: Notify,
}

impl Settings {
    pub(super) fn current(&self) -> Arc<AuditConfig> {
        self.current.load_full()
    }
}

/// Why records were not stored; the metric's `reason` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lost {
    /// The queue was full: the store does not keep up.
    QueueFull,
    /// The writer had stopped (the gateway is shutting down).
    ShutDown,
    /// The store refused the batch (logged with the store's error).
    WriteFailed,
}

impl Lost {
    fn as_str(self) -> &'static str {
        match self {
            Lost::QueueFull => "queue_full",
            Lost::ShutDown => "shut_down",
            Lost::WriteFailed => "write_failed",
        }
    }
}

/// What the handles and the writer count together.
#[derive(Debug)]
pub(super) struct Counters {
    dropped: AtomicU64,
    warn: Mutex<LogLimit>,
}

impl Counters {
    fn new() -> Self {
        Counters {
            dropped: AtomicU64::new(0),
            warn: Mutex::new(LogLimit::new(WARN_EVERY)),
        }
    }

    /// `n` records were not stored, for `why`: counted, in the metric, and
    /// a WARN unless one was logged in the last [`WARN_EVERY`].
    pub(super) fn lost(&self, n: u64, why: Lost) {
        let total = self.dropped.fetch_add(n, Ordering::Relaxed) + n;
        crate::metrics::get().count_audit_dropped(why.as_str(), n);
        let admitted = self
            .warn
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .admit(tokio::time::Instant::now());
        let Some(unlogged) = admitted else { return };
        let cause = match why {
            Lost::QueueFull => format!(
                "the queue of {QUEUE} records is full: the store does not keep up with the calls"
            ),
            Lost::ShutDown => "the audit writer had already stopped for shutdown".to_owned(),
            Lost::WriteFailed => "the store refused the batch (see the ERROR before)".to_owned(),
        };
        tracing::warn!(
            dropped = n,
            dropped_total = total,
            reason = why.as_str(),
            "call audit: {n} call record(s) not stored ({} more since the last warning; {total} in all, metric vigil_audit_dropped_total): {cause}",
            unlogged
        );
    }
}

// === impl CallAudit ===

impl CallAudit {
    /// Records nothing: for running without a store.
    pub fn off() -> Self {
        CallAudit(None)
    }

    /// The audit of calls into `store` with `config`: spawns the writer
    /// and the pruner on `tracker`. When `shutdown` fires the writer stops
    /// taking records and writes every queued one before it ends, so
    /// waiting for `tracker` after cancelling `shutdown` (as `vigil
    /// serve` does) puts the last batch on disk. `redactor` masks the
    /// arguments the writer stores. No store: [`CallAudit::off`].
    pub fn start(
        store: Option<Arc<dyn CallStore>>,
        config: AuditConfig,
        redactor: Redactor,
        tracker: &TaskTracker,
        shutdown: &CancellationToken,
    ) -> Self {
        Self::with_capacity(store, config, redactor, tracker, shutdown, QUEUE)
    }

    /// [`CallAudit::start`] with a queue of `capacity` records.
    pub(crate) fn with_capacity(
        store: Option<Arc<dyn CallStore>>,
        config: AuditConfig,
        redactor: Redactor,
        tracker: &TaskTracker,
        shutdown: &CancellationToken,
        capacity: usize,
    ) -> Self {
        let Some(store) = store else {
            return CallAudit::off();
        };
        let settings = Arc::new(Settings {
            current: ArcSwap::from_pointee(config),
            changed: Notify::new(),
        });
        let counters = Arc::new(Counters::new());
        let records = super::writer::Records {
            store: store.clone(),
            redactor,
            counters: counters.clone(),
            shutdown: shutdown.clone(),
        };
        let writer = Writer::spawn(records, super::writer::policy(capacity), tracker, shutdown);
        tracker.spawn(tracing::Instrument::instrument(
            super::prune::run(store, settings.clone(), shutdown.clone()),
            tracing::info_span!("audit_prune"),
        ));
        CallAudit(Some(Arc::new(Shared {
            writer,
            settings,
            counters,
        })))
    }

    /// Whether calls are recorded: there is a store, and `[audit] calls`
    /// (live) is not `false`.
    pub fn is_on(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|s| s.settings.current.load().calls)
    }

    /// Whether arguments are recorded (`[audit] arguments`, live).
    pub fn arguments(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|s| s.settings.current.load().arguments)
    }

    /// Queues `record` for the writer; never waits. Arguments are dropped
    /// unless `[audit] arguments = true`, and masked by the writer. A full
    /// queue, or a writer that stopped, counts the record as dropped (see
    /// the module doc). Does nothing when the audit is off.
    pub fn record(&self, mut record: CallRecord) {
        let Some(s) = &self.0 else { return };
        if !s.settings.current.load().arguments {
            record.arguments = None;
        }
        // A refusal (full, or closed for shutdown) is counted by the sink.
        if s.writer.send(record) {
            crate::metrics::get().audit_queued.inc();
        }
    }

    /// Puts a reloaded `[audit]` in force: `arguments` from the next call
    /// on, `keep` at the next prune, which runs at once. `false` when it
    /// is the one in force already (or the audit is off).
    pub fn configure(&self, next: AuditConfig) -> bool {
        let Some(s) = &self.0 else { return false };
        if *s.settings.current.load_full() == next {
            return false;
        }
        s.settings.current.store(Arc::new(next));
        s.settings.changed.notify_one();
        true
    }

    /// Records not stored since the start, for every reason.
    pub fn dropped(&self) -> u64 {
        self.0
            .as_ref()
            .map_or(0, |s| s.counters.dropped.load(Ordering::Relaxed))
    }
}

impl std::fmt::Debug for CallAudit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallAudit")
            .field("on", &self.is_on())
            .field("dropped", &self.dropped())
            .finish()
    }
}
