//! Which backend connection a typed request travels on: the typed
//! executor's part of the plan, decided here like [`super::plan::plan`],
//! from facts read first, so the executor (rmcp's typed handlers,
//! `gateway::session`) only carries it out.
//!
//! The rule (docs/security.md, "Which backend session a request travels
//! on", says the same per backend and client):
//!
//! | backend | client | connection |
//! |---|---|---|
//! | `forward_auth`, or runs an instance per client (`share`), or keeps per-session state and the client's session is registered | any | [`Carrier::Pool`]: the client's own (a 2026-07-28 request: its caller's) |
//! | keeps per-session state, and serves the client's capability set only in the handshake era | a 2026-07-28 request | [`Carrier::CallerSession`]: a backend session of its caller, never shared with other callers |
//! | otherwise, the client's capability set has a variant | any | [`Carrier::Variant`] (a failed one fails the call: [`Carrier::VariantFailed`]) |
//! | otherwise | any | [`Carrier::Shared`] |
//!
//! The variant of a capability set is looked up (and begun) only when the
//! first row does not hold: [`choose`] asks for it with
//! [`Choice::LookUpVariant`] and is asked again with what was found.

use crate::backend::Era;

/// What the backend is, for the choice.
#[derive(Clone, Copy, Debug, Default)]
pub struct Backend {
    /// It keeps state per MCP session (an HTTP backend with sessions).
    pub per_session: bool,
    /// `forward_auth`: each client's own credentials, so its own connection.
    pub forwards_auth: bool,
    /// It runs an instance per client (`share`).
    pub owns_instances: bool,
    /// The era of its shared connection, if it has one.
    pub shared_era: Option<Era>,
}

/// Who asks.
#[derive(Clone, Copy, Debug, Default)]
pub struct Client {
    /// A handshake-era session whose `initialized` registered it.
    pub registered: bool,
    /// A 2026-07-28 request (no session of its own).
    pub modern: bool,
}

/// What looking up the client's capability-set variant found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// The client's set needs none (a handshake-era client that declared
    /// nothing): the shared connection serves it.
    None,
    /// Open, in this era.
    Open(Era),
    /// It could not be begun.
    Failed,
}

/// Where a typed request goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carrier {
    /// The client's pool (its own connection or instance; a 2026-07-28
    /// request's, its caller's).
    Pool,
    /// A backend session of the 2026-07-28 request's caller (bridged from
    /// the handshake era).
    CallerSession,
    /// The variant of the client's capability set.
    Variant,
    /// The variant could not be begun: the call fails with why.
    VariantFailed,
    /// The backend's shared connection.
    Shared,
}

/// What [`choose`] says to do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    Go(Carrier),
    /// Look the client's variant up, then ask again with it.
    LookUpVariant,
}

/// The connection of a typed request from `client` to `backend`;
/// `variant`: what the lookup found, once [`Choice::LookUpVariant`] was
/// answered (`None` before).
pub fn choose(backend: Backend, client: Client, variant: Option<Variant>) -> Choice {
    if (backend.per_session && client.registered) || backend.forwards_auth || backend.owns_instances
    {
        return Choice::Go(Carrier::Pool);
    }
    let Some(variant) = variant else {
        return Choice::LookUpVariant;
    };
    let serving = match variant {
        Variant::Open(era) => Some(era),
        Variant::Failed => None,
        Variant::None => backend.shared_era,
    };
    if backend.per_session && serving == Some(Era::Handshake) && client.modern {
        return Choice::Go(Carrier::CallerSession);
    }
    Choice::Go(match variant {
        Variant::Open(_) => Carrier::Variant,
        Variant::Failed => Carrier::VariantFailed,
        Variant::None => Carrier::Shared,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HTTP: Backend = Backend {
        per_session: true,
        forwards_auth: false,
        owns_instances: false,
        shared_era: Some(Era::Handshake),
    };
    const SESSION: Client = Client {
        registered: true,
        modern: false,
    };
    const MODERN: Client = Client {
        registered: false,
        modern: true,
    };
    const UNREGISTERED: Client = Client {
        registered: false,
        modern: false,
    };

    #[test]
    fn own_credentials_own_instances_or_a_registered_session_go_through_the_pool() {
        for b in [
            Backend {
                forwards_auth: true,
                ..HTTP
            },
            Backend {
                per_session: false,
                owns_instances: true,
                ..HTTP
            },
            HTTP,
        ] {
            for c in [SESSION, MODERN, UNREGISTERED] {
                if b.per_session && !b.forwards_auth && !c.registered {
                    continue; // the rows below
                }
                assert_eq!(choose(b, c, None), Choice::Go(Carrier::Pool), "{b:?} {c:?}");
                // Never a variant lookup first.
                assert_eq!(
                    choose(b, c, Some(Variant::Failed)),
                    Choice::Go(Carrier::Pool)
                );
            }
        }
    }

    #[test]
    fn otherwise_the_variant_is_looked_up_first() {
        assert_eq!(choose(HTTP, MODERN, None), Choice::LookUpVariant);
        assert_eq!(choose(HTTP, UNREGISTERED, None), Choice::LookUpVariant);
        let stateless = Backend {
            per_session: false,
            ..HTTP
        };
        assert_eq!(choose(stateless, SESSION, None), Choice::LookUpVariant);
    }

    #[test]
    fn a_modern_request_served_in_the_handshake_era_gets_a_session_of_its_caller() {
        // Through the shared connection's era, or its variant's.
        assert_eq!(
            choose(HTTP, MODERN, Some(Variant::None)),
            Choice::Go(Carrier::CallerSession)
        );
        assert_eq!(
            choose(HTTP, MODERN, Some(Variant::Open(Era::Handshake))),
            Choice::Go(Carrier::CallerSession)
        );
        // Served in its own era: the variant (the backend's 2026-07-28 door).
        assert_eq!(
            choose(HTTP, MODERN, Some(Variant::Open(Era::Modern))),
            Choice::Go(Carrier::Variant)
        );
        // A backend keeping no per-session state may share the connection.
        let stateless = Backend {
            per_session: false,
            ..HTTP
        };
        assert_eq!(
            choose(stateless, MODERN, Some(Variant::Open(Era::Handshake))),
            Choice::Go(Carrier::Variant)
        );
        // A handshake-era client is never bridged.
        assert_eq!(
            choose(HTTP, UNREGISTERED, Some(Variant::Open(Era::Handshake))),
            Choice::Go(Carrier::Variant)
        );
    }

    #[test]
    fn no_variant_is_the_shared_connection_and_a_failed_one_fails() {
        assert_eq!(
            choose(HTTP, UNREGISTERED, Some(Variant::None)),
            Choice::Go(Carrier::Shared)
        );
        assert_eq!(
            choose(HTTP, UNREGISTERED, Some(Variant::Failed)),
            Choice::Go(Carrier::VariantFailed)
        );
        // A failed variant serves no era: not bridged either.
        assert_eq!(
            choose(HTTP, MODERN, Some(Variant::Failed)),
            Choice::Go(Carrier::VariantFailed)
        );
        // A modern backend's shared connection serves a modern client.
        let modern = Backend {
            shared_era: Some(Era::Modern),
            ..HTTP
        };
        assert_eq!(
            choose(modern, MODERN, Some(Variant::None)),
            Choice::Go(Carrier::Shared)
        );
    }
}
