//! BullMQ (5.x/6.x): keys under `<prefix>:<q>:`. `wait` is LPUSHed and
//! taken from the tail (the oldest is at `LINDEX -1`); the job hash keeps
//! `timestamp` in ms; an active job without its `:lock` key is stalled.
//! A paused queue keeps its backlog in `waiting` (the pause is the
//! `queue_paused` gauge); `delayed` scores encode the due time as
//! `due_ms * 4096 + seq`. BullMQ's own `getCounts` script is never called:
//! it deletes markers.

use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

use super::super::library::{
    Arrivals, Counters, FinishedLayout, Follow, Hidden, JobState, KeyType, Keys, Library, Mark,
    MarkRead, OptionError, Owned, Preset, PresetKind, QueueSample, Reason, Recognise, Registry,
    Scores, Seen, Stage, TimeUnit, Unit, Written, cmd, count, display_key, escape_glob, facts, key,
    options_of, prefix_or, preset_sample, reply, set_state, stalled_check_limit, sum, under,
};
use redis::Value;

/// `<prefix>:<q>:<name>` (Bull's keys too).
pub(super) fn k(prefix: &str, q: &[u8], name: &[u8]) -> Vec<u8> {
    key(&[prefix.as_bytes(), b":", q, b":", name])
}

/// The prefix and queue name of a `<prefix>:<q>:meta` key. BullMQ queue
/// names cannot contain `:`, so the name is the last part; the prefix is
/// everything before it (and may contain `:`). `None` if either is empty.
pub fn queue_of_meta(meta: &[u8]) -> Option<(&[u8], &[u8])> {
    let rest = meta.strip_suffix(b":meta")?;
    let colon = rest.iter().rposition(|b| *b == b':')?;
    let (prefix, name) = (&rest[..colon], &rest[colon + 1..]);
    (!prefix.is_empty() && !name.is_empty()).then_some((prefix, name))
}

/// `HMGET <meta> version opts.maxLenEvents`: what tells a BullMQ queue's
/// `meta` hash (the `Queue` constructor writes both) from another's.
pub fn marks_cmd(meta: &[u8]) -> redis::Cmd {
    let mut c = cmd("HMGET", meta);
    c.arg("version").arg("opts.maxLenEvents");
    c
}

/// Whether a reply to [`marks_cmd`] shows BullMQ's marks: a `version`
/// starting `bullmq:`, or an `opts.maxLenEvents`. A key of another type
/// (`WRONGTYPE`) shows none; a read Redis refused or failed (`NOPERM`)
/// tells nothing, so whose queue it is stays unknown (`Err`).
pub fn has_marks(reply: &Value) -> Result<bool, Reason> {
    if let Some(reason) = reply::refusal(reply) {
        return Err(reason);
    }
    let fields = reply::as_array(reply).unwrap_or(&[]);
    let version = fields.first().and_then(reply::as_bytes);
    let max_len = fields.get(1).and_then(reply::as_bytes);
    Ok(version.is_some_and(|v| v.starts_with(b"bullmq:")) || max_len.is_some())
}

/// Entries at the tail of `wait` read for the oldest job: legacy `0:<n>`
/// markers (5.x) are skipped, and there are never two in a row.
const TAIL: i64 = 3;

/// Jobs per millisecond in a `delayed` score: BullMQ bakes a 12-bit
/// sequence under the due time (`getDelayedScore.lua`: `due_ms * 0x1000`).
const DELAYED_SEQ: u64 = 0x1000;

/// The highest `delayed` score that is due at `now` (unix seconds): the
/// bound BullMQ's own `promoteDelayedJobs` uses, `(now_ms + 1) * 4096 - 1`,
/// so a job due in this very millisecond counts. Redis scores are doubles:
/// the bound stays below 2^53, and so exact, until September 2039, like
/// BullMQ's own scores.
pub fn due_score_bound(now: f64) -> u64 {
    let now_ms = (now * 1e3).floor().max(0.0) as u64;
    (now_ms + 1) * DELAYED_SEQ - 1
}

/// Where queue `q` keeps finished jobs: `completed` and `failed`, scored by
/// `finishedOn` (ms); the job hash has `processedOn` (when a worker took it,
/// this attempt) and `finishedOn`, both whole milliseconds (`Date.now()`),
/// so a job under 1 ms has them equal. Empty with `removeOnComplete`/`removeOnFail`.
pub fn finished(prefix: &str, q: &[u8]) -> FinishedLayout {
    FinishedLayout {
        sets: [k(prefix, q, b"completed"), k(prefix, q, b"failed")],
        job_prefix: k(prefix, q, b""),
        scores: Scores::End,
        fields: ["processedOn", "finishedOn"],
        unit: TimeUnit::Milliseconds,
        resolution: 0.001,
    }
}

/// Round 1: fourteen read-only commands.
pub fn plan(prefix: &str, q: &[u8], limit: usize, now: f64) -> Vec<redis::Cmd> {
    let c = |name: &str, n: &[u8]| cmd(name, &k(prefix, q, n));
    let mut hexists = c("HEXISTS", b"meta");
    hexists.arg("paused");
    let mut tail = c("LRANGE", b"wait");
    tail.arg(-TAIL).arg(-1);
    let mut active = c("LRANGE", b"active");
    active.arg(0).arg(limit.saturating_sub(1));
    let mut first_prioritized = c("ZRANGE", b"prioritized");
    first_prioritized.arg(0).arg(0);
    let mut overdue = c("ZCOUNT", b"delayed");
    overdue.arg("-inf").arg(due_score_bound(now));
    vec![
        c("LLEN", b"wait"),
        c("LLEN", b"paused"),
        c("ZCARD", b"prioritized"),
        c("LLEN", b"active"),
        c("ZCARD", b"delayed"),
        c("ZCARD", b"completed"),
        c("ZCARD", b"failed"),
        hexists,
        tail,
        active,
        first_prioritized,
        c("ZCARD", b"waiting-children"),
        overdue,
        c("GET", b"id"),
    ]
}

/// Reads [`plan`]'s replies (pure).
pub fn read(prefix: &str, q: &[u8], r: &[Value]) -> Stage {
    let at = |i: usize| r.get(i).unwrap_or(&Value::Nil);
    let mut s = preset_sample(KIND, q);
    // 6.x pauses with `meta.paused` only (jobs stay in `wait`); 5.x also
    // renamed `wait` to `paused`. Either way these jobs are the backlog,
    // `waiting`, and the pause is its own gauge (`HEXISTS meta paused`).
    let backlog = sum(&[at(0), at(1), at(2)]);
    set_state(&mut s, JobState::Waiting, backlog);
    set_state(&mut s, JobState::Active, count(at(3)));
    // `waiting-children` parents wait on their children, not on a time,
    // but like delayed jobs no worker may take them yet.
    set_state(&mut s, JobState::Delayed, sum(&[at(4), at(11)]));
    // The oldest job is known only when both places it can be were read: a
    // refused `wait` or `prioritized` leaves the age unknown, never the age
    // of whichever job was readable.
    let readable = reply::as_array(at(8)).is_some() && reply::as_array(at(10)).is_some();
    let oldest = ids(at(8))
        .into_iter()
        .rev()
        .find(|id| !id.starts_with(b"0:"))
        .or_else(|| ids(at(10)).into_iter().next());
    let jobs = Jobs {
        completed: at(5),
        failed: at(6),
        paused: at(7),
        // Due jobs stay in `delayed` until a worker promotes them.
        overdue: at(12),
        // `id` is INCRed for every job added without a custom `jobId`. No
        // key is unknown, not 0: the queue may name all its jobs itself.
        added: at(13),
        active: at(9),
        backlog,
        oldest: readable.then_some(oldest),
    };
    read_jobs(prefix, q, s, jobs)
}

/// The job ids of an `LRANGE` or `ZRANGE` reply, in its order; none when
/// the reply was refused or unreadable.
pub(super) fn ids(v: &Value) -> Vec<Vec<u8>> {
    reply::as_array(v)
        .unwrap_or(&[])
        .iter()
        .filter_map(reply::as_bytes)
        .map(<[u8]>::to_vec)
        .collect()
}

/// What BullMQ and Bull read alike, as each library's `read` takes it from
/// the places its own `plan` put it: the two keep finished sets, the pause,
/// overdue jobs, the `id` counter and jobs themselves (a hash at
/// `<prefix>:<q>:<id>` with `timestamp` in ms, and `<id>:lock` while a
/// worker holds the job) the same way.
pub(super) struct Jobs<'a> {
    /// `ZCARD completed`.
    pub completed: &'a Value,
    /// `ZCARD failed`.
    pub failed: &'a Value,
    /// 1 while the queue is paused (BullMQ: `HEXISTS meta paused`; Bull:
    /// `EXISTS meta-paused`).
    pub paused: &'a Value,
    /// `ZCOUNT delayed` up to now: jobs due that no worker promoted yet.
    pub overdue: &'a Value,
    /// `GET id`: jobs added, published for arrival rates (mode WaitTime).
    pub added: &'a Value,
    /// `LRANGE active`: the jobs whose locks round 2 checks.
    pub active: &'a Value,
    /// The jobs counted as `waiting`.
    pub backlog: Option<u64>,
    /// The oldest waiting job's id. `None` when a place it may be was
    /// refused: the age stays unknown. `Some(None)`: every place was read
    /// and none holds a job, so an empty `backlog` is zero seconds old.
    pub oldest: Option<Option<Vec<u8>>>,
}

/// Records `j` in `s`, and plans round 2: the oldest waiting job's stamp,
/// and one lock check per active job (a refused `active` leaves `stalled`
/// unknown).
pub(super) fn read_jobs(prefix: &str, q: &[u8], mut s: QueueSample, j: Jobs) -> Stage {
    set_state(&mut s, JobState::Completed, count(j.completed));
    set_state(&mut s, JobState::Failed, count(j.failed));
    let f = facts(&mut s);
    f.paused = reply::as_u64(j.paused).map(|n| n == 1);
    f.overdue = count(j.overdue);
    if let Some(added) = reply::as_u64(j.added) {
        s.set_counters(Counters {
            published: Some(added),
            ..Counters::default()
        });
    }
    let mut follow = Vec::new();
    match j.oldest {
        Some(Some(id)) => {
            let mut c = cmd("HGET", &k(prefix, q, &id));
            c.arg("timestamp");
            follow.push((c, Follow::Stamp(TimeUnit::Milliseconds)));
        }
        Some(None) if j.backlog == Some(0) => s.oldest_age_seconds = Some(0.0),
        _ => {}
    }
    if reply::as_array(j.active).is_some() {
        facts(&mut s).stalled = Some(0);
        for id in ids(j.active) {
            let lock = k(prefix, q, &key(&[&id, b":lock"]));
            follow.push((cmd("EXISTS", &lock), Follow::StalledIfMissing));
        }
    }
    Stage { sample: s, follow }
}

/// BullMQ's `preset` name.
pub const KIND: PresetKind = PresetKind::named("bullmq");

/// The options of a `- preset: bullmq` entry: the one declaration of the
/// words it takes (`Library::options`, and the refusal of any other).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    /// `prefix:`, BullMQ's own `bull` by default.
    #[serde(default)]
    prefix: Option<String>,
    /// `stalled_check_limit:`: the leases checked per poll, at most.
    #[serde(default)]
    stalled_check_limit: Option<usize>,
}

/// BullMQ 5.x/6.x: queues found by SCAN for `<prefix>:*:meta` hashes with
/// BullMQ's marks.
pub struct Bullmq;

impl Library for Bullmq {
    fn kind(&self) -> PresetKind {
        KIND
    }

    fn title(&self) -> &'static str {
        "BullMQ"
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
            pattern: key(&[&p, b":*:meta"]),
            key_type: Some(KeyType::Hash),
        }
    }

    fn queue_of_key(&self, preset: &Preset, k: &[u8]) -> Option<Vec<u8>> {
        queue_of_meta(k)
            .filter(|(pre, _)| *pre == preset.prefix.as_bytes())
            .map(|(_, name)| name.to_vec())
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
        has_marks(reply)
    }

    /// `<prefix>:<q>:` holds every key of the queue: events, marker, pc,
    /// stalled, job hashes and their logs.
    fn owned(&self, preset: &Preset, units: &[Unit]) -> Vec<Owned> {
        queue_keys(&preset.prefix, units)
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
        UNMEASURED
    }

    /// An unread `meta`: every key of that queue, under `<prefix>:<name>:`.
    fn withheld(&self, mark: &[u8], keys: &Keys) -> Vec<Vec<u8>> {
        match mark.strip_suffix(b":meta") {
            Some(base) => under(keys, &key(&[base, b":"])).cloned().collect(),
            None => Vec::new(),
        }
    }

    fn hidden(&self, mark: &[u8]) -> Option<Hidden> {
        mark.strip_suffix(b":meta").map(queue_hidden)
    }

    fn recognition(&self) -> Option<&dyn Recognise> {
        Some(self)
    }
}

impl Recognise for Bullmq {
    /// Its `meta` hashes, found by a SCAN of one pattern.
    fn relisted_each_round(&self) -> bool {
        true
    }

    /// A hash `<prefix>:<name>:meta` (any prefix), read for its marks.
    fn mark_read(&self, key: &[u8]) -> Option<MarkRead> {
        key.ends_with(b":meta")
            .then(|| MarkRead::Cmd(marks_cmd(key)))
    }

    /// A `meta` hash whose `version` starts with `bullmq:` or which has
    /// `opts.maxLenEvents` (both written by the `Queue` constructor), at
    /// any prefix; names cannot contain `:`, so a name parses from the
    /// right.
    fn recognise(
        &self,
        seen: &Seen,
        _: &Keys,
        _: &mut BTreeSet<Vec<u8>>,
    ) -> Vec<(Preset, Vec<Unit>)> {
        let mut by_prefix: BTreeMap<&[u8], Vec<Unit>> = BTreeMap::new();
        for (meta, reply) in seen.replies() {
            if has_marks(reply) != Ok(true) {
                continue;
            }
            if let Some((prefix, name)) = queue_of_meta(meta) {
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

/// Whether `seen` holds the `meta` hash `meta` with BullMQ's marks.
pub(crate) fn marked(seen: &Seen, meta: &[u8]) -> bool {
    seen.reply(meta).is_some_and(|v| has_marks(v) == Ok(true))
}

/// The names an unread mark of queue `base` (`<prefix>:<name>`) may hide:
/// `<name>`, and `<prefix>:<name>` (its label beside a queue of that name
/// at another prefix); any name when `base` holds no `:`.
pub(super) fn queue_hidden(base: &[u8]) -> Hidden {
    match base.iter().rposition(|c| *c == b':') {
        Some(at) => Hidden::Names(vec![display_key(&base[at + 1..]), display_key(base)]),
        None => Hidden::Any,
    }
}

/// Why a BullMQ or Bull queue's service time is unknown.
pub(super) const UNMEASURED: &str = "no job with processedOn and finishedOn kept that finished within the source's service_time_max_age \
     (none finished lately, or the jobs are added with removeOnComplete/removeOnFail)";

/// Every key under `<prefix>:<q>:` of each queue of `units` (BullMQ's and
/// Bull's layout).
pub(super) fn queue_keys(prefix: &str, units: &[Unit]) -> Vec<Owned> {
    units
        .iter()
        .filter_map(|u| match u {
            Unit::Queue(q) => Some(Owned::Under(key(&[prefix.as_bytes(), b":", q, b":"]))),
            Unit::Shared => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::super::test_util::*;
    use super::*;

    #[test]
    fn a_meta_key_parses_from_the_right() {
        assert_eq!(
            queue_of_meta(b"bull:mail:meta"),
            Some((&b"bull"[..], &b"mail"[..]))
        );
        assert_eq!(
            queue_of_meta(b"my:app:mail:meta"),
            Some((&b"my:app"[..], &b"mail"[..]))
        );
        assert_eq!(queue_of_meta(b"mail:meta"), None);
        assert_eq!(queue_of_meta(b"bull::meta"), None);
        assert_eq!(queue_of_meta(b"bull:mail:meta2"), None);
    }

    fn replies(paused: i64, tail: &[&str], active: &[&str]) -> Vec<Value> {
        vec![
            int(2),
            int(1),
            int(3),
            int(active.len() as i64),
            int(4),
            int(5),
            int(6),
            int(paused),
            list(tail),
            list(active),
            list(&[]),
            int(7),
            int(2),
            Value::BulkString(b"41".to_vec()),
        ]
    }

    #[test]
    fn keys_map_to_states_and_markers_are_skipped() {
        let st = read(
            "bull",
            b"mail",
            &replies(0, &["9", "8", "0:1"], &["5", "6"]),
        );
        let f = st.sample.preset.as_ref().unwrap();
        assert_eq!(f.states[&JobState::Waiting], Some(6));
        assert_eq!(f.states[&JobState::Active], Some(2));
        // 4 delayed + 7 parents in waiting-children.
        assert_eq!(f.states[&JobState::Delayed], Some(11));
        assert_eq!(f.states[&JobState::Completed], Some(5));
        assert_eq!(f.states[&JobState::Failed], Some(6));
        assert_eq!(f.states.len(), 5);
        assert_eq!(f.paused, Some(false));
        assert_eq!(f.stalled, Some(0));
        assert_eq!(f.overdue, Some(2));
        // The `id` counter: jobs added, for arrival rates.
        assert_eq!(st.sample.counters().published, Some(41));
        // No `id` key (every job named by its producer, or none yet): unknown.
        let mut r = replies(0, &[], &[]);
        r[13] = Value::Nil;
        let none = read("bull", b"mail", &r);
        assert_eq!(none.sample.counters().published, None);
        // One stamp (job 8, the marker skipped) and two lock checks.
        assert_eq!(st.follow.len(), 3);
        assert_eq!(st.follow[0].1, Follow::Stamp(TimeUnit::Milliseconds));
        assert_eq!(
            st.follow[0].0.get_packed_command(),
            redis::cmd("HGET")
                .arg("bull:mail:8")
                .arg("timestamp")
                .get_packed_command()
        );
        assert_eq!(
            st.follow[1].0.get_packed_command(),
            redis::cmd("EXISTS")
                .arg("bull:mail:5:lock")
                .get_packed_command()
        );
    }

    #[test]
    fn a_refused_prioritized_set_leaves_waiting_and_the_age_unknown() {
        // The ACL refuses `bull:mail:prioritized` (ZCARD and ZRANGE).
        let mut r = replies(0, &["9", "8"], &[]);
        r[2] = refused();
        r[10] = refused();
        let st = read("bull", b"mail", &r);
        let f = st.sample.preset.as_ref().unwrap();
        assert_eq!(f.states[&JobState::Waiting], None);
        assert_eq!(f.depth_of(&[JobState::Waiting]), None);
        // The other states were read.
        assert_eq!(f.states[&JobState::Delayed], Some(11));
        // The oldest job may be the unreadable prioritized one: no stamp asked.
        assert!(
            st.follow
                .iter()
                .all(|(_, f)| *f != Follow::Stamp(TimeUnit::Milliseconds))
        );
        assert_eq!(st.sample.oldest_age_seconds, None);
    }

    #[test]
    fn a_paused_queue_keeps_its_backlog_waiting() {
        let st = read("bull", b"q", &replies(1, &["3"], &[]));
        let f = st.sample.preset.as_ref().unwrap();
        // wait 2 + paused (5.x list) 1 + prioritized 3.
        assert_eq!(f.states[&JobState::Waiting], Some(6));
        assert!(!f.states.contains_key(&JobState::Paused));
        assert_eq!(f.paused, Some(true));
        // Latency is still read: the backlog is as old while paused.
        assert_eq!(st.follow[0].1, Follow::Stamp(TimeUnit::Milliseconds));
    }

    #[test]
    fn only_prioritized_jobs_take_the_first_for_latency() {
        let mut r = replies(0, &[], &[]);
        r[10] = list(&["42"]);
        let st = read("bull", b"q", &r);
        assert_eq!(
            st.follow[0].0.get_packed_command(),
            redis::cmd("HGET")
                .arg("bull:q:42")
                .arg("timestamp")
                .get_packed_command()
        );
        assert_eq!(plan("bull", b"q", 100, 0.0).len(), 14);
    }

    #[test]
    fn overdue_counts_scores_due_up_to_this_millisecond() {
        // Due at 1000.000 s: seq 0..4095 share that millisecond.
        let now = 1000.0004;
        assert_eq!(due_score_bound(now), 1_000_001 * 4096 - 1);
        let due_now_last_seq = 1_000_000 * 4096 + 4095;
        let due_next_ms = 1_000_001 * 4096;
        assert!(due_now_last_seq <= due_score_bound(now));
        assert!(due_next_ms > due_score_bound(now));
        // A 2025 time is an exact integer as a Redis double (until 2039).
        let bound = due_score_bound(1_750_000_000.5);
        assert_eq!(bound, 1_750_000_000_501 * 4096 - 1);
        assert!(bound < 1 << 53);
        let packed = plan("bull", b"q", 1, 1000.0004)[12].get_packed_command();
        assert_eq!(
            packed,
            redis::cmd("ZCOUNT")
                .arg("bull:q:delayed")
                .arg("-inf")
                .arg("4096004095")
                .get_packed_command()
        );
    }
}

#[cfg(test)]
mod recognition_tests {
    //! Zero config's recognition of this library, through the generic
    //! pass (`zero::classify::recognise`).
    use super::super::super::zero::classify::test_util::*;
    use super::super::bullmq;

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
        let r = recognise(&s, &found, &[]);
        assert!(r.entries.is_empty());
        assert_eq!(
            strings(&r.withheld),
            ["secret:jobs:events", "secret:jobs:wait"]
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
        let r = recognise(&s, &found, &[]);
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
}
