//! The one writer of health state to the store: supervisors hand it
//! transitions and instance records; it writes them in order on the
//! blocking pool, so a slow disk never stalls a supervisor or the data plane.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::{AuditEntry, InstanceRecord, Store};
use crate::health::Transition;

enum Write {
    Transition(Transition),
    Instance(InstanceRecord),
    Audit(AuditEntry),
}

/// Cheap to clone; writes are queued, never awaited.
#[derive(Clone)]
pub struct StoreWriter(mpsc::UnboundedSender<Write>);

impl StoreWriter {
    /// Starts the writer task over `store`.
    pub fn spawn(store: Arc<dyn Store>) -> StoreWriter {
        let (tx, mut rx) = mpsc::unbounded_channel::<Write>();
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut batch = vec![first];
                while let Ok(more) = rx.try_recv() {
                    batch.push(more);
                }
                let store = store.clone();
                let done = tokio::task::spawn_blocking(move || {
                    for w in batch {
                        let r = match &w {
                            Write::Transition(t) => store.record_transition(t),
                            Write::Instance(i) => store.save_instance(i),
                            Write::Audit(a) => store.record_audit(a),
                        };
                        if let Err(e) = r {
                            tracing::error!(error = %e, "could not write health state to the store");
                        }
                    }
                })
                .await;
                if let Err(e) = done {
                    tracing::error!(error = %e, "store writer failed");
                }
            }
        });
        StoreWriter(tx)
    }

    pub fn transition(&self, t: Transition) {
        let _ = self.0.send(Write::Transition(t));
    }

    pub fn instance(&self, r: InstanceRecord) {
        let _ = self.0.send(Write::Instance(r));
    }

    pub fn audit(&self, a: AuditEntry) {
        let _ = self.0.send(Write::Audit(a));
    }
}
