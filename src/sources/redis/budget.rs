//! The Redis CPU a source spends on age histograms, per second: the
//! cadence adapts to it instead of being a fixed interval whatever it costs.
//!
//! Each poll earns [`NS_PER_SEC`] for every second since the last one (at
//! most [`MAX_SAVED_SECS`] worth, so a quiet spell cannot fund a burst) and
//! each histogram measurement it plans spends its cost as `bucket_ask`'s
//! model prices it. A key whose histogram falls due while the allowance is
//! spent keeps serving its last measurement, and is measured at a later
//! poll; `queue_exporter_message_age_staleness_seconds` shows how old the
//! histograms served are, so staleness beyond `age_histogram_interval` is
//! never silent. A key's first measurement is never held back nor paid for
//! (it has nothing to serve, like the depths a poll must read; a fresh
//! start does not begin in debt), and a measurement that needs a second
//! round in the same poll finishes (it was paid for).
//!
//! Sized from scenario 10 of `scripts/bench`: the steady static fleet of
//! issue 11 (2,000 timestamp zsets measured every 15 s) costs about
//! 0.8 ms a second by the model, and fits; queues whose every bucket moves
//! between measurements spend more per measurement and are measured less
//! often, instead of costing Redis more than the depths they annotate.

/// Redis CPU per second histograms may spend, in nanoseconds (1 ms/s).
pub const NS_PER_SEC: f64 = 1_000_000.0;

/// Seconds of allowance a source may save up.
const MAX_SAVED_SECS: f64 = 2.0;

/// A source's histogram allowance.
#[derive(Debug, Clone, Default)]
pub struct HistogramBudget {
    /// Nanoseconds of Redis CPU that measurements may still spend; below
    /// zero after a measurement cost more than was left.
    allowance_ns: f64,
    /// Unix seconds of the last refill; `None` before the first poll.
    at: Option<f64>,
}

impl HistogramBudget {
    /// At the start of a poll at `now_secs`: earns the time since the last.
    pub fn refill(&mut self, now_secs: f64) {
        let earned = self
            .at
            .map_or(1.0, |at| (now_secs - at).clamp(0.0, MAX_SAVED_SECS));
        self.allowance_ns =
            (self.allowance_ns + earned * NS_PER_SEC).min(MAX_SAVED_SECS * NS_PER_SEC);
        self.at = Some(now_secs);
    }

    /// Whether a measurement may start now.
    pub fn allows(&self) -> bool {
        self.allowance_ns > 0.0
    }

    /// Spends what a planned measurement costs.
    pub fn charge(&mut self, cost_ns: u64) {
        self.allowance_ns -= cost_ns as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_earns_its_share_and_savings_are_capped() {
        let mut b = HistogramBudget::default();
        b.refill(100.0);
        assert!(b.allows());
        b.charge(1_500_000);
        assert!(!b.allows());
        b.refill(101.0);
        assert!(b.allows());
        // A long quiet spell saves at most MAX_SAVED_SECS.
        b.refill(1000.0);
        b.charge((MAX_SAVED_SECS * NS_PER_SEC) as u64);
        assert!(!b.allows());
    }

    #[test]
    fn over_many_polls_spending_matches_the_rate() {
        let mut b = HistogramBudget::default();
        let mut spent = 0u64;
        for t in 0..100 {
            b.refill(f64::from(t));
            while b.allows() {
                b.charge(7_000);
                spent += 7_000;
            }
        }
        let rate = spent as f64 / 100.0;
        assert!((rate - NS_PER_SEC).abs() < NS_PER_SEC * 0.05, "{rate}");
    }
}
