//! Which protocol era a request belongs to.

use rmcp::{RoleServer, model::ProtocolVersion, service::RequestContext};

/// Whether this request speaks 2026-07-28 (or later): stateless, no server
/// requests to the client, log messages only when the request asks for them.
/// rmcp takes the revision from the request's `_meta`, else from the
/// session's `initialize`.
pub fn modern(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}
