//! The registry of backend catalogs: what each backend last listed, which
//! backends are advertised, and the [`Catalog`] snapshot built from them.
//!
//! The gateway's update task is its one owner. It turns each backend update
//! into an [`Update`] (deciding advertisability with
//! [`crate::health::advertisable`], the one rule) and hands a batch of them
//! to [`Registry::apply`] together with the [`Roster`] in force (which
//! backends are configured, in which order, by which uid). The registry
//! answers with the new snapshot and what changed ([`Applied`]); acting on
//! it — installing the snapshot, logging, waking sessions — is the
//! caller's job. No I/O, no clock, no tasks: every rule here is tested
//! without a socket or a sleep.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::pin::{self, Approvals, Held};
use super::{BackendCatalog, Catalog, Changes, Conflict};
use crate::config::{FirstSeen, Naming, PinConfig};

/// One backend's news, as the registry needs it.
#[derive(Debug, Clone)]
pub struct Update {
    pub backend: Arc<str>,
    /// Which instance of `backend` sent it: an update whose uid is not the
    /// roster's comes from a backend a reload replaced, and is ignored.
    pub uid: u64,
    /// The backend left the configuration: forget what it listed.
    pub removed: bool,
    /// Whether its capabilities are shown (the caller asks
    /// [`crate::health::advertisable`]; the registry never re-decides).
    pub advertisable: bool,
    /// What it listed, when it (re)listed; `None` keeps the last listing.
    pub catalog: Option<BackendCatalog>,
    /// What an operator approved of it, when that changed (loaded from
    /// the store, or an approval); `None` keeps the last approvals. Read
    /// only for a backend its [`Member::pin`] holds.
    pub approvals: Option<Approvals>,
}

/// One configured backend, as a [`Roster`] lists it.
#[derive(Debug, Clone)]
pub struct Member {
    pub name: Arc<str>,
    /// The instance currently configured under `name` (see [`Update::uid`]).
    pub uid: u64,
    /// Each client session lists this backend itself (`forward_auth`): its
    /// shared entry is empty, so its showing or hiding changes no shared
    /// list, yet every session's own view.
    pub per_session: bool,
    /// The pin guard for its definitions (`catalog::pin`).
    pub pin: PinConfig,
}

/// The configured backends an apply runs against, in file order: the order
/// decides which backend keeps a name under `naming = "none"`. Built once
/// per backend set (a reload builds another).
#[derive(Debug, Clone, Default)]
pub struct Roster {
    order: Vec<Arc<str>>,
    uids: HashMap<Arc<str>, u64>,
    per_session: Vec<Arc<str>>,
    /// The backends the pin guard holds, with their settings.
    pinned: HashMap<Arc<str>, PinConfig>,
}

/// What the pin guard holds back, by backend.
pub type HeldBack = Vec<(Arc<str>, Vec<Held>)>;

/// What one [`Registry::apply`] produced.
#[derive(Debug)]
pub struct Applied {
    /// The new snapshot, to install for routing and resyncs.
    pub catalog: Arc<Catalog>,
    /// Which shared lists differ from the previous snapshot.
    pub changes: Changes,
    /// A per-session backend was shown or hidden (see [`Member::per_session`]).
    pub per_session_moved: bool,
    /// Some backend was shown or hidden: the change is about which
    /// backends serve (health), not only about what they list.
    pub shown_moved: bool,
    /// Naming conflicts the previous snapshot did not have: each is
    /// reported once, when it appears.
    pub new_conflicts: Vec<Conflict>,
    /// What the pin guard holds back now, by backend (every held backend
    /// with something held; the whole state, not a change).
    pub held: HeldBack,
    /// Held backends listed for the first time with `first_seen =
    /// "trust"`: their first listing, approved as it came; the caller
    /// records it.
    pub first_use: Vec<(Arc<str>, Approvals)>,
}

/// What the update task knows of each backend's catalog; see the module doc.
#[derive(Debug)]
pub struct Registry {
    naming: Naming,
    /// The last catalog each backend listed, kept while it is not shown so
    /// its names stay recognised (calls to them answer "unavailable", see
    /// [`Catalog::hidden_owner`]).
    known: HashMap<Arc<str>, Arc<BackendCatalog>>,
    /// Backends whose capabilities are shown.
    advertised: HashSet<Arc<str>>,
    /// What operators approved of each backend (see [`Update::approvals`]).
    approvals: HashMap<Arc<str>, Approvals>,
    /// The snapshot of the last apply (empty before the first).
    current: Arc<Catalog>,
}

// === impl Roster ===

impl Roster {
    pub fn new(members: impl IntoIterator<Item = Member>) -> Self {
        let mut r = Roster::default();
        for m in members {
            if m.per_session {
                r.per_session.push(m.name.clone());
            }
            if m.pin.holds() {
                r.pinned.insert(m.name.clone(), m.pin);
            }
            r.uids.insert(m.name.clone(), m.uid);
            r.order.push(m.name);
        }
        r
    }

    /// The uid configured under `name`, if `name` is configured.
    pub fn uid(&self, name: &str) -> Option<u64> {
        self.uids.get(name).copied()
    }
}

// === impl Applied ===

impl Applied {
    /// Whether sessions must re-derive their lists: a shared list changed,
    /// or a per-session backend came or went.
    pub fn must_tell(&self) -> bool {
        self.changes.any() || self.per_session_moved
    }
}

// === impl Registry ===

impl Registry {
    /// An empty registry naming exported names by `naming`.
    pub fn new(naming: Naming) -> Self {
        Registry {
            naming,
            known: HashMap::new(),
            advertised: HashSet::new(),
            approvals: HashMap::new(),
            current: Arc::default(),
        }
    }

    /// The snapshot of the last apply.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.current
    }

    /// What operators approved of `backend`, if anything ever was.
    pub fn approvals(&self, backend: &str) -> Option<&Approvals> {
        self.approvals.get(backend)
    }

    /// Replaces what operators approved of `backend` (loaded at start, or
    /// an approval); the next apply serves by it.
    pub fn set_approvals(&mut self, backend: Arc<str>, approvals: Approvals) {
        self.approvals.insert(backend, approvals);
    }

    /// Applies `updates` in order against `roster`, then rebuilds the
    /// snapshot once (a rebuild walks every backend's catalog; a thousand
    /// backends starting send thousands of updates) and diffs it with the
    /// previous one.
    ///
    /// Only configured backends appear in the snapshot, in roster order:
    /// advertised ones shown, the others' names kept as hidden. An update
    /// from another uid than the roster's (a backend a reload replaced or
    /// removed) is ignored, except a removal: that one forgets what the
    /// backend's name listed, unless the roster still configures that very
    /// instance. A reload sends the removal after installing the new set
    /// and before starting a replacement, so the replacement's own updates
    /// follow it.
    pub fn apply(&mut self, roster: &Roster, updates: impl IntoIterator<Item = Update>) -> Applied {
        for u in updates {
            let configured = roster.uid(&u.backend);
            if u.removed {
                if configured != Some(u.uid) {
                    self.known.remove(&u.backend);
                    self.advertised.remove(&u.backend);
                }
                continue;
            }
            if configured != Some(u.uid) {
                continue; // a late update from a backend a reload replaced
            }
            if let Some(c) = u.catalog {
                self.known.insert(u.backend.clone(), Arc::new(c));
            }
            if let Some(a) = u.approvals {
                self.approvals.insert(u.backend.clone(), a);
            }
            if u.advertisable {
                self.advertised.insert(u.backend);
            } else {
                self.advertised.remove(&u.backend);
            }
        }
        let first_use = self.trust_first_listings(roster);
        let (next, held) = self.build(roster);
        let next = Arc::new(next);
        let previous = std::mem::replace(&mut self.current, next.clone());
        let new_conflicts = next
            .conflicts
            .iter()
            .filter(|c| !previous.conflicts.contains(c))
            .cloned()
            .collect();
        let per_session_moved = roster
            .per_session
            .iter()
            .any(|b| next.shows(b) != previous.shows(b));
        let shown_moved = roster
            .order
            .iter()
            .any(|b| next.shows(b) != previous.shows(b));
        Applied {
            changes: next.diff(&previous),
            catalog: next,
            per_session_moved,
            shown_moved,
            new_conflicts,
            held,
            first_use,
        }
    }

    /// Approves, as it came, the listing of each held backend with
    /// `first_seen = "trust"` that has none approved yet (trust on first
    /// use); returns those approvals for the caller to record.
    fn trust_first_listings(&mut self, roster: &Roster) -> Vec<(Arc<str>, Approvals)> {
        let mut first = Vec::new();
        for name in &roster.order {
            let Some(pin) = roster.pinned.get(name) else {
                continue;
            };
            if pin.first_seen != FirstSeen::Trust || self.approvals.contains_key(name) {
                continue;
            }
            if let Some(listing) = self.known.get(name) {
                let approvals = pin::fingerprints(listing);
                self.approvals.insert(name.clone(), approvals.clone());
                first.push((name.clone(), approvals));
            }
        }
        first
    }

    /// What `name` serves of what it listed: all of it, or what the pin
    /// guard lets through (with what it holds back).
    fn served(
        &self,
        roster: &Roster,
        name: &Arc<str>,
        listing: &Arc<BackendCatalog>,
    ) -> (Arc<BackendCatalog>, Vec<Held>) {
        if !roster.pinned.contains_key(name) {
            return (listing.clone(), Vec::new());
        }
        let none = Approvals::default();
        let approvals = self.approvals.get(name).unwrap_or(&none);
        let guarded = pin::guard(listing, approvals);
        (Arc::new(guarded.served), guarded.held)
    }

    /// The snapshot of what is known now, as the pin guard lets it be
    /// served, and what the guard holds back. A withheld definition is not
    /// even kept as a hidden name: a call to it is unknown.
    fn build(&self, roster: &Roster) -> (Catalog, HeldBack) {
        let mut held = Vec::new();
        let (shown, hidden): (Vec<_>, Vec<_>) = roster
            .order
            .iter()
            .filter_map(|name| {
                let listing = self.known.get(name)?;
                let (served, withheld) = self.served(roster, name, listing);
                if !withheld.is_empty() {
                    held.push((name.clone(), withheld));
                }
                Some((name.clone(), served))
            })
            .partition(|(name, _)| self.advertised.contains(name));
        let catalog = Catalog::from_sources(&self.naming, shown)
            .with_hidden(&self.naming, hidden.iter().map(|(n, c)| (n, &**c)));
        (catalog, held)
    }
}

#[cfg(test)]
mod tests;
