//! Client-visible names under the configured [`Naming`].

use std::sync::Arc;

use super::{BackendCatalog, Catalog, Conflict};
use crate::config::Naming;

/// The name a client sees for `name` exported by `backend`.
pub fn expose(naming: &Naming, backend: &str, name: &str) -> String {
    match naming {
        Naming::Prefix { separator } => format!("{backend}{separator}{name}"),
        Naming::None => name.to_owned(),
    }
}

/// Names exported by more than one backend; empty under prefix naming.
pub fn conflicts(naming: &Naming, backends: &[(Arc<str>, BackendCatalog)]) -> Vec<Conflict> {
    Catalog::build(naming, backends.iter().map(|(n, c)| (n, c))).conflicts
}
