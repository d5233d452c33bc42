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
    /// Unix seconds until which the age peek is skipped: the head item was
    /// larger than [`MAX_PEEK_BYTES`] (see there).
    pub peek_paused_until: f64,
}

/// A list's head item is read whole (LINDEX has no byte range). One larger
/// than this is not parsed, and the key's age peeks pause for
/// [`PEEK_PAUSE_SECS`], counted as unreadable ages: an 8 MiB item then
/// costs one read a minute instead of one per poll.
pub const MAX_PEEK_BYTES: usize = 1 << 20;

/// How long the age peek of a key with an oversized head item pauses.
pub const PEEK_PAUSE_SECS: f64 = 60.0;

impl TrackedKey {
    /// Keeps what polls learned about `old`, the same key before this
    /// discovery round, so rediscovery neither forgets the age hint nor makes
    /// every histogram due at once.
    pub fn carry_over(&mut self, old: &TrackedKey) {
        if old.key == self.key && old.spec == self.spec && old.state == self.state {
            self.histogram = old.histogram.clone();
            self.peek_paused_until = old.peek_paused_until;
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
