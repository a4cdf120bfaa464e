//! Process limits Vigil adjusts for itself at start: the open-file limit,
//! and how many connections each listener may hold within it.

/// Raises the soft limit on open files to the hard limit.
///
/// Vigil holds about one descriptor per HTTP backend (its open event
/// stream) plus one per request in flight; the common default soft limit of
/// 1,024 is too small for a thousand backends, and running out shows up as
/// failed connects far from the cause. The hard limit is what the operator
/// allowed, so taking it needs no privilege. Returns (before, after), or
/// why the limit could not be read or raised.
pub fn raise_open_files() -> Result<(u64, u64), String> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)
        .map_err(|e| format!("cannot read the open-file limit: {e}"))?;
    if soft >= hard {
        return Ok((soft, soft));
    }
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
        .map_err(|e| format!("cannot raise the open-file limit from {soft} to {hard}: {e}"))?;
    Ok((soft, hard))
}

/// The soft open-file limit now; `None` when unlimited or unreadable.
pub fn open_files() -> Option<u64> {
    use nix::sys::resource::{RLIM_INFINITY, Resource, getrlimit};
    getrlimit(Resource::RLIMIT_NOFILE)
        .ok()
        .map(|(soft, _)| soft)
        .filter(|&soft| soft != RLIM_INFINITY)
}

/// Descriptors kept from the listeners whatever the configuration: the
/// store (SQLite, its journal and shared memory), the log, the listening
/// sockets, the runtime's own (epoll, signals, timers), the plugin
/// directory's watch and cache, name resolution. Vigil with one stdio
/// backend and no plugins holds about 21.
pub const BASE_RESERVE: u64 = 32;
/// Descriptors kept per configured backend: a process's three pipes, or an
/// HTTP backend's event stream, its pooled connections and its probe's.
pub const PER_BACKEND_RESERVE: u64 = 8;
/// The control API's share of what the listeners may hold, when both do
/// not fit: an eighth, at least [`MIN_API`].
const API_SHARE: u64 = 8;
/// The fewest connections a listener is left, however low the limit: a
/// start on a limit too low to serve is warned about, not refused.
const MIN_API: usize = 4;
const MIN_MCP: usize = 16;

/// How many connections one listener holds at once, and what was asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cap {
    /// The cap the listener keeps.
    pub connections: usize,
    /// What `[limits]` asked for.
    pub configured: usize,
    /// The open-file limit that lowered it, if it was lowered.
    pub lowered_by: Option<u64>,
}

impl Cap {
    /// The configured cap, unchanged.
    pub fn configured(connections: usize) -> Self {
        Cap {
            connections,
            configured: connections,
            lowered_by: None,
        }
    }

    /// How an answer at this cap names it: `limits.KEY = N`, and why it is
    /// lower than that when it is.
    pub fn describe(&self, key: &str) -> String {
        match self.lowered_by {
            Some(open_files) => format!(
                "limits.{key} = {}, lowered to {} to fit the open-file limit of {open_files}",
                self.configured, self.connections
            ),
            None => format!("limits.{key} = {}", self.connections),
        }
    }
}

/// The caps of both listeners, fitted to the open-file limit.
///
/// Each held connection is a descriptor. `[limits] connections` (4,096 by
/// default) and `api_connections` (256) are kept when they fit under the
/// soft open-file limit together with a reserve ([`BASE_RESERVE`], the
/// refusals each listener may be writing at once, and
/// [`PER_BACKEND_RESERVE`] per configured backend); otherwise both are
/// lowered to fit, the control API keeping an eighth of the room (its own
/// cap at most), so that idle connections to `/mcp` cannot take the
/// descriptors the control API, the backends and the store need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionCaps {
    pub mcp: Cap,
    pub api: Cap,
    /// The soft open-file limit they were fitted to (`None`: unlimited).
    pub open_files: Option<u64>,
    /// The descriptors kept out of the listeners' reach.
    pub reserve: u64,
}

impl ConnectionCaps {
    /// Fits the configured caps `mcp` and `api` to `open_files` with
    /// `backends` configured (see the type's docs). Pure: the limit is
    /// read by the caller ([`open_files`]).
    pub fn fit(open_files: Option<u64>, backends: usize, mcp: usize, api: usize) -> Self {
        let refusals = 2 * crate::listener::REFUSALS_IN_FLIGHT as u64;
        let reserve = BASE_RESERVE + refusals + PER_BACKEND_RESERVE * backends as u64;
        let unchanged = ConnectionCaps {
            mcp: Cap::configured(mcp),
            api: Cap::configured(api),
            open_files,
            reserve,
        };
        let Some(limit) = open_files else {
            return unchanged;
        };
        let room = limit.saturating_sub(reserve);
        if (mcp as u64).saturating_add(api as u64) <= room {
            return unchanged;
        }
        let to_usize = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        let api_fit = to_usize(room / API_SHARE).max(MIN_API).min(api);
        let mcp_fit = to_usize(room).saturating_sub(api_fit).max(MIN_MCP).min(mcp);
        let lowered = |connections: usize, configured: usize| Cap {
            connections,
            configured,
            lowered_by: (connections < configured).then_some(limit),
        };
        ConnectionCaps {
            mcp: lowered(mcp_fit, mcp),
            api: lowered(api_fit, api),
            open_files,
            reserve,
        }
    }

    /// Whether the limit leaves less than the reserve and the smallest
    /// caps: serving goes on, but descriptors may run out.
    pub fn too_low(&self) -> bool {
        self.open_files.is_some_and(|limit| {
            limit < self.reserve + (self.mcp.connections + self.api.connections) as u64
        })
    }

    /// Says once, at start, which caps the listeners keep and why: INFO
    /// when the configured caps fit, WARN when they were lowered (naming
    /// the keys and the limit) or the limit is too low even for that.
    pub fn log(&self) {
        let (mcp, api) = (self.mcp.connections, self.api.connections);
        let open_files = self.open_files.map(|n| n.to_string());
        let open_files = open_files.as_deref().unwrap_or("unlimited");
        if self.too_low() {
            tracing::warn!(
                mcp_connections = mcp,
                api_connections = api,
                open_files = %open_files,
                reserve = self.reserve,
                "the open-file limit is too low for the backends and the listeners: connections may fail for want of descriptors; raise it (ulimit -n)"
            );
        } else if self.mcp.lowered_by.is_some() || self.api.lowered_by.is_some() {
            tracing::warn!(
                mcp_connections = mcp,
                configured_mcp = self.mcp.configured,
                api_connections = api,
                configured_api = self.api.configured,
                open_files = %open_files,
                reserve = self.reserve,
                "connection caps lowered to fit the open-file limit (limits.connections, limits.api_connections): {} descriptors are kept for backends, the store and refusals; raise the limit (ulimit -n) to hold more",
                self.reserve
            );
        } else {
            tracing::info!(
                mcp_connections = mcp,
                api_connections = api,
                open_files = %open_files,
                reserve = self.reserve,
                "connection caps as configured (limits.connections, limits.api_connections): they fit the open-file limit"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Cap, ConnectionCaps};

    /// 32 base + 2 × 64 refusals + 8 per backend.
    const RESERVE_ONE_BACKEND: u64 = 168;

    #[test]
    fn caps_that_fit_are_kept() {
        let caps = ConnectionCaps::fit(Some(1_048_576), 1, 4096, 256);
        assert_eq!(caps.mcp, Cap::configured(4096));
        assert_eq!(caps.api, Cap::configured(256));
        assert_eq!(caps.reserve, RESERVE_ONE_BACKEND);
        assert!(!caps.too_low());
        assert_eq!(
            ConnectionCaps::fit(None, 1000, 4096, 256).mcp,
            Cap::configured(4096)
        );
        // Exactly at the limit still fits.
        let caps = ConnectionCaps::fit(Some(4096 + 256 + RESERVE_ONE_BACKEND), 1, 4096, 256);
        assert_eq!(caps.mcp, Cap::configured(4096));
    }

    #[test]
    fn the_default_caps_are_lowered_at_a_limit_of_4096() {
        // The case seen: `ulimit -n 4096` and the defaults.
        let caps = ConnectionCaps::fit(Some(4096), 1, 4096, 256);
        let room = 4096 - RESERVE_ONE_BACKEND as usize;
        assert_eq!(
            caps.api.connections, 256,
            "an eighth of the room is more than asked"
        );
        assert_eq!(caps.mcp.connections, room - 256);
        assert_eq!(caps.mcp.lowered_by, Some(4096));
        assert_eq!(caps.api.lowered_by, None);
        assert!(caps.mcp.connections + caps.api.connections + RESERVE_ONE_BACKEND as usize <= 4096);
        assert_eq!(
            caps.mcp.describe("connections"),
            format!(
                "limits.connections = 4096, lowered to {} to fit the open-file limit of 4096",
                room - 256
            )
        );
        assert_eq!(
            caps.api.describe("api_connections"),
            "limits.api_connections = 256"
        );
    }

    #[test]
    fn a_low_limit_shares_the_room_with_the_control_api() {
        let caps = ConnectionCaps::fit(Some(512), 1, 4096, 256);
        assert_eq!(caps.api.connections, 344 / 8);
        assert_eq!(caps.mcp.connections, 344 - 344 / 8);
        assert!(!caps.too_low());
        // More backends, a larger reserve, less room.
        let caps = ConnectionCaps::fit(Some(512), 20, 4096, 256);
        assert_eq!(caps.reserve, 32 + 128 + 160);
        assert_eq!(caps.mcp.connections + caps.api.connections, 512 - 320);
    }

    #[test]
    fn a_limit_below_the_reserve_keeps_the_smallest_caps_and_says_so() {
        let caps = ConnectionCaps::fit(Some(100), 1, 4096, 256);
        assert_eq!((caps.mcp.connections, caps.api.connections), (16, 4));
        assert!(caps.too_low());
        // A configured cap below the smallest one is kept as it is.
        let caps = ConnectionCaps::fit(Some(100), 1, 2, 1);
        assert_eq!((caps.mcp.connections, caps.api.connections), (2, 1));
        assert_eq!(caps.mcp.lowered_by, None);
    }

    #[test]
    fn the_soft_limit_ends_at_the_hard_limit() {
        use nix::sys::resource::{Resource, getrlimit};
        let (before, after) = super::raise_open_files().expect("raise");
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert!(after >= before);
        assert_eq!(soft, after);
        assert_eq!(soft, hard);
    }
}
