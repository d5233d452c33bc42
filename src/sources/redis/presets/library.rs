//! The library API: what the generic preset code knows of a queue library.
//! A library's file implements [`Library`] (its layout and reads, and what
//! a refused read of its keys hides) and, if
//! zero config should recognise it, [`Recognise`] (`recognise.rs`); it
//! imports only from this module, which also holds the lookups in the one
//! list of libraries (`presets::LIBRARIES`, in the folder's `mod.rs`).
//! Adding a library is that file plus one line in that list
//! (ARCHITECTURE.md, "Adding a queue library").
//!
//! # Glossary
//!
//! - **entry**: one `- preset: <library>` item of a Redis source's
//!   `queues:`, resolved into a [`Preset`] (the library and its options);
//!   zero config makes entries of its own from what it recognises.
//! - **unit**: what one sample of an entry stands for ([`Unit`]): a
//!   logical queue, or the keys all its queues share (reported as `(all)`).
//! - **registry**: where a library lists its queues ([`Registry`]): a set
//!   of names, keys found by a `SCAN`, or none (fixed queues).
//! - **owned** keys: a library's keys its plan does not read (job hashes,
//!   event streams), never reported as plain keys ([`Owned`]).
//! - **plan**, **read**, **stage**: round 1 of a poll sends each unit's
//!   plan (read-only commands); the library's pure read of their replies
//!   gives a stage ([`Stage`]): the sample so far, and the round-2
//!   **follow-ups** ([`Follow`]) it asks for (the oldest job's stamp, a
//!   stalled check...). **settle**: round 2's replies a library reads
//!   together.
//! - **state**: a job state a library counts (`waiting`, `delayed`,
//!   `active`, `failed`...: `JobState`).
//! - **arrivals**, **service time**: where the rate jobs come in is read
//!   from ([`Arrivals`]), and the finished jobs whose start and end stamps
//!   measure how long a job takes ([`FinishedLayout`]).
//! - **zero config**: a Redis source given no `queues:` finds the
//!   libraries itself, in rounds: a **scan** of the whole keyspace now and
//!   then, and between scans a **library round** that reads again only
//!   the marks and registries the last scan found.
//! - **mark**: a key whose name or content tells that a library is there:
//!   a registry set, a `meta` hash, an `id` counter. Zero config reads the
//!   marks it finds ([`MarkRead`]); a **fixed mark** is one a library
//!   writes under a fixed name, read at every round. A [`Mark`] is also
//!   the key that tells which of two libraries sharing one layout a queue
//!   belongs to (BullMQ's and Bull's `meta` hash).
//! - **Seen**: what zero config's reads of the marks found ([`Seen`]):
//!   sets with their members, replies, and the marks left **unread**
//!   (refused by Redis, or not read for a **bound** of discovery's work).
//! - **beside**: marks found next to keys named like a library's rather
//!   than by their own name (Bull's `<queue>:id` beside its lists).
//! - **evidence**: with `plain_keys: false` no key is typed unless asked;
//!   the evidence is the names a library may want the type of to
//!   recognise its queues.
//! - **told**: a registry set some library has already shown to be its
//!   own (by its members or prefix), so the next libraries do not look
//!   into it.
//! - **claimed**: the marks a library's recognition took, in **claim
//!   rank** order; a mark one library claims is no other's.
//! - **withheld**: the keys a key of a library left unread (refused, or
//!   not read for a bound) may own ([`Library::withheld`]): whose they are
//!   is unknown, so they are reported neither as the library's nor as
//!   plain. Part of the layout, asked of every library.
//! - **Hidden**: which queue names such an unread key may hide from the
//!   scaler ([`Library::hidden`], [`Hidden`]), so it answers "unknown"
//!   rather than 0 for them. Part of the layout too.
//! - **set view**: the members of a set a library marks (a table of
//!   bindings) as zero config compares them from round to round.

use redis::Value;

pub use super::options::{
    OptionError, Written, options_of, prefix_or, stalled_check_limit, timeout,
};
pub use super::recognise::{Keys, MarkRead, Recognise, Seen, registry_prefix, type_at, under};
// The engine's pieces a library's file uses, re-exported here so that the
// file imports only the library API (`tests/architecture.rs`).
pub(super) use super::super::cmd::cmd;
pub use super::super::glob::escape as escape_glob;
pub use super::super::keyname::display_key;
pub(super) use super::super::reply;
pub use super::service::{FinishedLayout, Scores};
pub use super::spec::Preset;
pub use super::unit::Unit;
pub(super) use super::{Follow, ReadReply, Stage};
pub(super) use super::{
    below, count, due_count, facts, json_stamp_seconds, kept_elsewhere, key, preset_sample,
    queue_label, set_state, shared, shared_sample, sorted, sum,
};
pub use crate::config::{ALL_QUEUES, KeyType};
pub use crate::snapshot::Arrivals;
pub use crate::snapshot::PresetKind;
pub use crate::snapshot::{Counters, JobState, JobTotals, QueueSample, Reason};
use crate::snapshot::{Libraries, LibraryFacts};
pub use crate::time::TimeUnit;

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

/// The names users write of the libraries zero config recognises
/// (`Library::recognition`), in the list's order (for the log line of a
/// default source).
pub fn recognised_libraries() -> Vec<&'static str> {
    super::LIBRARIES
        .iter()
        .filter(|l| l.recognition().is_some())
        .map(|l| l.title())
        .collect()
}

/// How each library zero config recognises does it ([`Recognise`]), in
/// the list's order: what zero config's stages ask.
pub fn recognisers() -> impl Iterator<Item = &'static dyn Recognise> {
    super::LIBRARIES.iter().filter_map(|l| l.recognition())
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

/// The queue names a key of a library left unread (refused by Redis, or
/// not read for a bound) may hide from the scaler ([`Library::hidden`]),
/// so it answers "unknown" for them rather than 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hidden {
    /// Any name: the key lists queues (a registry).
    Any,
    /// Any name at all, refused or not read for a bound alike: the key's
    /// library may keep a queue's jobs in keys no scan types (hashes), so
    /// its keys found do not tell its queue names.
    Every,
    /// These `queue` labels (a queue's own key, its `meta` hash...).
    Names(Vec<String>),
    /// None: its queues are keys held back by name.
    Nothing,
}

/// What an unread `<p>:queues` registry (RQ's, asynq's; not a bare
/// `queues`) may own ([`Library::withheld`]): every key under `<p>:`.
pub fn under_prefixed_registry(mark: &[u8], keys: &Keys) -> Vec<Vec<u8>> {
    match registry_prefix(mark).filter(|p| !p.is_empty()) {
        Some(p) => under(keys, &[p, b":"].concat()).cloned().collect(),
        None => Vec::new(),
    }
}

/// An unread `<p>:queues` registry names its queues: it may hide any name
/// ([`Library::hidden`]).
pub fn prefixed_registry_hides(mark: &[u8]) -> Option<Hidden> {
    registry_prefix(mark)
        .filter(|p| !p.is_empty())
        .map(|_| Hidden::Any)
}

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
        sorted(members.into_iter().map(Unit::Queue).collect())
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

    /// What a refused read hides, in keys: the keys found (`keys`) that
    /// `mark`, a key of this library left unread (refused by Redis, or not
    /// read for a bound: a registry set, a queue's `meta` hash...), may
    /// own. Whose they are is then unknown, so they are reported neither
    /// as this library's nor as plain (pure). The default, for a library
    /// whose unread keys own no other: none.
    fn withheld(&self, mark: &[u8], keys: &Keys) -> Vec<Vec<u8>> {
        let _ = (mark, keys);
        Vec::new()
    }

    /// What a refused read hides, in queue names: those `mark`, a key of
    /// this library left unread, may hide from the scaler ([`Hidden`]);
    /// `None` when it is not one of this library's keys. The default, for
    /// a library with no such key: `None` (what another library does not
    /// claim hides any name).
    fn hidden(&self, mark: &[u8]) -> Option<Hidden> {
        let _ = mark;
        None
    }

    /// How zero config recognises this library from the keys it finds
    /// ([`Recognise`]); `None` (the default) for a library zero config
    /// does not recognise, which implements nothing of it. A library that
    /// has it answers `Some(self)`.
    fn recognition(&self) -> Option<&dyn Recognise> {
        None
    }
}
