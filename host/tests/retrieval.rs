//! Retrieval quality of `find_tool`'s ranking, on real data (see
//! tests/retrieval/README.md and docs/tool-search.md):
//!
//! - the corpus of 387 tool definitions of 29 MCP servers, as each listed
//!   them, and 408 queries written as a user would ask, half sharing a
//!   word with their tool's definition and half paraphrases sharing none,
//!   split into a tuning half and a held-out half (frozen before any
//!   tuning);
//! - the Berkeley Function Calling Leaderboard's single-call categories
//!   (`bfcl-eval`, installed by tests/retrieval/setup.sh): every function
//!   pooled into one catalog, each question's gold function its answer.
//!
//! Prints Recall@1, Recall@5 and MRR per group, and holds the keyword arm
//! to its target: Recall@5 ≥ 0.85 on the queries sharing words.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;
use vigil::catalog::{Entry, EntryKind};
use vigil::search::Index;
use vigil::search::eval::{DEPTH, Scores};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read_json(path: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The first [`DEPTH`] results of `query`: (backend, name).
fn ranked(index: &Index, query: &str) -> Vec<(Arc<str>, String)> {
    let snap = index.snapshot();
    snap.rank(query, DEPTH, |d| Some((d.backend.clone(), d.name.clone())))
        .into_iter()
        .map(|h| h.found)
        .collect()
}

/// Where the first result `gold` accepts came (1-based).
fn rank_in(results: &[(Arc<str>, String)], gold: impl Fn(&str, &str) -> bool) -> Option<usize> {
    results.iter().position(|(b, n)| gold(b, n)).map(|p| p + 1)
}

/// The corpus indexed, and how many tools and servers it has.
fn corpus_index() -> (Index, usize, usize) {
    let corpus = read_json(&repo().join("tests/retrieval/corpus.json"));
    let index = Index::default();
    let mut tools = 0;
    let servers = corpus["servers"].as_array().expect("servers");
    for server in servers {
        let name: Arc<str> = server["name"].as_str().expect("name").into();
        let entries: Vec<Entry> = server["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .map(|t| Entry::from_json(EntryKind::Tool, t.clone()).expect("a tool"))
            .collect();
        tools += entries.len();
        index.reindex(&name, &entries);
    }
    (index, tools, servers.len())
}

/// Scores of the corpus's queries ranked by `rank`, per group (all, each
/// kind, each split, each kind in each split).
fn corpus_scores(rank: impl Fn(&str) -> Vec<(Arc<str>, String)>) -> BTreeMap<String, Scores> {
    let queries = read_json(&repo().join("tests/retrieval/queries.json"));
    let mut groups: BTreeMap<String, Vec<Option<usize>>> = BTreeMap::new();
    for q in queries.as_array().expect("queries") {
        let (server, tool) = (q["server"].as_str().unwrap(), q["tool"].as_str().unwrap());
        let results = rank(q["query"].as_str().unwrap());
        let r = rank_in(&results, |b, n| b == server && n == tool);
        let (kind, split) = (q["kind"].as_str().unwrap(), q["split"].as_str().unwrap());
        for g in [
            "all".to_owned(),
            kind.to_owned(),
            format!("{kind}/{split}"),
            split.to_owned(),
        ] {
            groups.entry(g).or_default().push(r);
        }
    }
    groups
        .into_iter()
        .map(|(g, ranks)| (g, Scores::of(ranks)))
        .collect()
}

fn print_scores(title: &str, scores: &BTreeMap<String, Scores>) {
    println!("{title}");
    for (g, s) in scores {
        println!("  {g:<20} {s}");
    }
}

#[test]
fn keyword_ranking_of_real_tools_for_real_questions() {
    let (index, tools, servers) = corpus_index();
    let scores = corpus_scores(|q| ranked(&index, q));
    print_scores(
        &format!("keyword ranking over {tools} tools of {servers} servers"),
        &scores,
    );
    let shared = scores["shared"];
    assert!(
        shared.recall_at_5 >= 0.85,
        "keyword Recall@5 on the queries sharing words is {:.3}, below the 0.85 target",
        shared.recall_at_5
    );
}

/// Where tests/retrieval/setup.sh put the BFCL data and the model.
fn retrieval_dir() -> PathBuf {
    std::env::var_os("VIGIL_RETRIEVAL_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/vigil/retrieval"))
        })
        .expect("HOME or VIGIL_RETRIEVAL_DIR")
}

/// The BFCL data set the setup extracted (tests/retrieval/setup.sh).
fn bfcl() -> Value {
    let path = retrieval_dir().join("bfcl.json");
    assert!(
        path.is_file(),
        "{} is missing: run `bash tests/retrieval/setup.sh` (it installs bfcl-eval's data)",
        path.display()
    );
    read_json(&path)
}

/// The BFCL functions indexed as one backend's tools, with the data.
fn bfcl_index() -> (Value, Index) {
    let data = bfcl();
    let functions = data["functions"].as_array().expect("functions");
    let entries: Vec<Entry> = functions
        .iter()
        .map(|f| {
            let mut tool = serde_json::Map::new();
            tool.insert("name".into(), f["id"].clone());
            tool.insert("description".into(), f["description"].clone());
            tool.insert("inputSchema".into(), f["parameters"].clone());
            Entry::from_json(EntryKind::Tool, Value::Object(tool)).expect("a function")
        })
        .collect();
    let index = Index::default();
    index.reindex(&Arc::from("bfcl"), &entries);
    (data, index)
}

/// Scores of BFCL's questions ranked by `rank`: by the function's id (the
/// exact function of the question's category), and by its name (any
/// function of that name: BFCL repeats functions across categories with
/// other descriptions), each for all questions and for live and non-live.
fn bfcl_scores(
    data: &Value,
    rank: impl Fn(&str) -> Vec<(Arc<str>, String)>,
) -> BTreeMap<String, Scores> {
    let functions = data["functions"].as_array().expect("functions");
    let names: std::collections::HashMap<&str, &str> = functions
        .iter()
        .map(|f| (f["id"].as_str().unwrap(), f["name"].as_str().unwrap()))
        .collect();
    let mut by_id: BTreeMap<String, Vec<Option<usize>>> = BTreeMap::new();
    let mut by_name: BTreeMap<String, Vec<Option<usize>>> = BTreeMap::new();
    for q in data["questions"].as_array().expect("questions") {
        let query = q["query"].as_str().unwrap();
        let gold: Vec<&str> = q["gold"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let gold_names: Vec<&str> = q["gold_names"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let category = q["category"].as_str().unwrap();
        let family = if category.starts_with("live_") {
            "live"
        } else {
            "non-live"
        };
        let results = rank(query);
        let id_rank = rank_in(&results, |_, n| gold.contains(&n));
        let name_rank = rank_in(&results, |_, n| {
            names.get(n).is_some_and(|n| gold_names.contains(n))
        });
        for g in ["all", family] {
            by_id.entry(g.to_owned()).or_default().push(id_rank);
            by_name.entry(g.to_owned()).or_default().push(name_rank);
        }
    }
    let by_id = by_id
        .into_iter()
        .map(|(g, ranks)| (format!("by id   {g}"), Scores::of(ranks)));
    let by_name = by_name
        .into_iter()
        .map(|(g, ranks)| (format!("by name {g}"), Scores::of(ranks)));
    by_id.chain(by_name).collect()
}

#[test]
fn keyword_ranking_on_the_berkeley_function_calling_data() {
    let (data, index) = bfcl_index();
    let scores = bfcl_scores(&data, |q| ranked(&index, q));
    print_scores(
        &format!(
            "keyword ranking over {} BFCL functions",
            index.snapshot().len()
        ),
        &scores,
    );
}

/// The semantic arm and the fused ranking (a build with `--features
/// semantic`; the model from tests/retrieval/setup.sh).
#[cfg(feature = "semantic")]
mod semantic {
    use super::*;
    use vigil::search::index::Arms;
    use vigil::search::vectors::Vectors;

    fn vectors(index: &Index) -> Vectors {
        let dir = retrieval_dir().join("model");
        let model = vigil::search::semantic::Model::load(&dir).unwrap_or_else(|e| {
            panic!("{e}: run `bash tests/retrieval/setup.sh` (it installs the model's files)")
        });
        let vectors = Vectors::new(Arc::new(model));
        let snap = index.snapshot();
        let docs: Vec<_> = snap.backends().flat_map(|b| snap.of(b)).cloned().collect();
        vectors
            .fill(docs.iter().map(|d| (d.meaning_key, d.meaning.as_str())))
            .expect("embedding the documents");
        vectors
    }

    fn ranked_by(
        index: &Index,
        vectors: &Vectors,
        fused: bool,
        query: &str,
    ) -> Vec<(Arc<str>, String)> {
        let q = vectors.query(query).expect("embedding the query");
        let arms = if fused {
            Arms::Fused { query: &q, vectors }
        } else {
            Arms::Semantic { query: &q, vectors }
        };
        index
            .snapshot()
            .rank_by(arms, query, DEPTH, |d| {
                Some((d.backend.clone(), d.name.clone()))
            })
            .into_iter()
            .map(|h| h.found)
            .collect()
    }

    #[test]
    fn semantic_and_fused_ranking_of_real_tools_for_real_questions() {
        let (index, tools, servers) = corpus_index();
        let vectors = vectors(&index);
        let keyword = corpus_scores(|q| ranked(&index, q));
        let semantic = corpus_scores(|q| ranked_by(&index, &vectors, false, q));
        let fused = corpus_scores(|q| ranked_by(&index, &vectors, true, q));
        print_scores(
            &format!("semantic ranking over {tools} tools of {servers} servers"),
            &semantic,
        );
        print_scores("fused (reciprocal rank) ranking", &fused);
        println!(
            "paraphrases: Recall@1 keyword {:.3}, semantic {:.3}, fused {:.3}",
            keyword["paraphrase"].recall_at_1,
            semantic["paraphrase"].recall_at_1,
            fused["paraphrase"].recall_at_1
        );
        // What the semantic arm is for: finding the tool of a question that
        // shares no word with it. It must add 10 points of Recall@1 there,
        // on the held-out half, without costing the keyword arm's target
        // on the questions that share words.
        let gain =
            fused["paraphrase/heldout"].recall_at_1 - keyword["paraphrase/heldout"].recall_at_1;
        assert!(
            gain >= 0.10,
            "fusion adds {gain:.3} of Recall@1 on held-out paraphrases, below 0.10"
        );
        assert!(
            fused["shared"].recall_at_5 >= 0.85,
            "fused Recall@5 on the queries sharing words is {:.3}, below 0.85",
            fused["shared"].recall_at_5
        );
    }

    /// BFCL's 2,555 functions and 2,501 questions embedded: minutes in a
    /// debug build, so not in the test command; run it for the figures in
    /// docs/benchmarks.md with `cargo test --release -p vigil --features
    /// semantic --test retrieval -- --ignored --nocapture`.
    #[test]
    #[ignore = "minutes of embedding; run by hand for docs/benchmarks.md"]
    fn semantic_and_fused_ranking_on_the_berkeley_function_calling_data() {
        let (data, index) = bfcl_index();
        let vectors = vectors(&index);
        let tools = index.snapshot().len();
        let semantic = bfcl_scores(&data, |q| ranked_by(&index, &vectors, false, q));
        let fused = bfcl_scores(&data, |q| ranked_by(&index, &vectors, true, q));
        print_scores(
            &format!("semantic ranking over {tools} BFCL functions"),
            &semantic,
        );
        print_scores("fused (reciprocal rank) ranking", &fused);
    }
}
