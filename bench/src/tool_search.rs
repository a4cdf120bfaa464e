//! `vigil-bench tool-search`: what `find_tool` costs, measured in process
//! (the `vigil` library, no network), with the figures issue 34 asks for.
//!
//! The catalogs are made of real tool definitions: the 387 tools of 29 MCP
//! servers in `tests/retrieval/corpus.json`, copied across synthetic
//! backends `s0`, `s1`, ... (backend `sK` a copy of real server `K mod 29`'s
//! tools, the last one cut short to make the size asked for), under prefix
//! naming `__`: names differ by their prefix (`s30__read_file`), texts are
//! real. The queries are the 408 of `tests/retrieval/queries.json`, written
//! as a user would ask.
//!
//! 1. **latency**: every query through `ToolSearch::find` (keyword, the
//!    default limit 8) with a view of the whole catalog, as many rounds as
//!    it takes to reach `--queries` calls, after one unrecorded round; each
//!    call timed on its own (`Instant`). Beside it, the same calls split
//!    into their parts: the index's `rank` alone, the answer's JSON, and
//!    the servers list the gateway computes per call besides `find` (for
//!    the hint). What `find` needs of the view is worked out once per view
//!    (`remember`), before the rounds.
//! 2. **re-indexing under searches**: one thread searches in a loop while
//!    another re-indexes a backend of 100 tools (`r100`, every description
//!    changed each round) `--reindexes` times; the searches' latency
//!    meanwhile against the same loop alone for as long. Searches read the
//!    index's snapshot (an `ArcSwap`) and never wait for a rebuild. Then a
//!    health flip: nothing to rebuild (health filters the view at query
//!    time), so what is compared is a search on a view without one backend
//!    and on one with all.
//! 3. **bytes**: a `tools/list` result in `search` mode (`find_tool` and
//!    `call_tool`, as `ToolSearch::listed` gives them, with one server per
//!    backend) against passthrough (every tool), at 100 and 1,000 tools;
//!    and the size of one `find_tool` answer.
//! 4. **memory** of the index: `Snapshot::bytes()` (an estimate) and the
//!    resident-set growth of this process across indexing the largest
//!    catalog, everything else dropped and freed memory given back
//!    (`malloc_trim`), per 1,000 tools.
//!
//! It measures; it never fails on a threshold. It exits non-zero only when
//! it cannot run (the corpus missing, a query refused).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde::Serialize;
use serde_json::{Value, json};
use vigil::catalog::{BackendCatalog, Catalog, Entry, EntryKind};
use vigil::config::{Naming, SearchMode, ToolSearchConfig};
use vigil::policy::Access;
use vigil::search::meta::{FindArgs, Server};
use vigil::search::{Answer, Index, ToolSearch};

use crate::machine::Machine;
use crate::stats::Latency;

/// Catalog sizes of the bytes table (section 3).
const LISTING_SIZES: [usize; 2] = [100, 1_000];
/// Tools of the backend re-indexed under searches (section 2).
const REINDEXED_TOOLS: usize = 100;
/// Its name.
const REINDEXED: &str = "r100";
/// The backend a health flip hides (section 2).
const FLIPPED: &str = "s0";
/// The separator of prefix naming.
const SEPARATOR: &str = "__";
/// Slowest queries named per catalog size.
const SLOWEST: usize = 3;

/// Measure `find_tool` in process: latency, re-indexing, bytes, memory.
#[derive(Debug, clap::Args)]
pub struct ToolSearchArgs {
    /// Catalog sizes (tools) of the latency table; comma-separate for
    /// several. The largest is also the catalog re-indexed under searches
    /// and measured for memory.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "500,5000",
        value_name = "N"
    )]
    tools: Vec<usize>,

    /// `find_tool` calls timed per catalog size and part: every query of
    /// queries.json, in as many rounds as it takes to reach this many.
    #[arg(long, default_value_t = 2_000, value_name = "N")]
    queries: usize,

    /// Re-indexings of the 100-tool backend while searches run.
    #[arg(long, default_value_t = 100, value_name = "N")]
    reindexes: usize,

    /// The directory holding `corpus.json` and `queries.json` (default:
    /// the repository's `tests/retrieval`).
    #[arg(long, value_name = "DIR")]
    retrieval: Option<PathBuf>,

    /// Also write every figure as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,

    /// The embedding model's directory (config.json, tokenizer.json,
    /// model.safetensors; tests/retrieval/setup.sh installs them): also
    /// time the fused ranking, the query's embedding included. Needs a
    /// build with `--features semantic`.
    #[cfg(feature = "semantic")]
    #[arg(long, value_name = "DIR")]
    model_dir: Option<PathBuf>,
}

/// The real tools, by server, and the queries.
struct Corpus {
    servers: Vec<(String, Vec<Entry>)>,
    queries: Vec<String>,
}

impl Corpus {
    fn tools(&self) -> usize {
        self.servers.iter().map(|(_, t)| t.len()).sum()
    }
}

/// Reads `corpus.json` (`{"servers":[{"name","tools":[...]}]}`) and
/// `queries.json` (`[{"query",...}]`) from `dir`.
fn load_corpus(dir: &Path) -> anyhow::Result<Corpus> {
    let read = |file: &str| -> anyhow::Result<Value> {
        let path = dir.join(file);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))
    };
    let corpus = read("corpus.json")?;
    let mut servers = Vec::new();
    for s in corpus["servers"]
        .as_array()
        .context("corpus.json: no `servers`")?
    {
        let name = s["name"]
            .as_str()
            .context("corpus.json: a server without a name")?;
        let tools = s["tools"]
            .as_array()
            .with_context(|| format!("corpus.json: `{name}` has no `tools`"))?
            .iter()
            .map(|t| Entry::from_json(EntryKind::Tool, t.clone()))
            .collect::<Result<Vec<_>, _>>()
            .with_context(|| format!("corpus.json: a tool of `{name}`"))?;
        servers.push((name.to_owned(), tools));
    }
    let queries: Vec<String> = read("queries.json")?
        .as_array()
        .context("queries.json is not an array")?
        .iter()
        .filter_map(|q| q["query"].as_str().map(str::to_owned))
        .collect();
    let corpus = Corpus { servers, queries };
    if corpus.tools() == 0 || corpus.queries.is_empty() {
        bail!("{}: no tools or no queries", dir.display());
    }
    Ok(corpus)
}

/// `--retrieval`, else the repository's `tests/retrieval` (where this
/// bench was built from), else `tests/retrieval` under the working
/// directory.
fn retrieval_dir(explicit: Option<&Path>) -> PathBuf {
    if let Some(dir) = explicit {
        return dir.to_owned();
    }
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/retrieval");
    if built.is_dir() {
        built
    } else {
        PathBuf::from("tests/retrieval")
    }
}

/// Synthetic backends of real tools: what a gateway of so many tools
/// lists.
struct Fleet {
    backends: Vec<(Arc<str>, BackendCatalog)>,
}

impl Fleet {
    /// `n` tools: backend `sK` a copy of real server `K mod servers`'s
    /// tools, the last one cut to make `n`.
    fn of(corpus: &Corpus, n: usize) -> Fleet {
        let mut backends = Vec::new();
        let mut left = n;
        let servers = corpus.servers.iter().filter(|(_, t)| !t.is_empty());
        for (k, (_, tools)) in servers.cycle().enumerate() {
            if left == 0 {
                break;
            }
            let take = tools.len().min(left);
            backends.push((
                Arc::from(format!("s{k}")),
                catalog_of(tools[..take].to_vec()),
            ));
            left -= take;
        }
        Fleet { backends }
    }

    fn tools(&self) -> usize {
        self.backends.iter().map(|(_, c)| c.tools.len()).sum()
    }

    fn names(&self) -> impl Iterator<Item = &Arc<str>> {
        self.backends.iter().map(|(n, _)| n)
    }

    /// The catalog a client sees (prefix naming), without backend `hidden`.
    fn view(&self, hidden: Option<&str>) -> Arc<Catalog> {
        let shown = self
            .backends
            .iter()
            .filter(|(n, _)| Some(&**n) != hidden)
            .map(|(n, c)| (n, c));
        Arc::new(Catalog::build(&naming(), shown))
    }
}

fn naming() -> Naming {
    Naming::Prefix {
        separator: SEPARATOR.into(),
    }
}

fn catalog_of(tools: Vec<Entry>) -> BackendCatalog {
    BackendCatalog {
        tools,
        ..Default::default()
    }
}

/// A tool search with a fleet indexed, and what a caller allowed
/// everything brings to `find`: its view (remembered, as the gateway does
/// before each `find`) and its servers.
struct Setup {
    search: ToolSearch,
    view: Arc<Catalog>,
    servers: Vec<Server>,
    /// Indexing every backend from an empty index, one after another, ms.
    index_ms: f64,
    /// The same, all of them at once (`Index::reindex_all`, as the
    /// gateway's update task does with the listings that arrive
    /// together), ms.
    index_all_ms: f64,
}

impl Setup {
    fn new(fleet: &Fleet) -> Setup {
        let settings = ToolSearchConfig {
            mode: SearchMode::Search,
            ..Default::default()
        };
        let search = ToolSearch::new(settings, naming());
        let t0 = Instant::now();
        for (name, c) in &fleet.backends {
            search.index().reindex(name, &c.tools);
        }
        let index_ms = t0.elapsed().as_secs_f64() * 1e3;
        let together = vigil::search::Index::default();
        let listings: Vec<(Arc<str>, Option<&[vigil::catalog::Entry]>)> = fleet
            .backends
            .iter()
            .map(|(name, c)| (name.clone(), Some(&c.tools[..])))
            .collect();
        let t0 = Instant::now();
        together.reindex_all(&listings);
        let index_all_ms = t0.elapsed().as_secs_f64() * 1e3;
        assert_eq!(together.snapshot().len(), search.snapshot().len());
        let view = fleet.view(None);
        search.remember(&view);
        let servers = search.servers(&Access::Everything, fleet.names(), &Default::default());
        Setup {
            search,
            view,
            servers,
            index_ms,
            index_all_ms,
        }
    }

    fn find(&self, view: &Catalog, args: &FindArgs) -> Answer {
        self.search.find(view, args, &self.servers, 1)
    }
}

/// Every query as `find_tool`'s checked arguments, with the default limit.
fn find_args(queries: &[String], settings: &ToolSearchConfig) -> anyhow::Result<Vec<FindArgs>> {
    queries
        .iter()
        .map(|q| {
            let mut args = serde_json::Map::new();
            args.insert("query".into(), Value::String(q.clone()));
            FindArgs::parse(Some(&args), settings.limit, settings.max_query_bytes)
                .with_context(|| format!("query {q:?} refused"))
        })
        .collect()
}

/// An answer as the gateway sends it: `structuredContent` and the same
/// JSON as text.
fn tool_result(answer: &Answer) -> Value {
    let structured = answer.structured();
    json!({
        "content": [{"type": "text", "text": structured.to_string()}],
        "structuredContent": structured,
        "isError": false
    })
}

fn json_bytes(v: &impl Serialize) -> usize {
    serde_json::to_vec(v).map_or(0, |b| b.len())
}

/// Times `f` on each item, `rounds` times over after one unrecorded
/// round; ns, in call order (round by round). What `f` returns is dropped
/// inside the timed span.
fn time_each<I, T>(items: &[I], rounds: usize, mut f: impl FnMut(&I) -> T) -> Vec<u64> {
    for item in items {
        std::hint::black_box(f(item));
    }
    let mut ns = Vec::with_capacity(items.len() * rounds);
    for _ in 0..rounds {
        ns.extend(time_once(items, &mut f));
    }
    ns
}

/// Times `f` on each item once; ns, in order.
fn time_once<I, T>(items: &[I], mut f: impl FnMut(&I) -> T) -> Vec<u64> {
    items
        .iter()
        .map(|item| {
            let t0 = Instant::now();
            std::hint::black_box(f(item));
            t0.elapsed().as_nanos() as u64
        })
        .collect()
}

/// A latency distribution, µs.
#[derive(Debug, Clone, Copy, Default, Serialize)]
struct Dist {
    calls: usize,
    p50_us: f64,
    p99_us: f64,
    max_us: f64,
    mean_us: f64,
}

impl Dist {
    fn of(ns: &[u64]) -> Dist {
        let mut sorted = ns.to_vec();
        sorted.sort_unstable();
        let l = Latency::of(&sorted);
        Dist {
            calls: sorted.len(),
            p50_us: l.p50,
            p99_us: l.p99,
            max_us: l.max,
            mean_us: l.mean,
        }
    }
}

/// A query among the slowest of a catalog size.
#[derive(Debug, Clone, Serialize)]
struct Slow {
    query: String,
    /// Median of its `find` calls, µs.
    p50_us: f64,
    /// Documents sharing a word with it.
    matched: usize,
}

/// Section 1 at one catalog size.
#[derive(Debug, Clone, Serialize)]
struct Latencies {
    tools: usize,
    backends: usize,
    /// Indexing every backend from an empty index, one after another, ms.
    index_ms: f64,
    /// The same, all at once, ms.
    index_all_ms: f64,
    /// `ToolSearch::find`, the whole of it.
    find: Dist,
    /// `Snapshot::rank` alone, keeping every document.
    rank: Dist,
    /// The answer's `structuredContent` built and serialized.
    answer_json: Dist,
    /// `ToolSearch::servers`, which the gateway asks per `find_tool` and
    /// search-mode `tools/list` besides `find` (counted once per snapshot
    /// and policy entry, then looked up).
    servers: Dist,
    /// Documents sharing a word with a query: median and most.
    matched_p50: usize,
    matched_max: usize,
    slowest: Vec<Slow>,
}

/// Section 1 at `n` tools.
fn latencies(corpus: &Corpus, n: usize, rounds: usize) -> anyhow::Result<Latencies> {
    let fleet = Fleet::of(corpus, n);
    let s = Setup::new(&fleet);
    let args = find_args(&corpus.queries, &s.search.settings())?;
    let find = time_each(&args, rounds, |a| s.find(&s.view, a));
    let rank = time_each(&args, rounds, |a| {
        s.search.snapshot().rank(&a.text, a.limit, |_| Some(()))
    });
    let answers: Vec<Answer> = args.iter().map(|a| s.find(&s.view, a)).collect();
    let answer_json = time_each(&answers, rounds, |a| json_bytes(&a.structured()));
    let servers = time_each(&args, rounds, |_| {
        s.search
            .servers(&Access::Everything, fleet.names(), &Default::default())
    });
    let snap = s.search.snapshot();
    let matched: Vec<usize> = args
        .iter()
        .map(|a| snap.rank(&a.text, usize::MAX, |_| Some(())).len())
        .collect();
    let mut sorted = matched.clone();
    sorted.sort_unstable();
    Ok(Latencies {
        tools: fleet.tools(),
        backends: fleet.backends.len(),
        index_ms: s.index_ms,
        index_all_ms: s.index_all_ms,
        find: Dist::of(&find),
        rank: Dist::of(&rank),
        answer_json: Dist::of(&answer_json),
        servers: Dist::of(&servers),
        matched_p50: sorted[sorted.len() / 2],
        matched_max: sorted.last().copied().unwrap_or(0),
        slowest: slowest(&corpus.queries, &find, &matched),
    })
}

/// Section 5 at one catalog size: the fused ranking.
#[cfg(feature = "semantic")]
#[derive(Debug, Clone, Serialize)]
struct Fused {
    tools: usize,
    /// Embedding every tool's text (from an empty cache), s.
    embed_all_s: f64,
    /// `ToolSearch::find` with the semantic arm on, the query's
    /// embedding included.
    find: Dist,
    /// The query's embedding alone.
    query_embedding: Dist,
    /// The same calls by keywords alone.
    keyword: Dist,
}

/// Section 5 at `n` tools.
#[cfg(feature = "semantic")]
fn fused(
    corpus: &Corpus,
    n: usize,
    rounds: usize,
    model: &Arc<dyn vigil::search::vectors::Embed>,
) -> anyhow::Result<Fused> {
    use vigil::search::vectors::Vectors;
    let fleet = Fleet::of(corpus, n);
    let plain = Setup::new(&fleet);
    let s = Setup::new(&fleet);
    let vectors = Arc::new(Vectors::new(model.clone()));
    s.search.set_vectors(vectors.clone());
    let t0 = Instant::now();
    s.search
        .fill_vectors()
        .map_err(|e| anyhow::anyhow!("embedding the catalog: {e}"))?;
    let embed_all_s = t0.elapsed().as_secs_f64();
    let args = find_args(&corpus.queries, &s.search.settings())?;
    let find = time_each(&args, rounds, |a| s.find(&s.view, a));
    let query_embedding = time_each(&args, rounds, |a| vectors.query(&a.text).map(|v| v.len()));
    let keyword = time_each(&args, rounds, |a| plain.find(&plain.view, a));
    Ok(Fused {
        tools: fleet.tools(),
        embed_all_s,
        find: Dist::of(&find),
        query_embedding: Dist::of(&query_embedding),
        keyword: Dist::of(&keyword),
    })
}

#[cfg(feature = "semantic")]
fn print_fused(all: &[Fused], rounds: usize, queries: usize) {
    println!(
        "## 5. find_tool latency, fused (keyword + semantic by reciprocal rank, limit 8)\n\n{queries} queries x {rounds} rounds = {} calls per row, after one unrecorded round; µs per call, one thread; the model all-MiniLM-L6-v2 on the CPU.\n",
        queries * rounds
    );
    println!(
        "| tools | embedding the catalog s | part | p50 µs | p99 µs | max µs | mean µs |\n|---:|---:|---|---:|---:|---:|---:|"
    );
    for f in all {
        for (label, d) in [
            ("`find` fused (query embedding included)", &f.find),
            ("- the query's embedding alone", &f.query_embedding),
            ("`find` by keywords alone", &f.keyword),
        ] {
            println!(
                "| {} | {:.1} {}",
                f.tools,
                f.embed_all_s,
                dist_row(label, d)
            );
        }
    }
    if let [.., last] = all {
        println!(
            "\nfused / keyword p99 at {} tools: {:.1}x\n",
            last.tools,
            last.find.p99_us / last.keyword.p99_us
        );
    }
}

/// The [`SLOWEST`] queries by the median of their calls (`ns` round by
/// round, query by query).
fn slowest(queries: &[String], ns: &[u64], matched: &[usize]) -> Vec<Slow> {
    let mut per_query: Vec<Slow> = queries
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let own: Vec<u64> = ns.iter().skip(i).step_by(queries.len()).copied().collect();
            Slow {
                query: q.clone(),
                p50_us: Dist::of(&own).p50_us,
                matched: matched[i],
            }
        })
        .collect();
    per_query.sort_by(|a, b| b.p50_us.total_cmp(&a.p50_us));
    per_query.truncate(SLOWEST);
    per_query
}

/// One `find` in a loop of searches.
#[derive(Debug, Clone, Copy)]
struct Call {
    start: Instant,
    ns: u64,
    /// The index's snapshot changed during the call: the call held the
    /// previous one to its end, so its release was likely the last and
    /// freed it.
    swapped: bool,
}

/// Searches every query in turn, over and over, while `more(calls so
/// far)`.
fn search_loop(s: &Setup, args: &[FindArgs], more: impl Fn(usize) -> bool) -> Vec<Call> {
    let mut calls = Vec::new();
    for a in args.iter().cycle() {
        if !more(calls.len()) {
            break;
        }
        let before = Arc::as_ptr(&s.search.snapshot());
        let start = Instant::now();
        std::hint::black_box(s.find(&s.view, a));
        let ns = start.elapsed().as_nanos() as u64;
        let swapped = !std::ptr::eq(before, Arc::as_ptr(&s.search.snapshot()));
        calls.push(Call { start, ns, swapped });
    }
    calls
}

/// Section 2: re-indexing one backend under searches, and a health flip.
#[derive(Debug, Clone, Serialize)]
struct Reindexing {
    tools: usize,
    rounds: usize,
    /// One re-index of the 100-tool backend, µs: every tool changed, with
    /// no search running, then with nothing changed (every digest equal:
    /// no tokenizing, only the snapshot rebuilt), then every tool changed
    /// while the searches run.
    reindex_alone: Dist,
    reindex_kept: Dist,
    reindex: Dist,
    /// `find` calls that started while the re-indexing ran; while another
    /// thread only spun (arithmetic, no memory traffic) for as long, what
    /// sharing the machine alone costs; and the loop alone for as long.
    during: Dist,
    spinning: Dist,
    without: Dist,
    /// Calls during which the snapshot was swapped (see [`Call`]), and
    /// the others of the same phase.
    during_swapped: Dist,
    during_other: Dist,
    flip: Flip,
}

/// A health flip (section 2): the index is not touched; the caller's view
/// changes.
#[derive(Debug, Clone, Serialize)]
struct Flip {
    hidden: &'static str,
    tools_with_all: usize,
    tools_without: usize,
    find_with_all: Dist,
    find_without: Dist,
    /// The view without the backend, built (`Catalog::build`: the gateway
    /// builds it on any flip, tool search or not), median ms.
    view_build_ms: f64,
    /// What `find` needs of it worked out (`ToolSearch::remember`: its
    /// map to the index and its passthrough size, once per view, at the
    /// first `find_tool` on it), median ms.
    remember_ms: f64,
}

/// The first [`REINDEXED_TOOLS`] real tools of distinct names, servers
/// in order.
fn hundred(corpus: &Corpus) -> Vec<Entry> {
    let mut seen = std::collections::HashSet::new();
    corpus
        .servers
        .iter()
        .flat_map(|(_, tools)| tools)
        .filter(|t| seen.insert(t.key().to_owned()))
        .take(REINDEXED_TOOLS)
        .cloned()
        .collect()
}

/// `tools` with every description changed (revision `k`).
fn revised(tools: &[Entry], k: usize) -> Vec<Entry> {
    tools
        .iter()
        .map(|t| {
            let mut def = t.json().clone();
            let was = t.str("description").unwrap_or_default();
            def.insert(
                "description".into(),
                Value::String(format!("{was} (revision {k})")),
            );
            Entry::from_json(EntryKind::Tool, Value::Object(def)).expect("a tool stays a tool")
        })
        .collect()
}

/// Section 2 at `n` tools (`r100` among them).
fn reindexing(
    corpus: &Corpus,
    n: usize,
    rounds: usize,
    min_calls: usize,
) -> anyhow::Result<Reindexing> {
    let tools = hundred(corpus);
    let mut fleet = Fleet::of(corpus, n.saturating_sub(tools.len()));
    fleet
        .backends
        .push((Arc::from(REINDEXED), catalog_of(tools.clone())));
    let s = Setup::new(&fleet);
    let args = find_args(&corpus.queries, &s.search.settings())?;
    let backend: Arc<str> = Arc::from(REINDEXED);
    let alone_rounds = rounds.min(20);
    let revisions: Vec<Vec<Entry>> = (1..=alone_rounds + rounds)
        .map(|k| revised(&tools, k))
        .collect();
    let (alone, under) = revisions.split_at(alone_rounds);

    let reindex_alone = reindex_each(&s, &backend, alone);
    let last = std::iter::repeat_n(&alone[alone_rounds - 1], alone_rounds);
    let reindex_kept = reindex_each(&s, &backend, last);
    search_loop(&s, &args, |i| i < args.len());
    let (during, (reindex, span)) = searching_while(&s, &args, || {
        let t0 = Instant::now();
        (reindex_each(&s, &backend, under), t0.elapsed())
    });
    let (spinning, ()) = searching_while(&s, &args, || spin(span));
    let t0 = Instant::now();
    let without = search_loop(&s, &args, |i| t0.elapsed() < span || i < min_calls);
    let ns_of = |calls: &[Call], keep: &dyn Fn(&Call) -> bool| -> Vec<u64> {
        calls.iter().filter(|c| keep(c)).map(|c| c.ns).collect()
    };
    let all = |_: &Call| true;
    Ok(Reindexing {
        tools: fleet.tools(),
        rounds,
        reindex_alone: Dist::of(&reindex_alone),
        reindex_kept: Dist::of(&reindex_kept),
        reindex: Dist::of(&reindex),
        during: Dist::of(&ns_of(&during, &all)),
        spinning: Dist::of(&ns_of(&spinning, &all)),
        without: Dist::of(&ns_of(&without, &all)),
        during_swapped: Dist::of(&ns_of(&during, &|c| c.swapped)),
        during_other: Dist::of(&ns_of(&during, &|c| !c.swapped)),
        flip: flip(&fleet, &s, &args, min_calls.div_ceil(args.len())),
    })
}

/// Re-indexes `backend` with each listing in turn; ns each.
fn reindex_each<'a>(
    s: &Setup,
    backend: &Arc<str>,
    listings: impl IntoIterator<Item = &'a Vec<Entry>>,
) -> Vec<u64> {
    listings
        .into_iter()
        .map(|tools| {
            let t0 = Instant::now();
            s.search.index().reindex(backend, tools);
            t0.elapsed().as_nanos() as u64
        })
        .collect()
}

/// Runs the search loop on another thread while `work` runs on this one:
/// the calls that started while it ran, and what it returned.
fn searching_while<R>(s: &Setup, args: &[FindArgs], work: impl FnOnce() -> R) -> (Vec<Call>, R) {
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let searcher = scope.spawn(|| search_loop(s, args, |_| !stop.load(Ordering::Relaxed)));
        // Let the searcher get going first.
        std::thread::sleep(Duration::from_millis(20));
        let t0 = Instant::now();
        let out = work();
        let t1 = Instant::now();
        stop.store(true, Ordering::Relaxed);
        let calls = searcher
            .join()
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.start >= t0 && c.start < t1)
            .collect();
        (calls, out)
    })
}

/// Keeps this thread busy for `span` with arithmetic alone.
fn spin(span: Duration) {
    let t0 = Instant::now();
    let mut x = 1u64;
    while t0.elapsed() < span {
        for _ in 0..1_000 {
            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
        }
    }
}

/// A health flip on `fleet`: find on a view without [`FLIPPED`] against
/// the view of all (both remembered), and what the new view costs.
fn flip(fleet: &Fleet, s: &Setup, args: &[FindArgs], rounds: usize) -> Flip {
    let without = fleet.view(Some(FLIPPED));
    s.search.remember(&without);
    // One unrecorded round each, then rounds in alternating order.
    time_each(args, 0, |a| (s.find(&s.view, a), s.find(&without, a)));
    let (mut find_with_all, mut find_without) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let mut pair = [(&s.view, &mut find_with_all), (&without, &mut find_without)];
        if round % 2 == 1 {
            pair.reverse();
        }
        for (view, ns) in pair {
            ns.extend(time_once(args, |a| s.find(view, a)));
        }
    }
    let mut build_ms = Vec::new();
    let mut remember_ms = Vec::new();
    for _ in 0..5 {
        let t0 = Instant::now();
        let view = fleet.view(Some(FLIPPED));
        build_ms.push(t0.elapsed().as_secs_f64() * 1e3);
        let t1 = Instant::now();
        s.search.remember(&view);
        remember_ms.push(t1.elapsed().as_secs_f64() * 1e3);
    }
    Flip {
        hidden: FLIPPED,
        tools_with_all: s.view.tools.len(),
        tools_without: without.tools.len(),
        find_with_all: Dist::of(&find_with_all),
        find_without: Dist::of(&find_without),
        view_build_ms: median(build_ms),
        remember_ms: median(remember_ms),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Section 3 at one catalog size.
#[derive(Debug, Clone, Serialize)]
struct Listing {
    tools: usize,
    backends: usize,
    /// `{"tools":[...]}` of every tool (passthrough).
    passthrough_bytes: usize,
    /// `{"tools":[find_tool, call_tool]}` (search mode).
    search_bytes: usize,
    saved_pct: f64,
    /// One `find_tool` answer (limit 8) over the queries: its
    /// `structuredContent`, and the tool result the gateway sends
    /// (`structuredContent` and the same JSON as text).
    answer_structured: Sizes,
    answer_result: Sizes,
    /// The first query's, as an example.
    example_query: String,
    example_structured: usize,
    example_result: usize,
}

/// Bytes over the queries: median, 90th percentile, most.
#[derive(Debug, Clone, Copy, Serialize)]
struct Sizes {
    p50: u64,
    p90: u64,
    max: u64,
}

impl Sizes {
    fn of(mut v: Vec<u64>) -> Sizes {
        v.sort_unstable();
        Sizes {
            p50: crate::stats::percentile(&v, 0.5),
            p90: crate::stats::percentile(&v, 0.9),
            max: v.last().copied().unwrap_or(0),
        }
    }
}

/// Section 3 at `n` tools.
fn listing(corpus: &Corpus, n: usize) -> anyhow::Result<Listing> {
    let fleet = Fleet::of(corpus, n);
    let s = Setup::new(&fleet);
    let passthrough = json!({"tools": s.view.tools.iter().map(Entry::json).collect::<Vec<_>>()});
    let meta = s
        .search
        .listed(SearchMode::Search, &s.servers, &s.view)
        .iter()
        .map(Entry::to_value)
        .collect::<Vec<_>>();
    let (passthrough_bytes, search_bytes) = (
        json_bytes(&passthrough),
        json_bytes(&json!({"tools": meta})),
    );
    let args = find_args(&corpus.queries, &s.search.settings())?;
    let answers: Vec<Answer> = args.iter().map(|a| s.find(&s.view, a)).collect();
    let structured: Vec<u64> = answers
        .iter()
        .map(|a| json_bytes(&a.structured()) as u64)
        .collect();
    let result: Vec<u64> = answers
        .iter()
        .map(|a| json_bytes(&tool_result(a)) as u64)
        .collect();
    Ok(Listing {
        tools: fleet.tools(),
        backends: fleet.backends.len(),
        passthrough_bytes,
        search_bytes,
        saved_pct: 100.0 * (1.0 - search_bytes as f64 / passthrough_bytes.max(1) as f64),
        example_query: corpus.queries[0].clone(),
        example_structured: structured[0] as usize,
        example_result: result[0] as usize,
        answer_structured: Sizes::of(structured),
        answer_result: Sizes::of(result),
    })
}

/// Section 4.
#[derive(Debug, Clone, Serialize)]
struct Memory {
    tools: usize,
    /// `Snapshot::bytes()`.
    estimate_bytes: usize,
    /// This process's resident set after indexing minus before, the
    /// catalog it was indexed from dropped and freed memory given back.
    rss_growth_bytes: i64,
}

/// Section 4 at `n` tools. Runs first, on a heap not yet fragmented by
/// the other sections.
fn memory(corpus: &Corpus, n: usize) -> Memory {
    // The tokenizer's tables are built once per process: not the index's.
    let warm = Index::default();
    warm.reindex(&Arc::from("warm"), &corpus.servers[0].1);
    drop(warm);
    trim();
    let before = rss_bytes();
    let index = Index::default();
    {
        let fleet = Fleet::of(corpus, n);
        for (name, c) in &fleet.backends {
            index.reindex(name, &c.tools);
        }
    }
    trim();
    let after = rss_bytes();
    let snap = index.snapshot();
    Memory {
        tools: snap.len(),
        estimate_bytes: snap.bytes(),
        rss_growth_bytes: after as i64 - before as i64,
    }
}

/// This process's resident set, bytes (`/proc/self/statm`).
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}

/// Gives freed heap memory back to the system, so the resident set shows
/// what is still allocated.
fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of the heap.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Everything, for `--json`.
#[derive(Debug, Serialize)]
struct Report {
    machine: Machine,
    profile: &'static str,
    corpus_servers: usize,
    corpus_tools: usize,
    queries: usize,
    rounds: usize,
    latency: Vec<Latencies>,
    reindexing: Reindexing,
    listings: Vec<Listing>,
    memory: Memory,
}

pub fn run(args: &ToolSearchArgs) -> anyhow::Result<()> {
    if args.tools.iter().any(|&n| n == 0 || n > 1_000_000) || args.tools.is_empty() {
        bail!("--tools: between 1 and 1,000,000 tools per size");
    }
    if args.reindexes == 0 {
        bail!("--reindexes: at least 1");
    }
    let dir = retrieval_dir(args.retrieval.as_deref());
    let corpus = load_corpus(&dir)?;
    let largest = args.tools.iter().copied().max().unwrap_or(5_000);
    let rounds = args.queries.max(1).div_ceil(corpus.queries.len());
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };

    println!("vigil-bench {} tool-search", env!("CARGO_PKG_VERSION"));
    println!("{}", Machine::detect());
    println!(
        "build: {profile} profile; allocator: the system's (Vigil's own binary uses mimalloc); in process, no network"
    );
    println!(
        "data: {} tools of {} servers, {} queries ({}); catalogs: backends s0, s1, ... each a copy of one real server's tools, prefix naming `{SEPARATOR}`",
        corpus.tools(),
        corpus.servers.len(),
        corpus.queries.len(),
        dir.display()
    );
    println!();

    let memory = memory(&corpus, largest);
    let latency: Vec<Latencies> = args
        .tools
        .iter()
        .map(|&n| latencies(&corpus, n, rounds))
        .collect::<anyhow::Result<_>>()?;
    print_latencies(&latency, rounds, corpus.queries.len());
    let reindexing = reindexing(&corpus, largest, args.reindexes, args.queries)?;
    print_reindexing(&reindexing);
    let listings: Vec<Listing> = LISTING_SIZES
        .iter()
        .map(|&n| listing(&corpus, n))
        .collect::<anyhow::Result<_>>()?;
    print_listings(&listings);
    print_memory(&memory);
    #[cfg(feature = "semantic")]
    if let Some(dir) = &args.model_dir {
        let model: Arc<dyn vigil::search::vectors::Embed> =
            Arc::new(vigil::search::semantic::Model::load(dir)?);
        let fused: Vec<Fused> = args
            .tools
            .iter()
            .map(|&n| fused(&corpus, n, rounds, &model))
            .collect::<anyhow::Result<_>>()?;
        print_fused(&fused, rounds, corpus.queries.len());
    }

    if let Some(path) = &args.json {
        let report = Report {
            machine: Machine::detect(),
            profile,
            corpus_servers: corpus.servers.len(),
            corpus_tools: corpus.tools(),
            queries: corpus.queries.len(),
            rounds,
            latency,
            reindexing,
            listings,
            memory,
        };
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
        println!("\nwrote {}", path.display());
    }
    Ok(())
}

fn dist_row(label: &str, d: &Dist) -> String {
    format!(
        "| {label} | {:.1} | {:.1} | {:.1} | {:.1} |",
        d.p50_us, d.p99_us, d.max_us, d.mean_us
    )
}

fn print_latencies(all: &[Latencies], rounds: usize, queries: usize) {
    println!(
        "## 1. find_tool latency (keyword, limit 8, a view of the whole catalog)\n\n{queries} queries x {rounds} rounds = {} calls per row, after one unrecorded round; µs per call, one thread.\n",
        queries * rounds
    );
    for l in all {
        println!(
            "{} tools, {} backends (indexed from empty in {:.1} ms one backend after another, {:.1} ms all at once); documents sharing a word with a query: median {}, most {}\n",
            l.tools, l.backends, l.index_ms, l.index_all_ms, l.matched_p50, l.matched_max
        );
        println!("| part | p50 µs | p99 µs | max µs | mean µs |\n|---|---:|---:|---:|---:|");
        for (label, d) in [
            ("`ToolSearch::find` (all of it)", &l.find),
            ("- `Snapshot::rank` alone", &l.rank),
            (
                "- the answer's JSON (`structured` + serialize)",
                &l.answer_json,
            ),
            (
                "`ToolSearch::servers` (the gateway, per call, besides find; cached per snapshot and policy entry)",
                &l.servers,
            ),
        ] {
            println!("{}", dist_row(label, d));
        }
        let slow: Vec<String> = l
            .slowest
            .iter()
            .map(|s| format!("{:?} {:.0} µs ({} matched)", s.query, s.p50_us, s.matched))
            .collect();
        println!("\nslowest queries (median): {}\n", slow.join("; "));
    }
}

fn print_reindexing(r: &Reindexing) {
    println!(
        "## 2. Re-indexing under searches ({} tools)\n\nOne thread runs find_tool in a loop (every query in turn) while another re-indexes `{REINDEXED}` ({REINDEXED_TOOLS} tools, every description changed) {} times; then the loop alone for as long. Searches read the snapshot in force and never wait for a rebuild.\n",
        r.tools, r.rounds
    );
    println!("| | calls | p50 µs | p99 µs | max µs | mean µs |\n|---|---:|---:|---:|---:|---:|");
    for (label, d) in [
        ("re-index of `r100`, no search running", &r.reindex_alone),
        (
            "- the same with nothing changed (snapshot rebuilt only)",
            &r.reindex_kept,
        ),
        ("re-index of `r100` while searches run", &r.reindex),
        ("find while re-indexing", &r.during),
        (
            "- of which the snapshot was swapped during the call",
            &r.during_swapped,
        ),
        ("- the others", &r.during_other),
        (
            "find while the other CPU only spins (the machine's floor)",
            &r.spinning,
        ),
        ("find alone", &r.without),
    ] {
        println!(
            "| {label} | {} | {:.1} | {:.1} | {:.1} | {:.1} |",
            d.calls, d.p50_us, d.p99_us, d.max_us, d.mean_us
        );
    }
    println!(
        "\nwhile re-indexing / alone: p50 {:.2}x, p99 {:.2}x (while spinning / alone: p50 {:.2}x, p99 {:.2}x); longest search while re-indexing {:.2} ms, one re-index p50 {:.2} ms.\n",
        r.during.p50_us / r.without.p50_us,
        r.during.p99_us / r.without.p99_us,
        r.spinning.p50_us / r.without.p50_us,
        r.spinning.p99_us / r.without.p99_us,
        r.during.max_us / 1e3,
        r.reindex.p50_us / 1e3
    );
    let f = &r.flip;
    println!(
        "Health flip: nothing to rebuild (the index keeps what every backend last listed, whatever its health; health filters the caller's view at query time). find_tool on a view without `{}` ({} tools) against the view of all ({} tools):\n",
        f.hidden, f.tools_without, f.tools_with_all
    );
    println!("| view | p50 µs | p99 µs | max µs | mean µs |\n|---|---:|---:|---:|---:|");
    println!("{}", dist_row("all backends", &f.find_with_all));
    println!(
        "{}",
        dist_row(&format!("without `{}`", f.hidden), &f.find_without)
    );
    println!(
        "\nWhat the flip costs instead: the new view (`Catalog::build`, built by the gateway on any flip) {:.2} ms; working out what find needs of it (`remember`, once per view, at its first find_tool) {:.2} ms.\n",
        f.view_build_ms, f.remember_ms
    );
}

fn print_listings(all: &[Listing]) {
    println!(
        "## 3. tools/list bytes: search mode against passthrough\n\n| tools | backends | passthrough B | search mode B | saved |\n|---:|---:|---:|---:|---:|"
    );
    for l in all {
        println!(
            "| {} | {} | {} | {} | {:.1} % |",
            l.tools, l.backends, l.passthrough_bytes, l.search_bytes, l.saved_pct
        );
    }
    println!("\n(issue 34's target: at least 80 % saved at 100 tools)\n");
    println!(
        "One find_tool answer (limit 8), over the queries: `structuredContent` B, and the tool result as the gateway sends it (the same JSON as text too) B:\n\n| tools | structured p50 | p90 | max | result p50 | p90 | max | first query |\n|---:|---:|---:|---:|---:|---:|---:|---|"
    );
    for l in all {
        let (s, r) = (&l.answer_structured, &l.answer_result);
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {:?}: {} / {} |",
            l.tools,
            s.p50,
            s.p90,
            s.max,
            r.p50,
            r.p90,
            r.max,
            l.example_query,
            l.example_structured,
            l.example_result
        );
    }
    println!();
}

fn print_memory(m: &Memory) {
    let per = |b: f64| b / m.tools.max(1) as f64 * 1_000.0 / 1024.0;
    println!(
        "## 4. Index memory ({} tools)\n\n| | total MiB | per 1,000 tools KiB |\n|---|---:|---:|",
        m.tools
    );
    println!(
        "| `Snapshot::bytes()` (estimate) | {:.2} | {:.0} |",
        m.estimate_bytes as f64 / 1048576.0,
        per(m.estimate_bytes as f64)
    );
    println!(
        "| resident-set growth (statm, the catalog dropped, malloc_trim) | {:.2} | {:.0} |",
        m.rss_growth_bytes as f64 / 1048576.0,
        per(m.rss_growth_bytes as f64)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str) -> Entry {
        let def = json!({"name": name, "description": "d", "inputSchema": {"type": "object"}});
        Entry::from_json(EntryKind::Tool, def).unwrap()
    }

    fn corpus() -> Corpus {
        Corpus {
            servers: vec![
                ("a".into(), vec![tool("x"), tool("y")]),
                ("empty".into(), Vec::new()),
                ("b".into(), vec![tool("x")]),
            ],
            queries: vec!["q".into()],
        }
    }

    #[test]
    fn a_fleet_copies_the_real_servers_in_turn_to_the_size() {
        let fleet = Fleet::of(&corpus(), 4);
        assert_eq!(fleet.tools(), 4);
        let names: Vec<&str> = fleet.names().map(|n| &**n).collect();
        assert_eq!(names, ["s0", "s1", "s2"]);
        assert_eq!(fleet.backends[2].1.tools.len(), 1);
        let view = fleet.view(None);
        let exposed: Vec<&str> = view.tools.iter().map(Entry::key).collect();
        assert_eq!(exposed, ["s0__x", "s0__y", "s1__x", "s2__x"]);
        assert_eq!(fleet.view(Some("s0")).tools.len(), 2);
    }

    #[test]
    fn the_reindexed_backend_has_distinct_names_and_every_revision_differs() {
        let tools = hundred(&corpus());
        let names: Vec<&str> = tools.iter().map(Entry::key).collect();
        assert_eq!(names, ["x", "y"]);
        let (one, two) = (revised(&tools, 1), revised(&tools, 2));
        assert_eq!(one[0].str("description"), Some("d (revision 1)"));
        assert!(
            one.iter()
                .zip(&two)
                .all(|(a, b)| a.key() == b.key() && a != b)
        );
    }
}
