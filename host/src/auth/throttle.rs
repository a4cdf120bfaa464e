//! [`Throttle`]: a cool-down for client addresses that keep sending
//! unknown credentials: tokens of the control API (`[api]
//! failed_token_limit`, `failed_token_window`, `failed_token_cooldown`) and
//! keys of `/mcp` (the same defaults), each listener with its own table.
//!
//! Each address has a fixed window that opens at its first failure; its
//! `limit`-th failure within the window locks it out for `cooldown`, during
//! which every request from it is refused before its token is even looked
//! at (so a guess cannot be confirmed meanwhile, and neither can the right
//! token). The window and the lock end by time alone; a success does not
//! reset them (a guesser sharing an address with a real user gains
//! nothing).
//!
//! A small keyed window rather than `governor`: governor's keyed limiter
//! counts every request against a rate, while this counts failures only,
//! holds a lock for a fixed time that answers even right tokens, and needs
//! its own bounded table anyway (governor's keyed store grows until
//! `retain_recent` is called).
//!
//! Memory is bounded: at most [`MAX_CLIENTS`] addresses are tracked (IPv6
//! by /64, which one host usually holds whole). When the table is full
//! and holds no expired entry, failures of untracked addresses share one
//! overflow entry, so a spray of addresses is still throttled, together.
//! Behind a reverse proxy every client has the proxy's address and shares
//! its cool-down.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::config::FailedTokens;
use crate::log_limit::LogLimit;

/// Addresses tracked at most.
pub const MAX_CLIENTS: usize = 4096;
/// At most one lockout warning per this interval (more are counted in it).
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Who failed: an IPv4 address, an IPv6 /64, or a request without a known
/// peer address (tests driving the router without a socket).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Client {
    V4([u8; 4]),
    V6Prefix([u8; 8]),
    Unknown,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Failures in the window that opened at `since`.
    failures: u32,
    since: Instant,
    locked_until: Option<Instant>,
}

struct Table {
    clients: HashMap<Client, Entry>,
    /// Shared by untracked addresses while `clients` is full.
    overflow: Option<Entry>,
    log: LogLimit,
}

/// The failed-credential cool-downs of one listener.
pub struct Throttle {
    policy: FailedTokens,
    /// The listener, for the lockout warning (`control API`, `/mcp`).
    what: &'static str,
    table: Mutex<Table>,
}

// === impl Client ===

impl Client {
    pub fn of(ip: IpAddr) -> Client {
        match ip.to_canonical() {
            IpAddr::V4(v4) => Client::V4(v4.octets()),
            IpAddr::V6(v6) => {
                let mut prefix = [0; 8];
                prefix.copy_from_slice(&v6.octets()[..8]);
                Client::V6Prefix(prefix)
            }
        }
    }
}

impl fmt::Display for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Client::V4(o) => write!(f, "{}", std::net::Ipv4Addr::from(*o)),
            Client::V6Prefix(p) => {
                let mut full = [0; 16];
                full[..8].copy_from_slice(p);
                write!(f, "{}/64", std::net::Ipv6Addr::from(full))
            }
            Client::Unknown => f.write_str("an unknown address"),
        }
    }
}

// === impl Entry ===

impl Entry {
    fn new(now: Instant) -> Self {
        Entry {
            failures: 0,
            since: now,
            locked_until: None,
        }
    }

    /// Neither locked nor inside its window: it holds nothing.
    fn expired(&self, now: Instant, window: Duration) -> bool {
        match self.locked_until {
            Some(until) => until <= now,
            None => self.since + window <= now,
        }
    }
}

// === impl Throttle ===

impl Throttle {
    /// Cool-downs under `policy`; `what` names the listener in the log.
    pub fn new(policy: FailedTokens, what: &'static str) -> Self {
        Throttle {
            policy,
            what,
            table: Mutex::new(Table {
                clients: HashMap::new(),
                overflow: None,
                log: LogLimit::new(LOG_EVERY),
            }),
        }
    }

    /// `Err(remaining)` while `client` is locked out.
    pub fn check(&self, client: Client, now: Instant) -> Result<(), Duration> {
        let table = self.lock();
        let full = table.clients.len() >= MAX_CLIENTS;
        let entry = match table.clients.get(&client) {
            Some(e) => Some(*e),
            None if full => table.overflow,
            None => None,
        };
        match entry.and_then(|e| e.locked_until) {
            Some(until) if until > now => Err(until - now),
            _ => Ok(()),
        }
    }

    /// Counts one unknown token from `client`; its `limit`-th failure in
    /// the window locks it out (and logs one rate-limited warning).
    pub fn failed(&self, client: Client, now: Instant) {
        let FailedTokens {
            limit,
            window,
            cooldown,
        } = self.policy;
        let mut table = self.lock();
        let table = &mut *table;
        if !table.clients.contains_key(&client) && table.clients.len() >= MAX_CLIENTS {
            table.clients.retain(|_, e| !e.expired(now, window));
        }
        let tracked = table.clients.contains_key(&client) || table.clients.len() < MAX_CLIENTS;
        let entry = if tracked {
            table
                .clients
                .entry(client)
                .or_insert_with(|| Entry::new(now))
        } else {
            table.overflow.get_or_insert_with(|| Entry::new(now))
        };
        if entry.expired(now, window) {
            *entry = Entry::new(now);
        }
        if entry.locked_until.is_some() {
            return; // refused by `check` before its token was looked at
        }
        entry.failures += 1;
        if entry.failures < limit {
            return;
        }
        entry.locked_until = Some(now + cooldown);
        let failures = entry.failures;
        if let Some(other_lockouts) = table.log.admit(now) {
            let address: &dyn fmt::Display = if tracked {
                &client
            } else {
                &"untracked addresses (the table of addresses is full)"
            };
            tracing::warn!(
                %address,
                failures,
                window = %humantime::format_duration(window),
                cooldown = %humantime::format_duration(cooldown),
                other_lockouts,
                "{}: too many failed token attempts; refusing the address for a cool-down",
                self.what
            );
        }
    }

    /// Addresses tracked now (for tests of the bound).
    #[cfg(test)]
    pub fn tracked(&self) -> usize {
        self.lock().clients.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        // The table is valid after any panic of a holder: every update is
        // one assignment.
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(limit: u32) -> FailedTokens {
        FailedTokens {
            limit,
            window: Duration::from_secs(60),
            cooldown: Duration::from_secs(30),
        }
    }

    const A: Client = Client::V4([127, 0, 0, 1]);
    const B: Client = Client::V4([127, 0, 0, 2]);

    /// ```text
    /// 0s  4 failures from A  -> still served
    /// 1s  5th failure        -> locked until 31s; B is served
    /// 30s                    -> A refused (1 s left)
    /// 31s                    -> A served again, with a fresh window
    /// ```
    #[test]
    fn the_limit_th_failure_locks_the_address_for_the_cooldown() {
        let t = Throttle::new(policy(5), "test");
        let t0 = Instant::now();
        for _ in 0..4 {
            t.failed(A, t0);
        }
        assert_eq!(t.check(A, t0), Ok(()));
        t.failed(A, t0 + Duration::from_secs(1));
        assert_eq!(
            t.check(A, t0 + Duration::from_secs(1)),
            Err(Duration::from_secs(30))
        );
        assert_eq!(t.check(B, t0 + Duration::from_secs(1)), Ok(()));
        // Failures during the lock do not extend it.
        t.failed(A, t0 + Duration::from_secs(20));
        assert_eq!(
            t.check(A, t0 + Duration::from_secs(30)),
            Err(Duration::from_secs(1))
        );
        assert_eq!(t.check(A, t0 + Duration::from_secs(31)), Ok(()));
        t.failed(A, t0 + Duration::from_secs(31));
        assert_eq!(
            t.check(A, t0 + Duration::from_secs(31)),
            Ok(()),
            "a fresh window"
        );
    }

    #[test]
    fn failures_spread_over_more_than_the_window_never_lock() {
        let t = Throttle::new(policy(3), "test");
        let t0 = Instant::now();
        for i in 0..10 {
            t.failed(A, t0 + Duration::from_secs(31 * i));
            assert_eq!(t.check(A, t0 + Duration::from_secs(31 * i)), Ok(()), "{i}");
        }
    }

    #[test]
    fn the_table_is_bounded_and_a_spray_shares_the_overflow() {
        let t = Throttle::new(policy(3), "test");
        let t0 = Instant::now();
        for i in 0..(MAX_CLIENTS as u32 + 5000) {
            t.failed(Client::V4((0x0a00_0000 + i).to_be_bytes()), t0);
        }
        assert_eq!(t.tracked(), MAX_CLIENTS);
        // The untracked thousands locked the overflow entry together.
        let untracked = Client::V4([192, 0, 2, 1]);
        assert!(t.check(untracked, t0).is_err());
        // Once their windows are over, entries are reclaimed for new addresses.
        let later = t0 + Duration::from_secs(61);
        t.failed(untracked, later);
        assert!(t.tracked() <= 1, "{}", t.tracked());
        assert_eq!(t.check(untracked, later), Ok(()));
    }

    #[test]
    fn ipv6_is_tracked_by_its_64_prefix_and_mapped_v4_as_v4() {
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        assert_eq!(Client::of(a), Client::of(b));
        assert_eq!(Client::of(a).to_string(), "2001:db8:1:2::/64");
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        assert_eq!(Client::of(mapped), A);
        assert_eq!(A.to_string(), "127.0.0.1");
    }
}
