//! The semantic arm's model (`search::semantic`, feature `semantic`)
//! against the reference: its embeddings, its batching and truncation,
//! and its errors for missing and bad files. Needs the model's files
//! (tests/retrieval/setup.sh installs them; `VIGIL_MODEL_DIR` names
//! another directory). An integration test rather than unit tests, so
//! the test command's build with the feature compiles the library once,
//! not its unit tests as well.
#![cfg(feature = "semantic")]

use std::path::{Path, PathBuf};

use vigil::search::semantic::{BATCH, Model, ModelFile, SemanticError, cosine};

use std::sync::OnceLock;

/// The model directory: `VIGIL_MODEL_DIR`, else where
/// `tests/retrieval/setup.sh` links it.
fn model_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("VIGIL_MODEL_DIR") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").expect("HOME is not set (nor VIGIL_MODEL_DIR)");
    Path::new(&home).join(".cache/vigil/retrieval/model")
}

/// The model, loaded once for all tests. Its absence fails them: a
/// test that passed without a model would say nothing.
fn model() -> &'static Model {
    static MODEL: OnceLock<Model> = OnceLock::new();
    MODEL.get_or_init(|| {
        let dir = model_dir();
        for file in [ModelFile::Config, ModelFile::Tokenizer, ModelFile::Weights] {
            assert!(
                dir.join(file.name()).is_file(),
                "the model's {file} is not in {}: run `bash tests/retrieval/setup.sh` \
                 (or set VIGIL_MODEL_DIR to a directory holding config.json, \
                 tokenizer.json and model.safetensors)",
                dir.display()
            );
        }
        Model::load(&dir).unwrap_or_else(|e| panic!("loading the model: {e}"))
    })
}

fn one(text: &str) -> Vec<f32> {
    let mut v = model().embed(&[text]).expect("embed");
    v.pop().expect("one embedding")
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// A directory of its own under the system's temporary one, removed
/// when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("vigil-semantic-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn embeddings_are_unit_vectors_of_the_model_size() {
    let m = model();
    assert_eq!(m.dims(), 384);
    let texts = [
        "read a file from disk",
        "",
        "Get the current time in a specific timezone",
        "🦀 ünïcödé, CJK 文件 and symbols <>&\u{0}",
    ];
    let vs = m.embed(&texts).expect("embed");
    assert_eq!(vs.len(), texts.len());
    for (t, v) in texts.iter().zip(&vs) {
        assert_eq!(v.len(), 384, "{t:?}");
        let norm = cosine(v, v).sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{t:?}: norm {norm}");
        assert!(v.iter().all(|x| x.is_finite()), "{t:?}");
    }
    assert!(m.embed(&[]).expect("embed none").is_empty());
}

#[test]
fn matches_the_reference_model() {
    // The similarities the sentence-transformers README prints for
    // this model (rounded to 4 places).
    let v = model()
        .embed(&[
            "The weather is lovely today.",
            "It's so sunny outside!",
            "He drove to the stadium.",
        ])
        .expect("embed");
    for (i, j, expected) in [(0, 1, 0.6660f32), (0, 2, 0.1046), (1, 2, 0.1411)] {
        let got = cosine(&v[i], &v[j]);
        assert!(
            (got - expected).abs() < 2e-4,
            "similarity {i}-{j}: {got:.5}, expected {expected}"
        );
    }
    // Token ids and the ends of one embedding, as a float64 NumPy
    // re-implementation of the model (BERT forward, masked mean, L2;
    // its WordPiece from vocab.txt) computes them from the same files;
    // it reproduces the similarities above to 4 places.
    let text = "read a file from disk";
    let ids = model().token_ids(text).expect("encode");
    assert_eq!(ids, [101, 3191, 1037, 5371, 2013, 9785, 102]);
    let v = one(text);
    let head = [
        0.0207207f32,
        0.0205949,
        -0.0904893,
        -0.0022263,
        -0.0119044,
        -0.0588306,
        0.0520554,
        0.1003548,
    ];
    let tail = [
        0.0356420f32,
        -0.0083982,
        -0.0569644,
        0.0830490,
        0.0253028,
        0.0943004,
        0.0172877,
        0.0544462,
    ];
    let d = max_diff(&v[..8], &head).max(max_diff(&v[376..], &tail));
    assert!(d < 1e-5, "{text:?} differs from the reference by {d}");
}

#[test]
fn related_texts_are_closer_than_unrelated_ones() {
    // (query, the description it is about, a description it is not).
    let cases = [
        (
            "read a file from disk",
            "Read the complete contents of a file from the file system",
            "Get the current time in a specific timezone",
        ),
        (
            "what time is it in Tokyo",
            "Get the current time in a specific timezone",
            "Read the complete contents of a file from the file system",
        ),
        (
            "open a pull request",
            "Create a new pull request in a GitHub repository",
            "Execute a read-only SQL query against the database",
        ),
        (
            "run a select statement on postgres",
            "Execute a read-only SQL query against the database",
            "Create a new pull request in a GitHub repository",
        ),
    ];
    for (query, about, other) in cases {
        let v = model().embed(&[query, about, other]).expect("embed");
        let (near, far) = (cosine(&v[0], &v[1]), cosine(&v[0], &v[2]));
        assert!(
            near > far + 0.1,
            "{query:?}: {near} to {about:?}, {far} to {other:?}"
        );
    }
}

#[test]
fn batching_and_padding_do_not_change_an_embedding() {
    // Lengths from 3 tokens to past MAX_TOKENS, so each shorter text
    // is padded in the batch.
    let long = "list the open issues of a repository with their labels ".repeat(30);
    let texts = [
        "ping",
        "Read the complete contents of a file from the file system",
        "Get the current time in a specific timezone, given as an IANA name such as Europe/Paris",
        long.as_str(),
    ];
    let batch = model().embed(&texts).expect("embed batch");
    for (t, b) in texts.iter().zip(&batch) {
        let alone = one(t);
        let d = max_diff(&alone, b);
        assert!(d < 1e-5, "{t:?}: batched differs from alone by {d}");
    }
    // More texts than one batch holds, in an order that sorting by
    // length changes: each comes back in its own place.
    let many: Vec<String> = (0..BATCH * 2 + 3)
        .map(|i| format!("tool number {} {}", i, "word ".repeat((i * 7) % 23)))
        .collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let vs = model().embed(&many).expect("embed many");
    assert_eq!(vs.len(), many.len());
    for i in [0, 5, BATCH, many.len() - 1] {
        let d = max_diff(&vs[i], &one(many[i]));
        assert!(d < 1e-5, "{:?}: batched differs from alone by {d}", many[i]);
    }
}

#[test]
fn texts_are_cut_at_256_tokens_not_128() {
    // "word " is one token: [CLS] + 200 words + tail + [SEP].
    let head = "word ".repeat(200);
    let a = one(&format!("{head} send an email to the team"));
    let b = one(&format!("{head} delete the production database"));
    // Past 128 tokens, the tail still counts ...
    assert!(max_diff(&a, &b) > 1e-3, "text past 128 tokens ignored");
    // ... past 256 it does not.
    let head = "word ".repeat(300);
    let a = one(&format!("{head} send an email to the team"));
    let b = one(&format!("{head} delete the production database"));
    assert_eq!(a, b, "text past 256 tokens not truncated");
}

/// Prints what an embedding costs: `cargo test -p vigil --features
/// semantic --test semantic latency -- --ignored
/// --nocapture` (add `--release` for the figures that matter: a debug
/// build is some 50 times slower, so each measure stops after a
/// minute there).
#[test]
#[ignore = "timing, not a check: run with --ignored --nocapture"]
fn latency() {
    use std::time::{Duration, Instant};
    const BUDGET: Duration = Duration::from_secs(60);
    let m = model();
    // filesystem's read_text_file, and a query.
    let text = "Read the complete contents of a file from the file system as text. \
        Handles various text encodings and provides detailed error messages if the \
        file cannot be read. Use this tool when you need to examine the contents of a \
        single file. Use the 'head' parameter to read only the first N lines of a file, \
        or the 'tail' parameter to read only the last N lines of a file. Operates on \
        the file as text regardless of extension. Only works within allowed directories.";
    for (name, t) in [("description", text), ("query", "read a file from disk")] {
        let tokens = m.token_ids(t).expect("encode").len();
        m.embed(&[t]).expect("warm up");
        let begin = Instant::now();
        let mut times = Vec::new();
        while times.len() < 100 && begin.elapsed() < BUDGET {
            let start = Instant::now();
            m.embed(&[t]).expect("embed");
            times.push(start.elapsed());
        }
        times.sort();
        println!(
            "one {name} ({tokens} tokens): median {:?} of {} (min {:?}, max {:?})",
            times[times.len() / 2],
            times.len(),
            times[0],
            times[times.len() - 1]
        );
    }
    // The descriptions of the retrieval corpus, as an index build
    // embeds them.
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/retrieval/corpus.json");
    let corpus: serde_json::Value =
        serde_json::from_slice(&std::fs::read(corpus).expect("corpus.json")).expect("json");
    let texts: Vec<String> = corpus["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .flat_map(|s| s["tools"].as_array().expect("tools"))
        .map(|t| format!("{}: {}", t["name"], t["description"].as_str().unwrap_or("")))
        .collect();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let begin = Instant::now();
    let mut done = 0;
    for chunk in texts.chunks(BATCH * 4) {
        if begin.elapsed() > BUDGET {
            break;
        }
        m.embed(chunk).expect("embed corpus");
        done += chunk.len();
    }
    println!(
        "{done} of the {} corpus tools: {:?}",
        texts.len(),
        begin.elapsed()
    );
}

#[test]
fn load_names_the_missing_file() {
    let real = model_dir();
    let _ = model(); // fails the test, with the fix, if there is no model
    let scratch = Scratch::new("missing");
    for file in [ModelFile::Config, ModelFile::Weights] {
        std::os::unix::fs::symlink(real.join(file.name()), scratch.0.join(file.name()))
            .expect("symlink");
    }
    let e = Model::load(&scratch.0).expect_err("loaded without tokenizer.json");
    assert!(
        matches!(
            e,
            SemanticError::Unreadable {
                file: ModelFile::Tokenizer,
                ..
            }
        ),
        "{e:?}"
    );
    let message = e.to_string();
    assert!(message.contains("tokenizer.json"), "{message}");
    assert!(
        message.contains(&scratch.0.display().to_string()),
        "{message}"
    );
}

#[test]
fn load_names_the_bad_file() {
    let real = model_dir();
    let _ = model();
    let scratch = Scratch::new("bad");
    // Each puts `file` in the scratch dir in place of what was there.
    let link = |file: ModelFile| {
        let path = scratch.0.join(file.name());
        let _ = std::fs::remove_file(&path);
        std::os::unix::fs::symlink(real.join(file.name()), path).expect("symlink")
    };
    let write = |file: ModelFile, bytes: &[u8]| {
        let path = scratch.0.join(file.name());
        let _ = std::fs::remove_file(&path);
        std::fs::write(path, bytes).expect("write")
    };
    let load_err = || Model::load(&scratch.0).expect_err("loaded a bad model");

    write(ModelFile::Config, b"{\"hidden_size\": 384");
    let e = load_err();
    assert_eq!(e.file(), Some(ModelFile::Config), "{e}");
    assert!(e.to_string().contains("config.json"), "{e}");

    // Twelve heads do not divide 100 dimensions: an error, not a panic.
    let config = std::fs::read_to_string(real.join("config.json")).expect("config");
    write(
        ModelFile::Config,
        config
            .replace("\"hidden_size\": 384", "\"hidden_size\": 100")
            .as_bytes(),
    );
    let e = load_err();
    assert_invalid(&e, ModelFile::Config);

    link(ModelFile::Config);
    write(ModelFile::Tokenizer, b"[]");
    let e = load_err();
    assert_invalid(&e, ModelFile::Tokenizer);

    // Token ids past the configuration's vocabulary.
    link(ModelFile::Tokenizer);
    write(
        ModelFile::Config,
        config
            .replace("\"vocab_size\": 30522", "\"vocab_size\": 1000")
            .as_bytes(),
    );
    let e = load_err();
    assert_invalid(&e, ModelFile::Tokenizer);

    link(ModelFile::Config);
    write(ModelFile::Weights, b"not safetensors");
    let e = load_err();
    assert_invalid(&e, ModelFile::Weights);
    assert!(e.to_string().contains("model.safetensors"), "{e}");

    // Weights of another shape than the configuration says.
    write(
        ModelFile::Config,
        config
            .replace("\"intermediate_size\": 1536", "\"intermediate_size\": 1024")
            .as_bytes(),
    );
    link(ModelFile::Weights);
    let e = load_err();
    assert_invalid(&e, ModelFile::Weights);
    assert!(!e.to_string().contains('\n'), "{e}");
}

/// `e` says `file` is invalid.
fn assert_invalid(e: &SemanticError, file: ModelFile) {
    assert!(
        matches!(e, SemanticError::Invalid { file: f, .. } if *f == file),
        "expected {file} to be refused as invalid: {e}"
    );
}
