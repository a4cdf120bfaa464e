//! The pin guard's desk (`catalog::pin`, `[pin]`): what the catalog
//! registry holds back, for the control API, the dashboard and the
//! metrics; the approvals stored, loaded at start; and an operator's
//! approval, checked against what is held, recorded, and handed to the
//! update task, which re-applies the registry with it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::sync::{mpsc, oneshot};

use crate::catalog::digest::Digest;
use crate::catalog::pin::{Approvals, Approved, Held, PinKey};
use crate::store::PinStore;

/// Who approved a backend's first listing (`first_seen = "trust"`).
pub const FIRST_USE: &str = "system:first-use";

/// A change of approvals on its way to the update task.
pub(super) enum Approval {
    /// An operator here approved `items`; `applied` is told once the
    /// catalog serves them.
    Added {
        backend: Arc<str>,
        items: Vec<(PinKey, Digest)>,
        applied: oneshot::Sender<()>,
    },
    /// Another replica recorded approvals: the store's, read again.
    Read {
        backend: Arc<str>,
        approvals: Approvals,
    },
}

/// Why an approval was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("name the digests you reviewed: {{\"digests\": [\"...\"]}} (GET the pins to see them)")]
    Nothing,
    #[error(
        "{0} is not held now: the definition changed after you read it, or was approved or withdrawn since; read the pins again and approve what they show"
    )]
    NotHeld(Digest),
    #[error("the store did not record the approval: {0}")]
    Store(String),
    #[error("the approval was recorded but the catalog was not updated (shutting down?)")]
    NotApplied,
}

/// See the module doc. One per app.
pub struct Pins {
    store: Option<Arc<dyn PinStore>>,
    /// What the registry held back at its last apply, by backend.
    held: Mutex<BTreeMap<Arc<str>, Vec<Held>>>,
    approvals: mpsc::UnboundedSender<Approval>,
}

impl Pins {
    pub(super) fn new(
        store: Option<Arc<dyn PinStore>>,
    ) -> (Arc<Pins>, mpsc::UnboundedReceiver<Approval>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let pins = Pins {
            store,
            held: Mutex::default(),
            approvals: tx,
        };
        (Arc::new(pins), rx)
    }

    fn held_now(&self) -> std::sync::MutexGuard<'_, BTreeMap<Arc<str>, Vec<Held>>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The approvals the store holds, by backend. A store that cannot be
    /// read leaves every held backend with none (and `first_seen` does
    /// not trust what it cannot compare): nothing held is served until
    /// it is read or approved again.
    pub(super) async fn load(&self, pinned: &[Arc<str>]) -> Vec<(Arc<str>, Approvals)> {
        let Some(store) = &self.store else {
            return Vec::new();
        };
        match store.approvals().await {
            Ok((backends, records)) => {
                let mut by_backend: BTreeMap<String, Vec<(PinKey, Digest)>> =
                    backends.into_iter().map(|b| (b, Vec::new())).collect();
                for r in records.logged("pin approvals") {
                    by_backend
                        .entry(r.backend)
                        .or_default()
                        .push((r.key, r.digest));
                }
                by_backend
                    .into_iter()
                    .map(|(b, items)| (Arc::from(b), Approvals::new(items)))
                    .collect()
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot read the approved definitions: every held backend's definitions stay withheld until an operator approves them");
                pinned
                    .iter()
                    .map(|b| (b.clone(), Approvals::default()))
                    .collect()
            }
        }
    }

    /// Records a first use (`first_seen = "trust"`): `backend`'s first
    /// listing, approved as it came.
    pub(super) fn record_first_use(&self, backend: Arc<str>, approvals: Approvals) {
        let Some(store) = self.store.clone() else {
            return;
        };
        let items: Vec<(PinKey, Digest)> = approvals.iter().map(|(k, d)| (k.clone(), *d)).collect();
        tracing::info!(backend = %backend, definitions = items.len(), "first listing of a held backend approved as it came (first_seen = \"trust\")");
        crate::background::spawn(async move {
            if let Err(e) = store
                .approve(&backend, items, FIRST_USE, SystemTime::now())
                .await
            {
                tracing::warn!(backend = %backend, error = %e, "could not record a first listing's approval: after a restart it is trusted again");
            }
        });
    }

    /// Another replica recorded approvals of `backend`: reads them from
    /// the store and hands them to the update task.
    pub(super) fn heard(self: &Arc<Self>, backend: &str) {
        let (pins, backend) = (self.clone(), Arc::<str>::from(backend));
        crate::background::spawn(async move {
            let read = pins.load(std::slice::from_ref(&backend)).await;
            let approvals = read
                .into_iter()
                .find(|(b, _)| *b == backend)
                .map(|(_, a)| a)
                .unwrap_or_default();
            let _ = pins.approvals.send(Approval::Read { backend, approvals });
        });
    }

    /// What the registry holds back now (its last apply).
    pub(super) fn set_held(&self, held: Vec<(Arc<str>, Vec<Held>)>) {
        let metrics = crate::metrics::get();
        let mut now = self.held_now();
        for name in now.keys() {
            if !held.iter().any(|(b, _)| b == name) {
                metrics.pins_withheld(name, 0);
            }
        }
        for (b, items) in &held {
            metrics.pins_withheld(b, items.len());
        }
        *now = held.into_iter().collect();
    }

    /// What is held back of `backend`.
    pub fn held(&self, backend: &str) -> Vec<Held> {
        self.held_now().get(backend).cloned().unwrap_or_default()
    }

    /// `principal` approves the held definitions of `backend` whose
    /// digests are `digests` (what they reviewed): all of them, or none
    /// if one is not held now. Returns once the catalog serves them.
    pub async fn approve(
        &self,
        backend: &Arc<str>,
        digests: &[Digest],
        principal: &str,
    ) -> Result<Vec<Approved>, Refused> {
        if digests.is_empty() {
            return Err(Refused::Nothing);
        }
        let held = self.held(backend);
        let mut items = Vec::new();
        for d in digests {
            let h = held
                .iter()
                .find(|h| h.digest == *d)
                .ok_or(Refused::NotHeld(*d))?;
            items.push((h.key.clone(), h.digest));
        }
        if let Some(store) = &self.store {
            store
                .approve(backend, items.clone(), principal, SystemTime::now())
                .await
                .map_err(|e| Refused::Store(e.to_string()))?;
        }
        let (applied, done) = oneshot::channel();
        self.approvals
            .send(Approval::Added {
                backend: backend.clone(),
                items: items.clone(),
                applied,
            })
            .map_err(|_| Refused::NotApplied)?;
        done.await.map_err(|_| Refused::NotApplied)?;
        Ok(items
            .into_iter()
            .map(|(key, digest)| Approved { key, digest })
            .collect())
    }
}
