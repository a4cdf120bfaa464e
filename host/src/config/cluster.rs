//! `[cluster]`: what makes one Vigil process a replica among several that
//! share a PostgreSQL store (`[store] url_env`): its name, the key every
//! replica seals session ids with, and the supervision lease.
//!
//! Keys are read from environment variables when the config is (like the
//! store's URL), never from the file: a config file is often committed, and
//! a key in it would let anyone who reads it forge session ids.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use base64::Engine as _;
use serde::Deserialize;

use super::Problems;
use crate::cluster::replica::ReplicaId;
use crate::cluster::session_id::Key;

/// `[cluster]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// `replica`: this replica's name, unique among the replicas sharing
    /// the store. Default: the host name and the listen port
    /// (`vigil-0-8080`), with anything but letters, digits, `-` and `_`
    /// turned into `-`.
    pub replica: ReplicaId,
    /// Whether `replica` was written in the file (else it was derived).
    pub replica_named: bool,
    /// `key_env` (and the key its variable holds): the key every replica
    /// seals session ids with. `None`: the key kept in `data_dir`, which
    /// no other replica shares.
    pub key: Option<ClusterKey>,
    /// `previous_key_env`: a key still accepted when opening ids (a
    /// rotation), never used to seal.
    pub previous_key: Option<ClusterKey>,
    /// `lease`: how long a supervision lease lasts without renewal; another
    /// replica takes over a backend within it when its supervisor dies.
    /// Renewed every third of it. Default `10s`, at least `2s`.
    pub lease: Duration,
}

/// A cluster key, as read from the variable that holds it. `Debug` names
/// the variable, never the key.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterKey {
    pub var: String,
    pub key: Key,
}

impl fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterKey")
            .field("var", &self.var)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCluster {
    pub replica: Option<String>,
    pub key_env: Option<String>,
    pub previous_key_env: Option<String>,
    pub lease: Option<String>,
}

/// The shortest lease: renewals every third of it must fit in a store
/// round trip with room to spare.
const MIN_LEASE: Duration = Duration::from_secs(2);

/// How a key is written, for messages.
const KEY_FORM: &str =
    "32 random bytes as 64 hex digits (make one with `openssl rand -hex 32`) or as base64";

impl Problems {
    pub(super) fn cluster(
        &mut self,
        raw: Option<RawCluster>,
        listen: SocketAddr,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> ClusterConfig {
        let raw = raw.unwrap_or_default();
        let (replica, replica_named) = match raw.replica {
            Some(name) => match ReplicaId::new(name.trim()) {
                Ok(id) => (id, true),
                Err(e) => {
                    self.add(
                        "cluster.replica",
                        format!("`{name}` is not a replica name: {e}; e.g. \"vigil-a\""),
                    );
                    (default_replica(listen), true)
                }
            },
            None => (default_replica(listen), false),
        };
        let key = raw
            .key_env
            .as_deref()
            .and_then(|var| self.cluster_key("cluster.key_env", var, env, true));
        let previous_key = raw
            .previous_key_env
            .as_deref()
            .and_then(|var| self.cluster_key("cluster.previous_key_env", var, env, false));
        if previous_key.is_some() && key.is_none() && raw.key_env.is_none() {
            self.add(
                "cluster.previous_key_env",
                "is set but key_env is not: a previous key is the one a rotation replaces; set key_env to the new key",
            );
        }
        let lease = self.duration("cluster.lease", raw.lease, "10s");
        if lease < MIN_LEASE {
            self.add(
                "cluster.lease",
                format!(
                    "`{}` is too short: a lease is renewed every third of it, which must leave room for a store round trip; use at least 2s",
                    humantime::format_duration(lease)
                ),
            );
        }
        ClusterConfig {
            replica,
            replica_named,
            key,
            previous_key,
            lease: lease.max(MIN_LEASE),
        }
    }

    /// The key in `var`; `None` (with a problem when `required`) when it is
    /// unset, or bad (a problem naming the variable, never its value).
    fn cluster_key(
        &mut self,
        key: &str,
        var: &str,
        env: &dyn Fn(&str) -> Option<String>,
        required: bool,
    ) -> Option<ClusterKey> {
        if var.trim().is_empty() {
            self.add(
                key,
                "must not be empty: name the environment variable that holds the key, e.g. \"VIGIL_CLUSTER_KEY\"",
            );
            return None;
        }
        let Some(value) = env(var).filter(|v| !v.trim().is_empty()) else {
            if required {
                self.add(
                    key,
                    format!(
                        "names `{var}`, which is unset or empty: set it to {KEY_FORM}, the same on every replica"
                    ),
                );
            }
            return None;
        };
        match parse_key(value.trim()) {
            Some(k) => Some(ClusterKey {
                var: var.to_owned(),
                key: k,
            }),
            None => {
                self.add(
                    key,
                    format!("`{var}` does not hold a key: set it to {KEY_FORM}"),
                );
                None
            }
        }
    }
}

/// 32 bytes from 64 hex digits or base64 (standard or URL-safe, padded or
/// not).
fn parse_key(text: &str) -> Option<Key> {
    let bytes = if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        hex::decode(text).ok()?
    } else {
        use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
        let unpadded = text.trim_end_matches('=');
        STANDARD_NO_PAD
            .decode(unpadded)
            .or_else(|_| URL_SAFE_NO_PAD.decode(unpadded))
            .ok()?
    };
    Key::try_from(bytes.as_slice()).ok()
}

/// The host name and the listen port, as a replica name.
fn default_replica(listen: SocketAddr) -> ReplicaId {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "vigil".to_owned());
    let mut name: String = format!("{host}-{}", listen.port())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    name.truncate(crate::cluster::replica::MAX_LEN);
    ReplicaId::new(&name).unwrap_or_else(|_| ReplicaId::new("vigil").expect("a valid id"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: RawCluster, vars: &[(&str, &str)]) -> (ClusterConfig, Vec<String>) {
        let mut p = Problems::default();
        let env = |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        };
        let c = p.cluster(Some(raw), "127.0.0.1:8080".parse().unwrap(), &env);
        (
            c,
            p.0.iter()
                .map(|x| format!("{}: {}", x.key, x.message))
                .collect(),
        )
    }

    const HEX: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

    #[test]
    fn keys_are_read_from_their_variables_in_hex_or_base64() {
        let b64 = base64::engine::general_purpose::STANDARD.encode([7u8; 32]);
        let (c, problems) = parse(
            RawCluster {
                key_env: Some("K".into()),
                previous_key_env: Some("OLD".into()),
                replica: Some("vigil-a".into()),
                lease: Some("6s".into()),
            },
            &[("K", HEX), ("OLD", &b64)],
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(c.key.as_ref().unwrap().key[31], 0x1f);
        assert_eq!(c.previous_key.as_ref().unwrap().key, [7u8; 32]);
        assert_eq!(c.replica.as_str(), "vigil-a");
        assert_eq!(c.lease, Duration::from_secs(6));
        // Debug names the variable only.
        let shown = format!("{:?}", c.key.unwrap());
        assert!(shown.contains("\"K\"") && !shown.contains("1f"), "{shown}");
    }

    #[test]
    fn bad_keys_names_and_leases_say_what_to_do() {
        let (_, problems) = parse(
            RawCluster {
                key_env: Some("K".into()),
                previous_key_env: None,
                replica: Some("a.b".into()),
                lease: Some("1s".into()),
            },
            &[("K", "sekrit-value")],
        );
        let all = problems.join("\n");
        assert!(
            all.contains("cluster.key_env: `K` does not hold a key"),
            "{all}"
        );
        assert!(all.contains("openssl rand -hex 32"), "{all}");
        assert!(!all.contains("sekrit"), "never the value: {all}");
        assert!(all.contains("cluster.replica: `a.b`"), "{all}");
        assert!(all.contains("cluster.lease: `1s` is too short"), "{all}");
        let (_, unset) = parse(
            RawCluster {
                key_env: Some("MISSING".into()),
                ..RawCluster::default()
            },
            &[],
        );
        assert_eq!(unset.len(), 1);
        assert!(unset[0].contains("`MISSING`, which is unset"), "{unset:?}");
    }

    #[test]
    fn the_default_replica_name_is_the_host_and_port() {
        let (c, problems) = parse(RawCluster::default(), &[]);
        assert!(problems.is_empty());
        assert!(!c.replica_named);
        assert!(c.replica.as_str().ends_with("-8080"), "{}", c.replica);
        assert_eq!(c.lease, Duration::from_secs(10));
        assert!(c.key.is_none());
    }
}
