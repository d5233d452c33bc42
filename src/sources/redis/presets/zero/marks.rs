//! The libraries' marks, as zero config asks them (pure lookups in
//! `library::recognisers()`, used by every stage of a round and no stage itself): which
//! names may mark a library and how each is read ([`Marks`]), which keys
//! recognition asks the type of ([`evidence`]), how the reads' replies
//! pair with their marks ([`seen`]), and what an unread mark may hide
//! ([`hides`]). Leaf of `zero/`: it imports no stage.

use std::collections::{BTreeMap, BTreeSet};

use redis::Value;

use super::super::super::discovery::Candidate;
use super::super::super::keyname::display_key;
use super::super::bounded::{Bound, SetRead};
use super::super::library::{self, Hidden, MarkRead, Recognise, Registry, Seen};
use super::super::spec::PresetSpec;
use super::super::unit::Unit;

/// The libraries in the order they claim a mark several may share
/// (`Recognise::claim_rank`; the list's order among equals).
pub(super) fn by_claim_rank() -> Vec<&'static dyn Recognise> {
    let mut libraries: Vec<&'static dyn Recognise> = library::recognisers().collect();
    libraries.sort_by_key(|l| l.claim_rank());
    libraries
}

/// How the first library (in the list's order) whose mark `k` is named
/// like reads it.
pub(in super::super) fn mark_read(k: &[u8]) -> Option<MarkRead> {
    library::recognisers().find_map(|l| l.mark_read(k))
}

/// The keys whose type recognition looks at, given the marks read and
/// the `names` the pass kept by shape (pure): each library's
/// `Recognise::evidence`, in claim order (a registry one library tells is
/// not looked into by the next).
pub(in super::super) fn evidence(seen: &Seen, names: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let mut wanted: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut told = BTreeSet::new();
    for library in by_claim_rank() {
        wanted.extend(library.evidence(seen, &names, &mut told));
    }
    wanted.into_iter().collect()
}

/// Whether the libraries-only pass keeps `k` for [`evidence`]: a name some
/// library may ask the type of (`Recognise::is_evidence`).
pub(in super::super) fn is_evidence(k: &[u8]) -> bool {
    library::recognisers().any(|l| l.is_evidence(k))
}

/// Keys that may mark a library, by the read each gets.
#[derive(Debug, Default)]
pub struct Marks {
    /// Sets (registries, binding tables), read by bounded `SSCAN`.
    pub(in super::super) sets: Vec<Vec<u8>>,
    /// Marks read by one command each (`meta` hashes), by name.
    pub(in super::super) cmds: Vec<(Vec<u8>, redis::Cmd)>,
    /// Marks found beside the typed keys (`Recognise::marks_beside`), by
    /// name, with their read.
    pub(in super::super) beside: Vec<(Vec<u8>, redis::Cmd)>,
    /// Libraries only: the names [`is_evidence`] keeps, whose type
    /// recognition may ask.
    pub(in super::super) evidence: Vec<Vec<u8>>,
    /// Keys a library keeps under a fixed name beside its registry, whose
    /// type is asked ([`MarkRead::Sign`]).
    pub(in super::super) signs: Vec<(Vec<u8>, redis::Cmd)>,
}

/// `list` sorted by name, without repeats.
fn sort_named(list: &mut Vec<(Vec<u8>, redis::Cmd)>) {
    list.sort_by(|a, b| a.0.cmp(&b.0));
    list.dedup_by(|a, b| a.0 == b.0);
}

impl Marks {
    /// Keeps at most `max` marks to read (the source's `max_keys`): the
    /// sets first (registries and bindings, few), then the marks read by a
    /// command, then those beside typed keys, each in name order; returns
    /// the others, which are not read. (Signs are not counted: fixed
    /// names.)
    pub(in super::super) fn keep_within(&mut self, max: usize) -> Vec<Vec<u8>> {
        let mut left = max;
        let mut beyond = Vec::new();
        self.sets.sort_unstable();
        self.sets.dedup();
        let keep = self.sets.len().min(left);
        beyond.extend(self.sets.drain(keep..));
        left -= keep;
        for list in [&mut self.cmds, &mut self.beside] {
            sort_named(list);
            let keep = list.len().min(left);
            beyond.extend(list.drain(keep..).map(|(k, _)| k));
            left -= keep;
        }
        beyond
    }
}

/// The marks found beside the keys `keys` (`Recognise::marks_beside`), at
/// most `limit` per library, with their reads.
pub(in super::super) fn beside_marks(
    keys: &BTreeMap<Vec<u8>, Candidate>,
    limit: usize,
) -> Vec<(Vec<u8>, redis::Cmd)> {
    library::recognisers()
        .flat_map(|l| {
            l.marks_beside(keys, limit)
                .into_iter()
                .filter_map(|k| l.beside_read(&k).map(|c| (k, c)))
        })
        .collect()
}

/// Whether `k` is named like a library's mark.
pub(in super::super) fn is_mark(k: &[u8]) -> bool {
    mark_read(k).is_some()
}

/// The marks a pass kept, split by the read each gets.
pub(in super::super) fn marks_of(marks: Vec<Vec<u8>>, evidence: Vec<Vec<u8>>) -> Marks {
    let mut out = Marks {
        evidence,
        ..Marks::default()
    };
    for k in marks {
        match mark_read(&k) {
            Some(MarkRead::Set) => out.sets.push(k),
            Some(MarkRead::Cmd(c)) => out.cmds.push((k, c)),
            Some(MarkRead::Sign(c)) => out.signs.push((k, c)),
            None => {}
        }
    }
    out
}

/// Marks known by name, split by the read each gets: those named like a
/// mark, and those found beside typed keys (the rest).
pub(in super::super) fn marks_named(names: Vec<Vec<u8>>) -> Marks {
    let (marks, others): (Vec<_>, Vec<_>) = names.into_iter().partition(|k| is_mark(k));
    let beside = others
        .into_iter()
        .filter_map(|k| {
            let c = library::recognisers().find_map(|l| l.beside_read(&k))?;
            Some((k, c))
        })
        .collect();
    Marks {
        beside,
        ..marks_of(marks, Vec::new())
    }
}

impl Seen {
    /// The unread marks whose library's queue names cannot be told from
    /// key names (a registry, a queue's own mark); not those whose queues
    /// are keys held back by name ([`Hidden::Nothing`]).
    pub fn names_unknown(&self) -> Vec<String> {
        self.unread
            .keys()
            .filter(|m| hidden(m) != Some(Hidden::Nothing))
            .map(|m| display_key(m))
            .collect()
    }

    /// The marks not read for a bound, by name, with the bound.
    pub fn over(&self) -> Vec<(String, Bound)> {
        self.bounded
            .iter()
            .map(|(m, b)| (display_key(m), *b))
            .collect()
    }

    /// Which names the marks not read for a bound may hide.
    pub fn over_hides(&self) -> Hides {
        hides(self.bounded.keys().map(Vec::as_slice))
    }

    /// Notes the marks `beyond` [`Marks::keep_within`]'s `max`, not read;
    /// a mark found beside typed keys whose library says it would tell
    /// nothing more (`Recognise::beside_tells`) is left out.
    pub(in super::super) fn beyond(&mut self, beyond: Vec<Vec<u8>>, max: usize) {
        let (others, marks): (Vec<_>, Vec<_>) = beyond.into_iter().partition(|k| !is_mark(k));
        for m in marks {
            self.bounded.insert(m, Bound::MaxKeys(max));
        }
        for k in others {
            let owner = library::recognisers().find(|l| l.beside_read(&k).is_some());
            if owner.is_some_and(|l| l.beside_tells(&k, self)) {
                self.bounded.insert(k, Bound::MaxKeys(max));
            }
        }
    }

    /// Adds what a later read of more marks saw.
    pub(in super::super) fn extend(&mut self, more: Seen) {
        self.sets.extend(more.sets);
        self.replies.extend(more.replies);
        self.unread.extend(more.unread);
        self.bounded.extend(more.bounded);
    }
}

impl Seen {
    /// What recognition reads in the sets, by set: a registry's members,
    /// a table's view as its library gives it (`Recognise::set_view`),
    /// sorted; sets with none are left out (a set Redis holds is never
    /// empty: an empty read is a missing key). Library rounds compare it
    /// with the scan's.
    pub(in super::super) fn set_members(&self) -> BTreeMap<Vec<u8>, Vec<Vec<u8>>> {
        self.set_views()
            .into_iter()
            .map(|(name, (view, _))| (name, view))
            .collect()
    }

    /// Each set's view, and whether a library marks it whatever entry
    /// came from it.
    fn set_views(&self) -> BTreeMap<Vec<u8>, (Vec<Vec<u8>>, bool)> {
        self.sets
            .iter()
            .filter_map(|(name, members)| {
                let own = library::recognisers().find_map(|l| l.set_view(name, members));
                let always = own.is_some();
                let mut view = own.unwrap_or_else(|| members.clone());
                view.sort_unstable();
                view.dedup();
                (!view.is_empty()).then(|| (name.clone(), (view, always)))
            })
            .collect()
    }

    /// [`Seen::set_members`] of the sets that mark a library: a registry
    /// an entry of `entries` came from, a set its library marks whatever
    /// entry came from it (a binding table: its work queues), and the
    /// registries libraries keep under a `fixed` name. A set named like a
    /// registry that marks no library (an app's own `<p>:queues`) is left
    /// out, so its changes make no library round a scan.
    pub(in super::super) fn library_set_members(
        &self,
        entries: &[(PresetSpec, Vec<Unit>)],
        fixed: &[&[u8]],
    ) -> BTreeMap<Vec<u8>, Vec<Vec<u8>>> {
        let registries: BTreeSet<Vec<u8>> = entries
            .iter()
            .filter_map(|(spec, _)| registry_of(spec))
            .collect();
        self.set_views()
            .into_iter()
            .filter(|(name, (_, always))| {
                *always || fixed.contains(&name.as_slice()) || registries.contains(name)
            })
            .map(|(name, (view, _))| (name, view))
            .collect()
    }
}

/// The registry set an entry is read from, if it has one.
fn registry_of(spec: &PresetSpec) -> Option<Vec<u8>> {
    match super::super::library::of_preset(&spec.preset).registry(&spec.preset) {
        Registry::Set(k) => Some(k),
        _ => None,
    }
}

/// The names some unread marks may hide from the scaler.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hides {
    /// Any name: a registry's members are unknown.
    pub any: bool,
    /// Any name, even of a refused mark (`Hidden::Every`), whose library's
    /// keys found do not tell its queue names.
    pub every: bool,
    /// The `queue` labels of the queues a queue's own mark names:
    /// `<name>`, and `<prefix>:<name>` (its label beside a queue of that
    /// name at another prefix).
    pub names: BTreeSet<String>,
}

/// What the libraries say an unread `mark` hides (`Library::hidden`, asked
/// of every library: a library's layout), if one of them knows it.
fn hidden(mark: &[u8]) -> Option<Hidden> {
    library::all().iter().find_map(|l| l.hidden(mark))
}

/// Which names the unread `marks` may hide (pure): as each mark's library
/// says; any for a mark no library knows.
pub fn hides<'a>(marks: impl Iterator<Item = &'a [u8]>) -> Hides {
    let mut out = Hides::default();
    for mark in marks {
        match hidden(mark) {
            Some(Hidden::Nothing) => {}
            Some(Hidden::Names(names)) => out.names.extend(names),
            Some(Hidden::Any) | None => out.any = true,
            Some(Hidden::Every) => (out.any, out.every) = (true, true),
        }
    }
    out
}

/// Pairs the marks with what their reads found (pure): `sets`, the
/// bounded reads of the sets ([`read_sets`](super::super::bounded::read_sets)); `replies`,
/// those of the marks read by a command, then of those beside typed keys,
/// then of the signs. A key of another type (`WRONGTYPE`) or a reply of
/// another shape marks nothing; a read Redis refused or failed is
/// unread (a sign's tells nothing); a set over the cap, not read for a
/// bound.
pub(super) fn seen(marks: Marks, sets: Vec<SetRead>, replies: &[Value]) -> Seen {
    let (cmd_replies, rest) = replies.split_at(marks.cmds.len().min(replies.len()));
    let (beside_replies, sign_replies) = rest.split_at(marks.beside.len().min(rest.len()));
    let mut out = Seen::default();
    let names = |list: Vec<(Vec<u8>, redis::Cmd)>| list.into_iter().map(|(k, _)| k);
    answered(names(marks.cmds), cmd_replies, &mut out);
    answered(names(marks.beside), beside_replies, &mut out);
    for (name, read) in marks.sets.into_iter().zip(sets) {
        match read {
            SetRead::Members(members) => {
                out.sets.insert(name, members);
            }
            SetRead::Over(bound) => {
                out.bounded.insert(name, bound);
            }
            SetRead::Reply(v) => {
                if let Some(reason) = super::super::reply::refusal(&v) {
                    out.unread.insert(name, reason);
                }
            }
        }
    }
    for ((name, _), v) in marks.signs.into_iter().zip(sign_replies) {
        out.replies.insert(name, v.clone());
    }
    out
}

/// Puts `names`' `replies` Redis answered into `seen`'s replies, and the
/// others into its unread marks, with why.
fn answered(names: impl Iterator<Item = Vec<u8>>, replies: &[Value], seen: &mut Seen) {
    for (name, v) in names.zip(replies) {
        match super::super::reply::refusal(v) {
            Some(reason) => {
                seen.unread.insert(name, reason);
            }
            None => {
                seen.replies.insert(name, v.clone());
            }
        }
    }
}
