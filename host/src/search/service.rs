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

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use arc_swap::ArcSwap;
use serde_json::{Map, Value};

use super::index::{Arms, Index, Snapshot};
use super::meta::{self, FindArgs, Server};
use super::vectors::Vectors;
use crate::catalog::{Catalog, Entry, expose};
use crate::config::{Naming, SearchMode, ToolSearchConfig};
use crate::policy::Access;

/// Views whose passthrough listing size is remembered.
const SIZES_KEPT: usize = 64;

/// The gateway's tool search; see the module doc.
pub struct ToolSearch {
    index: Index,
    settings: ArcSwap<ToolSearchConfig>,
    naming: Naming,
    /// Bytes of each recent view's tools as a passthrough `tools/list`
    /// would send them.
    sizes: Mutex<Vec<(Weak<Catalog>, usize)>>,
    /// The semantic arm, when a model is configured and loaded.
    vectors: std::sync::OnceLock<Arc<Vectors>>,
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
            sizes: Mutex::default(),
            vectors: std::sync::OnceLock::new(),
        }
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
    /// config and the policy).
    pub fn servers<'a>(
        &self,
        access: &Access,
        configured: impl IntoIterator<Item = &'a Arc<str>>,
    ) -> Vec<Server> {
        let snap = self.index.snapshot();
        configured
            .into_iter()
            .filter_map(|b| {
                let tools = snap
                    .of(b)
                    .filter(|d| access.permits(&expose(&self.naming, b, &d.name)))
                    .count();
                (tools > 0).then(|| Server {
                    name: b.to_string(),
                    tools,
                })
            })
            .collect()
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
    /// `None` in passthrough mode (its view's tools, as they are).
    pub fn tools_listed<'a>(
        &self,
        access: &Access,
        configured: impl IntoIterator<Item = &'a Arc<str>>,
        view: &Catalog,
    ) -> Option<Vec<Entry>> {
        let mode = self.mode(access);
        if !mode.searches() {
            return None;
        }
        Some(self.listed(mode, &self.servers(access, configured), view))
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
        let snap = self.index.snapshot();
        let shown = reverse(view);
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
                shown
                    .get(&(&*d.backend, d.name.as_str()))
                    .map(|e| ((*e).clone(), d.backend.clone()))
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
        let own = serde_json::to_vec(&answer.structured()).map_or(0, |v| v.len()) as i64;
        answer.bytes_saved = self.listing_bytes(view) as i64 - own;
        answer
    }

    /// Up to three tools the caller may use whose names and definitions
    /// are closest to `name` (for an unknown or denied tool's error: the
    /// same for both, since only what the view lists is considered).
    pub fn suggest(&self, view: &Catalog, name: &str) -> Vec<String> {
        let snap = self.index.snapshot();
        let shown = reverse(view);
        snap.rank(name, 3, |d| {
            shown
                .get(&(&*d.backend, d.name.as_str()))
                .map(|e| e.key().to_owned())
        })
        .into_iter()
        .map(|h| h.found)
        .collect()
    }

    /// Bytes of `view`'s tools as a passthrough `tools/list` result.
    fn listing_bytes(&self, view: &Catalog) -> usize {
        let mut sizes = self.sizes.lock().unwrap_or_else(|e| e.into_inner());
        sizes.retain(|(w, _)| w.strong_count() > 0);
        if let Some((_, n)) = sizes.iter().find(|(w, _)| std::ptr::eq(w.as_ptr(), view)) {
            return *n;
        }
        let n = listing_size(&view.tools);
        drop(sizes);
        n
    }

    /// Remembers the listing size of a view that lives in an `Arc`.
    pub fn remember(&self, view: &Arc<Catalog>) {
        let mut sizes = self.sizes.lock().unwrap_or_else(|e| e.into_inner());
        if sizes
            .iter()
            .any(|(w, _)| std::ptr::eq(w.as_ptr(), Arc::as_ptr(view)))
        {
            return;
        }
        if sizes.len() >= SIZES_KEPT {
            sizes.remove(0);
        }
        sizes.push((Arc::downgrade(view), listing_size(&view.tools)));
    }

    /// The snapshot of the index in force.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.index.snapshot()
    }
}

/// `{"tools": [...]}` of `tools`, in bytes.
fn listing_size(tools: &[Entry]) -> usize {
    let items: usize = tools
        .iter()
        .map(|t| serde_json::to_vec(t.json()).map_or(0, |v| v.len()))
        .sum();
    // `{"tools":[` + `]}` + the commas.
    11 + items + tools.len().saturating_sub(1)
}

/// The view's tools by (backend, the backend's own name): what a search
/// keeps of the index, under the names the caller calls them by.
pub fn reverse(view: &Catalog) -> HashMap<(&str, &str), &Entry> {
    view.tools
        .iter()
        .filter_map(|t| {
            let r = view.route_tool(t.key())?;
            Some(((&*r.backend, r.name.as_str()), t))
        })
        .collect()
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
                // Held definitions (the pin guard), and a capability set's
                // view that lists fewer tools.
                let tools = l.tools.iter().filter(|_| rng.chance(85)).cloned().collect();
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
            let query = if rng.chance(30) && !denied.is_empty() {
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
        }
    }
}
