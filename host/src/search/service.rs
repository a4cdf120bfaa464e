//! Tool search as the front uses it: which mode a caller lists in, what
//! it lists then, and `find_tool` over the index with exactly what the
//! caller's passthrough `tools/list` would show (its view: health,
//! `[[policy]]`, capability set and held definitions applied) as the
//! filter.
//!
//! The index holds what every backend listed, whatever its health; a
//! search keeps a document only if the caller's view lists that tool of
//! that backend, and answers with the view's definition (the name the
//! caller calls it by). So a health flip, a policy, a hold need no
//! rebuild, and nothing hidden is ever returned or counted.
//!
//! A view may list a backend's tools otherwise than the backend lists
//! them to everyone: a credential-forwarding backend's listing for one
//! caller, the extras of a client's own backend session, a capability
//! set's variant. Those tools are indexed as a listing of their own, under
//! a key made of the backend and a hash of the definitions, once per
//! distinct listing (sessions seeing the same one share it), and dropped
//! when no view remembered here uses it any more. So a session searches
//! exactly what its passthrough `tools/list` shows, by the text it shows.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use arc_swap::ArcSwap;
use serde_json::{Map, Value};

use super::document::json_size;
use super::index::{Arms, Index, Snapshot};
use super::meta::{self, FindArgs, Server};
use super::vectors::Vectors;
use crate::catalog::{Catalog, Entry, expose};
use crate::config::{Naming, SearchMode, ToolSearchConfig};
use crate::policy::Access;

/// What one caller last listed itself, by backend (`Pool::own_listings`).
pub type OwnListings = HashMap<Arc<str>, Arc<crate::catalog::BackendCatalog>>;

/// Views whose search facts are remembered.
const VIEWS_KEPT: usize = 64;

/// The gateway's tool search; see the module doc.
pub struct ToolSearch {
    index: Index,
    settings: ArcSwap<ToolSearchConfig>,
    naming: Naming,
    /// What `find` needs of each recent view.
    views: Mutex<Vec<Arc<Seen>>>,
    /// Held while a view is worked out (see `seen_of`).
    working: Mutex<()>,
    /// The semantic arm, when a model is configured and loaded.
    vectors: std::sync::OnceLock<Arc<Vectors>>,
    /// A listing of some sessions' own was indexed on a request path,
    /// where nothing is embedded ([`ToolSearch::take_unembedded`]).
    unembedded: std::sync::atomic::AtomicBool,
    /// What [`ToolSearch::servers`] counted, per snapshot and policy entry.
    counted: Mutex<Vec<Counted>>,
}

/// How many tools of each listing one `[[policy]]` entry lets its
/// principals use, in one snapshot: every search-mode `tools/list` and
/// `find_tool` names the servers, and counting them is a policy match per
/// tool of the index.
struct Counted {
    snapshot: Weak<Snapshot>,
    access: AccessKey,
    by_listing: Arc<HashMap<Arc<str>, usize>>,
}

/// An [`Access`], by identity.
enum AccessKey {
    Everything,
    Nothing,
    Rule(Weak<crate::policy::Rule>),
}

impl AccessKey {
    fn of(access: &Access) -> AccessKey {
        match access {
            Access::Everything => AccessKey::Everything,
            Access::Nothing => AccessKey::Nothing,
            Access::Rule(r) => AccessKey::Rule(Arc::downgrade(r)),
        }
    }

    fn is(&self, access: &Access) -> bool {
        match (self, access) {
            (AccessKey::Everything, Access::Everything) | (AccessKey::Nothing, Access::Nothing) => {
                true
            }
            (AccessKey::Rule(w), Access::Rule(r)) => std::ptr::eq(w.as_ptr(), Arc::as_ptr(r)),
            _ => false,
        }
    }
}

/// Counts kept at most (policy entries times snapshots still in use).
const COUNTS_KEPT: usize = 32;

/// What `find` needs of one view, worked out once per view (and again
/// when the index changed since).
struct Seen {
    view: Weak<Catalog>,
    /// The snapshot in force once its listings were indexed.
    snapshot: Weak<Snapshot>,
    /// Bytes of the view's tools as a passthrough `tools/list`.
    bytes: usize,
    /// The view's tools by the listing their document is filed under and
    /// the backend's own name: their place in the view's `tools`.
    shown: HashMap<Arc<str>, HashMap<String, usize>>,
    /// The listings of its own it had indexed.
    listings: Vec<Arc<str>>,
}

impl Seen {
    fn is_of(&self, view: &Catalog) -> bool {
        std::ptr::eq(self.view.as_ptr(), view)
    }

    /// Where in the view the tool of `doc` is, if the view lists it as
    /// indexed.
    fn place(&self, doc: &super::Doc) -> Option<usize> {
        self.shown.get(&*doc.listing)?.get(&doc.name).copied()
    }
}

/// One tool `find_tool` found.
#[derive(Debug, Clone)]
pub struct Found {
    /// As the caller's view lists it.
    pub tool: Entry,
    pub server: Arc<str>,
    pub score: f32,
}

/// What one `find_tool` answers.
#[derive(Debug, Clone)]
pub struct Answer {
    pub found: Vec<Found>,
    pub generation: u64,
    /// Bytes of the caller's full tool list minus bytes of this answer.
    pub bytes_saved: i64,
    /// When nothing matched: the servers the caller may use.
    pub hint: Option<String>,
}

impl Answer {
    /// The answer's `structuredContent`.
    pub fn structured(&self) -> Value {
        let tools: Vec<Value> = self
            .found
            .iter()
            .map(|f| {
                let mut def = f.tool.json().clone();
                def.entry("server")
                    .or_insert_with(|| Value::String(f.server.to_string()));
                Value::Object(def)
            })
            .collect();
        let mut out = Map::new();
        out.insert("tools".into(), Value::Array(tools));
        out.insert("generation".into(), self.generation.into());
        out.insert("bytes_saved".into(), self.bytes_saved.into());
        if let Some(h) = &self.hint {
            out.insert("hint".into(), Value::String(h.clone()));
        }
        Value::Object(out)
    }
}

impl ToolSearch {
    pub fn new(settings: ToolSearchConfig, naming: Naming) -> Self {
        ToolSearch {
            index: Index::default(),
            settings: ArcSwap::from_pointee(settings),
            naming,
            views: Mutex::default(),
            working: Mutex::default(),
            vectors: std::sync::OnceLock::new(),
            unembedded: Default::default(),
            counted: Mutex::default(),
        }
    }

    /// Whether documents were indexed on a request path since the last
    /// call, with the semantic arm on: the caller has them embedded in
    /// the background (`Gateway::fill_vectors`); until then they rank by
    /// keywords alone.
    pub fn take_unembedded(&self) -> bool {
        self.vectors.get().is_some()
            && self
                .unembedded
                .swap(false, std::sync::atomic::Ordering::AcqRel)
    }

    /// Turns the semantic arm on with `vectors` (once).
    pub fn set_vectors(&self, vectors: Arc<Vectors>) {
        let _ = self.vectors.set(vectors);
    }

    /// The semantic arm's vectors, if it is on.
    pub fn vectors(&self) -> Option<&Arc<Vectors>> {
        self.vectors.get()
    }

    /// Embeds the documents of the index in force that have no vector
    /// yet, and forgets those of documents gone; blocking (the model runs
    /// here): call it off every request path. How many were embedded.
    pub fn fill_vectors(&self) -> Result<usize, String> {
        let Some(vectors) = self.vectors.get() else {
            return Ok(0);
        };
        let snap = self.index.snapshot();
        let docs: Vec<_> = snap.backends().flat_map(|b| snap.of(b)).cloned().collect();
        let live: std::collections::HashSet<u64> = docs.iter().map(|d| d.meaning_key).collect();
        let n = vectors.fill(docs.iter().map(|d| (d.meaning_key, d.meaning.as_str())))?;
        vectors.retain(&live);
        Ok(n)
    }

    pub fn index(&self) -> &Index {
        &self.index
    }

    pub fn settings(&self) -> Arc<ToolSearchConfig> {
        self.settings.load_full()
    }

    /// A reload's `[tool_search]`.
    pub fn set_settings(&self, settings: ToolSearchConfig) {
        self.settings.store(Arc::new(settings));
    }

    /// How the caller with `access` lists tools: its `[[policy]]` entry's
    /// `tool_search`, else `[tool_search] mode`.
    pub fn mode(&self, access: &Access) -> SearchMode {
        match access {
            Access::Rule(r) => r.config.tool_search,
            _ => None,
        }
        .unwrap_or(self.settings.load().mode)
    }

    /// The servers the caller with `access` may use, among `configured`
    /// (in config order): those with a tool it may call, as last listed
    /// (health does not count, so this changes only with listings, the
    /// config and the policy). `own`: what the caller last listed itself
    /// of the backends it sees through its own listing (`forward_auth`,
    /// an instance of its own), counted in place of the shared listing.
    pub fn servers<'a>(
        &self,
        access: &Access,
        configured: impl IntoIterator<Item = &'a Arc<str>>,
        own: &OwnListings,
    ) -> Vec<Server> {
        let shared = self.counted(access);
        configured
            .into_iter()
            .filter_map(|b| {
                let tools = match own.get(b) {
                    Some(c) => c
                        .tools
                        .iter()
                        .filter(|t| access.permits(&expose(&self.naming, b, t.key())))
                        .count(),
                    None => shared.get(b).copied().unwrap_or(0),
                };
                (tools > 0).then(|| Server {
                    name: b.to_string(),
                    tools,
                })
            })
            .collect()
    }

    /// How many tools of each listing of the snapshot in force `access`
    /// permits: counted once per snapshot and policy entry.
    fn counted(&self, access: &Access) -> Arc<HashMap<Arc<str>, usize>> {
        let snap = self.index.snapshot();
        let lock = || self.counted.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = lock()
            .iter()
            .find(|c| std::ptr::eq(c.snapshot.as_ptr(), Arc::as_ptr(&snap)) && c.access.is(access))
        {
            return c.by_listing.clone();
        }
        let by_listing: Arc<HashMap<Arc<str>, usize>> = Arc::new(
            snap.backends()
                .map(|l| {
                    let n = snap
                        .of(l)
                        .filter(|d| access.permits(&expose(&self.naming, &d.backend, &d.name)))
                        .count();
                    (l.clone(), n)
                })
                .collect(),
        );
        let mut counted = lock();
        counted.retain(|c| {
            let live = match &c.access {
                AccessKey::Rule(r) => r.strong_count() > 0,
                _ => true,
            };
            live && c.snapshot.strong_count() > 0 && !c.access.is(access)
        });
        if counted.len() >= COUNTS_KEPT {
            counted.remove(0);
        }
        counted.push(Counted {
            snapshot: Arc::downgrade(&snap),
            access: AccessKey::of(access),
            by_listing: by_listing.clone(),
        });
        by_listing
    }

    /// What a caller listing in `mode` gets as its tools: `view`'s own in
    /// passthrough; else the meta-tools (for `servers`), and in
    /// `always_listed` mode the view's tools `[tool_search]` names.
    pub fn listed(&self, mode: SearchMode, servers: &[Server], view: &Catalog) -> Vec<Entry> {
        if !mode.searches() {
            return view.tools.clone();
        }
        let settings = self.settings.load();
        let mut out = vec![meta::find_tool(servers, settings.limit), meta::call_tool()];
        if mode == SearchMode::AlwaysListed {
            // A backend tool named like a meta-tool (`naming = "none"`)
            // is not listed twice: the meta-tool is served under that name.
            let listed: Vec<Entry> = view
                .tools
                .iter()
                .filter(|t| {
                    settings.always_listed.iter().any(|n| n == t.key())
                        && ![meta::FIND, meta::CALL].contains(&t.key())
                })
                .cloned()
                .collect();
            out.extend(listed);
        }
        out
    }

    /// What the caller with `access` lists as its tools, `view` being
    /// what it may see and `configured` the backends in config order:
    /// `None` in passthrough mode (its view's tools, as they are). `own`
    /// gives what the caller listed itself, asked only in a mode that
    /// searches (passthrough `tools/list` is the hot path).
    pub fn tools_listed<'a>(
        &self,
        access: &Access,
        configured: impl IntoIterator<Item = &'a Arc<str>>,
        own: impl FnOnce() -> OwnListings,
        view: &Catalog,
    ) -> Option<Vec<Entry>> {
        let mode = self.mode(access);
        if !mode.searches() {
            return None;
        }
        Some(self.listed(mode, &self.servers(access, configured, &own()), view))
    }

    /// `find_tool` for a caller whose view is `view`, at catalog
    /// `generation`; `servers`: those it may use (for the hint).
    pub fn find(
        &self,
        view: &Catalog,
        args: &FindArgs,
        servers: &[Server],
        generation: u64,
    ) -> Answer {
        let seen = self.seen(view);
        let snap = self.index.snapshot();
        // With the semantic arm: the query's vector (a failure ranks by
        // keywords alone, and says so).
        let qvec = self.vectors.get().and_then(|v| match v.query(&args.text) {
            Ok(q) => Some((q, v)),
            Err(e) => {
                tracing::warn!(error = %e, "find_tool: the query could not be embedded; ranking by keywords alone");
                None
            }
        });
        let arms = match &qvec {
            Some((q, v)) => Arms::Fused {
                query: q,
                vectors: v,
            },
            None => Arms::Keyword,
        };
        let found: Vec<Found> = snap
            .rank_by(arms, &args.text, args.limit, |d| {
                if args.server.as_deref().is_some_and(|s| s != &*d.backend) {
                    return None;
                }
                let i = seen.place(d)?;
                Some((view.tools.get(i)?.clone(), d.backend.clone()))
            })
            .into_iter()
            .map(|h| Found {
                tool: h.found.0,
                server: h.found.1,
                score: h.score,
            })
            .collect();
        let hint = found.is_empty().then(|| hint(args, servers));
        let mut answer = Answer {
            found,
            generation,
            bytes_saved: 0,
            hint,
        };
        let own = json_size(&answer.structured()) as i64;
        answer.bytes_saved = seen.bytes as i64 - own;
        answer
    }

    /// Up to three tools the caller may use whose names and definitions
    /// are closest to `name` (for an unknown or denied tool's error: the
    /// same for both, since only what the view lists is considered).
    pub fn suggest(&self, view: &Arc<Catalog>, name: &str) -> Vec<String> {
        let seen = self.seen_of(view, Some(view));
        let snap = self.index.snapshot();
        snap.rank(name, 3, |d| {
            let i = seen.place(d)?;
            view.tools.get(i).map(|e| e.key().to_owned())
        })
        .into_iter()
        .map(|h| h.found)
        .collect()
    }

    /// Works out what `find` needs of `view` and keeps it while the view
    /// lives (the gateway's views live in `Arc`s and are shared by every
    /// caller they fit): call it before `find` with the same view.
    pub fn remember(&self, view: &Arc<Catalog>) {
        self.seen_of(view, Some(view));
    }

    /// What `find` needs of `view`: remembered, or worked out now.
    fn seen(&self, view: &Catalog) -> Arc<Seen> {
        self.seen_of(view, None)
    }

    /// [`ToolSearch::seen`], remembered when `held` is the `Arc` that
    /// holds `view`.
    fn seen_of(&self, view: &Catalog, held: Option<&Arc<Catalog>>) -> Arc<Seen> {
        let now = self.index.snapshot();
        // A view remembered before is remembered again when the index
        // changed since: the `Arc` its entry holds a `Weak` of.
        let (remembered, bytes) = {
            let views = self.views_lock();
            let known = views.iter().find(|s| s.is_of(view));
            if let Some(s) = known
                && std::ptr::eq(s.snapshot.as_ptr(), Arc::as_ptr(&now))
            {
                return s.clone();
            }
            // Its size depends on the view alone: kept.
            (known.and_then(|s| s.view.upgrade()), known.map(|s| s.bytes))
        };
        let held = held.or(remembered.as_ref());
        // One view worked out at a time: a sweep must never drop the
        // listing another view has just indexed and not yet remembered.
        let _one = self.working.lock().unwrap_or_else(|e| e.into_inner());
        let mut seen = self.work_out(view, &self.index.snapshot(), bytes);
        // Kept only for a view an `Arc` holds, by a `Weak` of it (a bare
        // address could be another view's later).
        if let Some(held) = held {
            seen.view = Arc::downgrade(held);
        }
        let stale: Vec<Arc<str>> = {
            let mut views = self.views_lock();
            views.retain(|s| !s.is_of(view) && s.view.strong_count() > 0);
            if views.len() >= VIEWS_KEPT {
                views.remove(0);
            }
            let live: std::collections::HashSet<&Arc<str>> = views
                .iter()
                .flat_map(|s| &s.listings)
                .chain(&seen.listings)
                .collect();
            let snap = self.index.snapshot();
            snap.backends()
                .filter(|l| !live.contains(l) && snap.of(l).any(|d| d.listing != d.backend))
                .cloned()
                .collect()
        };
        for listing in stale {
            self.index.remove(&listing);
        }
        seen.snapshot = Arc::downgrade(&self.index.snapshot());
        let seen = Arc::new(seen);
        if held.is_some() {
            self.views_lock().push(seen.clone());
        }
        seen
    }

    fn views_lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Seen>>> {
        self.views.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// [`Seen`] of `view` against `snap`: each tool the view lists as its
    /// backend lists it to everyone is found by that document; the others
    /// are indexed as a listing of the view's own per backend. `bytes`:
    /// the view's size, when it was worked out before.
    fn work_out(&self, view: &Catalog, snap: &Snapshot, bytes: Option<usize>) -> Seen {
        let mut shown: HashMap<Arc<str>, HashMap<String, usize>> = HashMap::new();
        let mut own: HashMap<Arc<str>, Vec<(usize, Entry)>> = HashMap::new();
        // The view's tools as JSON, in bytes: a tool found as indexed is
        // its document's definition under another name.
        let mut items = 0;
        for (i, t) in view.tools.iter().enumerate() {
            let Some(route) = view.route_tool(t.key()) else {
                items += json_size(t.json());
                continue;
            };
            let indexed = snap
                .of(&route.backend)
                .find(|d| d.name == route.name)
                .filter(|d| same_but_name(t.json(), d.entry.json()));
            if let Some(d) = indexed {
                items += d.bytes + json_size(t.key()) - json_size(&d.name);
                shown
                    .entry(route.backend.clone())
                    .or_default()
                    .insert(route.name.clone(), i);
            } else {
                items += json_size(t.json());
                own.entry(route.backend.clone())
                    .or_default()
                    .push((i, t.named(crate::catalog::EntryKind::Tool, &route.name)));
            }
        }
        let mut listings = Vec::new();
        for (backend, tools) in own {
            let listing = listing_key(&backend, tools.iter().map(|(_, e)| e));
            // Its key is a hash of its definitions: indexed once, it is
            // there as it is, and a search takes no lock to find that out
            // (the writer's, which a re-indexing holds).
            if snap.of(&listing).next().is_none() {
                let entries: Vec<Entry> = tools.iter().map(|(_, e)| e.clone()).collect();
                let stats = self.index.reindex_listing(&listing, &backend, &entries);
                if stats.added + stats.changed > 0 {
                    tracing::debug!(%backend, %listing, tools = entries.len(), "tool search: a listing of some sessions' own indexed");
                    self.unembedded
                        .store(true, std::sync::atomic::Ordering::Release);
                }
            }
            shown.insert(
                listing.clone(),
                tools
                    .into_iter()
                    .map(|(i, e)| (e.key().to_owned(), i))
                    .collect(),
            );
            listings.push(listing);
        }
        Seen {
            view: Weak::new(),
            snapshot: Arc::downgrade(&self.index.snapshot()),
            // `{"tools":[` + `]}` + the commas.
            bytes: bytes.unwrap_or(12 + items + view.tools.len().saturating_sub(1)),
            shown,
            listings,
        }
    }

    /// The snapshot of the index in force.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.index.snapshot()
    }
}

/// Whether two definitions are the same but for their `name`.
fn same_but_name(a: &Map<String, Value>, b: &Map<String, Value>) -> bool {
    a.len() == b.len() && a.iter().all(|(k, v)| k == "name" || b.get(k) == Some(v))
}

/// The key of a listing of `backend`'s `tools` some sessions see: the
/// backend's name and a hash of the definitions (the same listing gets
/// the same key, whoever sees it).
fn listing_key<'a>(backend: &str, tools: impl Iterator<Item = &'a Entry>) -> Arc<str> {
    let mut texts: Vec<String> = tools
        .map(|t| Value::Object(t.json().clone()).to_string())
        .collect();
    texts.sort_unstable();
    format!("{backend}#{:016x}", super::vectors::key(&texts.join("\n"))).into()
}

/// What to try when nothing matched.
fn hint(args: &FindArgs, servers: &[Server]) -> String {
    let names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
    let within = match &args.server {
        Some(s) if !names.contains(&s.as_str()) => {
            format!("`{s}` is not a server you can use. ")
        }
        Some(s) => format!("Nothing of `{s}` matched. "),
        None => "Nothing matched. ".into(),
    };
    if names.is_empty() {
        return format!("{within}No server offers you tools right now.");
    }
    format!(
        "{within}Rephrase with words a tool's name or description would use, or name a server (`server`): {}.",
        names.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{BackendCatalog, EntryKind};
    use serde_json::json;

    /// A small deterministic generator (xorshift), so a failure repeats.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        fn chance(&mut self, percent: u64) -> bool {
            self.next() % 100 < percent
        }
    }

    const WORDS: [&str; 16] = [
        "read", "file", "write", "search", "issue", "time", "zone", "page", "click", "query",
        "table", "send", "message", "list", "branch", "commit",
    ];

    fn tool(rng: &mut Rng, i: usize) -> Entry {
        let name = format!("{}_{}_{i}", WORDS[rng.below(16)], WORDS[rng.below(16)]);
        let description: Vec<&str> = (0..6).map(|_| WORDS[rng.below(16)]).collect();
        Entry::from_json(
            EntryKind::Tool,
            json!({"name": name, "description": description.join(" "), "inputSchema": {"type": "object"}}),
        )
        .unwrap()
    }

    /// For random queries, principals' policies, capability sets' views,
    /// held definitions and health states: `find_tool` returns only tools
    /// the same caller's passthrough list shows, each as it shows it, and
    /// never more than asked for.
    #[test]
    fn find_tool_returns_a_subset_of_the_callers_passthrough_list() {
        let naming = Naming::Prefix {
            separator: "__".into(),
        };
        let search = ToolSearch::new(ToolSearchConfig::default(), naming.clone());
        let mut rng = Rng(0x5eed_cafe_f00d_1234);
        let backends: Vec<Arc<str>> = ["alpha", "beta", "gamma", "delta"]
            .into_iter()
            .map(Arc::from)
            .collect();
        let mut listings: Vec<BackendCatalog> = Vec::new();
        for b in &backends {
            let tools: Vec<Entry> = (0..25).map(|i| tool(&mut rng, i)).collect();
            search.index().reindex(b, &tools);
            listings.push(BackendCatalog {
                tools,
                ..Default::default()
            });
        }
        for trial in 0..300 {
            // Health: some backends are not shown at all.
            let mut shown: Vec<(&Arc<str>, BackendCatalog)> = Vec::new();
            for (b, l) in backends.iter().zip(&listings) {
                if !rng.chance(75) {
                    continue;
                }
                // Held definitions (the pin guard), a capability set's
                // view that lists fewer tools, and listings of some
                // sessions' own that describe a tool otherwise.
                let mut tools = Vec::new();
                for t in &l.tools {
                    if !rng.chance(85) {
                        continue;
                    }
                    tools.push(if rng.chance(5) {
                        def(t.key(), "zebra crossing")
                    } else {
                        t.clone()
                    });
                }
                shown.push((
                    b,
                    BackendCatalog {
                        tools,
                        ..Default::default()
                    },
                ));
            }
            let base = Catalog::build(&naming, shown.iter().map(|(b, c)| (*b, c)));
            // A principal's policy: some names denied.
            let denied: Vec<String> = base
                .tools
                .iter()
                .filter(|_| rng.chance(30))
                .map(|t| t.key().to_owned())
                .collect();
            let view = base.filtered(|_, name| !denied.iter().any(|d| d == name));
            let query = if rng.chance(15) {
                // Words only the sessions' own listings have.
                "zebra crossing".to_owned()
            } else if rng.chance(30) && !denied.is_empty() {
                // A denied tool's exact name.
                denied[rng.below(denied.len())].clone()
            } else {
                (0..1 + rng.below(3))
                    .map(|_| WORDS[rng.below(16)])
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            let limit = 1 + rng.below(20);
            let server = rng
                .chance(20)
                .then(|| backends[rng.below(backends.len())].to_string());
            let args = FindArgs {
                text: query.clone(),
                query_bytes: query.len(),
                limit,
                server: server.clone(),
            };
            let answer = search.find(&view, &args, &[], 1);
            assert!(answer.found.len() <= limit, "trial {trial}: over the limit");
            for f in &answer.found {
                let listed = view.tools.iter().find(|t| t.key() == f.tool.key());
                assert_eq!(
                    listed,
                    Some(&f.tool),
                    "trial {trial}: `{}` found for {query:?} is not in the caller's list",
                    f.tool.key()
                );
                assert!(
                    !denied.contains(&f.tool.key().to_owned()),
                    "trial {trial}: denied"
                );
                if let Some(s) = &server {
                    assert_eq!(&*f.server, s.as_str(), "trial {trial}: another server");
                }
            }
            if query == "zebra crossing" && server.is_none() {
                let own = view
                    .tools
                    .iter()
                    .filter(|t| t.str("description") == Some("zebra crossing"))
                    .count();
                assert_eq!(
                    answer.found.len(),
                    own.min(limit),
                    "trial {trial}: the caller's own definitions are what it searches"
                );
            }
        }
    }

    fn def(name: &str, description: &str) -> Entry {
        Entry::from_json(
            EntryKind::Tool,
            json!({"name": name, "description": description, "inputSchema": {"type": "object"}}),
        )
        .unwrap()
    }

    fn names(answer: &Answer) -> Vec<&str> {
        answer.found.iter().map(|f| f.tool.key()).collect()
    }

    fn ask(query: &str) -> FindArgs {
        FindArgs {
            text: query.into(),
            query_bytes: query.len(),
            limit: 5,
            server: None,
        }
    }

    /// A backend the caller sees only through its own listing (a
    /// forwarded credential's) is named with that listing's tools, even
    /// while the shared listing has none and whatever its health; the
    /// others as they list to everyone.
    #[test]
    fn servers_are_counted_from_the_callers_own_listing_where_it_has_one() {
        let naming = Naming::Prefix {
            separator: "__".into(),
        };
        let search = ToolSearch::new(ToolSearchConfig::default(), naming);
        let (files, github, empty): (Arc<str>, Arc<str>, Arc<str>) =
            ("files".into(), "github".into(), "empty".into());
        search
            .index()
            .reindex(&files, &[def("read_file", "r"), def("stat", "s")]);
        let configured = [&files, &github, &empty];
        let named = |own: &OwnListings| -> Vec<(String, usize)> {
            search
                .servers(&Access::Everything, configured, own)
                .into_iter()
                .map(|s| (s.name, s.tools))
                .collect()
        };
        assert_eq!(named(&OwnListings::new()), [("files".to_owned(), 2)]);
        let mine: OwnListings = [(
            github.clone(),
            Arc::new(BackendCatalog {
                tools: vec![def("issues", "i"), def("pulls", "p"), def("repos", "r")],
                ..Default::default()
            }),
        )]
        .into();
        assert_eq!(
            named(&mine),
            [("files".to_owned(), 2), ("github".to_owned(), 3)]
        );
        assert!(
            search
                .servers(&Access::Nothing, configured, &mine)
                .is_empty(),
            "a caller that may use nothing is named no server"
        );
        // Counted again once the index changed.
        search.index().reindex(&empty, &[def("one", "o")]);
        assert_eq!(
            named(&OwnListings::new()),
            [("files".to_owned(), 2), ("empty".to_owned(), 1)]
        );
    }

    /// A listing of some sessions' own indexed on a request path is
    /// flagged for embedding, and embedded by the next fill.
    #[test]
    fn a_sessions_own_listing_is_embedded_after_it_is_indexed() {
        struct Length;
        impl crate::search::vectors::Embed for Length {
            fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
                Ok(texts.iter().map(|t| vec![t.len() as f32]).collect())
            }
        }
        let naming = Naming::Prefix {
            separator: "__".into(),
        };
        let search = ToolSearch::new(ToolSearchConfig::default(), naming.clone());
        let files: Arc<str> = "files".into();
        search
            .index()
            .reindex(&files, &[def("read_file", "Read a file")]);
        assert!(
            !search.take_unembedded(),
            "no semantic arm: nothing to embed"
        );
        search.set_vectors(Arc::new(Vectors::new(Arc::new(Length))));
        assert_eq!(search.fill_vectors(), Ok(1));
        let own = BackendCatalog {
            tools: vec![def("read_file", "Fetch a document from storage")],
            ..Default::default()
        };
        let view = Arc::new(Catalog::build(&naming, [(&files, &own)]));
        search.remember(&view);
        assert!(search.take_unembedded());
        assert!(!search.take_unembedded(), "taken once");
        let vectors = search.vectors().unwrap().clone();
        let snap = search.snapshot();
        let theirs = snap
            .backends()
            .flat_map(|l| snap.of(l))
            .find(|d| d.listing != d.backend)
            .expect("the session's listing is indexed")
            .clone();
        assert!(vectors.get(theirs.meaning_key).is_none());
        assert_eq!(search.fill_vectors(), Ok(1));
        assert!(vectors.get(theirs.meaning_key).is_some());
        // The same view again indexes nothing new.
        search.remember(&view);
        assert!(!search.take_unembedded());
    }

    /// A view's size (what `bytes_saved` is counted against) is its tools
    /// as a passthrough `tools/list` sends them, to the byte: the indexed
    /// ones from their documents' sizes, renamed, the others serialized.
    #[test]
    fn a_views_size_is_its_tools_list_to_the_byte() {
        let naming = Naming::Prefix {
            separator: "__".into(),
        };
        let search = ToolSearch::new(ToolSearchConfig::default(), naming.clone());
        let (files, odd): (Arc<str>, Arc<str>) = ("files".into(), "odd\"ü".into());
        let shared = vec![
            def("read_file", "Read a file"),
            def("naïve \"quoted\"", "Escapes in the name"),
        ];
        search.index().reindex(&files, &shared);
        search.index().reindex(&odd, &[def("tab\there", "t")]);
        let own = BackendCatalog {
            tools: vec![def("read_file", "Fetched otherwise"), def("extra", "e")],
            ..Default::default()
        };
        for tools in [shared.clone(), own.tools.clone(), Vec::new()] {
            let view = Arc::new(Catalog::build(
                &naming,
                [
                    (
                        &files,
                        &BackendCatalog {
                            tools,
                            ..Default::default()
                        },
                    ),
                    (
                        &odd,
                        &BackendCatalog {
                            tools: vec![def("tab\there", "t")],
                            ..Default::default()
                        },
                    ),
                ],
            ));
            let listed = serde_json::to_vec(
                &json!({"tools": view.tools.iter().map(Entry::to_value).collect::<Vec<_>>()}),
            )
            .unwrap()
            .len();
            assert_eq!(search.seen(&view).bytes, listed);
        }
    }

    /// A view that lists a backend's tools otherwise than the backend
    /// lists them to everyone (a forwarded credential's listing, a client's
    /// own backend session) is searched by its own text, tools only it
    /// has included; views with the same listing share its documents,
    /// which go when no view uses them.
    #[test]
    fn a_session_searches_its_own_listing_by_its_own_text() {
        let naming = Naming::Prefix {
            separator: "__".into(),
        };
        let search = ToolSearch::new(ToolSearchConfig::default(), naming.clone());
        let files: Arc<str> = "files".into();
        let shared = vec![
            def("read_file", "Read the contents of a file from disk"),
            def("list_directory", "List a directory"),
        ];
        search.index().reindex(&files, &shared);
        let everyone = Arc::new(Catalog::build(
            &naming,
            [(
                &files,
                &BackendCatalog {
                    tools: shared.clone(),
                    ..Default::default()
                },
            )],
        ));
        let own = BackendCatalog {
            tools: vec![
                def("read_file", "Fetch a document from storage"),
                def("list_directory", "List a directory"),
                def("quarterly_report", "Revenue figures of the quarter"),
            ],
            ..Default::default()
        };
        let alice = Arc::new(Catalog::build(&naming, [(&files, &own)]));
        let bob = Arc::new(Catalog::build(&naming, [(&files, &own)]));
        for v in [&everyone, &alice, &bob] {
            search.remember(v);
        }
        // Only the sessions' listing has the report.
        assert_eq!(
            names(&search.find(&alice, &ask("revenue figures"), &[], 1)),
            ["files__quarterly_report"]
        );
        assert!(
            search
                .find(&everyone, &ask("revenue figures"), &[], 1)
                .found
                .is_empty()
        );
        // Each view's read_file is found by its own text, and answered as
        // that view lists it.
        let found = search.find(&alice, &ask("fetch a document from storage"), &[], 1);
        assert_eq!(names(&found)[0], "files__read_file");
        let listed = alice.tools.iter().find(|t| t.key() == "files__read_file");
        assert_eq!(Some(&found.found[0].tool), listed);
        assert!(
            !names(&search.find(&alice, &ask("contents disk"), &[], 1))
                .contains(&"files__read_file"),
            "alice's read_file was found by the text everyone else sees"
        );
        assert_eq!(
            names(&search.find(&everyone, &ask("contents disk"), &[], 1)),
            ["files__read_file"]
        );
        // A tool listed as everyone sees it keeps the shared document.
        assert_eq!(
            names(&search.find(&alice, &ask("list a directory"), &[], 1))[0],
            "files__list_directory"
        );
        // alice and bob share one listing of their own.
        let own_listings = |s: &ToolSearch| {
            let snap = s.snapshot();
            snap.backends()
                .filter(|l| snap.of(l).any(|d| d.listing != d.backend))
                .count()
        };
        assert_eq!(own_listings(&search), 1);
        assert_eq!(
            search.snapshot().len(),
            2 + 2,
            "the shared two and the two that differ"
        );
        // Gone with the last view that used it.
        drop(alice);
        drop(bob);
        search.remember(&Arc::new(
            Catalog::build(&naming, [(&files, &own)])
                .filtered(|_, n| n != "files__quarterly_report"),
        ));
        let left: Vec<String> = {
            let snap = search.snapshot();
            snap.backends().map(|l| l.to_string()).collect()
        };
        assert_eq!(own_listings(&search), 1, "{left:?}");
        assert_eq!(search.snapshot().len(), 2 + 1, "{left:?}");
    }
}
