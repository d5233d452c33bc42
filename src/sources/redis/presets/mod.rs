//! Library presets: one config line (`- preset: rq`) turns a library's
//! spread of keys into logical queues with per-state depths, latency,
//! stalled work and totals.
//!
//! Each library module has a pure `read` over hand-checkable replies and a
//! `plan` of read-only commands. A poll is at most two pipelined round
//! trips for all presets together: round 1 reads every queue's sizes (and
//! the ids a follow-up needs), round 2 the follow-ups: one `HGET` per queue
//! for the oldest job's enqueue time, and a bounded number of `EXISTS` for
//! stalled checks, and (every few seconds) `HMGET` of the jobs that
//! finished since the last read, for the service time (`service.rs`).
//! Discovery reads each library's registry every `discovery_interval`.

mod bounded;
mod collide;
mod consumed;
mod counted;
mod entry;
mod libraries;
pub mod library;
mod options;
pub mod picture;
mod poll;
mod recognise;
mod registry;
pub mod remembered;
pub(crate) mod service;
mod spec;
mod unit;
pub mod zero;

use std::collections::HashMap;
use std::time::Duration;

use redis::Value;

use super::cmd::cmd;
use super::keyname::display_key;
use super::reply;
use crate::config::ALL_QUEUES;
use crate::snapshot::{
    CountedIn, JobState, PresetFacts, PresetKind, PresetUnit, QueueSample, Reason,
};
use crate::time::TimeUnit;
pub use entry::{EntryError, resolve, resolve_all};
pub use poll::CounterReading;
pub use registry::registries;
use service::{FinishedLayout, ServiceWindow};
pub use spec::{Preset, PresetSpec};
pub use unit::Unit;

/// Every library the exporter knows, in the order messages, zero config's
/// entries and its log line list them: the one registration list (a
/// library is its own file in `libraries/`, its `mod` line there, plus one
/// line here; ARCHITECTURE.md, "Adding a queue library").
pub static LIBRARIES: &[&dyn library::Library] = &[
    &libraries::bullmq::Bullmq,
    &libraries::bull::Bull,
    &libraries::sidekiq::Sidekiq,
    &libraries::celery::Celery,
    &libraries::rq::Rq,
    &libraries::asynq::Asynq,
    &libraries::rediswq::Rediswq,
    &libraries::priority_zset::PriorityZset,
    &libraries::dramatiq::Dramatiq,
    &libraries::huey::Huey,
    &libraries::arq::Arq,
    &libraries::beequeue::BeeQueue,
    &libraries::resque::Resque,
];

/// What a preset source keeps between polls: the logical queues each entry's
/// registry named at the last discovery.
#[derive(Debug)]
pub struct PresetState {
    /// One per `- preset:` entry, in config order.
    entries: Vec<Entry>,
    /// Seconds a measured service time is kept with no newly finished job
    /// (the source's `service_time_max_age`).
    service_keep: f64,
    /// Logical queues the registries named beyond the source's `max_keys`
    /// at the last discovery (counted in `dropped_keys`, logged on change).
    dropped: u64,
    /// Their `queue` labels (`(all)` for a shared unit): no poll reads
    /// them, so the scaler answers no number for these names.
    dropped_names: Vec<String>,
}

/// One preset entry and what discovery found for it.
#[derive(Debug)]
struct Entry {
    /// The entry's configuration.
    spec: PresetSpec,
    /// Logical queues (and the shared keys) the registry named, sorted.
    queues: Vec<Unit>,
    /// Per queue (raw name) whose library keeps finished jobs, the service
    /// time measured so far: kept across polls, dropped with the queue.
    service: HashMap<Vec<u8>, ServiceWindow>,
}

impl Entry {
    /// A new entry's state, before any discovery.
    fn new(spec: PresetSpec) -> Entry {
        Entry {
            queues: fixed_queues(&spec.preset),
            spec,
            service: HashMap::new(),
        }
    }

    /// Drops the service windows of queues no longer tracked.
    fn prune_service(&mut self) {
        let queues = &self.queues;
        self.service
            .retain(|name, _| queues.binary_search(&Unit::Queue(name.clone())).is_ok());
    }
}

/// The outcome of one preset poll.
#[derive(Debug, Default)]
pub struct PresetPoll {
    /// One sample per logical queue (and per source-wide group of keys).
    pub samples: Vec<QueueSample>,
    /// What the `counters:` of plain `key:` entries read, by queue label
    /// (those of keys a preset queue counts are on that queue instead).
    pub plain_totals: Vec<(String, CounterReading)>,
    /// The tracked keys (of `key:` and `pattern:` entries) a preset queue
    /// counts jobs in, by their `queue` label, and that queue: their own
    /// samples keep only their identity, so no job is counted twice
    /// (`counted`).
    pub counted: Vec<(String, CountedIn)>,
    /// One reason per reply Redis refused (wrong type, no permission).
    pub key_errors: Vec<Reason>,
}

/// A follow-up command's meaning, applied to the sample that asked for it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Follow {
    /// The reply is the oldest waiting job's enqueue time in this unit
    /// (BullMQ's `timestamp` in ms, asynq's `pending_since` in ns, RQ's
    /// `enqueued_at` as RFC 3339 text).
    Stamp(TimeUnit),
    /// An `EXISTS` whose 0 means one stalled job (lease or lock gone).
    StalledIfMissing,
    /// A count of busy jobs to add to `active` (Sidekiq's `busy`).
    AddActive,
    /// The reply is the oldest waiting job as JSON, whose enqueue time is
    /// at this JSON pointer in this unit (`/message_timestamp` in ms, say);
    /// no JSON (a pickled job), or no such field, leaves the age unknown.
    JsonStamp(&'static str, TimeUnit),
    /// A count of stalled jobs to add to `stalled` (the jobs a dead
    /// worker holds).
    AddStalled,
    /// The size of the key holding this state, asked once round 1 read
    /// which type the key has (a list or a zset, by `TYPE`).
    Count(JobState),
    /// A finished job's start and end stamps (`HMGET`), for the queue's
    /// service time (its window knows what each is for).
    Finished,
    /// A reply the library reads itself: a stage's `Own` replies, in
    /// order, go to its `Library::settle` once round 2 is in.
    Own,
    /// A reply only its library can read (a job's JSON, whose stamps it
    /// knows), applied to the sample by the library's own pure function.
    Read(ReadReply),
}

/// A library's pure function applying a follow-up reply to its sample
/// (`sample`, `reply`, now in unix seconds): for what no [`Follow`] of the
/// generic kinds reads (bee-queue's stamps inside a job's JSON).
#[derive(Clone, Copy)]
pub(crate) struct ReadReply(pub fn(&mut QueueSample, &Value, f64));

impl std::fmt::Debug for ReadReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReadReply")
    }
}

impl PartialEq for ReadReply {
    /// The same function (by address: enough for tests telling follow-ups
    /// apart, which is all this is compared for).
    fn eq(&self, other: &Self) -> bool {
        std::ptr::fn_addr_eq(self.0, other.0)
    }
}

/// One logical queue after round 1: its sample, and the follow-ups it needs.
#[derive(Debug)]
pub(crate) struct Stage {
    /// The sample as far as round 1 could fill it.
    pub sample: QueueSample,
    /// Round-2 commands and how to apply their replies.
    pub follow: Vec<(redis::Cmd, Follow)>,
}

impl Stage {
    /// A stage with no follow-ups.
    fn done(sample: QueueSample) -> Stage {
        Stage {
            sample,
            follow: Vec::new(),
        }
    }
}

/// The `queue` labels of `units`' queues (the shared keys aside).
pub fn queue_names(units: &[Unit]) -> Vec<String> {
    units
        .iter()
        .filter_map(|u| match u {
            Unit::Queue(q) => Some(queue_label(q)),
            Unit::Shared => None,
        })
        .collect()
}

/// The `queue` label of a library's queue named `name`: its display form,
/// except that a name spelled like the shared keys' label ([`ALL_QUEUES`],
/// `(all)`) is written `\x28all)`, and a name already spelled `\x28all)`
/// (after any number of backslashes) gets one backslash more. The mapping
/// stays one-to-one, so the shared keys and a queue a library names
/// `(all)` never share a series.
pub fn queue_label(name: &[u8]) -> String {
    let shown = display_key(name);
    let escaped = format!("x28{}", &ALL_QUEUES[1..]);
    if shown == ALL_QUEUES {
        format!("\\{escaped}")
    } else if shown.len() > escaped.len() && shown.trim_start_matches('\\') == escaped {
        format!("\\{shown}")
    } else {
        shown
    }
}

/// A preset sample of the queue `name`, with the identity fields set.
pub(super) fn preset_sample(preset: PresetKind, name: &[u8]) -> QueueSample {
    named_sample(preset, queue_label(name))
}

/// The sample of a library's shared keys, under [`ALL_QUEUES`].
pub(super) fn shared_sample(preset: PresetKind) -> QueueSample {
    let mut s = named_sample(preset, ALL_QUEUES.to_string());
    shared(&mut s);
    s
}

/// A preset sample whose `queue` label is `name`.
pub(super) fn named_sample(preset: PresetKind, name: String) -> QueueSample {
    QueueSample {
        name,
        preset: Some(Box::new(PresetFacts {
            preset,
            ..PresetFacts::default()
        })),
        ..QueueSample::default()
    }
}

/// The preset facts of a sample made by [`preset_sample`].
pub(super) fn facts(s: &mut QueueSample) -> &mut PresetFacts {
    s.preset.get_or_insert_with(Box::default)
}

/// Records `state` (one the library has) as `v`: `None` when a reply was
/// unreadable or refused, which keeps the state unknown (absent on
/// `/metrics`, `UNAVAILABLE` for KEDA), never 0 and never "not a state".
pub(super) fn set_state(s: &mut QueueSample, state: JobState, v: Option<u64>) {
    facts(s).states.insert(state, v);
}

/// Records that `s`'s library keeps `states` only in its other unit (in
/// the shared keys, for a queue; per queue, for the shared keys), so a
/// reader asking them of `s` is told where they live instead of reading 0.
pub(super) fn kept_elsewhere(s: &mut QueueSample, states: &'static [JobState]) {
    facts(s).elsewhere = states;
}

/// Marks `s` as the keys a library's queues share (`(all)` and the like):
/// no job waits in them, so readers leave them out of ages.
pub(super) fn shared(s: &mut QueueSample) {
    facts(s).unit = PresetUnit::Shared;
}

/// The sum of several readable replies; `None` if any is unreadable.
pub(super) fn sum(replies: &[&Value]) -> Option<u64> {
    replies.iter().map(|v| count(v)).sum()
}

/// A size reply: an integer, or nil (a missing key is empty).
pub(super) fn count(v: &Value) -> Option<u64> {
    match v {
        Value::Nil => Some(0),
        other => reply::as_u64(other),
    }
}

/// A key made of parts (binary-safe).
pub(super) fn key(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// An exclusive upper bound `(<n>` for ZCOUNT.
pub(super) fn below(n: f64) -> String {
    format!("({n}")
}

/// `ZCOUNT <key> -inf <now>`: members scored at or before `now` (unix
/// seconds), the bound the libraries' own schedulers move due jobs by
/// (Sidekiq's `zrangebyscore -inf now`, asynq's forwarder, RQ's scheduler).
pub(super) fn due_count(k: &[u8], now: f64) -> redis::Cmd {
    let mut c = cmd("ZCOUNT", k);
    c.arg("-inf").arg(format!("{now}"));
    c
}

/// A timestamp reply in `unit`, as unix seconds.
/// A stamp of 0 is a library's "unset", not 1970.
fn stamp_seconds(v: &Value, unit: TimeUnit) -> Option<f64> {
    unit.text_to_seconds(reply::as_str(v)?).filter(|s| *s > 0.0)
}

/// The stamp at `pointer` of a JSON reply, in `unit`, as unix seconds; a
/// stamp of 0 is unset, as for [`stamp_seconds`].
fn json_stamp_seconds(v: &Value, pointer: &str, unit: TimeUnit) -> Option<f64> {
    super::age::json_timestamp(reply::as_bytes(v)?, pointer, unit).filter(|t| *t > 0.0)
}

/// Applies one follow-up reply to its sample (pure).
pub(super) fn apply(s: &mut QueueSample, follow: Follow, v: &Value, now: f64) {
    match follow {
        Follow::Stamp(unit) => {
            if let Some(t) = stamp_seconds(v, unit) {
                s.oldest_age_seconds = Some((now - t).max(0.0));
            }
        }
        Follow::StalledIfMissing => {
            // Round 1 set `stalled` to `Some(0)` before asking; one check
            // Redis refused or answered unreadably makes the count unknown.
            let f = facts(s);
            f.stalled = match reply::as_u64(v) {
                Some(0) => f.stalled.map(|n| n + 1),
                Some(_) => f.stalled,
                None => None,
            };
        }
        Follow::AddActive => {
            // Likewise: one unreadable busy count makes `active` unknown.
            let f = facts(s);
            let active = f.states.entry(JobState::Active).or_insert(Some(0));
            *active = active.zip(count(v)).map(|(a, n)| a + n);
        }
        Follow::JsonStamp(pointer, unit) => {
            if let Some(t) = json_stamp_seconds(v, pointer, unit) {
                s.oldest_age_seconds = Some((now - t).max(0.0));
            }
        }
        Follow::AddStalled => {
            // Round 1 set `stalled` to `Some(0)` before asking; one count
            // Redis refused or answered unreadably makes the sum unknown.
            let f = facts(s);
            f.stalled = f.stalled.zip(count(v)).map(|(a, n)| a + n);
        }
        Follow::Count(state) => set_state(s, state, count(v)),
        // Recorded into the queue's window, or settled by the library,
        // by the poll, which owns both.
        Follow::Finished | Follow::Own => {}
        Follow::Read(ReadReply(read)) => read(s, v, now),
    }
}

/// The library of `preset` (every parsed entry's kind is one).
fn lib(preset: &Preset) -> &'static dyn library::Library {
    library::of_preset(preset)
}

/// Where the library of `preset` keeps `unit`'s finished jobs with their
/// start and end times, if it does: the queues whose service time the
/// exporter measures.
fn finished_layout(preset: &Preset, unit: &Unit) -> Option<FinishedLayout> {
    let Unit::Queue(queue) = unit else {
        return None;
    };
    lib(preset).finished(preset, queue)
}

/// Round-1 commands of one logical queue (or of the shared keys).
pub(super) fn plan(preset: &Preset, unit: &Unit, now: f64) -> Vec<redis::Cmd> {
    lib(preset).plan(preset, unit, now)
}

/// Reads one logical queue's round-1 replies (pure).
fn read(preset: &Preset, unit: &Unit, r: &[Value], now: f64) -> Stage {
    lib(preset).read(preset, unit, r, now)
}

impl PresetState {
    /// The state for a source's preset entries, before any discovery,
    /// keeping a measured service time `service_keep` with nothing new.
    pub fn new(specs: &[PresetSpec], service_keep: Duration) -> Self {
        PresetState {
            entries: specs.iter().cloned().map(Entry::new).collect(),
            service_keep: service_keep.as_secs_f64(),
            dropped: 0,
            dropped_names: Vec::new(),
        }
    }

    /// Makes `specs` the entries (zero config: what recognition found),
    /// keeping the entries whose spec is unchanged as they are; the units
    /// come with the next [`PresetState::adopt`].
    pub fn set_specs(&mut self, specs: Vec<PresetSpec>) {
        let mut old = std::mem::take(&mut self.entries);
        self.entries = specs
            .into_iter()
            .map(|spec| match old.iter().position(|e| e.spec == spec) {
                Some(i) => old.swap_remove(i),
                None => Entry::new(spec),
            })
            .collect();
    }

    /// Each entry's preset and how many queues (shared keys aside) it
    /// tracks, for zero config's log line.
    pub fn queue_counts(&self) -> Vec<(&Preset, usize)> {
        self.entries
            .iter()
            .map(|e| {
                let queues = e.queues.iter().filter(|u| matches!(u, Unit::Queue(_)));
                (&e.spec.preset, queues.count())
            })
            .collect()
    }

    /// Each entry with the units it polls now (zero config: for the next
    /// round, which types again the keys of a queue removed meanwhile).
    pub fn polled(&self) -> Vec<(PresetSpec, Vec<Unit>)> {
        self.entries
            .iter()
            .map(|e| (e.spec.clone(), e.queues.clone()))
            .collect()
    }

    /// Logical queues currently known (for `tracked_keys`).
    pub fn tracked(&self) -> usize {
        self.entries.iter().map(|e| e.queues.len()).sum()
    }

    /// Logical queues not tracked: beyond `max_keys` at the last discovery.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The `queue` labels of the logical queues beyond `max_keys`.
    pub fn dropped_names(&self) -> &[String] {
        &self.dropped_names
    }

    /// Makes what [`registries`] found the logical queues, at most `budget`
    /// of them (what `max_keys` leaves after the source's key and pattern
    /// entries): entries in config order, each entry's queues sorted by
    /// name, so the same ones are kept every round. The excess is counted
    /// and logged when it changes, not every round.
    pub fn adopt(&mut self, found: Vec<Vec<Unit>>, budget: usize, source: &str) {
        let mut left = budget;
        let mut dropped = 0;
        self.dropped_names.clear();
        for (entry, mut names) in self.entries.iter_mut().zip(found) {
            let keep = names.len().min(left);
            dropped += (names.len() - keep) as u64;
            self.dropped_names
                .extend(names[keep..].iter().map(|u| match u {
                    Unit::Queue(name) => queue_label(name),
                    Unit::Shared => ALL_QUEUES.to_string(),
                }));
            names.truncate(keep);
            left -= keep;
            entry.queues = names;
            entry.prune_service();
        }
        if dropped > 0 && dropped != self.dropped {
            tracing::warn!(
                source = %source,
                dropped,
                max_keys_left = budget,
                "more preset queues than max_keys leaves after the key and pattern entries; \
                 the excess (last by name) is not tracked"
            );
        }
        self.dropped = dropped;
    }
}

/// `units` sorted, without repeats.
pub(super) fn sorted(mut units: Vec<Unit>) -> Vec<Unit> {
    units.sort();
    units.dedup();
    units
}

/// Queues a preset reports without a registry.
pub(super) fn fixed_queues(preset: &Preset) -> Vec<Unit> {
    lib(preset).fixed_queues(preset)
}

#[cfg(test)]
pub(super) mod test_util {
    use redis::Value;

    /// An integer reply.
    pub fn int(n: i64) -> Value {
        Value::Int(n)
    }

    /// A bulk string reply.
    pub fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    /// An array reply of bulk strings.
    pub fn list(items: &[&str]) -> Value {
        Value::Array(items.iter().map(|s| bulk(s)).collect())
    }

    /// The error reply an ACL that does not cover the key gives.
    pub fn refused() -> Value {
        redis::parse_redis_value(b"-NOPERM No permissions to access a key\r\n").unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::libraries::{rq, sidekiq};
    use super::test_util::*;
    use super::*;

    #[test]
    fn follow_ups_apply_stamps_and_stalled_checks() {
        let mut s = preset_sample(rq::KIND, b"q");
        apply(
            &mut s,
            Follow::Stamp(TimeUnit::Milliseconds),
            &bulk("1000000"),
            1010.5,
        );
        assert_eq!(s.oldest_age_seconds, Some(10.5));
        apply(
            &mut s,
            Follow::Stamp(TimeUnit::Rfc3339),
            &bulk("1970-01-01T00:16:40.000000Z"),
            1010.0,
        );
        assert_eq!(s.oldest_age_seconds, Some(10.0));
        apply(
            &mut s,
            Follow::Stamp(TimeUnit::Nanoseconds),
            &bulk("1000000000000"),
            1002.0,
        );
        assert_eq!(s.oldest_age_seconds, Some(2.0));
        // A job hash gone between rounds leaves the age as it was.
        apply(
            &mut s,
            Follow::Stamp(TimeUnit::Milliseconds),
            &Value::Nil,
            5.0,
        );
        assert_eq!(s.oldest_age_seconds, Some(2.0));
        // Round 1 sets `stalled` to 0 before the checks are sent.
        facts(&mut s).stalled = Some(0);
        for v in [int(0), int(1), int(0)] {
            apply(&mut s, Follow::StalledIfMissing, &v, 0.0);
        }
        assert_eq!(s.preset.as_ref().unwrap().stalled, Some(2));
        apply(&mut s, Follow::AddActive, &bulk("3"), 0.0);
        apply(&mut s, Follow::AddActive, &Value::Nil, 0.0);
        assert_eq!(
            s.preset.as_ref().unwrap().states.get(&JobState::Active),
            Some(&Some(3))
        );
    }

    #[test]
    fn a_refused_follow_up_makes_its_count_unknown_not_smaller() {
        let refused = refused();
        let mut s = preset_sample(sidekiq::KIND, b"(all)");
        facts(&mut s).stalled = Some(0);
        set_state(&mut s, JobState::Active, Some(0));
        apply(&mut s, Follow::StalledIfMissing, &int(0), 0.0);
        apply(&mut s, Follow::StalledIfMissing, &refused, 0.0);
        apply(&mut s, Follow::StalledIfMissing, &int(0), 0.0);
        apply(&mut s, Follow::AddActive, &bulk("2"), 0.0);
        apply(&mut s, Follow::AddActive, &refused, 0.0);
        apply(&mut s, Follow::AddActive, &bulk("5"), 0.0);
        let f = s.preset.as_ref().unwrap();
        assert_eq!(f.stalled, None);
        assert_eq!(f.states.get(&JobState::Active), Some(&None));
        assert_eq!(f.depth_of(&[JobState::Active]), None);
        assert_eq!(
            f.unknown_states(&[JobState::Active, JobState::Waiting]),
            [JobState::Active]
        );
    }

    #[test]
    fn a_queue_named_like_the_shared_label_keeps_a_label_of_its_own() {
        assert_eq!(queue_label(b"(all)"), "\\x28all)");
        // Names spelled like that label get one backslash more.
        assert_eq!(queue_label(b"\\x28all)"), "\\\\x28all)");
        assert_eq!(queue_label(b"\\\\x28all)"), "\\\\\\x28all)");
        assert_eq!(queue_label(b"x28all)"), "x28all)");
        assert_eq!(queue_label(b"default"), "default");
        assert_eq!(queue_label(b"(all"), "(all");
        let sidekiq = Preset {
            stalled_check_limit: 1,
            ..Preset::new(sidekiq::KIND, "")
        };
        let real = read(&sidekiq, &Unit::Queue(b"(all)".to_vec()), &[int(2)], 0.0);
        let shared = read(&sidekiq, &Unit::Shared, &[], 0.0);
        assert_eq!(real.sample.name, "\\x28all)");
        assert_eq!(shared.sample.name, ALL_QUEUES);
        assert_eq!(real.sample.preset.unwrap().unit, PresetUnit::Queue);
        assert_eq!(shared.sample.preset.unwrap().unit, PresetUnit::Shared);
        // The registry's `(all)` and the shared keys are two units.
        let units = lib(&sidekiq).registry_units(&sidekiq, vec![b"(all)".to_vec()]);
        assert_eq!(units, [Unit::Queue(b"(all)".to_vec()), Unit::Shared]);
    }
}
