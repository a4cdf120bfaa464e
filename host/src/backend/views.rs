//! The catalog a capability set sees: the shared snapshot with each shown
//! backend's entry replaced by what its variant for that set lists
//! (`variants.rs`). One view per set, cached until the shared snapshot or
//! a variant's listing changes, so a thousand sessions of four sets cost
//! four views, not a thousand.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::capset::CapSet;
use super::generation::Generations;
use crate::catalog::{BackendCatalog, Catalog};
use crate::config::Naming;
use crate::health::advertisable;

/// Views by capability set (see the module docs).
#[derive(Default)]
pub struct Views {
    cache: Mutex<HashMap<CapSet, Cached>>,
}

/// A view and what it was built from.
struct Cached {
    shared: Arc<Catalog>,
    /// The variant listing used for each backend, in `shared`'s order.
    used: Vec<Option<Arc<BackendCatalog>>>,
    view: Arc<Catalog>,
}

impl Views {
    /// The view of `capset` last built from `shared`, without opening or
    /// listing anything (`shared` itself when there is none).
    pub fn built(&self, shared: Arc<Catalog>, capset: &CapSet) -> Arc<Catalog> {
        if capset.is_none() {
            return shared;
        }
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        match cache.get(capset) {
            Some(c) if Arc::ptr_eq(&c.shared, &shared) => c.view.clone(),
            _ => shared,
        }
    }

    /// What a client of `capset` sees of `shared`: each shown backend that
    /// has no per-session catalog of its own (`forward_auth`) as its
    /// variant lists it, opened and listed first where due. A backend
    /// whose variant cannot be opened shows its last listing, or the
    /// shared one (logged).
    pub async fn of(
        &self,
        generations: &Generations,
        naming: &Naming,
        shared: Arc<Catalog>,
        capset: &CapSet,
    ) -> Arc<Catalog> {
        if capset.is_none() {
            return shared;
        }
        let set = generations.backends();
        let shown: Vec<_> = shared
            .shown()
            .filter_map(|name| set.get(name).cloned())
            .filter(|b| !b.forwards_auth() && advertisable(b.state()))
            .collect();
        let listed = futures::future::join_all(shown.iter().map(|b| async move {
            match b.variant(capset).await? {
                Ok(ready) => Some(ready.catalog),
                // Logged by the variant, once per failure streak.
                Err(_) => b.variant_catalog(capset),
            }
        }))
        .await;
        let own: HashMap<Arc<str>, Arc<BackendCatalog>> = shown
            .iter()
            .zip(listed)
            .filter_map(|(b, c)| Some((b.name.clone(), c?)))
            .collect();
        let used: Vec<Option<Arc<BackendCatalog>>> =
            shared.shown().map(|n| own.get(n).cloned()).collect();
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = cache.get(capset)
            && Arc::ptr_eq(&c.shared, &shared)
            && same(&c.used, &used)
        {
            return c.view.clone();
        }
        let view = Arc::new(shared.with_own(naming, |n, _| own.get(n).cloned()));
        cache.insert(
            capset.clone(),
            Cached {
                shared,
                used,
                view: view.clone(),
            },
        );
        view
    }
}

fn same(a: &[Option<Arc<BackendCatalog>>], b: &[Option<Arc<BackendCatalog>>]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| match (x, y) {
            (Some(x), Some(y)) => Arc::ptr_eq(x, y),
            (None, None) => true,
            _ => false,
        })
}
