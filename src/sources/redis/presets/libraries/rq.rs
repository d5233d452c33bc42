//! RQ (`rq` 2.x/3.x): `<prefix>:queue:<q>` lists (RPUSH, LPOP: the oldest
//! is at the head) and one zset registry per state.

use super::super::library::{
    FinishedLayout, Follow, Hidden, JobState, Keys, Library, MarkRead, OptionError, Owned, Preset,
    PresetKind, Recognise, Registry, Scores, Seen, Stage, TimeUnit, Unit, Written, below, cmd,
    count, due_count, facts, key, options_of, prefix_or, prefixed_registry_hides, preset_sample,
    registry_prefix, reply, set_state, sorted, sum, under_prefixed_registry,
};
use serde::Deserialize;
use std::collections::BTreeSet;

use std::collections::HashSet;

use redis::Value;

/// The keys of queue `q`: `<prefix>:<kind>:<q>`.
fn k(prefix: &str, kind: &str, q: &[u8]) -> Vec<u8> {
    key(&[prefix.as_bytes(), b":", kind.as_bytes(), b":", q])
}

/// Where queue `q` keeps finished jobs: the `finished` and `failed`
/// registries, scored by expiry (`BaseRegistry.add`: `current_timestamp()`,
/// whole seconds rounded down, plus the job's `result_ttl`, default 500 s,
/// or `failure_ttl`, default a year; `-1` is `+inf`, kept for ever), and
/// each job's hash `<prefix>:job:<id>` with `started_at` and `ended_at`
/// (RQ's `%Y-%m-%dT%H:%M:%S.%fZ`, microseconds). Empty with `result_ttl=0`.
pub fn finished(prefix: &str, q: &[u8]) -> FinishedLayout {
    FinishedLayout {
        sets: [k(prefix, "finished", q), k(prefix, "failed", q)],
        scores: Scores::Expiry {
            default_ttl: [DEFAULT_RESULT_TTL, DEFAULT_FAILURE_TTL],
        },
        job_prefix: key(&[prefix.as_bytes(), b":job:"]),
        fields: ["started_at", "ended_at"],
        unit: TimeUnit::Rfc3339,
        resolution: 1e-6,
    }
}

/// RQ's `DEFAULT_RESULT_TTL` (seconds a finished job is kept).
const DEFAULT_RESULT_TTL: f64 = 500.0;

/// RQ's `DEFAULT_FAILURE_TTL` (seconds a failed job is kept: a year).
const DEFAULT_FAILURE_TTL: f64 = 31_536_000.0;

/// How many members of `intermediate` and of `wip` a poll reads to find
/// the jobs in both. Each normally holds no more jobs than there are busy
/// workers, so this reads them whole.
const OVERLAP_READ: usize = 256;

/// Round 1: twelve read-only commands.
pub fn plan(prefix: &str, q: &[u8], now: f64) -> Vec<redis::Cmd> {
    let list = k(prefix, "queue", q);
    let intermediate = key(&[&list, b":intermediate"]);
    let zcard = |kind: &str| cmd("ZCARD", &k(prefix, kind, q));
    let mut zcount = cmd("ZCOUNT", &k(prefix, "wip", q));
    zcount.arg("-inf").arg(below(now));
    let mut lindex = cmd("LINDEX", &list);
    lindex.arg(0);
    let mut popped = cmd("LRANGE", &intermediate);
    popped.arg(0).arg(OVERLAP_READ - 1);
    let mut started = cmd("ZRANGE", &k(prefix, "wip", q));
    started.arg(0).arg(OVERLAP_READ - 1);
    vec![
        cmd("LLEN", &list),
        cmd("LLEN", &intermediate),
        zcard("wip"),
        zcard("finished"),
        zcard("failed"),
        zcard("deferred"),
        zcard("scheduled"),
        zcount,
        lindex,
        // Due jobs no `--with-scheduler` worker has enqueued yet.
        due_count(&k(prefix, "scheduled", q), now),
        popped,
        started,
    ]
}

/// The jobs workers hold, each once: `intermediate` (popped, not started)
/// and `wip` (started) by job id. RQ 3.0's forking worker adds a job to
/// `wip`, forks, and only the child LREMs it from `intermediate`, so for a
/// few ms a job is in both. While both member reads are whole (under
/// [`OVERLAP_READ`] each), the count comes from those two adjacent replies
/// alone, so a job moving between the pipeline's earlier `LLEN`/`ZCARD` and
/// them is neither missed nor counted twice; otherwise `LLEN` + `ZCARD` less
/// the ids found in both among the members read, never more than the sum.
/// Unknown if any reply is unreadable.
fn active(len: &Value, card: &Value, popped: &Value, started: &Value) -> Option<u64> {
    let total = sum(&[len, card])?;
    let executions: Vec<&[u8]> = members(started)?.collect();
    let popped: Vec<&[u8]> = members(popped)?.collect();
    // `<job_id>:<execution_id>` since RQ 2.0; a bare id in 1.16. RQ job
    // ids never contain `:` (`[A-Za-z0-9_-]+`).
    let started: HashSet<&[u8]> = executions
        .iter()
        .map(|m| m.split(|b| *b == b':').next().unwrap_or(m))
        .collect();
    // Each popped entry of a started job once, however many executions
    // of it `wip` holds (an abandoned one stays until RQ cleans it up).
    let both = popped.iter().filter(|id| started.contains(*id)).count() as u64;
    if popped.len() < OVERLAP_READ && executions.len() < OVERLAP_READ {
        return Some((popped.len() + executions.len()) as u64 - both);
    }
    Some(total.saturating_sub(both))
}

/// The members of an `LRANGE`/`ZRANGE` reply; `None` unless it is a list of
/// strings.
fn members(v: &Value) -> Option<impl Iterator<Item = &[u8]>> {
    let items = reply::as_array(v)?;
    let all: Option<Vec<&[u8]>> = items.iter().map(reply::as_bytes).collect();
    Some(all?.into_iter())
}

/// Reads [`plan`]'s replies (pure).
pub fn read(prefix: &str, q: &[u8], r: &[Value]) -> Stage {
    let mut s = preset_sample(KIND, q);
    let at = |i: usize| r.get(i).unwrap_or(&Value::Nil);
    // Deferred jobs (waiting on dependencies) count as waiting: they are
    // queued work a worker will run without anyone scheduling it.
    set_state(&mut s, JobState::Waiting, sum(&[at(0), at(5)]));
    set_state(
        &mut s,
        JobState::Active,
        active(at(1), at(2), at(10), at(11)),
    );
    set_state(&mut s, JobState::Completed, count(at(3)));
    set_state(&mut s, JobState::Failed, count(at(4)));
    set_state(&mut s, JobState::Delayed, count(at(6)));
    // wip scores are heartbeat expiries: past ones are abandoned jobs.
    let f = facts(&mut s);
    f.stalled = count(at(7));
    f.overdue = count(at(9));
    let mut follow = Vec::new();
    match at(8) {
        Value::Nil => s.oldest_age_seconds = Some(0.0),
        v => {
            if let Some(id) = reply::as_bytes(v) {
                let mut c = cmd("HGET", &k(prefix, "job", id));
                c.arg("enqueued_at");
                follow.push((c, Follow::Stamp(TimeUnit::Rfc3339)));
            }
        }
    }
    Stage { sample: s, follow }
}

/// RQ's `preset` name.
pub const KIND: PresetKind = PresetKind::named("rq");

/// The options of a `- preset: rq` entry: the one declaration of the
/// words it takes (`Library::options`, and the refusal of any other).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    /// `prefix:`, RQ's own `rq` by default.
    #[serde(default)]
    prefix: Option<String>,
}

/// RQ: queues from the `<prefix>:queues` set of full keys
/// `<prefix>:queue:<name>`.
pub struct Rq;

impl Library for Rq {
    fn kind(&self) -> PresetKind {
        KIND
    }

    fn title(&self) -> &'static str {
        "RQ"
    }

    fn options(&self) -> &'static [&'static str] {
        options_of::<Options>()
    }

    fn configure(&self, written: &Written) -> Result<Preset, OptionError> {
        let o: Options = written.read()?;
        let prefix = prefix_or(o.prefix, self.default_prefix())?;
        Ok(Preset::new(self.kind(), &prefix))
    }

    fn default_prefix(&self) -> &'static str {
        "rq"
    }

    fn registry(&self, preset: &Preset) -> Registry {
        Registry::Set(key(&[preset.prefix.as_bytes(), b":queues"]))
    }

    /// Full keys `<prefix>:queue:<name>` give their names; others are
    /// skipped.
    fn registry_units(&self, preset: &Preset, members: Vec<Vec<u8>>) -> Vec<Unit> {
        let full = key(&[preset.prefix.as_bytes(), b":queue:"]);
        let units = members
            .into_iter()
            .filter_map(|m| m.strip_prefix(full.as_slice()).map(<[u8]>::to_vec))
            .map(Unit::Queue)
            .collect();
        sorted(units)
    }

    /// Results, executions, `intermediate` lists, `ready`/`canceled`
    /// registries of the queues.
    fn owned(&self, preset: &Preset, units: &[Unit]) -> Vec<Owned> {
        let p = preset.prefix.as_bytes();
        let mut v: Vec<Owned> = [&b"results:"[..], b"executions:", b"execution:", b"rl:"]
            .iter()
            .map(|n| Owned::Under(key(&[p, b":", n])))
            .collect();
        for u in units {
            if let Unit::Queue(q) = u {
                v.push(Owned::Under(key(&[p, b":queue:", q, b":"])));
                v.push(Owned::Key(key(&[p, b":ready:", q])));
                v.push(Owned::Key(key(&[p, b":canceled:", q])));
            }
        }
        v
    }

    fn plan(&self, preset: &Preset, unit: &Unit, now: f64) -> Vec<redis::Cmd> {
        plan(&preset.prefix, unit.name(), now)
    }

    fn read(&self, preset: &Preset, unit: &Unit, r: &[Value], _: f64) -> Stage {
        read(&preset.prefix, unit.name(), r)
    }

    fn finished(&self, preset: &Preset, queue: &[u8]) -> Option<FinishedLayout> {
        Some(finished(&preset.prefix, queue))
    }

    fn unmeasured_why(&self) -> &'static str {
        "no job with started_at and ended_at kept that finished within the source's service_time_max_age \
         (none finished lately, or the jobs are enqueued with result_ttl=0)"
    }

    /// An unread `<prefix>:queues`: any key under `<prefix>:` may be RQ's.
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

impl Recognise for Rq {
    fn fixed_marks(&self) -> &'static [&'static [u8]] {
        &[b"rq:queues"]
    }

    /// A set `<prefix>:queues` (shared in shape with other libraries':
    /// its members tell).
    fn mark_read(&self, key: &[u8]) -> Option<MarkRead> {
        registry_prefix(key)
            .filter(|p| !p.is_empty())
            .map(|_| MarkRead::Set)
    }

    /// A registry of full keys is told: RQ's, nothing more to ask.
    fn evidence(&self, seen: &Seen, _: &[Vec<u8>], told: &mut BTreeSet<Vec<u8>>) -> Vec<Vec<u8>> {
        for (set, members) in seen.sets() {
            if let Some(p) = registry_prefix(set).filter(|p| !p.is_empty()) {
                let full = key(&[p, b":queue:"]);
                if members.iter().all(|m| m.starts_with(&full)) {
                    told.insert(set.clone());
                }
            }
        }
        Vec::new()
    }

    /// A set `<prefix>:queues` whose members are all full keys
    /// `<prefix>:queue:<name>`.
    fn recognise(
        &self,
        seen: &Seen,
        _: &Keys,
        claimed: &mut BTreeSet<Vec<u8>>,
    ) -> Vec<(Preset, Vec<Unit>)> {
        let mut out = Vec::new();
        for (set, members) in seen.sets() {
            let Some(prefix) = registry_prefix(set).filter(|p| !p.is_empty()) else {
                continue;
            };
            let Ok(text) = std::str::from_utf8(prefix) else {
                continue;
            };
            if claimed.contains(set) || members.is_empty() || members.iter().any(Vec::is_empty) {
                continue;
            }
            let full = key(&[prefix, b":queue:"]);
            let rq = members.iter().all(|m| {
                m.strip_prefix(full.as_slice())
                    .is_some_and(|n| !n.is_empty())
            });
            if rq {
                claimed.insert(set.clone());
                let preset = Preset::new(KIND, text);
                let units = self.registry_units(&preset, members.clone());
                out.push((preset, units));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::test_util::*;
    use super::*;

    /// Replies of an otherwise empty queue whose `intermediate` holds
    /// `popped` and whose `wip` holds `started` (sizes as LLEN/ZCARD give).
    fn replies(popped: &[&str], started: &[&str]) -> Vec<Value> {
        let mut r: Vec<Value> = (0..8).map(|_| int(0)).chain([Value::Nil, int(0)]).collect();
        r[1] = int(popped.len() as i64);
        r[2] = int(started.len() as i64);
        r.extend([list(popped), list(started)]);
        r
    }

    fn active_of(r: &[Value]) -> Option<u64> {
        read("rq", b"q", r).sample.preset.unwrap().states[&JobState::Active]
    }

    #[test]
    fn registries_map_to_states() {
        let r = [
            int(2),
            int(1),
            int(3),
            int(4),
            int(5),
            int(6),
            int(7),
            int(1),
            bulk("abc"),
            int(2),
            list(&["j0"]),
            list(&["j1:e1", "j2:e2", "j3:e3"]),
        ];
        let st = read("rq", b"default", &r);
        let f = st.sample.preset.as_ref().unwrap();
        assert_eq!(f.preset, KIND);
        assert_eq!(f.states[&JobState::Waiting], Some(2 + 6));
        assert_eq!(f.states[&JobState::Active], Some(1 + 3));
        assert_eq!(f.states[&JobState::Completed], Some(4));
        assert_eq!(f.states[&JobState::Failed], Some(5));
        assert_eq!(f.states[&JobState::Delayed], Some(7));
        assert_eq!(f.stalled, Some(1));
        assert_eq!(f.overdue, Some(2));
        assert_eq!(f.paused, None);
        assert_eq!(st.follow.len(), 1);
        assert_eq!(st.follow[0].1, Follow::Stamp(TimeUnit::Rfc3339));
        assert_eq!(st.sample.oldest_age_seconds, None);
    }

    #[test]
    fn active_counts_a_job_in_intermediate_and_wip_once() {
        let cases: [(&str, &[&str], &[&str], u64); 7] = [
            ("idle", &[], &[], 0),
            ("popped, not started", &["a"], &[], 1),
            ("started", &[], &["a:e1"], 1),
            // RQ 3.0: in `wip` before the child LREMs `intermediate`.
            ("overlap", &["a"], &["a:e1"], 1),
            ("overlap and others", &["a", "b"], &["c:e3", "a:e1"], 3),
            ("no overlap", &["b"], &["a:e1"], 2),
            // RQ 1.16: `wip` members are bare job ids.
            ("1.16 bare ids", &["a", "b"], &["a", "c"], 3),
        ];
        for (case, popped, started, want) in cases {
            assert_eq!(active_of(&replies(popped, started)), Some(want), "{case}");
        }
        // An abandoned execution of a job retried since stays counted (it is
        // also `stalled`); the popped copy of the job is not.
        let r = replies(&["a"], &["a:old", "a:new"]);
        assert_eq!(active_of(&r), Some(2));
    }

    #[test]
    fn a_job_started_between_the_sizes_and_the_members_read_counts_once() {
        // `LLEN intermediate` saw it popped, `ZCARD wip` not yet started;
        // by the member reads it is in both: one job, not zero.
        let mut r = replies(&["a"], &["a:e1"]);
        r[2] = int(0);
        assert_eq!(active_of(&r), Some(1));
    }

    #[test]
    fn active_beyond_the_members_read_is_at_most_the_sum() {
        // 300 popped jobs, the first 256 read: were `z` among the 44 unread,
        // it would be counted twice. At most the sum, never below the truth.
        let mut r = replies(&["a"], &["z:e"]);
        r[1] = int(300);
        let ids: Vec<String> = (0..256).map(|i| format!("j{i}")).collect();
        r[10] = list(&ids.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(active_of(&r), Some(301));
    }

    #[test]
    fn an_unreadable_reply_leaves_active_unknown() {
        for (i, bad) in [
            (1, refused()),
            (2, bulk("not a number")),
            (10, refused()),
            (11, refused()),
            (11, Value::Array(vec![int(1)])),
            (10, Value::Nil),
        ] {
            let mut r = replies(&["a"], &["a:e1"]);
            r[i] = bad.clone();
            // Unknown, never 0 and never the sum.
            assert_eq!(active_of(&r), None, "reply {i}: {bad:?}");
            let states = read("rq", b"q", &r).sample.preset.unwrap().states;
            assert_eq!(states[&JobState::Waiting], Some(0), "reply {i}");
        }
    }

    #[test]
    fn an_empty_queue_is_zero_and_not_followed() {
        let r = replies(&[], &[]);
        let st = read("rq", b"q", &r);
        assert!(st.follow.is_empty());
        assert_eq!(st.sample.oldest_age_seconds, Some(0.0));
        let states = st.sample.preset.unwrap().states;
        assert_eq!(states[&JobState::Waiting], Some(0));
        assert_eq!(states[&JobState::Active], Some(0));
    }

    #[test]
    fn an_error_reply_leaves_its_state_unknown() {
        let mut r = replies(&[], &[]);
        r[3] = bulk("not a number");
        let st = read("rq", b"q", &r);
        // Present (RQ has the state) but unknown: never 0, never "no such state".
        assert_eq!(
            st.sample.preset.unwrap().states.get(&JobState::Completed),
            Some(&None)
        );
    }

    #[test]
    fn plan_is_twelve_commands() {
        let p = plan("rq", b"q", 1.5);
        assert_eq!(p.len(), 12);
        assert_eq!(
            p[9].get_packed_command(),
            redis::cmd("ZCOUNT")
                .arg("rq:scheduled:q")
                .arg("-inf")
                .arg("1.5")
                .get_packed_command()
        );
        assert_eq!(
            p[10].get_packed_command(),
            redis::cmd("LRANGE")
                .arg("rq:queue:q:intermediate")
                .arg(0)
                .arg(255)
                .get_packed_command()
        );
        assert_eq!(
            p[11].get_packed_command(),
            redis::cmd("ZRANGE")
                .arg("rq:wip:q")
                .arg(0)
                .arg(255)
                .get_packed_command()
        );
    }
}
