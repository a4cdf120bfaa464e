//! The PostgreSQL store: the store suite (`store::suite`) on a fresh
//! database of the test binary's cluster (`store::pg_test`), then what
//! only this store has — its migrations, replicas opening it together,
//! its errors, rows a hand-edited database holds.

use std::sync::Arc;

use tokio::sync::OnceCell;

use super::*;
use crate::health::HealthState;
use crate::store::pg_test;
use crate::store::suite::{self, Fixture, instance, transition};
use crate::store::{StoreErrorKind, Stores};

/// The suite's fixture: a database of its own, created on the first
/// `open` and connected to again by each.
struct PgFixture(OnceCell<tokio_postgres::Config>);

impl PgFixture {
    /// `None` when PostgreSQL is not installed (and `CI` is not set).
    fn new() -> Option<PgFixture> {
        pg_test::cluster().map(|_| PgFixture(OnceCell::new()))
    }

    async fn config(&self) -> &tokio_postgres::Config {
        self.0
            .get_or_init(|| async { pg_test::fresh_database().await.expect("cluster is up") })
            .await
    }
}

#[async_trait]
impl Fixture for PgFixture {
    async fn open(&self) -> Stores {
        let store = PostgresStore::connect(self.config().await).await.unwrap();
        Stores::of(Arc::new(store))
    }
}

/// The store contract (`store::suite`), on PostgreSQL.
mod contract {
    use super::*;

    suite::store_suite!(if_some PgFixture::new());
}

/// A fresh database, or `None` to skip (see `pg_test::cluster`).
async fn database() -> Option<tokio_postgres::Config> {
    pg_test::fresh_database().await
}

/// A plain connection, for what no Vigil writes.
async fn raw(config: &tokio_postgres::Config) -> tokio_postgres::Client {
    let (client, conn) = config.connect(NoTls).await.unwrap();
    tokio::spawn(conn);
    client
}

#[tokio::test]
async fn migrations_are_recorded_once_and_reopening_applies_nothing() {
    let Some(config) = database().await else {
        return;
    };
    PostgresStore::connect(&config).await.unwrap();
    PostgresStore::connect(&config).await.unwrap();
    let versions: Vec<i32> = raw(&config)
        .await
        .query(
            "SELECT version FROM schema_migrations ORDER BY version",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let want: Vec<i32> = (1..=MIGRATIONS.len() as i32).collect();
    assert_eq!(versions, want);
}

/// Replicas starting together: every one opens the store, the schema is
/// migrated once (the advisory lock), and none fails on another's tables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_opening_a_new_database_together_migrate_it_once() {
    let Some(config) = database().await else {
        return;
    };
    let opens: Vec<_> = (0..6)
        .map(|_| {
            let config = config.clone();
            tokio::spawn(async move { PostgresStore::connect(&config).await.map(|_| ()) })
        })
        .collect();
    for open in opens {
        open.await.unwrap().unwrap();
    }
    let applied: i64 = raw(&config)
        .await
        .query_one("SELECT count(*) FROM schema_migrations", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(applied, MIGRATIONS.len() as i64);
}

#[tokio::test]
async fn a_database_migrated_by_a_newer_vigil_is_refused() {
    let Some(config) = database().await else {
        return;
    };
    PostgresStore::connect(&config).await.unwrap();
    raw(&config)
        .await
        .execute("INSERT INTO schema_migrations (version) VALUES (999)", &[])
        .await
        .unwrap();
    let e = PostgresStore::connect(&config).await.unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Corrupt);
    assert!(e.to_string().contains("999"), "{e}");
    assert!(e.fix().unwrap().contains("newer Vigil"), "{e:?}");
}

/// A port of 127.0.0.1 nobody listens on, and a URL with a password
/// naming it.
fn nobody_listening() -> (u16, tokio_postgres::Config) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = format!("postgres://vigil:s3cret-pw@127.0.0.1:{port}/vigil?connect_timeout=2")
        .parse()
        .unwrap();
    (port, config)
}

/// A server that is not there is unavailable, and the message names it
/// (never a password) with what to check.
#[tokio::test]
async fn a_server_that_cannot_be_reached_is_unavailable() {
    let (port, config) = nobody_listening();
    let e = PostgresStore::connect(&config).await.unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Unavailable, "{e:?}");
    assert!(e.to_string().contains("refused"), "the socket's error: {e}");
    let text = format!("{e} {}", e.fix().unwrap());
    assert!(
        text.contains(&format!("postgres://vigil@127.0.0.1:{port}/vigil")),
        "{text}"
    );
    assert!(!text.contains("s3cret"), "{text}");
}

#[tokio::test]
async fn a_database_that_does_not_exist_is_unavailable_with_the_fix() {
    let Some(cluster) = pg_test::cluster() else {
        return;
    };
    let e = PostgresStore::connect(&cluster.config("no_such_db"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Unavailable, "{e:?}");
    assert!(e.fix().unwrap().contains("CREATE DATABASE"), "{e:?}");
    assert!(
        e.to_string()
            .contains(r#"database "no_such_db" does not exist"#),
        "the server's message, not only the driver's kind: {e}"
    );
    let driver = std::error::Error::source(&e)
        .and_then(|s| s.downcast_ref::<error::PgError>())
        .map(error::PgError::driver);
    assert_eq!(
        driver.and_then(|d| d.code()),
        Some(&tokio_postgres::error::SqlState::INVALID_CATALOG_NAME)
    );
}

/// A row with a state a newer Vigil wrote costs only that row.
#[tokio::test]
async fn rows_this_build_cannot_read_are_skipped_and_reported() {
    let Some(config) = database().await else {
        return;
    };
    let s = PostgresStore::connect(&config).await.unwrap();
    let stores = Stores::of(Arc::new(s));
    suite::save(&stores, instance("alpha", HealthState::Running)).await;
    suite::record(
        &stores,
        transition("alpha", HealthState::Running, HealthState::Offline, 1),
    )
    .await;
    let db = raw(&config).await;
    db.batch_execute(
        "INSERT INTO instances VALUES ('beta', 'paused', 0, 0, NULL, 1);
         INSERT INTO transitions (backend, from_state, to_state, reason, at)
             VALUES ('alpha', 'running', 'paused', 'new', 2);
         INSERT INTO audit (principal, action, target, outcome, at)
             VALUES ('ops', 'restart', 'alpha', 'ok', -5);
         INSERT INTO calls (at, principal, backend, method, name, outcome, duration_us, arguments)
             VALUES (1, 'local', 'files', 'tools/teleport', 'x', 'ok', 1, NULL),
                    (1, 'local', 'files', 'tools/call', 'y', 'ok', 1, '{not json');",
    )
    .await
    .unwrap();

    let instances = stores.health.load_instances().await.unwrap();
    assert_eq!(instances.rows.len(), 1);
    assert_eq!(
        instances.skipped[0].to_string(),
        "instances row of backend `beta`: state `paused` is not a state this build knows (written by a newer Vigil?)"
    );
    let history = stores.health.transitions("alpha", 10).await.unwrap();
    assert_eq!((history.rows.len(), history.skipped.len()), (1, 1));
    assert_eq!(history.skipped[0].column, "to_state");
    let actions = stores.actions.list(10).await.unwrap();
    assert_eq!(actions.skipped[0].column, "at");
    let calls = stores.calls.query(&CallQuery::default()).await.unwrap();
    let columns: Vec<&str> = calls.skipped.iter().map(|s| s.column).collect();
    assert_eq!(columns, ["arguments", "method"], "newest first");
}

/// `store::open` with `[store] url_env` set: the PostgreSQL store; one
/// that cannot be reached at start is served without yet (its statements
/// fail as unavailable, and it is migrated once it answers), never a
/// refusal: replica-local backends are served meanwhile.
#[tokio::test]
async fn open_chooses_postgres_and_serves_while_it_is_down() {
    use crate::config::{StoreConfig, StoreUrl};
    let data_dir = std::path::Path::new("/nonexistent/vigil-data");
    let with = |config: tokio_postgres::Config, optional| StoreConfig {
        optional,
        url_env: Some("VIGIL_STORE_URL".into()),
        url: Some(StoreUrl {
            var: "VIGIL_STORE_URL".into(),
            config,
        }),
    };
    if let Some(config) = database().await {
        let stores = crate::store::open(data_dir, &with(config, false), "vigil-a")
            .await
            .unwrap()
            .expect("a store");
        assert!(stores.shared.as_ref().is_some_and(|s| s.is_migrated()));
        stores.actions.record(suite::audit_entry(1)).await.unwrap();
        assert_eq!(stores.actions.list(10).await.unwrap().rows.len(), 1);
    }

    let (port, down) = nobody_listening();
    for optional in [false, true] {
        let stores = crate::store::open(data_dir, &with(down.clone(), optional), "vigil-a")
            .await
            .unwrap_or_else(|e| panic!("a server that cannot be reached is waited for: {e}"))
            .expect("the store, not yet reached");
        let shared = stores.shared.clone().expect("the PostgreSQL store");
        assert!(!shared.is_migrated());
        let e = stores.actions.list(1).await.unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::Unavailable);
        let text = e.to_string();
        assert!(
            text.contains(&format!("127.0.0.1:{port}")) && !text.contains("s3cret"),
            "{text}"
        );
    }
}
