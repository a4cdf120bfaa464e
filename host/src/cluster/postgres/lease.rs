//! Supervision leases in PostgreSQL: the [`Leases`] seam for replicas
//! sharing a store.
//!
//! One row per backend in `leases`: its holder (a replica's name), an
//! epoch raised at every change of holder (a fencing token: a write that
//! carries it can be refused once another replica took over), and when it
//! expires, by the *server's* clock, so replicas' clocks never need to
//! agree.
//!
//! One task per replica ([`PgLeases::run`]) does all the work in a few
//! statements per round, whatever the number of backends:
//!
//! 1. renew every lease held here (`UPDATE … WHERE holder = me AND epoch =
//!    held AND not expired`); a lease the statement does not return was
//!    taken over, and is lost at once;
//! 2. release what supervisors dropped (expire it now, keeping its epoch);
//! 3. take every lease a supervisor here waits for that is free or expired
//!    (`INSERT … ON CONFLICT DO UPDATE … WHERE expired`), and read when the
//!    others expire, to try again right then.
//!
//! A round runs every third of the lease, and sooner when a supervisor
//! asks or a lease it waits for expires. A held lease is lost *locally*
//! once `0.9 × lease` passed since the start of its last successful
//! renewal, whether or not the store answers: the server counts the lease
//! from a later moment (when it ran the statement), so this replica stops
//! acting before any other can take over, even while the store is
//! unreachable.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::Pool;
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cluster::lease::{Lease, Leases};

/// Who may supervise which backend, by rows of `leases`; see the module
/// doc. Cheap to clone.
#[derive(Clone)]
pub struct PgLeases {
    shared: Arc<Shared>,
}

struct Shared {
    pool: Pool,
    /// For messages: where the store is.
    location: String,
    replica: String,
    lease: Duration,
    state: Mutex<State>,
    /// Wakes the task for a round now.
    wake: Notify,
}

#[derive(Default)]
struct State {
    /// Supervisors waiting for a backend's lease, first come first served.
    wanted: HashMap<Arc<str>, VecDeque<oneshot::Sender<Lease>>>,
    /// Leases held here.
    held: HashMap<Arc<str>, Held>,
    /// Leases dropped here, to expire in the store: (backend, epoch).
    released: Vec<(Arc<str>, i64)>,
    /// Who holds the leases this replica does not, as last read.
    others: HashMap<Arc<str>, String>,
}

struct Held {
    epoch: i64,
    /// Start of the last renewal the store confirmed.
    renewed: Instant,
    lost: CancellationToken,
}

/// Dropped with its [`Lease`]: hands the lease back.
struct Release {
    shared: Weak<Shared>,
    backend: Arc<str>,
    epoch: i64,
}

impl Drop for Release {
    fn drop(&mut self) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        let mut state = shared.lock();
        if state
            .held
            .get(&self.backend)
            .is_some_and(|h| h.epoch == self.epoch)
            && let Some(held) = state.held.remove(&self.backend)
        {
            held.lost.cancel();
            state.released.push((self.backend.clone(), self.epoch));
            crate::metrics::get().lease_held(&self.backend, false);
        }
        drop(state);
        shared.wake.notify_one();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every change under the lock is a handful of map operations that
    // leave it whole.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// How long after its last renewal a held lease is lost here.
    fn valid_for(&self) -> Duration {
        self.lease.mul_f64(0.9)
    }

    fn lease_ms(&self) -> i64 {
        i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX)
    }
}

#[async_trait]
impl Leases for PgLeases {
    async fn acquire(&self, backend: &str) -> Lease {
        let (tx, rx) = oneshot::channel();
        self.shared
            .lock()
            .wanted
            .entry(backend.into())
            .or_default()
            .push_back(tx);
        self.shared.wake.notify_one();
        match rx.await {
            Ok(lease) => lease,
            // The task ended (shutdown): no lease will come.
            Err(_) => std::future::pending().await,
        }
    }
}

/// What one round did, for tests and logs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Round {
    pub renewed: usize,
    pub lost: Vec<Arc<str>>,
    pub granted: Vec<Arc<str>>,
    /// When the next round is due at the latest.
    pub next: Option<Duration>,
}

impl PgLeases {
    /// Leases of `replica` lasting `lease`, kept in the database behind
    /// `pool`. Nothing happens until [`PgLeases::run`] runs.
    pub fn new(pool: Pool, location: &str, replica: &str, lease: Duration) -> PgLeases {
        PgLeases {
            shared: Arc::new(Shared {
                pool,
                location: location.to_owned(),
                replica: replica.to_owned(),
                lease,
                state: Mutex::default(),
                wake: Notify::new(),
            }),
        }
    }

    /// Who holds `backend`'s lease, as far as this replica knows: itself,
    /// another replica (as last read), or nobody known.
    pub fn holder(&self, backend: &str) -> Option<String> {
        let state = self.shared.lock();
        if state.held.contains_key(backend) {
            return Some(self.shared.replica.clone());
        }
        state.others.get(backend).cloned()
    }

    /// Runs rounds until `shutdown`, then releases every lease held here
    /// (so a standby takes over at once rather than after the lease).
    pub async fn run(self, shutdown: CancellationToken) {
        let mut failing = false;
        loop {
            let result = self.round().await;
            crate::metrics::get().store_op("lease", result.is_ok());
            let next = match result {
                Ok(round) => {
                    if failing {
                        tracing::info!(store = %self.shared.location, "supervision leases are renewed again");
                        failing = false;
                    }
                    round.next.unwrap_or(self.shared.lease / 3)
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!(store = %self.shared.location, error = %e, "cannot renew or take supervision leases; held leases are lost when they run out");
                        failing = true;
                    }
                    self.expire_unrenewed();
                    self.next_deadline().unwrap_or(self.shared.lease / 3)
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(next) => {}
                _ = self.shared.wake.notified() => {}
            }
        }
        let held: Vec<(Arc<str>, i64)> = {
            let mut state = self.shared.lock();
            state.wanted.clear();
            state
                .held
                .drain()
                .map(|(b, h)| {
                    h.lost.cancel();
                    (b, h.epoch)
                })
                .collect()
        };
        let mut released = std::mem::take(&mut self.shared.lock().released);
        released.extend(held);
        if let Err(e) = self.release(&released).await {
            tracing::debug!(error = %e, "could not release the supervision leases at shutdown; they run out by themselves");
        }
    }

    /// Loses every held lease whose renewal is overdue.
    fn expire_unrenewed(&self) {
        let valid = self.shared.valid_for();
        let mut state = self.shared.lock();
        state.held.retain(|backend, h| {
            let keep = h.renewed.elapsed() < valid;
            if !keep {
                tracing::warn!(backend = %backend, "supervision lease ran out without a renewal; no longer acting for the backend");
                h.lost.cancel();
                crate::metrics::get().lease_held(backend, false);
            }
            keep
        });
    }

    /// Time until the first held lease would run out locally.
    fn next_deadline(&self) -> Option<Duration> {
        let valid = self.shared.valid_for();
        self.shared
            .lock()
            .held
            .values()
            .map(|h| valid.saturating_sub(h.renewed.elapsed()))
            .min()
    }

    /// One round: renew, release, take; see the module doc.
    pub async fn round(&self) -> Result<Round, tokio_postgres::Error> {
        let shared = &self.shared;
        // Whatever the store says next, an overdue lease is lost now.
        self.expire_unrenewed();
        let client = match shared.pool.get().await {
            Ok(c) => c,
            Err(deadpool_postgres::PoolError::Backend(e)) => return Err(e),
            Err(e) => {
                tracing::debug!(error = %e, "no store connection for the lease round");
                return Ok(Round {
                    next: Some(Duration::from_millis(500)),
                    ..Round::default()
                });
            }
        };
        let mut round = Round::default();
        // 1. Renew.
        let started = Instant::now();
        let (backends, epochs): (Vec<String>, Vec<i64>) = shared
            .lock()
            .held
            .iter()
            .map(|(b, h)| (b.to_string(), h.epoch))
            .unzip();
        if !backends.is_empty() {
            let rows = client
                .query(
                    "UPDATE leases l SET expires_at = now() + $2::bigint * interval '1 millisecond'
                     FROM unnest($3::text[], $4::bigint[]) AS h(backend, epoch)
                     WHERE l.backend = h.backend AND l.epoch = h.epoch
                       AND l.holder = $1 AND l.expires_at > now()
                     RETURNING l.backend",
                    &[&shared.replica, &shared.lease_ms(), &backends, &epochs],
                )
                .await?;
            let renewed: std::collections::HashSet<String> =
                rows.iter().map(|r| r.get::<_, String>(0)).collect();
            let mut state = shared.lock();
            state.held.retain(|backend, h| {
                if renewed.contains(&**backend) {
                    h.renewed = started;
                    round.renewed += 1;
                    true
                } else if backends.iter().any(|b| **b == **backend) {
                    tracing::warn!(backend = %backend, "supervision lease taken over by another replica (or expired); no longer acting for the backend");
                    h.lost.cancel();
                    crate::metrics::get().lease_held(backend, false);
                    round.lost.push(backend.clone());
                    false
                } else {
                    true // granted after the statement was made
                }
            });
        }
        // 2. Release.
        let released = std::mem::take(&mut shared.lock().released);
        if !released.is_empty()
            && let Err(e) = release_with(&client, &shared.replica, &released).await
        {
            shared.lock().released.extend(released);
            return Err(e);
        }
        // 3. Take.
        let wanted: Vec<String> = {
            let mut state = shared.lock();
            let State { wanted, held, .. } = &mut *state;
            wanted.retain(|_, waiters| {
                waiters.retain(|w| !w.is_closed());
                !waiters.is_empty()
            });
            wanted
                .keys()
                .filter(|b| !held.contains_key(*b))
                .map(|b| b.to_string())
                .collect()
        };
        if !wanted.is_empty() {
            let rows = client
                .query(
                    "INSERT INTO leases AS l (backend, holder, epoch, expires_at, acquired_at)
                     SELECT b, $1, 1, now() + $2::bigint * interval '1 millisecond', now()
                     FROM unnest($3::text[]) AS b
                     ON CONFLICT (backend) DO UPDATE SET
                         holder = EXCLUDED.holder,
                         epoch = l.epoch + 1,
                         expires_at = EXCLUDED.expires_at,
                         acquired_at = EXCLUDED.acquired_at,
                         taken_from = l.holder,
                         previous_expires_at = l.expires_at
                     WHERE l.expires_at <= now()
                     RETURNING l.backend, l.epoch",
                    &[&shared.replica, &shared.lease_ms(), &wanted],
                )
                .await?;
            let taken: Vec<(Arc<str>, i64)> = rows
                .iter()
                .map(|r| (Arc::<str>::from(r.get::<_, String>(0)), r.get(1)))
                .collect();
            for (backend, epoch) in taken {
                if self.grant(&backend, epoch, started) {
                    round.granted.push(backend);
                }
            }
            // When the others run out, to try again then.
            let still: Vec<String> = wanted
                .into_iter()
                .filter(|b| !round.granted.iter().any(|g| **g == **b))
                .collect();
            if !still.is_empty() {
                let rows = client
                    .query(
                        "SELECT backend, holder,
                                greatest(0, ceil(extract(epoch FROM expires_at - now()) * 1000))::bigint
                         FROM leases WHERE backend = ANY($1)",
                        &[&still],
                    )
                    .await?;
                let mut state = shared.lock();
                for r in &rows {
                    let backend: String = r.get(0);
                    let holder: String = r.get(1);
                    let left =
                        Duration::from_millis(u64::try_from(r.get::<_, i64>(2)).unwrap_or(0));
                    // A little past the expiry: the server's `<=` then holds.
                    let at = left + Duration::from_millis(20);
                    round.next = Some(round.next.map_or(at, |n| n.min(at)));
                    state.others.insert(backend.into(), holder);
                }
            }
        }
        // Renewals are due a third of the lease after this one, and no
        // later than a held lease's local deadline.
        let third = shared.lease / 3;
        round.next = Some(round.next.map_or(third, |n| n.min(third)));
        if let Some(d) = self.next_deadline() {
            round.next = round.next.map(|n| n.min(d));
        }
        Ok(round)
    }

    /// Hands `backend`'s lease (epoch `epoch`, renewed at `renewed`) to the
    /// first supervisor still waiting; `false` (and released) when none is.
    fn grant(&self, backend: &Arc<str>, epoch: i64, renewed: Instant) -> bool {
        let shared = &self.shared;
        let mut state = shared.lock();
        state.others.remove(backend);
        while let Some(waiter) = state.wanted.get_mut(backend).and_then(VecDeque::pop_front) {
            let lost = CancellationToken::new();
            let lease = Lease::new(
                backend.clone(),
                lost.clone(),
                Some(Box::new(Release {
                    shared: Arc::downgrade(shared),
                    backend: backend.clone(),
                    epoch,
                })),
            );
            state.held.insert(
                backend.clone(),
                Held {
                    epoch,
                    renewed,
                    lost,
                },
            );
            // Sent without the lock: a refused lease drops its `Release`,
            // which takes it.
            drop(state);
            match waiter.send(lease) {
                Ok(()) => {
                    tracing::info!(backend = %backend, epoch, "supervision lease taken");
                    crate::metrics::get().lease_held(backend, true);
                    return true;
                }
                Err(refused) => {
                    drop(refused); // released, for the next round
                    state = shared.lock();
                    // Taken back from `released` for the next waiter.
                    state
                        .released
                        .retain(|(b, e)| !(b == backend && *e == epoch));
                    if state.wanted.get(backend).is_some_and(|w| !w.is_empty()) {
                        continue;
                    }
                    state.released.push((backend.clone(), epoch));
                    return false;
                }
            }
        }
        state.released.push((backend.clone(), epoch));
        false
    }

    async fn release(&self, released: &[(Arc<str>, i64)]) -> Result<(), tokio_postgres::Error> {
        if released.is_empty() {
            return Ok(());
        }
        let client = match self.shared.pool.get().await {
            Ok(c) => c,
            Err(deadpool_postgres::PoolError::Backend(e)) => return Err(e),
            Err(_) => return Ok(()), // they run out by themselves
        };
        release_with(&client, &self.shared.replica, released).await
    }
}

/// Expires the leases `released` names now, if this replica still holds
/// them at those epochs.
async fn release_with(
    client: &deadpool_postgres::Client,
    replica: &str,
    released: &[(Arc<str>, i64)],
) -> Result<(), tokio_postgres::Error> {
    let (backends, epochs): (Vec<String>, Vec<i64>) =
        released.iter().map(|(b, e)| (b.to_string(), *e)).unzip();
    client
        .execute(
            "UPDATE leases l SET expires_at = now()
             FROM unnest($2::text[], $3::bigint[]) AS r(backend, epoch)
             WHERE l.backend = r.backend AND l.epoch = r.epoch AND l.holder = $1",
            &[&replica, &backends, &epochs],
        )
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests;
