//! Measured service time of the presets whose libraries keep finished jobs
//! with their start and end times (BullMQ `finishedOn − processedOn`, RQ
//! `ended_at − started_at`): a [winsorized mean](winsorized_mean) worker
//! time per job over the newest [`WINDOW`] finished jobs, for mode WaitTime
//! without `processingTime`. A job whose end equals its start took less
//! than the stamps' resolution and counts as that (1 ms for BullMQ's
//! whole milliseconds), never 0. A queue with no newly finished job for
//! its source's `service_time_max_age` (10 minutes by default, as the
//! RabbitMQ meter's) has none.
//!
//! Cheap by construction: every [`READ_EVERY`] (not every poll: a mean
//! over 100 jobs moves slowly) each finished set is asked only for what
//! finished since the last read, and the two stamps of those jobs alone
//! are read (one `HMGET` each, in the poll's second round trip). Where the
//! score is the end time (BullMQ, Bull) that is `ZREVRANGEBYSCORE set +inf
//! <last score> WITHSCORES LIMIT 0 n`. Where it is the expiry time, end
//! plus a TTL that can differ per job (RQ's registries), the newest scores
//! are the jobs kept longest, not the newest jobs: each TTL seen there (a
//! *class*) is read in its own band of scores, the end times since the
//! last read plus that TTL ([`Scores::Expiry`]). The window is the source's
//! own state, kept between polls; readers only see the mean in the snapshot.

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

/// The share of the window, at each end, that the mean clamps to the
/// nearest value inside ([`winsorized_mean`]).
const TRIM: f64 = 0.02;

/// Where a library keeps its finished jobs and their start and end stamps.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishedLayout {
    /// Zsets of finished jobs (done and failed: workers spend time on
    /// both).
    pub sets: [Vec<u8>; 2],
    /// What the sets' scores are: how "finished since the last read" is asked.
    pub scores: Scores,
    /// A job's hash is this followed by its id.
    pub job_prefix: Vec<u8>,
    /// The hash fields of the job's start and end.
    pub fields: [&'static str; 2],
    /// The unit of both stamps.
    pub unit: TimeUnit,
    /// The stamps' resolution in seconds: a job whose end equals its start
    /// took less than this, and counts as this (never 0).
    pub resolution: f64,
}

/// What a finished set's scores are.
#[derive(Debug, Clone, PartialEq)]
pub enum Scores {
    /// The job's end time, growing as jobs finish (BullMQ's and Bull's
    /// `finishedOn`, ms): read from the highest score seen on.
    End,
    /// When the job expires: its end in unix seconds (RQ: rounded down)
    /// plus a TTL that can differ per job (RQ's `result_ttl`,
    /// `failure_ttl`). Per set, the library's default TTL in seconds, the
    /// class read before any other is seen.
    Expiry {
        /// Per set of [`FinishedLayout::sets`], its default TTL.
        default_ttl: [f64; 2],
    },
}

/// How often a queue's finished sets are read. Measured (200 BullMQ and
/// 200 RQ queues, commandstats): reading them every 1 s poll added about a
/// quarter to the presets' Redis CPU with nothing finishing. A window
/// kept for less than twice this is read every half of its keep instead,
/// so that jobs finishing all along never let it lapse between reads.
pub const READ_EVERY: f64 = 5.0;

/// Most ids kept at one score; beyond, that score is left behind (read
/// from above it) rather than keep a growing list.
const MAX_AT_SCORE: usize = 4 * PER_POLL;

/// Seconds of slack around an expiry band: RQ's scores are whole seconds
/// (rounded down), a class's TTL is learnt to within a second, and a job
/// is in its registry a moment after its end stamp.
const MARGIN: f64 = 3.0;

/// Most TTL classes read per expiry-scored set; the one measured least
/// recently makes way for a new one.
const MAX_CLASSES: usize = 4;

/// Members of an expiry-scored set sampled per read to learn its classes:
/// those expiring next, one per class in proportion to how many of its
/// jobs finish per second.
const PROBE: usize = 4;

/// Ids read lately per expiry-scored set (bands overlap by [`MARGIN`]), so
/// that no job is measured twice.
const RECENT: usize = 256;

/// How far one end-scored set was read: its highest score seen, and the
/// ids read at exactly that score (a later job may finish with the same
/// score, so the next read includes the score and skips these).
#[derive(Debug, Clone, Default, PartialEq)]
struct Cursor {
    /// The highest score read; `None` before the first read.
    score: Option<f64>,
    /// The ids read at `score`, at most [`MAX_AT_SCORE`].
    ids: Vec<Vec<u8>>,
    /// More than [`MAX_AT_SCORE`] jobs shared `score`: read above it only.
    past: bool,
}

impl Cursor {
    /// The `ZREVRANGEBYSCORE` of what finished since the last read.
    fn ask(&self, set: &[u8]) -> redis::Cmd {
        let min = match self.score {
            None => "-inf".to_string(),
            Some(s) if self.past => format!("({s}"),
            Some(s) => format!("{s}"),
        };
        let mut c = super::cmd("ZREVRANGEBYSCORE", set);
        c.arg("+inf")
            .arg(min)
            .arg("WITHSCORES")
            .arg("LIMIT")
            .arg(0)
            .arg(PER_POLL + self.ids.len());
        c
    }

    /// Moves on past `jobs` (that reply), returning the ids not read before.
    fn advance(&mut self, jobs: Vec<(Vec<u8>, f64)>) -> Vec<Vec<u8>> {
        let Some(top) = jobs.iter().map(|(_, s)| *s).reduce(f64::max) else {
            return Vec::new();
        };
        let seen_at_top = if self.score == Some(top) {
            std::mem::take(&mut self.ids)
        } else {
            Vec::new()
        };
        let mut at_top = seen_at_top.clone();
        let mut new = Vec::new();
        for (id, score) in jobs {
            let known =
                self.score == Some(score) && self.ids.contains(&id) || seen_at_top.contains(&id);
            if score == top && !at_top.contains(&id) {
                at_top.push(id.clone());
            }
            if !known {
                new.push(id);
            }
        }
        self.score = Some(top);
        self.past = at_top.len() > MAX_AT_SCORE;
        self.ids = if self.past { Vec::new() } else { at_top };
        new
    }
}

/// One TTL seen in an expiry-scored set, read in its own band of scores.
#[derive(Debug, Clone, PartialEq)]
struct Class {
    /// Score minus end time of its jobs, seconds.
    ttl: f64,
    /// The upper bound of the last band read: the next starts just below
    /// it. `None`: not read yet (the first band reads its newest jobs).
    read_to: Option<f64>,
    /// When (our unix seconds) a job of it was last seen.
    seen: f64,
}

/// How far one expiry-scored set was read: its classes, and the ids read
/// lately.
#[derive(Debug, Clone, Default, PartialEq)]
struct ExpiryCursor {
    /// The TTLs seen, at most [`MAX_CLASSES`]; empty before the first read
    /// (then the layout's default TTL is the one class).
    classes: Vec<Class>,
    /// Ids read lately, at most [`RECENT`], newest last.
    recent: VecDeque<Vec<u8>>,
    /// The ids the last probe read: an idle set's probe reads nothing new.
    probed: Vec<Vec<u8>>,
}

impl ExpiryCursor {
    /// The classes a read at `now` asks for: those seen, or the default TTL.
    fn asked(&self, default_ttl: f64, now: f64) -> Vec<Class> {
        if self.classes.is_empty() {
            vec![Class {
                ttl: default_ttl,
                read_to: None,
                seen: now,
            }]
        } else {
            self.classes.clone()
        }
    }

    /// Counts `offset` (a job's score minus its end) as a class seen at
    /// `at`: a new one if no class is within [`MARGIN`] of it.
    fn learn(&mut self, offset: f64, at: f64) {
        if !offset.is_finite() || offset < 0.0 {
            return;
        }
        if let Some(c) = self
            .classes
            .iter_mut()
            .find(|c| (c.ttl - offset).abs() <= MARGIN)
        {
            c.seen = c.seen.max(at);
            return;
        }
        if self.classes.len() >= MAX_CLASSES
            && let Some(i) = (0..self.classes.len())
                .min_by(|&a, &b| self.classes[a].seen.total_cmp(&self.classes[b].seen))
        {
            self.classes.remove(i);
        }
        self.classes.push(Class {
            ttl: offset,
            read_to: None,
            seen: at,
        });
    }

    /// Whether `id` was read lately; if not, remembers it.
    fn first_read(&mut self, id: &[u8]) -> bool {
        if self.recent.iter().any(|r| r == id) {
            return false;
        }
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(id.to_vec());
        true
    }
}

/// One round-1 command of a read, per finished set.
#[derive(Debug, Clone, PartialEq)]
enum Ask {
    /// An end-scored set: what finished since its cursor.
    Since,
    /// An expiry-scored set's class `class` (an index of its classes, or
    /// 0 for the default): scores in `(lower, upper]`, newest first.
    Band {
        /// The class's index.
        class: usize,
        /// Its TTL.
        ttl: f64,
        /// Scores above this; `None`: from the lowest.
        lower: Option<f64>,
        /// Scores up to this: our clock (moved by the workers' skew) plus
        /// the TTL and [`MARGIN`].
        upper: f64,
    },
    /// An expiry-scored set's members expiring next, from this score (our
    /// clock): to learn its classes.
    Probe {
        /// The lowest score asked.
        from: f64,
    },
}

/// What a follow-up `HMGET`'s reply is for.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Pending {
    /// A job that finished since the last read (an end-scored set).
    Ended {
        /// When it was asked for (our unix seconds).
        at: f64,
    },
    /// A job in an expiry-scored set's band of class `ttl`: measured if it
    /// is of that class, else its class is learnt.
    Band {
        /// The set's index.
        set: usize,
        /// The class's TTL.
        ttl: f64,
        /// The job's score.
        score: f64,
        /// When it was asked for.
        at: f64,
    },
    /// A job a probe sampled: its class is learnt, it is not measured.
    Probe {
        /// The set's index.
        set: usize,
        /// The job's score.
        score: f64,
        /// When it was asked for.
        at: f64,
    },
}

/// One queue's measurement, kept by the source between polls.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceWindow {
    /// How long (seconds) a measurement is kept with no newly finished
    /// job (the source's `service_time_max_age`): then the queue's service
    /// time is unknown. Workers may have changed (a new release, a slower
    /// dependency) since the last job anyone measured.
    keep: f64,
    /// Per end-scored set of the layout, how far it was read.
    cursors: [Cursor; 2],
    /// Per expiry-scored set of the layout, how far it was read.
    expiry: [ExpiryCursor; 2],
    /// How far the workers' clock is ahead of ours, at least: the largest
    /// end stamp of a job measured from an expiry band minus when it was
    /// read, and not below 0 (a clock behind ours widens the bands a
    /// little, which only costs reads).
    skew: f64,
    /// What each follow-up returned by the last [`read`](Self::read) is
    /// for, in order.
    pending: VecDeque<Pending>,
    /// The stamps' unit and resolution, from the layout at the last read.
    stamps: Option<(TimeUnit, f64)>,
    /// Worker seconds of the newest jobs measured, newest last, at most [`WINDOW`].
    durations: VecDeque<f64>,
    /// When (our unix seconds) a job was last measured.
    last_new: Option<f64>,
    /// When (unix seconds) the finished sets are next read; `None`: at once.
    next_read: Option<f64>,
}

impl ServiceWindow {
    /// A window with nothing measured that keeps a measurement `keep`
    /// seconds with no newly finished job.
    pub fn keeping(keep: f64) -> Self {
        ServiceWindow {
            keep,
            cursors: Default::default(),
            expiry: Default::default(),
            skew: 0.0,
            pending: VecDeque::new(),
            stamps: None,
            durations: VecDeque::new(),
            last_new: None,
            next_read: None,
        }
    }

    /// Whether a poll at `now` reads the finished sets.
    pub fn due(&self, now: f64) -> bool {
        self.next_read.is_none_or(|t| now >= t)
    }

    /// The round-1 commands of a read at `now`, each with its set.
    fn asks(&self, layout: &FinishedLayout, now: f64) -> Vec<(usize, Ask)> {
        let Scores::Expiry { default_ttl } = &layout.scores else {
            return vec![(0, Ask::Since), (1, Ask::Since)];
        };
        let clock = now + self.skew;
        let mut asks = Vec::new();
        for (set, (cursor, ttl)) in self.expiry.iter().zip(default_ttl).enumerate() {
            for (class, c) in cursor.asked(*ttl, now).into_iter().enumerate() {
                let upper = clock + c.ttl + MARGIN;
                // Overlapping the last band: a job's score may be up to a
                // second below the end it stamped, the skew up to a margin off.
                let lower = c.read_to.map(|r| r - 2.0 * MARGIN);
                let ttl = c.ttl;
                asks.push((
                    set,
                    Ask::Band {
                        class,
                        ttl,
                        lower,
                        upper,
                    },
                ));
            }
            asks.push((set, Ask::Probe { from: clock }));
        }
        asks
    }

    /// Round-1 commands: what finished in each set since the last read.
    pub fn plan(&self, layout: &FinishedLayout, now: f64) -> Vec<redis::Cmd> {
        let band_limit = |set: usize| {
            PER_POLL
                .div_ceil(self.expiry[set].classes.len().max(1))
                .max(PROBE)
        };
        self.asks(layout, now)
            .into_iter()
            .map(|(set, ask)| {
                let key = &layout.sets[set];
                match ask {
                    Ask::Since => self.cursors[set].ask(key),
                    Ask::Band { lower, upper, .. } => {
                        let mut c = super::cmd("ZREVRANGEBYSCORE", key);
                        c.arg(format!("{upper}"))
                            .arg(lower.map_or("-inf".to_string(), |l| format!("({l}")))
                            .arg("WITHSCORES")
                            .arg("LIMIT")
                            .arg(0)
                            .arg(band_limit(set));
                        c
                    }
                    Ask::Probe { from } => {
                        let mut c = super::cmd("ZRANGEBYSCORE", key);
                        c.arg(format!("({from}"))
                            .arg("+inf")
                            .arg("WITHSCORES")
                            .arg("LIMIT")
                            .arg(0)
                            .arg(PROBE);
                        c
                    }
                }
            })
            .collect()
    }

    /// Reads [`plan`](Self::plan)'s replies (planned at the same `now`),
    /// moving each set's cursor on, and returns the follow-ups: one `HMGET
    /// <job> <start> <end>` per job not read before, each reply to be
    /// handed to [`record`](Self::record) in order. An unreadable reply
    /// (refused by an ACL, say) moves nothing and asks nothing. The next
    /// read is due [`READ_EVERY`] after `now` (half the keep if shorter).
    pub fn read(
        &mut self,
        now: f64,
        layout: &FinishedLayout,
        replies: &[Value],
    ) -> Vec<redis::Cmd> {
        let asks = self.asks(layout, now);
        self.next_read = Some(now + READ_EVERY.min(self.keep / 2.0));
        self.pending.clear();
        self.stamps = Some((layout.unit, layout.resolution));
        let mut follow = Vec::new();
        let mut ask_for = |id: &[u8], p: Pending, pending: &mut VecDeque<Pending>| {
            let mut c = super::cmd("HMGET", &super::key(&[&layout.job_prefix, id]));
            c.arg(layout.fields[0]).arg(layout.fields[1]);
            follow.push(c);
            pending.push_back(p);
        };
        for ((set, ask), r) in asks.into_iter().zip(replies) {
            let Some(jobs) = scored_members(r) else {
                continue;
            };
            match ask {
                Ask::Since => {
                    for id in self.cursors[set].advance(jobs) {
                        ask_for(&id, Pending::Ended { at: now }, &mut self.pending);
                    }
                }
                Ask::Band {
                    class, ttl, upper, ..
                } => {
                    let cursor = &mut self.expiry[set];
                    if cursor.classes.is_empty() {
                        cursor.classes = cursor.asked(ttl, now);
                    }
                    if let Some(c) = cursor.classes.get_mut(class) {
                        c.read_to = Some(upper);
                    }
                    for (id, score) in jobs {
                        if cursor.first_read(&id) {
                            let p = Pending::Band {
                                set,
                                ttl,
                                score,
                                at: now,
                            };
                            ask_for(&id, p, &mut self.pending);
                        }
                    }
                }
                Ask::Probe { .. } => {
                    let cursor = &mut self.expiry[set];
                    let probed = std::mem::take(&mut cursor.probed);
                    for (id, score) in jobs {
                        if !probed.contains(&id) && !cursor.recent.contains(&id) {
                            let p = Pending::Probe {
                                set,
                                score,
                                at: now,
                            };
                            ask_for(&id, p, &mut self.pending);
                        }
                        cursor.probed.push(id);
                    }
                }
            }
        }
        follow
    }

    /// Takes the next follow-up's `HMGET` reply: its end minus its start,
    /// when both are readable stamps and the end is not before the start
    /// (a job retried or still being written is skipped, never counted as
    /// 0), at least the stamps' resolution. A job read from an expiry
    /// band is measured only if it is of the band's class; every such job
    /// teaches its class.
    pub fn record(&mut self, v: &Value) {
        let (Some(p), Some((unit, resolution))) = (self.pending.pop_front(), self.stamps) else {
            return;
        };
        let Some((start, end)) = stamps(unit, v) else {
            return;
        };
        let measured = match p {
            Pending::Ended { at } => Some(at),
            Pending::Band {
                set,
                ttl,
                score,
                at,
            } => {
                self.expiry[set].learn(score - end, at);
                let of_class = (score - end - ttl).abs() <= MARGIN;
                if of_class {
                    self.skew = self.skew.max(end - at);
                }
                of_class.then_some(at)
            }
            Pending::Probe { set, score, at } => {
                self.expiry[set].learn(score - end, at);
                None
            }
        };
        if let Some(at) = measured {
            if self.last_new.is_some_and(|t| at - t > self.keep) {
                self.durations.clear();
            }
            if self.durations.len() == WINDOW {
                self.durations.pop_front();
            }
            self.durations.push_back((end - start).max(resolution));
            self.last_new = Some(self.last_new.map_or(at, |t| t.max(at)));
        }
    }

    /// The service time at `now`: the [`winsorized_mean`] over the jobs
    /// measured; `None` before any (the library keeps no finished job, as
    /// with BullMQ's `removeOnComplete` or RQ's `result_ttl=0`, or none
    /// has finished yet) and when none was newly measured for
    /// [`keep`](Self::keeping) seconds.
    pub fn mean(&self, now: f64) -> Option<ServiceTime> {
        if self.last_new.is_none_or(|t| now - t > self.keep) {
            return None;
        }
        let mean_seconds = winsorized_mean(&self.durations)?;
        Some(ServiceTime {
            mean_seconds,
            jobs: self.durations.len() as u64,
            from: ServiceSource::FinishedJobs,
        })
    }
}

/// The mean of `durations` after clamping the lowest and highest
/// [`TRIM`] of them (at least one each from three on) to the nearest value
/// inside: a winsorized mean. The WaitTime model needs the mean (workers
/// free up at 1 / mean per second each), which a median is not: with jobs
/// of mixed lengths it ignores the long ones and sizes too few workers.
/// A plain mean is not robust: one job stuck for an hour among 99 of
/// 0.2 s makes it 36 s. Clamped, that job counts as the next longest, and
/// a real spread of long jobs (more than 2 % of them) still counts in
/// full. `None` when empty.
pub fn winsorized_mean(durations: &VecDeque<f64>) -> Option<f64> {
    let n = durations.len();
    if n == 0 {
        return None;
    }
    let mut sorted: Vec<f64> = durations.iter().copied().collect();
    sorted.sort_by(f64::total_cmp);
    let k = ((n as f64 * TRIM).ceil() as usize).min((n - 1) / 2);
    // k <= (n - 1) / 2 < n, so both indexes are in range.
    let (lo, hi) = (sorted[k], sorted[n - 1 - k]);
    Some(sorted.iter().map(|d| d.clamp(lo, hi)).sum::<f64>() / n as f64)
}

/// A job's start and end from an `HMGET` of its two stamp fields, in
/// unix seconds, when both are readable, finite, positive and the end is
/// not before the start.
fn stamps(unit: TimeUnit, v: &Value) -> Option<(f64, f64)> {
    let stamps = reply::as_array(v)?;
    let stamp = |i: usize| {
        let text = reply::as_str(stamps.get(i)?)?;
        unit.text_to_seconds(text)
            .filter(|s| s.is_finite() && *s > 0.0)
    };
    let (start, end) = (stamp(0)?, stamp(1)?);
    (end >= start).then_some((start, end))
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
            scores: Scores::End,
            job_prefix: b"bull:q:".to_vec(),
            fields: ["processedOn", "finishedOn"],
            unit: TimeUnit::Milliseconds,
            resolution: 0.001,
        }
    }

    fn rq_layout() -> FinishedLayout {
        super::super::libraries::rq::finished("rq", b"q")
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

    /// A window keeping its measurement the default 10 minutes.
    fn window() -> ServiceWindow {
        ServiceWindow::keeping(crate::config::default_service_time_max_age().as_secs_f64())
    }

    /// An `HMGET` reply of a start and an end stamp.
    fn hm(start: &str, end: &str) -> Value {
        Value::Array(vec![bulk(start), bulk(end)])
    }

    /// Reads `durations_ms.len()` new BullMQ jobs at `now` (ids and scores
    /// above every earlier call's) and records their stamps.
    fn feed(w: &mut ServiceWindow, now: f64, durations_ms: &[u64]) {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);
        let first = NEXT.fetch_add(durations_ms.len(), std::sync::atomic::Ordering::Relaxed);
        let ids: Vec<String> = (first..first + durations_ms.len())
            .map(|i| i.to_string())
            .collect();
        let jobs: Vec<(&str, f64)> = ids
            .iter()
            .map(|i| (i.as_str(), i.parse().unwrap()))
            .collect();
        let follow = w.read(now, &layout(), &[scored(&jobs), scored(&[])]);
        assert_eq!(follow.len(), durations_ms.len());
        for d in durations_ms {
            w.record(&hm("1000", &(1000 + d).to_string()));
        }
    }

    #[test]
    fn the_first_read_takes_the_newest_then_only_what_finished_since() {
        let l = layout();
        let mut w = window();
        let first = w.plan(&l, 0.0);
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
        let next = w.plan(&l, 0.0);
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
        assert!(packed(&w.plan(&l, 0.0)[0]).contains("3000"));
        // A refused set moves nothing.
        assert!(w.read(0.0, &l, &[refused(), refused()]).is_empty());
        assert!(packed(&w.plan(&l, 0.0)[0]).contains("$2 18"));
        // RESP3 pairs read alike.
        let resp3 = Value::Array(vec![Value::Array(vec![bulk("9"), Value::Double(4000.0)])]);
        let follow = w.read(0.0, &l, &[resp3, scored(&[])]);
        assert_eq!(follow.len(), 1);
        assert!(packed(&w.plan(&l, 0.0)[0]).contains("4000"));
    }

    #[test]
    fn finished_sets_are_read_at_once_then_every_read_every() {
        let mut w = window();
        assert!(w.due(100.0));
        w.read(100.0, &layout(), &[scored(&[]), scored(&[])]);
        assert!(!w.due(100.0 + READ_EVERY - 0.1));
        assert!(w.due(100.0 + READ_EVERY));
    }

    /// A `service_time_max_age` under two reads' interval: read every half
    /// of it, so steady work keeps the measurement from lapsing.
    #[test]
    fn a_window_kept_briefly_is_read_every_half_its_keep() {
        let mut w = ServiceWindow::keeping(3.0);
        w.read(100.0, &layout(), &[scored(&[]), scored(&[])]);
        assert!(!w.due(101.4));
        assert!(w.due(101.5));
    }

    #[test]
    fn the_mean_is_over_the_newest_jobs_and_unknown_before_any() {
        let mut w = window();
        assert_eq!(w.mean(0.0), None);
        feed(&mut w, 0.0, &[200, 400]);
        let m = w.mean(0.0).unwrap();
        assert!((m.mean_seconds - 0.3).abs() < 1e-9, "{m:?}");
        assert_eq!((m.jobs, m.from), (2, ServiceSource::FinishedJobs));
        // A job without both stamps, with an end before its start or not
        // finite, or gone (nil fields) is skipped, never a 0.
        let l = layout();
        let ids = [
            ("a", 1.0e9),
            ("b", 1.0e9),
            ("c", 1.0e9),
            ("d", 1.0e9),
            ("e", 1.0e9),
        ];
        assert_eq!(w.read(0.0, &l, &[scored(&ids), scored(&[])]).len(), 5);
        for v in [
            hm("1000", ""),
            hm("2000", "1000"),
            hm("1000", "inf"),
            Value::Array(vec![Value::Nil, Value::Nil]),
            refused(),
        ] {
            w.record(&v);
        }
        assert_eq!(w.mean(0.0).unwrap().jobs, 2);
        // The window keeps the newest WINDOW jobs: 2 of 0.3 s pushed out by 1 s jobs.
        feed(&mut w, 0.0, &[1000; WINDOW]);
        let m = w.mean(0.0).unwrap();
        assert_eq!(m.jobs, WINDOW as u64);
        assert!((m.mean_seconds - 1.0).abs() < 1e-9);
    }

    /// Issue 36, case 4: BullMQ's stamps are whole milliseconds, RQ's
    /// microseconds. A job whose end equals its start took less than that
    /// and counts as that, never 0.
    #[test]
    fn a_job_whose_end_equals_its_start_counts_as_the_stamps_resolution() {
        let mut w = window();
        feed(&mut w, 0.0, &[0, 0, 0]);
        let m = w.mean(0.0).unwrap();
        assert_eq!((m.mean_seconds, m.jobs), (0.001, 3));

        let (l, mut w) = (rq_layout(), window());
        let stamp = "2026-11-26T13:00:00.100000Z";
        let end = 1_795_698_000.1;
        let replies = w.plan(&l, end + 1.0).len();
        let mut r = vec![scored(&[]); replies];
        r[0] = scored(&[("j", end.floor() + 500.0)]);
        assert_eq!(w.read(end + 1.0, &l, &r).len(), 1);
        w.record(&hm(stamp, stamp));
        assert_eq!(w.mean(end + 1.0).unwrap().mean_seconds, 1e-6);
    }

    /// As the RabbitMQ meter's: with no newly finished job for `keep`, the
    /// measurement is gone (absent, UNAVAILABLE for WaitTime without
    /// processingTime), and the next job starts a new one.
    #[test]
    fn a_measurement_with_no_newly_finished_job_for_keep_expires() {
        const KEEP: f64 = 600.0;
        let mut w = ServiceWindow::keeping(KEEP);
        feed(&mut w, 1000.0, &[200, 200]);
        assert!(w.mean(1000.0 + KEEP).is_some(), "kept for KEEP");
        // Reads that find nothing new do not keep it.
        w.read(1000.0 + KEEP, &layout(), &[scored(&[]), scored(&[])]);
        assert_eq!(w.mean(1000.0 + KEEP + 1.0), None, "expired");
        // A job finishing later is measured alone, not averaged with the old.
        feed(&mut w, 1000.0 + KEEP + 5.0, &[800]);
        let m = w.mean(1000.0 + KEEP + 5.0).unwrap();
        assert_eq!((m.mean_seconds, m.jobs), (0.8, 1));
    }

    /// The WaitTime model needs the mean; one stuck job must not set it.
    #[test]
    fn the_winsorized_mean_ignores_one_stuck_job_and_keeps_a_real_spread() {
        let m = |d: &[f64]| winsorized_mean(&d.iter().copied().collect());
        assert_eq!(m(&[]), None);
        // One job stuck an hour among 99 of 0.2 s: 0.2, not 36 s.
        let mut stuck = vec![0.2; 99];
        stuck.push(3600.0);
        assert!((m(&stuck).unwrap() - 0.2).abs() < 1e-9);
        // From three jobs on, one stuck is clamped.
        assert!((m(&[0.2, 0.2, 3600.0]).unwrap() - 0.2).abs() < 1e-9);
        // Two: nothing to tell which is typical, the plain mean.
        assert_eq!(m(&[0.2, 0.4]), Some(0.30000000000000004));
        // A real spread, 10 % of jobs of 5 s among 0.1 s: its mean, 0.59
        // (a median would say 0.1 and size a sixth of the workers).
        let mut spread = vec![0.1; 90];
        spread.extend([5.0; 10]);
        assert!((m(&spread).unwrap() - 0.59).abs() < 1e-9);

        // The window serves it.
        let mut w = window();
        let mut jobs = vec![200; 99];
        jobs.push(3_600_000);
        feed(&mut w, 0.0, &jobs);
        assert!((w.mean(0.0).unwrap().mean_seconds - 0.2).abs() < 1e-9);
    }

    #[test]
    fn rq_stamps_are_read_as_rfc3339() {
        let (l, mut w) = (rq_layout(), window());
        let now = 1_795_698_001.0;
        let mut r = vec![scored(&[]); w.plan(&l, now).len()];
        r[0] = scored(&[("j", 1_795_698_000.0 + 500.0)]);
        assert_eq!(w.read(now, &l, &r).len(), 1);
        w.record(&hm(
            "2026-11-26T13:00:00.100000Z",
            "2026-11-26T13:00:00.350000Z",
        ));
        let m = w.mean(now).unwrap();
        assert!((m.mean_seconds - 0.25).abs() < 1e-6, "{m:?}");
    }

    /// RQ scores its registries by expiry: end (whole seconds) plus the
    /// job's TTL. A job kept a day sits a day above jobs kept the default
    /// 500 s; those finishing after it are still read, in their own band,
    /// as soon as they finish.
    #[test]
    fn an_expiry_scored_set_is_read_per_ttl_class() {
        let (l, mut w) = (rq_layout(), window());
        let t0 = 1_795_698_000.0;
        let stamp = |t: f64| {
            chrono::DateTime::from_timestamp_micros((t * 1e6) as i64)
                .unwrap()
                .format("%Y-%m-%dT%H:%M:%S%.6fZ")
                .to_string()
        };
        // The first read: per set its default TTL's band (newest first,
        // up to now + TTL + MARGIN) and a probe of what expires next.
        let plan = w.plan(&l, t0);
        let p: Vec<String> = plan.iter().map(packed).collect();
        assert_eq!(p.len(), 4, "{p:?}");
        let band = |set: &str, upper: f64| format!("{set} $10 {upper} $4 -inf");
        assert!(
            p[0].contains(&band("rq:finished:q", t0 + 503.0)),
            "{}",
            p[0]
        );
        assert!(
            p[1].contains(&format!(
                "ZRANGEBYSCORE $13 rq:finished:q $11 ({t0} $4 +inf"
            )),
            "{}",
            p[1]
        );
        assert!(
            p[2].contains(&band("rq:failed:q", t0 + 31_536_003.0)),
            "{}",
            p[2]
        );
        // One job kept a day (result_ttl=86400) finished a second ago, 50 ms
        // long; the probe finds it.
        let day = (t0 - 1.0).floor() + 86400.0;
        let r = [
            scored(&[]),
            scored(&[("day", day)]),
            scored(&[]),
            scored(&[]),
        ];
        assert_eq!(w.read(t0, &l, &r).len(), 1);
        w.record(&hm(&stamp(t0 - 1.05), &stamp(t0 - 1.0)));
        assert_eq!(
            w.mean(t0),
            None,
            "a probe teaches a class, measures nothing"
        );
        // Next read: the day class has its band too, and reads its job.
        let t1 = t0 + READ_EVERY;
        let p: Vec<String> = w.plan(&l, t1).iter().map(packed).collect();
        assert_eq!(p.len(), 5, "{p:?}");
        assert!(
            p[1].contains(&band("rq:finished:q", t1 + 86403.0)),
            "{}",
            p[1]
        );
        let r = [
            scored(&[]),
            scored(&[("day", day)]),
            scored(&[("day", day)]),
            scored(&[]),
            scored(&[]),
        ];
        assert_eq!(
            w.read(t1, &l, &r).len(),
            1,
            "the probe does not read it again"
        );
        w.record(&hm(&stamp(t0 - 1.05), &stamp(t0 - 1.0)));
        let m = w.mean(t1).unwrap();
        assert!((m.mean_seconds - 0.05).abs() < 1e-6, "{m:?}");
        // Then jobs kept 500 s finish: a day below the first one's score,
        // in the default class's band, which reads on from its last one.
        let t2 = t1 + READ_EVERY;
        let p: Vec<String> = w.plan(&l, t2).iter().map(packed).collect();
        let (low, high) = (t1 + 503.0 - 2.0 * MARGIN, t2 + 503.0);
        assert!(p[0].contains(&format!(" {high} $11 ({low} ")), "{}", p[0]);
        let jobs: Vec<(String, f64)> = (0..3)
            .map(|i| (format!("j{i}"), (t2 - 1.0).floor() + 500.0))
            .collect();
        let jobs: Vec<(&str, f64)> = jobs.iter().map(|(i, s)| (i.as_str(), *s)).collect();
        let r = [
            scored(&jobs),
            scored(&[("day", day)]),
            scored(&jobs),
            scored(&[]),
            scored(&[]),
        ];
        assert_eq!(w.read(t2, &l, &r).len(), 3, "each job read once");
        for _ in 0..3 {
            w.record(&hm(&stamp(t2 - 1.2), &stamp(t2 - 1.0)));
        }
        let m = w.mean(t2).unwrap();
        assert_eq!(m.jobs, 4);
        // The one 50 ms job is clamped to the next: 0.2.
        assert!((m.mean_seconds - 0.2).abs() < 1e-6, "{m:?}");
        // A job of another class found in a band (an old day-long job whose
        // expiry falls there) teaches its class and is not measured.
        let t3 = t2 + READ_EVERY;
        let n = w.plan(&l, t3).len();
        let mut r = vec![scored(&[]); n];
        r[0] = scored(&[("old", (t3 - 1.0).floor() + 500.0)]);
        assert_eq!(w.read(t3, &l, &r).len(), 1);
        w.record(&hm(
            &stamp(t3 - 86400.0 + 490.0),
            &stamp(t3 - 86400.0 + 500.0),
        ));
        assert_eq!(w.mean(t3).unwrap().jobs, 4);
    }
}
