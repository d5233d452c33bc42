//! The keys a Redis source polls, and what it has learned about each one.

use super::histogram::HistogramState;
use crate::config::KeyType;

/// What a tracked key is, as last learned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyState {
    /// A queue type we can measure.
    Typed(KeyType),
    /// The key does not exist (exact keys only; reported as depth 0).
    Missing,
    /// The key exists with a type we cannot measure (e.g. `string`).
    Unsupported(String),
}

/// One key being polled.
#[derive(Debug, Clone)]
pub struct TrackedKey {
    /// The raw key.
    pub key: Vec<u8>,
    /// The `queue` label value.
    pub name: String,
    /// Labels from the spec's named captures.
    pub labels: Vec<(String, String)>,
    /// Index of the `queues` entry that claimed this key.
    pub spec: usize,
    /// The key's type as last learned.
    pub state: KeyState,
    /// True for configured exact keys (kept and reported while missing).
    pub exact: bool,
    /// The age histogram's schedule and last measurement (timestamp zsets).
    pub histogram: HistogramState,
    /// A timestamp zset that held due and scheduled items at the last poll,
    /// so this poll counts its due items with ZCOUNT in the first round trip.
    pub mixed: bool,
}

impl TrackedKey {
    /// Keeps what polls learned about `old`, the same key before this
    /// discovery round, so rediscovery neither forgets the age hint nor makes
    /// every histogram due at once.
    pub fn carry_over(&mut self, old: &TrackedKey) {
        if old.key == self.key && old.spec == self.spec && old.state == self.state {
            self.histogram = old.histogram.clone();
            self.mixed = old.mixed;
        }
    }
}

/// Carries what polls learned from `previous` over to the same keys in
/// `found`, a new discovery round's keys.
pub fn carry_over_all(previous: &[TrackedKey], found: &mut [TrackedKey]) {
    let by_key: std::collections::HashMap<&[u8], &TrackedKey> =
        previous.iter().map(|k| (k.key.as_slice(), k)).collect();
    for k in found {
        if let Some(old) = by_key.get(k.key.as_slice()) {
            k.carry_over(old);
        }
    }
}
