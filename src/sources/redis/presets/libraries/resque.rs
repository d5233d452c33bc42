//! Resque (Ruby) and its Node port node-resque (npm `node-resque` 9.x,
//! which writes Resque's key names), under a namespace (`resque` by
//! default: node-resque's `namespace` option, joined to the parts with
//! `:` by `Connection#key`, `src/core/connection.ts`; Ruby Resque's
//! `Redis::Namespace`, its names in `lib/resque/data_store.rb`):
//!
//! - `<ns>:queues`: the set of queue names (`src/core/queue.ts`,
//!   `Queue#enqueue`: `SADD`), the registry.
//! - `<ns>:queue:<q>`: the queue's list of JSON jobs `{"class", "queue",
//!   "args"}` (`Queue#encode`), pushed with `RPUSH` (`Queue#enqueue`) and
//!   taken with `LPOP` (`src/core/worker.ts`, `Worker#getJob`): `waiting`.
//!   A job carries no enqueue time, so the oldest job's age is unknown
//!   while jobs wait (0 once the list is empty).
//! - `<ns>:workers`: the set of worker ids `<name>:<queues>`
//!   (`Worker#track`); `<ns>:worker:<id>`: a string holding the job the
//!   worker runs, there only while it runs one (`Worker#getJob` sets it,
//!   `Worker#completeJob` deletes it), JSON `{"run_at", "queue",
//!   "payload", "worker"}` with `run_at` when the worker took the job
//!   (`new Date().toString()`). Each is read with `GET`, for at most
//!   `stalled_check_limit` workers (more, and both are unknown): `active`
//!   is the workers whose string exists, and the oldest running job's age
//!   (`PresetFacts::oldest_active_age_seconds`) is now − the earliest
//!   `run_at` (unknown if one is not a stamp; 0 when none runs). A worker that died mid-job keeps its id and
//!   string until something cleans them (`Queue#forceCleanWorker`): still
//!   `active`; no heartbeat with an expiry tells it dead
//!   (`worker:ping:<name>` is a stamp kept for ever; Ruby Resque's
//!   `workers:heartbeat` hash is not written by node-resque, and not
//!   read), so `stalled` is unknown.
//! - `<ns>:failed`: the list of failed jobs, every queue's
//!   (`Worker#fail`: `RPUSH`): `failed`; unknown where Ruby Resque's
//!   `RedisMultiQueue` failure backend keeps them in `<q>_failed` lists
//!   instead (its `<ns>:failed_queues` set has members).
//! - `<ns>:stat:processed`, `<ns>:stat:failed`: totals over every queue
//!   (`Worker#succeed`, `Worker#fail`: `INCR`).
//! - `<ns>:delayed_queue_schedule`: the zset of due times in unix seconds,
//!   each member its own score (`Queue#enqueueAt`), over
//!   `<ns>:delayed:<seconds>` lists of jobs: `delayed` is the sum of those
//!   lists' lengths, those at or before now overdue (the scheduler moves
//!   `0..now`: `src/core/scheduler.ts`, `Scheduler#nextDelayedTimestamp`),
//!   read for at most [`DELAYED_TIMESTAMPS`] timestamps (more, and both
//!   are unknown).
//!
//! Every state but `waiting` belongs to no queue: one sample `(all)`
//! carries them, as Sidekiq's. Resque keeps no count per queue of what
//! was added or processed, and no finished job: arrivals and service time
//! are not measured without `counters:`. Resque has no pause.

use serde::Deserialize;
use std::collections::BTreeSet;

use redis::Value;

use super::super::library::{
    ALL_QUEUES, Follow, Hidden, JobState, JobTotals, KeyType, Keys, Library, MarkRead, OptionError,
    Owned, Preset, PresetKind, QueueSample, ReadReply, Recognise, Registry, Seen, Stage, TimeUnit,
    Unit, Written, cmd, count, facts, kept_elsewhere, key, options_of, prefix_or,
    prefixed_registry_hides, preset_sample, registry_prefix, reply, set_state, shared_sample,
    sorted, stalled_check_limit, type_at, under_prefixed_registry,
};

/// Resque's `preset` name.
pub const KIND: PresetKind = PresetKind::named("resque");

/// Resque's default namespace (node-resque's `namespace` option).
const DEFAULT_NAMESPACE: &str = "resque";

/// What an unknown age of a Resque queue means, for KEDA's message.
const AGE_UNKNOWN: &str = ": Resque's jobs carry no enqueue time (a job is its class, queue \
     and args), so the oldest waiting job's age is unknown while jobs wait, or Redis refused \
     the read";

/// The delayed timestamps read per poll, at most: each is one `LLEN` in
/// round 2, and more than this leave `delayed` and overdue unknown.
pub const DELAYED_TIMESTAMPS: usize = 1000;

/// The states Resque keeps for all its queues together, under `(all)`.
pub const SHARED_STATES: &[JobState] = &[JobState::Active, JobState::Delayed, JobState::Failed];

/// The states Resque keeps per queue: its `queue:<q>` list.
pub const QUEUE_STATES: &[JobState] = &[JobState::Waiting];

/// The key `<ns>:<name>`.
fn k(ns: &str, name: &[u8]) -> Vec<u8> {
    key(&[ns.as_bytes(), b":", name])
}

/// Round 1: one command per queue; six for the shared keys (`(all)`).
/// `workers` and the delayed schedule are read bounded: at most `limit` + 1
/// workers (`SRANDMEMBER` with a positive count gives distinct members)
/// and [`DELAYED_TIMESTAMPS`] + 1 timestamps, so a reply within the bound
/// is all of it.
pub fn plan(ns: &str, unit: &Unit, limit: usize) -> Vec<redis::Cmd> {
    let Unit::Queue(q) = unit else {
        let mut workers = cmd("SRANDMEMBER", &k(ns, b"workers"));
        workers.arg(limit.saturating_add(1));
        let mut delayed = cmd("ZRANGE", &k(ns, b"delayed_queue_schedule"));
        delayed.arg(0).arg(DELAYED_TIMESTAMPS);
        return vec![
            cmd("LLEN", &k(ns, b"failed")),
            cmd("GET", &k(ns, b"stat:processed")),
            cmd("GET", &k(ns, b"stat:failed")),
            workers,
            delayed,
            // Ruby Resque's `RedisMultiQueue` failure backend names its
            // per-queue `<q>_failed` lists here, and leaves `failed` empty.
            cmd("SCARD", &k(ns, b"failed_queues")),
        ];
    };
    vec![cmd("LLEN", &k(ns, &key(&[b"queue:", q])))]
}

/// Reads [`plan`]'s replies (pure).
pub fn read(ns: &str, unit: &Unit, r: &[Value], now: f64, limit: usize) -> Stage {
    let at = |i: usize| r.get(i).unwrap_or(&Value::Nil);
    let Unit::Queue(q) = unit else {
        let mut s = shared_sample(KIND);
        kept_elsewhere(&mut s, QUEUE_STATES);
        set_state(&mut s, JobState::Failed, failed(at(0), at(5)));
        s.set_jobs(JobTotals {
            processed: count(at(1)),
            failed: count(at(2)),
        });
        let mut follow = workers(ns, &mut s, at(3), limit);
        follow.extend(delayed(ns, &mut s, at(4), now));
        return Stage { sample: s, follow };
    };
    let mut s = preset_sample(KIND, q);
    kept_elsewhere(&mut s, SHARED_STATES);
    facts(&mut s).age_unknown_why = Some(AGE_UNKNOWN);
    let waiting = count(at(0));
    set_state(&mut s, JobState::Waiting, waiting);
    // A job holds no enqueue time: the age is known only of an empty queue.
    s.oldest_age_seconds = (waiting == Some(0)).then_some(0.0);
    Stage::done(s)
}

/// The `failed` list's length, unless failed jobs are kept per queue
/// (a `failed_queues` set with members: the `failed` list is then not
/// where they are) or either read was refused: unknown, never 0.
fn failed(list: &Value, per_queue: &Value) -> Option<u64> {
    match count(per_queue)? {
        0 => count(list),
        _ => None,
    }
}

/// `active` and the oldest running job's age from the workers read: 0,
/// then one `GET` per worker's job string ([`add_running`]); both unknown
/// when `workers` was refused, unreadable or beyond the limit (the jobs of
/// the workers not checked would be missing).
fn workers(
    ns: &str,
    s: &mut QueueSample,
    members: &Value,
    limit: usize,
) -> Vec<(redis::Cmd, Follow)> {
    let Some(members) = reply::as_array(members).filter(|m| m.len() <= limit) else {
        set_state(s, JobState::Active, None);
        facts(s).oldest_active_age_seconds = None;
        return Vec::new();
    };
    set_state(s, JobState::Active, Some(0));
    facts(s).oldest_active_age_seconds = Some(0.0);
    members
        .iter()
        .filter_map(reply::as_bytes)
        .map(|id| {
            let job = k(ns, &key(&[b"worker:", id]));
            (cmd("GET", &job), Follow::Read(ReadReply(add_running)))
        })
        .collect()
}

/// One worker's job string, read by `GET` (pure): none, the worker is idle;
/// a string, it runs a job: one more `active`, and the oldest running
/// job's age is the older of the two, that job's from its `run_at`. A
/// `run_at` missing or no stamp leaves the age unknown (that job may be
/// the oldest), never 0; a refused or unreadable reply leaves both
/// unknown.
fn add_running(s: &mut QueueSample, v: &Value, now: f64) {
    let f = facts(s);
    if matches!(v, Value::Nil) {
        return;
    }
    let Some(job) = reply::as_bytes(v) else {
        f.states.insert(JobState::Active, None);
        f.oldest_active_age_seconds = None;
        return;
    };
    let active = f.states.entry(JobState::Active).or_insert(Some(0));
    *active = active.map(|n| n + 1);
    let age = run_at(job).map(|t| (now - t).max(0.0));
    f.oldest_active_age_seconds = f.oldest_active_age_seconds.zip(age).map(|(a, b)| a.max(b));
}

/// Unix seconds of a worker's job string's `run_at`: node-resque's
/// `new Date().toString()` text (`Wed Dec 02 2026 18:38:08 GMT+0000
/// (Coordinated Universal Time)`: `Worker#getJob`, and the
/// `popAndStoreJob.lua` script it is passed to), or RFC 3339 text; `None`
/// for no JSON, no `run_at`, or any other text.
fn run_at(job: &[u8]) -> Option<f64> {
    let json: serde_json::Value = serde_json::from_slice(job).ok()?;
    let text = json.get("run_at")?.as_str()?;
    if let Some(t) = TimeUnit::Rfc3339.text_to_seconds(text) {
        return Some(t);
    }
    // The zone's name in parentheses is the platform's, and not needed.
    let stamp = text.split(" (").next()?;
    chrono::DateTime::parse_from_str(stamp, "%a %b %d %Y %H:%M:%S GMT%z")
        .ok()
        .map(|t| t.timestamp() as f64)
}

/// `delayed` and overdue from the schedule read: 0, then one `LLEN` per
/// timestamp's list, those at or before `now` counted overdue too; both
/// unknown when the schedule was refused, unreadable or beyond
/// [`DELAYED_TIMESTAMPS`], or a timestamp is no number.
fn delayed(ns: &str, s: &mut QueueSample, stamps: &Value, now: f64) -> Vec<(redis::Cmd, Follow)> {
    let stamps = reply::as_array(stamps).filter(|m| m.len() <= DELAYED_TIMESTAMPS);
    let parsed: Option<Vec<(&[u8], f64)>> = stamps.and_then(|m| {
        m.iter()
            .map(|v| {
                let b = reply::as_bytes(v)?;
                let t = std::str::from_utf8(b).ok()?.parse::<f64>().ok()?;
                Some((b, t))
            })
            .collect()
    });
    let Some(parsed) = parsed else {
        set_state(s, JobState::Delayed, None);
        facts(s).overdue = None;
        return Vec::new();
    };
    set_state(s, JobState::Delayed, Some(0));
    facts(s).overdue = Some(0);
    parsed
        .into_iter()
        .map(|(stamp, t)| {
            let list = k(ns, &key(&[b"delayed:", stamp]));
            let add = if t <= now { add_overdue } else { add_delayed };
            (cmd("LLEN", &list), Follow::Read(ReadReply(add)))
        })
        .collect()
}

/// Adds one delayed list's length to `delayed`; an unreadable one makes
/// it unknown.
fn add_delayed(s: &mut QueueSample, v: &Value, _: f64) {
    let f = facts(s);
    let delayed = f.states.entry(JobState::Delayed).or_insert(Some(0));
    *delayed = delayed.zip(count(v)).map(|(a, n)| a + n);
}

/// Adds one due delayed list's length to `delayed` and to overdue.
fn add_overdue(s: &mut QueueSample, v: &Value, now: f64) {
    add_delayed(s, v, now);
    let f = facts(s);
    f.overdue = f.overdue.zip(count(v)).map(|(a, n)| a + n);
}

/// The options of a `- preset: resque` entry: the one declaration of the
/// words it takes (`Library::options`, and the refusal of any other).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    /// `prefix:`, the namespace (`resque` by default).
    #[serde(default)]
    prefix: Option<String>,
    /// `stalled_check_limit:`: the workers whose job string is checked per
    /// poll, at most.
    #[serde(default)]
    stalled_check_limit: Option<usize>,
}

/// Resque and node-resque: queues from `<ns>:queues`, and the keys every
/// queue shares under `(all)`.
pub struct Resque;

impl Library for Resque {
    fn kind(&self) -> PresetKind {
        KIND
    }

    fn title(&self) -> &'static str {
        "Resque"
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
        DEFAULT_NAMESPACE
    }

    fn registry(&self, preset: &Preset) -> Registry {
        Registry::Set(k(&preset.prefix, b"queues"))
    }

    fn fixed_queues(&self, _: &Preset) -> Vec<Unit> {
        vec![Unit::Shared]
    }

    fn fixed_names(&self, _: &Preset) -> Vec<String> {
        vec![ALL_QUEUES.to_string()]
    }

    /// Bare names, and the shared keys beside them.
    fn registry_units(&self, _: &Preset, members: Vec<Vec<u8>>) -> Vec<Unit> {
        let mut units: Vec<Unit> = members.into_iter().map(Unit::Queue).collect();
        units.push(Unit::Shared);
        sorted(units)
    }

    /// The delayed lists (read in round 2 only), the workers' strings and
    /// the delayed jobs' `timestamps:` sets.
    fn owned(&self, preset: &Preset, _: &[Unit]) -> Vec<Owned> {
        let ns = preset.prefix.as_str();
        let mut v: Vec<Owned> = [&b"delayed:"[..], b"worker:", b"timestamps:", b"stat:"]
            .iter()
            .map(|n| Owned::Under(k(ns, n)))
            .collect();
        v.push(Owned::Key(k(ns, b"workers")));
        v
    }

    fn plan(&self, preset: &Preset, unit: &Unit, _: f64) -> Vec<redis::Cmd> {
        plan(&preset.prefix, unit, preset.stalled_check_limit)
    }

    fn read(&self, preset: &Preset, unit: &Unit, r: &[Value], now: f64) -> Stage {
        read(&preset.prefix, unit, r, now, preset.stalled_check_limit)
    }

    /// An unread `<ns>:queues`: any key under `<ns>:` may be Resque's.
    fn withheld(&self, mark: &[u8], keys: &Keys) -> Vec<Vec<u8>> {
        under_prefixed_registry(mark, keys)
    }

    fn hidden(&self, mark: &[u8]) -> Option<Hidden> {
        prefixed_registry_hides(mark)
    }

    fn recognition(&self) -> Option<&dyn Recognise> {
        Some(self)
    }
}

/// Sidekiq's namespace-wide zsets: beside a `<ns>:queues`, they say the
/// namespace is Sidekiq's, not Resque's (the two share the registry and
/// queue-list names).
const OTHERS_ZSETS: [&[u8]; 3] = [b"schedule", b"retry", b"dead"];

/// The keys only Resque writes beside its registry, with their type: the
/// failed list and the delayed schedule.
const SIGNS: [(&[u8], KeyType); 2] = [
    (b"failed", KeyType::List),
    (b"delayed_queue_schedule", KeyType::Zset),
];

impl Recognise for Resque {
    fn fixed_marks(&self) -> &'static [&'static [u8]] {
        &[b"resque:queues"]
    }

    /// A set `<ns>:queues` (shared in shape with Sidekiq's namespaces,
    /// RQ's and asynq's: the keys beside tell).
    fn mark_read(&self, key: &[u8]) -> Option<MarkRead> {
        registry_prefix(key)
            .filter(|p| !p.is_empty())
            .map(|_| MarkRead::Set)
    }

    /// For each `<ns>:queues` no library told: its members' queue lists,
    /// Resque's failed list and delayed schedule, and Sidekiq's zsets.
    fn evidence(&self, seen: &Seen, _: &[Vec<u8>], told: &mut BTreeSet<Vec<u8>>) -> Vec<Vec<u8>> {
        let mut wanted = Vec::new();
        for (set, members) in seen.sets() {
            let Some(ns) = registry_prefix(set).filter(|p| !p.is_empty()) else {
                continue;
            };
            if told.contains(set) {
                continue;
            }
            wanted.extend(members.iter().map(|m| key(&[ns, b":queue:", m])));
            let beside = SIGNS.iter().map(|(n, _)| *n).chain(OTHERS_ZSETS);
            wanted.extend(beside.map(|n| key(&[ns, b":", n])));
        }
        wanted
    }

    /// A set `<ns>:queues` of bare names beside a list `<ns>:queue:<m>`
    /// for some member, with no Sidekiq zset in the namespace, and either
    /// the default namespace `resque` or Resque's failed list or delayed
    /// schedule beside it. Claimed before Sidekiq looks (its claim rank is
    /// higher), which would otherwise take it as a Sidekiq namespace.
    fn recognise(
        &self,
        seen: &Seen,
        keys: &Keys,
        claimed: &mut BTreeSet<Vec<u8>>,
    ) -> Vec<(Preset, Vec<Unit>)> {
        let mut out = Vec::new();
        for (set, members) in seen.sets() {
            let Some(ns) = registry_prefix(set).filter(|p| !p.is_empty()) else {
                continue;
            };
            let Ok(text) = std::str::from_utf8(ns) else {
                continue;
            };
            if claimed.contains(set) || members.is_empty() || members.iter().any(Vec::is_empty) {
                continue;
            }
            if is_resque(text, members, keys) {
                claimed.insert(set.clone());
                let preset = Preset::new(KIND, text);
                let units = self.registry_units(&preset, members.clone());
                out.push((preset, units));
            }
        }
        out
    }
}

/// Whether the registry `<ns>:queues` holding `members` is Resque's, by
/// the keys found beside it ([`Recognise::recognise`]).
fn is_resque(ns: &str, members: &[Vec<u8>], keys: &Keys) -> bool {
    let queue_list = members
        .iter()
        .any(|m| type_at(keys, &k(ns, &key(&[b"queue:", m]))) == Some(KeyType::List));
    let others = OTHERS_ZSETS
        .iter()
        .any(|n| type_at(keys, &k(ns, n)) == Some(KeyType::Zset));
    let sign = SIGNS
        .iter()
        .any(|(n, t)| type_at(keys, &k(ns, n)) == Some(*t));
    queue_list && !others && (ns == DEFAULT_NAMESPACE || sign)
}

#[cfg(test)]
mod tests {
    use super::super::super::test_util::*;
    use super::*;

    fn queue(name: &str) -> Unit {
        Unit::Queue(name.as_bytes().to_vec())
    }

    /// Round-1 replies of `(all)`: failed, the two totals, the workers
    /// read and the delayed timestamps read.
    fn all(workers: Value, stamps: Value) -> Vec<Value> {
        vec![int(1), bulk("10"), bulk("2"), workers, stamps, int(0)]
    }

    #[test]
    fn a_queue_is_its_list_waiting_with_no_age_while_jobs_wait() {
        let st = read("resque", &queue("default"), &[int(3)], 10.0, 100);
        let f = st.sample.preset.as_ref().unwrap();
        assert_eq!(f.states[&JobState::Waiting], Some(3));
        assert_eq!(st.sample.oldest_age_seconds, None);
        assert_eq!(f.age_unknown_why, Some(AGE_UNKNOWN));
        assert_eq!(f.paused, None);
        assert!(st.follow.is_empty());
        let plan = plan("resque", &queue("default"), 100);
        assert_eq!(
            plan[0].get_packed_command(),
            redis::cmd("LLEN")
                .arg("resque:queue:default")
                .get_packed_command()
        );
    }

    #[test]
    fn an_empty_queue_has_no_job_waiting_for_any_time() {
        let st = read("resque", &queue("default"), &[Value::Nil], 10.0, 100);
        assert_eq!(st.sample.oldest_age_seconds, Some(0.0));
        let refused_read = read("resque", &queue("default"), &[refused()], 10.0, 100);
        let f = refused_read.sample.preset.as_ref().unwrap();
        assert_eq!(f.states[&JobState::Waiting], None);
        assert_eq!(refused_read.sample.oldest_age_seconds, None);
    }

    #[test]
    fn all_reads_failed_totals_and_gets_each_workers_job_string() {
        let st = read(
            "ns",
            &Unit::Shared,
            &all(list(&["h:1:a", "h:2:b,c"]), list(&[])),
            0.0,
            2,
        );
        let f = st.sample.preset.as_ref().unwrap();
        assert_eq!(f.states[&JobState::Failed], Some(1));
        assert_eq!(f.states[&JobState::Active], Some(0));
        assert_eq!(f.oldest_active_age_seconds, Some(0.0));
        assert_eq!(f.stalled, None);
        assert_eq!(st.sample.jobs().processed, Some(10));
        assert_eq!(st.sample.jobs().failed, Some(2));
        assert_eq!(st.follow.len(), 2);
        assert_eq!(
            st.follow[1].0.get_packed_command(),
            redis::cmd("GET")
                .arg("ns:worker:h:2:b,c")
                .get_packed_command()
        );
        assert_eq!(st.follow[1].1, Follow::Read(ReadReply(add_running)));
    }

    /// `(all)` after its workers' job strings are read: `replies`, one per
    /// worker, at `now`.
    fn running(replies: &[Value], now: f64) -> crate::snapshot::PresetFacts {
        let ids: Vec<String> = (0..replies.len()).map(|i| format!("w{i}")).collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let mut st = read("ns", &Unit::Shared, &all(list(&ids), list(&[])), now, 10);
        for v in replies {
            add_running(&mut st.sample, v, now);
        }
        *st.sample.preset.unwrap()
    }

    /// A worker's job string as node-resque writes it (`Worker#getJob`).
    fn job_string(run_at: &str) -> Value {
        bulk(&format!(
            r#"{{"run_at":"{run_at}","queue":"slow","payload":{{"class":"hang","queue":"slow","args":[]}},"worker":"h:1:slow"}}"#
        ))
    }

    #[test]
    fn active_counts_the_workers_running_a_job_and_the_oldest_ones_age() {
        // 1,800,000,000 s is Fri Jan 15 2027 08:00:00 UTC.
        let f = running(
            &[
                job_string("Fri Jan 15 2027 08:00:00 GMT+0000 (Coordinated Universal Time)"),
                Value::Nil,
                job_string("Fri Jan 15 2027 09:00:30 GMT+0100 (Central European Standard Time)"),
            ],
            1_800_000_100.0,
        );
        assert_eq!(f.states[&JobState::Active], Some(2));
        assert_eq!(f.oldest_active_age_seconds, Some(100.0));
        let f = running(&[job_string("2027-01-15T07:58:20Z")], 1_800_000_000.0);
        assert_eq!(f.oldest_active_age_seconds, Some(100.0));
    }

    #[test]
    fn no_job_running_is_an_age_of_0() {
        let f = running(&[Value::Nil, Value::Nil], 1_800_000_000.0);
        assert_eq!(f.states[&JobState::Active], Some(0));
        assert_eq!(f.oldest_active_age_seconds, Some(0.0));
    }

    /// The job whose `run_at` is no stamp may be the oldest: its age is
    /// unknown, never 0 nor the others' oldest; the job still counts.
    #[test]
    fn a_run_at_that_is_no_stamp_leaves_the_age_unknown_never_0() {
        let now = 1_800_000_100.0;
        let older = job_string("Fri Jan 15 2027 08:00:00 GMT+0000 (UTC)");
        for bad in [
            job_string("soon"),
            job_string(""),
            bulk("not json"),
            bulk("{}"),
        ] {
            let f = running(&[older.clone(), bad], now);
            assert_eq!(f.states[&JobState::Active], Some(2));
            assert_eq!(f.oldest_active_age_seconds, None);
        }
    }

    #[test]
    fn a_refused_job_string_leaves_active_and_the_age_unknown() {
        let f = running(&[refused(), Value::Nil], 1_800_000_000.0);
        assert_eq!(f.states[&JobState::Active], None);
        assert_eq!(f.oldest_active_age_seconds, None);
    }

    /// Ruby Resque's `RedisMultiQueue` backend keeps failed jobs in
    /// `<q>_failed` lists named in `failed_queues`: the empty `failed` list
    /// would say 0 while jobs failed.
    #[test]
    fn failed_jobs_kept_per_queue_leave_failed_unknown() {
        let mut r = all(list(&[]), list(&[]));
        r[0] = Value::Nil;
        r[5] = int(2);
        let st = read("ns", &Unit::Shared, &r, 0.0, 2);
        let f = st.sample.preset.as_ref().unwrap();
        assert_eq!(f.states[&JobState::Failed], None);
        r[5] = refused();
        let st = read("ns", &Unit::Shared, &r, 0.0, 2);
        assert_eq!(st.sample.preset.unwrap().states[&JobState::Failed], None);
        r[5] = Value::Nil;
        let st = read("ns", &Unit::Shared, &r, 0.0, 2);
        assert_eq!(st.sample.preset.unwrap().states[&JobState::Failed], Some(0));
    }

    #[test]
    fn more_workers_than_the_limit_leave_active_and_its_age_unknown() {
        let st = read(
            "ns",
            &Unit::Shared,
            &all(list(&["a", "b", "c"]), list(&[])),
            0.0,
            2,
        );
        let f = st.sample.preset.as_ref().unwrap();
        assert_eq!(f.states[&JobState::Active], None);
        assert_eq!(f.oldest_active_age_seconds, None);
        assert!(st.follow.is_empty());
        let refused_read = read("ns", &Unit::Shared, &all(refused(), list(&[])), 0.0, 2);
        let f = refused_read.sample.preset.as_ref().unwrap();
        assert_eq!(f.states[&JobState::Active], None);
        assert_eq!(f.oldest_active_age_seconds, None);
    }

    #[test]
    fn delayed_sums_each_timestamps_list_and_the_due_ones_are_overdue() {
        let mut st = read(
            "ns",
            &Unit::Shared,
            &all(list(&[]), list(&["100", "200"])),
            150.0,
            2,
        );
        assert_eq!(st.follow.len(), 2);
        assert_eq!(
            st.follow[0].0.get_packed_command(),
            redis::cmd("LLEN")
                .arg("ns:delayed:100")
                .get_packed_command()
        );
        let follows: Vec<Follow> = st.follow.iter().map(|(_, f)| *f).collect();
        for (f, v) in follows.into_iter().zip([int(1), int(2)]) {
            let Follow::Read(ReadReply(apply)) = f else {
                panic!("a delayed list's length is read by its own function")
            };
            apply(&mut st.sample, &v, 150.0);
        }
        let f = st.sample.preset.as_ref().unwrap();
        assert_eq!(f.states[&JobState::Delayed], Some(3));
        assert_eq!(f.overdue, Some(1));
    }

    #[test]
    fn an_unreadable_delayed_list_leaves_delayed_unknown() {
        let mut s = shared_sample(KIND);
        set_state(&mut s, JobState::Delayed, Some(0));
        facts(&mut s).overdue = Some(0);
        add_overdue(&mut s, &refused(), 0.0);
        add_delayed(&mut s, &int(4), 0.0);
        let f = s.preset.as_ref().unwrap();
        assert_eq!(f.states[&JobState::Delayed], None);
        assert_eq!(f.overdue, None);
    }

    #[test]
    fn more_timestamps_than_the_bound_or_one_not_a_number_leave_delayed_unknown() {
        let many: Vec<String> = (0..=DELAYED_TIMESTAMPS).map(|i| i.to_string()).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        for stamps in [list(&many), list(&["soon"]), refused()] {
            let st = read("ns", &Unit::Shared, &all(list(&[]), stamps), 0.0, 2);
            let f = st.sample.preset.as_ref().unwrap();
            assert_eq!(f.states[&JobState::Delayed], None);
            assert_eq!(f.overdue, None);
            assert!(st.follow.is_empty());
        }
        let plan = plan("ns", &Unit::Shared, 2);
        assert_eq!(
            plan[4].get_packed_command(),
            redis::cmd("ZRANGE")
                .arg("ns:delayed_queue_schedule")
                .arg(0)
                .arg(DELAYED_TIMESTAMPS)
                .get_packed_command()
        );
    }

    /// The states each unit reads are exactly those it says it holds, and
    /// each names the other's as kept elsewhere.
    #[test]
    fn each_unit_holds_its_states_and_names_the_others_as_elsewhere() {
        let shared = read("ns", &Unit::Shared, &all(list(&[]), list(&[])), 0.0, 2)
            .sample
            .preset
            .unwrap();
        let q = read("ns", &queue("q"), &[int(1)], 0.0, 2)
            .sample
            .preset
            .unwrap();
        let held = |f: &crate::snapshot::PresetFacts| f.states.keys().copied().collect::<Vec<_>>();
        assert_eq!(held(&shared), SHARED_STATES);
        assert_eq!(held(&q), QUEUE_STATES);
        assert_eq!(shared.elsewhere, QUEUE_STATES);
        assert_eq!(q.elsewhere, SHARED_STATES);
    }
}

#[cfg(test)]
mod recognition_tests {
    //! Zero config's recognition of this library, through the generic
    //! pass (`zero::classify::recognise`).
    use super::super::super::zero::classify::test_util::*;
    use super::super::{resque, sidekiq};

    #[test]
    fn resques_registry_is_resques_not_a_sidekiq_namespace() {
        let found = keys(&[
            ("resque:queue:default", List),
            ("jobs:queue:mail", List),
            ("jobs:failed", List),
            ("ns:queue:x", List),
            ("ns:retry", Zset),
        ]);
        let s = seen(
            &[
                ("resque:queues", &["default"]),
                ("jobs:queues", &["mail"]),
                ("ns:queues", &["x"]),
            ],
            &[],
        );
        let r = recognise(&s, &found, &[]);
        let mut got = names(&r);
        got.sort();
        let mut want: Vec<(PresetKind, String, Vec<Unit>)> = vec![
            (resque::KIND, "jobs".into(), vec![q("mail"), Unit::Shared]),
            (
                resque::KIND,
                "resque".into(),
                vec![q("default"), Unit::Shared],
            ),
            (sidekiq::KIND, "ns".into(), vec![q("x"), Unit::Shared]),
        ];
        want.sort();
        assert_eq!(got, want);
    }

    #[test]
    fn a_namespace_with_no_resque_sign_stays_sidekiqs() {
        let found = keys(&[("app:queue:mail", List)]);
        let s = seen(&[("app:queues", &["mail"])], &[]);
        let r = recognise(&s, &found, &[]);
        assert_eq!(
            names(&r),
            [(sidekiq::KIND, "app".into(), vec![q("mail"), Unit::Shared])]
        );
    }
}
