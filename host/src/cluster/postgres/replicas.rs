//! The replicas sharing the store: each one says it is alive, and which
//! configuration it serves, in `replicas`; each one reads who else is.
//!
//! A replica writes its row every third of the lease (its name, a random
//! id of this run, its version, a digest of what it serves —
//! [`crate::config::Config::serving_digest`] — and an expiry three leases
//! away), and reads every row not expired. What it read answers:
//!
//! - how many replicas are alive (rate limits are shared among them);
//! - which of them serve another configuration or run another version
//!   ([`ReplicaSet::warnings`], shown by `vigil status`, the instances
//!   API and the dashboard);
//! - whether another process uses this replica's name (a second run id in
//!   its row while this one is alive).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::store::postgres::PostgresStore;

/// One replica as read from the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Replica {
    pub replica: String,
    pub version: String,
    pub config_digest: String,
}

/// Who is alive, as last read; see the module doc.
pub struct ReplicaSet {
    store: PostgresStore,
    me: Replica,
    run: String,
    lease: Duration,
    read: Mutex<Read>,
}

#[derive(Default)]
struct Read {
    live: Vec<Replica>,
    /// Another process wrote this replica's row under another run id.
    twin: bool,
    /// The last read failed (the store is out of reach).
    stale: bool,
    /// Other live replicas' instances of their replica-local backends
    /// (`NAME.REPLICA`), as they recorded them.
    elsewhere: Vec<crate::store::InstanceRecord>,
}

impl ReplicaSet {
    pub fn new(
        store: PostgresStore,
        replica: &str,
        config_digest: &str,
        lease: Duration,
    ) -> Arc<ReplicaSet> {
        let mut run = [0u8; 8];
        let _ = getrandom::fill(&mut run);
        let me = Replica {
            replica: replica.to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            config_digest: config_digest.to_owned(),
        };
        Arc::new(ReplicaSet {
            store,
            read: Mutex::new(Read {
                live: vec![me.clone()],
                ..Read::default()
            }),
            me,
            run: hex::encode(run),
            lease,
        })
    }

    fn read(&self) -> std::sync::MutexGuard<'_, Read> {
        self.read.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The replicas alive as last read (this one always among them).
    pub fn live(&self) -> Vec<Replica> {
        self.read().live.clone()
    }

    /// Other live replicas' instances of their replica-local backends, as
    /// last read (at each heartbeat).
    pub fn instances_elsewhere(&self) -> Vec<crate::store::InstanceRecord> {
        self.read().elsewhere.clone()
    }

    /// How many replicas are alive (at least this one).
    pub fn count(&self) -> usize {
        self.read().live.len().max(1)
    }

    /// What an operator should know about the cluster: replicas serving
    /// another configuration or version, a second process under this
    /// replica's name.
    pub fn warnings(&self) -> Vec<String> {
        let read = self.read();
        let mut out = Vec::new();
        if read.twin {
            out.push(format!(
                "another process runs as replica `{}`: give every replica its own [cluster] replica name",
                self.me.replica
            ));
        }
        for r in read.live.iter().filter(|r| r.replica != self.me.replica) {
            if r.config_digest != self.me.config_digest {
                out.push(format!(
                    "replica `{}` serves another configuration than `{}` (backends, policies or naming differ: digest {} against {})",
                    r.replica,
                    self.me.replica,
                    short(&r.config_digest),
                    short(&self.me.config_digest)
                ));
            }
            if r.version != self.me.version {
                out.push(format!(
                    "replica `{}` runs Vigil {}, `{}` runs {}",
                    r.replica, r.version, self.me.replica, self.me.version
                ));
            }
        }
        out
    }

    /// Writes this replica's row and reads the others' (and the instances
    /// they record) every third of the lease, until `shutdown`; then
    /// removes its row.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut failing = false;
        loop {
            let ok = self.beat().await;
            crate::metrics::get().store_op("replica", ok.is_ok());
            match ok {
                Ok(()) => failing = false,
                Err(e) => {
                    self.read().stale = true;
                    if !failing {
                        tracing::warn!(error = %e, "cannot tell the other replicas this one is alive (or read theirs); keeping the last list read");
                        failing = true;
                    }
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(self.lease / 3) => {}
            }
        }
        if let Ok(client) = self.store.pool().get().await {
            let _ = client
                .execute(
                    "DELETE FROM replicas WHERE replica = $1 AND run = $2",
                    &[&self.me.replica, &self.run],
                )
                .await;
        }
    }

    /// One write and one read.
    pub async fn beat(&self) -> Result<(), tokio_postgres::Error> {
        let client = match self.store.pool().get().await {
            Ok(c) => c,
            Err(deadpool_postgres::PoolError::Backend(e)) => return Err(e),
            Err(e) => {
                tracing::debug!(error = %e, "no store connection for the replica heartbeat");
                return Ok(());
            }
        };
        let ttl = i64::try_from((self.lease * 3).as_millis()).unwrap_or(i64::MAX);
        let previous: Option<String> = client
            .query_opt(
                "SELECT run FROM replicas WHERE replica = $1 AND expires_at > now()",
                &[&self.me.replica],
            )
            .await?
            .map(|r| r.get(0));
        client
            .execute(
                "INSERT INTO replicas AS r (replica, run, started_at, seen_at, expires_at, config_digest, version)
                 VALUES ($1, $2, now(), now(), now() + $3::bigint * interval '1 millisecond', $4, $5)
                 ON CONFLICT (replica) DO UPDATE SET
                     run = EXCLUDED.run,
                     started_at = CASE WHEN r.run = EXCLUDED.run THEN r.started_at ELSE now() END,
                     seen_at = now(),
                     expires_at = EXCLUDED.expires_at,
                     config_digest = EXCLUDED.config_digest,
                     version = EXCLUDED.version",
                &[&self.me.replica, &self.run, &ttl, &self.me.config_digest, &self.me.version],
            )
            .await?;
        let rows = client
            .query(
                "SELECT replica, version, config_digest FROM replicas WHERE expires_at > now() ORDER BY replica",
                &[],
            )
            .await?;
        let mut live: Vec<Replica> = rows
            .iter()
            .map(|r| Replica {
                replica: r.get(0),
                version: r.get(1),
                config_digest: r.get(2),
            })
            .collect();
        if !live.iter().any(|r| r.replica == self.me.replica) {
            live.push(self.me.clone());
        }
        crate::metrics::get()
            .replicas_seen
            .set(i64::try_from(live.len()).unwrap_or(i64::MAX));
        let twin = previous.is_some_and(|run| run != self.run);
        // A failed read keeps the last list: the beat itself went in.
        let elsewhere = self
            .store
            .instances_of_other_replicas(&self.me.replica)
            .await
            .inspect_err(
                |e| tracing::debug!(error = %e, "could not read the other replicas' instances"),
            )
            .ok();
        let mut read = self.read();
        if twin && !read.twin {
            tracing::error!(replica = %self.me.replica, "another process runs under this replica's name: leases and records of the two mix; give each replica its own [cluster] replica");
        }
        let elsewhere = elsewhere.unwrap_or_else(|| std::mem::take(&mut read.elsewhere));
        *read = Read {
            live,
            twin: twin || read.twin,
            stale: false,
            elsewhere,
        };
        Ok(())
    }
}

fn short(digest: &str) -> &str {
    digest.get(..12).unwrap_or(digest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::pg_test;

    #[tokio::test]
    async fn replicas_see_each_other_and_a_different_configuration() {
        let Some(config) = pg_test::fresh_database().await else {
            return;
        };
        let store = PostgresStore::connect(&config).await.unwrap();
        let lease = Duration::from_secs(10);
        let a = ReplicaSet::new(store.clone(), "vigil-a", "aaaa", lease);
        let b = ReplicaSet::new(store.clone(), "vigil-b", "aaaa", lease);
        let c = ReplicaSet::new(store.clone(), "vigil-c", "cccc", lease);
        for r in [&a, &b, &c] {
            r.beat().await.unwrap();
        }
        a.beat().await.unwrap();
        assert_eq!(a.count(), 3);
        let warnings = a.warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("`vigil-c` serves another configuration"),
            "{warnings:?}"
        );
        // A second process under b's name is told.
        let twin = ReplicaSet::new(store.clone(), "vigil-b", "aaaa", lease);
        twin.beat().await.unwrap();
        b.beat().await.unwrap();
        assert!(
            b.warnings()
                .iter()
                .any(|w| w.contains("another process runs as replica `vigil-b`"))
        );
        // A replica that stops is gone from the others' count.
        let stop = CancellationToken::new();
        stop.cancel();
        c.clone().run(stop).await;
        a.beat().await.unwrap();
        assert_eq!(a.count(), 2);
        assert!(a.warnings().is_empty());
    }
}
