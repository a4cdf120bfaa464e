//! Two replicas' stores on one real PostgreSQL database: what one writes
//! and announces, the other's listener hands to its feed.

use std::time::Duration;

use tokio::time::timeout;

use super::*;
use crate::cluster::feed::{Feed, Heard};
use crate::health::{HealthState, Transition};
use crate::store::pg_test;
use crate::store::{HealthStore, HealthWrite, InstanceRecord};

const PATIENCE: Duration = Duration::from_secs(20);

fn transition(backend: &str, reason: &str) -> Transition {
    Transition {
        backend: backend.into(),
        from: HealthState::Running,
        to: HealthState::Restarting,
        reason: reason.into(),
        at: std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
    }
}

/// Replica `b`'s feed, its listener running; and replica `a`'s store.
async fn two() -> Option<(
    PostgresStore,
    Arc<LocalFeed>,
    tokio_postgres::Config,
    CancellationToken,
)> {
    let mut config = pg_test::fresh_database().await?;
    let a = PostgresStore::connect(&config)
        .await
        .unwrap()
        .announcing_as("vigil-a");
    let b = PostgresStore::connect(&config)
        .await
        .unwrap()
        .announcing_as("vigil-b");
    let (feed, _updates) = LocalFeed::new();
    std::mem::forget(_updates);
    config.application_name("listener-of-b");
    let stop = CancellationToken::new();
    tokio::spawn(
        Listener {
            config: config.clone(),
            store: b,
            replica: "vigil-b".into(),
            feed: feed.clone(),
            book: None,
            route: None,
            commands: None,
            retries: None,
            approvals: Default::default(),
        }
        .run(stop.clone()),
    );
    Some((a, feed, config, stop))
}

async fn heard_change(heard: &mut tokio::sync::watch::Receiver<Heard>) -> Heard {
    timeout(PATIENCE, heard.changed())
        .await
        .expect("heard")
        .unwrap();
    *heard.borrow_and_update()
}

#[tokio::test]
async fn what_one_replica_writes_the_other_hears_with_its_transitions() {
    let Some((a, feed, _config, _stop)) = two().await else {
        return;
    };
    let mut heard = feed.heard("files");
    // Listening has begun once the first "look again" arrives.
    heard_change(&mut heard).await;
    let mut events = feed.transitions();
    let mut own = feed.own_transitions();
    a.write(vec![
        HealthWrite::Transition(transition("files", "exited with code 1")),
        HealthWrite::Instance(InstanceRecord {
            backend: "files".into(),
            state: HealthState::Restarting,
            restart_count: 3,
            consecutive_failures: 1,
            quarantine_reason: None,
            updated_at: std::time::SystemTime::UNIX_EPOCH,
        }),
    ])
    .await
    .unwrap();
    let t = timeout(PATIENCE, events.recv())
        .await
        .expect("an event")
        .unwrap();
    assert_eq!(t, transition("files", "exited with code 1"));
    let h = heard_change(&mut heard).await;
    assert!(h.health >= 2, "{h:?}");
    assert!(own.try_recv().is_err(), "not this replica's own");
    // A listing note.
    a.notify(&Note::Listing {
        r: "vigil-a".into(),
        b: "files".into(),
    })
    .await
    .unwrap();
    let before = h.listing;
    assert_eq!(heard_change(&mut heard).await.listing, before + 1);
}

#[tokio::test]
async fn a_replica_does_not_hear_itself() {
    let Some((a, feed, config, _stop)) = two().await else {
        return;
    };
    let mut heard = feed.heard("files");
    let baseline = heard_change(&mut heard).await;
    let mut events = feed.transitions();
    let own = PostgresStore::connect(&config)
        .await
        .unwrap()
        .announcing_as("vigil-b");
    own.write(vec![HealthWrite::Transition(transition("files", "own"))])
        .await
        .unwrap();
    a.write(vec![HealthWrite::Transition(transition("files", "a's"))])
        .await
        .unwrap();
    // Notes arrive in commit order: the first one handed on is a's.
    let first = timeout(PATIENCE, events.recv())
        .await
        .expect("an event")
        .unwrap();
    assert_eq!(first.reason, "a's");
    assert_eq!(heard_change(&mut heard).await.health, baseline.health + 1);
}

#[tokio::test]
async fn a_broken_listening_connection_comes_back_and_says_look_again() {
    let Some((a, feed, config, _stop)) = two().await else {
        return;
    };
    let mut heard = feed.heard("files");
    heard_change(&mut heard).await;
    // The server ends the listener's connection (a restart, a failover).
    let (client, conn) = config
        .clone()
        .application_name("test")
        .connect(NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let ended = client
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'listener-of-b'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(ended.get::<_, i64>(0), 1);
    // Listening again, it tells followers to look again…
    heard_change(&mut heard).await;
    // …and hears notes again.
    let mut events = feed.transitions();
    a.write(vec![HealthWrite::Transition(transition("files", "after"))])
        .await
        .unwrap();
    let t = timeout(PATIENCE, events.recv())
        .await
        .expect("heard again")
        .unwrap();
    assert_eq!(t.reason, "after");
}
