//! Which plugin calls may run now: the engine has [`MAX_INSTANCES`] instance
//! slots, shared by every plugin. When 66 notifiers once blocked on one
//! event, the slots ran out and other plugins' calls failed with wasmtime's
//! "maximum concurrent limit", counted as *their* failures until they were
//! disabled. Capacity is not a plugin's fault, so here:
//!
//! - each plugin runs at most `limits.concurrency` calls at once; more wait
//!   for one of its own to end (a slow plugin queues behind itself);
//! - the slots are taken through a semaphore, so a call waits for one
//!   instead of failing; [`RESERVE`] of them are kept for plugins with no
//!   call running at all, so a crowd of slow plugins holding every shared
//!   slot still leaves room for an innocent one;
//! - a call that waited its whole deadline is *shed*: reported with the
//!   limit it met ([`LimitHit`]), never counted as the plugin's failure.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::engine::MAX_INSTANCES;
use super::sandbox::LimitHit;

/// Slots kept for a plugin that has no call running.
pub const RESERVE: u32 = 32;

/// The slots of one engine.
pub struct Admission {
    shared: Arc<Semaphore>,
    reserve: Arc<Semaphore>,
}

/// A call's right to run: its plugin's turn and an engine slot, given back
/// when dropped.
pub struct Ticket {
    _own: OwnedSemaphorePermit,
    _slot: OwnedSemaphorePermit,
}

impl Default for Admission {
    fn default() -> Self {
        Self::new(MAX_INSTANCES)
    }
}

impl Admission {
    /// Admission to `slots` instance slots.
    pub fn new(slots: u32) -> Self {
        let reserve = RESERVE.min(slots / 2);
        Self {
            shared: Arc::new(Semaphore::new((slots - reserve) as usize)),
            reserve: Arc::new(Semaphore::new(reserve as usize)),
        }
    }

    /// Waits, at most `wait`, for a call of a plugin whose own turns are
    /// `own` (`concurrency` of them) to be allowed to run.
    pub async fn admit(
        &self,
        own: &Arc<Semaphore>,
        concurrency: u32,
        wait: Duration,
    ) -> Result<Ticket, LimitHit> {
        let deadline = tokio::time::Instant::now() + wait;
        let own_turn = match own.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => tokio::time::timeout_at(deadline, own.clone().acquire_owned())
                .await
                .map_err(|_| LimitHit {
                    key: "limits.concurrency",
                    detail: format!(
                        "{concurrency} calls of this plugin were still running after {}; this call was shed",
                        humantime::format_duration(wait)
                    ),
                })?
                .map_err(|_| closed())?,
        };
        let alone = own.available_permits() + 1 == concurrency as usize;
        let slot = match self.shared.clone().try_acquire_owned() {
            Ok(s) => s,
            Err(_) => match alone.then(|| self.reserve.clone().try_acquire_owned()) {
                Some(Ok(s)) => s,
                _ => tokio::time::timeout_at(deadline, self.shared.clone().acquire_owned())
                    .await
                    .map_err(|_| LimitHit {
                        key: "host plugin slots",
                        detail: format!(
                            "all {MAX_INSTANCES} plugin instance slots were busy for {}; this call was shed (not this plugin's failure)",
                            humantime::format_duration(wait)
                        ),
                    })?
                    .map_err(|_| closed())?,
            },
        };
        Ok(Ticket {
            _own: own_turn,
            _slot: slot,
        })
    }
}

fn closed() -> LimitHit {
    LimitHit {
        key: "host plugin slots",
        detail: "the plugin host is shutting down".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAIT: Duration = Duration::from_millis(50);

    #[tokio::test]
    async fn a_plugin_waits_for_its_own_turn_and_is_shed_after_its_wait() {
        let a = Admission::new(8);
        let own = Arc::new(Semaphore::new(1));
        let first = a.admit(&own, 1, WAIT).await.unwrap();
        let hit = a.admit(&own, 1, WAIT).await.err().unwrap();
        assert_eq!(hit.key, "limits.concurrency");
        drop(first);
        assert!(a.admit(&own, 1, WAIT).await.is_ok(), "its turn came back");
    }

    #[tokio::test]
    async fn a_crowd_holding_every_shared_slot_leaves_the_reserve_to_an_idle_plugin() {
        let a = Admission::new(4); // 2 shared, 2 reserved
        let crowd: Vec<_> = (0..2).map(|_| Arc::new(Semaphore::new(2))).collect();
        let mut held = Vec::new();
        for own in &crowd {
            held.push(a.admit(own, 2, WAIT).await.unwrap());
        }
        // A second call of a crowd plugin is not alone: no reserve for it.
        let hit = a.admit(&crowd[0], 2, WAIT).await.err().unwrap();
        assert_eq!(hit.key, "host plugin slots");
        // An innocent plugin with nothing running gets a reserved slot.
        let innocent = Arc::new(Semaphore::new(4));
        assert!(a.admit(&innocent, 4, WAIT).await.is_ok());
    }

    #[tokio::test]
    async fn a_waiting_call_runs_as_soon_as_a_slot_frees() {
        let a = Arc::new(Admission::new(2)); // 1 shared, 1 reserved
        let (p, q) = (Arc::new(Semaphore::new(2)), Arc::new(Semaphore::new(2)));
        let t1 = a.admit(&p, 2, WAIT).await.unwrap();
        let _t2 = a.admit(&q, 2, WAIT).await.unwrap(); // the reserve
        let (a2, p2) = (a.clone(), p.clone());
        let waiting =
            tokio::spawn(async move { a2.admit(&p2, 2, Duration::from_secs(30)).await.is_ok() });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "it waits while every slot is taken");
        drop(t1);
        assert!(waiting.await.unwrap());
    }
}
