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
//!   number Huey's own `result_count()` gives (`HLEN`).
//!
//! Messages are pickled, and a list message carries no enqueue time, so
//! the oldest job's age is known only for the priority zset, from its
//! members' stamps, and only while every waiting job has one priority (the
//! head is then the oldest). Huey keeps nothing in Redis for a task in
//! progress (a worker pops it and runs it in memory), no stalled work and
//! no arrival counter.
//!
//! Which storage a queue uses is read each poll (`TYPE` in round 1, the
//! size in round 2), so one config serves both and a queue moved from one
//! to the other is read right at the next poll.

use redis::Value;

use super::{Stage, count, due_count, key, preset_sample, set_state};
use crate::snapshot::{JobState, PresetKind, QueueSample};

/// The queue key's prefix (`RedisStorage.queue_key`).
pub const QUEUE_PREFIX: &[u8] = b"huey.redis.";
/// The schedule zset's prefix (`RedisStorage.schedule_key`).
pub const SCHEDULE_PREFIX: &[u8] = b"huey.schedule.";
/// The results hash's prefix (`RedisStorage.result_key`).
pub const RESULTS_PREFIX: &[u8] = b"huey.results.";
/// Huey's default instance name (`Huey.__init__`'s `name='huey'`).
pub const DEFAULT_NAME: &str = "huey";

/// The queue key of the Huey instance `name`.
pub fn queue_key(name: &[u8]) -> Vec<u8> {
    key(&[QUEUE_PREFIX, name])
}

/// The schedule key of the Huey instance `name`.
pub fn schedule_key(name: &[u8]) -> Vec<u8> {
    key(&[SCHEDULE_PREFIX, name])
}

/// The results key of the Huey instance `name`.
pub fn results_key(name: &[u8]) -> Vec<u8> {
    key(&[RESULTS_PREFIX, name])
}

/// Whether Huey could have written `name`: `RedisStorage.clean_name` keeps
/// only `[A-Za-z0-9_]`, so `huey.redis.a.b` or `huey.redis.` is some
/// other writer's key, never a Huey queue's.
pub fn is_huey_name(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_')
}

/// Which of a Huey instance's keys `k` is named like, and the instance's
/// name, if it is one of them.
pub fn name_of(k: &[u8]) -> Option<(HueyKey, &[u8])> {
    [
        (HueyKey::Queue, QUEUE_PREFIX),
        (HueyKey::Schedule, SCHEDULE_PREFIX),
        (HueyKey::Results, RESULTS_PREFIX),
    ]
    .into_iter()
    .find_map(|(which, prefix)| {
        let name = k.strip_prefix(prefix)?;
        is_huey_name(name).then_some((which, name))
    })
}

/// One of the keys Huey keeps per instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HueyKey {
    /// `huey.redis.<name>`: a list, or a zset under `PriorityRedisHuey`.
    Queue,
    /// `huey.schedule.<name>`: a zset.
    Schedule,
    /// `huey.results.<name>`: a hash.
    Results,
}

impl HueyKey {
    /// Whether a key of Redis type `ty` (as `TYPE` names it) is what Huey
    /// writes there; another type is an app's key named like Huey's.
    pub fn fits(self, ty: &str) -> bool {
        match self {
            HueyKey::Queue => ty == "list" || ty == "zset",
            HueyKey::Schedule => ty == "zset",
            HueyKey::Results => ty == "hash",
        }
    }
}

/// How the queue key holds the waiting jobs, from its `TYPE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
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
        match super::reply::as_str(v)? {
            "none" => Some(Storage::Absent),
            "list" => Some(Storage::List),
            "zset" => Some(Storage::Priority),
            _ => None,
        }
    }
}

/// Round 1: the queue key's type, the schedule's size and due count, the
/// results' size.
pub fn plan(name: &[u8], now: f64) -> Vec<redis::Cmd> {
    let schedule = schedule_key(name);
    vec![
        super::cmd("TYPE", &queue_key(name)),
        super::cmd("ZCARD", &schedule),
        // Due jobs Huey's scheduler (every `scheduler_interval`, 1 s by
        // default) has not moved to the queue yet.
        due_count(&schedule, now),
        super::cmd("HLEN", &results_key(name)),
    ]
}

/// Reads [`plan`]'s replies (pure): every state but `waiting`, which the
/// follow-ups [`sizes`] read once the storage is known.
pub fn read(name: &[u8], r: &[Value]) -> (Stage, Option<Storage>) {
    let at = |i: usize| r.get(i).unwrap_or(&Value::Nil);
    let mut s = preset_sample(PresetKind::Huey, name);
    let storage = Storage::of(at(0));
    set_state(&mut s, JobState::Delayed, count(at(1)));
    set_state(&mut s, JobState::Completed, count(at(3)));
    super::facts(&mut s).overdue = count(at(2));
    // Known now only when nothing waits; else after the follow-ups.
    let empty = (storage == Some(Storage::Absent)).then_some(0);
    set_state(&mut s, JobState::Waiting, empty);
    s.oldest_age_seconds = empty.map(|_| 0.0);
    (Stage::done(s), storage)
}

/// Round 2 for a queue key of `storage`: its size and, for the priority
/// zset, its first and last members (the age, when they share a priority).
pub fn sizes(name: &[u8], storage: Storage) -> Vec<redis::Cmd> {
    let q = queue_key(name);
    match storage {
        Storage::Absent => Vec::new(),
        Storage::List => vec![super::cmd("LLEN", &q)],
        Storage::Priority => {
            let mut head = super::cmd("ZRANGE", &q);
            head.arg(0).arg(0).arg("WITHSCORES");
            let mut tail = super::cmd("ZRANGE", &q);
            tail.arg(-1).arg(-1).arg("WITHSCORES");
            vec![super::cmd("ZCARD", &q), head, tail]
        }
    }
}

/// Reads [`sizes`]' replies onto `s` (pure).
pub fn read_sizes(s: &mut QueueSample, storage: Storage, r: &[Value], now: f64) {
    let at = |i: usize| r.get(i).unwrap_or(&Value::Nil);
    let waiting = match storage {
        Storage::Absent => Some(0),
        Storage::List | Storage::Priority => count(at(0)),
    };
    set_state(s, JobState::Waiting, waiting);
    s.oldest_age_seconds = match (waiting, storage) {
        (Some(0), _) => Some(0.0),
        // A pickled message with no enqueue time in it.
        (_, Storage::List) | (None, _) => None,
        (Some(_), _) => oldest_of_one_priority(at(1), at(2)).map(|t| (now - t).max(0.0)),
    };
}

/// The enqueue time (unix seconds) of the priority zset's oldest member,
/// given its first and last members: the first when both have one score
/// (one priority, so members sort by their stamp); unknown otherwise, as
/// an older job may wait at a lower priority.
fn oldest_of_one_priority(head: &Value, tail: &Value) -> Option<f64> {
    let (member, first) = member_and_score(head)?;
    let (_, last) = member_and_score(tail)?;
    if first != last {
        return None;
    }
    member_stamp(member)
}

/// The member and score of a one-member `ZRANGE .. WITHSCORES` reply
/// (RESP2 `[member, score]` or RESP3 `[[member, score]]`).
fn member_and_score(v: &Value) -> Option<(&[u8], f64)> {
    let items = super::reply::as_array(v)?;
    let pair = match items {
        [Value::Array(pair)] => pair.as_slice(),
        pair => pair,
    };
    let [member, score] = pair else {
        return None;
    };
    Some((
        super::reply::as_bytes(member)?,
        super::reply::as_f64(score)?,
    ))
}

/// The enqueue time in unix seconds that `PriorityRedisStorage.enqueue`
/// put in front of a message (`struct.pack('>Q', int(time.time() * 1e6))`).
fn member_stamp(member: &[u8]) -> Option<f64> {
    let stamp: [u8; 8] = member.get(..8)?.try_into().ok()?;
    let micros = u64::from_be_bytes(stamp);
    // A stamp of 0 is no time at all.
    (micros > 0).then(|| micros as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;

    /// A priority-zset member as Huey writes it: the stamp, then the message.
    fn member(micros: u64) -> Value {
        let mut m = micros.to_be_bytes().to_vec();
        m.extend_from_slice(b"\x80\x04pickled");
        Value::BulkString(m)
    }

    fn one(member: Value, score: &str) -> Value {
        Value::Array(vec![member, bulk(score)])
    }

    fn states(s: &QueueSample) -> Vec<(JobState, Option<u64>)> {
        let f = s.preset.as_ref().unwrap();
        f.states.iter().map(|(k, v)| (*k, *v)).collect()
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
        assert_eq!(
            name_of(b"huey.results.x"),
            Some((HueyKey::Results, &b"x"[..]))
        );
        for not in [
            &b"huey.redis."[..],
            b"huey.redis.a.b",
            b"huey.redis.a-b",
            b"huey.counters.huey",
            b"huey.r.huey.abc",
            b"myhuey.redis.huey",
        ] {
            assert_eq!(name_of(not), None, "{}", String::from_utf8_lossy(not));
        }
    }

    #[test]
    fn a_key_of_a_type_huey_never_writes_there_is_not_huey_s() {
        assert!(HueyKey::Queue.fits("list") && HueyKey::Queue.fits("zset"));
        assert!(!HueyKey::Queue.fits("hash"));
        assert!(HueyKey::Schedule.fits("zset") && !HueyKey::Schedule.fits("list"));
        assert!(HueyKey::Results.fits("hash") && !HueyKey::Results.fits("zset"));
    }

    #[test]
    fn the_schedule_is_delayed_with_its_due_jobs_overdue_and_results_are_completed() {
        let (st, storage) = read(b"huey", &[bulk("list"), int(3), int(1), int(4)]);
        assert_eq!(storage, Some(Storage::List));
        assert_eq!(
            states(&st.sample),
            vec![
                (JobState::Waiting, None),
                (JobState::Delayed, Some(3)),
                (JobState::Completed, Some(4)),
            ]
        );
        assert_eq!(st.sample.preset.as_ref().unwrap().overdue, Some(1));
        assert_eq!(st.sample.name, "huey");
    }

    #[test]
    fn no_queue_key_means_nothing_waits_and_needs_no_follow_up() {
        let (st, storage) = read(b"huey", &[bulk("none"), int(0), int(0), int(0)]);
        assert_eq!(storage, Some(Storage::Absent));
        assert!(sizes(b"huey", Storage::Absent).is_empty());
        assert_eq!(states(&st.sample)[0], (JobState::Waiting, Some(0)));
        assert_eq!(st.sample.oldest_age_seconds, Some(0.0));
    }

    #[test]
    fn a_refused_or_foreign_queue_key_leaves_waiting_unknown() {
        for v in [refused(), bulk("hash")] {
            let (st, storage) = read(b"huey", &[v, int(0), int(0), int(0)]);
            assert_eq!(storage, None);
            assert_eq!(states(&st.sample)[0], (JobState::Waiting, None));
            assert_eq!(st.sample.oldest_age_seconds, None);
        }
        let (st, _) = read(b"huey", &[bulk("list"), refused(), refused(), refused()]);
        assert!(states(&st.sample)[1..].iter().all(|(_, v)| v.is_none()));
        assert_eq!(st.sample.preset.as_ref().unwrap().overdue, None);
    }

    #[test]
    fn a_list_queue_has_its_length_and_no_age() {
        let (mut st, _) = read(b"huey", &[bulk("list"), int(0), int(0), int(0)]);
        read_sizes(&mut st.sample, Storage::List, &[int(5)], 1000.0);
        assert_eq!(states(&st.sample)[0], (JobState::Waiting, Some(5)));
        assert_eq!(st.sample.oldest_age_seconds, None);
        // Emptied between the rounds: nothing waits.
        read_sizes(&mut st.sample, Storage::List, &[int(0)], 1000.0);
        assert_eq!(st.sample.oldest_age_seconds, Some(0.0));
    }

    #[test]
    fn a_priority_queue_counts_each_job_once_and_ages_it_when_all_share_a_priority() {
        let (mut st, _) = read(b"p", &[bulk("zset"), int(0), int(0), int(0)]);
        let replies = [
            int(3),
            one(member(990_500_000), "-5"),
            one(member(995_000_000), "-5"),
        ];
        read_sizes(&mut st.sample, Storage::Priority, &replies, 1000.0);
        assert_eq!(states(&st.sample)[0], (JobState::Waiting, Some(3)));
        assert_eq!(st.sample.oldest_age_seconds, Some(9.5));
    }

    #[test]
    fn mixed_priorities_leave_the_age_unknown() {
        let (mut st, _) = read(b"p", &[bulk("zset"), int(0), int(0), int(0)]);
        let replies = [
            int(2),
            one(member(999_000_000), "-5"),
            one(member(900_000_000), "0"),
        ];
        read_sizes(&mut st.sample, Storage::Priority, &replies, 1000.0);
        assert_eq!(states(&st.sample)[0], (JobState::Waiting, Some(2)));
        assert_eq!(st.sample.oldest_age_seconds, None);
    }

    #[test]
    fn resp3_pairs_and_unreadable_members_are_handled() {
        let pair = |m: Value, s: f64| Value::Array(vec![Value::Array(vec![m, Value::Double(s)])]);
        assert_eq!(
            oldest_of_one_priority(
                &pair(member(2_000_000), 0.0),
                &pair(member(3_000_000), 0.0)
            ),
            Some(2.0)
        );
        // Shorter than a stamp, or a stamp of 0: not a time.
        let short = Value::Array(vec![bulk("abc"), bulk("0")]);
        assert_eq!(oldest_of_one_priority(&short, &short), None);
        let zero = one(member(0), "0");
        assert_eq!(oldest_of_one_priority(&zero, &zero), None);
        assert_eq!(oldest_of_one_priority(&refused(), &refused()), None);
    }

    #[test]
    fn a_refused_size_leaves_waiting_and_age_unknown() {
        let (mut st, _) = read(b"p", &[bulk("zset"), int(0), int(0), int(0)]);
        read_sizes(
            &mut st.sample,
            Storage::Priority,
            &[refused(), refused(), refused()],
            1000.0,
        );
        assert_eq!(states(&st.sample)[0], (JobState::Waiting, None));
        assert_eq!(st.sample.oldest_age_seconds, None);
    }
}
