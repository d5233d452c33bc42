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
//! name, 8 MB at a million keys, not the names themselves.
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
        self.others.binary_search(&hash).is_ok()
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
            others,
            full_at: self.full_at.unwrap_or_else(Instant::now),
            type_refused: self.type_refused,
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
