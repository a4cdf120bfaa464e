//! Tool search: `find_tool` and `call_tool` for clients of large catalogs
//! (`[tool_search]`, docs/tool-search.md).
//!
//! - `text`: the words of definitions and queries;
//! - `document`: what a tool is ranked by;
//! - `index`: the keyword index of every backend's tools, re-indexed per
//!   backend as listings change, and the ranking of a query with the
//!   caller's filter applied before the cut;
//! - `meta`: the meta-tools' definitions and arguments;
//! - `service`: what the front asks (a caller's mode, what it lists,
//!   `find_tool` over its view);
//! - `eval`: retrieval-quality figures.

pub mod document;
pub mod eval;
pub mod fusion;
pub mod index;
pub mod meta;
#[cfg(feature = "semantic")]
pub mod semantic;
pub mod service;
pub mod text;
pub mod vectors;

pub use index::{Doc, Hit, Index, Reindexed, Snapshot};
pub use service::{Answer, Found, OwnListings, ToolSearch};
