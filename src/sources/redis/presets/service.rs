//! Measured service time of the presets whose libraries keep finished jobs
//! with their start and end times (BullMQ `finishedOn − processedOn`, RQ
//! `ended_at − started_at`): the mean worker time per job over the newest
//! [`WINDOW`] finished jobs, for mode WaitTime without `processingTime`.
//!
//! Cheap by construction: every [`READ_EVERY`] (not every poll: a mean
//! over 100 jobs moves slowly) each finished set is asked only for what
//! finished since the last read (`ZREVRANGEBYSCORE set +inf <last score>
//! WITHSCORES LIMIT 0 n`), and the two stamps of those jobs alone are read
//! (one `HMGET` each, in the poll's second round trip). The window is the source's own state, kept between
//! polls; readers only see the mean in the snapshot.

use std::collections::VecDeque;

use redis::Value;

use super::reply;
use crate::snapshot::{ServiceSource, ServiceTime};
use crate::time::TimeUnit;

/// Jobs the mean is over: the newest finished ones measured.
pub const WINDOW: usize = 100;

/// New finished jobs read per set and poll, newest first: the follow-ups a
/// queue adds to a poll stay bounded however fast jobs finish (the newest
/// are a fair sample of the rest).
pub const PER_POLL: usize = 16;

/// Where a library keeps its finished jobs and their start and end stamps.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishedLayout {
    /// Zsets of finished jobs (done and failed: workers spend time on
    /// both), each scored by a time that grows as jobs finish.
    pub sets: [Vec<u8>; 2],
    /// A job's hash is this followed by its id.
    pub job_prefix: Vec<u8>,
    /// The hash fields of the job's start and end.
    pub fields: [&'static str; 2],
    /// The unit of both stamps.
    pub unit: TimeUnit,
}

/// How often a queue's finished sets are read. Measured (200 BullMQ and
/// 200 RQ queues, commandstats): reading them every 1 s poll added about a
/// quarter to the presets' Redis CPU with nothing finishing.
pub const READ_EVERY: f64 = 5.0;

/// Most ids kept at one score; beyond, that score is left behind (read
/// from above it) rather than keep a growing list.
const MAX_AT_SCORE: usize = 4 * PER_POLL;

/// How far one finished set was read: its highest score seen, and the ids
/// read at exactly that score (a later job may finish with the same score,
/// as RQ's are whole seconds, so the next read includes the score and skips
/// these).
#[derive(Debug, Clone, Default, PartialEq)]
struct Cursor {
    /// The highest score read; `None` before the first read.
    score: Option<f64>,
    /// The ids read at `score`, at most [`MAX_AT_SCORE`].
    ids: Vec<Vec<u8>>,
    /// More than [`MAX_AT_SCORE`] jobs shared `score`: read above it only.
    past: bool,
}

/// One queue's measurement, kept by the source between polls.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServiceWindow {
    /// Per finished set of the layout, how far it was read.
    cursors: [Cursor; 2],
    /// Worker seconds of the newest jobs measured, newest last, at most [`WINDOW`].
    durations: VecDeque<f64>,
    /// When (unix seconds) the finished sets are next read; `None`: at once.
    next_read: Option<f64>,
}

impl ServiceWindow {
    /// Whether a poll at `now` reads the finished sets.
    pub fn due(&self, now: f64) -> bool {
        self.next_read.is_none_or(|t| now >= t)
    }

    /// Round-1 commands: what finished in each set since the last read.
    pub fn plan(&self, layout: &FinishedLayout) -> Vec<redis::Cmd> {
        layout
            .sets
            .iter()
            .zip(&self.cursors)
            .map(|(set, cursor)| {
                let mut c = super::cmd("ZREVRANGEBYSCORE", set);
                let min = match cursor.score {
                    None => "-inf".to_string(),
                    Some(s) if cursor.past => format!("({s}"),
                    Some(s) => format!("{s}"),
                };
                c.arg("+inf")
                    .arg(min)
                    .arg("WITHSCORES")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(PER_POLL + cursor.ids.len());
                c
            })
            .collect()
    }

    /// Reads [`plan`](Self::plan)'s replies, moving each set's cursor on,
    /// and returns the follow-ups: one `HMGET <job> <start> <end>` per job
    /// not read before. An unreadable reply (refused by an ACL, say) moves
    /// nothing and asks nothing. The next read is due [`READ_EVERY`] after `now`.
    pub fn read(
        &mut self,
        now: f64,
        layout: &FinishedLayout,
        replies: &[Value],
    ) -> Vec<redis::Cmd> {
        self.next_read = Some(now + READ_EVERY);
        let mut follow = Vec::new();
        for (cursor, r) in self.cursors.iter_mut().zip(replies) {
            let Some(jobs) = scored_members(r) else {
                continue;
            };
            let Some(top) = jobs.iter().map(|(_, s)| *s).reduce(f64::max) else {
                continue;
            };
            let seen_at_top = if cursor.score == Some(top) {
                std::mem::take(&mut cursor.ids)
            } else {
                Vec::new()
            };
            let mut at_top = seen_at_top.clone();
            for (id, score) in jobs {
                let known = cursor.score == Some(score) && cursor.ids.contains(&id)
                    || seen_at_top.contains(&id);
                if score == top && !at_top.contains(&id) {
                    at_top.push(id.clone());
                }
                if known {
                    continue;
                }
                let mut c = super::cmd("HMGET", &super::key(&[&layout.job_prefix, &id]));
                c.arg(layout.fields[0]).arg(layout.fields[1]);
                follow.push(c);
            }
            cursor.score = Some(top);
            cursor.past = at_top.len() > MAX_AT_SCORE;
            cursor.ids = if cursor.past { Vec::new() } else { at_top };
        }
        follow
    }

    /// Adds one job's `HMGET` reply: its end minus its start, when both are
    /// readable stamps and the end is not before the start (a job retried
    /// or still being written is skipped, never counted as 0).
    pub fn record(&mut self, unit: TimeUnit, v: &Value) {
        let Some(stamps) = reply::as_array(v) else {
            return;
        };
        let stamp = |i: usize| {
            let text = reply::as_str(stamps.get(i)?)?;
            unit.text_to_seconds(text).filter(|s| *s > 0.0)
        };
        if let (Some(start), Some(end)) = (stamp(0), stamp(1))
            && end >= start
        {
            if self.durations.len() == WINDOW {
                self.durations.pop_front();
            }
            self.durations.push_back(end - start);
        }
    }

    /// The mean over the jobs measured; `None` before any (the library
    /// keeps no finished job, as with BullMQ's `removeOnComplete` or RQ's
    /// `result_ttl=0`, or none has finished yet).
    pub fn mean(&self) -> Option<ServiceTime> {
        let jobs = self.durations.len();
        (jobs > 0).then(|| ServiceTime {
            mean_seconds: self.durations.iter().sum::<f64>() / jobs as f64,
            jobs: jobs as u64,
            from: ServiceSource::FinishedJobs,
        })
    }
}

/// A `ZREVRANGEBYSCORE .. WITHSCORES` reply as (member, score) pairs, in
/// RESP2 (flat) or RESP3 (pairs) shape; `None` if unreadable.
fn scored_members(v: &Value) -> Option<Vec<(Vec<u8>, f64)>> {
    let items = reply::as_array(v)?;
    match items.first() {
        None => Some(Vec::new()),
        Some(Value::Array(_)) => items
            .iter()
            .map(|p| match reply::as_array(p)? {
                [m, s] => Some((reply::as_bytes(m)?.to_vec(), reply::as_f64(s)?)),
                _ => None,
            })
            .collect(),
        Some(_) => items
            .chunks(2)
            .map(|c| match c {
                [m, s] => Some((reply::as_bytes(m)?.to_vec(), reply::as_f64(s)?)),
                _ => None,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;

    fn layout() -> FinishedLayout {
        FinishedLayout {
            sets: [b"bull:q:completed".to_vec(), b"bull:q:failed".to_vec()],
            job_prefix: b"bull:q:".to_vec(),
            fields: ["processedOn", "finishedOn"],
            unit: TimeUnit::Milliseconds,
        }
    }

    /// A RESP2 `WITHSCORES` reply.
    fn scored(pairs: &[(&str, f64)]) -> Value {
        Value::Array(
            pairs
                .iter()
                .flat_map(|(m, s)| [bulk(m), bulk(&s.to_string())])
                .collect(),
        )
    }

    fn packed(c: &redis::Cmd) -> String {
        String::from_utf8_lossy(&c.get_packed_command()).replace("\r\n", " ")
    }

    #[test]
    fn the_first_read_takes_the_newest_then_only_what_finished_since() {
        let l = layout();
        let mut w = ServiceWindow::default();
        let first = w.plan(&l);
        assert_eq!(
            first[0].get_packed_command(),
            redis::cmd("ZREVRANGEBYSCORE")
                .arg("bull:q:completed")
                .arg("+inf")
                .arg("-inf")
                .arg("WITHSCORES")
                .arg("LIMIT")
                .arg(0)
                .arg(PER_POLL)
                .get_packed_command()
        );
        let follow = w.read(
            0.0,
            &l,
            &[scored(&[("7", 3000.0), ("6", 2000.0)]), scored(&[])],
        );
        assert_eq!(follow.len(), 2);
        assert_eq!(
            follow[0].get_packed_command(),
            redis::cmd("HMGET")
                .arg("bull:q:7")
                .arg("processedOn")
                .arg("finishedOn")
                .get_packed_command()
        );
        // Next: from the highest score on (inclusive), one more for the id
        // already read there; the empty set is read from the start again.
        let next = w.plan(&l);
        assert!(packed(&next[0]).contains("+inf $4 3000 $10 WITHSCORES $5 LIMIT $1 0 $2 17"));
        assert!(packed(&next[1]).contains("-inf"));
        // Job 7 again and job 8 with the same score: only 8 is new.
        let follow = w.read(
            0.0,
            &l,
            &[scored(&[("8", 3000.0), ("7", 3000.0)]), scored(&[])],
        );
        assert_eq!(follow.len(), 1);
        assert!(packed(&follow[0]).contains("bull:q:8"));
        // Nothing new: nothing asked, the cursor stays.
        assert!(
            w.read(
                0.0,
                &l,
                &[scored(&[("8", 3000.0), ("7", 3000.0)]), scored(&[])]
            )
            .is_empty()
        );
        assert!(w.read(0.0, &l, &[scored(&[]), scored(&[])]).is_empty());
        assert!(packed(&w.plan(&l)[0]).contains("3000"));
        // A refused set moves nothing.
        assert!(w.read(0.0, &l, &[refused(), refused()]).is_empty());
        assert!(packed(&w.plan(&l)[0]).contains("$2 18"));
        // RESP3 pairs read alike.
        let resp3 = Value::Array(vec![Value::Array(vec![bulk("9"), Value::Double(4000.0)])]);
        let follow = w.read(0.0, &l, &[resp3, scored(&[])]);
        assert_eq!(follow.len(), 1);
        assert!(packed(&w.plan(&l)[0]).contains("4000"));
    }

    #[test]
    fn finished_sets_are_read_at_once_then_every_read_every() {
        let mut w = ServiceWindow::default();
        assert!(w.due(100.0));
        w.read(100.0, &layout(), &[scored(&[]), scored(&[])]);
        assert!(!w.due(100.0 + READ_EVERY - 0.1));
        assert!(w.due(100.0 + READ_EVERY));
    }

    #[test]
    fn the_mean_is_over_the_newest_jobs_and_unknown_before_any() {
        let mut w = ServiceWindow::default();
        assert_eq!(w.mean(), None);
        let hm = |start: &str, end: &str| Value::Array(vec![bulk(start), bulk(end)]);
        w.record(TimeUnit::Milliseconds, &hm("1000", "1200"));
        w.record(TimeUnit::Milliseconds, &hm("5000", "5400"));
        let m = w.mean().unwrap();
        assert!((m.mean_seconds - 0.3).abs() < 1e-9, "{m:?}");
        assert_eq!((m.jobs, m.from), (2, ServiceSource::FinishedJobs));
        // A job without both stamps, with an end before its start, or gone
        // (nil fields) is skipped, never a 0.
        for v in [
            hm("1000", ""),
            hm("2000", "1000"),
            Value::Array(vec![Value::Nil, Value::Nil]),
            refused(),
        ] {
            w.record(TimeUnit::Milliseconds, &v);
        }
        assert_eq!(w.mean().unwrap().jobs, 2);
        // The window keeps the newest WINDOW jobs: 2 of 0.3 s pushed out by 1 s jobs.
        for _ in 0..WINDOW {
            w.record(TimeUnit::Milliseconds, &hm("1000", "2000"));
        }
        let m = w.mean().unwrap();
        assert_eq!(m.jobs, WINDOW as u64);
        assert!((m.mean_seconds - 1.0).abs() < 1e-9);
    }

    #[test]
    fn rq_stamps_are_read_as_rfc3339() {
        let mut w = ServiceWindow::default();
        w.record(
            TimeUnit::Rfc3339,
            &Value::Array(vec![
                bulk("2026-11-26T13:00:00.100000Z"),
                bulk("2026-11-26T13:00:00.350000Z"),
            ]),
        );
        let m = w.mean().unwrap();
        assert!((m.mean_seconds - 0.25).abs() < 1e-6, "{m:?}");
    }
}
