//! The keys a Redis source polls, and what it has learned about each one.

use super::histogram::HistogramState;
use crate::config::KeyType;
use crate::snapshot::Reason;

/// What a tracked key is, as last learned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyState {
    /// A queue type we can measure.
    Typed(KeyType),
    /// The key does not exist (exact keys only; reported as depth 0).
    Missing,
    /// The key exists with a type we cannot measure (e.g. `string`).
    Unsupported(String),
    /// Redis refused to say (`TYPE` answered an error, such as `NOPERM`
    /// from an ACL without `TYPE` or whose key patterns miss the key): the
    /// type is unknown, so the key's values are unknown (absent, counted
    /// under this reason), never a missing, empty queue. It is asked again
    /// with `TYPE` on every poll.
    Unknown(Reason),
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
    /// larger than `MAX_PEEK_BYTES` (see there).
    pub peek_paused_until: f64,
    /// What the last read found, while Redis has reported no change to the
    /// key since (`CLIENT TRACKING`, see `tracking`): the poll serves it
    /// from here and sends no command for it.
    pub unchanged: Option<Unchanged>,
    /// Unix seconds at which a kept key is read again all the same (see
    /// [`TrackedKey::kept`]); 0 before the first read that kept anything.
    pub verify_at: f64,
}

/// What a key's last read found that stays true until the key is written,
/// deleted or expires: only Redis's invalidation message ends it. Values
/// that change with time alone (a zset with scheduled items, whose items
/// fall due; a paused age peek) are never kept.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Unchanged {
    /// A configured key that does not exist.
    Missing,
    /// A list: its length and what its age peek found.
    List {
        /// `LLEN`.
        len: u64,
        /// The peeked item.
        head: Head,
    },
    /// A timestamp zset with nothing scheduled.
    DueZset {
        /// `ZCARD`.
        card: u64,
        /// The oldest item's score; `None` when the zset is empty.
        oldest: Option<f64>,
    },
    /// A size only a write changes (`ZCARD` of a plain zset, `HLEN`, `SCARD`).
    Size(u64),
}

/// What a list's age peek found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Head {
    /// The list's spec has no `age`: nothing was peeked.
    NotPeeked,
    /// The list is empty: nothing waits.
    Empty,
    /// The item's timestamp, in Unix seconds.
    At(f64),
    /// The item's timestamp could not be read (counted on every poll).
    Unreadable,
}

/// A list's head item is read whole (LINDEX has no byte range). One larger
/// than this is not parsed, and the key's age peeks pause for
/// [`PEEK_PAUSE_SECS`], counted as unreadable ages: an 8 MiB item then
/// costs one read a minute instead of one per poll.
pub const MAX_PEEK_BYTES: usize = 1 << 20;

/// How long the age peek of a key with an oversized head item pauses.
pub const PEEK_PAUSE_SECS: f64 = 60.0;

impl TrackedKey {
    /// What may be served at `now_secs` without reading the key. A kept key
    /// is read again once per `discovery_interval` all the same (spread over
    /// polls by a hash of its name): a change Redis never reports (Redis 7.0
    /// sends no invalidation for `SWAPDB`) is then stale for at most that
    /// long, as a new key is unseen until discovery.
    pub fn kept(&self, now_secs: f64) -> Option<Unchanged> {
        self.unchanged.filter(|_| now_secs < self.verify_at)
    }

    /// Records what a read at `now_secs` found (`None`: nothing to keep),
    /// and when a kept key is read again next.
    pub fn keep(&mut self, found: Option<Unchanged>, fresh: bool, now_secs: f64, every: f64) {
        self.unchanged = found;
        if found.is_some() && fresh {
            let share = if self.verify_at == 0.0 {
                super::histogram::phase(&self.key)
            } else {
                1.0
            };
            self.verify_at = now_secs + every * share;
        }
    }

    /// Keeps what polls learned about `old`, the same key before this
    /// discovery round, so rediscovery neither forgets the age hint, makes
    /// every histogram due at once, nor re-reads keys Redis says are unchanged.
    pub fn carry_over(&mut self, old: &TrackedKey) {
        if old.key == self.key && old.spec == self.spec && old.state == self.state {
            self.histogram = old.histogram.clone();
            self.peek_paused_until = old.peek_paused_until;
            self.unchanged = old.unchanged;
            self.verify_at = old.verify_at;
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
