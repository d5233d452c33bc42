//! Zero config: a source given no `queues:` recognises the queue libraries'
//! keys itself, in the discovery round, and reports each library's queues
//! exactly as the matching `- preset:` entry would (the entries are built
//! here and polled by the same code).
//!
//! What marks a library (docs/presets.md, "Zero config"):
//! - **RQ**: a set `<prefix>:queues` whose members are all full keys
//!   `<prefix>:queue:<name>`.
//! - **asynq**: a set `<prefix>:queues` of bare names where the prefix is
//!   `asynq` or some member `<m>` has a list or zset `<prefix>:{<m>}:...`.
//! - **Sidekiq**: the set `queues` (7.x/8.x keep bare keys) beside a list
//!   `queue:<m>` for some member, the set `processes` or the string
//!   `stat:processed` (a bare `queues` alone is some app's own set); or a
//!   set `<ns>:queues` (a 6.x redis-namespace) with a list `<ns>:queue:<m>`
//!   for some member or a `<ns>:schedule`/`retry`/`dead` zset beside it.
//! - **BullMQ** at any prefix: a hash `<prefix>:<name>:meta` whose `version`
//!   starts with `bullmq:` or which has `opts.maxLenEvents` (both written by
//!   the `Queue` constructor); names cannot contain `:`, so a name parses
//!   from the right. Old Bull (3.x/4.x) writes no `meta` hash with these
//!   marks: its `meta`, if any, holds only `paused`). See Bull below.
//! - **Bull** (3.x/4.x) at any prefix: a list or zset `<prefix>:<name>:<part>`
//!   of Bull's (`wait`, `paused`, `active`, `delayed`, `priority`,
//!   `completed`, `failed`) beside an integer string `<prefix>:<name>:id`
//!   (INCRed for every job added), with no BullMQ `meta` hash there.
//! - **Celery**: `[<global_keyprefix>]_kombu.binding.<exchange>` sets, whose
//!   members are `routing_key␆␖pattern␆␖queue`; the `*.pidbox` exchanges
//!   (remote control and its replies) and Celery's event exchange
//!   `celeryev` are skipped, and so is an event receiver's binding in any
//!   exchange (`worker.#` or `#` to `<prefix>.<uuid>`); a member without `␆␖`
//!   and of exactly three `:`-separated parts means `sep: ":"`, as Celery's
//!   docs suggest with priorities. Priority lists are those of kombu's
//!   default steps plus any `<queue><sep><n>` list found.
//!
//! Every key a recognised library's entry reads with the type the library
//! gives it, and the library's other keys of its queues (BullMQ's `events`,
//! `marker`, job logs; RQ's `intermediate` lists, result streams; asynq's
//! per-queue keys...), is consumed: it is not also reported as a plain key.
//! A key the entry reads that has another type (a lookalike) stays plain.

use std::collections::{BTreeMap, BTreeSet};

use redis::Value;

use super::super::discovery::{Candidate, Candidates};
use super::super::keyname::display_key;
use super::super::tracked::KeyState;
use super::bounded::{Bound, SetRead};
use super::consumed::{consumed, type_at, under};
use super::{Unit, bull, bullmq, fixed_queues, key, registry_units, sidekiq};
use crate::config::{
    CELERY_PRIORITY_STEPS, CELERY_SEP, CELERY_VISIBILITY_TIMEOUT, DEFAULT_STALLED_CHECK_LIMIT,
    KeyType, Preset, PresetSpec, default_prefix,
};
use crate::snapshot::{PresetKind, Reason};

/// The name part of kombu's binding tables.
const BINDING: &[u8] = b"_kombu.binding.";

/// The keys whose type [`recognise`] looks at, given the marks read and
/// the `names` the pass kept by shape (pure): for a `<p>:queues` registry
/// that neither its members (RQ) nor its prefix (asynq) already tell, the
/// Sidekiq namespace's `<p>:queue:<m>` lists and `<p>:schedule`/`retry`/
/// `dead` zsets and the kept keys under asynq's `<p>:{<m>}:`; for a Celery
/// queue, the kept `<queue><sep><n>` lists of a step kombu's defaults lack;
/// the kept Bull-named keys where no BullMQ `meta` is beside them.
pub(super) fn evidence(seen: &Seen, names: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let mut wanted: BTreeSet<Vec<u8>> = BTreeSet::new();
    // The `<p>:{<m>}:` prefixes, looked up by each name's own (no pass over
    // every member for every name).
    let mut under_asynq: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut celery_bases: BTreeSet<Vec<u8>> = BTreeSet::new();
    for (set, members) in &seen.sets {
        if let Some((prefix, _)) = binding(set) {
            for (q, sep) in members.iter().filter_map(|m| binding_queue(m)) {
                celery_bases.insert(key(&[prefix, q.as_bytes(), sep.as_bytes()]));
            }
            continue;
        }
        let Some(prefix) = registry_prefix(set) else {
            continue;
        };
        if prefix.is_empty() {
            // Sidekiq's bare `queues`: a `queue:<member>` list says it.
            wanted.extend(members.iter().map(|m| key(&[b"queue:", m])));
            continue;
        }
        let rq = key(&[prefix, b":queue:"]);
        let told = members.iter().all(|m| m.starts_with(&rq))
            || prefix == default_prefix(PresetKind::Asynq).as_bytes();
        if told {
            continue;
        }
        for m in members {
            wanted.insert(key(&[prefix, b":queue:", m]));
            under_asynq.insert(key(&[prefix, b":{", m, b"}:"]));
        }
        for n in [&b"schedule"[..], b"retry", b"dead"] {
            wanted.insert(key(&[prefix, b":", n]));
        }
    }
    for k in names {
        let bull = !k.ends_with(b":id")
            && bull::queue_of_part(&k).is_some_and(|(prefix, name)| {
                !seen.bullmq.contains(&key(&[prefix, b":", name, b":meta"]))
            });
        let asynq = !under_asynq.is_empty() && braced(&k).any(|p| under_asynq.contains(p));
        let step = celery_step(&k).is_some_and(|(base, n)| {
            celery_bases.contains(base) && !CELERY_PRIORITY_STEPS.contains(&n)
        });
        if bull || asynq || step {
            wanted.insert(k);
        }
    }
    wanted.into_iter().collect()
}

/// Each prefix of `k` that ends an asynq-shaped `:{…}:` (pure): `a:{b}:`
/// and `a:{b}:c:{d}:` of `a:{b}:c:{d}:e`. A name has a few, so looking
/// each up costs a name its length, whatever the registries hold.
fn braced(k: &[u8]) -> impl Iterator<Item = &[u8]> + '_ {
    let opens = k.windows(2).enumerate().filter(|(_, w)| *w == b":{");
    opens.flat_map(move |(at, _)| {
        k.windows(2)
            .enumerate()
            .skip(at + 2)
            .filter(|(_, w)| *w == b"}:")
            .map(move |(end, _)| &k[..end + 2])
    })
}

/// Whether the libraries-only pass keeps `k` for [`evidence`]: a key under
/// an asynq-shaped `<p>:{<q>}:` (but not its task hashes `t:` nor its daily
/// `processed:`/`failed:` strings, the bulk of its keys and never a list,
/// zset or stream), a name ending in a separator and a number up to 255
/// (a Celery priority list, `<queue>\x06\x16<n>` or `<queue>:<n>`), or
/// one named like a Bull list or zset (`<prefix>:<q>:wait`...).
pub(super) fn is_evidence(k: &[u8]) -> bool {
    let bull = !k.ends_with(b":id") && bull::queue_of_part(k).is_some();
    let asynq = k
        .windows(2)
        .position(|w| w == b":{")
        .and_then(|at| {
            k[at..]
                .windows(2)
                .position(|w| w == b"}:")
                .map(|e| at + e + 2)
        })
        .is_some_and(|rest| {
            let rest = &k[rest..];
            ![&b"t:"[..], b"processed:", b"failed:"]
                .iter()
                .any(|p| rest.starts_with(p))
        });
    bull || asynq || celery_step(k).is_some()
}

/// `(base, n)` of a name `<base><n>` whose base ends in kombu's default
/// separator or `:` and whose `n` (1-3 digits) is a priority step.
fn celery_step(k: &[u8]) -> Option<(&[u8], u8)> {
    let digits = k.iter().rev().take_while(|b| b.is_ascii_digit()).count();
    if !(1..=3).contains(&digits) {
        return None;
    }
    let (base, n) = k.split_at(k.len() - digits);
    let sep_ok = base.ends_with(CELERY_SEP.as_bytes()) || base.ends_with(COLON_SEP.as_bytes());
    let n = std::str::from_utf8(n).ok()?.parse::<u8>().ok()?;
    sep_ok.then_some((base, n))
}

/// Keys that may mark a library, by name (their type is told by the reply
/// to the read each gets).
#[derive(Debug, Default)]
pub struct Marks {
    /// Keys named `*:meta` (BullMQ queues, if hashes with its marks).
    pub(super) metas: Vec<Vec<u8>>,
    /// Keys named like a registry or a kombu binding table (if sets).
    pub(super) sets: Vec<Vec<u8>>,
    /// `<prefix>:<name>:id` beside a list or zset named like Bull's (a Bull
    /// queue, if an integer string).
    pub(super) bull_ids: Vec<Vec<u8>>,
    /// Libraries only: the names [`is_evidence`] keeps, whose type
    /// recognition may ask.
    pub(super) evidence: Vec<Vec<u8>>,
    /// Sidekiq's own keys beside a bare `queues` set (`processes`,
    /// `stat:processed`), whose type is asked: what tells Sidekiq's
    /// registry from an app's own set named `queues`.
    pub(super) signs: Vec<Vec<u8>>,
}

impl Marks {
    /// Keeps at most `max` marks to read (the source's `max_keys`): the
    /// sets first (registries and bindings, few), then the `meta` hashes,
    /// then Bull's `id`s, each in name order; returns the others, which
    /// are not read. (The two [`SIGNS`] are not counted: fixed names.)
    pub(super) fn keep_within(&mut self, max: usize) -> Vec<Vec<u8>> {
        let mut left = max;
        let mut beyond = Vec::new();
        for list in [&mut self.sets, &mut self.metas, &mut self.bull_ids] {
            list.sort_unstable();
            list.dedup();
            let keep = list.len().min(left);
            beyond.extend(list.drain(keep..));
            left -= keep;
        }
        beyond
    }
}

/// Sidekiq's keys at the bare names beside its `queues` registry, with the
/// type Sidekiq gives them: the live processes' set, the processed total.
const SIGNS: [(&[u8], &str); 2] = [(b"processes", "set"), (b"stat:processed", "string")];

/// Whether `k` is one of Sidekiq's [`SIGNS`].
fn is_sign(k: &[u8]) -> bool {
    SIGNS.iter().any(|(n, _)| *n == k)
}

/// The `<prefix>:<name>:id` keys to probe for Bull queues: one per
/// `<prefix>:<name>` that has a list or zset named like one of Bull's keys,
/// at most `limit` (the source's `max_keys`), so a keyspace of such names
/// costs a bounded number of `GET`s.
pub(super) fn bull_candidates(keys: &BTreeMap<Vec<u8>, Candidate>, limit: usize) -> Vec<Vec<u8>> {
    let mut ids = BTreeSet::new();
    for (k, c) in keys {
        if !matches!(c.state, KeyState::Typed(KeyType::List | KeyType::Zset)) {
            continue;
        }
        if let Some((prefix, name)) = bull::queue_of_part(k) {
            ids.insert(key(&[prefix, b":", name, b":id"]));
            if ids.len() >= limit {
                break;
            }
        }
    }
    ids.into_iter().collect()
}

/// Whether `k` is named like a library's mark: a `meta` hash, a registry,
/// a kombu binding table, or one of Sidekiq's [`SIGNS`].
pub(super) fn is_mark(k: &[u8]) -> bool {
    is_meta(k) || registry_prefix(k).is_some() || binding(k).is_some() || is_sign(k)
}

/// The marks a pass kept, split by the read each gets.
pub(super) fn marks_of(marks: Vec<Vec<u8>>, evidence: Vec<Vec<u8>>) -> Marks {
    let (signs, marks): (Vec<_>, Vec<_>) = marks.into_iter().partition(|k| is_sign(k));
    let (metas, sets) = marks.into_iter().partition(|k| is_meta(k));
    Marks {
        metas,
        sets,
        bull_ids: Vec::new(),
        evidence,
        signs,
    }
}

/// Marks known by name, split by the read each gets: `meta` hashes,
/// registries and kombu bindings, and Bull's `id` keys (the rest).
pub(super) fn marks_named(names: Vec<Vec<u8>>) -> Marks {
    let (marks, bull_ids): (Vec<_>, Vec<_>) = names.into_iter().partition(|k| is_mark(k));
    Marks {
        bull_ids,
        ..marks_of(marks, Vec::new())
    }
}

/// Whether `k` is named like a BullMQ `meta` hash.
fn is_meta(k: &[u8]) -> bool {
    k.ends_with(b":meta")
}

/// What the marks hold.
#[derive(Debug, Default)]
pub struct Seen {
    /// Registry and binding sets with their members, by name.
    sets: BTreeMap<Vec<u8>, Vec<Vec<u8>>>,
    /// `meta` hashes that carry BullMQ's marks.
    bullmq: BTreeSet<Vec<u8>>,
    /// `id` keys that hold an integer (Bull's job counter).
    pub(super) bull_ids: BTreeSet<Vec<u8>>,
    /// Marks whose read Redis refused or failed (`NOPERM`...), with why:
    /// whose keys those beside them are is unknown ([`withheld`]).
    pub(super) unread: BTreeMap<Vec<u8>, Reason>,
    /// Marks not read for a bound of discovery's work (beyond `max_keys`,
    /// a set over the cap): unknown as the `unread` ones are, but counted
    /// as dropped keys, not as errors.
    pub(super) bounded: BTreeMap<Vec<u8>, Bound>,
    /// One of Sidekiq's [`SIGNS`] is there, with Sidekiq's type.
    sidekiq_signs: bool,
}

impl Seen {
    /// The unread marks whose library's queue names cannot be told from
    /// key names: registries, `meta` hashes, Bull `id`s. (A kombu binding's
    /// queues are the lists under its prefix, which are withheld by name.)
    pub fn names_unknown(&self) -> Vec<String> {
        self.unread
            .keys()
            .filter(|m| binding(m).is_none())
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

    /// Whether `mark` went unread (refused, or for a bound).
    fn not_read(&self, mark: &[u8]) -> bool {
        self.unread.contains_key(mark) || self.bounded.contains_key(mark)
    }

    /// Notes the marks `beyond` [`Marks::keep_within`]'s `max`, not read;
    /// a Bull `id` whose `meta` beside it says BullMQ's, or went unread
    /// itself, is left out: it would tell nothing more.
    pub(super) fn beyond(&mut self, beyond: Vec<Vec<u8>>, max: usize) {
        let (ids, marks): (Vec<_>, Vec<_>) = beyond.into_iter().partition(|k| !is_mark(k));
        for m in marks {
            self.bounded.insert(m, Bound::MaxKeys(max));
        }
        for id in ids {
            let Some(base) = id.strip_suffix(b":id") else {
                continue;
            };
            let meta = key(&[base, b":meta"]);
            if !self.bullmq.contains(&meta) && !self.not_read(&meta) {
                self.bounded.insert(id, Bound::MaxKeys(max));
            }
        }
    }

    /// What recognition reads in the sets, by set: a registry's members,
    /// a binding table's queues (with their separator; an event receiver's
    /// binding, which comes and goes with every `celery events` or Flower,
    /// is left out), sorted; sets with none are left out (a set Redis holds
    /// is never empty: an empty read is a missing key). Library rounds
    /// compare it with the scan's.
    pub(super) fn set_members(&self) -> BTreeMap<Vec<u8>, Vec<Vec<u8>>> {
        self.sets
            .iter()
            .filter_map(|(name, members)| {
                let mut view: Vec<Vec<u8>> = match binding(name) {
                    Some(_) => members
                        .iter()
                        .filter_map(|m| binding_queue(m))
                        .map(|(q, sep)| key(&[sep.as_bytes(), b"\0", q.as_bytes()]))
                        .collect(),
                    None => members.clone(),
                };
                view.sort_unstable();
                view.dedup();
                (!view.is_empty()).then(|| (name.clone(), view))
            })
            .collect()
    }

    /// [`Seen::set_members`] of the sets that mark a library: a registry
    /// an entry of `entries` came from, a binding table (its work queues),
    /// and the registries libraries keep under a `fixed` name. A set named
    /// like a registry that marks no library (an app's own `<p>:queues`)
    /// is left out, so its changes make no library round a scan.
    pub(super) fn library_set_members(
        &self,
        entries: &[(PresetSpec, Vec<Unit>)],
        fixed: &[&[u8]],
    ) -> BTreeMap<Vec<u8>, Vec<Vec<u8>>> {
        let registries: BTreeSet<Vec<u8>> = entries
            .iter()
            .filter_map(|(spec, _)| registry_of(&spec.preset))
            .collect();
        let mut members = self.set_members();
        members.retain(|name, _| {
            binding(name).is_some() || fixed.contains(&name.as_slice()) || registries.contains(name)
        });
        members
    }

    /// Adds what a later read of more marks saw.
    pub(super) fn extend(&mut self, more: Seen) {
        self.sets.extend(more.sets);
        self.bullmq.extend(more.bullmq);
        self.bull_ids.extend(more.bull_ids);
        self.unread.extend(more.unread);
        self.bounded.extend(more.bounded);
        self.sidekiq_signs |= more.sidekiq_signs;
    }
}

/// The names some unread marks may hide from the scaler.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hides {
    /// Any name: a registry's members are unknown.
    pub any: bool,
    /// The `queue` labels of the queues a `meta` hash or Bull `id` names:
    /// `<name>`, and `<prefix>:<name>` (its label beside a queue of that
    /// name at another prefix).
    pub names: BTreeSet<String>,
}

/// Which names the unread `marks` may hide (pure): any for a registry (its
/// members are unknown); the queue a `<prefix>:<name>:meta` or `:id` names;
/// none for a kombu binding (its queues are lists, held back by name).
pub fn hides<'a>(marks: impl Iterator<Item = &'a [u8]>) -> Hides {
    let mut out = Hides::default();
    for mark in marks {
        if binding(mark).is_some() {
            continue;
        }
        let base = mark
            .strip_suffix(b":meta")
            .or_else(|| mark.strip_suffix(b":id"));
        match base.and_then(|b| Some((b, b.iter().rposition(|c| *c == b':')?))) {
            Some((base, at)) if registry_prefix(mark).is_none() => {
                out.names.insert(display_key(&base[at + 1..]));
                out.names.insert(display_key(base));
            }
            _ => out.any = true,
        }
    }
    out
}

/// Pairs the marks with what their reads found (pure): `sets`, the
/// bounded reads of the sets ([`super::bounded::read_sets`]); `replies`,
/// those of the `meta` hashes, then Bull's `id`s, then the [`SIGNS`]'
/// `TYPE`. A key of another type (`WRONGTYPE`) or a reply of another
/// shape marks nothing; a read Redis refused or failed is
/// [`Seen::unread`]; a set over the cap, [`Seen::bounded`].
pub(super) fn seen(marks: Marks, sets: Vec<SetRead>, replies: &[Value]) -> Seen {
    let (meta_replies, rest) = replies.split_at(marks.metas.len().min(replies.len()));
    let (id_replies, sign_replies) = rest.split_at(marks.bull_ids.len().min(rest.len()));
    let mut out = Seen::default();
    let metas = answered(marks.metas, meta_replies, &mut out.unread);
    let ids = answered(marks.bull_ids, id_replies, &mut out.unread);
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
    out.sidekiq_signs = marks.signs.iter().zip(sign_replies).any(|(k, v)| {
        let want = SIGNS.iter().find(|(n, _)| *n == k.as_slice()).map(|s| s.1);
        want.is_some() && super::reply::as_str(v) == want
    });
    for (meta, v) in metas {
        if bullmq::has_marks(v) == Ok(true) {
            out.bullmq.insert(meta);
        }
    }
    for (id, v) in ids {
        if super::reply::as_u64(v).is_some() {
            out.bull_ids.insert(id);
        }
    }
    out
}

/// `names` paired with their `replies`, those Redis answered; the others
/// go to `unread`, with why.
fn answered<'a>(
    names: Vec<Vec<u8>>,
    replies: &'a [Value],
    unread: &mut BTreeMap<Vec<u8>, Reason>,
) -> Vec<(Vec<u8>, &'a Value)> {
    names
        .into_iter()
        .zip(replies)
        .filter_map(|(name, v)| match super::reply::refusal(v) {
            Some(reason) => {
                unread.insert(name, reason);
                None
            }
            None => Some((name, v)),
        })
        .collect()
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

/// The registry set an entry of `preset` is read from, if it has one.
fn registry_of(preset: &Preset) -> Option<Vec<u8>> {
    match preset {
        Preset::Rq { prefix } | Preset::Sidekiq { prefix, .. } | Preset::Asynq { prefix } => {
            Some(super::registry::registry_key(preset, prefix))
        }
        _ => None,
    }
}

/// The prefix of a registry set's name: `""` for `queues`, `<p>` for
/// `<p>:queues`.
fn registry_prefix(k: &[u8]) -> Option<&[u8]> {
    if k == b"queues" {
        return Some(b"");
    }
    k.strip_suffix(b":queues").filter(|p| !p.is_empty())
}

/// Celery's default `event_exchange`: its bindings are event receivers'
/// queues, never work.
const EVENT_EXCHANGE: &[u8] = b"celeryev";

/// `(global_keyprefix, exchange)` of a kombu binding table, unless the
/// exchange is a `pidbox` one (remote control traffic) or Celery's event
/// exchange `celeryev`: neither carries work.
fn binding(k: &[u8]) -> Option<(&[u8], &[u8])> {
    let at = k.windows(BINDING.len()).position(|w| w == BINDING)?;
    let exchange = &k[at + BINDING.len()..];
    let work = !exchange.is_empty() && !exchange.ends_with(b"pidbox") && exchange != EVENT_EXCHANGE;
    work.then_some((&k[..at], exchange))
}

/// Whether a binding `routing_key`, `queue` is a Celery event receiver's,
/// whatever the `event_exchange` is called: `EventReceiver` binds
/// `<event_queue_prefix>.<uuid4>` with `#` (`celery events`, Flower) or
/// `worker.#` (every worker's gossip). Such queues live on `PUBLISH` (the
/// event exchange is fanout on Redis), never hold work, and a killed
/// worker's binding stays for good.
fn event_receiver(routing_key: &[u8], queue: &[u8]) -> bool {
    let uuid = |u: &[u8]| {
        u.len() == 36
            && u.iter().enumerate().all(|(i, b)| match i {
                8 | 13 | 18 | 23 => *b == b'-',
                _ => b.is_ascii_hexdigit(),
            })
    };
    let named = queue
        .len()
        .checked_sub(37)
        .is_some_and(|at| at > 0 && queue[at] == b'.' && uuid(&queue[at + 1..]));
    matches!(routing_key, b"#" | b"worker.#") && named
}

/// Recognises the libraries the marks show (pure): entries sorted by
/// library, then prefix; and the keys they consume.
pub fn recognise(seen: &Seen, found: &Candidates) -> Recognition {
    let keys = &found.keys;
    let mut entries: Vec<(PresetSpec, Vec<Unit>)> = Vec::new();
    // (key prefix, sep) → queues.
    let mut celery: BTreeMap<(Vec<u8>, &str), BTreeSet<String>> = BTreeMap::new();
    for (set, members) in &seen.sets {
        if let Some((prefix, _)) = binding(set) {
            for m in members {
                if let Some((q, sep)) = binding_queue(m) {
                    celery.entry((prefix.to_vec(), sep)).or_default().insert(q);
                }
            }
            continue;
        }
        let Some(prefix) = registry_prefix(set) else {
            continue;
        };
        if let Some(preset) = registry_library(prefix, members, keys, seen.sidekiq_signs) {
            let units = registry_units(&preset, members.clone());
            entries.push((spec(preset), units));
        }
    }
    let mut bull: BTreeMap<&[u8], Vec<Unit>> = BTreeMap::new();
    for meta in &seen.bullmq {
        if let Some((prefix, name)) = bullmq::queue_of_meta(meta) {
            bull.entry(prefix)
                .or_default()
                .push(Unit::Queue(name.to_vec()));
        }
    }
    for (prefix, units) in bull {
        if let Ok(prefix) = std::str::from_utf8(prefix) {
            let preset = Preset::Bullmq {
                prefix: prefix.to_string(),
                stalled_check_limit: DEFAULT_STALLED_CHECK_LIMIT,
            };
            entries.push((spec(preset), units));
        }
    }
    // Bull: an integer `id` where no BullMQ `meta` says the queue is BullMQ's.
    let mut old_bull: BTreeMap<&[u8], Vec<Unit>> = BTreeMap::new();
    for id in &seen.bull_ids {
        let Some(base) = id.strip_suffix(b":id") else {
            continue;
        };
        // BullMQ's, or unknown: its `meta` could not be read.
        let meta = key(&[base, b":meta"]);
        if seen.bullmq.contains(&meta) || seen.not_read(&meta) {
            continue;
        }
        if let Some((prefix, name)) = bull::queue_of_part(id) {
            old_bull
                .entry(prefix)
                .or_default()
                .push(Unit::Queue(name.to_vec()));
        }
    }
    for (prefix, units) in old_bull {
        if let Ok(prefix) = std::str::from_utf8(prefix) {
            let preset = Preset::Bull {
                prefix: prefix.to_string(),
                stalled_check_limit: DEFAULT_STALLED_CHECK_LIMIT,
            };
            entries.push((spec(preset), units));
        }
    }
    for ((prefix, sep), queues) in celery {
        let Ok(prefix) = String::from_utf8(prefix) else {
            continue;
        };
        let preset = Preset::Celery {
            priority_steps: celery_steps(&prefix, sep, &queues, keys),
            queues: queues.into_iter().collect(),
            sep: sep.to_string(),
            prefix,
            visibility_timeout: CELERY_VISIBILITY_TIMEOUT,
        };
        let units = fixed_queues(&preset);
        entries.push((spec(preset), units));
    }
    entries.sort_by_key(|(s, _)| s.preset.kind());
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
/// bound) may own (pure): under
/// `<prefix>:<name>:` for a `meta` hash or Bull `id` (every key of that
/// BullMQ or Bull queue); under `<p>:` for a `<p>:queues` registry (RQ's,
/// asynq's or a Sidekiq namespace's keys), Sidekiq's own keys for
/// `queues`; for a kombu binding table, every list under its
/// `global_keyprefix` and kombu's `unacked_index` (any list may be a
/// Celery queue of that exchange).
fn withheld<'a>(
    unread: impl Iterator<Item = &'a Vec<u8>>,
    keys: &BTreeMap<Vec<u8>, Candidate>,
) -> BTreeSet<Vec<u8>> {
    let mut owned = BTreeSet::new();
    for mark in unread {
        if let Some(base) = mark
            .strip_suffix(b":meta")
            .or_else(|| mark.strip_suffix(b":id"))
        {
            owned.extend(under(keys, &key(&[base, b":"])).cloned());
        } else if let Some((prefix, _)) = binding(mark) {
            let index = key(&[prefix, b"unacked_index"]);
            owned.extend(
                under(keys, prefix)
                    .filter(|k| type_at(keys, k) == Some(KeyType::List) || **k == index)
                    .cloned(),
            );
        } else if mark.as_slice() == b"queues" {
            owned.extend(under(keys, b"queue:").cloned());
            for k in [&b"schedule"[..], b"retry", b"dead"] {
                owned.extend(keys.get_key_value(k).map(|(k, _)| k.clone()));
            }
        } else if let Some(prefix) = registry_prefix(mark) {
            owned.extend(under(keys, &key(&[prefix, b":"])).cloned());
        }
    }
    owned
}

/// A `- preset:` entry for `preset`, without `counters:`.
fn spec(preset: Preset) -> PresetSpec {
    PresetSpec {
        preset,
        counters: None,
    }
}

/// The library whose registry `<prefix>:queues` (or `queues`) holds
/// `members`, if the keys beside it say which (see the module docs). A
/// bare `queues` is Sidekiq's only beside a `queue:<member>` list or one
/// of Sidekiq's [`SIGNS`] (`sidekiq_signs`): a set an app calls `queues`
/// would otherwise make its members Sidekiq queues, and its own
/// `schedule`, `retry` or `dead` zsets Sidekiq's.
fn registry_library(
    prefix: &[u8],
    members: &[Vec<u8>],
    keys: &BTreeMap<Vec<u8>, Candidate>,
    sidekiq_signs: bool,
) -> Option<Preset> {
    let text = std::str::from_utf8(prefix).ok()?.to_string();
    if members.is_empty() || members.iter().any(Vec::is_empty) {
        return None;
    }
    if !prefix.is_empty() {
        let full = key(&[prefix, b":queue:"]);
        let rq = members.iter().all(|m| {
            m.strip_prefix(full.as_slice())
                .is_some_and(|n| !n.is_empty())
        });
        if rq {
            return Some(Preset::Rq { prefix: text });
        }
        let asynq = text == default_prefix(PresetKind::Asynq)
            || members.iter().any(|m| {
                under(keys, &key(&[prefix, b":{", m, b"}:"]))
                    .next()
                    .is_some()
            });
        if asynq {
            return Some(Preset::Asynq { prefix: text });
        }
    }
    let queue_list = members
        .iter()
        .any(|m| type_at(keys, &sidekiq::k(&text, &key(&[b"queue:", m]))) == Some(KeyType::List));
    let global_zset = [&b"schedule"[..], b"retry", b"dead"]
        .iter()
        .any(|n| type_at(keys, &sidekiq::k(&text, n)) == Some(KeyType::Zset));
    let evidence = match prefix.is_empty() {
        true => queue_list || sidekiq_signs,
        false => queue_list || global_zset,
    };
    evidence.then_some(Preset::Sidekiq {
        prefix: text,
        stalled_check_limit: DEFAULT_STALLED_CHECK_LIMIT,
    })
}

/// The separator Celery's docs suggest with `priority_steps` of their own
/// (`broker_transport_options = {"sep": ":", ...}`), beside kombu's default.
const COLON_SEP: &str = ":";

/// The queue of a binding member `routing_key<sep>pattern<sep>queue`, and the
/// `sep`: kombu's default `␆␖` when the member holds it, else `:` when the
/// member has exactly three `:`-separated parts (a routing key or queue
/// holding a `:` is then ambiguous, and not recognised). `None` for any
/// other shape, a name that is not text, or a Celery event receiver's
/// binding ([`event_receiver`]).
fn binding_queue(member: &[u8]) -> Option<(String, &'static str)> {
    let default = CELERY_SEP.as_bytes();
    let holds_default = member.windows(default.len()).any(|w| w == default);
    let sep = if holds_default { CELERY_SEP } else { COLON_SEP };
    let s = sep.as_bytes();
    let mut parts = Vec::new();
    let mut rest = member;
    while let Some(at) = rest.windows(s.len()).position(|w| w == s) {
        parts.push(&rest[..at]);
        rest = &rest[at + s.len()..];
    }
    parts.push(rest);
    match parts.as_slice() {
        [rk, _, queue] if !queue.is_empty() && !event_receiver(rk, queue) => {
            String::from_utf8(queue.to_vec()).ok().map(|q| (q, sep))
        }
        _ => None,
    }
}

/// kombu's default priority steps, plus every `<queue><sep><n>` list found
/// (a `priority_steps` of the application's own, such as `range(10)`).
fn celery_steps(
    prefix: &str,
    sep: &str,
    queues: &BTreeSet<String>,
    keys: &BTreeMap<Vec<u8>, Candidate>,
) -> Vec<u8> {
    let mut steps: BTreeSet<u8> = CELERY_PRIORITY_STEPS.into_iter().collect();
    for q in queues {
        let base = key(&[prefix.as_bytes(), q.as_bytes(), sep.as_bytes()]);
        for k in under(keys, &base) {
            let step = std::str::from_utf8(&k[base.len()..])
                .ok()
                .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse::<u8>().ok());
            if let (Some(n), Some(KeyType::List)) = (step, type_at(keys, k)) {
                steps.insert(n);
            }
        }
    }
    steps.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn seen(sets: &[(&str, &[&str])], bullmq: &[&str]) -> Seen {
        Seen {
            sets: sets
                .iter()
                .map(|(k, m)| {
                    let members = m.iter().map(|s| s.as_bytes().to_vec()).collect();
                    (k.as_bytes().to_vec(), members)
                })
                .collect(),
            bullmq: bullmq.iter().map(|s| s.as_bytes().to_vec()).collect(),
            bull_ids: BTreeSet::new(),
            unread: BTreeMap::new(),
            bounded: BTreeMap::new(),
            sidekiq_signs: false,
        }
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
        let mut s = refused(seen(&[], &[]), &["secret:jobs:meta"]);
        // Bull's `id` beside it is an integer: still not Bull's.
        s.bull_ids.insert(b"secret:jobs:id".to_vec());
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
            metas: vec![b"a:q:meta".to_vec(), b"b:q:meta".to_vec()],
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
        assert!(s.bullmq.is_empty());
    }

    fn names(r: &Recognition) -> Vec<(PresetKind, String, Vec<Unit>)> {
        r.entries
            .iter()
            .map(|(s, u)| {
                let prefix = s.preset.prefix().unwrap_or_default().to_string();
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
                (PresetKind::Sidekiq, "ns".into(), vec![q("x"), Unit::Shared]),
                (
                    PresetKind::Sidekiq,
                    "".into(),
                    vec![q("(all)"), q("mail"), Unit::Shared]
                ),
                (PresetKind::Rq, "rq".into(), vec![q("default")]),
                (PresetKind::Asynq, "asynq".into(), vec![q("critical")]),
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
                (PresetKind::Bullmq, "bull".into(), vec![q("mail")]),
                (PresetKind::Bullmq, "my:app".into(), vec![q("jobs")]),
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
        assert_eq!(
            bull_candidates(&found.keys, 100),
            [
                b"bull:new:id".to_vec(),
                b"bull:old:id".to_vec(),
                b"my:app:paused:id".to_vec(),
                b"plain:thing:id".to_vec(),
            ]
        );
        assert_eq!(bull_candidates(&found.keys, 2).len(), 2);
        let mut s = seen(&[], &["bull:new:meta"]);
        // `bull:new` has an `id` too, but its BullMQ `meta` says BullMQ;
        // `plain:thing:id` held no integer, so it was never seen.
        s.bull_ids = ["bull:old:id", "bull:new:id", "my:app:paused:id"]
            .iter()
            .map(|k| k.as_bytes().to_vec())
            .collect();
        let r = recognise(&s, &found);
        assert_eq!(
            names(&r),
            [
                (PresetKind::Bullmq, "bull".into(), vec![q("new")]),
                (PresetKind::Bull, "bull".into(), vec![q("old")]),
                (PresetKind::Bull, "my:app".into(), vec![q("paused")]),
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
        let Preset::Celery {
            queues,
            priority_steps,
            ..
        } = &spec.preset
        else {
            panic!("{spec:?}")
        };
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
        assert!(binding(b"_kombu.binding.celeryev").is_none());
        assert!(binding(b"app:_kombu.binding.celeryev").is_none());
        assert!(binding(b"_kombu.binding.celeryev2").is_some());
        let r = recognise(&s, &keys(&[]));
        let queues: Vec<(String, Vec<String>)> = r
            .entries
            .iter()
            .map(|(spec, _)| match &spec.preset {
                Preset::Celery { prefix, queues, .. } => (prefix.clone(), queues.clone()),
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
        let Preset::Celery {
            queues,
            priority_steps,
            sep,
            prefix,
            ..
        } = &spec.preset
        else {
            panic!("{spec:?}")
        };
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
            metas: vec![
                b"a:q:meta".to_vec(),
                b"b:q:meta".to_vec(),
                b"c:q:meta".to_vec(),
            ],
            sets: vec![b"queues".to_vec(), b"x:queues".to_vec()],
            bull_ids: vec![b"old:q:id".to_vec(), b"app:x:id".to_vec()],
            evidence: Vec::new(),
            signs: vec![b"processes".to_vec(), b"stat:processed".to_vec()],
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
        assert!(!s.sidekiq_signs);
        assert_eq!(
            s.bull_ids.iter().cloned().collect::<Vec<_>>(),
            [b"old:q:id".to_vec()]
        );
        assert_eq!(
            s.bullmq.into_iter().collect::<Vec<_>>(),
            [b"a:q:meta".to_vec(), b"b:q:meta".to_vec()]
        );
        assert_eq!(s.sets[&b"queues".to_vec()], [b"mail".to_vec()]);
        assert_eq!(s.sets.len(), 1);
    }

    #[test]
    fn the_evidence_check_costs_a_name_its_length_not_the_registries_size() {
        // A registry of 1,000 bare names at a prefix that is not asynq's,
        // and 100,000 names under asynq-shaped `work:{<q>}:`, half of them
        // a member's.
        let members: Vec<String> = (0..1000).map(|i| format!("q{i}")).collect();
        let refs: Vec<&str> = members.iter().map(String::as_str).collect();
        let s = seen(&[("work:queues", &refs)], &[]);
        let names: Vec<Vec<u8>> = (0..100_000)
            .map(|i| format!("work:{{q{}}}:pending:{i}", i % 2000).into_bytes())
            .collect();
        let started = std::time::Instant::now();
        let wanted = evidence(&s, names);
        let took = started.elapsed();
        // Each member's `work:queue:<m>`, the namespace's three zsets, and
        // the 50,000 names under a member's braces.
        assert_eq!(wanted.len(), 1000 + 3 + 50_000);
        assert!(wanted.contains(&b"work:{q999}:pending:999".to_vec()));
        assert!(!wanted.contains(&b"work:{q1000}:pending:1000".to_vec()));
        // Names × members (10^8 prefix comparisons) took 13.8 s here in a
        // debug build on a busy machine; by each name's own prefixes, 0.6 s.
        assert!(took < std::time::Duration::from_secs(3), "{took:?}");
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
        let all: Vec<&[u8]> = braced(b"a:{b}:c:{d}:e").collect();
        // From the first `:{`, and from the second.
        assert_eq!(all, [&b"a:{b}:"[..], b"a:{b}:c:{d}:", b"a:{b}:c:{d}:"]);
        assert_eq!(braced(b"plain:key").count(), 0);
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
