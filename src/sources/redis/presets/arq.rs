//! arq (PyPI `arq` 0.28): a queue is one zset, named by the queue (default
//! `arq:queue`), of job ids scored by the due time in milliseconds; a job
//! stays in it while it runs. Per job, under prefixes arq does not let one
//! change (`arq/constants.py`): `arq:job:<id>` (the serialized job, pickle
//! by default), `arq:in-progress:<id>` (while a worker runs it),
//! `arq:retry:<id>` (runs started so far) and `arq:result:<id>`.
//!
//! - `waiting`: due (score ≤ now) and neither running nor run before;
//! - `active`: due and `arq:in-progress:<id>` exists (arq's own
//!   `Job.status()`: in progress before queued or deferred);
//! - `retry`: due, not running, with `arq:retry:<id>`: a job re-queued by
//!   `Retry`/`RetryJob`, a cancellation, or left by a dead worker once its
//!   in-progress key expired;
//! - `delayed`: score > now (deferred jobs, and `Retry(defer=…)`);
//! - `completed`, `failed`: unknown. arq keeps each finished job's result in
//!   `arq:result:<id>`, serialized (pickle by default) and in no per-queue
//!   set, so they cannot be counted per queue without reading the whole
//!   keyspace.
//!
//! The split of due jobs needs two `EXISTS` per job: they are read for the
//! `check_limit` lowest-scored due jobs; beyond, the split is unknown.

use redis::Value;

use super::reply;

/// arq's default queue name (`default_queue_name`), also its zset's key.
pub const DEFAULT_QUEUE: &str = "arq:queue";

/// Due jobs whose keys a poll checks per queue, at most, by default.
pub const DEFAULT_CHECK_LIMIT: usize = 1000;

/// `in_progress_key_prefix`: set (`PSETEX`, the longest job timeout + 10 s)
/// when a worker takes the job, deleted when it ends.
const IN_PROGRESS: &[u8] = b"arq:in-progress:";

/// `retry_key_prefix`: `INCR`ed each time a worker starts the job, deleted
/// when the job finishes (either way).
const RETRY: &[u8] = b"arq:retry:";

/// A score at or below this is not a due time: `Job.abort` re-scores a
/// deferred job 1 so a worker takes (and cancels) it at once.
const ABORT_SCORE: f64 = 1.0;

/// `now` (unix seconds) in arq's milliseconds (`timestamp_ms`, rounded).
fn now_ms(now: f64) -> i64 {
    (now * 1e3).round() as i64
}

/// Round 1: three read-only commands on the queue's zset: the due jobs
/// (score ≤ now, the bound of the worker's own `zrangebyscore(max=now)`),
/// the deferred ones, and the first `limit` due jobs by score, with scores.
pub fn plan(queue: &[u8], now: f64, limit: usize) -> Vec<redis::Cmd> {
    let now = now_ms(now);
    let mut due = super::cmd("ZCOUNT", queue);
    due.arg("-inf").arg(now);
    let mut deferred = super::cmd("ZCOUNT", queue);
    deferred.arg(format!("({now}")).arg("+inf");
    let mut first = super::cmd("ZRANGEBYSCORE", queue);
    first
        .arg("-inf")
        .arg(now)
        .arg("WITHSCORES")
        .arg("LIMIT")
        .arg(0)
        .arg(limit);
    vec![due, deferred, first]
}

/// What round 1 read of one queue.
#[derive(Debug, Clone, PartialEq)]
pub struct Due {
    /// Deferred jobs (`delayed`); `None` if unreadable.
    pub delayed: Option<u64>,
    /// The lowest-scored due jobs, in score order, with their scores (ms);
    /// `None` if unreadable.
    pub first: Option<Vec<(Vec<u8>, f64)>>,
    /// Whether `first` holds every due job: fewer than asked came back, or
    /// the count of due jobs is no more than came back.
    pub whole: bool,
}

/// Reads [`plan`]'s replies (pure).
pub fn read(r: &[Value], limit: usize) -> Due {
    let at = |i: usize| r.get(i).unwrap_or(&Value::Nil);
    let first = with_scores(at(2));
    let due = super::count(at(0));
    let whole = first
        .as_ref()
        .is_some_and(|f| f.len() < limit || due.is_some_and(|d| d <= f.len() as u64));
    Due {
        delayed: super::count(at(1)),
        first,
        whole,
    }
}

/// A `ZRANGEBYSCORE … WITHSCORES` reply as (member, score) pairs: RESP2's
/// flat `[m, s, m, s]` or RESP3's `[[m, s], …]`. `None` if unreadable.
fn with_scores(v: &Value) -> Option<Vec<(Vec<u8>, f64)>> {
    let items = reply::as_array(v)?;
    let pair = |m: &Value, s: &Value| Some((reply::as_bytes(m)?.to_vec(), reply::as_f64(s)?));
    match items {
        [Value::Array(_), ..] => items
            .iter()
            .map(|p| match reply::as_array(p)? {
                [m, s] => pair(m, s),
                _ => None,
            })
            .collect(),
        _ if items.len() % 2 == 0 => items.chunks(2).map(|c| pair(&c[0], &c[1])).collect(),
        _ => None,
    }
}

/// Round 2: per job of [`Due::first`], `EXISTS arq:in-progress:<id>` then
/// `EXISTS arq:retry:<id>`.
pub fn checks(due: &Due) -> Vec<redis::Cmd> {
    let ids = due.first.iter().flatten().map(|(id, _)| id);
    ids.flat_map(|id| {
        [IN_PROGRESS, RETRY].map(|p| super::cmd("EXISTS", &super::key(&[p, id])))
    })
    .collect()
}

/// The due jobs split by what [`checks`] found, and the oldest waiting job's
/// age. Each `None` is unknown.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Split {
    /// Due, never started.
    pub waiting: Option<u64>,
    /// Due, a worker runs it.
    pub active: Option<u64>,
    /// Due, started before, not running.
    pub retry: Option<u64>,
    /// Seconds since the due time of the lowest-scored due job no worker
    /// runs (waiting or retry): for a job enqueued without a defer, since
    /// its enqueue (`enqueue_job`: `score = enqueue_time_ms`).
    pub oldest_age_seconds: Option<f64>,
}

/// Splits `due` by [`checks`]' replies `r` (pure). One unreadable reply
/// makes the counts unknown, never smaller; the counts are unknown, too,
/// when `due` did not read every due job.
pub fn split(due: &Due, r: &[Value], now: f64) -> Split {
    let Some(first) = &due.first else {
        return Split::default();
    };
    let exists = |i: usize| r.get(i).and_then(reply::as_u64).map(|n| n > 0);
    let mut counts = Some((0u64, 0u64, 0u64));
    let mut age = None;
    let mut age_known = true;
    for (i, (_, score)) in first.iter().enumerate() {
        let (running, started) = (exists(2 * i), exists(2 * i + 1));
        counts = match (counts, running, started) {
            (Some((w, a, t)), Some(true), Some(_)) => Some((w, a + 1, t)),
            (Some((w, a, t)), Some(false), Some(true)) => Some((w, a, t + 1)),
            (Some((w, a, t)), Some(false), Some(false)) => Some((w + 1, a, t)),
            _ => None,
        };
        if age.is_none() && age_known {
            match running {
                None => age_known = false,
                Some(false) if *score > ABORT_SCORE => {
                    age = Some((now - score / 1e3).max(0.0));
                }
                _ => {}
            }
        }
    }
    if age.is_none() && age_known && due.whole {
        // Every due job runs (or none is due): nothing waits.
        age = Some(0.0);
    }
    let counts = counts.filter(|_| due.whole);
    Split {
        waiting: counts.map(|c| c.0),
        active: counts.map(|c| c.1),
        retry: counts.map(|c| c.2),
        oldest_age_seconds: age,
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;

    /// A RESP2 `WITHSCORES` reply of `(member, score)`.
    fn scored(items: &[(&str, f64)]) -> Value {
        Value::Array(
            items
                .iter()
                .flat_map(|(m, s)| [bulk(m), bulk(&s.to_string())])
                .collect(),
        )
    }

    /// `EXISTS` replies for (running, started) per job.
    fn found(jobs: &[(i64, i64)]) -> Vec<Value> {
        jobs.iter().flat_map(|(a, b)| [int(*a), int(*b)]).collect()
    }

    const NOW: f64 = 1_000.0;

    #[test]
    fn the_plan_counts_due_and_deferred_jobs_at_now_in_milliseconds() {
        let p = plan(b"arq:queue", 1_795_893_203.5, 1000);
        let packed = |c: &mut redis::Cmd| c.get_packed_command();
        assert_eq!(
            p[0].get_packed_command(),
            packed(redis::cmd("ZCOUNT").arg("arq:queue").arg("-inf").arg(1_795_893_203_500i64))
        );
        assert_eq!(
            p[1].get_packed_command(),
            packed(redis::cmd("ZCOUNT").arg("arq:queue").arg("(1795893203500").arg("+inf"))
        );
        assert_eq!(
            p[2].get_packed_command(),
            packed(
                redis::cmd("ZRANGEBYSCORE")
                    .arg("arq:queue")
                    .arg("-inf")
                    .arg(1_795_893_203_500i64)
                    .arg("WITHSCORES")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(1000)
            )
        );
    }

    #[test]
    fn due_jobs_split_into_waiting_active_and_retry() {
        let due = read(
            &[
                int(4),
                int(2),
                scored(&[("a", 990e3), ("b", 991e3), ("c", 992e3), ("d", 993e3)]),
            ],
            1000,
        );
        assert_eq!(due.delayed, Some(2));
        assert!(due.whole);
        let ids: Vec<String> = checks(&due)
            .iter()
            .map(|c| String::from_utf8_lossy(&c.get_packed_command()).into_owned())
            .collect();
        assert!(ids[0].contains("arq:in-progress:a") && ids[1].contains("arq:retry:a"));
        assert_eq!(ids.len(), 8);
        // a runs (its retry count set), b was retried, c and d never ran.
        let s = split(&due, &found(&[(1, 1), (0, 1), (0, 0), (0, 0)]), NOW);
        assert_eq!(
            (s.waiting, s.active, s.retry),
            (Some(2), Some(1), Some(1))
        );
        // The oldest job no worker runs is b, due at 991 s.
        assert_eq!(s.oldest_age_seconds, Some(9.0));
    }

    #[test]
    fn resp3_pairs_read_like_resp2() {
        let resp3 = Value::Array(vec![
            Value::Array(vec![bulk("a"), Value::Double(990e3)]),
            Value::Array(vec![bulk("b"), Value::Double(995e3)]),
        ]);
        let due = read(&[int(2), int(0), resp3], 1000);
        assert_eq!(
            due.first,
            Some(vec![(b"a".to_vec(), 990e3), (b"b".to_vec(), 995e3)])
        );
    }

    #[test]
    fn no_due_job_is_zero_everywhere_and_zero_seconds_old() {
        let due = read(&[int(0), int(3), scored(&[])], 1000);
        assert!(checks(&due).is_empty());
        let s = split(&due, &[], NOW);
        assert_eq!(
            (s.waiting, s.active, s.retry, s.oldest_age_seconds),
            (Some(0), Some(0), Some(0), Some(0.0))
        );
    }

    #[test]
    fn every_due_job_running_leaves_nothing_waiting() {
        let due = read(&[int(1), int(0), scored(&[("a", 990e3)])], 1000);
        let s = split(&due, &found(&[(1, 1)]), NOW);
        assert_eq!((s.waiting, s.active), (Some(0), Some(1)));
        assert_eq!(s.oldest_age_seconds, Some(0.0));
    }

    #[test]
    fn more_due_jobs_than_checked_leave_the_split_unknown_but_not_the_age() {
        // 5 due, 2 read (limit 2): the 3 unread may run or have run.
        let due = read(&[int(5), int(0), scored(&[("a", 990e3), ("b", 995e3)])], 2);
        assert!(!due.whole);
        let s = split(&due, &found(&[(1, 1), (0, 0)]), NOW);
        assert_eq!((s.waiting, s.active, s.retry), (None, None, None));
        // b is the lowest-scored job not running: the unread score higher.
        assert_eq!(s.oldest_age_seconds, Some(5.0));
        // All read jobs running: the oldest waiting one is unread.
        let s = split(&due, &found(&[(1, 1), (1, 1)]), NOW);
        assert_eq!(s.oldest_age_seconds, None);
    }

    #[test]
    fn a_full_read_of_exactly_the_due_jobs_is_whole() {
        let due = read(&[int(2), int(0), scored(&[("a", 990e3), ("b", 995e3)])], 2);
        assert!(due.whole);
        // The count itself unreadable: a full read may have left some out.
        let due = read(&[refused(), int(0), scored(&[("a", 990e3), ("b", 995e3)])], 2);
        assert!(!due.whole);
    }

    #[test]
    fn an_unreadable_check_makes_the_counts_unknown_never_smaller() {
        let due = read(&[int(2), int(0), scored(&[("a", 990e3), ("b", 995e3)])], 1000);
        let mut r = found(&[(0, 0), (0, 0)]);
        r[3] = refused();
        let s = split(&due, &r, NOW);
        assert_eq!((s.waiting, s.active, s.retry), (None, None, None));
        // a's checks were read: it is the oldest waiting job.
        assert_eq!(s.oldest_age_seconds, Some(10.0));
        // a's in-progress check refused: an older waiting job may be hidden.
        let mut r = found(&[(0, 0), (0, 0)]);
        r[0] = refused();
        assert_eq!(split(&due, &r, NOW).oldest_age_seconds, None);
    }

    #[test]
    fn a_refused_queue_read_is_unknown_throughout() {
        let due = read(&[refused(), refused(), refused()], 1000);
        assert_eq!(due.delayed, None);
        assert!(checks(&due).is_empty());
        assert_eq!(split(&due, &[], NOW), Split::default());
    }

    #[test]
    fn an_abort_request_is_waiting_but_has_no_age() {
        // `Job.abort` scores a deferred job 1: due at once, not since 1970.
        let due = read(&[int(2), int(0), scored(&[("x", 1.0), ("b", 995e3)])], 1000);
        let s = split(&due, &found(&[(0, 0), (0, 0)]), NOW);
        assert_eq!(s.waiting, Some(2));
        assert_eq!(s.oldest_age_seconds, Some(5.0));
    }
}
