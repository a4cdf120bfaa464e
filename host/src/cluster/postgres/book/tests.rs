//! Two replicas' books on one real PostgreSQL database (`store::pg_test`).

use super::*;
use crate::auth::Principal;
use crate::store::pg_test;

async fn two() -> Option<(PgBook, PgBook)> {
    let config = pg_test::fresh_database().await?;
    let store = PostgresStore::connect(&config).await.unwrap();
    let sealer = Sealer::new(&[5; 32], None);
    Some((
        PgBook::new(sealer.clone(), store.clone(), "vigil-a"),
        PgBook::new(sealer, store, "vigil-b"),
    ))
}

fn facts(local: &str) -> SessionFacts {
    SessionFacts::new(
        local.into(),
        Principal::key("bob").caller(),
        "2025-11-25".into(),
    )
}

#[tokio::test]
async fn a_session_closed_on_one_replica_is_closed_on_the_other() {
    let Some((a, b)) = two().await else {
        return;
    };
    let id = a.open(&facts("one")).await.unwrap();
    let other = a.open(&facts("two")).await.unwrap();
    assert!(b.resolve(&id).await.is_ok(), "b reads a's id");
    assert!(!b.closed_elsewhere(&b.resolve(&id).await.unwrap()).await);
    a.close(&id).await;
    assert_eq!(a.resolve(&id).await, Err(Refused::Closed));
    // b has not heard (no listener here): adoption asks the table.
    let f = b.resolve(&id).await.expect("b has not heard yet");
    assert!(b.closed_elsewhere(&f).await, "the table says closed");
    assert_eq!(
        b.resolve(&id).await,
        Err(Refused::Closed),
        "and b remembers"
    );
    // The other session is untouched.
    let f = b.resolve(&other).await.unwrap();
    assert!(!b.closed_elsewhere(&f).await);
    // A note heard closes at once, without the table.
    b.heard_closed("two", f.expires);
    assert_eq!(b.resolve(&other).await, Err(Refused::Closed));
}

#[tokio::test]
async fn what_a_session_kept_on_one_replica_is_read_on_another() {
    let Some((a, b)) = two().await else {
        return;
    };
    let id = a.open(&facts("one")).await.unwrap();
    assert_eq!(b.kept(&id).await.unwrap(), Kept::default());
    a.update(&id, Change::LogLevel("debug".into()))
        .await
        .unwrap();
    a.update(&id, Change::Subscribed("file:///a".into()))
        .await
        .unwrap();
    a.update(&id, Change::Subscribed("file:///b".into()))
        .await
        .unwrap();
    a.update(&id, Change::Subscribed("file:///a".into()))
        .await
        .unwrap();
    b.update(&id, Change::Unsubscribed("file:///a".into()))
        .await
        .unwrap();
    let kept = b.kept(&id).await.unwrap();
    assert_eq!(kept.log_level.as_deref(), Some("debug"));
    assert_eq!(
        kept.subscriptions.into_iter().collect::<Vec<_>>(),
        ["file:///b"]
    );
    // A level change keeps the subscriptions.
    b.update(&id, Change::LogLevel("error".into()))
        .await
        .unwrap();
    let kept = a.kept(&id).await.unwrap();
    assert_eq!(kept.log_level.as_deref(), Some("error"));
    assert_eq!(kept.subscriptions.len(), 1);
    // Closed: forgotten, and no change is taken.
    a.close(&id).await;
    assert_eq!(a.kept(&id).await, Err(Refused::Closed));
    let f = b.resolve(&id).await.unwrap();
    assert!(b.closed_elsewhere(&f).await);
    assert_eq!(b.kept(&id).await, Err(Refused::Closed));
}

#[tokio::test]
async fn expired_rows_are_pruned() {
    let Some((a, _b)) = two().await else {
        return;
    };
    let client = a.store.pool().get().await.unwrap();
    client
        .execute(
            "INSERT INTO sessions_closed VALUES ('old', 2000), ('new', $1)",
            &[&(i64::try_from(unix_now()).unwrap() + 3600)],
        )
        .await
        .unwrap();
    assert_eq!(a.prune().await.unwrap(), 1);
    let left: i64 = client
        .query_one("SELECT count(*) FROM sessions_closed", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 1);
}
