//! arq (PyPI `arq` 0.28): a queue is one zset named by the queue (arq's
//! default `arq:queue`) holding job ids scored by their due time in
//! milliseconds; a job stays in it while it runs. Per job, under prefixes
//! arq does not let one change (`arq/constants.py`): `arq:job:<id>` (the
//! serialized job: pickle by default), `arq:in-progress:<id>` (while a
//! worker runs it), `arq:retry:<id>` (runs started so far) and
//! `arq:result:<id>`.
//!
//! - `waiting`: due (score ≤ now) and neither running nor run before;
//! - `active`: due and `arq:in-progress:<id>` exists (arq's own
//!   `Job.status()` puts in progress before queued or deferred);
//! - `retry`: due, not running, with `arq:retry:<id>`: re-queued by
//!   `Retry`/`RetryJob` or a cancellation, or left by a dead worker once its
//!   in-progress key expired;
//! - `delayed`: score > now (deferred jobs, and `Retry(defer=…)`);
//! - `completed`, `failed`: unknown, never 0. arq keeps each finished job's
//!   result in `arq:result:<id>`, serialized (pickle by default) and in no
//!   per-queue set: counting them per queue would mean reading the keyspace.
//!
//! The split of due jobs takes three reads per job (round 2, read together
//! by [`Library::settle`]): done for the [`CHECK_LIMIT`] lowest-scored due
//! jobs; with more due, the split is unknown (the age still known when a
//! job not running is among them). arq keeps no count of jobs enqueued or
//! processed, and no start and end stamps it can be read without pickle:
//! arrivals and service time are unknown.

use serde::Deserialize;
use std::collections::BTreeSet;

use redis::Value;

use super::super::library::{
    Follow, Hidden, JobState, KeyType, Keys, Library, MarkRead, OptionError, Owned, Preset,
    PresetKind, QueueSample, Recognise, Seen, Stage, Unit, Written, cmd, count, facts, key,
    options_of, preset_sample, queue_label, reply, set_state, sorted, type_at, under,
};

/// arq's `preset` name.
pub const KIND: PresetKind = PresetKind::named("arq");

/// arq's default queue name (`default_queue_name`), its zset's key.
pub const DEFAULT_QUEUE: &str = "arq:queue";

/// Due jobs whose keys a poll checks per queue, at most: three `EXISTS`/
/// `ZSCORE` each, so at most 3,000 O(1) commands per queue and poll.
pub const CHECK_LIMIT: usize = 1000;

/// The namespace of arq's own keys (`arq/constants.py`).
const NAMESPACE: &[u8] = b"arq:";

/// `in_progress_key_prefix`: set (`PSETEX`, the longest job timeout + 10 s)
/// when a worker takes the job (`Worker.start_jobs`), deleted when it ends.
const IN_PROGRESS: &[u8] = b"arq:in-progress:";

/// `retry_key_prefix`: `INCR`ed each time a worker starts the job
/// (`Worker.run_job`), deleted when the job finishes either way.
const RETRY: &[u8] = b"arq:retry:";

/// `job_key_prefix` and `result_key_prefix`: the serialized job and result.
const JOB_AND_RESULT: [&[u8]; 2] = [b"arq:job:", b"arq:result:"];

/// `abort_jobs_ss`: the zset of job ids `Job.abort` asks workers to cancel.
const ABORT: &[u8] = b"arq:abort";

/// `health_check_key_suffix`: a worker's `<queue>:health-check` string.
const HEALTH: &[u8] = b":health-check";

/// A score at or below this is no due time: `Job.abort` re-scores a
/// deferred job 1 so that a worker takes (and cancels) it at once.
const ABORT_SCORE: f64 = 1.0;

/// The options of a `- preset: arq` entry: the one declaration of the
/// words it takes (`Library::options`, and the refusal of any other).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    /// `queues:`, the queue names (arq's `arq:queue` by default).
    #[serde(default)]
    queues: Option<Vec<String>>,
}

/// arq: queues named in `queues:` (default `[arq:queue]`); zero config
/// finds the zsets under `arq:` and the queues of live workers.
pub struct Arq;

impl Library for Arq {
    fn kind(&self) -> PresetKind {
        KIND
    }

    fn title(&self) -> &'static str {
        "arq"
    }

    fn options(&self) -> &'static [&'static str] {
        options_of::<Options>()
    }

    fn configure(&self, written: &Written) -> Result<Preset, OptionError> {
        let given: Options = written.read()?;
        let queues = given.queues.unwrap_or_else(|| vec![DEFAULT_QUEUE.into()]);
        if queues.is_empty() || queues.iter().any(String::is_empty) {
            return Err("queues: must list non-empty queue names".into());
        }
        Ok(Preset {
            queues,
            ..Preset::new(self.kind(), self.default_prefix())
        })
    }

    fn printed_options(&self, preset: &Preset, quote: fn(&str) -> String) -> Vec<String> {
        let qs: Vec<String> = preset.queues.iter().map(|q| quote(q)).collect();
        vec![format!("queues: [{}]", qs.join(", "))]
    }

    fn fixed_queues(&self, preset: &Preset) -> Vec<Unit> {
        let units = preset
            .queues
            .iter()
            .map(|q| Unit::Queue(q.as_bytes().to_vec()));
        sorted(units.collect())
    }

    fn fixed_names(&self, preset: &Preset) -> Vec<String> {
        let names = preset.queues.iter().map(|q| queue_label(q.as_bytes()));
        names.collect()
    }

    /// The per-job keys, the abort zset, and each queue's health check.
    fn owned(&self, _: &Preset, units: &[Unit]) -> Vec<Owned> {
        let mut v: Vec<Owned> = [IN_PROGRESS, RETRY]
            .into_iter()
            .chain(JOB_AND_RESULT)
            .map(|p| Owned::Under(p.to_vec()))
            .collect();
        v.push(Owned::Key(ABORT.to_vec()));
        v.extend(units.iter().map(|u| Owned::Key(key(&[u.name(), HEALTH]))));
        v
    }

    fn plan(&self, _: &Preset, unit: &Unit, now: f64) -> Vec<redis::Cmd> {
        plan(unit.name(), now, CHECK_LIMIT)
    }

    fn read(&self, _: &Preset, unit: &Unit, r: &[Value], _: f64) -> Stage {
        read(unit.name(), r, CHECK_LIMIT)
    }

    fn settle(&self, _: &Preset, sample: &mut QueueSample, r: &[Value], now: f64) {
        settle(sample, r, now);
    }

    /// An unread health check: its queue's zset, if found.
    fn withheld(&self, mark: &[u8], keys: &Keys) -> Vec<Vec<u8>> {
        let q = health_queue(mark).filter(|q| type_at(keys, q) == Some(KeyType::Zset));
        q.map(<[u8]>::to_vec).into_iter().collect()
    }

    /// An unread health check hides its one queue.
    fn hidden(&self, mark: &[u8]) -> Option<Hidden> {
        health_queue(mark).map(|q| Hidden::Names(vec![queue_label(q)]))
    }

    fn recognition(&self) -> Option<&dyn Recognise> {
        Some(self)
    }
}

impl Recognise for Arq {
    /// A worker's `<queue>:health-check` string: its text says whether it
    /// is arq's ([`is_health_line`]).
    fn mark_read(&self, k: &[u8]) -> Option<MarkRead> {
        health_queue(k).map(|_| MarkRead::Cmd(cmd("GET", k)))
    }

    /// With `plain_keys: false`: a name under `arq:` that may be a queue
    /// (not one of the per-job keys, the bulk of arq's keys, nor a health
    /// check).
    fn is_evidence(&self, k: &[u8]) -> bool {
        // Most names are not under `arq:`: one comparison rules them out.
        is_namespaced_queue(k)
            && health_queue(k).is_none()
            && ![IN_PROGRESS, RETRY]
                .into_iter()
                .chain(JOB_AND_RESULT)
                .any(|p| k.starts_with(p))
    }

    /// Those names: their type tells a queue's zset.
    fn evidence(&self, _: &Seen, names: &[Vec<u8>], _: &mut BTreeSet<Vec<u8>>) -> Vec<Vec<u8>> {
        names
            .iter()
            .filter(|k| self.is_evidence(k))
            .cloned()
            .collect()
    }

    /// One entry for the zsets under `arq:` (but `arq:abort`) and the
    /// queues whose health check holds arq's line; none without either.
    fn recognise(
        &self,
        seen: &Seen,
        keys: &Keys,
        _: &mut BTreeSet<Vec<u8>>,
    ) -> Vec<(Preset, Vec<Unit>)> {
        let mut queues: BTreeSet<Vec<u8>> = under(keys, NAMESPACE)
            .filter(|k| is_namespaced_queue(k) && type_at(keys, k) == Some(KeyType::Zset))
            .cloned()
            .collect();
        for (mark, v) in seen.replies() {
            let line = reply::as_bytes(v).is_some_and(is_health_line);
            if let (true, Some(q)) = (line, health_queue(mark)) {
                // A key of another type by that name is not the queue.
                if matches!(type_at(keys, q), None | Some(KeyType::Zset)) {
                    queues.insert(q.to_vec());
                }
            }
        }
        // A name that is not text cannot be a `queues:` entry: left plain.
        let names: Vec<String> = queues
            .into_iter()
            .filter_map(|q| String::from_utf8(q).ok())
            .collect();
        if names.is_empty() {
            return Vec::new();
        }
        let preset = Preset {
            queues: names,
            ..Preset::new(KIND, "")
        };
        let units = self.fixed_queues(&preset);
        vec![(preset, units)]
    }
}

/// Whether `k` is a zset name arq itself would use for a queue: under
/// `arq:` (its default `arq:queue`, and names users keep in its namespace)
/// and not its one other zset, `arq:abort`.
fn is_namespaced_queue(k: &[u8]) -> bool {
    k.len() > NAMESPACE.len() && k.starts_with(NAMESPACE) && k != ABORT
}

/// The queue of a `<queue>:health-check` key.
fn health_queue(k: &[u8]) -> Option<&[u8]> {
    k.strip_suffix(HEALTH).filter(|q| !q.is_empty())
}

/// Whether `text` is the line arq's `Worker.record_health` writes:
/// `<Mon-DD HH:MM:SS> j_complete=<n> j_failed=<n> j_retried=<n>
/// j_ongoing=<n> queued=<n>`.
fn is_health_line(text: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(text) else {
        return false;
    };
    let fields: Vec<&str> = text.split(' ').collect();
    let [_, _, counts @ ..] = fields.as_slice() else {
        return false;
    };
    let names = ["j_complete", "j_failed", "j_retried", "j_ongoing", "queued"];
    counts.len() == names.len()
        && counts.iter().zip(names).all(|(c, n)| {
            c.strip_prefix(n)
                .and_then(|v| v.strip_prefix('='))
                .is_some_and(|v| v.parse::<u64>().is_ok())
        })
}

/// `now` (unix seconds) in arq's milliseconds (`timestamp_ms`, rounded).
fn now_ms(now: f64) -> i64 {
    (now * 1e3).round() as i64
}

/// Round 1: three read-only commands on the queue's zset: the due jobs
/// (score ≤ now, the bound of the worker's own `zrangebyscore(max=now)`),
/// the deferred ones, and the first `limit` due job ids by score.
pub fn plan(queue: &[u8], now: f64, limit: usize) -> Vec<redis::Cmd> {
    let now = now_ms(now);
    let mut due = cmd("ZCOUNT", queue);
    due.arg("-inf").arg(now);
    let mut deferred = cmd("ZCOUNT", queue);
    deferred.arg(format!("({now}")).arg("+inf");
    let mut first = cmd("ZRANGEBYSCORE", queue);
    first.arg("-inf").arg(now).arg("LIMIT").arg(0).arg(limit);
    vec![due, deferred, first]
}

/// Reads [`plan`]'s replies (pure): `delayed`; and, when every due job was
/// read, `waiting`, `active`, `retry` at 0 and the age at 0 (nothing
/// waits), for [`settle`] to fill from the three checks asked per job
/// (`ZSCORE`, `EXISTS arq:in-progress:<id>`, `EXISTS arq:retry:<id>`).
pub fn read(queue: &[u8], r: &[Value], limit: usize) -> Stage {
    let at = |i: usize| r.get(i).unwrap_or(&Value::Nil);
    let mut s = preset_sample(KIND, queue);
    set_state(&mut s, JobState::Delayed, count(at(1)));
    for state in [JobState::Completed, JobState::Failed] {
        set_state(&mut s, state, None);
    }
    let ids: Option<Vec<&[u8]>> =
        reply::as_array(at(2)).and_then(|items| items.iter().map(reply::as_bytes).collect());
    // Every due job read: fewer came back than asked, or no more are due.
    let whole = ids.as_ref().is_some_and(|ids| {
        ids.len() < limit || count(at(0)).is_some_and(|d| d <= ids.len() as u64)
    });
    let start = whole.then_some(0);
    for state in [JobState::Waiting, JobState::Active, JobState::Retry] {
        set_state(&mut s, state, start);
    }
    s.oldest_age_seconds = whole.then_some(0.0);
    let follow = ids
        .into_iter()
        .flatten()
        .flat_map(|id| {
            let mut score = cmd("ZSCORE", queue);
            score.arg(id);
            let exists = |p: &[u8]| cmd("EXISTS", &key(&[p, id]));
            [score, exists(IN_PROGRESS), exists(RETRY)]
        })
        .map(|c| (c, Follow::Own))
        .collect();
    Stage { sample: s, follow }
}

/// Fills [`read`]'s sample from the checks' replies `r` (pure), three per
/// job in score order: a job gone since round 1 (`ZSCORE` nil) is left
/// out; one unreadable reply makes the counts unknown, never smaller; the
/// age is the first job not running (an abort request aside), unknown if
/// a check before it is unreadable.
pub fn settle(s: &mut QueueSample, r: &[Value], now: f64) {
    let states = &mut facts(s).states;
    let mut counts = [JobState::Waiting, JobState::Active, JobState::Retry]
        .map(|st| states.get(&st).copied().flatten());
    let mut age = None;
    let mut looking = r.len().is_multiple_of(3);
    if !looking {
        counts = [None; 3];
    }
    for job in r.chunks_exact(3) {
        let score = match &job[0] {
            Value::Nil => continue,
            v => reply::as_f64(v),
        };
        let running = reply::as_u64(&job[1]).map(|n| n > 0);
        let started = reply::as_u64(&job[2]).map(|n| n > 0);
        let which = match (score, running, started) {
            (Some(_), Some(true), Some(_)) => Some(1),
            (Some(_), Some(false), Some(true)) => Some(2),
            (Some(_), Some(false), Some(false)) => Some(0),
            _ => None,
        };
        match which {
            Some(i) => counts[i] = counts[i].map(|n| n + 1),
            None => counts = [None; 3],
        }
        if looking {
            match (score, running) {
                (Some(t), Some(false)) if t > ABORT_SCORE => {
                    age = Some(Some((now - t / 1e3).max(0.0)));
                    looking = false;
                }
                (Some(_), Some(_)) => {}
                _ => {
                    age = Some(None);
                    looking = false;
                }
            }
        }
    }
    for (st, n) in [JobState::Waiting, JobState::Active, JobState::Retry]
        .into_iter()
        .zip(counts)
    {
        states.insert(st, n);
    }
    if let Some(age) = age {
        s.oldest_age_seconds = age;
    } else if !r.len().is_multiple_of(3) {
        s.oldest_age_seconds = None;
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::test_util::*;
    use super::*;

    const NOW: f64 = 1_000.0;

    /// Round 1's replies: `due` due, `deferred` deferred, `ids` read.
    fn round1(due: i64, deferred: i64, ids: &[&str]) -> Vec<Value> {
        vec![int(due), int(deferred), list(ids)]
    }

    /// Round 2's replies per job: (score in ms, running, started).
    fn checks(jobs: &[(f64, i64, i64)]) -> Vec<Value> {
        jobs.iter()
            .flat_map(|(s, a, b)| [bulk(&s.to_string()), int(*a), int(*b)])
            .collect()
    }

    fn state(s: &QueueSample, st: JobState) -> Option<u64> {
        s.preset.as_ref().unwrap().states[&st]
    }

    fn split(s: &QueueSample) -> [Option<u64>; 3] {
        [JobState::Waiting, JobState::Active, JobState::Retry].map(|st| state(s, st))
    }

    /// Round 1 then round 2 with `limit`.
    fn poll(limit: usize, r1: &[Value], r2: &[Value]) -> QueueSample {
        let mut st = read(b"arq:queue", r1, limit);
        settle(&mut st.sample, r2, NOW);
        st.sample
    }

    #[test]
    fn the_plan_counts_due_and_deferred_jobs_at_now_in_milliseconds() {
        let p = plan(b"arq:queue", 1_795_893_203.5, 1000);
        let now = "1795893203500";
        let want = [
            redis::cmd("ZCOUNT")
                .arg("arq:queue")
                .arg("-inf")
                .arg(now)
                .get_packed_command(),
            redis::cmd("ZCOUNT")
                .arg("arq:queue")
                .arg(format!("({now}"))
                .arg("+inf")
                .get_packed_command(),
            redis::cmd("ZRANGEBYSCORE")
                .arg("arq:queue")
                .arg("-inf")
                .arg(now)
                .arg("LIMIT")
                .arg(0)
                .arg(1000)
                .get_packed_command(),
        ];
        let got: Vec<Vec<u8>> = p.iter().map(redis::Cmd::get_packed_command).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn each_due_job_is_checked_for_its_score_its_worker_and_its_runs() {
        let st = read(b"q", &round1(1, 0, &["a"]), 1000);
        let asked: Vec<Vec<u8>> = st
            .follow
            .iter()
            .map(|(c, _)| c.get_packed_command())
            .collect();
        let want = [
            redis::cmd("ZSCORE").arg("q").arg("a").get_packed_command(),
            redis::cmd("EXISTS")
                .arg("arq:in-progress:a")
                .get_packed_command(),
            redis::cmd("EXISTS").arg("arq:retry:a").get_packed_command(),
        ];
        assert_eq!(asked, want);
        assert!(st.follow.iter().all(|(_, f)| *f == Follow::Own));
    }

    #[test]
    fn due_jobs_split_into_waiting_active_and_retry() {
        // a runs (its run counted), b was retried, c and d never ran.
        let r2 = checks(&[(990e3, 1, 1), (991e3, 0, 1), (992e3, 0, 0), (993e3, 0, 0)]);
        let s = poll(1000, &round1(4, 2, &["a", "b", "c", "d"]), &r2);
        assert_eq!(split(&s), [Some(2), Some(1), Some(1)]);
        assert_eq!(state(&s, JobState::Delayed), Some(2));
        // The oldest job no worker runs is b, due at 991 s.
        assert_eq!(s.oldest_age_seconds, Some(9.0));
        // arq keeps finished jobs in no per-queue set: unknown, never 0.
        assert_eq!(state(&s, JobState::Completed), None);
        assert_eq!(state(&s, JobState::Failed), None);
        let f = s.preset.as_ref().unwrap();
        assert_eq!((f.paused, f.stalled, f.overdue), (None, None, None));
    }

    #[test]
    fn no_due_job_is_zero_everywhere_and_zero_seconds_old() {
        let st = read(b"q", &round1(0, 3, &[]), 1000);
        assert!(st.follow.is_empty());
        assert_eq!(split(&st.sample), [Some(0); 3]);
        assert_eq!(st.sample.oldest_age_seconds, Some(0.0));
    }

    #[test]
    fn every_due_job_running_leaves_nothing_waiting() {
        let s = poll(1000, &round1(1, 0, &["a"]), &checks(&[(990e3, 1, 1)]));
        assert_eq!(split(&s), [Some(0), Some(1), Some(0)]);
        assert_eq!(s.oldest_age_seconds, Some(0.0));
    }

    #[test]
    fn a_job_gone_since_round_one_is_left_out() {
        let mut r2 = checks(&[(990e3, 0, 0), (995e3, 0, 0)]);
        r2[0] = Value::Nil;
        let s = poll(1000, &round1(2, 0, &["a", "b"]), &r2);
        assert_eq!(split(&s), [Some(1), Some(0), Some(0)]);
        assert_eq!(s.oldest_age_seconds, Some(5.0));
    }

    #[test]
    fn more_due_jobs_than_checked_leave_the_split_unknown_but_not_the_age() {
        // 5 due, 2 read (limit 2): the 3 unread may run or have run.
        let r1 = round1(5, 0, &["a", "b"]);
        let s = poll(2, &r1, &checks(&[(990e3, 1, 1), (995e3, 0, 0)]));
        assert_eq!(split(&s), [None; 3]);
        // b is the lowest-scored job not running: the unread score higher.
        assert_eq!(s.oldest_age_seconds, Some(5.0));
        // Both read jobs running: the oldest waiting one is unread.
        let s = poll(2, &r1, &checks(&[(990e3, 1, 1), (995e3, 1, 1)]));
        assert_eq!(s.oldest_age_seconds, None);
    }

    #[test]
    fn a_full_read_of_exactly_the_due_jobs_is_whole() {
        let s = poll(
            2,
            &round1(2, 0, &["a", "b"]),
            &checks(&[(990e3, 0, 0), (995e3, 0, 0)]),
        );
        assert_eq!(split(&s), [Some(2), Some(0), Some(0)]);
        // The count unreadable: a full read may have left some out.
        let mut r1 = round1(2, 0, &["a", "b"]);
        r1[0] = refused();
        let s = poll(2, &r1, &checks(&[(990e3, 0, 0), (995e3, 0, 0)]));
        assert_eq!(split(&s), [None; 3]);
    }

    #[test]
    fn an_unreadable_check_makes_the_counts_unknown_never_smaller() {
        let r1 = round1(2, 0, &["a", "b"]);
        let mut r2 = checks(&[(990e3, 0, 0), (995e3, 0, 0)]);
        r2[4] = refused();
        let s = poll(1000, &r1, &r2);
        assert_eq!(split(&s), [None; 3]);
        // a's checks were read: it is the oldest waiting job.
        assert_eq!(s.oldest_age_seconds, Some(10.0));
        // a's in-progress check refused: an older waiting job may be hidden.
        let mut r2 = checks(&[(990e3, 0, 0), (995e3, 0, 0)]);
        r2[1] = refused();
        assert_eq!(poll(1000, &r1, &r2).oldest_age_seconds, None);
        // Replies missing: nothing is known.
        let s = poll(1000, &r1, &checks(&[(990e3, 0, 0)])[..2]);
        assert_eq!((split(&s), s.oldest_age_seconds), ([None; 3], None));
    }

    #[test]
    fn a_refused_queue_read_is_unknown_throughout() {
        let st = read(b"q", &[refused(), refused(), refused()], 1000);
        assert!(st.follow.is_empty());
        assert_eq!(split(&st.sample), [None; 3]);
        assert_eq!(state(&st.sample, JobState::Delayed), None);
        assert_eq!(st.sample.oldest_age_seconds, None);
    }

    #[test]
    fn an_abort_request_is_waiting_but_has_no_age() {
        // `Job.abort` scores a deferred job 1: due at once, not since 1970.
        let r2 = checks(&[(1.0, 0, 0), (995e3, 0, 0)]);
        let s = poll(1000, &round1(2, 0, &["x", "b"]), &r2);
        assert_eq!(split(&s), [Some(2), Some(0), Some(0)]);
        assert_eq!(s.oldest_age_seconds, Some(5.0));
    }

    #[test]
    fn the_health_line_of_arqs_worker_marks_its_queue() {
        let line = b"Nov-28 19:13:30 j_complete=0 j_failed=1 j_retried=2 j_ongoing=1 queued=1";
        assert!(is_health_line(line));
        for other in [
            &b"ok"[..],
            b"Nov-28 19:13:30 j_complete=0 j_failed=1 j_retried=2 j_ongoing=1",
            b"Nov-28 19:13:30 j_complete=x j_failed=1 j_retried=2 j_ongoing=1 queued=1",
            b"Nov-28 19:13:30 queued=1 j_failed=1 j_retried=2 j_ongoing=1 j_complete=0",
        ] {
            assert!(!is_health_line(other), "{}", String::from_utf8_lossy(other));
        }
        assert_eq!(
            health_queue(b"app:jobs:health-check"),
            Some(&b"app:jobs"[..])
        );
        assert_eq!(health_queue(b":health-check"), None);
        assert_eq!(health_queue(b"app:jobs"), None);
    }

    /// Keys found by a scan, with their types.
    fn found(list: &[(&str, KeyType)]) -> Keys {
        use super::super::super::super::discovery::Candidate;
        use super::super::super::super::tracked::KeyState;
        list.iter()
            .map(|(k, t)| {
                let c = Candidate {
                    spec: 0,
                    exact: false,
                    state: KeyState::Typed(*t),
                };
                (k.as_bytes().to_vec(), c)
            })
            .collect()
    }

    #[test]
    fn zero_config_takes_arqs_zsets_and_the_queues_of_live_workers() {
        let keys = found(&[
            ("arq:queue", KeyType::Zset),
            ("arq:emails", KeyType::Zset),
            ("arq:abort", KeyType::Zset),
            ("arq:list", KeyType::List),
            ("app:jobs", KeyType::Zset),
            ("app:other", KeyType::Zset),
            ("app:listq", KeyType::List),
        ]);
        let mut seen = Seen::default();
        let line = "Nov-28 19:13:30 j_complete=0 j_failed=0 j_retried=0 j_ongoing=1 queued=1";
        for (mark, text) in [
            ("app:jobs:health-check", line),
            // A worker whose queue is drained: its zset is gone.
            ("app:idle:health-check", line),
            ("app:other:health-check", "ok"),
            ("app:listq:health-check", line),
        ] {
            seen.replies.insert(mark.as_bytes().to_vec(), bulk(text));
        }
        assert!(Arq.mark_read(b"app:jobs:health-check").is_some());
        assert!(Arq.mark_read(b"app:jobs").is_none());
        let found = Arq.recognise(&seen, &keys, &mut BTreeSet::new());
        assert_eq!(found.len(), 1);
        let (preset, units) = &found[0];
        assert_eq!(
            preset.queues,
            ["app:idle", "app:jobs", "arq:emails", "arq:queue"]
        );
        assert_eq!(units.len(), 4);
        // Neither arq's zsets nor its health checks: nothing.
        let none = Arq.recognise(&Seen::default(), &found_plain(), &mut BTreeSet::new());
        assert!(none.is_empty());
    }

    fn found_plain() -> Keys {
        found(&[("app:other", KeyType::Zset), ("arq:abort", KeyType::Zset)])
    }

    #[test]
    fn an_unread_health_check_holds_back_its_queue_and_hides_its_name() {
        let keys = found(&[("app:jobs", KeyType::Zset), ("app:l", KeyType::List)]);
        assert_eq!(
            Arq.withheld(b"app:jobs:health-check", &keys),
            [b"app:jobs".to_vec()]
        );
        assert!(Arq.withheld(b"app:l:health-check", &keys).is_empty());
        assert_eq!(
            Arq.hidden(b"app:jobs:health-check"),
            Some(Hidden::Names(vec!["app:jobs".into()]))
        );
        assert_eq!(Arq.hidden(b"rq:queues"), None);
    }

    #[test]
    fn a_preset_entry_defaults_to_arqs_queue_and_owns_its_job_keys() {
        let preset = super::super::super::options::configured(&Arq, serde_json::json!({})).unwrap();
        assert_eq!(preset.queues, [DEFAULT_QUEUE]);
        assert_eq!(Arq.fixed_names(&preset), [DEFAULT_QUEUE]);
        let empty = serde_json::json!({"queues": [""]});
        assert!(super::super::super::options::configured(&Arq, empty).is_err());
        let owned = Arq.owned(&preset, &Arq.fixed_queues(&preset));
        for k in [
            &b"arq:job:"[..],
            b"arq:in-progress:",
            b"arq:retry:",
            b"arq:result:",
        ] {
            assert!(owned.contains(&Owned::Under(k.to_vec())));
        }
        assert!(owned.contains(&Owned::Key(b"arq:abort".to_vec())));
        assert!(owned.contains(&Owned::Key(b"arq:queue:health-check".to_vec())));
    }

    #[test]
    fn without_plain_keys_the_names_under_arq_that_may_be_queues_are_typed() {
        for k in ["arq:queue", "arq:emails"] {
            assert!(Arq.is_evidence(k.as_bytes()), "{k}");
        }
        for k in [
            "arq:job:a",
            "arq:in-progress:a",
            "arq:retry:a",
            "arq:result:a",
            "arq:abort",
            "arq:queue:health-check",
            "app:jobs",
        ] {
            assert!(!Arq.is_evidence(k.as_bytes()), "{k}");
        }
    }

    #[test]
    fn zsets_in_arqs_namespace_are_queues_but_its_abort_set() {
        assert!(is_namespaced_queue(b"arq:queue"));
        assert!(is_namespaced_queue(b"arq:queue:emails"));
        assert!(!is_namespaced_queue(b"arq:abort"));
        assert!(!is_namespaced_queue(b"arq:"));
        assert!(!is_namespaced_queue(b"app:queue"));
    }
}
