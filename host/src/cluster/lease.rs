//! Supervision leases: one supervisor acts for a backend at a time, across
//! every replica that serves it.
//!
//! The seam several replicas will stand on. A supervisor
//! ([`crate::supervisor`]) waits in [`Leases::acquire`] before it starts,
//! probes, restarts or reports anything for a backend, and stops acting
//! the moment its [`Lease`] is lost ([`Lease::lost`]): a replica whose
//! lease expired (a pause, a partition) must not restart a backend that
//! another replica now supervises.
//!
//! Contract of an implementation:
//!
//! - [`Leases::acquire`] resolves once this replica holds the lease of
//!   the backend, waiting as long as another holds it (a standby replica
//!   waits there), and retries its own store meanwhile: it has no error;
//! - a granted lease is held until it is dropped (released) or lost; once
//!   lost it stays lost, and [`Lease::lost`] resolves at once for every
//!   waiter;
//! - it is cancel safe: dropping the `acquire` future (a shutdown) leaves
//!   no lease held.
//!
//! [`LocalLeases`] is one replica's: it always grants, at once, and never
//! loses (the gateway already runs one supervisor per backend). A shared
//! implementation keeps a row per backend with its holder and a deadline,
//! renews it well within the deadline, and marks the lease lost when a
//! renewal fails or finds another holder.

use std::sync::Arc;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

/// Who may supervise which backend.
#[async_trait]
pub trait Leases: Send + Sync + 'static {
    /// Waits until this replica holds the lease of `backend` (a backend's
    /// name); see the module doc for the contract.
    async fn acquire(&self, backend: &str) -> Lease;
}

/// A held lease of one backend. Dropping it releases it.
pub struct Lease {
    backend: Arc<str>,
    lost: CancellationToken,
    /// What the implementation keeps while the lease is held (a renewer
    /// to stop); dropped with the lease.
    _held: Option<Box<dyn Send + Sync>>,
}

impl Lease {
    /// A lease of `backend` that is lost when `lost` is cancelled; `held`
    /// is dropped when the lease is (an implementation's release).
    pub fn new(
        backend: impl Into<Arc<str>>,
        lost: CancellationToken,
        held: Option<Box<dyn Send + Sync>>,
    ) -> Lease {
        Lease {
            backend: backend.into(),
            lost,
            _held: held,
        }
    }

    /// The backend it is a lease of.
    pub fn backend(&self) -> &Arc<str> {
        &self.backend
    }

    /// Resolves when the lease is lost (never, for a lease that is kept).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: meant for a `select!` beside the holder's other work.
    pub async fn lost(&self) {
        self.lost.cancelled().await
    }

    /// Whether the lease is lost already.
    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }
}

/// One replica's leases: every one granted at once and never lost.
#[derive(Debug, Default, Clone, Copy)]
pub struct LocalLeases;

#[async_trait]
impl Leases for LocalLeases {
    async fn acquire(&self, backend: &str) -> Lease {
        Lease::new(backend, CancellationToken::new(), None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[tokio::test(start_paused = true)]
    async fn the_local_lease_is_granted_at_once_and_never_lost() {
        let leases: Arc<dyn Leases> = Arc::new(LocalLeases);
        let lease = leases
            .acquire("files")
            .now_or_never()
            .expect("granted without waiting");
        assert_eq!(&**lease.backend(), "files");
        // Another supervisor of this replica (a per-client instance, a
        // reload's replacement) is granted too.
        let again = leases.acquire("files").now_or_never().expect("granted");
        // A day of (paused) time later it is still held.
        let kept = tokio::time::timeout(std::time::Duration::from_secs(86_400), lease.lost()).await;
        assert!(kept.is_err(), "never lost");
        assert!(!lease.is_lost() && !again.is_lost());
    }

    #[tokio::test]
    async fn a_lost_lease_says_so_to_every_waiter() {
        let token = CancellationToken::new();
        let lease = Lease::new("files", token.clone(), None);
        assert!(lease.lost().now_or_never().is_none());
        token.cancel();
        assert!(lease.is_lost());
        assert!(lease.lost().now_or_never().is_some());
        assert!(lease.lost().now_or_never().is_some(), "and stays lost");
    }
}
