//! The 2026-07-28 way into a backend that speaks both protocol eras, for
//! 2026-07-28 clients.
//!
//! With `protocol = "auto"` Vigil reaches an HTTP backend in the handshake
//! era when it accepts `initialize`: every 2025-era relay works there (the
//! raw path, lanes, server→client requests). A 2026-07-28 client's calls on
//! such a session need translating (its questions become Vigil's
//! input-required results, its capabilities and log level cannot travel per
//! request). When the backend speaks 2026-07-28 as well, that client is
//! better served in its own era: its requests go through a second,
//! stateless connection begun with `server/discover`, and the backend sees
//! them as it would directly (its own input-required results and keys,
//! each request's client capabilities).
//!
//! The door is opened on the first 2026-07-28 request after the backend
//! came up, and again after the backend restarted (a new instance) or the
//! connection ended. A backend that refuses `server/discover` is asked
//! again only when it comes up anew; until then its 2026-07-28 clients are
//! served through the handshake session. Never for stdio backends (one
//! process, one era on its pipes), `forward_auth` backends (their
//! connections are per caller) or a pinned `protocol`.

use std::sync::{Arc, LazyLock};

use rmcp::model::ProtocolVersion;

use super::{Backend, Connection, Era};
use crate::config::{Protocol, Transport};

/// The door's protocol: 2026-07-28, `server/discover` only.
static MODERN: LazyLock<Protocol> = LazyLock::new(|| Protocol::Modern(ProtocolVersion::LATEST));

/// The door of one backend (see the module doc).
#[derive(Default)]
pub struct ModernDoor {
    /// Serializes opening, so concurrent first requests open one door.
    state: tokio::sync::Mutex<State>,
}

#[derive(Default)]
enum State {
    #[default]
    Untried,
    Open {
        instance: u64,
        conn: Arc<Connection>,
    },
    /// The backend refused `server/discover` on this instance.
    Refused { instance: u64 },
}

impl Backend {
    /// The connection a 2026-07-28 client's request to this backend goes
    /// through when it is not the shared one: the door, where the backend
    /// speaks both eras (see the module doc); `None` otherwise.
    pub async fn modern_door(&self) -> Option<Arc<Connection>> {
        if !matches!(self.config.protocol, Protocol::Auto)
            || !matches!(self.config.transport, Transport::Http { .. })
            || self.forwards_auth()
        {
            return None;
        }
        let shared = self.shared()?;
        if shared.era() == Era::Modern {
            return None; // the shared connection speaks it already
        }
        let instance = self.instance();
        let mut state = self.door.state.lock().await;
        match &*state {
            State::Open { instance: i, conn } if *i == instance && !conn.is_closed() => {
                return Some(conn.clone());
            }
            State::Refused { instance: i } if *i == instance => return None,
            _ => {}
        }
        match self
            .open_connection(false, None, None, None, self.downstream.clone(), &MODERN)
            .await
        {
            Ok(conn) => {
                tracing::debug!(backend = %self.name, instance, "2026-07-28 door opened");
                let conn = Arc::new(conn);
                *state = State::Open {
                    instance,
                    conn: conn.clone(),
                };
                Some(conn)
            }
            Err(e) => {
                tracing::debug!(backend = %self.name, instance, error = %e, "no 2026-07-28 door: its clients go through the handshake session");
                *state = State::Refused { instance };
                None
            }
        }
    }
}
