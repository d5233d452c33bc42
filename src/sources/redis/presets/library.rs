//! What the generic preset code knows of a queue library: the [`Library`]
//! trait, and lookups in the one list of libraries (`presets::LIBRARIES`,
//! in the folder's `mod.rs`). Everything else about a library (its keys,
//! states, marks, reads) is in its own file; adding one is that file plus
//! one line in that list (ARCHITECTURE.md, "Adding a queue library").

use std::collections::{BTreeMap, BTreeSet};

use redis::Value;

use super::super::discovery::Candidate;
use super::bounded::Bound;
pub use super::options::{
    OptionError, Written, options_of, prefix_or, stalled_check_limit, timeout,
};
use super::service::FinishedLayout;
pub use super::spec::Preset;
use super::{Stage, Unit};
pub use crate::snapshot::Arrivals;
use crate::snapshot::{Libraries, LibraryFacts, PresetKind, QueueSample, Reason};

/// The library whose config name is `name`.
pub fn named(name: &str) -> Option<&'static dyn Library> {
    super::LIBRARIES
        .iter()
        .copied()
        .find(|l| l.kind().as_str() == name)
}

/// Every library, in the list's order (`presets::LIBRARIES`, the one
/// registration list).
pub fn all() -> &'static [&'static dyn Library] {
    super::LIBRARIES
}

/// The library of `preset`'s entry: a `Preset` is only made by resolving
/// an entry or by recognition, from a library of the list; the first
/// library stands in for none.
pub fn of_preset(preset: &Preset) -> &'static dyn Library {
    of(preset.kind).unwrap_or(super::LIBRARIES[0])
}

/// The library of `kind`.
pub fn of(kind: PresetKind) -> Option<&'static dyn Library> {
    super::LIBRARIES.iter().copied().find(|l| l.kind() == kind)
}

/// Every library's config name, in the list's order (for messages).
pub fn names() -> Vec<&'static str> {
    super::LIBRARIES.iter().map(|l| l.kind().as_str()).collect()
}

/// The options `discover` prints for `preset` beyond its prefix
/// (`Library::printed_options`).
pub fn printed_options(preset: &Preset, quote: fn(&str) -> String) -> Vec<String> {
    of(preset.kind).map_or_else(Vec::new, |l| l.printed_options(preset, quote))
}

/// The library's own key prefix: what `prefix:` defaults to.
pub fn default_prefix(kind: PresetKind) -> &'static str {
    of(kind).map_or("", |l| l.default_prefix())
}

/// The logical queue names `preset` reports whatever its registry holds
/// (for the scaler's drained-queue rule); registry-discovered queues are
/// not listed.
pub fn fixed_names(preset: &Preset) -> Vec<String> {
    of(preset.kind).map_or_else(Vec::new, |l| l.fixed_names(preset))
}

/// Whether `kind`'s library takes a `prefix:` option (Huey and arq fix
/// their keys' names: no prefix to speak of).
pub fn has_prefix(kind: PresetKind) -> bool {
    of(kind).is_some_and(|l| l.options().contains(&"prefix"))
}

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

/// What an unread `<p>:queues` registry (RQ's, asynq's; not a bare
/// `queues`) may own: every key under `<p>:`.
pub fn under_prefixed_registry(mark: &[u8], keys: &Keys) -> Vec<Vec<u8>> {
    match registry_prefix(mark).filter(|p| !p.is_empty()) {
        Some(p) => under(keys, &[p, b":"].concat()).cloned().collect(),
        None => Vec::new(),
    }
}

/// An unread `<p>:queues` registry names its queues: it may hide any name.
pub fn prefixed_registry_hides(mark: &[u8]) -> Option<Hidden> {
    registry_prefix(mark)
        .filter(|p| !p.is_empty())
        .map(|_| Hidden::Any)
}

/// The names users write of the libraries zero config recognises
/// (`Library::zero_config`), in the list's order (for the log line of a
/// default source).
pub fn recognised_libraries() -> Vec<&'static str> {
    super::LIBRARIES
        .iter()
        .filter(|l| l.zero_config())
        .map(|l| l.title())
        .collect()
}

/// What readers know of every library (its names, where its arrivals
/// come from), in the list's order: it travels with every snapshot.
pub fn catalogue() -> Libraries {
    Libraries::new(
        super::LIBRARIES
            .iter()
            .map(|l| LibraryFacts {
                kind: l.kind(),
                title: l.title(),
                arrivals: l.arrivals(),
            })
            .collect(),
    )
}

/// `kind`'s place in the list of libraries (unknown kinds last): the order
/// entries and log lines list libraries in.
pub fn rank(kind: PresetKind) -> usize {
    super::LIBRARIES
        .iter()
        .position(|l| l.kind() == kind)
        .unwrap_or(super::LIBRARIES.len())
}

/// Where a library lists its queues, read at each discovery round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registry {
    /// None: its queues are the entry's fixed ones ([`Library::fixed_queues`]).
    Fixed,
    /// A set whose members name the queues ([`Library::registry_units`]).
    Set(Vec<u8>),
    /// Keys found by a `SCAN` (bounded `COUNT`) of a glob, each naming one
    /// queue ([`Library::queue_of_key`]); where the library has a
    /// [`Library::queue_mark`], only the queues whose mark it takes.
    Scan {
        /// The glob (its prefix escaped).
        pattern: Vec<u8>,
        /// The type the keys must have (`SCAN ... TYPE`), if one.
        key_type: Option<crate::config::KeyType>,
    },
}

/// The key that tells whose a queue is where two libraries share a layout
/// (a `meta` hash's fields), and the read-only command asking it.
#[derive(Debug, Clone)]
pub struct Mark {
    /// The key read: what the coverage names when the read is refused or
    /// left out for a bound.
    pub key: Vec<u8>,
    /// The command reading it.
    pub cmd: redis::Cmd,
}

/// A library's key beyond those its plan reads, that is its all the same:
/// never reported as a plain key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owned {
    /// This key.
    Key(Vec<u8>),
    /// Every key starting with this.
    Under(Vec<u8>),
}

/// The keys discovery found, with their types, by name.
pub type Keys = BTreeMap<Vec<u8>, Candidate>;

/// One queue library: what the generic preset code asks of it. Every
/// method but the identity, the plan and the read has a default that fits
/// a library without that feature. `preset` is always an entry of this
/// library (its [`Preset::kind`] is [`Library::kind`]).
pub trait Library: Sync {
    /// The config name (`preset: rq`), also the `preset` label.
    fn kind(&self) -> PresetKind;

    /// The library's name as its users write it (`RQ`), for the log line
    /// of what zero config sees.
    fn title(&self) -> &'static str;

    /// The options its entry takes, in the order the message refusing
    /// another lists them: its options struct's fields
    /// ([`options_of`]), declared once in its file.
    fn options(&self) -> &'static [&'static str];

    /// Its preset from the options an entry `written` beside `preset:`:
    /// read as its own options struct ([`Written::read`], which refuses a
    /// word it does not take), each checked and defaulted; `Err` names
    /// the field and the problem.
    fn configure(&self, written: &Written) -> Result<Preset, OptionError>;

    /// The library's own key prefix: what `prefix:` defaults to (`""`:
    /// none, or one that may be empty).
    fn default_prefix(&self) -> &'static str {
        ""
    }

    /// Whether its entry is one logical queue known at load, so its
    /// `counters:` may name keys outright; every other entry's keys are
    /// templates naming `{queue}`, read once per queue.
    fn takes_counters(&self) -> bool {
        false
    }

    /// The options of `preset` `discover` prints beyond `prefix` (which
    /// it prints itself): each a YAML line `option: value`, strings
    /// written by `quote`.
    fn printed_options(&self, preset: &Preset, quote: fn(&str) -> String) -> Vec<String> {
        let _ = (preset, quote);
        Vec::new()
    }

    /// Where the entry's queues are listed.
    fn registry(&self, preset: &Preset) -> Registry {
        let _ = preset;
        Registry::Fixed
    }

    /// Whether the entry's registry may name any queue (the scaler cannot
    /// tell a name it does not report from one not there yet): a registry
    /// that lists queues, as opposed to fixed ones or the priorities of
    /// one queue named by the entry.
    fn names_any_queue(&self, preset: &Preset) -> bool {
        match self.registry(preset) {
            Registry::Fixed => false,
            Registry::Set(_) => true,
            Registry::Scan { .. } => self.fixed_names(preset).is_empty(),
        }
    }

    /// The queues (and shared unit) an entry reports whatever a registry
    /// holds, sorted.
    fn fixed_queues(&self, preset: &Preset) -> Vec<Unit> {
        let _ = preset;
        Vec::new()
    }

    /// Their `queue` labels, for the scaler's drained-queue rule.
    fn fixed_names(&self, preset: &Preset) -> Vec<String> {
        let _ = preset;
        Vec::new()
    }

    /// A [`Registry::Set`]'s members as the entry's units, sorted.
    fn registry_units(&self, preset: &Preset, members: Vec<Vec<u8>>) -> Vec<Unit> {
        let _ = preset;
        super::sorted(members.into_iter().map(Unit::Queue).collect())
    }

    /// The queue a key a [`Registry::Scan`] found names, if any.
    fn queue_of_key(&self, preset: &Preset, key: &[u8]) -> Option<Vec<u8>> {
        let _ = (preset, key);
        None
    }

    /// The mark of `queue` ([`Mark`]), for a library that shares its
    /// layout with another; `None` for the others (`queue` may be empty:
    /// asked only whether the library has marks).
    fn queue_mark(&self, preset: &Preset, queue: &[u8]) -> Option<Mark> {
        let _ = (preset, queue);
        None
    }

    /// Whether a reply to a [`Mark`]'s command makes the queue this
    /// library's; `Err` when Redis refused the read (whose it is is then
    /// unknown).
    fn takes_marked(&self, reply: &Value) -> Result<bool, Reason> {
        let _ = reply;
        Ok(true)
    }

    /// The keys of `units` the plan does not read that are the library's
    /// all the same (job hashes, event streams...).
    fn owned(&self, preset: &Preset, units: &[Unit]) -> Vec<Owned> {
        let _ = (preset, units);
        Vec::new()
    }

    /// Round 1: the read-only commands of one unit.
    fn plan(&self, preset: &Preset, unit: &Unit, now: f64) -> Vec<redis::Cmd>;

    /// Reads [`Library::plan`]'s replies (pure): the sample, and the
    /// round-2 follow-ups it needs.
    fn read(&self, preset: &Preset, unit: &Unit, replies: &[Value], now: f64) -> Stage;

    /// Round 2 read together (pure): the replies to the `Follow::Own`
    /// commands of `sample`'s stage, in order, once round 2 is in; for a
    /// library whose follow-ups mean something only side by side.
    fn settle(&self, preset: &Preset, sample: &mut QueueSample, replies: &[Value], now: f64) {
        let _ = (preset, sample, replies, now);
    }

    /// Where `queue` keeps finished jobs with start and end stamps, if the
    /// library keeps them: its service time is then measured.
    fn finished(&self, preset: &Preset, queue: &[u8]) -> Option<FinishedLayout> {
        let _ = (preset, queue);
        None
    }

    /// What a measured queue's missing service time means, for KEDA's
    /// message (`PresetFacts::finished_jobs`); only asked when
    /// [`Library::finished`] gives a layout.
    fn unmeasured_why(&self) -> &'static str {
        "no job kept that finished within the source's service_time_max_age"
    }

    /// Where the arrivals of its queues come from (for WaitTime's
    /// arrival rate, and the message saying what is missing without one).
    fn arrivals(&self) -> Arrivals {
        Arrivals::Unknown
    }

    /// Whether zero config recognises this library (its `recognise` finds
    /// entries): named in the log line of a default source.
    fn zero_config(&self) -> bool {
        false
    }

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
    /// [`Seen`] that [`Library::recognise`] reads.
    fn mark_read(&self, key: &[u8]) -> Option<MarkRead> {
        let _ = key;
        None
    }

    /// Zero config: marks found beside the typed keys (`keys`) rather than
    /// by name (an `id` string beside lists named like the library's), at
    /// most `limit`, so a keyspace of such names costs a bounded number of
    /// reads. Read by [`Library::beside_read`].
    fn marks_beside(&self, keys: &Keys, limit: usize) -> Vec<Vec<u8>> {
        let _ = (keys, limit);
        Vec::new()
    }

    /// The read of a mark [`Library::marks_beside`] gives, by its name
    /// (a library round reads again the ones a scan left unread).
    fn beside_read(&self, key: &[u8]) -> Option<redis::Cmd> {
        let _ = key;
        None
    }

    /// Whether a mark of [`Library::marks_beside`] not read for a bound
    /// may still tell something (`false`: what it could say is already
    /// known from `seen`, or unknown for another unread mark).
    fn beside_tells(&self, key: &[u8], seen: &Seen) -> bool {
        let _ = (key, seen);
        true
    }

    /// Zero config with `plain_keys: false` (no key is typed unless asked):
    /// whether the scan keeps `key` as possible evidence, whose type
    /// [`Library::evidence`] may then ask.
    fn is_evidence(&self, key: &[u8]) -> bool {
        let _ = key;
        false
    }

    /// Of the evidence `names` kept, those whose type this library's
    /// recognition looks at given the marks `seen` (pure), and any other
    /// key it looks at beside its registries. `told`: the registry sets an
    /// earlier library (in [`Library::claim_rank`] order) has told are its
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

    /// The keys found that an unread `mark` of this library (refused, or
    /// not read for a bound) may own: whose they are is unknown, so they
    /// are reported neither as this library's nor as plain (pure).
    fn withheld(&self, mark: &[u8], keys: &Keys) -> Vec<Vec<u8>> {
        let _ = (mark, keys);
        Vec::new()
    }

    /// Which queue names an unread `mark` of this library may hide from
    /// the scaler; `None` when it is not one of this library's marks.
    fn hidden(&self, mark: &[u8]) -> Option<Hidden> {
        let _ = mark;
        None
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

/// The names an unread mark may hide from the scaler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hidden {
    /// Any name: the mark lists queues (a registry).
    Any,
    /// Any name at all, refused or not read for a bound alike: the mark's
    /// library may keep a queue's jobs in keys no scan types (hashes), so
    /// its keys found do not tell its queue names.
    Every,
    /// These `queue` labels (a queue's own mark).
    Names(Vec<String>),
    /// None: its queues are keys held back by name.
    Nothing,
}

/// What zero config's reads of the marks found, by mark name: what each
/// library's [`Library::recognise`] reads.
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
