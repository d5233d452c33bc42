//! Bull (3.x/4.x, the `bull` package, BullMQ's predecessor): keys under
//! `<prefix>:<q>:` (OptimalBits/bull 4.15 `lib/queue.js` `toKey`). `wait`
//! is LPUSHed and taken from the tail by `BRPOPLPUSH wait active`, so the
//! next job is at `LINDEX -1`; a paused queue's jobs sit in `paused` (the
//! pause renames `wait`, `pause-5.lua`) and the pause itself is the
//! `meta-paused` string. A prioritised job is in `wait` *and* in the
//! `priority` zset (`addJobWithPriority.lua`), so `priority` is not counted
//! again. `delayed` scores are `due_ms * 4096 + n` as in BullMQ; every
//! added job INCRs `id` (`addJob-6.lua`); an active job without its
//! `<id>:lock` key is stalled.

use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

use super::super::library::{
    Arrivals, FinishedLayout, Hidden, JobState, KeyType, Keys, Library, Mark, OptionError, Owned,
    Preset, PresetKind, Reason, Recognise, Registry, Seen, Stage, Unit, Written, cmd, count,
    escape_glob, key, options_of, prefix_or, preset_sample, reply, set_state, stalled_check_limit,
    sum, type_at, under,
};
use redis::Value;

use super::bullmq::{Jobs, due_score_bound, ids, k, read_jobs};

/// Where queue `q` keeps finished jobs: as BullMQ, `completed` and
/// `failed` scored by `finishedOn` (ms), the job hash with `processedOn` and
/// `finishedOn` (`moveToFinished-9.lua`, `moveToActive-8.lua`).
pub fn finished(prefix: &str, q: &[u8]) -> FinishedLayout {
    super::bullmq::finished(prefix, q)
}

/// The keys of a Bull queue that zero config may find by type (lists and
/// zsets), by their last name part; any of them beside an integer `id`
/// string marks a queue.
pub const TYPED_PARTS: [&[u8]; 7] = [
    b"wait",
    b"paused",
    b"active",
    b"delayed",
    b"priority",
    b"completed",
    b"failed",
];

/// The prefix and queue name of `<prefix>:<q>:<part>` where `<part>` is
/// `id` or one of [`TYPED_PARTS`]: zero config parses the name from the
/// right, so it recognises queues whose names hold no `:` (the prefix may).
pub fn queue_of_part(k: &[u8]) -> Option<(&[u8], &[u8])> {
    let colon = k.iter().rposition(|b| *b == b':')?;
    let (rest, part) = (&k[..colon], &k[colon + 1..]);
    if part != b"id" && !TYPED_PARTS.contains(&part) {
        return None;
    }
    let colon = rest.iter().rposition(|b| *b == b':')?;
    let (prefix, name) = (&rest[..colon], &rest[colon + 1..]);
    (!prefix.is_empty() && !name.is_empty()).then_some((prefix, name))
}

/// The queue name of `<prefix>:<q>:id` at a known `prefix`; `None` when
/// the key is not one, or the name is empty.
pub fn queue_of_id<'a>(prefix: &[u8], id_key: &'a [u8]) -> Option<&'a [u8]> {
    let rest = id_key.strip_prefix(prefix)?.strip_prefix(b":")?;
    rest.strip_suffix(b":id").filter(|q| !q.is_empty())
}

/// Round 1: twelve read-only commands.
pub fn plan(prefix: &str, q: &[u8], limit: usize, now: f64) -> Vec<redis::Cmd> {
    let c = |name: &str, n: &[u8]| cmd(name, &k(prefix, q, n));
    let mut wait_tail = c("LRANGE", b"wait");
    wait_tail.arg(-1).arg(-1);
    let mut paused_tail = c("LRANGE", b"paused");
    paused_tail.arg(-1).arg(-1);
    let mut active = c("LRANGE", b"active");
    active.arg(0).arg(limit.saturating_sub(1));
    let mut overdue = c("ZCOUNT", b"delayed");
    overdue.arg("-inf").arg(due_score_bound(now));
    vec![
        c("LLEN", b"wait"),
        c("LLEN", b"paused"),
        c("LLEN", b"active"),
        c("ZCARD", b"delayed"),
        c("ZCARD", b"completed"),
        c("ZCARD", b"failed"),
        c("EXISTS", b"meta-paused"),
        wait_tail,
        paused_tail,
        active,
        overdue,
        c("GET", b"id"),
    ]
}

/// Reads [`plan`]'s replies (pure).
pub fn read(prefix: &str, q: &[u8], r: &[Value]) -> Stage {
    let at = |i: usize| r.get(i).unwrap_or(&Value::Nil);
    let mut s = preset_sample(KIND, q);
    // Jobs of a paused queue wait in `paused`: still the backlog; the pause
    // is its own gauge.
    let backlog = sum(&[at(0), at(1)]);
    set_state(&mut s, JobState::Waiting, backlog);
    set_state(&mut s, JobState::Active, count(at(2)));
    set_state(&mut s, JobState::Delayed, count(at(3)));
    // The next job (the tail of `wait`, or of `paused` while paused) is the
    // oldest of a FIFO queue; unknown unless both tails were readable.
    let readable = reply::as_array(at(7)).is_some() && reply::as_array(at(8)).is_some();
    let next = ids(at(7)).into_iter().chain(ids(at(8))).next();
    let jobs = Jobs {
        completed: at(4),
        failed: at(5),
        paused: at(6),
        overdue: at(10),
        // Every added job INCRs `id`, custom job ids included.
        added: at(11),
        active: at(9),
        backlog,
        oldest: readable.then_some(next),
    };
    read_jobs(prefix, q, s, jobs)
}

/// Bull's `preset` name.
pub const KIND: PresetKind = PresetKind::named("bull");

/// The options of a `- preset: bull` entry: the one declaration of the
/// words it takes (`Library::options`, and the refusal of any other).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    /// `prefix:`, Bull's own `bull` by default.
    #[serde(default)]
    prefix: Option<String>,
    /// `stalled_check_limit:`: the leases checked per poll, at most.
    #[serde(default)]
    stalled_check_limit: Option<usize>,
}

/// Bull 3.x/4.x: queues found by SCAN for `<prefix>:*:id`, those without
/// BullMQ's marks.
pub struct Bull;

impl Library for Bull {
    fn kind(&self) -> PresetKind {
        KIND
    }

    fn title(&self) -> &'static str {
        "Bull"
    }

    fn options(&self) -> &'static [&'static str] {
        options_of::<Options>()
    }

    fn configure(&self, written: &Written) -> Result<Preset, OptionError> {
        let o: Options = written.read()?;
        Ok(Preset {
            stalled_check_limit: stalled_check_limit(o.stalled_check_limit)?,
            ..Preset::new(self.kind(), &prefix_or(o.prefix, self.default_prefix())?)
        })
    }

    fn default_prefix(&self) -> &'static str {
        "bull"
    }

    fn registry(&self, preset: &Preset) -> Registry {
        let p = escape_glob(preset.prefix.as_bytes());
        Registry::Scan {
            pattern: key(&[&p, b":*:id"]),
            key_type: None,
        }
    }

    fn queue_of_key(&self, preset: &Preset, k: &[u8]) -> Option<Vec<u8>> {
        super::bull::queue_of_id(preset.prefix.as_bytes(), k).map(<[u8]>::to_vec)
    }

    /// The queue's `meta` hash: BullMQ's marks there make it BullMQ's
    /// (Bull 3.x/4.x writes one too while paused, `paused` alone).
    fn queue_mark(&self, preset: &Preset, queue: &[u8]) -> Option<Mark> {
        let meta = key(&[preset.prefix.as_bytes(), b":", queue, b":meta"]);
        Some(Mark {
            cmd: super::bullmq::marks_cmd(&meta),
            key: meta,
        })
    }

    fn takes_marked(&self, reply: &Value) -> Result<bool, Reason> {
        super::bullmq::has_marks(reply).map(|m| !m)
    }

    /// Its `priority` zset, `stalled-check`, job hashes: all under
    /// `<prefix>:<q>:`.
    fn owned(&self, preset: &Preset, units: &[Unit]) -> Vec<Owned> {
        super::bullmq::queue_keys(&preset.prefix, units)
    }

    /// `GET id`: every added job INCRs it.
    fn arrivals(&self) -> Arrivals {
        Arrivals::IdCounter
    }

    fn plan(&self, preset: &Preset, unit: &Unit, now: f64) -> Vec<redis::Cmd> {
        plan(&preset.prefix, unit.name(), preset.stalled_check_limit, now)
    }

    fn read(&self, preset: &Preset, unit: &Unit, r: &[Value], _: f64) -> Stage {
        read(&preset.prefix, unit.name(), r)
    }

    fn finished(&self, preset: &Preset, queue: &[u8]) -> Option<FinishedLayout> {
        Some(finished(&preset.prefix, queue))
    }

    fn unmeasured_why(&self) -> &'static str {
        super::bullmq::UNMEASURED
    }

    /// An unread `id`: every key of that queue, under `<prefix>:<name>:`.
    fn withheld(&self, mark: &[u8], keys: &Keys) -> Vec<Vec<u8>> {
        match mark.strip_suffix(b":id") {
            Some(base) => under(keys, &key(&[base, b":"])).cloned().collect(),
            None => Vec::new(),
        }
    }

    fn hidden(&self, mark: &[u8]) -> Option<Hidden> {
        mark.strip_suffix(b":id").map(super::bullmq::queue_hidden)
    }

    fn recognition(&self) -> Option<&dyn Recognise> {
        Some(self)
    }
}

impl Recognise for Bull {
    /// The `<prefix>:<name>:id` beside each `<prefix>:<name>` with a list or
    /// zset named like one of Bull's keys, at most `limit`.
    fn marks_beside(&self, keys: &Keys, limit: usize) -> Vec<Vec<u8>> {
        let mut ids = BTreeSet::new();
        for k in keys.keys() {
            if !matches!(type_at(keys, k), Some(KeyType::List | KeyType::Zset)) {
                continue;
            }
            if let Some((prefix, name)) = queue_of_part(k) {
                ids.insert(key(&[prefix, b":", name, b":id"]));
                if ids.len() >= limit {
                    break;
                }
            }
        }
        ids.into_iter().collect()
    }

    /// `GET` of an `id` (an integer string: Bull's job counter).
    fn beside_read(&self, k: &[u8]) -> Option<redis::Cmd> {
        k.ends_with(b":id").then(|| cmd("GET", k))
    }

    /// An `id` whose `meta` beside it says BullMQ's, or went unread itself,
    /// would tell nothing more.
    fn beside_tells(&self, id: &[u8], seen: &Seen) -> bool {
        let Some(base) = id.strip_suffix(b":id") else {
            return false;
        };
        let meta = key(&[base, b":meta"]);
        !super::bullmq::marked(seen, &meta) && !seen.not_read(&meta)
    }

    /// A name like one of Bull's lists or zsets (`<prefix>:<q>:wait`...).
    fn is_evidence(&self, k: &[u8]) -> bool {
        !k.ends_with(b":id") && queue_of_part(k).is_some()
    }

    /// The kept Bull-named keys where no BullMQ `meta` is beside them.
    fn evidence(&self, seen: &Seen, names: &[Vec<u8>], _: &mut BTreeSet<Vec<u8>>) -> Vec<Vec<u8>> {
        names
            .iter()
            .filter(|k| {
                !k.ends_with(b":id")
                    && queue_of_part(k).is_some_and(|(prefix, name)| {
                        !super::bullmq::marked(seen, &key(&[prefix, b":", name, b":meta"]))
                    })
            })
            .cloned()
            .collect()
    }

    /// Told by an `id` counter beside lists named like its own, which
    /// other libraries keep too: after those told by a mark of their own.
    fn claim_rank(&self) -> u8 {
        1
    }

    /// An integer `id` (INCRed for every job added) beside a list or zset
    /// of Bull's, where no BullMQ `meta` says the queue is BullMQ's (nor
    /// went unread: whose it is would be unknown).
    fn recognise(
        &self,
        seen: &Seen,
        _: &Keys,
        claimed: &mut BTreeSet<Vec<u8>>,
    ) -> Vec<(Preset, Vec<Unit>)> {
        let mut by_prefix: BTreeMap<&[u8], Vec<Unit>> = BTreeMap::new();
        for (id, reply) in seen.replies() {
            let Some(base) = id.strip_suffix(b":id") else {
                continue;
            };
            // Another library's counter beside lists named like Bull's.
            if claimed.contains(id) {
                continue;
            }
            if reply::as_u64(reply).is_none() {
                continue;
            }
            let meta = key(&[base, b":meta"]);
            if super::bullmq::marked(seen, &meta) || seen.not_read(&meta) {
                continue;
            }
            if let Some((prefix, name)) = queue_of_part(id) {
                by_prefix
                    .entry(prefix)
                    .or_default()
                    .push(Unit::Queue(name.to_vec()));
            }
        }
        by_prefix
            .into_iter()
            .filter_map(|(prefix, units)| {
                let prefix = std::str::from_utf8(prefix).ok()?;
                Some((Preset::new(KIND, prefix), units))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::Follow;
    use super::super::super::test_util::*;
    use super::*;
    use crate::time::TimeUnit;

    fn replies(paused: i64, wait_tail: &[&str], paused_tail: &[&str]) -> Vec<Value> {
        vec![
            int(wait_tail.len() as i64 * 2),
            int(paused_tail.len() as i64 * 3),
            int(2),
            int(4),
            int(5),
            int(6),
            int(paused),
            list(wait_tail),
            list(paused_tail),
            list(&["5", "6"]),
            int(1),
            Value::BulkString(b"17".to_vec()),
        ]
    }

    #[test]
    fn keys_map_to_states_without_counting_priority_twice() {
        let st = read("bull", b"mail", &replies(0, &["8"], &[]));
        let f = st.sample.preset.as_ref().unwrap();
        assert_eq!(f.preset, KIND);
        assert_eq!(f.states[&JobState::Waiting], Some(2));
        assert_eq!(f.states[&JobState::Active], Some(2));
        assert_eq!(f.states[&JobState::Delayed], Some(4));
        assert_eq!(f.states[&JobState::Completed], Some(5));
        assert_eq!(f.states[&JobState::Failed], Some(6));
        assert_eq!(f.states.len(), 5);
        assert_eq!(f.paused, Some(false));
        assert_eq!(f.overdue, Some(1));
        assert_eq!(f.stalled, Some(0));
        assert_eq!(st.sample.counters().published, Some(17));
        // The next job's stamp, then one lock check per active job.
        assert_eq!(st.follow.len(), 3);
        assert_eq!(
            st.follow[0].0.get_packed_command(),
            redis::cmd("HGET")
                .arg("bull:mail:8")
                .arg("timestamp")
                .get_packed_command()
        );
        assert_eq!(
            st.follow[2].0.get_packed_command(),
            redis::cmd("EXISTS")
                .arg("bull:mail:6:lock")
                .get_packed_command()
        );
        // `priority` is never read: its jobs are also in `wait`.
        assert!(
            plan("bull", b"mail", 10, 0.0)
                .iter()
                .all(|c| !String::from_utf8_lossy(&c.get_packed_command()).contains(":priority"))
        );
    }

    #[test]
    fn a_paused_queue_keeps_its_backlog_waiting_and_its_age() {
        let st = read("bull", b"q", &replies(1, &[], &["3"]));
        let f = st.sample.preset.as_ref().unwrap();
        assert_eq!(f.states[&JobState::Waiting], Some(3));
        assert_eq!(f.paused, Some(true));
        assert_eq!(st.follow[0].1, Follow::Stamp(TimeUnit::Milliseconds));
        assert_eq!(
            st.follow[0].0.get_packed_command(),
            redis::cmd("HGET")
                .arg("bull:q:3")
                .arg("timestamp")
                .get_packed_command()
        );
    }

    #[test]
    fn an_empty_queue_is_zero_old_and_a_refused_list_leaves_the_age_unknown() {
        let st = read("bull", b"q", &replies(0, &[], &[]));
        assert_eq!(st.sample.oldest_age_seconds, Some(0.0));
        let mut r = replies(0, &["1"], &[]);
        r[1] = refused();
        r[8] = refused();
        let st = read("bull", b"q", &r);
        let f = st.sample.preset.as_ref().unwrap();
        assert_eq!(f.states[&JobState::Waiting], None);
        assert_eq!(st.sample.oldest_age_seconds, None);
        assert!(
            st.follow
                .iter()
                .all(|(_, f)| *f != Follow::Stamp(TimeUnit::Milliseconds))
        );
        // No `id` key: arrivals unknown, not 0.
        let mut r = replies(0, &[], &[]);
        r[11] = Value::Nil;
        assert_eq!(read("bull", b"q", &r).sample.counters().published, None);
    }

    #[test]
    fn zero_config_parses_a_bull_key_from_the_right() {
        assert_eq!(
            queue_of_part(b"my:app:mail:wait"),
            Some((&b"my:app"[..], &b"mail"[..]))
        );
        assert_eq!(
            queue_of_part(b"bull:mail:id"),
            Some((&b"bull"[..], &b"mail"[..]))
        );
        assert_eq!(queue_of_part(b"bull:mail:meta"), None);
        assert_eq!(queue_of_part(b"mail:wait"), None);
        assert_eq!(queue_of_part(b"bull::wait"), None);
    }

    #[test]
    fn an_id_key_names_its_queue_at_a_known_prefix() {
        assert_eq!(queue_of_id(b"bull", b"bull:mail:id"), Some(&b"mail"[..]));
        assert_eq!(queue_of_id(b"my:app", b"my:app:a:b:id"), Some(&b"a:b"[..]));
        assert_eq!(queue_of_id(b"bull", b"bull::id"), None);
        assert_eq!(queue_of_id(b"bull", b"other:mail:id"), None);
        assert_eq!(queue_of_id(b"bull", b"bull:mail:ids"), None);
    }
}

#[cfg(test)]
mod recognition_tests {
    //! Zero config's recognition of this library, through the generic
    //! pass (`zero::classify::recognise`).
    use super::super::super::zero::classify::test_util::*;
    use super::super::{bull, bullmq};

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
        let r = recognise(&s, &found, &[]);
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
}
