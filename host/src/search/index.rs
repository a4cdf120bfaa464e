//! The keyword index of every backend's tools, and the ranking of a
//! query over it.
//!
//! One index for the gateway, of documents per backend: what each backend
//! last listed (whatever its health; health and everything else that
//! hides a tool are filters at query time). A backend's new listing
//! re-indexes that backend only: each tool is compared with what was
//! indexed by the digest of its canonical JSON (`catalog::digest`), an
//! unchanged one keeps its document, a new or changed one is tokenized.
//! Every change builds a new [`Snapshot`] aside and swaps it in whole:
//! a search reads one snapshot, and never waits for a rebuild.
//!
//! BM25 as the `bm25` crate computes it: term frequencies saturated with
//! `k1`, normalized by document length against the average (`b`), times
//! the inverse document frequency over the whole index. A document is
//! embedded against the average length of its snapshot; when the average
//! drifts by more than [`AVGDL_DRIFT`] every document is embedded again
//! (from its stems: nothing is tokenized twice).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use bm25::{Embedder, EmbedderBuilder, Embedding, Scorer, Tokenizer};

use super::document::document;
use super::text::Words;
use super::vectors::{Vectors, cosine};
use crate::catalog::Entry;

/// Bytes of one document besides its texts and vectors: the `Doc` and
/// its `Arc`, its slots in the snapshot's lists and the scorer's map.
const DOC_OVERHEAD: usize = 300;

/// How far the average document length may drift from the one documents
/// were embedded with before all are embedded again.
const AVGDL_DRIFT: f32 = 0.2;

/// One tool's document.
#[derive(Debug)]
pub struct Doc {
    pub backend: Arc<str>,
    /// The listing it is filed under: the backend's name for what the
    /// backend lists to everyone, another key for a listing only some
    /// sessions see (`Index::reindex_listing`).
    pub listing: Arc<str>,
    /// Its name as the backend lists it.
    pub name: String,
    /// The definition indexed, under that name.
    pub entry: Entry,
    /// Of its definition's canonical JSON.
    pub digest: String,
    /// Its stems, space-separated.
    stems: String,
    /// How many stems.
    length: usize,
    embedding: Embedding<u32>,
    /// The average length it was embedded against.
    avgdl: f32,
    /// Bytes of its definition as JSON.
    pub bytes: usize,
    /// What the semantic arm embeds of it, and that text's key
    /// (`vectors::key`).
    pub meaning: String,
    pub meaning_key: u64,
}

/// What one search of a snapshot saw.
#[derive(Debug)]
pub struct Hit<T> {
    pub found: T,
    pub score: f32,
}

/// One state of the index; never changes.
#[derive(Default)]
pub struct Snapshot {
    scorer: Scorer<u32>,
    docs: Vec<Arc<Doc>>,
    by_listing: HashMap<Arc<str>, Vec<u32>>,
    avgdl: f32,
}

impl Snapshot {
    /// How many documents it holds.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// The listings it holds documents of: each backend's name, and the
    /// keys of listings only some sessions see.
    pub fn backends(&self) -> impl Iterator<Item = &Arc<str>> {
        self.by_listing.keys()
    }

    /// The documents of `listing` (a backend's name: what it lists to
    /// everyone).
    pub fn of(&self, listing: &str) -> impl Iterator<Item = &Arc<Doc>> {
        self.by_listing
            .get(listing)
            .into_iter()
            .flatten()
            .filter_map(|&i| self.docs.get(i as usize))
    }

    /// Bytes the index holds of its own (an estimate, for the index-size
    /// metric): per document its texts (stems, name, the embedded
    /// meaning, the digest), its keyword vector twice (the document's and
    /// the scorer's copy, 8 bytes a token) and its place in the scorer's
    /// inverted index (about 6 bytes a token), and the document itself
    /// (`DOC_OVERHEAD`). The definitions' JSON is not counted: the
    /// catalog holds it too.
    pub fn bytes(&self) -> usize {
        self.docs
            .iter()
            .map(|d| {
                d.stems.len()
                    + d.name.len()
                    + d.meaning.len()
                    + d.digest.len()
                    + d.embedding.len() * (8 + 8 + 6)
                    + DOC_OVERHEAD
            })
            .sum()
    }

    /// The documents matching `query` in rank order, each passed through
    /// `keep` (what the caller may see, and how it shows it) before the
    /// first `limit` are taken: a document `keep` refuses is never
    /// returned, and never counted.
    pub fn rank<T>(
        &self,
        query: &str,
        limit: usize,
        mut keep: impl FnMut(&Doc) -> Option<T>,
    ) -> Vec<Hit<T>> {
        if self.docs.is_empty() || limit == 0 {
            return Vec::new();
        }
        let q = embedder(self.avgdl).embed(&stems_of(query));
        let mut out = Vec::new();
        for scored in self.scorer.matches(&q) {
            let Some(doc) = self.docs.get(scored.id as usize) else {
                continue;
            };
            if let Some(found) = keep(doc) {
                out.push(Hit {
                    found,
                    score: scored.score,
                });
                if out.len() == limit {
                    break;
                }
            }
        }
        out
    }
}

/// Which arms rank a query.
#[derive(Clone, Copy)]
pub enum Arms<'a> {
    /// BM25 alone.
    Keyword,
    /// The semantic arm alone (for measuring it).
    Semantic {
        query: &'a [f32],
        vectors: &'a Vectors,
    },
    /// Both, fused by reciprocal rank.
    Fused {
        query: &'a [f32],
        vectors: &'a Vectors,
    },
}

/// How deep each arm's ranking goes into the fusion.
const FUSION_DEPTH: usize = 50;

/// The share of a query's distinct stems a document must contain for the
/// keyword arm to put it into the fusion.
///
/// Why: a query that shares no word with its tool (a paraphrase) still
/// shares one incidental word with others, and plain reciprocal rank
/// fusion ranks any document both arms list above the semantic arm's
/// first choice: on the retrieval corpus it brought paraphrases' Recall@1
/// down from the semantic arm's 0.19 to 0.01. Chosen on the corpus's
/// tuning half among cut-offs of 0 (plain fusion), 0.34 and 0.5 and
/// weights by coverage (docs/tool-search.md).
const MIN_COVERAGE: f32 = 0.34;

impl Snapshot {
    /// [`Snapshot::rank`] by `arms`: with the semantic arm, the documents
    /// closest to the query's vector (those with a vector yet) are ranked
    /// too, and the arms' rankings fused ([`super::fusion`]); `keep`
    /// applies to both before either is cut.
    pub fn rank_by<T>(
        &self,
        arms: Arms<'_>,
        query: &str,
        limit: usize,
        mut keep: impl FnMut(&Doc) -> Option<T>,
    ) -> Vec<Hit<T>> {
        let (qvec, vectors, keyword) = match arms {
            Arms::Keyword => return self.rank(query, limit, keep),
            Arms::Semantic { query, vectors } => (query, vectors, false),
            Arms::Fused { query, vectors } => (query, vectors, true),
        };
        if self.docs.is_empty() || limit == 0 {
            return Vec::new();
        }
        let depth = FUSION_DEPTH.max(limit);
        let mut kept: HashMap<u32, Option<T>> = HashMap::new();
        let mut allowed = |id: u32, keep: &mut dyn FnMut(&Doc) -> Option<T>| {
            kept.entry(id)
                .or_insert_with(|| self.docs.get(id as usize).and_then(|d| keep(d)))
                .is_some()
        };
        let mut by_keyword: Vec<u32> = Vec::new();
        if keyword {
            let stems = stems_of(query);
            let distinct: HashSet<&str> = stems.split_whitespace().collect();
            let q = embedder(self.avgdl).embed(&stems);
            for scored in self.scorer.matches(&q) {
                let covers = self
                    .docs
                    .get(scored.id as usize)
                    .is_some_and(|d| coverage(&distinct, d) >= MIN_COVERAGE);
                if covers && allowed(scored.id, &mut keep) {
                    by_keyword.push(scored.id);
                    if by_keyword.len() == depth {
                        break;
                    }
                }
            }
        }
        let mut by_meaning: Vec<(u32, f32)> = self
            .docs
            .iter()
            .enumerate()
            .filter_map(|(i, d)| {
                let v = vectors.get(d.meaning_key)?;
                Some((i as u32, cosine(qvec, &v)))
            })
            .collect();
        by_meaning.sort_by(|a, b| b.1.total_cmp(&a.1));
        let mut semantic: Vec<u32> = Vec::new();
        for (id, _) in by_meaning {
            if allowed(id, &mut keep) {
                semantic.push(id);
                if semantic.len() == depth {
                    break;
                }
            }
        }
        super::fusion::fuse(&[&by_keyword, &semantic])
            .into_iter()
            .take(limit)
            .filter_map(|(id, score)| {
                kept.remove(&id).flatten().map(|found| Hit {
                    found,
                    score: score as f32,
                })
            })
            .collect()
    }
}

/// What one re-indexing of a backend changed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reindexed {
    pub added: usize,
    pub changed: usize,
    pub removed: usize,
    pub kept: usize,
}

/// The index; see the module doc.
#[derive(Default)]
pub struct Index {
    current: ArcSwap<Snapshot>,
    /// One rebuild at a time (searches never take it).
    writing: Mutex<()>,
}

impl Index {
    /// The snapshot in force.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// Indexes `tools` (under the backend's own names) as all that
    /// `backend` lists, in place of what it listed before.
    pub fn reindex(&self, backend: &Arc<str>, tools: &[Entry]) -> Reindexed {
        self.reindex_listing(backend, backend, tools)
    }

    /// Indexes `tools` of `backend` (under its own names) as all of
    /// `listing`, in place of what it held before: `listing` is the
    /// backend's name for what it lists to everyone, or the key of a
    /// listing only some sessions see.
    pub fn reindex_listing(
        &self,
        listing: &Arc<str>,
        backend: &Arc<str>,
        tools: &[Entry],
    ) -> Reindexed {
        self.apply(&[Listing {
            listing,
            backend,
            tools: Some(tools),
        }])[0]
    }

    /// Several backends' new listings (`None`: the backend left the
    /// config), with one rebuild for all of them: the listings that
    /// arrive together (at start, most of all) do not rebuild the index
    /// once each. What each changed, in order.
    pub fn reindex_all(&self, listings: &[(Arc<str>, Option<&[Entry]>)]) -> Vec<Reindexed> {
        let listings: Vec<Listing<'_>> = listings
            .iter()
            .map(|(backend, tools)| Listing {
                listing: backend,
                backend,
                tools: *tools,
            })
            .collect();
        self.apply(&listings)
    }

    /// Drops every document of `listing` (a backend that left the config,
    /// a listing no session sees any more).
    pub fn remove(&self, listing: &Arc<str>) -> usize {
        self.apply(&[Listing {
            listing,
            backend: listing,
            tools: None,
        }])[0]
            .removed
    }

    /// Each of `listings` in place of what its listing held, diffed per
    /// tool by digest (an unchanged tool keeps its document), then one new
    /// snapshot swapped in whole, if anything changed.
    fn apply(&self, listings: &[Listing<'_>]) -> Vec<Reindexed> {
        let _one = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.current.load_full();
        let words = words();
        let mut all = Vec::with_capacity(listings.len());
        let mut fresh: Vec<Arc<Doc>> = Vec::new();
        for (i, l) in listings.iter().enumerate() {
            // A listing given again later in the batch: the later one is it.
            if listings[i + 1..].iter().any(|m| m.listing == l.listing) {
                all.push(Reindexed::default());
                continue;
            }
            let (stats, docs) = diff(&now, l, words);
            all.push(stats);
            fresh.extend(docs);
        }
        // Listings like the last ones (the poller's, most of the time):
        // the snapshot in force is them.
        if all.iter().all(|s| s.added + s.changed + s.removed == 0) {
            return all;
        }
        let replaced: std::collections::HashSet<&str> =
            listings.iter().map(|l| &**l.listing).collect();
        let others = now
            .docs
            .iter()
            .filter(|d| !replaced.contains(&*d.listing))
            .cloned();
        self.current
            .store(Arc::new(build(others.chain(fresh).collect())));
        all
    }
}

/// One listing's new tools, as [`Index::apply`] takes it.
struct Listing<'a> {
    listing: &'a Arc<str>,
    backend: &'a Arc<str>,
    /// `None`: every document of the listing goes.
    tools: Option<&'a [Entry]>,
}

/// What `l` changes against `now`, and its documents from now on.
fn diff(now: &Snapshot, l: &Listing<'_>, words: &Words) -> (Reindexed, Vec<Arc<Doc>>) {
    let old: HashMap<&str, &Arc<Doc>> = now.of(l.listing).map(|d| (&*d.name, d)).collect();
    let tools = l.tools.unwrap_or_default();
    let mut stats = Reindexed::default();
    let mut fresh: Vec<Arc<Doc>> = Vec::with_capacity(tools.len());
    for tool in tools {
        let json = tool.json();
        let digest = crate::catalog::digest::digest(json)
            .map(|d| d.to_string())
            .unwrap_or_default();
        match old.get(tool.key()) {
            Some(d) if d.digest == digest => {
                stats.kept += 1;
                fresh.push((*d).clone());
                continue;
            }
            Some(_) => stats.changed += 1,
            None => stats.added += 1,
        }
        let stems = words.tokenize(&document(l.backend, json)).join(" ");
        let length = stems.split_whitespace().count();
        let meaning = super::document::meaning(l.backend, json);
        fresh.push(Arc::new(Doc {
            backend: l.backend.clone(),
            listing: l.listing.clone(),
            name: tool.key().to_owned(),
            entry: tool.clone(),
            digest,
            stems,
            length,
            embedding: Embedding(Vec::new()),
            avgdl: 0.0,
            bytes: super::document::json_size(json),
            meaning_key: super::vectors::key(&meaning),
            meaning,
        }));
    }
    let listed: std::collections::HashSet<&str> = tools.iter().map(Entry::key).collect();
    stats.removed = old.keys().filter(|n| !listed.contains(**n)).count();
    (stats, fresh)
}

/// A snapshot of `docs`, each embedded against their average length (a
/// document embedded against an average close enough is kept as it is).
fn build(docs: Vec<Arc<Doc>>) -> Snapshot {
    let avgdl = if docs.is_empty() {
        1.0
    } else {
        (docs.iter().map(|d| d.length).sum::<usize>() as f32 / docs.len() as f32).max(1.0)
    };
    let embedder = embedder(avgdl);
    let mut scorer = Scorer::new();
    let mut by_listing: HashMap<Arc<str>, Vec<u32>> = HashMap::new();
    let mut out = Vec::with_capacity(docs.len());
    for (i, d) in docs.into_iter().enumerate() {
        let d = if d.avgdl > 0.0 && ((d.avgdl - avgdl) / avgdl).abs() <= AVGDL_DRIFT {
            d
        } else {
            Arc::new(Doc {
                backend: d.backend.clone(),
                listing: d.listing.clone(),
                name: d.name.clone(),
                entry: d.entry.clone(),
                digest: d.digest.clone(),
                stems: d.stems.clone(),
                length: d.length,
                embedding: embedder.embed(&d.stems),
                avgdl,
                bytes: d.bytes,
                meaning: d.meaning.clone(),
                meaning_key: d.meaning_key,
            })
        };
        let id = i as u32;
        scorer.upsert(&id, d.embedding.clone());
        by_listing.entry(d.listing.clone()).or_default().push(id);
        out.push(d);
    }
    Snapshot {
        scorer,
        docs: out,
        by_listing,
        avgdl,
    }
}

/// An embedder of stems (already tokenized) against `avgdl`.
fn embedder(avgdl: f32) -> Embedder<u32, Stems> {
    EmbedderBuilder::<u32, Stems>::with_avgdl(avgdl)
        .tokenizer(Stems)
        .build()
}

/// The share of `query`'s distinct stems that `doc` contains.
fn coverage(query: &HashSet<&str>, doc: &Doc) -> f32 {
    if query.is_empty() {
        return 0.0;
    }
    let found: HashSet<&str> = doc
        .stems
        .split_whitespace()
        .filter(|s| query.contains(s))
        .collect();
    found.len() as f32 / query.len() as f32
}

/// The stems of `text`, space-separated.
fn stems_of(text: &str) -> String {
    words().tokenize(text).join(" ")
}

/// The tokenizer, built once (its stop words and stemmer are tables).
fn words() -> &'static Words {
    static WORDS: std::sync::OnceLock<Words> = std::sync::OnceLock::new();
    WORDS.get_or_init(Words::default)
}

/// Text that is stems already.
#[derive(Debug, Default, Clone, Copy)]
struct Stems;

impl Tokenizer for Stems {
    fn tokenize(&self, input_text: &str) -> Vec<String> {
        input_text.split_whitespace().map(str::to_owned).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::EntryKind;
    use serde_json::json;

    fn tool(name: &str, description: &str) -> Entry {
        Entry::from_json(
            EntryKind::Tool,
            json!({"name": name, "description": description, "inputSchema": {"type": "object"}}),
        )
        .unwrap()
    }

    fn names(hits: &[Hit<String>]) -> Vec<&str> {
        hits.iter().map(|h| h.found.as_str()).collect()
    }

    #[test]
    fn the_best_match_comes_first_and_filters_apply_before_the_cut() {
        let index = Index::default();
        let files: Arc<str> = "files".into();
        let clock: Arc<str> = "clock".into();
        index.reindex(
            &files,
            &[
                tool("read_file", "Read the contents of a file"),
                tool("write_file", "Write contents to a file"),
                tool("list_directory", "List a directory"),
            ],
        );
        index.reindex(
            &clock,
            &[tool("get_time", "The current time in a time zone")],
        );
        let snap = index.snapshot();
        let all = |d: &Doc| Some(d.name.clone());
        let hits = snap.rank("read a file", 10, all);
        assert_eq!(names(&hits)[0], "read_file");
        assert_eq!(names(&snap.rank("what time is it", 10, all)), ["get_time"]);
        // A document the filter refuses is not counted: the next one fills
        // its place.
        let no_read = |d: &Doc| (d.name != "read_file").then(|| d.name.clone());
        assert_eq!(names(&snap.rank("read a file", 1, no_read)), ["write_file"]);
        assert!(snap.rank("the of and", 10, all).is_empty());
    }

    #[test]
    fn a_backend_is_reindexed_alone_by_digest() {
        let index = Index::default();
        let files: Arc<str> = "files".into();
        let clock: Arc<str> = "clock".into();
        index.reindex(&clock, &[tool("get_time", "time")]);
        let first = index.reindex(&files, &[tool("a", "x"), tool("b", "y")]);
        assert_eq!(
            first,
            Reindexed {
                added: 2,
                ..Default::default()
            }
        );
        let kept_clock = index.snapshot().of("clock").next().unwrap().clone();
        let second = index.reindex(
            &files,
            &[tool("a", "x"), tool("b", "changed"), tool("c", "z")],
        );
        assert_eq!(
            second,
            Reindexed {
                added: 1,
                changed: 1,
                removed: 0,
                kept: 1
            }
        );
        let third = index.reindex(&files, &[tool("c", "z")]);
        assert_eq!(third.removed, 2);
        // The other backend's document is kept (embedded again at most,
        // when the average length drifted: never tokenized again).
        let clock_now = index.snapshot().of("clock").next().unwrap().clone();
        assert_eq!(
            (&clock_now.digest, &clock_now.stems),
            (&kept_clock.digest, &kept_clock.stems)
        );
        assert_eq!(index.remove(&files), 1);
        assert_eq!(index.snapshot().len(), 1);
    }

    /// Listings that arrive together make one snapshot, with the same
    /// documents as one after another; a listing given twice counts once,
    /// the later one.
    #[test]
    fn listings_that_arrive_together_are_indexed_with_one_rebuild() {
        let (files, clock, gone): (Arc<str>, Arc<str>, Arc<str>) =
            ("files".into(), "clock".into(), "gone".into());
        let one_by_one = Index::default();
        one_by_one.reindex(&gone, &[tool("old", "o")]);
        one_by_one.reindex(&files, &[tool("a", "x"), tool("b", "y")]);
        one_by_one.reindex(&clock, &[tool("get_time", "time")]);
        one_by_one.remove(&gone);

        let together = Index::default();
        together.reindex(&gone, &[tool("old", "o")]);
        let before = together.snapshot();
        let first = [tool("a", "stale")];
        let files_tools = [tool("a", "x"), tool("b", "y")];
        let clock_tools = [tool("get_time", "time")];
        let stats = together.reindex_all(&[
            (files.clone(), Some(&first[..])),
            (clock.clone(), Some(&clock_tools[..])),
            (gone.clone(), None),
            (files.clone(), Some(&files_tools[..])),
        ]);
        let added = |n| Reindexed {
            added: n,
            ..Default::default()
        };
        let removed = Reindexed {
            removed: 1,
            ..Default::default()
        };
        assert_eq!(stats, [Reindexed::default(), added(1), removed, added(2)]);
        let after = together.snapshot();
        assert!(!Arc::ptr_eq(&before, &after));
        let docs = |i: &Index| {
            let snap = i.snapshot();
            let mut d: Vec<(String, String, String)> = snap
                .backends()
                .flat_map(|l| snap.of(l))
                .map(|d| (d.backend.to_string(), d.name.clone(), d.stems.clone()))
                .collect();
            d.sort();
            d
        };
        assert_eq!(docs(&together), docs(&one_by_one));
        // The same listings again change nothing: the snapshot stays.
        let again = together.reindex_all(&[
            (files.clone(), Some(&files_tools[..])),
            (clock.clone(), Some(&clock_tools[..])),
        ]);
        assert_eq!(again.iter().map(|s| s.kept).collect::<Vec<_>>(), [2, 1]);
        assert!(Arc::ptr_eq(&after, &together.snapshot()));
    }

    /// A stand-in model: a text's vector says which of a few topics it
    /// is about (a word of the topic anywhere in it).
    struct Topics;

    impl crate::search::vectors::Embed for Topics {
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
            const TOPICS: [&[&str]; 3] = [
                &["appointment", "calendar", "event"],
                &["pull", "review", "merge"],
                &["delete", "cancel", "remove"],
            ];
            Ok(texts
                .iter()
                .map(|t| {
                    let t = t.to_lowercase();
                    let mut v: Vec<f32> = TOPICS
                        .iter()
                        .map(|words| f32::from(u8::from(words.iter().any(|w| t.contains(w)))))
                        .collect();
                    v.push(0.1);
                    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                    v.iter().map(|x| x / norm).collect()
                })
                .collect())
        }
    }

    #[test]
    fn an_incidental_shared_word_does_not_outvote_the_meaning() {
        // "cancel the dentist appointment on friday" shares no word with
        // delete-event, and one incidental word ("friday") with a tool
        // about something else, which BM25 alone puts first.
        let index = Index::default();
        let calendar: Arc<str> = "calendar".into();
        let github: Arc<str> = "github".into();
        index.reindex(
            &calendar,
            &[
                tool("delete-event", "Delete an event from a calendar"),
                tool("list-events", "List events of a calendar"),
            ],
        );
        index.reindex(
            &github,
            &[tool(
                "merge_pull_request",
                "Merge a pull request; merges run on friday",
            )],
        );
        let vectors = crate::search::vectors::Vectors::new(Arc::new(Topics));
        let snap = index.snapshot();
        let docs: Vec<Arc<Doc>> = snap.backends().flat_map(|b| snap.of(b)).cloned().collect();
        vectors
            .fill(docs.iter().map(|d| (d.meaning_key, d.meaning.as_str())))
            .unwrap();
        let query = "cancel the dentist appointment on friday";
        let all = |d: &Doc| Some(d.name.clone());
        assert_eq!(names(&snap.rank(query, 3, all)), ["merge_pull_request"]);
        let fused = |query: &str| {
            let q = vectors.query(query).unwrap();
            let arms = Arms::Fused {
                query: &q,
                vectors: &vectors,
            };
            snap.rank_by(arms, query, 3, all)
        };
        let first = fused(query);
        assert_eq!(names(&first)[0], "delete-event", "{:?}", names(&first));
        // A document that covers the query keeps the keyword arm's vote.
        let query = "merge the pull request";
        assert_eq!(names(&fused(query))[0], "merge_pull_request");
    }
}
