//! Huey (PyPI `huey` 3.5, `RedisHuey`, `PriorityRedisHuey` and their
//! `…ExpireHuey` kin): one logical queue per Huey instance `name`, kept in
//! keys whose prefixes Huey fixes (`huey/storage.py`, `RedisStorage.__init__`):
//!
//! - `huey.redis.<name>`: the queue. A list (`RedisStorage.enqueue`:
//!   `LPUSH`, taken with `BRPOP`), or under `PriorityRedisHuey` a zset
//!   (`RedisPriorityQueue.enqueue`: score `-priority`, member the 8-byte
//!   big-endian enqueue time in microseconds followed by the message), so a
//!   job is one member whatever its priority: `waiting`.
//! - `huey.schedule.<name>`: the zset of scheduled jobs and retries with a
//!   delay (`add_to_schedule`), scored by due time in seconds: `delayed`;
//!   those at or before now are overdue (`read_schedule` moves
//!   `-inf..now`).
//! - `huey.results.<name>`: the results hash (`put_data`): `completed`, the
//!   number Huey's own `result_count()` gives (`HLEN`); unknown while there
//!   is no hash, as `RedisExpireHuey` keeps its results in strings instead.
//!
//! Messages are pickled, and a list message carries no enqueue time, so
//! the oldest job's age is unknown while jobs wait. A priority member does
//! start with its enqueue time, but the oldest job is the lowest stamp
//! across every priority (the first member of each), which the poll's two
//! round trips cannot find: unknown too. Huey keeps nothing in Redis for a
//! task in progress (a worker pops it and runs it in memory), no stalled
//! work and no arrival counter.
//!
//! Which storage a queue uses is read each poll (`TYPE` in round 1, the
//! size in round 2), so one entry serves both and a queue moved from one
//! to the other is read right at the next poll.

use serde::Deserialize;
use std::collections::BTreeSet;

use redis::Value;

use super::super::library::{
    Follow, JobState, KeyType, Keys, Library, OptionError, Owned, Preset, PresetKind, Recognise,
    Seen, Stage, Unit, Written, cmd, count, due_count, facts, key, options_of, preset_sample,
    reply, set_state, type_at,
};

/// Huey's `preset` name.
pub const KIND: PresetKind = PresetKind::named("huey");

/// The queue key's prefix (`RedisStorage.queue_key`).
const QUEUE_PREFIX: &[u8] = b"huey.redis.";
/// The schedule zset's prefix (`RedisStorage.schedule_key`).
const SCHEDULE_PREFIX: &[u8] = b"huey.schedule.";
/// The results hash's prefix (`RedisStorage.result_key`).
const RESULTS_PREFIX: &[u8] = b"huey.results.";
/// Huey's default instance name (`Huey.__init__`'s `name='huey'`).
const DEFAULT_NAME: &str = "huey";

/// The queue key of the Huey instance `name`.
fn queue_key(name: &[u8]) -> Vec<u8> {
    key(&[QUEUE_PREFIX, name])
}

/// The schedule key of the Huey instance `name`.
fn schedule_key(name: &[u8]) -> Vec<u8> {
    key(&[SCHEDULE_PREFIX, name])
}

/// The results key of the Huey instance `name`.
fn results_key(name: &[u8]) -> Vec<u8> {
    key(&[RESULTS_PREFIX, name])
}

/// Whether Huey could have written `name`: `RedisStorage.clean_name` keeps
/// only `[A-Za-z0-9_]`, so `huey.redis.a.b` or `huey.redis.` is some
/// other writer's key, never a Huey queue's.
fn is_huey_name(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_')
}

/// One of the keys Huey keeps per instance that zero config sees (lists
/// and zsets; the results hash is never a plain key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HueyKey {
    /// `huey.redis.<name>`: a list, or a zset under `PriorityRedisHuey`.
    Queue,
    /// `huey.schedule.<name>`: a zset.
    Schedule,
}

impl HueyKey {
    /// Whether a key of type `t` is what Huey writes there; another type
    /// is an app's key named like Huey's.
    fn fits(self, t: KeyType) -> bool {
        use KeyType::{List, Zset};
        match self {
            HueyKey::Queue => t == List || t == Zset,
            HueyKey::Schedule => t == Zset,
        }
    }
}

/// Which of a Huey instance's keys `k` is named like, and the instance's
/// name, if it is one of them.
fn name_of(k: &[u8]) -> Option<(HueyKey, &[u8])> {
    [
        (HueyKey::Queue, QUEUE_PREFIX),
        (HueyKey::Schedule, SCHEDULE_PREFIX),
    ]
    .into_iter()
    .find_map(|(which, prefix)| {
        let name = k.strip_prefix(prefix)?;
        is_huey_name(name).then_some((which, name))
    })
}

/// How the queue key holds the waiting jobs, from its `TYPE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Storage {
    /// No key: nothing waits (Redis deletes an emptied list or zset).
    Absent,
    /// `RedisHuey`: a list.
    List,
    /// `PriorityRedisHuey`: a zset.
    Priority,
}

impl Storage {
    /// The storage a `TYPE` reply names; `None` for a refused read or a
    /// type Huey never writes there (the count is then unknown).
    fn of(v: &Value) -> Option<Storage> {
        match reply::as_str(v)? {
            "none" => Some(Storage::Absent),
            "list" => Some(Storage::List),
            "zset" => Some(Storage::Priority),
            _ => None,
        }
    }
}

/// Round 1: the queue key's type, the schedule's size and due count, the
/// results' size.
fn plan(name: &[u8], now: f64) -> Vec<redis::Cmd> {
    let schedule = schedule_key(name);
    vec![
        cmd("TYPE", &queue_key(name)),
        cmd("ZCARD", &schedule),
        // Due jobs Huey's scheduler (every `scheduler_interval`, 1 s by
        // default) has not moved to the queue yet.
        due_count(&schedule, now),
        cmd("HLEN", &results_key(name)),
    ]
}

/// Reads [`plan`]'s replies (pure); `waiting` is the round-2 size of the
/// queue key, by the type round 1 read (0 with no key).
fn read(name: &[u8], r: &[Value]) -> Stage {
    let at = |i: usize| r.get(i).unwrap_or(&Value::Nil);
    let mut s = preset_sample(KIND, name);
    set_state(&mut s, JobState::Delayed, count(at(1)));
    // Redis keeps no empty hash, so no hash is either no result stored or
    // results kept elsewhere (`RedisExpireHuey`: one string per result):
    // which, the keys do not say.
    let results = count(at(3)).filter(|n| *n > 0);
    set_state(&mut s, JobState::Completed, results);
    facts(&mut s).overdue = count(at(2));
    let q = queue_key(name);
    let (waiting, age, size) = match Storage::of(at(0)) {
        Some(Storage::Absent) => (Some(0), Some(0.0), None),
        Some(Storage::List) => (None, None, Some(cmd("LLEN", &q))),
        Some(Storage::Priority) => (None, None, Some(cmd("ZCARD", &q))),
        // Refused, or not Huey's type: unknown.
        None => (None, None, None),
    };
    // A waiting job's enqueue time is in its pickle (or, in a priority
    // member, known only across every priority): unknown while any waits.
    set_state(&mut s, JobState::Waiting, waiting);
    s.oldest_age_seconds = age;
    let follow = size
        .map(|c| vec![(c, Follow::Count(JobState::Waiting))])
        .unwrap_or_default();
    Stage { sample: s, follow }
}

/// The options of a `- preset: huey` entry: the one declaration of the
/// words it takes (`Library::options`, and the refusal of any other).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    /// `name:`, the Huey instance's name (`huey` by default), which names
    /// its keys.
    #[serde(default)]
    name: Option<String>,
}

/// Huey: one queue per instance name (`name:`, default `huey`), its keys
/// under prefixes Huey fixes.
pub struct Huey;

impl Library for Huey {
    fn kind(&self) -> PresetKind {
        KIND
    }

    fn title(&self) -> &'static str {
        "Huey"
    }

    fn options(&self) -> &'static [&'static str] {
        options_of::<Options>()
    }

    fn configure(&self, written: &Written) -> Result<Preset, OptionError> {
        let given: Options = written.read()?;
        let name = match given.name {
            Some(n) if n.is_empty() => return Err("name: must not be empty".into()),
            Some(n) => n,
            None => DEFAULT_NAME.into(),
        };
        Ok(Preset {
            name,
            ..Preset::new(self.kind(), self.default_prefix())
        })
    }

    fn takes_counters(&self) -> bool {
        true
    }

    fn printed_options(&self, preset: &Preset, quote: fn(&str) -> String) -> Vec<String> {
        vec![format!("name: {}", quote(&preset.name))]
    }

    fn fixed_queues(&self, preset: &Preset) -> Vec<Unit> {
        vec![Unit::Queue(preset.name.as_bytes().to_vec())]
    }

    fn fixed_names(&self, preset: &Preset) -> Vec<String> {
        vec![preset.name.clone()]
    }

    /// The queue key (its plan asks only its `TYPE`), the counters hash
    /// (chords, rate limits), `RedisExpireHuey`'s per-result and
    /// per-counter strings, and the result notifications
    /// (`notify_result=True`: one list per task).
    fn owned(&self, _: &Preset, units: &[Unit]) -> Vec<Owned> {
        let mut v = Vec::new();
        for u in units {
            let n = u.name();
            v.push(Owned::Key(queue_key(n)));
            v.push(Owned::Key(key(&[b"huey.counters.", n])));
            for p in [&b"huey.r."[..], b"huey.c.", b"huey.notify."] {
                v.push(Owned::Under(key(&[p, n, b"."])));
            }
        }
        v
    }

    fn plan(&self, _: &Preset, unit: &Unit, now: f64) -> Vec<redis::Cmd> {
        plan(unit.name(), now)
    }

    fn read(&self, _: &Preset, unit: &Unit, r: &[Value], _: f64) -> Stage {
        read(unit.name(), r)
    }

    fn recognition(&self) -> Option<&dyn Recognise> {
        Some(self)
    }
}

impl Recognise for Huey {
    fn is_evidence(&self, key: &[u8]) -> bool {
        name_of(key).is_some()
    }

    fn evidence(&self, _: &Seen, names: &[Vec<u8>], _: &mut BTreeSet<Vec<u8>>) -> Vec<Vec<u8>> {
        names
            .iter()
            .filter(|k| name_of(k).is_some())
            .cloned()
            .collect()
    }

    /// A `huey.redis.<name>` list or zset, or a `huey.schedule.<name>`
    /// zset, with a name Huey writes: one entry per name.
    fn recognise(
        &self,
        _: &Seen,
        keys: &Keys,
        _: &mut BTreeSet<Vec<u8>>,
    ) -> Vec<(Preset, Vec<Unit>)> {
        let mut names: BTreeSet<&[u8]> = BTreeSet::new();
        for k in keys.keys() {
            if let Some((which, name)) = name_of(k)
                && type_at(keys, k).is_some_and(|t| which.fits(t))
            {
                names.insert(name);
            }
        }
        names
            .into_iter()
            .filter_map(|name| {
                let mut preset = Preset::new(KIND, "");
                preset.name = std::str::from_utf8(name).ok()?.to_string();
                Some((preset, vec![Unit::Queue(name.to_vec())]))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::test_util::*;
    use super::*;
    use crate::snapshot::QueueSample;

    fn states(s: &QueueSample) -> Vec<(JobState, Option<u64>)> {
        let f = s.preset.as_ref().unwrap();
        f.states.iter().map(|(k, v)| (*k, *v)).collect()
    }

    /// Round 1's read, then each follow-up applied with its reply.
    fn poll(r1: &[Value], r2: &[Value]) -> (QueueSample, usize) {
        let st = read(b"huey", r1);
        let mut s = st.sample;
        let n = st.follow.len();
        for ((_, f), v) in st.follow.into_iter().zip(r2) {
            super::super::super::apply(&mut s, f, v, 0.0);
        }
        (s, n)
    }

    #[test]
    fn keys_are_named_as_huey_names_them() {
        assert_eq!(queue_key(b"huey"), b"huey.redis.huey");
        assert_eq!(schedule_key(b"app_1"), b"huey.schedule.app_1");
        assert_eq!(results_key(b"app_1"), b"huey.results.app_1");
    }

    #[test]
    fn only_names_huey_could_write_are_huey_keys() {
        assert_eq!(
            name_of(b"huey.redis.huey"),
            Some((HueyKey::Queue, &b"huey"[..]))
        );
        assert_eq!(
            name_of(b"huey.schedule.App_2"),
            Some((HueyKey::Schedule, &b"App_2"[..]))
        );
        for not in [
            &b"huey.redis."[..],
            b"huey.redis.a.b",
            b"huey.redis.a-b",
            b"huey.results.huey",
            b"huey.counters.huey",
            b"myhuey.redis.huey",
        ] {
            assert_eq!(name_of(not), None, "{}", String::from_utf8_lossy(not));
        }
    }

    #[test]
    fn a_key_of_a_type_huey_never_writes_there_is_not_huey_s() {
        use crate::config::KeyType::{List, Stream, Zset};
        assert!(HueyKey::Queue.fits(List) && HueyKey::Queue.fits(Zset));
        assert!(!HueyKey::Queue.fits(Stream));
        assert!(HueyKey::Schedule.fits(Zset) && !HueyKey::Schedule.fits(List));
    }

    #[test]
    fn the_schedule_is_delayed_with_its_due_jobs_overdue_and_results_are_completed() {
        let (s, n) = poll(&[bulk("list"), int(3), int(1), int(4)], &[int(2)]);
        assert_eq!(n, 1);
        assert_eq!(
            states(&s),
            vec![
                (JobState::Waiting, Some(2)),
                (JobState::Delayed, Some(3)),
                (JobState::Completed, Some(4)),
            ]
        );
        assert_eq!(s.preset.as_ref().unwrap().overdue, Some(1));
        assert_eq!(s.name, "huey");
    }

    #[test]
    fn a_list_queue_is_sized_by_llen_and_its_age_is_unknown() {
        let st = read(b"huey", &[bulk("list"), int(0), int(0), int(0)]);
        let args: Vec<_> = st.follow[0].0.args_iter().collect();
        assert!(matches!(args[0], redis::Arg::Simple(b"LLEN")));
        let (s, _) = poll(&[bulk("list"), int(0), int(0), int(0)], &[int(5)]);
        assert_eq!(states(&s)[0], (JobState::Waiting, Some(5)));
        assert_eq!(s.oldest_age_seconds, None);
    }

    #[test]
    fn a_priority_queue_is_sized_by_zcard_each_job_once() {
        let st = read(b"huey", &[bulk("zset"), int(0), int(0), int(0)]);
        let args: Vec<_> = st.follow[0].0.args_iter().collect();
        assert!(matches!(args[0], redis::Arg::Simple(b"ZCARD")));
        let (s, _) = poll(&[bulk("zset"), int(0), int(0), int(0)], &[int(3)]);
        assert_eq!(states(&s)[0], (JobState::Waiting, Some(3)));
        assert_eq!(s.oldest_age_seconds, None);
    }

    #[test]
    fn no_queue_key_means_nothing_waits_and_needs_no_follow_up() {
        let (s, n) = poll(&[bulk("none"), int(0), int(0), int(0)], &[]);
        assert_eq!(n, 0);
        assert_eq!(states(&s)[0], (JobState::Waiting, Some(0)));
        assert_eq!(s.oldest_age_seconds, Some(0.0));
    }

    #[test]
    fn a_refused_or_foreign_queue_key_leaves_waiting_unknown() {
        for v in [refused(), bulk("hash")] {
            let (s, n) = poll(&[v, int(0), int(0), int(0)], &[]);
            assert_eq!(n, 0);
            assert_eq!(states(&s)[0], (JobState::Waiting, None));
            assert_eq!(s.oldest_age_seconds, None);
        }
        // A refused size, after the type was read.
        let (s, _) = poll(&[bulk("list"), int(0), int(0), int(0)], &[refused()]);
        assert_eq!(states(&s)[0], (JobState::Waiting, None));
        // Refused schedule and results reads.
        let (s, _) = poll(&[bulk("none"), refused(), refused(), refused()], &[]);
        assert!(states(&s)[1..].iter().all(|(_, v)| v.is_none()));
        assert_eq!(s.preset.as_ref().unwrap().overdue, None);
    }

    #[test]
    fn no_results_hash_leaves_completed_unknown_rather_than_zero() {
        // Nothing stored, or RedisExpireHuey's strings: the keys cannot say.
        let (s, _) = poll(&[bulk("none"), int(0), int(0), int(0)], &[]);
        assert_eq!(states(&s)[2], (JobState::Completed, None));
        // The schedule's 0 is a 0: Huey's schedule is always that zset.
        assert_eq!(states(&s)[1], (JobState::Delayed, Some(0)));
    }

    #[test]
    fn huey_keeps_no_active_failed_or_retry_state() {
        let (s, _) = poll(&[bulk("list"), int(0), int(0), int(0)], &[int(1)]);
        let f = s.preset.as_ref().unwrap();
        for st in [JobState::Active, JobState::Failed, JobState::Retry] {
            assert!(!f.states.contains_key(&st), "{st:?}");
        }
        assert_eq!((f.stalled, f.paused), (None, None));
    }
}
