//! The configured backends, in file order, as one immutable set: a config
//! reload installs a new set; readers hold the one they got.

use std::collections::HashMap;
use std::sync::Arc;

use crate::backend::Backend;
use crate::catalog::registry::{Member, Roster};

#[derive(Default)]
pub struct BackendSet {
    list: Vec<Arc<Backend>>,
    by_name: HashMap<Arc<str>, usize>,
    /// Indexes of the `forward_auth` backends (looked at on every session
    /// resync; most sets have none).
    forwarded: Vec<usize>,
    /// Whether some client has a catalog of its own of some backend
    /// (`forward_auth`, or an instance of its own: `share`).
    own_catalogs: bool,
    /// The set as the catalog registry sees it (names, uids, order).
    roster: Roster,
}

impl BackendSet {
    pub fn new(list: Vec<Arc<Backend>>) -> Self {
        let by_name = list
            .iter()
            .enumerate()
            .map(|(i, b)| (b.name.clone(), i))
            .collect();
        let forwarded = (0..list.len())
            .filter(|i| list[*i].forwards_auth())
            .collect();
        let own_catalogs = list.iter().any(|b| b.forwards_auth() || b.owns_instances());
        let roster = Roster::new(list.iter().map(|b| Member {
            name: b.name.clone(),
            uid: b.uid,
            per_session: b.forwards_auth(),
            pin: b.config.pin,
        }));
        Self {
            list,
            by_name,
            forwarded,
            own_catalogs,
            roster,
        }
    }

    /// What the catalog registry applies updates against.
    pub fn roster(&self) -> &Roster {
        &self.roster
    }

    /// Whether a client may have a catalog of its own of some backend:
    /// only then is there more to a session's view than its capability
    /// set's (`Pool::derive`).
    pub fn has_own_catalogs(&self) -> bool {
        self.own_catalogs
    }

    /// The `forward_auth` backends, in file order.
    pub fn forwarded(&self) -> impl Iterator<Item = &Arc<Backend>> {
        self.forwarded.iter().map(|i| &self.list[*i])
    }

    /// This set with `b` in the place of the backend of its name (an
    /// update's switch); unchanged if no backend has that name.
    pub fn replacing(&self, b: Arc<Backend>) -> BackendSet {
        BackendSet::new(
            self.list
                .iter()
                .map(|o| {
                    if o.name == b.name {
                        b.clone()
                    } else {
                        o.clone()
                    }
                })
                .collect(),
        )
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Backend>> {
        self.by_name.get(name).map(|i| &self.list[*i])
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Arc<Backend>> {
        self.list.iter()
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn to_vec(&self) -> Vec<Arc<Backend>> {
        self.list.clone()
    }
}

impl<'a> IntoIterator for &'a BackendSet {
    type Item = &'a Arc<Backend>;
    type IntoIter = std::slice::Iter<'a, Arc<Backend>>;
    fn into_iter(self) -> Self::IntoIter {
        self.list.iter()
    }
}
