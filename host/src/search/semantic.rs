//! The semantic arm of tool search: a small sentence-embedding model run
//! in-process, so that "read a file from disk" finds `read_text_file`
//! ("Read the complete contents of a file from the file system") though
//! the two share almost no word.
//!
//! The model is all-MiniLM-L6-v2 (sentence-transformers): a 6-layer BERT
//! of 384 dimensions, about 90 MB of f32 weights. It runs on the CPU with
//! candle, from three files an operator installs in one directory
//! (`[tool_search.semantic] model_dir`): `config.json` (the BERT
//! configuration), `tokenizer.json` (its WordPiece tokenizer) and
//! `model.safetensors` (the weights). Nothing is downloaded, ever.
//!
//! A text's embedding is what sentence-transformers computes for this
//! model (its `modules.json`: Transformer, Pooling, Normalize): the last
//! hidden states of its tokens, averaged with the attention mask as
//! weights (padding counts for nothing), then scaled to unit length.
//! Texts are cut at the model's `max_seq_length` of 256 tokens, the two
//! special ones included.
//!
//! Two things of `tokenizer.json` are overridden: it was saved with
//! truncation at 128 tokens and fixed padding to 128, neither of which is
//! how the model is used. Truncation is set to 256 (or fewer when the
//! model has fewer positions), and padding is off: a batch is padded here,
//! to its longest text, with a mask.

use std::fmt;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use tokenizers::{Encoding, PostProcessor, Tokenizer, TruncationParams};

/// The model's `max_seq_length` (its `sentence_bert_config.json`): the
/// most tokens of a text it reads, `[CLS]` and `[SEP]` included; it was
/// trained on no longer ones.
pub const MAX_TOKENS: usize = 256;

/// How many texts go through the model at once. Texts are sorted by
/// length first, so that a batch pads little; its attention scores take
/// `BATCH × heads × tokens² × 4` bytes (50 MB for 16 texts of 256 tokens).
pub const BATCH: usize = 16;

/// One of the model directory's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModelFile {
    /// `config.json`: the BERT configuration (sizes, layers).
    Config,
    /// `tokenizer.json`: the tokenizer, as Hugging Face `tokenizers` saves it.
    Tokenizer,
    /// `model.safetensors`: the weights.
    Weights,
}

impl ModelFile {
    /// Its name in the model directory.
    pub fn name(self) -> &'static str {
        match self {
            ModelFile::Config => "config.json",
            ModelFile::Tokenizer => "tokenizer.json",
            ModelFile::Weights => "model.safetensors",
        }
    }
}

impl fmt::Display for ModelFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What failed: a model file (which, where, what is wrong with it: the
/// message starts with its path), or embedding.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SemanticError {
    /// A model file is missing or cannot be read.
    #[error("{}: cannot read: {error}", path.display())]
    Unreadable {
        file: ModelFile,
        path: PathBuf,
        error: std::io::Error,
    },
    /// A model file was read but is not a model this module runs: not
    /// JSON, not a BERT configuration, weights missing or of the wrong
    /// shape for the configuration, a tokenizer whose tokens the model
    /// has no embedding for.
    #[error("{}: {what}", path.display())]
    Invalid {
        file: ModelFile,
        path: PathBuf,
        what: String,
    },
    /// The model failed on a batch of texts (a model that loaded is not
    /// expected to).
    #[error("embedding failed: {what}")]
    Embed { what: String },
}

impl SemanticError {
    /// The model file at fault, if one is.
    pub fn file(&self) -> Option<ModelFile> {
        match self {
            SemanticError::Unreadable { file, .. } | SemanticError::Invalid { file, .. } => {
                Some(*file)
            }
            SemanticError::Embed { .. } => None,
        }
    }

    fn invalid(dir: &Path, file: ModelFile, what: impl Into<String>) -> Self {
        SemanticError::Invalid {
            file,
            path: dir.join(file.name()),
            what: what.into(),
        }
    }

    fn embed(error: candle_core::Error) -> Self {
        SemanticError::Embed {
            what: candle_message(&error),
        }
    }
}

/// A candle error's message without the backtrace candle appends to it
/// when `RUST_BACKTRACE` is set (dozens of lines in one log line).
fn candle_message(error: &candle_core::Error) -> String {
    match error {
        candle_core::Error::WithBacktrace { inner, .. } => candle_message(inner),
        candle_core::Error::Context { inner, context } => {
            format!("{context}: {}", candle_message(inner))
        }
        candle_core::Error::WithPath { inner, .. } => candle_message(inner),
        other => other.to_string(),
    }
}

/// A loaded sentence-embedding model: its tokenizer and its weights, in
/// memory (about 90 MB). Immutable, so one is shared by every search.
///
/// [`embed`](Model::embed) computes on the calling thread (and candle's
/// worker threads) for milliseconds to seconds: call it from blocking
/// code (`spawn_blocking`), not from an async task.
pub struct Model {
    bert: BertModel,
    tokenizer: Tokenizer,
    device: Device,
    dims: usize,
    pad_id: u32,
}

impl fmt::Debug for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Model")
            .field("dims", &self.dims)
            .finish_non_exhaustive()
    }
}

/// `Model` is shared across threads by the search service.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Model>();
};

impl Model {
    /// Loads the model from `dir` (config.json, tokenizer.json,
    /// model.safetensors), in that order; an error names the file and
    /// what is wrong with it. The weights are read whole into memory (not
    /// mapped: a mapped file truncated while read would crash the
    /// process), so loading briefly takes twice their size.
    pub fn load(dir: &Path) -> Result<Model, SemanticError> {
        let read = |file: ModelFile| {
            let path = dir.join(file.name());
            std::fs::read(&path).map_err(|error| SemanticError::Unreadable { file, path, error })
        };

        let config: Config = serde_json::from_slice(&read(ModelFile::Config)?).map_err(|e| {
            SemanticError::invalid(
                dir,
                ModelFile::Config,
                format!("not a BERT configuration: {e}"),
            )
        })?;
        check_config(&config)
            .map_err(|what| SemanticError::invalid(dir, ModelFile::Config, what))?;
        // Fits in u32: `check_config` bounds it by the vocabulary size.
        let pad_id = u32::try_from(config.pad_token_id).unwrap_or(0);

        let tokenizer = read(ModelFile::Tokenizer)?;
        let tokenizer = prepare_tokenizer(&tokenizer, &config)
            .map_err(|what| SemanticError::invalid(dir, ModelFile::Tokenizer, what))?;

        let weights = read(ModelFile::Weights)?;
        let weights_error = |e: candle_core::Error| {
            SemanticError::invalid(dir, ModelFile::Weights, candle_message(&e))
        };
        let device = Device::Cpu;
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &device)
            .map_err(weights_error)?;
        // `BertModel::load` takes the tensors with or without the `bert.`
        // prefix of a `BertForMaskedLM` checkpoint: this model's have none.
        // A missing tensor or one of another shape than the configuration
        // says is an error, not a panic.
        let bert = BertModel::load(vb, &config).map_err(|e| {
            SemanticError::invalid(
                dir,
                ModelFile::Weights,
                format!(
                    "does not hold the model {} describes: {}",
                    ModelFile::Config,
                    candle_message(&e)
                ),
            )
        })?;

        Ok(Model {
            bert,
            tokenizer,
            device,
            dims: config.hidden_size,
            pad_id,
        })
    }

    /// Unit-length embeddings of `texts` ([`dims`](Model::dims) long
    /// each, in the order of `texts`), batched; texts longer than
    /// [`MAX_TOKENS`] tokens are truncated. A text's embedding does not
    /// depend on the others it is batched with (up to float rounding).
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, SemanticError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let encodings = self
            .tokenizer
            .encode_batch_fast(texts.to_vec(), true)
            .map_err(|e| SemanticError::Embed {
                what: format!("tokenizing: {e}"),
            })?;
        let mut order: Vec<usize> = (0..encodings.len()).collect();
        order.sort_by_key(|&i| encodings[i].get_ids().len());
        let mut out = vec![Vec::new(); texts.len()];
        for chunk in order.chunks(BATCH) {
            let batch: Vec<&Encoding> = chunk.iter().map(|&i| &encodings[i]).collect();
            let vectors = self.forward(&batch).map_err(SemanticError::embed)?;
            if vectors.len() != chunk.len() || vectors.iter().any(|v| v.len() != self.dims) {
                return Err(SemanticError::Embed {
                    what: format!(
                        "the model returned {} vectors ({} long) for {} texts ({} expected)",
                        vectors.len(),
                        vectors.first().map_or(0, Vec::len),
                        chunk.len(),
                        self.dims
                    ),
                });
            }
            for (&i, v) in chunk.iter().zip(vectors) {
                out[i] = v;
            }
        }
        Ok(out)
    }

    /// The token ids the model reads for `text` (with `[CLS]` and
    /// `[SEP]`, truncated at [`MAX_TOKENS`]): for checking a tokenizer
    /// against the reference, and telling how long a text is to the model.
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>, SemanticError> {
        let encoding = self
            .tokenizer
            .encode(text, true)
            .map_err(|e| SemanticError::Embed {
                what: format!("tokenizing: {e}"),
            })?;
        Ok(encoding.get_ids().to_vec())
    }

    /// How long an embedding is: the model's hidden size (384).
    pub fn dims(&self) -> usize {
        self.dims
    }

    /// One batch through the model, padded to its longest text; the
    /// masked mean of the last hidden states, L2-normalized.
    fn forward(&self, batch: &[&Encoding]) -> candle_core::Result<Vec<Vec<f32>>> {
        let n = batch.len();
        let len = batch.iter().map(|e| e.get_ids().len()).max().unwrap_or(0);
        let mut ids = Vec::with_capacity(n * len);
        let mut mask = Vec::with_capacity(n * len);
        for e in batch {
            let own = e.get_ids();
            ids.extend_from_slice(own);
            ids.resize(ids.len() + (len - own.len()), self.pad_id);
            mask.resize(mask.len() + own.len(), 1u32);
            mask.resize(mask.len() + (len - own.len()), 0u32);
        }
        let ids = Tensor::from_vec(ids, (n, len), &self.device)?;
        let mask = Tensor::from_vec(mask, (n, len), &self.device)?;
        let types = ids.zeros_like()?;
        // (n, len, dims)
        let hidden = self.bert.forward(&ids, &types, Some(&mask))?;
        // Mean over the real tokens: padding weighs 0. At least [CLS] and
        // [SEP] are real, so no count is 0 (clamped all the same, as
        // sentence-transformers does).
        let weights = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
        let sum = hidden.broadcast_mul(&weights)?.sum(1)?;
        let count = weights.sum(1)?.clamp(1e-9f32, f32::MAX)?;
        let mean = sum.broadcast_div(&count)?;
        // L2 normalization (torch's `F.normalize`: eps 1e-12).
        let norm = mean
            .sqr()?
            .sum_keepdim(1)?
            .sqrt()?
            .clamp(1e-12f32, f32::MAX)?;
        mean.broadcast_div(&norm)?.to_vec2::<f32>()
    }
}

/// Cosine similarity of two unit vectors (their dot product), as
/// [`Model::embed`] returns them: 1 for the same direction, about 0 for
/// unrelated texts. Vectors of different lengths are compared over the
/// shorter.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// What in a configuration would make candle panic or misbehave rather
/// than fail (a division by zero heads, positions fewer than tokens).
fn check_config(c: &Config) -> Result<(), String> {
    if c.hidden_size == 0 || c.num_attention_heads == 0 || c.num_hidden_layers == 0 {
        return Err(format!(
            "hidden_size {}, num_attention_heads {}, num_hidden_layers {}: none may be 0",
            c.hidden_size, c.num_attention_heads, c.num_hidden_layers
        ));
    }
    if !c.hidden_size.is_multiple_of(c.num_attention_heads) {
        return Err(format!(
            "hidden_size {} is not a multiple of num_attention_heads {}",
            c.hidden_size, c.num_attention_heads
        ));
    }
    if c.max_position_embeddings < 3 || c.type_vocab_size == 0 {
        return Err(format!(
            "max_position_embeddings {} (at least 3) or type_vocab_size {} (at least 1) too small",
            c.max_position_embeddings, c.type_vocab_size
        ));
    }
    if c.vocab_size > u32::MAX as usize || c.pad_token_id >= c.vocab_size {
        return Err(format!(
            "pad_token_id {} is not within vocab_size {}",
            c.pad_token_id, c.vocab_size
        ));
    }
    Ok(())
}

/// The tokenizer of `json`, set up for [`Model::embed`]: truncation at
/// [`MAX_TOKENS`] (or the model's positions), no padding. Checked against
/// the configuration: every token it yields has an embedding.
fn prepare_tokenizer(json: &[u8], config: &Config) -> Result<Tokenizer, String> {
    let mut tokenizer = Tokenizer::from_bytes(json).map_err(|e| format!("not a tokenizer: {e}"))?;
    // An id past the embeddings would fail every text that has it.
    let top = tokenizer.get_vocab(true).into_values().max().unwrap_or(0);
    if top as usize >= config.vocab_size {
        return Err(format!(
            "has token id {top}, past the {} of {}'s vocab_size",
            config.vocab_size,
            ModelFile::Config
        ));
    }
    let max_length = MAX_TOKENS.min(config.max_position_embeddings);
    // `with_truncation` subtracts the special tokens from the length
    // unchecked: more of them than the length would underflow.
    let special = tokenizer
        .get_post_processor()
        .map_or(0, |p| p.added_tokens(false));
    if special >= max_length {
        return Err(format!(
            "adds {special} special tokens to a text, not fewer than its {max_length} tokens"
        ));
    }
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length,
            ..TruncationParams::default()
        }))
        .map_err(|e| format!("cannot truncate at {max_length} tokens: {e}"))?;
    tokenizer.with_padding(None);
    Ok(tokenizer)
}
