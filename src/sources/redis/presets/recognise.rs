//! How zero config recognises a queue library from the keys it finds in
//! Redis: the optional [`Recognise`] trait, apart from `Library` (its
//! layout and reads). A library zero config recognises implements it and
//! answers `Some(self)` from `Library::recognition`; one it does not
//! (a layout zero config cannot tell from an app's own keys) implements
//! nothing of it.
//! Zero config's stages (`zero/`) ask the libraries how to recognise them
//! only through it; what a key of a library left unread hides (withheld
//! keys, hidden names) is the library's layout, asked of every library
//! (`Library::withheld`, `Library::hidden`).
//!
//! The words used here are those of the glossary in `library.rs`'s module
//! doc (mark, [`Seen`], evidence, beside, told, claimed).

use std::collections::{BTreeMap, BTreeSet};

use redis::Value;

use super::super::discovery::Candidate;
use super::bounded::Bound;
use super::spec::Preset;
use super::unit::Unit;
use crate::snapshot::Reason;

/// How zero config recognises one queue library: the names its marks may
/// have and how each is read, which keys' types it looks at (evidence),
/// and the entries the marks and keys show. Every method has a default that fits a library without
/// that kind of mark; all are pure but for the commands they hand out.
pub trait Recognise: Sync {
    /// Zero config: sets this library writes under a fixed name (its
    /// registry at the default prefix), read by every library round
    /// whether the last scan saw them or not.
    fn fixed_marks(&self) -> &'static [&'static [u8]] {
        &[]
    }

    /// Zero config: whether a library round (no keyspace scan) lists this
    /// library's queues again by reading its registry (one found by a
    /// `SCAN` of one pattern); otherwise the round keeps the queues the
    /// last scan found, or those of the registry sets it reads.
    fn relisted_each_round(&self) -> bool {
        false
    }

    /// Zero config: how to read `key`, a name the scan found, if it is
    /// named like one of this library's marks (a registry set, a `meta`
    /// hash...). Marks are read in one round trip; what they hold is the
    /// [`Seen`] that [`Recognise::recognise`] reads.
    fn mark_read(&self, key: &[u8]) -> Option<MarkRead> {
        let _ = key;
        None
    }

    /// Zero config: marks found beside the typed keys (`keys`) rather than
    /// by name (an `id` string beside lists named like the library's), at
    /// most `limit`, so a keyspace of such names costs a bounded number of
    /// reads. Read by [`Recognise::beside_read`].
    fn marks_beside(&self, keys: &Keys, limit: usize) -> Vec<Vec<u8>> {
        let _ = (keys, limit);
        Vec::new()
    }

    /// The read of a mark [`Recognise::marks_beside`] gives, by its name
    /// (a library round reads again the ones a scan left unread).
    fn beside_read(&self, key: &[u8]) -> Option<redis::Cmd> {
        let _ = key;
        None
    }

    /// Whether a mark of [`Recognise::marks_beside`] not read for a bound
    /// may still tell something (`false`: what it could say is already
    /// known from `seen`, or unknown for another unread mark).
    fn beside_tells(&self, key: &[u8], seen: &Seen) -> bool {
        let _ = (key, seen);
        true
    }

    /// Zero config with `plain_keys: false` (no key is typed unless asked):
    /// whether the scan keeps `key` as possible evidence, whose type
    /// [`Recognise::evidence`] may then ask.
    fn is_evidence(&self, key: &[u8]) -> bool {
        let _ = key;
        false
    }

    /// Of the evidence `names` kept, those whose type this library's
    /// recognition looks at given the marks `seen` (pure), and any other
    /// key it looks at beside its registries. `told`: the registry sets an
    /// earlier library (in [`Recognise::claim_rank`] order) has told are its
    /// own; add those this library tells.
    fn evidence(
        &self,
        seen: &Seen,
        names: &[Vec<u8>],
        told: &mut BTreeSet<Vec<u8>>,
    ) -> Vec<Vec<u8>> {
        let _ = (seen, names, told);
        Vec::new()
    }

    /// Where this library's recognition comes among the libraries sharing
    /// a mark (lower first): a library whose registry is told by its
    /// members or prefix claims a set before one told by other keys.
    fn claim_rank(&self) -> u8 {
        0
    }

    /// Zero config: the entries the marks `seen` and the keys found
    /// (`keys`: lists, zsets and streams with their type) show, each with
    /// its units, sorted (pure). `claimed`: the marks an earlier library
    /// took (skip them); add those taken here.
    fn recognise(
        &self,
        seen: &Seen,
        keys: &Keys,
        claimed: &mut BTreeSet<Vec<u8>>,
    ) -> Vec<(Preset, Vec<Unit>)> {
        let _ = (seen, keys, claimed);
        Vec::new()
    }

    /// A set this library marks whatever entry came from it (a table of
    /// bindings: its work queues), as library rounds compare it: `Some`
    /// of the members they compare, sorted; `None` for the others.
    fn set_view(&self, set: &[u8], members: &[Vec<u8>]) -> Option<Vec<Vec<u8>>> {
        let _ = (set, members);
        None
    }
}

/// How zero config reads a key named like a library's mark.
#[derive(Debug, Clone)]
pub enum MarkRead {
    /// A set: its members, by a bounded `SSCAN` (a registry, a table of
    /// bindings).
    Set,
    /// One read-only command, pipelined with the other marks' (a `meta`
    /// hash's fields).
    Cmd(redis::Cmd),
    /// A `TYPE` of a key the library keeps under a fixed name beside its
    /// registry: not counted against `max_keys`, and a refused one tells
    /// nothing rather than leaving anything unknown.
    Sign(redis::Cmd),
}

/// What zero config's reads of the marks found, by mark name: what each
/// library's [`Recognise::recognise`] reads.
#[derive(Debug, Default)]
pub struct Seen {
    /// Sets with their members.
    pub(super) sets: BTreeMap<Vec<u8>, Vec<Vec<u8>>>,
    /// The other marks' replies Redis answered (a key of another type
    /// answers `WRONGTYPE`, which marks nothing).
    pub(super) replies: BTreeMap<Vec<u8>, Value>,
    /// Marks whose read Redis refused or failed (`NOPERM`...), with why:
    /// whose keys those beside them are is unknown.
    pub(super) unread: BTreeMap<Vec<u8>, Reason>,
    /// Marks not read for a bound of discovery's work (beyond `max_keys`,
    /// a set over the cap): unknown as the `unread` ones are, but counted
    /// as dropped keys, not as errors.
    pub(super) bounded: BTreeMap<Vec<u8>, Bound>,
}

impl Seen {
    /// The sets read, with their members.
    pub fn sets(&self) -> impl Iterator<Item = (&Vec<u8>, &Vec<Vec<u8>>)> {
        self.sets.iter()
    }

    /// The replies to the marks' commands Redis answered.
    pub fn replies(&self) -> impl Iterator<Item = (&Vec<u8>, &Value)> {
        self.replies.iter()
    }

    /// The reply to mark `name`'s command, if Redis answered it.
    pub fn reply(&self, name: &[u8]) -> Option<&Value> {
        self.replies.get(name)
    }

    /// Whether `mark` went unread (refused, or for a bound).
    pub fn not_read(&self, mark: &[u8]) -> bool {
        self.unread.contains_key(mark) || self.bounded.contains_key(mark)
    }
}

/// The keys discovery found, with their types, by name.
pub type Keys = BTreeMap<Vec<u8>, Candidate>;

/// The type discovery found for `k`, if it found the key.
pub fn type_at(keys: &Keys, k: &[u8]) -> Option<crate::config::KeyType> {
    match keys.get(k).map(|c| &c.state) {
        Some(super::super::tracked::KeyState::Typed(t)) => Some(*t),
        _ => None,
    }
}

/// Keys found that start with `prefix`.
pub fn under<'a>(keys: &'a Keys, prefix: &'a [u8]) -> impl Iterator<Item = &'a Vec<u8>> + 'a {
    keys.range(prefix.to_vec()..)
        .map(|(k, _)| k)
        .take_while(move |k| k.starts_with(prefix))
}

/// The prefix of a set named like a registry of queue names, the shape
/// several libraries share: `""` for `queues`, `<p>` for `<p>:queues`.
pub fn registry_prefix(k: &[u8]) -> Option<&[u8]> {
    if k == b"queues" {
        return Some(b"");
    }
    k.strip_suffix(b":queues").filter(|p| !p.is_empty())
}
