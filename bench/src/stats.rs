//! Percentiles from a sorted vector of latencies (exact, nearest rank).

/// Latency figures of a set of calls, in microseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
}

impl Latency {
    /// `sorted_ns` must be sorted ascending.
    pub fn of(sorted_ns: &[u64]) -> Self {
        if sorted_ns.is_empty() {
            return Self::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        let sum: u128 = sorted_ns.iter().map(|&n| n as u128).sum();
        Self {
            p50: us(percentile(sorted_ns, 0.50)),
            p90: us(percentile(sorted_ns, 0.90)),
            p99: us(percentile(sorted_ns, 0.99)),
            max: us(*sorted_ns.last().unwrap_or(&0)),
            mean: sum as f64 / sorted_ns.len() as f64 / 1000.0,
        }
    }
}

/// Nearest-rank percentile: the smallest value with at least `q` of the
/// values at or below it.
pub fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.50), 50);
        assert_eq!(percentile(&v, 0.99), 99);
        assert_eq!(percentile(&v, 1.0), 100);
        assert_eq!(percentile(&[7], 0.5), 7);
        assert_eq!(percentile(&[], 0.5), 0);
    }
}
