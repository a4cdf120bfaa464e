//! Reciprocal rank fusion: one ranking from several, by rank alone.
//!
//! A document's fused score is the sum over the rankings that have it of
//! `1 / (K + rank)` (rank from 1). Scores of different arms (BM25, cosine)
//! are not comparable; ranks are, and a document both arms rank well beats
//! one only a single arm likes. No quota per arm: a strong arm fills the
//! top when the other has nothing good.

use std::collections::HashMap;
use std::hash::Hash;

/// The constant of reciprocal rank fusion (Cormack, Clarke and Büttcher's
/// 60: it damps the difference between the first few ranks).
pub const K: f64 = 60.0;

/// `rankings` (each best first) fused, best first; ties keep the order
/// in which documents first appeared.
pub fn fuse<T: Clone + Eq + Hash>(rankings: &[&[T]]) -> Vec<(T, f64)> {
    let mut scores: HashMap<&T, (f64, usize)> = HashMap::new();
    let mut seen = 0usize;
    for ranking in rankings {
        for (i, doc) in ranking.iter().enumerate() {
            let entry = scores.entry(doc).or_insert_with(|| {
                seen += 1;
                (0.0, seen)
            });
            entry.0 += 1.0 / (K + (i + 1) as f64);
        }
    }
    let mut out: Vec<(T, f64, usize)> = scores
        .into_iter()
        .map(|(d, (s, first))| (d.clone(), s, first))
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.2.cmp(&b.2)));
    out.into_iter().map(|(d, s, _)| (d, s)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_both_arms_rank_well_comes_first() {
        let keyword = ["a", "b", "c"];
        let semantic = ["c", "d", "b"];
        let fused: Vec<&str> = fuse(&[&keyword, &semantic])
            .into_iter()
            .map(|(d, _)| d)
            .collect();
        // b: 1/62 + 1/63, c: 1/63 + 1/61 — c first, then b, then a, d.
        assert_eq!(fused, ["c", "b", "a", "d"]);
    }

    #[test]
    fn one_arm_alone_keeps_its_order() {
        let keyword = [3, 1, 2];
        let fused: Vec<i32> = fuse(&[&keyword, &[]]).into_iter().map(|(d, _)| d).collect();
        assert_eq!(fused, [3, 1, 2]);
    }
}
