//! Zero config: a source given no `queues:` recognises the queue libraries'
//! keys itself, in the discovery round, and reports each library's queues
//! exactly as the matching `- preset:` entry would (the entries are built
//! here and polled by the same code).
//!
//! What marks each library is its own file's (`Library::mark_read`,
//! `Library::recognise`; docs/presets.md, "Zero config"); here the one way
//! through: the names a scan kept are classified against the libraries'
//! marks ([`Marks`]), read once ([`seen`]), and each library recognises
//! its entries in what was read ([`recognise`]).
//!
//! Every key a recognised library's entry reads with the type the library
//! gives it, and the library's other keys of its queues (`Library::owned`),
//! is consumed: it is not also reported as a plain key. A key the entry
//! reads that has another type (a lookalike) stays plain.

use std::collections::{BTreeMap, BTreeSet};

use redis::Value;

use super::super::discovery::{Candidate, Candidates};
use super::super::keyname::display_key;
use super::LIBRARIES;
use super::Unit;
use super::bounded::{Bound, SetRead};
use super::consumed::consumed;
use super::library::{Hidden, Library, MarkRead, Registry, Seen};
use crate::config::PresetSpec;

/// The libraries in the order they claim a mark several may share
/// (`Library::claim_rank`; the list's order among equals).
fn by_claim_rank() -> Vec<&'static dyn Library> {
    let mut libraries: Vec<&'static dyn Library> = LIBRARIES.to_vec();
    libraries.sort_by_key(|l| l.claim_rank());
    libraries
}

/// How the first library (in the list's order) whose mark `k` is named
/// like reads it.
fn classify(k: &[u8]) -> Option<MarkRead> {
    LIBRARIES.iter().find_map(|l| l.mark_read(k))
}

/// The keys whose type [`recognise`] looks at, given the marks read and
/// the `names` the pass kept by shape (pure): each library's
/// `Library::evidence`, in claim order (a registry one library tells is
/// not looked into by the next).
pub(super) fn evidence(seen: &Seen, names: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let mut wanted: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut told = BTreeSet::new();
    for library in by_claim_rank() {
        wanted.extend(library.evidence(seen, &names, &mut told));
    }
    wanted.into_iter().collect()
}

/// Whether the libraries-only pass keeps `k` for [`evidence`]: a name some
/// library may ask the type of (`Library::is_evidence`).
pub(super) fn is_evidence(k: &[u8]) -> bool {
    LIBRARIES.iter().any(|l| l.is_evidence(k))
}

/// Keys that may mark a library, by the read each gets.
#[derive(Debug, Default)]
pub struct Marks {
    /// Sets (registries, binding tables), read by bounded `SSCAN`.
    pub(super) sets: Vec<Vec<u8>>,
    /// Marks read by one command each (`meta` hashes), by name.
    pub(super) cmds: Vec<(Vec<u8>, redis::Cmd)>,
    /// Marks found beside the typed keys (`Library::marks_beside`), by
    /// name, with their read.
    pub(super) beside: Vec<(Vec<u8>, redis::Cmd)>,
    /// Libraries only: the names [`is_evidence`] keeps, whose type
    /// recognition may ask.
    pub(super) evidence: Vec<Vec<u8>>,
    /// Keys a library keeps under a fixed name beside its registry, whose
    /// type is asked ([`MarkRead::Sign`]).
    pub(super) signs: Vec<(Vec<u8>, redis::Cmd)>,
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
    pub(super) fn keep_within(&mut self, max: usize) -> Vec<Vec<u8>> {
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

/// The marks found beside the keys `keys` (`Library::marks_beside`), at
/// most `limit` per library, with their reads.
pub(super) fn beside_marks(
    keys: &BTreeMap<Vec<u8>, Candidate>,
    limit: usize,
) -> Vec<(Vec<u8>, redis::Cmd)> {
    LIBRARIES
        .iter()
        .flat_map(|l| {
            l.marks_beside(keys, limit)
                .into_iter()
                .filter_map(|k| l.beside_read(&k).map(|c| (k, c)))
        })
        .collect()
}

/// Whether `k` is named like a library's mark.
pub(super) fn is_mark(k: &[u8]) -> bool {
    classify(k).is_some()
}

/// The marks a pass kept, split by the read each gets.
pub(super) fn marks_of(marks: Vec<Vec<u8>>, evidence: Vec<Vec<u8>>) -> Marks {
    let mut out = Marks {
        evidence,
        ..Marks::default()
    };
    for k in marks {
        match classify(&k) {
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
pub(super) fn marks_named(names: Vec<Vec<u8>>) -> Marks {
    let (marks, others): (Vec<_>, Vec<_>) = names.into_iter().partition(|k| is_mark(k));
    let beside = others
        .into_iter()
        .filter_map(|k| {
            let c = LIBRARIES.iter().find_map(|l| l.beside_read(&k))?;
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
    /// nothing more (`Library::beside_tells`) is left out.
    pub(super) fn beyond(&mut self, beyond: Vec<Vec<u8>>, max: usize) {
        let (others, marks): (Vec<_>, Vec<_>) = beyond.into_iter().partition(|k| !is_mark(k));
        for m in marks {
            self.bounded.insert(m, Bound::MaxKeys(max));
        }
        for k in others {
            let owner = LIBRARIES.iter().find(|l| l.beside_read(&k).is_some());
            if owner.is_some_and(|l| l.beside_tells(&k, self)) {
                self.bounded.insert(k, Bound::MaxKeys(max));
            }
        }
    }

    /// What recognition reads in the sets, by set: a registry's members,
    /// a table's view as its library gives it (`Library::set_view`),
    /// sorted; sets with none are left out (a set Redis holds is never
    /// empty: an empty read is a missing key). Library rounds compare it
    /// with the scan's.
    pub(super) fn set_members(&self) -> BTreeMap<Vec<u8>, Vec<Vec<u8>>> {
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
                let own = LIBRARIES.iter().find_map(|l| l.set_view(name, members));
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
    pub(super) fn library_set_members(
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

    /// Adds what a later read of more marks saw.
    pub(super) fn extend(&mut self, more: Seen) {
        self.sets.extend(more.sets);
        self.replies.extend(more.replies);
        self.unread.extend(more.unread);
        self.bounded.extend(more.bounded);
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

/// What the libraries say an unread `mark` hides (`Library::hidden`), if
/// one of them knows it.
fn hidden(mark: &[u8]) -> Option<Hidden> {
    LIBRARIES.iter().find_map(|l| l.hidden(mark))
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
/// bounded reads of the sets ([`super::bounded::read_sets`]); `replies`,
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
                if let Some(reason) = super::reply::refusal(&v) {
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
        match super::reply::refusal(v) {
            Some(reason) => {
                seen.unread.insert(name, reason);
            }
            None => {
                seen.replies.insert(name, v.clone());
            }
        }
    }
}

/// The outcome of recognition.
#[derive(Debug, Default)]
pub struct Recognition {
    /// One entry per library and prefix, with its units.
    pub entries: Vec<(PresetSpec, Vec<Unit>)>,
    /// Keys the entries own: never reported as plain keys.
    pub consumed: BTreeSet<Vec<u8>>,
    /// Keys a mark Redis would not let us read may own: whose they are is
    /// unknown, so they are reported neither as a library's nor as plain.
    pub withheld: BTreeSet<Vec<u8>>,
}

/// The registry set an entry is read from, if it has one.
fn registry_of(spec: &PresetSpec) -> Option<Vec<u8>> {
    match super::lib(&spec.preset).registry(&spec.preset) {
        Registry::Set(k) => Some(k),
        _ => None,
    }
}

/// Recognises the libraries the marks show (pure): each library's
/// entries (`Library::recognise`, in claim order: a registry set one
/// library takes is no other's), sorted by library in the list's order,
/// then as each library found them; and the keys they consume.
pub fn recognise(seen: &Seen, found: &Candidates) -> Recognition {
    let keys = &found.keys;
    let mut entries: Vec<(PresetSpec, Vec<Unit>)> = Vec::new();
    let mut claimed = BTreeSet::new();
    for library in by_claim_rank() {
        let found = library.recognise(seen, keys, &mut claimed);
        entries.extend(
            found
                .into_iter()
                .map(|(preset, units)| (spec(preset), units)),
        );
    }
    entries.sort_by_key(|(s, _)| super::library::rank(s.preset.kind()));
    let consumed = consumed(&entries, keys);
    let mut withheld = withheld(seen.unread.keys().chain(seen.bounded.keys()), keys);
    withheld.retain(|k| !consumed.contains(k));
    Recognition {
        entries,
        consumed,
        withheld,
    }
}

/// The keys found that the `unread` marks (refused, or not read for a
/// bound) may own, as each mark's library says (`Library::withheld`).
fn withheld<'a>(
    unread: impl Iterator<Item = &'a Vec<u8>>,
    keys: &BTreeMap<Vec<u8>, Candidate>,
) -> BTreeSet<Vec<u8>> {
    let mut owned = BTreeSet::new();
    for mark in unread {
        for library in LIBRARIES {
            owned.extend(library.withheld(mark, keys));
        }
    }
    owned
}

/// A `- preset:` entry for `preset`, without `counters:`.
fn spec(preset: crate::config::Preset) -> PresetSpec {
    PresetSpec {
        preset,
        counters: None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::tracked::KeyState;
    use super::super::{asynq, bull, bullmq, celery, rq, sidekiq};
    use super::*;
    use crate::config::KeyType;
    use crate::snapshot::{PresetKind, Reason};

    fn keys(list: &[(&str, KeyType)]) -> Candidates {
        let mut c = Candidates::default();
        for (k, t) in list {
            c.keys.insert(
                k.as_bytes().to_vec(),
                Candidate {
                    spec: 0,
                    exact: false,
                    state: KeyState::Typed(*t),
                },
            );
        }
        c
    }

    /// A reply to a `meta` hash's marks read: BullMQ's.
    fn bullmq_marks() -> Value {
        Value::Array(vec![
            Value::BulkString(b"bullmq:5.1.0".to_vec()),
            Value::Nil,
        ])
    }

    fn seen(sets: &[(&str, &[&str])], bullmq: &[&str]) -> Seen {
        Seen {
            sets: sets
                .iter()
                .map(|(k, m)| {
                    let members = m.iter().map(|s| s.as_bytes().to_vec()).collect();
                    (k.as_bytes().to_vec(), members)
                })
                .collect(),
            replies: bullmq
                .iter()
                .map(|s| (s.as_bytes().to_vec(), bullmq_marks()))
                .collect(),
            unread: BTreeMap::new(),
            bounded: BTreeMap::new(),
        }
    }

    /// `s` with the integer `id`s `ids` read.
    fn with_ids(mut s: Seen, ids: &[&str]) -> Seen {
        for id in ids {
            let v = Value::BulkString(b"7".to_vec());
            s.replies.insert(id.as_bytes().to_vec(), v);
        }
        s
    }

    /// A mark named `name`, with its library's read.
    fn cmd_mark(name: &str) -> (Vec<u8>, redis::Cmd) {
        let Some(MarkRead::Cmd(c) | MarkRead::Sign(c)) = classify(name.as_bytes()) else {
            panic!("{name} is no mark read by a command")
        };
        (name.as_bytes().to_vec(), c)
    }

    /// `s` with `marks` unread (refused).
    fn refused(mut s: Seen, marks: &[&str]) -> Seen {
        for m in marks {
            s.unread.insert(m.as_bytes().to_vec(), Reason::Auth);
        }
        s
    }

    fn strings(set: &BTreeSet<Vec<u8>>) -> Vec<String> {
        set.iter()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect()
    }

    #[test]
    fn what_library_rounds_compare_leaves_event_receivers_and_empty_reads_out() {
        let gossip = "worker.#\x06\x16\x06\x16celeryev.2b0f3c3e-8a4f-4a53-9d55-0b7e0c9c1f10";
        let before = seen(
            &[
                ("_kombu.binding.tasks", &["celery\x06\x16\x06\x16celery"]),
                ("queues", &["b", "a"]),
                ("rq:queues", &[]),
            ],
            &[],
        );
        let after = seen(
            &[
                (
                    "_kombu.binding.tasks",
                    &[gossip, "celery\x06\x16\x06\x16celery"],
                ),
                ("queues", &["a", "b"]),
            ],
            &[],
        );
        assert_eq!(before.set_members(), after.set_members());
        let view = before.set_members();
        assert_eq!(view.len(), 2, "{view:?}");
        let added = seen(&[("queues", &["a", "b", "c"])], &[]);
        assert_ne!(
            added.set_members().get(&b"queues"[..]),
            view.get(&b"queues"[..])
        );
    }

    #[test]
    fn an_unread_meta_withholds_its_queues_keys_and_is_never_taken_for_bull() {
        let found = keys(&[
            ("secret:jobs:wait", List),
            ("secret:jobs:events", Stream),
            ("secret:jobsx:wait", List),
            ("plain", List),
        ]);
        // Bull's `id` beside it is an integer: still not Bull's.
        let s = with_ids(
            refused(seen(&[], &[]), &["secret:jobs:meta"]),
            &["secret:jobs:id"],
        );
        let r = recognise(&s, &found);
        assert!(r.entries.is_empty());
        assert_eq!(
            strings(&r.withheld),
            ["secret:jobs:events", "secret:jobs:wait"]
        );
    }

    #[test]
    fn an_unread_registry_withholds_the_keys_its_library_may_own() {
        let found = keys(&[
            ("rq:queue:high", List),
            ("queue:default", List),
            ("retry", Zset),
            ("retry:other", Zset),
            ("plain", List),
        ]);
        let r = recognise(&refused(seen(&[], &[]), &["rq:queues"]), &found);
        assert_eq!(strings(&r.withheld), ["rq:queue:high"]);
        let r = recognise(&refused(seen(&[], &[]), &["queues"]), &found);
        assert_eq!(strings(&r.withheld), ["queue:default", "retry"]);
    }

    #[test]
    fn an_unread_kombu_binding_withholds_every_list_under_its_prefix() {
        let found = keys(&[
            ("celery", List),
            ("app:celery", List),
            ("app:unacked_index", Zset),
            ("app:events", Stream),
            ("other", List),
        ]);
        let r = recognise(
            &refused(seen(&[], &[]), &["app:_kombu.binding.celery"]),
            &found,
        );
        assert_eq!(strings(&r.withheld), ["app:celery", "app:unacked_index"]);
        // A pidbox exchange carries no work: nothing to withhold.
        let r = recognise(
            &refused(seen(&[], &[]), &["_kombu.binding.celery.pidbox"]),
            &found,
        );
        assert!(r.withheld.is_empty());
    }

    #[test]
    fn a_refused_read_is_unread_and_a_wrongtype_one_marks_nothing() {
        let reply = |resp: &[u8]| redis::parse_redis_value(resp).unwrap();
        let marks = Marks {
            sets: vec![b"queues".to_vec(), b"rq:queues".to_vec()],
            cmds: vec![cmd_mark("a:q:meta"), cmd_mark("b:q:meta")],
            ..Marks::default()
        };
        let sets = vec![
            SetRead::Reply(reply(
                b"-NOPERM this user has no permissions to access one of the keys\r\n",
            )),
            SetRead::Members(vec![b"rq:queue:high".to_vec()]),
        ];
        let replies = [
            reply(b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"),
            reply(b"-ERR something else\r\n"),
        ];
        let s = super::seen(marks, sets, &replies);
        assert_eq!(
            s.unread,
            BTreeMap::from([
                (b"b:q:meta".to_vec(), Reason::Backend),
                (b"queues".to_vec(), Reason::Auth),
            ])
        );
        assert_eq!(s.sets.keys().collect::<Vec<_>>(), [b"rq:queues"]);
        assert!(!bullmq::marked(&s, b"a:q:meta"));
    }

    fn names(r: &Recognition) -> Vec<(PresetKind, String, Vec<Unit>)> {
        r.entries
            .iter()
            .map(|(s, u)| {
                let prefix = s.preset.prefix.clone();
                (s.preset.kind(), prefix, u.clone())
            })
            .collect()
    }

    fn q(name: &str) -> Unit {
        Unit::Queue(name.as_bytes().to_vec())
    }

    use KeyType::{List, Stream, Zset};

    #[test]
    fn registries_tell_rq_asynq_and_sidekiq_apart() {
        let found = keys(&[
            ("rq:queue:default", List),
            ("rq:queue:default:intermediate", List),
            ("rq:wip:default", Zset),
            ("rq:results:abc", Stream),
            ("asynq:{critical}:pending", List),
            ("queue:mail", List),
            ("retry", Zset),
            ("ns:queue:x", List),
            ("plain", List),
        ]);
        let s = seen(
            &[
                ("rq:queues", &["rq:queue:default"]),
                ("asynq:queues", &["critical"]),
                ("queues", &["mail", "(all)"]),
                ("ns:queues", &["x"]),
                // No mark beside it: somebody's own set.
                ("other:queues", &["a"]),
            ],
            &[],
        );
        let r = recognise(&s, &found);
        assert_eq!(
            names(&r),
            vec![
                (sidekiq::KIND, "ns".into(), vec![q("x"), Unit::Shared]),
                (
                    sidekiq::KIND,
                    "".into(),
                    vec![q("(all)"), q("mail"), Unit::Shared]
                ),
                (rq::KIND, "rq".into(), vec![q("default")]),
                (asynq::KIND, "asynq".into(), vec![q("critical")]),
            ]
        );
        let consumed: Vec<&str> = r
            .consumed
            .iter()
            .map(|k| std::str::from_utf8(k).unwrap())
            .collect();
        assert_eq!(
            consumed,
            [
                "asynq:{critical}:pending",
                "ns:queue:x",
                "queue:mail",
                "retry",
                "rq:queue:default",
                "rq:queue:default:intermediate",
                "rq:results:abc",
                "rq:wip:default"
            ]
        );
    }

    #[test]
    fn bullmq_at_any_prefix_consumes_its_queue_keys_but_not_lookalikes() {
        let found = keys(&[
            ("bull:mail:wait", List),
            ("bull:mail:events", Stream),
            ("bull:mail:marker", Zset),
            ("bull:mail:1:logs", List),
            // BullMQ's `wait` is a list: a zset is somebody else's.
            ("my:app:jobs:wait", Zset),
            ("my:app:jobs:delayed", Zset),
            ("bull:mailer:wait", List),
        ]);
        let s = seen(&[], &["bull:mail:meta", "my:app:jobs:meta"]);
        let r = recognise(&s, &found);
        assert_eq!(
            names(&r),
            vec![
                (bullmq::KIND, "bull".into(), vec![q("mail")]),
                (bullmq::KIND, "my:app".into(), vec![q("jobs")]),
            ]
        );
        let consumed: Vec<&[u8]> = r.consumed.iter().map(Vec::as_slice).collect();
        assert_eq!(
            consumed,
            [
                &b"bull:mail:1:logs"[..],
                b"bull:mail:events",
                b"bull:mail:marker",
                b"bull:mail:wait",
                b"my:app:jobs:delayed",
            ]
        );
    }

    #[test]
    fn bull_is_an_integer_id_beside_its_keys_where_no_bullmq_meta_is() {
        let found = keys(&[
            ("bull:old:wait", List),
            ("bull:old:priority", Zset),
            ("bull:old:completed", Zset),
            ("bull:old:1", List),
            ("bull:new:wait", List),
            ("my:app:paused:paused", List),
            ("plain:thing:wait", List),
        ]);
        // Probed: one `id` per `<prefix>:<name>` with a Bull-like key.
        let ids = |limit| -> Vec<Vec<u8>> {
            beside_marks(&found.keys, limit)
                .into_iter()
                .map(|(k, _)| k)
                .collect()
        };
        assert_eq!(
            ids(100),
            [
                b"bull:new:id".to_vec(),
                b"bull:old:id".to_vec(),
                b"my:app:paused:id".to_vec(),
                b"plain:thing:id".to_vec(),
            ]
        );
        assert_eq!(ids(2).len(), 2);
        // `bull:new` has an `id` too, but its BullMQ `meta` says BullMQ;
        // `plain:thing:id` held no integer.
        let s = with_ids(
            seen(&[], &["bull:new:meta"]),
            &["bull:old:id", "bull:new:id", "my:app:paused:id"],
        );
        let r = recognise(&s, &found);
        assert_eq!(
            names(&r),
            [
                (bullmq::KIND, "bull".into(), vec![q("new")]),
                (bull::KIND, "bull".into(), vec![q("old")]),
                (bull::KIND, "my:app".into(), vec![q("paused")]),
            ]
        );
        let consumed: Vec<&[u8]> = r.consumed.iter().map(Vec::as_slice).collect();
        assert_eq!(
            consumed,
            [
                &b"bull:new:wait"[..],
                b"bull:old:1",
                b"bull:old:completed",
                b"bull:old:priority",
                b"bull:old:wait",
                b"my:app:paused:paused",
            ]
        );
    }

    #[test]
    fn celery_bindings_give_queues_and_their_priority_lists() {
        let found = keys(&[
            ("celery", List),
            ("celery\x06\x163", List),
            ("celery\x06\x161", List),
            ("emails", Zset),
            ("unacked_index", Zset),
        ]);
        let s = seen(
            &[
                (
                    "_kombu.binding.celery",
                    &[
                        "celery\x06\x16\x06\x16celery",
                        "emails\x06\x16\x06\x16emails",
                    ],
                ),
                (
                    "_kombu.binding.reply.celery.pidbox",
                    &["x\x06\x16\x06\x16reply"],
                ),
                ("_kombu.binding.broken", &["no separators"]),
            ],
            &[],
        );
        let r = recognise(&s, &found);
        let [(spec, units)] = &r.entries[..] else {
            panic!("{:?}", r.entries)
        };
        let (queues, priority_steps) = (&spec.preset.queues, &spec.preset.priority_steps);
        assert_eq!(spec.preset.kind, celery::KIND);
        assert_eq!(queues, &["celery", "emails"]);
        assert_eq!(priority_steps, &[0, 1, 3, 6, 9]);
        assert_eq!(units, &[q("celery"), q("emails"), Unit::Shared]);
        // `emails` is a zset: not kombu's list, so it stays plain.
        let consumed: Vec<&[u8]> = r.consumed.iter().map(Vec::as_slice).collect();
        assert_eq!(
            consumed,
            [
                &b"celery"[..],
                b"celery\x06\x161",
                b"celery\x06\x163",
                b"unacked_index"
            ]
        );
    }

    #[test]
    fn celery_event_receivers_are_no_work_queues() {
        let uuid = "74e6b2c1-9f3a-4d2e-8b1c-0a5f6e7d8c9b";
        let ev = |rk: &str, q: &str| format!("{rk}\x06\x16\x06\x16{q}.{uuid}");
        let gossip = ev("worker.#", "celeryev");
        let monitor = ev("#", "celeryev");
        let custom = ev("worker.#", "myev");
        let colon = format!("worker.#::celeryev.{uuid}");
        // A uuid-named queue under a routing key of its own is work.
        let own = ev("jobs", "jobs");
        let members = |m: &[&String]| m.iter().map(|s| s.as_bytes().to_vec()).collect();
        let mut s = seen(&[], &[]);
        s.sets = [
            ("_kombu.binding.celery", vec![&own]),
            // Celery's default `event_exchange`, at the bare keys and
            // under a `global_keyprefix`: skipped by name.
            ("_kombu.binding.celeryev", vec![&gossip, &monitor, &own]),
            ("app:_kombu.binding.celeryev", vec![&gossip]),
            // A custom `event_exchange`: told by the receivers' bindings,
            // beside a work queue bound to it.
            ("_kombu.binding.events", vec![&custom, &monitor, &colon]),
            (
                "_kombu.binding.tasks",
                vec![&"tasks\x06\x16\x06\x16tasks".to_string()],
            ),
            // Not a receiver's: a routing key of its own, or no uuid.
            (
                "_kombu.binding.other",
                vec![
                    &format!("worker.#\x06\x16\x06\x16celeryev.{}", &uuid[1..]),
                    &"worker.#\x06\x16\x06\x16logs.v2".to_string(),
                ],
            ),
        ]
        .into_iter()
        .map(|(k, m)| (k.as_bytes().to_vec(), members(&m)))
        .collect();
        assert!(!is_mark(b"_kombu.binding.celeryev"));
        assert!(!is_mark(b"app:_kombu.binding.celeryev"));
        assert!(is_mark(b"_kombu.binding.celeryev2"));
        let r = recognise(&s, &keys(&[]));
        let queues: Vec<(String, Vec<String>)> = r
            .entries
            .iter()
            .map(|(spec, _)| match &spec.preset {
                p if p.kind == celery::KIND => (p.prefix.clone(), p.queues.clone()),
                p => panic!("{p:?}"),
            })
            .collect();
        let want = vec![
            format!("celeryev.{}", &uuid[1..]),
            format!("jobs.{uuid}"),
            "logs.v2".to_string(),
            "tasks".to_string(),
        ];
        assert_eq!(queues, [(String::new(), want)]);
        // The libraries-only pass asks nothing of them either.
        let names = vec![format!("myev.{uuid}\x06\x167").into_bytes()];
        assert!(evidence(&s, names).is_empty());
    }

    #[test]
    fn celery_with_the_colon_sep_its_docs_suggest_is_recognised_too() {
        let found = keys(&[
            ("app:tasks", List),
            ("app:tasks:1", List),
            ("app:tasks:7", List),
            ("app:tasks:x", List),
        ]);
        let s = seen(
            &[(
                "app:_kombu.binding.tasks",
                &["tasks::tasks", "a:b:c:d", "\x06\x16\x06\x16"],
            )],
            &[],
        );
        let r = recognise(&s, &found);
        let [(spec, _)] = &r.entries[..] else {
            panic!("{:?}", r.entries)
        };
        let p = &spec.preset;
        assert_eq!(p.kind, celery::KIND);
        let (queues, priority_steps, sep, prefix) =
            (&p.queues, &p.priority_steps, &p.sep, &p.prefix);
        assert_eq!(
            (queues.as_slice(), sep.as_str(), prefix.as_str()),
            (&["tasks".to_string()][..], ":", "app:")
        );
        assert_eq!(priority_steps, &[0, 1, 3, 6, 7, 9]);
        let consumed: Vec<&[u8]> = r.consumed.iter().map(Vec::as_slice).collect();
        // `app:tasks:x` is no step: it stays plain.
        assert_eq!(
            consumed,
            [&b"app:tasks"[..], b"app:tasks:1", b"app:tasks:7"]
        );
    }

    #[test]
    fn bullmq_marks_are_the_version_or_max_len_events() {
        let marks = Marks {
            cmds: vec![
                cmd_mark("a:q:meta"),
                cmd_mark("b:q:meta"),
                cmd_mark("c:q:meta"),
            ],
            sets: vec![b"queues".to_vec(), b"x:queues".to_vec()],
            beside: ["old:q:id", "app:x:id"]
                .map(|k| (k.as_bytes().to_vec(), redis::cmd("GET")))
                .to_vec(),
            evidence: Vec::new(),
            signs: vec![cmd_mark("processes"), cmd_mark("stat:processed")],
        };
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let wrong_type = redis::parse_redis_value(
            b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        )
        .unwrap();
        // `x:queues` is a list: not a registry.
        let sets = vec![
            SetRead::Members(vec![b"mail".to_vec()]),
            SetRead::Reply(wrong_type),
        ];
        let replies = [
            Value::Array(vec![bulk("bullmq:6.7.0"), Value::Nil]),
            Value::Array(vec![Value::Nil, bulk("10000")]),
            Value::Array(vec![bulk("1.0"), Value::Nil]),
            // Bull's job counter; somebody's own `id` text.
            bulk("41"),
            bulk("a3f9"),
            // `TYPE` of Sidekiq's signs: `processes` is some app's list.
            Value::SimpleString("list".into()),
            Value::SimpleString("none".into()),
        ];
        let s = super::seen(marks, sets, &replies);
        assert_eq!(s.sets[&b"queues".to_vec()], [b"mail".to_vec()]);
        assert_eq!(s.sets.len(), 1);
        // `a` and `b` are BullMQ's; Bull's `old` counts jobs, `app:x` not;
        // the bare `queues` has no sign of Sidekiq's beside it.
        let r = recognise(&s, &keys(&[]));
        assert_eq!(
            names(&r),
            [
                (bullmq::KIND, "a".into(), vec![q("q")]),
                (bullmq::KIND, "b".into(), vec![q("q")]),
                (bull::KIND, "old".into(), vec![q("q")]),
            ]
        );
    }

    #[test]
    fn the_evidence_check_indexes_names_by_their_own_prefixes() {
        // A registry of 1,000 bare names at a prefix that is not asynq's,
        // and 100,000 names under asynq-shaped `work:{<q>}:`, half of them
        // a member's.
        let members: Vec<String> = (0..1000).map(|i| format!("q{i}")).collect();
        let refs: Vec<&str> = members.iter().map(String::as_str).collect();
        let s = seen(&[("work:queues", &refs)], &[]);
        let names: Vec<Vec<u8>> = (0..100_000)
            .map(|i| format!("work:{{q{}}}:pending:{i}", i % 2000).into_bytes())
            .collect();
        let wanted = evidence(&s, names);
        // Each member's `work:queue:<m>`, the namespace's three zsets, and
        // the 50,000 names under a member's braces.
        assert_eq!(wanted.len(), 1000 + 3 + 50_000);
        assert!(wanted.contains(&b"work:{q999}:pending:999".to_vec()));
        assert!(!wanted.contains(&b"work:{q1000}:pending:1000".to_vec()));
        // Speed is not asserted here (a timed test fails on a loaded
        // machine): names × members, 10^8 prefix comparisons, took 13.8 s
        // in a debug build; by each name's own prefixes, 0.6 s.
    }

    #[test]
    fn an_unread_meta_or_id_hides_its_queue_a_registry_any_name_a_binding_none() {
        let h = hides([&b"eu:app:mail:meta"[..], b"bull:old:id"].into_iter());
        assert!(!h.any);
        let names: Vec<&str> = h.names.iter().map(String::as_str).collect();
        assert_eq!(names, ["bull:old", "eu:app:mail", "mail", "old"]);
        assert!(hides([&b"_kombu.binding.celery"[..]].into_iter()) == Hides::default());
        assert!(hides([&b"queues"[..]].into_iter()).any);
        assert!(hides([&b"rq:queues"[..]].into_iter()).any);
    }

    #[test]
    fn braced_prefixes_are_each_open_brace_to_each_close_after_it() {
        let all: Vec<&[u8]> = asynq::braced(b"a:{b}:c:{d}:e").collect();
        // From the first `:{`, and from the second.
        assert_eq!(all, [&b"a:{b}:"[..], b"a:{b}:c:{d}:", b"a:{b}:c:{d}:"]);
        assert_eq!(asynq::braced(b"plain:key").count(), 0);
    }

    #[test]
    fn libraries_only_asks_the_type_of_just_what_recognition_looks_at() {
        let s = seen(
            &[
                ("rq:queues", &["rq:queue:default"]),
                ("asynq:queues", &["critical"]),
                ("queues", &["mail"]),
                ("ns:queues", &["x"]),
                ("work:queues", &["q"]),
                ("_kombu.binding.celery", &["celery\x06\x16\x06\x16celery"]),
            ],
            &["bull:mail:meta"],
        );
        let names = [
            "bull:mail:wait",
            "old:q:wait",
            "old:q:priority",
            "old:q:id",
            "work:{q}:pending",
            "work:{q}:t:5f1c",
            "work:{q}:processed:2026-11-26",
            "asynq:{critical}:pending",
            "celery\x06\x163",
            "celery\x06\x167",
            "celery\x06\x16300",
            "cache:7",
            "other\x06\x162",
            "plain",
        ];
        let kept: Vec<Vec<u8>> = names
            .iter()
            .map(|n| n.as_bytes().to_vec())
            .filter(|n| is_evidence(n))
            .collect();
        let kept_names: Vec<&str> = kept
            .iter()
            .map(|k| std::str::from_utf8(k).unwrap())
            .collect();
        assert_eq!(
            kept_names,
            [
                "bull:mail:wait",
                "old:q:wait",
                "old:q:priority",
                "work:{q}:pending",
                "asynq:{critical}:pending",
                "celery\x06\x163",
                "celery\x06\x167",
                "cache:7",
                "other\x06\x162"
            ]
        );
        // RQ's and asynq's registries tell themselves; kombu's default
        // steps need no look; nor does a queue BullMQ's `meta` marks.
        let wanted: Vec<String> = evidence(&s, kept)
            .into_iter()
            .map(|k| String::from_utf8(k).unwrap())
            .collect();
        assert_eq!(
            wanted,
            [
                "celery\x06\x167",
                "ns:dead",
                "ns:queue:x",
                "ns:retry",
                "ns:schedule",
                "old:q:priority",
                "old:q:wait",
                "queue:mail",
                "work:dead",
                "work:queue:q",
                "work:retry",
                "work:schedule",
                "work:{q}:pending"
            ]
        );
    }
}
