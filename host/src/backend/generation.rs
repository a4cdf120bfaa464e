//! The generation: one snapshot of what a call is decided against (the
//! merged catalog, the backend set, which run of each backend serves and
//! the `[[policy]]` set), numbered, and published by one writer at a time.
//!
//! A request reads the generation once and holds it to its end, so it
//! never routes a name of one catalog to a backend of another set, and a
//! change (a backend's listing, its health, a reload) is seen whole or not
//! at all. Rollouts switch versions by publishing one. The writers are the
//! app's update task (the catalog) and its start and reloads (the set, the
//! policies); a lock orders them, so none loses another's change. Each
//! publication takes which run serves each backend as it is then: a
//! supervisor replaces the run before it reports the backend up, so the
//! generation that shows the backend's new catalog names its new run.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use super::Instance;
use super::set::BackendSet;
use crate::catalog::Catalog;
use crate::policy::Policies;

/// What a call is decided against.
#[derive(Default)]
pub struct Generation {
    /// One more for each publication: a later generation has a larger one.
    pub number: u64,
    pub catalog: Arc<Catalog>,
    pub backends: Arc<BackendSet>,
    /// Which run of each backend of `backends` serves.
    pub serving: Arc<ServingInstances>,
    /// What each caller may see and call, and how fast.
    pub policies: Arc<Policies>,
}

/// Which run serves each backend, by backend name.
#[derive(Default)]
pub struct ServingInstances(HashMap<Arc<str>, Arc<Instance>>);

impl ServingInstances {
    /// The runs serving `set`'s backends now.
    fn of(set: &BackendSet) -> Self {
        Self(set.iter().map(|b| (b.name.clone(), b.serving())).collect())
    }

    /// The run serving `backend`.
    pub fn get(&self, backend: &str) -> Option<&Arc<Instance>> {
        self.0.get(backend)
    }
}

/// The generation in force. Clones share it; reading takes no lock.
#[derive(Clone, Default)]
pub struct Generations(Arc<Cell>);

#[derive(Default)]
struct Cell {
    current: ArcSwap<Generation>,
    /// Held while a generation is made from the current one.
    writer: Mutex<()>,
}

impl Generations {
    /// The generation in force.
    pub fn load(&self) -> Arc<Generation> {
        self.0.current.load_full()
    }

    /// The catalog of the generation in force.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.0.current.load().catalog.clone()
    }

    /// The backend set of the generation in force.
    pub fn backends(&self) -> Arc<BackendSet> {
        self.0.current.load().backends.clone()
    }

    /// Publishes a generation with `catalog` (the gateway's update task);
    /// returns the catalog it replaced.
    pub fn publish_catalog(&self, catalog: Arc<Catalog>) -> Arc<Catalog> {
        let mut old = None;
        self.publish(|g| {
            old = Some(g.catalog.clone());
            Generation {
                number: g.number + 1,
                catalog,
                serving: Arc::new(ServingInstances::of(&g.backends)),
                backends: g.backends.clone(),
                policies: g.policies.clone(),
            }
        });
        old.unwrap_or_default()
    }

    /// Publishes a generation with the backend set `set` (start, reloads).
    pub fn publish_backends(&self, set: BackendSet) {
        let set = Arc::new(set);
        self.publish(|g| Generation {
            number: g.number + 1,
            catalog: g.catalog.clone(),
            serving: Arc::new(ServingInstances::of(&set)),
            backends: set,
            policies: g.policies.clone(),
        });
    }

    /// Publishes a generation with the `[[policy]]` set `policies` (start,
    /// reloads).
    pub fn publish_policies(&self, policies: Policies) {
        let policies = Arc::new(policies);
        self.publish(|g| Generation {
            number: g.number + 1,
            catalog: g.catalog.clone(),
            serving: Arc::new(ServingInstances::of(&g.backends)),
            backends: g.backends.clone(),
            policies,
        });
    }

    /// Makes the next generation from the current one, one writer at a
    /// time.
    fn publish(&self, next: impl FnOnce(&Generation) -> Generation) -> Arc<Generation> {
        let _one = self.0.writer.lock().unwrap_or_else(|e| e.into_inner());
        let made = Arc::new(next(&self.0.current.load()));
        self.0.current.store(made.clone());
        made
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::testutil;

    /// A catalog of `backend` exporting `tool`, prefix-named.
    fn catalog(backend: &str, tool: &str) -> Arc<Catalog> {
        let entry = Arc::new(testutil::entry(&[tool]));
        Arc::new(Catalog::from_sources(
            &testutil::prefix(),
            vec![(backend.into(), entry)],
        ))
    }

    #[test]
    fn a_generation_read_before_a_publication_stays_whole() {
        let g = Generations::default();
        let first_catalog = catalog("a", "echo");
        g.publish_catalog(first_catalog.clone());
        let held = g.load();
        // While a call holds `held`, a new set and a new catalog come in.
        g.publish_backends(BackendSet::default());
        let replaced = g.publish_catalog(catalog("b", "echo"));
        assert!(Arc::ptr_eq(&replaced, &first_catalog));
        // The call still sees its own generation, whole: its catalog and
        // its set, and its number.
        assert!(Arc::ptr_eq(&held.catalog, &first_catalog));
        assert!(held.catalog.route_tool("a__echo").is_some());
        assert_eq!(held.number, 1);
        let now = g.load();
        assert_eq!(now.number, 3);
        assert!(now.catalog.route_tool("a__echo").is_none());
        assert!(now.catalog.route_tool("b__echo").is_some());
        assert!(!Arc::ptr_eq(&held.backends, &now.backends));
    }

    #[test]
    fn a_held_generation_keeps_the_run_it_was_published_with() {
        let g = Generations::default();
        let b = crate::backend::testutil::stdio("");
        g.publish_backends(BackendSet::new(vec![b.clone()]));
        b.instance_up(Some("1".into()), None, None);
        g.publish_catalog(catalog("mem", "echo"));
        let held = g.load();
        // The next run comes up and is reported while a call holds `held`.
        b.instance_ended();
        b.instance_up(Some("2".into()), None, None);
        g.publish_catalog(catalog("mem", "echo"));
        let run = |g: &Generation| g.serving.get("mem").map(|r| r.number());
        assert_eq!(run(&held), Some(1), "the call keeps its run");
        assert_eq!(run(&g.load()), Some(2), "later calls take the new one");
        assert!(g.load().serving.get("other").is_none());
    }

    #[test]
    fn concurrent_writers_lose_no_change() {
        let g = Generations::default();
        std::thread::scope(|s| {
            for i in 0..8 {
                let g = g.clone();
                s.spawn(move || {
                    for _ in 0..50 {
                        if i % 2 == 0 {
                            g.publish_backends(BackendSet::default());
                        } else {
                            g.publish_catalog(Arc::new(Catalog::default()));
                        }
                    }
                });
            }
        });
        assert_eq!(g.load().number, 400, "every publication counted once");
    }

    #[test]
    fn a_held_generation_keeps_its_policies_when_others_are_published() {
        use crate::auth::Principal;
        use crate::catalog::Kind;
        let g = Generations::default();
        let held = g.load();
        // Only `key:nobody` may use anything.
        let deny_all = crate::config::PolicyConfig {
            principals: vec!["key:nobody".into()],
            allow: vec!["*".into()],
            deny: Vec::new(),
            rate: None,
            rate_per_tool: None,
            issuer: None,
            tool_search: None,
        };
        g.publish_policies(crate::policy::Policies::new(vec![deny_all]));
        let alice = Principal::key("alice");
        assert_eq!(held.policies.admit(&alice, Kind::Tool, "a__echo"), Ok(()));
        assert!(
            g.load()
                .policies
                .admit(&alice, Kind::Tool, "a__echo")
                .is_err()
        );
        assert_eq!(g.load().number, held.number + 1);
    }
}
