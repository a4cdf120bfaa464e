//! The semantic arm's vectors: each document's meaning embedded once, kept
//! by a hash of the embedded text (a re-listing that changes nothing a
//! model reads embeds nothing), and the query's at search time. Documents
//! are embedded off every request path (after a re-indexing, in the
//! background): until a document has its vector it is ranked by keywords
//! alone; `initialize` and `tools/list` never embed anything.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, RwLock};

/// What turns texts into unit vectors: the model of `semantic` (a build
/// with that feature), or a test's stand-in.
pub trait Embed: Send + Sync {
    /// One unit vector per text, in order.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String>;
}

#[cfg(feature = "semantic")]
impl Embed for super::semantic::Model {
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        super::semantic::Model::embed(self, texts).map_err(|e| e.to_string())
    }
}

/// How many texts are embedded per call while filling.
const FILL_BATCH: usize = 64;

/// The vectors, and the model that makes them.
pub struct Vectors {
    embed: Arc<dyn Embed>,
    by_text: RwLock<HashMap<u64, Arc<[f32]>>>,
    /// One fill at a time.
    filling: Mutex<()>,
}

/// The key of an embedded text.
pub fn key(text: &str) -> u64 {
    // SipHash with fixed keys: the same text gives the same key in every
    // run (the map is in memory only; nothing depends on the value).
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

impl Vectors {
    pub fn new(embed: Arc<dyn Embed>) -> Self {
        Vectors {
            embed,
            by_text: RwLock::default(),
            filling: Mutex::default(),
        }
    }

    /// The vector of the text of `key`, if it was embedded.
    pub fn get(&self, key: u64) -> Option<Arc<[f32]>> {
        self.by_text
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .cloned()
    }

    /// How many texts have a vector.
    pub fn len(&self) -> usize {
        self.by_text.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Embeds those of `texts` (key, text) that have no vector yet; keeps
    /// only those of `keep` afterwards (the documents of the index now).
    /// How many were embedded.
    pub fn fill<'a>(
        &self,
        texts: impl IntoIterator<Item = (u64, &'a str)>,
    ) -> Result<usize, String> {
        let _one = self.filling.lock().unwrap_or_else(|e| e.into_inner());
        let mut wanted: Vec<(u64, &str)> = {
            let have = self.by_text.read().unwrap_or_else(|e| e.into_inner());
            texts
                .into_iter()
                .filter(|(k, _)| !have.contains_key(k))
                .collect()
        };
        wanted.sort_unstable_by_key(|(k, _)| *k);
        wanted.dedup_by_key(|(k, _)| *k);
        let mut done = 0;
        for chunk in wanted.chunks(FILL_BATCH) {
            let texts: Vec<&str> = chunk.iter().map(|(_, t)| *t).collect();
            let vectors = self.embed.embed(&texts)?;
            let mut by_text = self.by_text.write().unwrap_or_else(|e| e.into_inner());
            for ((k, _), v) in chunk.iter().zip(vectors) {
                by_text.insert(*k, v.into());
            }
            done += chunk.len();
        }
        Ok(done)
    }

    /// Drops the vectors of texts no document has any more.
    pub fn retain(&self, live: &std::collections::HashSet<u64>) {
        self.by_text
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|k, _| live.contains(k));
    }

    /// The query's vector.
    pub fn query(&self, text: &str) -> Result<Vec<f32>, String> {
        self.embed
            .embed(&[text])?
            .pop()
            .ok_or_else(|| "the model gave no vector".to_owned())
    }
}

/// The dot product of two unit vectors: their cosine.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
