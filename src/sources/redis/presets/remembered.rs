//! What earlier zero-config rounds learnt about the keyspace, so that a
//! round asks `TYPE` of the few names it has not seen instead of all
//! (docs/presets.md, "What does zero config cost Redis?").
//!
//! A round must tell the list, zset and stream keys among all names. A
//! full round makes one untyped SCAN pass and asks `TYPE` of every name,
//! which costs Redis about a second pass (one typed SCAN pass per type
//! would cost three). It remembers which names were of no queue type
//! (strings, hashes, sets...): the next round makes the untyped pass
//! alone, skips the names it remembers, and asks `TYPE` of the rest: the
//! names it has not seen, and the queue keys (a queue key may have become
//! something else since).
//!
//! Names are held as 64-bit keyed hashes in a sorted vector: 8 bytes per
//! name, 8 MB at a million keys, not the names themselves. A lookup reads
//! where the hashes sharing its top bits start ([`Index`], about one slot
//! per 16 hashes) and searches those few, rather than binary-searching the
//! whole vector: about 20 probes across 8 MB, most of them cache misses,
//! for each of a million names a round, on the cores Redis runs on.
//!
//! What this could miss, and why it stays bounded: a remembered name that
//! becomes a queue key without being absent from a round in between
//! (deleted and re-created as a list within one `discovery_interval`), or
//! a new name whose hash equals a remembered one (about 1 in 10¹³ at a
//! million keys). So a round is a full one again (`TYPE` of every name,
//! remembering afresh) once [`REFRESH`] has passed. Where Redis refuses
//! `TYPE` (an ACL without it), every round is a full one by typed passes,
//! which need only SCAN.

use std::hash::BuildHasher;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a full round's knowledge is trusted before a round asks
/// `TYPE` of every name again.
pub const REFRESH: Duration = Duration::from_secs(600);

/// The names of no queue type that the last rounds saw.
#[derive(Debug)]
pub struct Remembered {
    /// Keyed per process, so names cannot be chosen to collide.
    hasher: std::hash::RandomState,
    /// Hashes of the names, sorted, without repeats.
    others: Vec<u64>,
    /// Where each run of `others` sharing its top bits starts.
    index: Index,
    /// When the last full round ran.
    full_at: Instant,
    /// Redis refused `TYPE` (`NOPERM`): every round is a full one by typed
    /// passes, which need only `SCAN`.
    type_refused: bool,
}

impl Remembered {
    /// Whether a round may rely on this knowledge instead of the typed
    /// passes, at `now`.
    pub fn fresh(&self, now: Instant) -> bool {
        !self.type_refused && now.saturating_duration_since(self.full_at) < REFRESH
    }

    /// Whether Redis refused `TYPE`, so every round makes the typed passes.
    pub fn type_refused(&self) -> bool {
        self.type_refused
    }

    /// The hash a name is remembered by.
    pub fn hash(&self, name: &[u8]) -> u64 {
        self.hasher.hash_one(name)
    }

    /// Whether the name with this hash was of no queue type at the last
    /// round.
    pub fn holds(&self, hash: u64) -> bool {
        self.index
            .run(&self.others, hash)
            .binary_search(&hash)
            .is_ok()
    }

    /// Whether `name` was of no queue type at the last round.
    #[cfg(test)]
    pub fn is_other(&self, name: &[u8]) -> bool {
        self.holds(self.hash(name))
    }

    /// Starts what a full round learns, from scratch (a new hash key).
    /// `type_refused`: Redis refused `TYPE`, so no steady round follows.
    pub fn full(type_refused: bool) -> Learner {
        Learner {
            hasher: std::hash::RandomState::new(),
            full_at: None,
            type_refused,
            others: Mutex::new(Vec::new()),
        }
    }

    /// Starts what a steady round learns, following this knowledge (same
    /// hash key, same full round's age).
    pub fn steady(&self) -> Learner {
        Learner {
            hasher: self.hasher.clone(),
            full_at: Some(self.full_at),
            type_refused: self.type_refused,
            others: Mutex::new(Vec::with_capacity(self.others.len())),
        }
    }
}

/// What a round is learning: the hashes of the names it saw of no queue
/// type. Shared by the SCAN of every node (a cluster scans them at once).
#[derive(Debug)]
pub struct Learner {
    /// The same key as the knowledge it follows, so hashes carry over.
    hasher: std::hash::RandomState,
    /// `None` for a full round (its time is when it finishes).
    full_at: Option<Instant>,
    /// Carried over: see [`Remembered`].
    type_refused: bool,
    /// Hashes of the names of no queue type seen so far.
    others: Mutex<Vec<u64>>,
}

impl Learner {
    /// The hash a name is remembered by.
    pub fn hash(&self, name: &[u8]) -> u64 {
        self.hasher.hash_one(name)
    }

    /// Notes that the name with this hash is of no queue type.
    pub fn other(&self, hash: u64) {
        // A panic elsewhere while holding the lock leaves the vector whole
        // (a push either happened or not), so a poisoned lock is used as is.
        match self.others.lock() {
            Ok(mut v) => v.push(hash),
            Err(poisoned) => poisoned.into_inner().push(hash),
        }
    }

    /// Notes the names with these hashes as of no queue type.
    pub fn hashes(&self, hashes: &[u64]) {
        match self.others.lock() {
            Ok(mut v) => v.extend_from_slice(hashes),
            Err(poisoned) => poisoned.into_inner().extend_from_slice(hashes),
        }
    }

    /// Notes a batch of names of no queue type.
    pub fn others<'a>(&self, names: impl IntoIterator<Item = &'a [u8]>) {
        let hashes: Vec<u64> = names.into_iter().map(|n| self.hash(n)).collect();
        match self.others.lock() {
            Ok(mut v) => v.extend(hashes),
            Err(poisoned) => poisoned.into_inner().extend(hashes),
        }
    }

    /// What the round learnt, leaving out `queues` (names it found of a
    /// queue type, which a full round's untyped pass also noted).
    pub fn finish<'a>(self, queues: impl IntoIterator<Item = &'a [u8]>) -> Remembered {
        let mut others = match self.others.into_inner() {
            Ok(v) => v,
            Err(poisoned) => poisoned.into_inner(),
        };
        others.sort_unstable();
        others.dedup();
        let mut queues: Vec<u64> = queues
            .into_iter()
            .map(|n| self.hasher.hash_one(n))
            .collect();
        queues.sort_unstable();
        if !queues.is_empty() {
            others.retain(|h| queues.binary_search(h).is_err());
        }
        Remembered {
            hasher: self.hasher,
            index: Index::of(&others),
            others,
            full_at: self.full_at.unwrap_or_else(Instant::now),
            type_refused: self.type_refused,
        }
    }
}

/// Where the runs of a sorted vector of hashes that share their top bits
/// start: `starts[b]..starts[b + 1]` holds the hashes whose top bits are
/// `b`. About one slot per 16 hashes (512 KB at a million names), so a run
/// spans a cache line or two.
#[derive(Debug)]
struct Index {
    /// How far a hash is shifted right to give its run: 64 minus the bits.
    shift: u32,
    /// One more than the runs: the last is the vector's length.
    starts: Vec<usize>,
}

impl Index {
    /// Runs of at most about 16 hashes, up to 2^20 runs.
    fn of(sorted: &[u64]) -> Index {
        let bits = (usize::BITS - (sorted.len() / 16).leading_zeros()).min(20);
        let shift = 64 - bits;
        let runs = 1usize << bits;
        let mut starts = Vec::with_capacity(runs + 1);
        let mut at = 0;
        for run in 0..runs {
            while at < sorted.len() && Index::bucket(sorted[at], shift) < run {
                at += 1;
            }
            starts.push(at);
        }
        starts.push(sorted.len());
        Index { shift, starts }
    }

    /// The run `hash` falls in (0 when there is one run: a shift by 64).
    fn bucket(hash: u64, shift: u32) -> usize {
        // At most 20 bits remain: the cast keeps them all.
        hash.checked_shr(shift).unwrap_or(0) as usize
    }

    /// The hashes of `sorted` (the vector this index was built over) that
    /// share `hash`'s run.
    fn run<'a>(&self, sorted: &'a [u64], hash: u64) -> &'a [u64] {
        let b = Index::bucket(hash, self.shift);
        match (self.starts.get(b), self.starts.get(b + 1)) {
            (Some(&from), Some(&to)) => sorted.get(from..to).unwrap_or(&[]),
            _ => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full_round(others: &[&str], queues: &[&str]) -> Remembered {
        let l = Remembered::full(false);
        for n in others.iter().chain(queues) {
            l.other(l.hash(n.as_bytes()));
        }
        l.finish(queues.iter().map(|q| q.as_bytes()))
    }

    #[test]
    fn a_full_round_remembers_the_names_it_saw_that_are_no_queue() {
        let r = full_round(&["cache:1", "cache:2"], &["jobs"]);
        assert!(r.is_other(b"cache:1"));
        assert!(r.is_other(b"cache:2"));
        assert!(!r.is_other(b"jobs"), "a queue key is asked TYPE again");
        assert!(!r.is_other(b"new"), "a name not seen is asked TYPE");
    }

    #[test]
    fn a_steady_round_keeps_the_hasher_and_the_full_rounds_age() {
        let first = full_round(&["cache:1", "gone"], &[]);
        let l = first.steady();
        // Seen again and remembered, plus a new name TYPE said is a string.
        l.other(l.hash(b"cache:1"));
        l.others([b"cache:9".as_slice()]);
        let next = l.finish(std::iter::empty());
        assert!(next.is_other(b"cache:1"));
        assert!(next.is_other(b"cache:9"));
        assert!(
            !next.is_other(b"gone"),
            "a name not seen again is forgotten"
        );
        assert_eq!(next.full_at, first.full_at);
    }

    #[test]
    fn the_index_finds_every_hash_held_and_none_other() {
        for n in [0usize, 1, 15, 16, 17, 1000, 100_000] {
            let l = Remembered::full(false);
            let held: Vec<u64> = (0..n as u64).map(|i| l.hash(&i.to_le_bytes())).collect();
            l.hashes(&held);
            // The extremes of the hash space too.
            l.hashes(&[0, u64::MAX]);
            let r = l.finish(std::iter::empty());
            assert!(held.iter().all(|h| r.holds(*h)), "{n}");
            assert!(r.holds(0) && r.holds(u64::MAX), "{n}");
            let absent = (n as u64..n as u64 + 1000).map(|i| r.hash(&i.to_le_bytes()));
            assert_eq!(absent.filter(|h| r.holds(*h)).count(), 0, "{n}");
        }
    }

    #[test]
    fn knowledge_is_fresh_until_the_refresh_interval() {
        let r = full_round(&[], &[]);
        assert!(r.fresh(r.full_at));
        assert!(r.fresh(r.full_at + REFRESH - Duration::from_secs(1)));
        assert!(!r.fresh(r.full_at + REFRESH));
    }

    #[test]
    fn after_a_refused_type_no_round_relies_on_it() {
        let l = Remembered::full(true);
        let r = l.finish(std::iter::empty());
        assert!(!r.fresh(r.full_at));
        assert!(!r.steady().finish(std::iter::empty()).fresh(r.full_at));
    }
}
