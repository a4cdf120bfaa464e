//! Catalog: what each backend advertises, and the merged, named view that
//! clients see.
//!
//! A [`Catalog`] is an immutable snapshot built from every advertisable
//! backend's [`BackendCatalog`]; it precomputes the merged lists and the
//! routing tables so the hot path (`tools/call`) is one hash lookup. A new
//! snapshot is built on every change and [`Catalog::diff`] tells which kinds
//! changed (deep equality), so clients get `list_changed` only when what they
//! see changed. The [`Registry`] keeps what each backend last listed and
//! which backends are shown, and turns batches of backend updates into
//! snapshots. This module does no I/O.

pub mod digest;
mod entry;
mod naming;
pub mod pin;
pub mod registry;
#[cfg(test)]
pub(crate) mod testutil;
mod uri;

use std::collections::HashMap;
use std::sync::Arc;

pub use entry::{Entry, EntryError, EntryKind};
pub use naming::conflicts;
pub use naming::expose;
pub use registry::Registry;

use crate::config::Naming;

/// What one backend advertises, as it wrote it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BackendCatalog {
    pub tools: Vec<Entry>,
    pub resources: Vec<Entry>,
    pub templates: Vec<Entry>,
    pub prompts: Vec<Entry>,
}

impl BackendCatalog {
    /// This listing with what `own` (one client's backend session) lists
    /// beyond it: a tool, resource, template or prompt the backend made
    /// for that session alone. Only additions: an item that session lists
    /// differently or not at all is shown as the shared listing has it
    /// (the shared listing is the one kept fresh by the supervisor and the
    /// poller; the session's is re-listed only on its own list_changed).
    pub fn with_extras(&self, own: &BackendCatalog) -> BackendCatalog {
        fn union(shared: &[Entry], own: &[Entry]) -> Vec<Entry> {
            let mut out = shared.to_vec();
            out.extend(
                own.iter()
                    .filter(|e| !shared.iter().any(|s| s.key() == e.key()))
                    .cloned(),
            );
            out
        }
        BackendCatalog {
            tools: union(&self.tools, &own.tools),
            resources: union(&self.resources, &own.resources),
            templates: union(&self.templates, &own.templates),
            prompts: union(&self.prompts, &own.prompts),
        }
    }
}

/// Where a client-visible name leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub backend: Arc<str>,
    /// The name as the backend knows it.
    pub name: String,
}

/// A duplicate exported name under `naming = "none"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub kind: &'static str,
    pub name: String,
    /// The backend whose entry is served.
    pub kept: Arc<str>,
    /// The backend whose entry is hidden.
    pub hidden: Arc<str>,
}

/// Which kinds of list differ between two snapshots.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Changes {
    pub tools: bool,
    pub resources: bool,
    pub prompts: bool,
}

impl Changes {
    pub fn any(&self) -> bool {
        self.tools || self.resources || self.prompts
    }
}

/// What a client-visible name names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Tool,
    Prompt,
    /// A resource URI, or a resource template's URI template.
    Resource,
}

/// An immutable merged view of the advertisable backends.
#[derive(Debug, Default)]
pub struct Catalog {
    /// Tools and prompts under their client-visible names.
    pub tools: Vec<Entry>,
    pub resources: Vec<Entry>,
    pub templates: Vec<Entry>,
    pub prompts: Vec<Entry>,
    tool_routes: HashMap<String, Route>,
    prompt_routes: HashMap<String, Route>,
    uris: uri::UriRoutes,
    pub conflicts: Vec<Conflict>,
    /// Tool and prompt names of backends that are not shown, to the backend.
    hidden: HashMap<String, Arc<str>>,
    /// What it was built from (shown backends, in order), so a session can
    /// derive its own view ([`Catalog::with_own`]).
    sources: Vec<(Arc<str>, Arc<BackendCatalog>)>,
}

impl Catalog {
    /// Builds the merged view from backends in config order. Under
    /// `Naming::None` the first backend exporting a name wins; the others are
    /// listed in [`Catalog::conflicts`].
    pub fn build<'a>(
        naming: &Naming,
        backends: impl IntoIterator<Item = (&'a Arc<str>, &'a BackendCatalog)>,
    ) -> Catalog {
        let mut c = Catalog::default();
        for (backend, entry) in backends {
            for tool in &entry.tools {
                let exposed = expose(naming, backend, tool.key());
                if let Some(kept) = c.tool_routes.get(&exposed) {
                    c.conflicts.push(Conflict {
                        kind: "tool",
                        name: exposed,
                        kept: kept.backend.clone(),
                        hidden: backend.clone(),
                    });
                    continue;
                }
                c.tools.push(tool.named(EntryKind::Tool, &exposed));
                c.tool_routes.insert(
                    exposed,
                    Route {
                        backend: backend.clone(),
                        name: tool.key().to_owned(),
                    },
                );
            }
            for prompt in &entry.prompts {
                let exposed = expose(naming, backend, prompt.key());
                if let Some(kept) = c.prompt_routes.get(&exposed) {
                    c.conflicts.push(Conflict {
                        kind: "prompt",
                        name: exposed,
                        kept: kept.backend.clone(),
                        hidden: backend.clone(),
                    });
                    continue;
                }
                c.prompts.push(prompt.named(EntryKind::Prompt, &exposed));
                c.prompt_routes.insert(
                    exposed,
                    Route {
                        backend: backend.clone(),
                        name: prompt.key().to_owned(),
                    },
                );
            }
            for r in &entry.resources {
                if c.uris.add_resource(r.key(), backend) {
                    c.resources.push(r.clone());
                }
            }
            for t in &entry.templates {
                c.uris.add_template(t.key(), backend);
                c.templates.push(t.clone());
            }
        }
        c
    }

    /// [`Catalog::build`] from owned entries, which the catalog keeps for
    /// [`Catalog::with_own`].
    pub fn from_sources(naming: &Naming, sources: Vec<(Arc<str>, Arc<BackendCatalog>)>) -> Catalog {
        let mut c = Catalog::build(naming, sources.iter().map(|(n, e)| (n, &**e)));
        c.sources = sources;
        c
    }

    /// The backends it shows, in order.
    pub fn shown(&self) -> impl Iterator<Item = &Arc<str>> {
        self.sources.iter().map(|(n, _)| n)
    }

    /// One session's view: this catalog with the entries of some shown
    /// backends replaced by what that session listed itself (`own`;
    /// `forward_auth` backends). Order, naming and hidden names stay.
    pub fn with_own(
        &self,
        naming: &Naming,
        own: impl Fn(&str, &BackendCatalog) -> Option<Arc<BackendCatalog>>,
    ) -> Catalog {
        let sources = self
            .sources
            .iter()
            .map(|(n, e)| (n.clone(), own(n, e).unwrap_or_else(|| e.clone())))
            .collect();
        let mut c = Catalog::from_sources(naming, sources);
        c.hidden = self.hidden.clone();
        c
    }

    /// This view with only what `keep` keeps of its lists (a principal's
    /// view under `[[policy]]`): tools and prompts by client-visible name,
    /// resources by URI, templates by their URI template. Routes of what
    /// was taken out go too; resource routing stays whole (a read is
    /// checked against the URI it asks for, not against a template).
    pub fn filtered(&self, keep: impl Fn(Kind, &str) -> bool) -> Catalog {
        Catalog {
            tools: self
                .tools
                .iter()
                .filter(|t| keep(Kind::Tool, t.key()))
                .cloned()
                .collect(),
            resources: self
                .resources
                .iter()
                .filter(|r| keep(Kind::Resource, r.key()))
                .cloned()
                .collect(),
            templates: self
                .templates
                .iter()
                .filter(|t| keep(Kind::Resource, t.key()))
                .cloned()
                .collect(),
            prompts: self
                .prompts
                .iter()
                .filter(|p| keep(Kind::Prompt, p.key()))
                .cloned()
                .collect(),
            tool_routes: self
                .tool_routes
                .iter()
                .filter(|(n, _)| keep(Kind::Tool, n))
                .map(|(n, r)| (n.clone(), r.clone()))
                .collect(),
            prompt_routes: self
                .prompt_routes
                .iter()
                .filter(|(n, _)| keep(Kind::Prompt, n))
                .map(|(n, r)| (n.clone(), r.clone()))
                .collect(),
            uris: self.uris.clone(),
            conflicts: self.conflicts.clone(),
            hidden: self.hidden.clone(),
            sources: self.sources.clone(),
        }
    }

    /// Whether `backend` is among the shown backends.
    pub fn shows(&self, backend: &str) -> bool {
        self.sources.iter().any(|(n, _)| &**n == backend)
    }

    /// Records the names of backends that are known but not shown, so a
    /// request for one can be told which backend it needs.
    pub fn with_hidden<'a>(
        mut self,
        naming: &Naming,
        backends: impl IntoIterator<Item = (&'a Arc<str>, &'a BackendCatalog)>,
    ) -> Catalog {
        for (backend, entry) in backends {
            let names = entry.tools.iter().chain(&entry.prompts).map(Entry::key);
            for name in names {
                let exposed = expose(naming, backend, name);
                if !self.tool_routes.contains_key(&exposed)
                    && !self.prompt_routes.contains_key(&exposed)
                {
                    self.hidden
                        .entry(exposed)
                        .or_insert_with(|| backend.clone());
                }
            }
        }
        self
    }

    /// The hidden backend that exports `exposed`, if any.
    pub fn hidden_owner(&self, exposed: &str) -> Option<&Arc<str>> {
        self.hidden.get(exposed)
    }

    /// Its lists with `tools` in place of its tools, for comparing what a
    /// client lists (tool search lists meta-tools): it routes nothing.
    pub fn listing_with_tools(&self, tools: Vec<Entry>) -> Catalog {
        Catalog {
            tools,
            resources: self.resources.clone(),
            templates: self.templates.clone(),
            prompts: self.prompts.clone(),
            ..Catalog::default()
        }
    }

    pub fn route_tool(&self, exposed: &str) -> Option<&Route> {
        self.tool_routes.get(exposed)
    }

    pub fn route_prompt(&self, exposed: &str) -> Option<&Route> {
        self.prompt_routes.get(exposed)
    }

    /// The backend serving a resource URI: an exact listed resource first,
    /// then the template with the longest literal prefix matching it.
    pub fn route_uri(&self, uri: &str) -> Option<&Arc<str>> {
        self.uris.route(uri)
    }

    /// The backends at least one listed tool, prompt, resource or resource
    /// template comes from (what a caller whose view this is uses).
    pub fn contributing(&self) -> std::collections::BTreeSet<&str> {
        let routes = self.tool_routes.values().chain(self.prompt_routes.values());
        let uris = self.resources.iter().chain(&self.templates).map(Entry::key);
        routes
            .map(|r| &*r.backend)
            .chain(uris.filter_map(|u| self.uris.route(u).map(|b| &**b)))
            .collect()
    }

    /// Which kinds of list differ from `older`.
    pub fn diff(&self, older: &Catalog) -> Changes {
        Changes {
            tools: self.tools != older.tools,
            resources: self.resources != older.resources || self.templates != older.templates,
            prompts: self.prompts != older.prompts,
        }
    }
}

#[cfg(test)]
mod tests;
