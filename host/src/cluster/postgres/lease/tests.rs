//! Leases between replicas on a real PostgreSQL (`store::pg_test`): each
//! test a fresh database, two or three [`PgLeases`] on it as replicas.

use std::time::Duration;

use futures::FutureExt as _;
use tokio::time::timeout;

use super::*;
use crate::store::pg_test;
use crate::store::postgres::PostgresStore;

/// How long a test waits for what must happen (never a bound on how soon).
const PATIENCE: Duration = Duration::from_secs(20);

struct Replicas {
    store: PostgresStore,
}

impl Replicas {
    async fn new() -> Option<Replicas> {
        let config = pg_test::fresh_database().await?;
        let store = PostgresStore::connect(&config).await.unwrap();
        Some(Replicas { store })
    }

    /// Replica `name`'s leases, its task running until the token.
    fn replica(&self, name: &str, lease: Duration) -> (PgLeases, CancellationToken) {
        Self::run(PgLeases::new(
            self.store.pool().clone(),
            "test",
            name,
            lease,
        ))
    }

    fn run(leases: PgLeases) -> (PgLeases, CancellationToken) {
        let stop = CancellationToken::new();
        tokio::spawn(leases.clone().run(stop.clone()));
        (leases, stop)
    }

    /// Replica `name`'s leases through a login role of its own, whose
    /// rights a test can take away (a store that refuses its renewals).
    async fn replica_as_role(
        &self,
        config: &tokio_postgres::Config,
        name: &str,
        lease: Duration,
    ) -> (PgLeases, CancellationToken, String) {
        let db = config.get_dbname().unwrap().to_owned();
        let role = format!("r_{db}_{}", name.replace('-', "_"));
        let client = self.store.pool().get().await.unwrap();
        client
            .batch_execute(&format!(
                "CREATE ROLE {role} LOGIN; GRANT SELECT, INSERT, UPDATE ON leases TO {role};"
            ))
            .await
            .unwrap();
        let mut config = config.clone();
        config.user(&role);
        let pool = deadpool_postgres::Pool::builder(deadpool_postgres::Manager::new(
            config,
            tokio_postgres::NoTls,
        ))
        .max_size(2)
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .unwrap();
        let (leases, stop) = Self::run(PgLeases::new(pool, "test", name, lease));
        (leases, stop, role)
    }

    async fn row(&self, backend: &str) -> (String, i64) {
        let client = self.store.pool().get().await.unwrap();
        let row = client
            .query_one(
                "SELECT holder, epoch FROM leases WHERE backend = $1",
                &[&backend],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    }
}

#[tokio::test]
async fn one_replica_holds_a_lease_and_the_next_takes_it_when_it_is_dropped() {
    let Some(r) = Replicas::new().await else {
        return;
    };
    let (a, _sa) = r.replica("vigil-a", Duration::from_secs(30));
    let (b, _sb) = r.replica("vigil-b", Duration::from_secs(30));
    let held = timeout(PATIENCE, a.acquire("files"))
        .await
        .expect("granted");
    assert_eq!(r.row("files").await, ("vigil-a".into(), 1));
    let mut waiting = Box::pin(b.acquire("files"));
    assert!((&mut waiting).now_or_never().is_none(), "asked");
    // b waits while a holds it (a whole round of b's included).
    b.round().await.unwrap();
    assert!((&mut waiting).now_or_never().is_none(), "held by a");
    assert_eq!(b.holder("files").as_deref(), Some("vigil-a"));
    // Another backend is b's at once.
    let other = timeout(PATIENCE, b.acquire("notes")).await.expect("free");
    assert_eq!(&**other.backend(), "notes");
    drop(held);
    let taken = timeout(PATIENCE, waiting).await.expect("released to b");
    assert!(!taken.is_lost());
    assert_eq!(r.row("files").await, ("vigil-b".into(), 2), "a new epoch");
    assert_eq!(a.holder("files").as_deref(), None, "a no longer holds it");
}

#[tokio::test]
async fn a_replica_whose_renewals_fail_stops_acting_before_another_takes_over() {
    let Some(config) = pg_test::fresh_database().await else {
        return;
    };
    let r = Replicas {
        store: PostgresStore::connect(&config).await.unwrap(),
    };
    let lease = Duration::from_secs(2);
    let (a, _sa, role) = r.replica_as_role(&config, "vigil-a", lease).await;
    let (b, _sb) = r.replica("vigil-b", lease);
    let held = timeout(PATIENCE, a.acquire("files"))
        .await
        .expect("granted");
    let waiting = tokio::spawn({
        let b = b.clone();
        async move {
            let lease = b.acquire("files").await;
            (Instant::now(), lease)
        }
    });
    // The store refuses a's renewals from now on (a partition would do
    // the same): a keeps trying, and must stop acting on its own.
    let client = r.store.pool().get().await.unwrap();
    client
        .batch_execute(&format!("REVOKE UPDATE ON leases FROM {role}"))
        .await
        .unwrap();
    let lost_at = timeout(PATIENCE, held.lost())
        .await
        .map(|()| Instant::now())
        .expect("a stops acting");
    let (taken_at, taken) = timeout(PATIENCE, waiting).await.unwrap().unwrap();
    assert!(lost_at <= taken_at, "a stopped acting before b started");
    assert_eq!(&**taken.backend(), "files");
    assert_eq!(r.row("files").await, ("vigil-b".into(), 2));
    // And the store's order agrees: b's lease began after a's ran out.
    let row = client
        .query_one(
            "SELECT taken_from, acquired_at >= previous_expires_at FROM leases WHERE backend = 'files'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "vigil-a");
    assert!(row.get::<_, bool>(1), "taken after it ran out");
}

#[tokio::test]
async fn a_dead_holder_is_replaced_only_after_its_lease_ran_out() {
    let Some(r) = Replicas::new().await else {
        return;
    };
    // A holder that died: a row no task renews, expiring in 1.5 s by the
    // server's clock.
    let client = r.store.pool().get().await.unwrap();
    client
        .execute(
            "INSERT INTO leases VALUES ('files', 'vigil-dead', 7, now() + interval '1500 ms', now())",
            &[],
        )
        .await
        .unwrap();
    let (b, _sb) = r.replica("vigil-b", Duration::from_secs(3));
    let lease = timeout(PATIENCE, b.acquire("files")).await.expect("taken");
    assert_eq!(&**lease.backend(), "files");
    let row = client
        .query_one(
            "SELECT holder, epoch, taken_from, acquired_at >= previous_expires_at
             FROM leases WHERE backend = 'files'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "vigil-b");
    assert_eq!(
        row.get::<_, i64>(1),
        8,
        "the epoch goes on from the dead holder's"
    );
    assert_eq!(row.get::<_, String>(2), "vigil-dead");
    assert!(row.get::<_, bool>(3), "taken only after it ran out");
}

#[tokio::test]
async fn a_lease_taken_over_in_the_store_is_lost_at_the_next_renewal() {
    let Some(r) = Replicas::new().await else {
        return;
    };
    let (a, _sa) = r.replica("vigil-a", Duration::from_secs(30));
    let held = timeout(PATIENCE, a.acquire("files"))
        .await
        .expect("granted");
    // An operator (or a replica that believed it expired) takes it.
    let client = r.store.pool().get().await.unwrap();
    client
        .execute(
            "UPDATE leases SET holder = 'vigil-c', epoch = epoch + 1 WHERE backend = 'files'",
            &[],
        )
        .await
        .unwrap();
    let round = a.round().await.unwrap();
    assert_eq!(round.lost, vec![Arc::<str>::from("files")]);
    assert!(held.is_lost());
    // Dropping it now releases nothing of vigil-c's.
    drop(held);
    a.round().await.unwrap();
    assert_eq!(r.row("files").await, ("vigil-c".into(), 2));
}

#[tokio::test]
async fn an_abandoned_acquire_leaves_no_lease_held() {
    let Some(r) = Replicas::new().await else {
        return;
    };
    let (a, _sa) = r.replica("vigil-a", Duration::from_secs(30));
    let (b, _sb) = r.replica("vigil-b", Duration::from_secs(30));
    // a asks, then gives up before its task runs a round.
    drop(a.acquire("files").now_or_never());
    a.round().await.unwrap();
    let lease = timeout(PATIENCE, b.acquire("files"))
        .await
        .expect("free for b");
    assert_eq!(&**lease.backend(), "files");
}

#[tokio::test]
async fn shutting_down_hands_the_leases_over_at_once() {
    let Some(r) = Replicas::new().await else {
        return;
    };
    let (a, stop_a) = r.replica("vigil-a", Duration::from_secs(60));
    let (b, _sb) = r.replica("vigil-b", Duration::from_secs(60));
    let held = timeout(PATIENCE, a.acquire("files"))
        .await
        .expect("granted");
    let waiting = tokio::spawn({
        let b = b.clone();
        async move { b.acquire("files").await }
    });
    b.round().await.unwrap();
    stop_a.cancel();
    timeout(PATIENCE, held.lost())
        .await
        .expect("lost at shutdown");
    // b's next round (a third of 60 s away) is brought forward by hand:
    // what matters is that the row is free now, not after 60 s.
    let deadline = Instant::now() + PATIENCE;
    loop {
        b.round().await.unwrap();
        if waiting.is_finished() || Instant::now() > deadline {
            break;
        }
        tokio::task::yield_now().await;
    }
    let taken = timeout(PATIENCE, waiting).await.unwrap().unwrap();
    assert_eq!(&**taken.backend(), "files");
}
