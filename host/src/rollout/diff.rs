//! What a new version lists differently from the old: per kind of
//! definition (tools, prompts, resource templates), the names added, the
//! names removed, and the names whose definition changed, by the digest of
//! its canonical JSON (`catalog::pin::fingerprint`, every member counted).
//! Names are the backend's own, before any `naming` prefix.

use serde::{Deserialize, Serialize};

use crate::catalog::pin::fingerprint;
use crate::catalog::{BackendCatalog, Entry};

/// The difference of two listings of one backend.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogDiff {
    pub tools: Changes,
    pub prompts: Changes,
    pub resource_templates: Changes,
}

/// One kind's names, each list in the order the listings have them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changes {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
}

impl CatalogDiff {
    /// What `new` lists differently from `old`.
    pub fn of(old: &BackendCatalog, new: &BackendCatalog) -> Self {
        Self {
            tools: Changes::of(&old.tools, &new.tools),
            prompts: Changes::of(&old.prompts, &new.prompts),
            resource_templates: Changes::of(&old.templates, &new.templates),
        }
    }

    /// Whether a definition is gone or is not what it was: what
    /// `on_catalog_change = "hold"` waits on (an addition alone does not).
    pub fn removes_or_changes(&self) -> bool {
        self.kinds()
            .iter()
            .any(|c| !c.removed.is_empty() || !c.changed.is_empty())
    }

    /// Whether the listings are the same.
    pub fn is_empty(&self) -> bool {
        self.kinds()
            .iter()
            .all(|c| c.added.is_empty() && c.removed.is_empty() && c.changed.is_empty())
    }

    /// What changed, in a sentence's words: "tools added: summarize;
    /// tools changed: search" (each non-empty list), or "nothing".
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        for (kind, c) in [
            ("tools", &self.tools),
            ("prompts", &self.prompts),
            ("resource templates", &self.resource_templates),
        ] {
            for (what, names) in [
                ("added", &c.added),
                ("removed", &c.removed),
                ("changed", &c.changed),
            ] {
                if !names.is_empty() {
                    parts.push(format!("{kind} {what}: {}", names.join(", ")));
                }
            }
        }
        if parts.is_empty() {
            "nothing".to_owned()
        } else {
            parts.join("; ")
        }
    }

    fn kinds(&self) -> [&Changes; 3] {
        [&self.tools, &self.prompts, &self.resource_templates]
    }
}

impl Changes {
    fn of(old: &[Entry], new: &[Entry]) -> Self {
        let find = |list: &[Entry], key: &str| list.iter().find(|e| e.key() == key).cloned();
        let mut out = Changes::default();
        for n in new {
            match find(old, n.key()) {
                None => out.added.push(n.key().to_owned()),
                Some(o) if fingerprint(o.json()) != fingerprint(n.json()) => {
                    out.changed.push(n.key().to_owned())
                }
                Some(_) => {}
            }
        }
        out.removed = old
            .iter()
            .filter(|o| find(new, o.key()).is_none())
            .map(|o| o.key().to_owned())
            .collect();
        out
    }
}
