//! The cumulative record of a source's polls: the poll duration histogram
//! and the errors by [`Reason`]. Separate from the samples because it
//! accumulates across polls, whether they succeed or not.

use std::collections::BTreeMap;

use super::Reason;

/// Cumulative record of one source's polls.
#[derive(Debug, Clone, Default)]
pub struct PollRecord {
    /// Poll duration histogram: cumulative counts per bucket of [`POLL_DURATION_BUCKETS`].
    pub duration_bucket_counts: Vec<u64>,
    /// Sum of all poll durations in seconds.
    pub duration_sum: f64,
    /// Number of polls measured.
    pub duration_count: u64,
    /// Failed polls (and per-queue failures) by reason.
    pub errors: BTreeMap<Reason, u64>,
}

/// Upper bounds (seconds) of the poll duration histogram.
pub const POLL_DURATION_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

impl PollRecord {
    /// Records one poll's duration.
    pub fn observe(&mut self, seconds: f64) {
        if self.duration_bucket_counts.len() != POLL_DURATION_BUCKETS.len() {
            self.duration_bucket_counts = vec![0; POLL_DURATION_BUCKETS.len()];
        }
        for (bound, count) in POLL_DURATION_BUCKETS
            .iter()
            .zip(self.duration_bucket_counts.iter_mut())
        {
            if seconds <= *bound {
                *count += 1;
            }
        }
        self.duration_sum += seconds;
        self.duration_count += 1;
    }

    /// Counts one error with a reason label.
    pub fn count_error(&mut self, reason: Reason) {
        *self.errors.entry(reason).or_insert(0) += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_record_histogram_is_cumulative() {
        let mut t = PollRecord::default();
        t.observe(0.003);
        t.observe(0.2);
        assert_eq!(t.duration_count, 2);
        assert_eq!(t.duration_bucket_counts[0], 0); // 1 ms
        assert_eq!(t.duration_bucket_counts[2], 1); // 5 ms
        assert_eq!(t.duration_bucket_counts[11], 2); // 5 s
    }
}
