//! `[limits]`: what one backend or one client may cost Vigil.
//!
//! Each bound turns an attack or a broken peer into a clear error instead
//! of unbounded memory, descriptors or waiting: listings of a backend's
//! capabilities, per-session relay queues, client sessions, and the
//! connections of each listener.

use std::time::Duration;

use serde::Deserialize;

use super::Problems;

/// `[limits]` as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    pub list_pages: Option<u32>,
    pub list_items: Option<u64>,
    pub list_bytes: Option<u64>,
    pub relay_queue: Option<u32>,
    pub max_result_bytes: Option<u64>,
    pub max_sessions: Option<u32>,
    pub max_instances: Option<u32>,
    pub connections: Option<u32>,
    pub api_connections: Option<u32>,
    pub read_timeout: Option<String>,
    pub idle_timeout: Option<String>,
    pub write_timeout: Option<String>,
}

/// Bounds on one listing of a backend's capabilities (all kinds together).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListLimits {
    /// `list_pages`: pages per list method. Default 1,000.
    pub pages: u32,
    /// `list_items`: tools, resources, templates and prompts together.
    /// Default 50,000.
    pub items: usize,
    /// `list_bytes`: their size as JSON. Default 32 MiB.
    pub bytes: usize,
}

impl Default for ListLimits {
    fn default() -> Self {
        Self {
            pages: 1_000,
            items: 50_000,
            bytes: 32 * 1024 * 1024,
        }
    }
}

/// Bounds on one HTTP listener's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenerLimits {
    /// Connections open at once; one more is answered 503 and closed.
    pub connections: usize,
    /// A request's head and body must arrive within this.
    pub read_timeout: Duration,
    /// A connection with no request in flight is closed after this.
    pub idle_timeout: Duration,
    /// A client that takes none of an answer for this long is cut off.
    pub write_timeout: Duration,
}

/// `[limits]`, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitsConfig {
    pub list: ListLimits,
    /// `relay_queue`: notifications (logs, progress, resource updates)
    /// queued for one session that does not take them; beyond it the
    /// oldest are dropped and counted. Default 1,000.
    pub relay_queue: usize,
    /// `max_result_bytes`: the largest result of one relayed request (a
    /// call, a read, a prompt, one page of a listing) as the backend wrote
    /// it; a larger one is answered with an error naming this limit
    /// instead of being held in memory and relayed. Default 16 MiB (what a
    /// stdio line or an SSE event may carry at all), at least 1 KiB.
    pub max_result_bytes: usize,
    /// `max_sessions`: client sessions at once (HTTP sessions and open
    /// `subscriptions/listen` streams). Default 2,048.
    pub max_sessions: usize,
    /// `max_instances`: backend instances run for one client or caller
    /// (`share = "session"` / `"principal"`) live at once, over every
    /// backend; the next is refused with an error naming this key.
    /// Default 64.
    pub max_instances: usize,
    /// The `/mcp` listener: `connections` (default 4,096), `read_timeout`
    /// (10s), `idle_timeout` (60s), `write_timeout` (30s).
    pub mcp: ListenerLimits,
    /// The control API's listener: `api_connections` (default 256) and
    /// the same timeouts. Its own cap keeps it reachable while `/mcp` is
    /// saturated.
    pub api: ListenerLimits,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Problems::default().limits(None)
    }
}

impl Problems {
    pub(crate) fn limits(&mut self, raw: Option<RawLimits>) -> LimitsConfig {
        let raw = raw.unwrap_or_default();
        let defaults = ListLimits::default();
        let mut at_least = |key: &str, value: Option<u64>, min: u64, default: u64| match value {
            Some(v) if v < min => {
                self.add(format!("limits.{key}"), format!("must be at least {min}"));
                default
            }
            Some(v) => v,
            None => default,
        };
        let list = ListLimits {
            pages: at_least(
                "list_pages",
                raw.list_pages.map(u64::from),
                1,
                defaults.pages.into(),
            ) as u32,
            items: at_least("list_items", raw.list_items, 1, defaults.items as u64) as usize,
            bytes: at_least("list_bytes", raw.list_bytes, 1024, defaults.bytes as u64) as usize,
        };
        let relay_queue =
            at_least("relay_queue", raw.relay_queue.map(u64::from), 1, 1_000) as usize;
        let max_result_bytes = at_least(
            "max_result_bytes",
            raw.max_result_bytes,
            1024,
            16 * 1024 * 1024,
        ) as usize;
        let max_sessions =
            at_least("max_sessions", raw.max_sessions.map(u64::from), 1, 2_048) as usize;
        let max_instances =
            at_least("max_instances", raw.max_instances.map(u64::from), 1, 64) as usize;
        let connections =
            at_least("connections", raw.connections.map(u64::from), 1, 4_096) as usize;
        let api_connections = at_least(
            "api_connections",
            raw.api_connections.map(u64::from),
            1,
            256,
        ) as usize;
        let read_timeout = self.positive("limits.read_timeout", raw.read_timeout, "10s");
        let idle_timeout = self.positive("limits.idle_timeout", raw.idle_timeout, "60s");
        let write_timeout = self.positive("limits.write_timeout", raw.write_timeout, "30s");
        let listener = |connections| ListenerLimits {
            connections,
            read_timeout,
            idle_timeout,
            write_timeout,
        };
        LimitsConfig {
            list,
            relay_queue,
            max_result_bytes,
            max_sessions,
            max_instances,
            mcp: listener(connections),
            api: listener(api_connections),
        }
    }

    /// A duration that must not be zero (a zero timeout would cut off
    /// every client).
    fn positive(&mut self, key: &str, value: Option<String>, default: &str) -> Duration {
        let d = self.duration(key, value, default);
        if d.is_zero() {
            self.add(key, "must be longer than 0s");
            return humantime::parse_duration(default).unwrap_or_default();
        }
        d
    }
}
