//! Retrieval quality: where the right tool came in each query's ranking,
//! summed up as Recall@1, Recall@5 and the mean reciprocal rank (the
//! figures of docs/tool-search.md, computed by `host/tests/retrieval.rs`
//! and the benchmarks alike).

/// How many results a query's rank is looked for in (MRR counts a tool
/// past them as not found).
pub const DEPTH: usize = 10;

/// Quality over a set of queries.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Scores {
    pub queries: usize,
    /// Share of queries whose right tool came first.
    pub recall_at_1: f64,
    /// Share whose right tool was among the first five.
    pub recall_at_5: f64,
    /// Mean of 1/rank (0 when not within [`DEPTH`]).
    pub mrr: f64,
}

impl Scores {
    /// The scores of queries whose right tool came at `ranks` (1-based;
    /// `None`: not within [`DEPTH`]).
    pub fn of(ranks: impl IntoIterator<Item = Option<usize>>) -> Scores {
        let mut s = Scores::default();
        let (mut at1, mut at5, mut rr) = (0usize, 0usize, 0.0f64);
        for r in ranks {
            s.queries += 1;
            if let Some(r) = r.filter(|r| (1..=DEPTH).contains(r)) {
                at1 += usize::from(r == 1);
                at5 += usize::from(r <= 5);
                rr += 1.0 / r as f64;
            }
        }
        if s.queries > 0 {
            let n = s.queries as f64;
            s.recall_at_1 = at1 as f64 / n;
            s.recall_at_5 = at5 as f64 / n;
            s.mrr = rr / n;
        }
        s
    }
}

impl std::fmt::Display for Scores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:>5} queries  R@1 {:.3}  R@5 {:.3}  MRR {:.3}",
            self.queries, self.recall_at_1, self.recall_at_5, self.mrr
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_count_ranks_within_the_depth() {
        let s = Scores::of([Some(1), Some(3), Some(6), None, Some(11)]);
        assert_eq!(s.queries, 5);
        assert!((s.recall_at_1 - 0.2).abs() < 1e-9);
        assert!((s.recall_at_5 - 0.4).abs() < 1e-9);
        assert!((s.mrr - (1.0 + 1.0 / 3.0 + 1.0 / 6.0) / 5.0).abs() < 1e-9);
        assert_eq!(Scores::of([]), Scores::default());
    }
}
