//! Celery on kombu's Redis transport: a list per queue and priority step
//! (`<q>`, `<q><sep><step>`), and the broker-wide `unacked` hash and
//! `unacked_index` zset, reported once under the queue `(all)`.
//!
//! Celery's messages carry no enqueue time of their own (protocol 2's
//! headers have `eta`, `expires`, ids; kombu's properties a uuid delivery
//! tag), so the oldest age is known only where the producers stamp one:
//! an [`ENQUEUED_AT`] header, which a `before_task_publish` handler adds
//! (docs/keda.md). kombu `LPUSH`es and workers `BRPOP`, so each priority
//! list's oldest message is its tail (`LINDEX <list> -1`, O(1)); the
//! queue's age is the oldest of those tails, and unknown if any tail has
//! no stamp.

use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

use super::super::library::{
    ALL_QUEUES, Follow, Hidden, JobState, KeyType, Keys, Library, MarkRead, OptionError, Owned,
    Preset, PresetKind, QueueSample, Recognise, Seen, Stage, TimeUnit, Unit, Written, below, cmd,
    count, facts, json_stamp_seconds, kept_elsewhere, key, options_of, prefix_or, preset_sample,
    set_state, shared_sample, sorted, sum, timeout, type_at, under,
};
use std::time::Duration;

use redis::Value;

/// The states kombu keeps for all queues together, under `(all)`: the
/// `unacked` hash (reserved and running tasks: active).
pub const SHARED_STATES: &[JobState] = &[JobState::Active];

/// The states kept per queue: its lists (waiting).
pub const QUEUE_STATES: &[JobState] = &[JobState::Waiting];

/// Round 1: one LLEN per priority step; two commands for `(all)`.
pub fn plan(
    prefix: &str,
    sep: &str,
    steps: &[u8],
    unit: &Unit,
    now: f64,
    visibility_timeout: Duration,
) -> Vec<redis::Cmd> {
    let p = prefix.as_bytes();
    let Unit::Queue(q) = unit else {
        let mut stalled = cmd("ZCOUNT", &key(&[p, b"unacked_index"]));
        stalled
            .arg("-inf")
            .arg(below(now - visibility_timeout.as_secs_f64()));
        return vec![cmd("HLEN", &key(&[p, b"unacked"])), stalled];
    };
    lists(p, sep, steps, q)
        .iter()
        .map(|list| cmd("LLEN", list))
        .collect()
}

/// A queue's lists, one per priority step, in `steps`' order.
fn lists(prefix: &[u8], sep: &str, steps: &[u8], q: &[u8]) -> Vec<Vec<u8>> {
    steps
        .iter()
        .map(|step| {
            if *step == 0 {
                key(&[prefix, q])
            } else {
                key(&[prefix, q, sep.as_bytes(), step.to_string().as_bytes()])
            }
        })
        .collect()
}

/// The header a producer stamps each task with when it sends it (unix
/// seconds, as `time.time()` gives; milliseconds or RFC 3339 text are read
/// too), at this JSON pointer of kombu's message.
pub const ENQUEUED_AT: &str = "/headers/enqueued_at";

/// What an unknown age of a Celery queue means, for KEDA's message.
const AGE_UNKNOWN: &str = ": Celery's messages carry no enqueue time, and its oldest \
     waiting task has no enqueued_at header (a before_task_publish handler in every \
     producer stamps it: docs/keda.md), or Redis refused the read";

/// Reads [`plan`]'s replies (pure): the waiting count, and a `LINDEX -1`
/// follow-up per non-empty list for the oldest age ([`settle`]).
pub fn read(prefix: &str, sep: &str, steps: &[u8], unit: &Unit, r: &[Value]) -> Stage {
    let Unit::Queue(q) = unit else {
        let mut s = shared_sample(KIND);
        kept_elsewhere(&mut s, QUEUE_STATES);
        let at = |i: usize| r.get(i).unwrap_or(&Value::Nil);
        // Reserved (prefetched) tasks, and running ones under acks_late.
        set_state(&mut s, JobState::Active, count(at(0)));
        facts(&mut s).stalled = count(at(1));
        return Stage::done(s);
    };
    let mut s = preset_sample(KIND, q);
    kept_elsewhere(&mut s, SHARED_STATES);
    facts(&mut s).age_unknown_why = Some(AGE_UNKNOWN);
    let all: Vec<&Value> = r.iter().collect();
    let waiting = sum(&all);
    set_state(&mut s, JobState::Waiting, waiting);
    if waiting == Some(0) {
        // Nothing waits: no job is late.
        s.oldest_age_seconds = Some(0.0);
        return Stage::done(s);
    }
    let mut follow = Vec::new();
    if waiting.is_some() {
        for (list, n) in lists(prefix.as_bytes(), sep, steps, q).iter().zip(r) {
            if count(n).is_some_and(|n| n > 0) {
                let mut tail = cmd("LINDEX", list);
                tail.arg(-1);
                follow.push((tail, Follow::Own));
            }
        }
    }
    Stage { sample: s, follow }
}

/// Round 2 (pure): the oldest of the non-empty lists' tails, each a
/// message whose [`ENQUEUED_AT`] header says when it was sent. A tail
/// without it (no stamping producer, a refused read) leaves the age
/// unknown: the oldest may be that one. A list emptied since round 1
/// (`nil`) holds nothing older.
pub fn settle(s: &mut QueueSample, tails: &[Value], now: f64) {
    let mut oldest = Some(0.0_f64);
    for tail in tails {
        if *tail == Value::Nil {
            continue;
        }
        let age = json_stamp_seconds(tail, ENQUEUED_AT, TimeUnit::Auto).map(|t| (now - t).max(0.0));
        oldest = oldest.zip(age).map(|(a, b)| a.max(b));
    }
    s.oldest_age_seconds = oldest;
}

/// Celery's `preset` name.
pub const KIND: PresetKind = PresetKind::named("celery");

/// kombu's default `priority_steps` (`PRIORITY_STEPS`).
pub const PRIORITY_STEPS: [u8; 4] = [0, 3, 6, 9];

/// kombu's default `sep` between a queue name and its priority step.
pub const SEP: &str = "\x06\x16";

/// kombu's default `visibility_timeout`.
pub const VISIBILITY_TIMEOUT: Duration = Duration::from_secs(3600);

/// The options of a `- preset: celery` entry: the one declaration of the
/// words it takes (`Library::options`, and the refusal of any other).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    /// `queues:`, the queue names (`celery` by default).
    #[serde(default)]
    queues: Option<Vec<String>>,
    /// `priority_steps:`, kombu's `priority_steps` (0, 3, 6, 9 by default).
    #[serde(default)]
    priority_steps: Option<Vec<u8>>,
    /// `sep:`, kombu's `sep` between a queue name and its step.
    #[serde(default)]
    sep: Option<String>,
    /// `prefix:`, kombu's `global_keyprefix` (none by default).
    #[serde(default)]
    prefix: Option<String>,
    /// `visibility_timeout:`, kombu's (1 h by default), a duration.
    #[serde(default)]
    visibility_timeout: Option<String>,
}

/// Celery on kombu's Redis transport: named queues (Celery has no
/// registry; default `[celery]`), priority lists, and kombu's `unacked`
/// under `(all)`.
pub struct Celery;

impl Library for Celery {
    fn kind(&self) -> PresetKind {
        KIND
    }

    fn title(&self) -> &'static str {
        "Celery"
    }

    fn options(&self) -> &'static [&'static str] {
        options_of::<Options>()
    }

    fn configure(&self, written: &Written) -> Result<Preset, OptionError> {
        let given: Options = written.read()?;
        let mut preset = Preset::new(
            self.kind(),
            &prefix_or(given.prefix, self.default_prefix())?,
        );
        let queues = given.queues.unwrap_or_else(|| vec!["celery".into()]);
        if queues.is_empty() || queues.iter().any(String::is_empty) {
            return Err("queues: must list non-empty queue names".into());
        }
        let steps = given
            .priority_steps
            .unwrap_or_else(|| PRIORITY_STEPS.to_vec());
        if steps.first() != Some(&0) || steps.windows(2).any(|w| w[0] >= w[1]) {
            return Err("priority_steps: must start at 0 and be strictly increasing".into());
        }
        let visibility = timeout("visibility_timeout", given.visibility_timeout.as_deref())?;
        preset.visibility_timeout = visibility.unwrap_or(VISIBILITY_TIMEOUT);
        preset.queues = queues;
        preset.priority_steps = steps;
        preset.sep = given.sep.unwrap_or_else(|| SEP.into());
        Ok(preset)
    }

    /// The queues always; `sep` and `priority_steps` where they differ
    /// from kombu's defaults.
    fn printed_options(&self, preset: &Preset, quote: fn(&str) -> String) -> Vec<String> {
        let qs: Vec<String> = preset.queues.iter().map(|q| quote(q)).collect();
        let mut out = vec![format!("queues: [{}]", qs.join(", "))];
        if preset.sep != SEP {
            out.push(format!("sep: {}", quote(&preset.sep)));
        }
        if preset.priority_steps.as_slice() != PRIORITY_STEPS {
            let steps: Vec<String> = preset.priority_steps.iter().map(u8::to_string).collect();
            out.push(format!("priority_steps: [{}]", steps.join(", ")));
        }
        out
    }

    fn fixed_queues(&self, preset: &Preset) -> Vec<Unit> {
        let mut v: Vec<Unit> = preset
            .queues
            .iter()
            .map(|q| Unit::Queue(q.as_bytes().to_vec()))
            .collect();
        v.push(Unit::Shared);
        sorted(v)
    }

    fn fixed_names(&self, preset: &Preset) -> Vec<String> {
        let mut v = preset.queues.clone();
        v.push(ALL_QUEUES.to_string());
        v
    }

    /// kombu's `binding_deadlines` hash.
    fn owned(&self, preset: &Preset, _: &[Unit]) -> Vec<Owned> {
        vec![Owned::Key(key(&[
            preset.prefix.as_bytes(),
            b"_kombu.binding_deadlines",
        ]))]
    }

    fn plan(&self, p: &Preset, unit: &Unit, now: f64) -> Vec<redis::Cmd> {
        plan(
            &p.prefix,
            &p.sep,
            &p.priority_steps,
            unit,
            now,
            p.visibility_timeout,
        )
    }

    fn read(&self, p: &Preset, unit: &Unit, r: &[Value], _: f64) -> Stage {
        read(&p.prefix, &p.sep, &p.priority_steps, unit, r)
    }

    fn settle(&self, _: &Preset, sample: &mut QueueSample, tails: &[Value], now: f64) {
        settle(sample, tails, now);
    }

    /// An unread binding table: every list under its `global_keyprefix`
    /// and kombu's `unacked_index` (any list may be a queue of it).
    fn withheld(&self, mark: &[u8], keys: &Keys) -> Vec<Vec<u8>> {
        let Some((prefix, _)) = binding(mark) else {
            return Vec::new();
        };
        let index = key(&[prefix, b"unacked_index"]);
        under(keys, prefix)
            .filter(|k| type_at(keys, k) == Some(KeyType::List) || **k == index)
            .cloned()
            .collect()
    }

    /// A binding's queues are lists, held back by name: it hides none.
    fn hidden(&self, mark: &[u8]) -> Option<Hidden> {
        binding(mark).map(|_| Hidden::Nothing)
    }

    fn recognition(&self) -> Option<&dyn Recognise> {
        Some(self)
    }
}

impl Recognise for Celery {
    fn fixed_marks(&self) -> &'static [&'static [u8]] {
        &[b"_kombu.binding.celery"]
    }

    /// A kombu binding table `[<global_keyprefix>]_kombu.binding.<exchange>`.
    fn mark_read(&self, key: &[u8]) -> Option<MarkRead> {
        binding(key).map(|_| MarkRead::Set)
    }

    /// A name ending in a separator and a number up to 255 (a priority
    /// list, `<queue>\x06\x16<n>` or `<queue>:<n>`).
    fn is_evidence(&self, k: &[u8]) -> bool {
        step(k).is_some()
    }

    /// The kept `<queue><sep><n>` lists of a step kombu's defaults lack,
    /// for the queues the bindings name.
    fn evidence(&self, seen: &Seen, names: &[Vec<u8>], _: &mut BTreeSet<Vec<u8>>) -> Vec<Vec<u8>> {
        let mut bases: BTreeSet<Vec<u8>> = BTreeSet::new();
        for (set, members) in seen.sets() {
            if let Some((prefix, _)) = binding(set) {
                for (q, sep) in members.iter().filter_map(|m| binding_queue(m)) {
                    bases.insert(key(&[prefix, q.as_bytes(), sep.as_bytes()]));
                }
            }
        }
        names
            .iter()
            .filter(|k| {
                step(k)
                    .is_some_and(|(base, n)| bases.contains(base) && !PRIORITY_STEPS.contains(&n))
            })
            .cloned()
            .collect()
    }

    /// The binding tables' work queues, one entry per key prefix and
    /// separator; priority lists of kombu's default steps plus any
    /// `<queue><sep><n>` list found.
    fn recognise(
        &self,
        seen: &Seen,
        keys: &Keys,
        _: &mut BTreeSet<Vec<u8>>,
    ) -> Vec<(Preset, Vec<Unit>)> {
        // (key prefix, sep) → queues.
        let mut celery: BTreeMap<(Vec<u8>, &str), BTreeSet<String>> = BTreeMap::new();
        for (set, members) in seen.sets() {
            if let Some((prefix, _)) = binding(set) {
                for m in members {
                    if let Some((q, sep)) = binding_queue(m) {
                        celery.entry((prefix.to_vec(), sep)).or_default().insert(q);
                    }
                }
            }
        }
        let mut out = Vec::new();
        for ((prefix, sep), queues) in celery {
            let Ok(prefix) = String::from_utf8(prefix) else {
                continue;
            };
            let preset = Preset {
                priority_steps: celery_steps(&prefix, sep, &queues, keys),
                queues: queues.into_iter().collect(),
                sep: sep.to_string(),
                visibility_timeout: VISIBILITY_TIMEOUT,
                ..Preset::new(KIND, &prefix)
            };
            let units = self.fixed_queues(&preset);
            out.push((preset, units));
        }
        out
    }

    /// A binding table's work queues with their separator (an event
    /// receiver's binding, which comes and goes with every `celery events`
    /// or Flower, left out), sorted.
    fn set_view(&self, set: &[u8], members: &[Vec<u8>]) -> Option<Vec<Vec<u8>>> {
        binding(set)?;
        let mut view: Vec<Vec<u8>> = members
            .iter()
            .filter_map(|m| binding_queue(m))
            .map(|(q, sep)| key(&[sep.as_bytes(), b"\0", q.as_bytes()]))
            .collect();
        view.sort_unstable();
        view.dedup();
        Some(view)
    }
}

/// The name part of kombu's binding tables.
const BINDING: &[u8] = b"_kombu.binding.";

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
    let default = SEP.as_bytes();
    let holds_default = member.windows(default.len()).any(|w| w == default);
    let sep = if holds_default { SEP } else { COLON_SEP };
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
fn celery_steps(prefix: &str, sep: &str, queues: &BTreeSet<String>, keys: &Keys) -> Vec<u8> {
    let mut steps: BTreeSet<u8> = PRIORITY_STEPS.into_iter().collect();
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

/// `(base, n)` of a name `<base><n>` whose base ends in kombu's default
/// separator or `:` and whose `n` (1-3 digits) is a priority step.
fn step(k: &[u8]) -> Option<(&[u8], u8)> {
    let digits = k.iter().rev().take_while(|b| b.is_ascii_digit()).count();
    if !(1..=3).contains(&digits) {
        return None;
    }
    let (base, n) = k.split_at(k.len() - digits);
    let sep_ok = base.ends_with(SEP.as_bytes()) || base.ends_with(COLON_SEP.as_bytes());
    let n = std::str::from_utf8(n).ok()?.parse::<u8>().ok()?;
    sep_ok.then_some((base, n))
}

#[cfg(test)]
mod tests {
    use super::super::super::test_util::*;
    use super::*;

    /// `read` with kombu's defaults (no prefix, its `sep`, steps 0 3 6 9).
    fn read_default(unit: &Unit, r: &[Value]) -> Stage {
        read("", SEP, &PRIORITY_STEPS, unit, r)
    }

    /// A kombu message JSON whose headers carry `enqueued_at`, if given.
    fn message(enqueued_at: Option<&str>) -> Value {
        let stamp = enqueued_at.map_or(String::new(), |t| format!(r#","enqueued_at":{t}"#));
        bulk(&format!(
            r#"{{"body":"W10=","headers":{{"task":"t","id":"x"{stamp}}},"properties":{{}}}}"#
        ))
    }

    #[test]
    fn priority_lists_sum_into_waiting() {
        let st = read_default(
            &Unit::Queue(b"celery".to_vec()),
            &[int(4), int(3), int(3), int(1)],
        );
        let f = st.sample.preset.as_ref().unwrap();
        assert_eq!(f.states[&JobState::Waiting], Some(11));
        // Unknown until the tails are read in round 2.
        assert_eq!(st.sample.oldest_age_seconds, None);
        let cmds = plan(
            "",
            "\x06\x16",
            &[0, 3, 6, 9],
            &Unit::Queue(b"celery".to_vec()),
            0.0,
            Duration::ZERO,
        );
        assert_eq!(
            cmds[1].get_packed_command(),
            redis::cmd("LLEN")
                .arg("celery\x06\x163")
                .get_packed_command()
        );
    }

    #[test]
    fn all_reads_unacked_and_stalled() {
        let st = read_default(&Unit::Shared, &[int(5), int(2)]);
        let f = st.sample.preset.as_ref().unwrap();
        assert_eq!(f.states[&JobState::Active], Some(5));
        assert_eq!(f.stalled, Some(2));
        let cmds = plan(
            "",
            ":",
            &[0],
            &Unit::Shared,
            5000.0,
            Duration::from_secs(3600),
        );
        assert_eq!(
            cmds[1].get_packed_command(),
            redis::cmd("ZCOUNT")
                .arg("unacked_index")
                .arg("-inf")
                .arg("(1400")
                .get_packed_command()
        );
    }

    /// Each unit holds exactly the states it says, and names the other's
    /// as kept elsewhere (what the scaler refuses when asked of it alone).
    #[test]
    fn each_unit_holds_its_states_and_names_the_others_as_elsewhere() {
        let shared = read_default(&Unit::Shared, &[int(5), int(2)])
            .sample
            .preset
            .unwrap();
        let queue = read("", SEP, &[0], &Unit::Queue(b"q".to_vec()), &[int(4)])
            .sample
            .preset
            .unwrap();
        let held = |f: &crate::snapshot::PresetFacts| f.states.keys().copied().collect::<Vec<_>>();
        assert_eq!(held(&shared), SHARED_STATES);
        assert_eq!(held(&queue), QUEUE_STATES);
        assert_eq!(
            (shared.elsewhere, queue.elsewhere),
            (QUEUE_STATES, SHARED_STATES)
        );
    }

    /// Nothing waits: the age is 0, with nothing more to read.
    #[test]
    fn empty_lists_are_age_zero_without_a_follow_up() {
        let st = read_default(
            &Unit::Queue(b"celery".to_vec()),
            &[int(0), int(0), int(0), int(0)],
        );
        assert_eq!(st.sample.oldest_age_seconds, Some(0.0));
        assert!(st.follow.is_empty());
    }

    /// Each non-empty list's tail (its oldest message) is read; the age is
    /// the oldest stamp's.
    #[test]
    fn the_age_is_the_oldest_stamped_tail_of_the_non_empty_lists() {
        let mut st = read_default(
            &Unit::Queue(b"celery".to_vec()),
            &[int(2), int(0), int(1), int(0)],
        );
        let asked: Vec<Vec<u8>> = st
            .follow
            .iter()
            .map(|(c, _)| c.get_packed_command())
            .collect();
        assert_eq!(
            asked,
            ["celery", "celery\x06\x166"]
                .map(|l| redis::cmd("LINDEX").arg(l).arg(-1).get_packed_command())
        );
        assert!(st.follow.iter().all(|(_, f)| *f == Follow::Own));
        let tails = [
            message(Some("990.5")),
            message(Some(r#""1970-01-01T00:16:20Z""#)),
        ];
        settle(&mut st.sample, &tails, 1000.0);
        assert_eq!(st.sample.oldest_age_seconds, Some(20.0));
    }

    /// One tail without the stamp (a producer without the handler, a read
    /// Redis refused): the oldest may be that one, so the age is unknown.
    #[test]
    fn an_unstamped_or_refused_tail_leaves_the_age_unknown() {
        for bad in [message(None), refused(), bulk("not json")] {
            let mut s = preset_sample(KIND, b"celery");
            settle(&mut s, &[message(Some("990")), bad.clone()], 1000.0);
            assert_eq!(s.oldest_age_seconds, None, "{bad:?}");
            settle(&mut s, &[bad.clone(), message(Some("990"))], 1000.0);
            assert_eq!(s.oldest_age_seconds, None, "{bad:?}");
        }
    }

    /// A list drained between the two rounds holds nothing older.
    #[test]
    fn a_list_emptied_between_rounds_adds_nothing() {
        let mut s = preset_sample(KIND, b"celery");
        settle(&mut s, &[Value::Nil, message(Some("995"))], 1000.0);
        assert_eq!(s.oldest_age_seconds, Some(5.0));
    }
}

#[cfg(test)]
mod recognition_tests {
    //! Zero config's recognition of this library, through the generic
    //! pass (`zero::classify::recognise`).
    use super::super::super::zero::classify::test_util::*;
    use super::super::celery;

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
            &[],
        );
        assert_eq!(strings(&r.withheld), ["app:celery", "app:unacked_index"]);
        // A pidbox exchange carries no work: nothing to withhold.
        let r = recognise(
            &refused(seen(&[], &[]), &["_kombu.binding.celery.pidbox"]),
            &found,
            &[],
        );
        assert!(r.withheld.is_empty());
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
        let r = recognise(&s, &found, &[]);
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
        let r = recognise(&s, &keys(&[]), &[]);
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
        let r = recognise(&s, &found, &[]);
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
}
