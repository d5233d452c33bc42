//! Counter readings over time ([`CounterHistory`]), from which readers
//! compute rates. Separate from the model because it is the one part with a
//! storage scheme of its own: thinned, index-shared and block-shared so its
//! size is bounded whatever the poll frequency or the number of queues.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{Counters, JobState, PresetUnit, QueueId, QueueSample};

/// Counter readings over time, for rates computed by readers.
///
/// Bounded whatever the poll frequency or the number of queues: readings are
/// kept at most one per second for the last minute and one per 15 s up to
/// [`Self::RETENTION`] (at most ~120 readings), and only the two counters
/// rates use are kept, as blocks of an array per reading over a queue index
/// that consecutive readings share while the set of queues does not change;
/// unchanged blocks are shared too (see `VALUE_BLOCK`).
#[derive(Debug, Clone, Default)]
pub struct CounterHistory {
    /// Readings, oldest first.
    points: VecDeque<Arc<StoredPoint>>,
}

/// All counters of one source at one instant, as a source reports them.
#[derive(Debug, Clone)]
pub struct CounterPoint {
    /// When the counters were read.
    pub at: SystemTime,
    /// Counters per queue (only queues that have any).
    pub counters: HashMap<QueueId, Counters>,
    /// Queues without counters of their own whose jobs are counted as they
    /// finish (a plain key with `counters: processed`, asynq's queues, a
    /// single-queue preset entry with `counters: processed`): their
    /// arrivals are Δdepth + Δprocessed ([`CounterHistory::arrival_rate`]).
    pub flows: HashMap<QueueId, JobFlow>,
}

/// A queue's jobs held and jobs finished so far, from which its arrivals
/// follow: what came in is what is held more plus what was taken out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobFlow {
    /// Jobs held: a plain key's depth; a preset queue's jobs ready or
    /// running (see [`JobFlow::of`]).
    pub depth: u64,
    /// The lifetime total of jobs processed.
    pub processed: u64,
}

impl JobFlow {
    /// The flow of `q`, where it has a lifetime processed total and no
    /// counters of its own (those give arrivals directly). A preset queue
    /// holds its `waiting` + `active` jobs: a scheduled job, or one waiting
    /// for a retry, arrives when it becomes ready (moved to `waiting`),
    /// which is when it asks for a worker. Keys a library's queues share
    /// (`(all)`) have no flow; an unread state leaves it unknown, and so
    /// does a queue whose running jobs its library counts only in `(all)`
    /// (Sidekiq, Celery, with a `processed: "…{queue}"` template): a job
    /// taken but not finished would leave the flow unseen.
    pub fn of(q: &QueueSample) -> Option<JobFlow> {
        if !q.counters().is_empty() {
            return None;
        }
        let depth = match q.preset.as_deref() {
            None => q.depth?,
            Some(f) if f.unit == PresetUnit::Queue => {
                let held = [JobState::Waiting, JobState::Active];
                if !f.held_elsewhere(&held).is_empty() {
                    return None;
                }
                f.depth_of(&held)?
            }
            Some(_) => return None,
        };
        Some(JobFlow {
            depth,
            processed: q.jobs().processed?,
        })
    }
}

/// One kept reading: the counters rates use, by position in `index`.
#[derive(Debug)]
struct StoredPoint {
    /// When the counters were read.
    at: SystemTime,
    /// `at` since the Unix epoch (`None` before it), kept so that thinning
    /// takes ages and steps without two clock subtractions per reading.
    since_epoch: Option<Duration>,
    /// Queue → its slot in `blocks`; shared with neighbouring readings.
    index: Arc<HashMap<QueueId, Slot>>,
    /// Two values by position, [`VALUE_BLOCK`] queues per block:
    /// `(published, delivered)` or, for a flow, `(depth, processed)`;
    /// `u64::MAX` where unknown. A block equal to the previous reading's
    /// (over the same index) is shared with it.
    blocks: Box<[ValueBlock]>,
}

/// Where a queue's two values are, and what they mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    /// Position in the reading's blocks.
    pos: usize,
    /// Whether the values are a [`JobFlow`] rather than counters.
    flow: bool,
}

/// One queue's values in a kept reading.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stored {
    /// The backend's counters (only the fields rates use).
    Counters(Counters),
    /// A list's depth and processed total.
    Flow(JobFlow),
}

/// Up to [`VALUE_BLOCK`] queues' two values.
type ValueBlock = Arc<[(u64, u64)]>;

/// Queues per block of a kept reading. Idle queues' counters do not move,
/// so their blocks are shared by consecutive readings: 5,000 idle RabbitMQ
/// queues cost ~1 KB per reading instead of 80 KB (~120 readings are kept).
/// Small enough that one busy queue unshares little, large enough that the
/// per-block pointer and count stay a few percent.
const VALUE_BLOCK: usize = 64;

impl StoredPoint {
    /// The values of `queue`.
    fn stored(&self, queue: &QueueId) -> Option<Stored> {
        let slot = *self.index.get(queue)?;
        let i = slot.pos;
        let (a, b) = *self.blocks.get(i / VALUE_BLOCK)?.get(i % VALUE_BLOCK)?;
        let known = |v: u64| (v != u64::MAX).then_some(v);
        Some(if slot.flow {
            Stored::Flow(JobFlow {
                depth: a,
                processed: b,
            })
        } else {
            Stored::Counters(Counters {
                published: known(a),
                delivered: known(b),
                ..Counters::default()
            })
        })
    }

    /// The counters of `queue`, with only the fields rates use; `None` for
    /// a flow.
    fn get(&self, queue: &QueueId) -> Option<Counters> {
        match self.stored(queue)? {
            Stored::Counters(c) => Some(c),
            Stored::Flow(_) => None,
        }
    }

    /// The job flow of `queue`; `None` for counters.
    fn flow(&self, queue: &QueueId) -> Option<JobFlow> {
        match self.stored(queue)? {
            Stored::Flow(f) => Some(f),
            Stored::Counters(_) => None,
        }
    }
}

impl CounterHistory {
    /// How long readings are kept; the longest rate window a reader may ask for.
    pub const RETENTION: Duration = Duration::from_secs(15 * 60);
    /// Readings younger than this (from the newest) are kept one per second.
    const FINE_SPAN: Duration = Duration::from_secs(60);
    /// Spacing of older readings.
    const COARSE_STEP: Duration = Duration::from_secs(15);

    /// Returns a new history with `point` appended, thinned to the kept
    /// resolution and without readings older than [`Self::RETENTION`].
    pub fn with_point(&self, point: CounterPoint) -> CounterHistory {
        let stored = Arc::new(store(self.points.back().map(|p| &**p), point));
        Self::thinned(self.points.iter(), stored, self.points.len() + 1)
    }

    /// Returns a new history with `points` appended in their order: the
    /// same readings as appending them one at a time with
    /// [`Self::with_point`], thinned once instead of once per reading.
    /// For a reader that takes the history seldom while readings come
    /// often: `plan`'s replay polls every second and asks at each HPA sync,
    /// 15 s apart, and thinning (a pass over the ~120 kept readings) was
    /// 85 % of its time when done at every poll.
    ///
    /// Thinning once keeps the same readings when no two readings share a
    /// wall-clock second: a pass keeps the first reading of each step run
    /// (one second while young, 15 s after) and ages only grow, so a
    /// reading first of its step at the last reading's time was first of
    /// it at every earlier one. Readings within one second (a compressed
    /// replay polling faster than the step) are appended one at a time.
    pub fn with_points(&self, points: Vec<CounterPoint>) -> CounterHistory {
        let mut previous = None;
        let one_per_second = self
            .points
            .iter()
            .map(|p| p.since_epoch)
            .chain(points.iter().map(|p| since_epoch(p.at)))
            .all(|at| {
                let s = at.map(|d| d.as_secs());
                let rising = s.is_some() && (previous.is_none() || s > previous);
                previous = s;
                rising
            });
        if !one_per_second {
            return points
                .into_iter()
                .fold(self.clone(), |h, point| h.with_point(point));
        }
        let mut added: Vec<Arc<StoredPoint>> = Vec::with_capacity(points.len());
        for point in points {
            let last = added.last().or(self.points.back()).map(|p| &**p);
            added.push(Arc::new(store(last, point)));
        }
        let Some(newest) = added.pop() else {
            return self.clone();
        };
        let capacity = self.points.len() + added.len() + 1;
        Self::thinned(self.points.iter().chain(added.iter()), newest, capacity)
    }

    /// The readings `older` (oldest first) thinned to the kept resolution as
    /// of `stored`, the newest, which ends them.
    fn thinned<'a>(
        older: impl Iterator<Item = &'a Arc<StoredPoint>>,
        stored: Arc<StoredPoint>,
        capacity: usize,
    ) -> CounterHistory {
        let (newest, newest_since_epoch) = (stored.at, stored.since_epoch);
        let mut kept: VecDeque<Arc<StoredPoint>> = VecDeque::with_capacity(capacity);
        // Oldest first: keep the first reading of each wall-clock step (one
        // second while young, 15 s after); the newest is always kept. The
        // steps are wall-clock ones, not counted from the oldest reading, so
        // two replicas polling at the same instants keep the same readings
        // whenever either started, and their rates agree.
        let mut last_step: Option<u64> = None;
        for p in older {
            let age = match (newest_since_epoch, p.since_epoch) {
                (Some(n), Some(a)) => n.saturating_sub(a),
                _ => newest.duration_since(p.at).unwrap_or(Duration::ZERO),
            };
            if age > Self::RETENTION {
                continue;
            }
            let step = if age <= Self::FINE_SPAN {
                Duration::from_secs(1)
            } else {
                Self::COARSE_STEP
            };
            let since_epoch = p.since_epoch.unwrap_or_default();
            // Step numbers of the two spans never collide: fine ones are
            // seconds, coarse ones are marked by the top bit.
            let n = since_epoch.as_secs() / step.as_secs();
            let n = if step == Self::COARSE_STEP {
                n | 1 << 63
            } else {
                n
            };
            if last_step != Some(n) {
                kept.push_back(p.clone());
                last_step = Some(n);
            }
        }
        kept.push_back(stored);
        CounterHistory { points: kept }
    }

    /// When the newest reading was taken, if there is one.
    pub fn newest(&self) -> Option<SystemTime> {
        self.points.back().map(|p| p.at)
    }

    /// How many readings are kept.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// Whether there are no readings.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Whether the readings span `window`: a reading older than the newest
    /// lies inside it, so a queue without counters in them has a rate of 0.
    pub fn spans(&self, window: Duration) -> bool {
        let Some(newest) = self.points.back() else {
            return false;
        };
        let start = newest
            .at
            .checked_sub(window)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        self.points
            .iter()
            .any(|p| p.at >= start && p.at < newest.at)
    }

    /// Per-second rate of `pick(counters)` for `queue` over `window`, from the
    /// oldest reading inside the window to the newest. `None` when fewer than
    /// two readings cover the queue. A counter reset counts from zero. Only
    /// `published` and `delivered` are kept for rates.
    pub fn rate(
        &self,
        queue: &QueueId,
        window: Duration,
        pick: impl Fn(&Counters) -> Option<u64>,
    ) -> Option<f64> {
        let newest = self.points.back()?;
        let last = pick(&newest.get(queue)?)?;
        let start = newest
            .at
            .checked_sub(window)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let first = self
            .points
            .iter()
            .filter(|p| p.at >= start && p.at < newest.at)
            .find_map(|p| Some((p.at, pick(&p.get(queue)?)?)))?;
        let seconds = newest.at.duration_since(first.0).ok()?.as_secs_f64();
        if seconds <= 0.0 {
            return None;
        }
        let delta = if last >= first.1 {
            last - first.1
        } else {
            last
        };
        Some(delta as f64 / seconds)
    }

    /// Jobs arriving per second at `queue` over `window`: the rate of its
    /// `published` counter (RabbitMQ's publishes, a stream's
    /// `entries-added`) or, for a [`JobFlow`], (Δdepth + Δprocessed) / Δt
    /// from the oldest flow reading inside the window to the newest (a
    /// processed total that went down was reset and counts from zero; a
    /// negative sum, jobs removed without being processed, is 0). `None`
    /// when fewer than two readings cover the queue.
    pub fn arrival_rate(&self, queue: &QueueId, window: Duration) -> Option<f64> {
        let Some((first, last, seconds)) = self.flow_change(queue, window) else {
            return self.rate(queue, window, |c| c.published);
        };
        let seconds = seconds?;
        let arrived = last.depth as f64 - first.depth as f64 + processed(first, last) as f64;
        Some(arrived.max(0.0) / seconds)
    }

    /// Jobs taken off `queue` per second over the last `span`: a flow's
    /// processed total's rate (jobs finished), or a counter queue's
    /// `delivered` rate (messages handed to consumers). Over a span as short
    /// as an HPA sync, this is how fast the workers that are running now
    /// get through the backlog, which the `WaitTime` model compares with
    /// the replicas it asked for ([`crate::scaler::wait::WaitInputs::finishing`]).
    /// `None` when fewer than two readings within `span` cover the queue.
    pub fn finish_rate(&self, queue: &QueueId, span: Duration) -> Option<f64> {
        let Some((first, last, seconds)) = self.flow_change(queue, span) else {
            return self.rate(queue, span, |c| c.delivered);
        };
        Some(processed(first, last) as f64 / seconds?)
    }

    /// `None` when `queue`'s newest reading is no flow (the caller reads
    /// its counters); else its oldest flow reading within `window` of the
    /// newest, the newest, and the seconds between (`None` when fewer than
    /// two readings cover it).
    fn flow_change(
        &self,
        queue: &QueueId,
        window: Duration,
    ) -> Option<(JobFlow, JobFlow, Option<f64>)> {
        let newest = self.points.back()?;
        let last = newest.flow(queue)?;
        let start = newest
            .at
            .checked_sub(window)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let first = self
            .points
            .iter()
            .filter(|p| p.at >= start && p.at < newest.at)
            .find_map(|p| Some((p.at, p.flow(queue)?)));
        let Some((at, first)) = first else {
            return Some((last, last, None));
        };
        let seconds = newest
            .at
            .duration_since(at)
            .ok()
            .map(|d| d.as_secs_f64())
            .filter(|s| *s > 0.0);
        Some((first, last, seconds))
    }

    /// Seconds since jobs last arrived at `queue`, as the readings tell:
    /// from the reading before the newest rise of its published counter
    /// (the one [`Self::arrival_rate`] uses) or of a flow's depth, to the
    /// newest reading. A flow's depth may also fall while jobs arrive (more
    /// taken than came), so its answer may be more than the truth, by a
    /// reading's spacing or by a stretch where the workers outran the
    /// arrivals; never less. `None` when the readings show no rise (none
    /// in [`Self::RETENTION`], or the queue's values are unknown): the
    /// caller then knows only that the newest job is no older than the
    /// oldest.
    ///
    /// With first-in-first-out workers the newest arrival is the last job
    /// taken, so while jobs wait this is the newest waiting job's age,
    /// which the oldest's does not tell once arrivals stop.
    pub fn since_last_arrival(&self, queue: &QueueId) -> Option<f64> {
        let newest = self.points.back()?;
        let arrived = |before: &StoredPoint, after: &StoredPoint| -> Option<bool> {
            Some(match (before.stored(queue)?, after.stored(queue)?) {
                (Stored::Counters(b), Stored::Counters(a)) => {
                    let (b, a) = (b.published?, a.published?);
                    // A counter that went down was reset: it counted anew.
                    if a >= b { a > b } else { a > 0 }
                }
                // Jobs leave what a flow holds only by being taken, so a
                // rise of its depth proves an arrival. Δdepth + Δprocessed
                // would not: a job finished before one reading and its
                // worker's next job taken after it counts as an arrival.
                (Stored::Flow(b), Stored::Flow(a)) => a.depth > b.depth,
                _ => return None,
            })
        };
        let mut later = newest;
        for earlier in self.points.iter().rev().skip(1) {
            if arrived(earlier, later)? {
                return newest
                    .at
                    .duration_since(earlier.at)
                    .ok()
                    .map(|d| d.as_secs_f64());
            }
            later = earlier;
        }
        None
    }
}

/// Jobs processed from `first` to `last`: a total that went down was
/// reset and counts from zero.
fn processed(first: JobFlow, last: JobFlow) -> u64 {
    if last.processed >= first.processed {
        last.processed - first.processed
    } else {
        last.processed
    }
}

/// `at` since the Unix epoch, `None` before it.
fn since_epoch(at: SystemTime) -> Option<Duration> {
    at.duration_since(SystemTime::UNIX_EPOCH).ok()
}

/// The stored form of `point`, sharing the index of `last` (the newest
/// reading before it) when the queues are the same, and its unchanged blocks.
fn store(last: Option<&StoredPoint>, point: CounterPoint) -> StoredPoint {
    // A queue with counters of its own is never also a flow.
    let flows: Vec<(&QueueId, &JobFlow)> = point
        .flows
        .iter()
        .filter(|(q, _)| !point.counters.contains_key(*q))
        .collect();
    let has = |index: &HashMap<QueueId, Slot>, q: &QueueId, flow: bool| {
        index.get(q).is_some_and(|s| s.flow == flow)
    };
    let same_queues = last.filter(|last| {
        last.index.len() == point.counters.len() + flows.len()
            && point.counters.keys().all(|q| has(&last.index, q, false))
            && flows.iter().all(|(q, _)| has(&last.index, q, true))
    });
    let index = match same_queues {
        Some(last) => last.index.clone(),
        None => Arc::new(
            point
                .counters
                .keys()
                .map(|q| (q, false))
                .chain(flows.iter().map(|(q, _)| (*q, true)))
                .enumerate()
                .map(|(pos, (q, flow))| (q.clone(), Slot { pos, flow }))
                .collect(),
        ),
    };
    let mut values = vec![(u64::MAX, u64::MAX); index.len()];
    for (q, c) in &point.counters {
        if let Some(slot) = index.get(q) {
            values[slot.pos] = (
                c.published.unwrap_or(u64::MAX),
                c.delivered.unwrap_or(u64::MAX),
            );
        }
    }
    for (q, f) in &flows {
        if let Some(slot) = index.get(*q) {
            values[slot.pos] = (f.depth, f.processed);
        }
    }
    // Positions mean the same queues only over the same index.
    let previous = last
        .filter(|last| Arc::ptr_eq(&last.index, &index))
        .map(|last| &last.blocks);
    let blocks = values
        .chunks(VALUE_BLOCK)
        .enumerate()
        .map(|(b, chunk)| match previous.and_then(|p| p.get(b)) {
            Some(old) if **old == *chunk => old.clone(),
            _ => Arc::from(chunk),
        })
        .collect();
    StoredPoint {
        at: point.at,
        since_epoch: since_epoch(point.at),
        index,
        blocks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(at_secs: u64, published: u64) -> CounterPoint {
        let mut counters = HashMap::new();
        counters.insert(
            QueueId {
                vhost: None,
                name: "q".into(),
            },
            Counters {
                published: Some(published),
                ..Counters::default()
            },
        );
        CounterPoint {
            at: SystemTime::UNIX_EPOCH + Duration::from_secs(at_secs),
            counters,
            flows: HashMap::new(),
        }
    }

    #[test]
    fn rate_averages_over_the_window() {
        let mut h = CounterHistory::default();
        for (t, v) in [(1000, 0), (1030, 30), (1060, 90), (1090, 150)] {
            h = h.with_point(point(t, v));
        }
        let q = QueueId {
            vhost: None,
            name: "q".into(),
        };
        // Window 60 s: from t=1030 (30) to t=1090 (150) → 2/s.
        let r = h
            .rate(&q, Duration::from_secs(60), |c| c.published)
            .unwrap();
        assert!((r - 2.0).abs() < 1e-9, "{r}");
        // A single reading gives no rate.
        let one = CounterHistory::default().with_point(point(1, 5));
        assert_eq!(one.rate(&q, Duration::from_secs(60), |c| c.published), None);
    }

    #[test]
    fn the_newest_arrival_is_dated_by_the_reading_before_the_counter_last_rose() {
        let q = QueueId {
            vhost: None,
            name: "q".into(),
        };
        let mut h = CounterHistory::default();
        // Jobs arrive each second up to t=1010, then none for 20 s.
        for t in 1000..=1030u64 {
            h = h.with_point(point(t, t.min(1010) - 1000));
        }
        // The last rise is between t=1009 and t=1010: at most 21 s ago.
        assert_eq!(h.since_last_arrival(&q), Some(21.0));
        // A counter that moved at the newest reading: one spacing.
        h = h.with_point(point(1031, 11));
        assert_eq!(h.since_last_arrival(&q), Some(1.0));
        // A reset counts as arrivals when it counted anew.
        let reset = CounterHistory::default()
            .with_point(point(2000, 500))
            .with_point(point(2001, 3))
            .with_point(point(2002, 3));
        assert_eq!(reset.since_last_arrival(&q), Some(2.0));
        // No rise in the readings, one reading, or another queue: not known.
        let flat = CounterHistory::default()
            .with_point(point(1, 5))
            .with_point(point(2, 5));
        assert_eq!(flat.since_last_arrival(&q), None);
        assert_eq!(
            CounterHistory::default()
                .with_point(point(1, 5))
                .since_last_arrival(&q),
            None
        );
        let other = QueueId {
            vhost: None,
            name: "other".into(),
        };
        assert_eq!(h.since_last_arrival(&other), None);
    }

    #[test]
    fn a_flows_arrivals_are_dated_by_the_last_rise_of_its_depth() {
        let q = QueueId {
            vhost: None,
            name: "list".into(),
        };
        let reading = |at: u64, depth: u64, processed: u64| CounterPoint {
            at: SystemTime::UNIX_EPOCH + Duration::from_secs(at),
            counters: HashMap::new(),
            flows: HashMap::from([(q.clone(), JobFlow { depth, processed })]),
        };
        // A job arrives by t=101 and by t=103; then workers only take jobs,
        // and at t=106 three finish that were taken earlier (Δdepth +
        // Δprocessed is +2 there, yet nothing arrived).
        let h = [
            (100, 5, 0),
            (101, 6, 0),
            (102, 4, 2),
            (103, 5, 3),
            (104, 3, 5),
            (105, 2, 6),
            (106, 1, 9),
        ]
        .into_iter()
        .fold(CounterHistory::default(), |h, (t, d, p)| {
            h.with_point(reading(t, d, p))
        });
        assert_eq!(h.since_last_arrival(&q), Some(4.0));
        // Only taking since the first reading: not known.
        let draining = [(100, 5, 0), (101, 3, 2), (102, 1, 4)]
            .into_iter()
            .fold(CounterHistory::default(), |h, (t, d, p)| {
                h.with_point(reading(t, d, p))
            });
        assert_eq!(draining.since_last_arrival(&q), None);
    }

    #[test]
    fn replicas_started_apart_keep_the_same_readings_and_rates() {
        let q = QueueId {
            vhost: None,
            name: "q".into(),
        };
        // Both poll on the same 250 ms ticks; one started 37 s later.
        let build = |first_tick: u64| {
            let mut h = CounterHistory::default();
            for i in first_tick..4_000u64 {
                let mut p = point(0, i * 3);
                p.at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_000_000 + i * 250);
                h = h.with_point(p);
            }
            h
        };
        let (a, b) = (build(0), build(148));
        for window in [10u64, 60, 300] {
            let w = Duration::from_secs(window);
            assert_eq!(
                a.rate(&q, w, |c| c.published),
                b.rate(&q, w, |c| c.published),
                "window {window}s"
            );
        }
    }

    #[test]
    fn history_drops_old_points() {
        let mut h = CounterHistory::default();
        for t in 0..2000u64 {
            h = h.with_point(point(t, t));
        }
        assert!(h.len() <= CounterHistory::RETENTION.as_secs() as usize + 2);
    }

    #[test]
    fn history_size_does_not_grow_with_poll_frequency() {
        let q = QueueId {
            vhost: None,
            name: "q".into(),
        };
        for poll_ms in [100u64, 250, 1000] {
            let mut h = CounterHistory::default();
            let polls = 20 * 60 * 1000 / poll_ms;
            for i in 0..polls {
                let mut p = point(0, i);
                p.at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_000_000 + i * poll_ms);
                h = h.with_point(p);
            }
            // ~60 fine readings plus ~56 coarse ones, whatever the interval.
            assert!((100..=125).contains(&h.len()), "{poll_ms} ms: {}", h.len());
            // Consecutive readings over the same queues share one index.
            let first = &h.points[0].index;
            assert!(h.points.iter().all(|p| Arc::ptr_eq(&p.index, first)));
            // The counter moves every poll: no block is shared.
            assert!(
                h.points
                    .iter()
                    .zip(h.points.iter().skip(1))
                    .all(|(a, b)| !Arc::ptr_eq(&a.blocks[0], &b.blocks[0]))
            );
            // Rates stay exact over short and long windows: 1 count per poll.
            let per_second = 1000.0 / poll_ms as f64;
            for window in [2, 60, 600] {
                let r = h
                    .rate(&q, Duration::from_secs(window), |c| c.published)
                    .unwrap();
                assert!(
                    (r - per_second).abs() < 1e-6,
                    "{poll_ms} ms over {window} s: {r}"
                );
            }
        }
    }

    #[test]
    fn idle_queues_share_their_counter_blocks_between_readings() {
        let ids: Vec<QueueId> = (0..200)
            .map(|i| QueueId {
                vhost: Some("/".into()),
                name: format!("q{i}"),
            })
            .collect();
        let reading = |at: u64, busy: u64| CounterPoint {
            at: SystemTime::UNIX_EPOCH + Duration::from_secs(at),
            counters: ids
                .iter()
                .enumerate()
                .map(|(i, q)| {
                    let published = if i == 0 { busy } else { 7 };
                    let c = Counters {
                        published: Some(published),
                        delivered: (i % 2 == 0).then_some(3),
                        ..Counters::default()
                    };
                    (q.clone(), c)
                })
                .collect(),
            flows: HashMap::new(),
        };
        let mut h = CounterHistory::default();
        for t in 0..5 {
            h = h.with_point(reading(1000 + t, t * 10));
        }
        let (a, b) = (&h.points[3], &h.points[4]);
        let busy_block = a.index.get(&ids[0]).unwrap().pos / VALUE_BLOCK;
        for (n, (x, y)) in a.blocks.iter().zip(b.blocks.iter()).enumerate() {
            assert_eq!(Arc::ptr_eq(x, y), n != busy_block, "block {n}");
        }
        // Values read back exactly, shared or not.
        let r = h.rate(&ids[0], Duration::from_secs(60), |c| c.published);
        assert_eq!(r, Some(10.0));
        assert_eq!(
            h.rate(&ids[5], Duration::from_secs(60), |c| c.published),
            Some(0.0)
        );
        assert_eq!(h.points[4].get(&ids[1]).unwrap().delivered, None);
        assert_eq!(h.points[4].get(&ids[2]).unwrap().delivered, Some(3));
    }

    #[test]
    fn a_flow_arrives_as_depth_growth_plus_jobs_processed() {
        let q = QueueId {
            vhost: None,
            name: "q".into(),
        };
        let reading = |at: u64, depth: u64, processed: u64| CounterPoint {
            at: SystemTime::UNIX_EPOCH + Duration::from_secs(at),
            counters: HashMap::new(),
            flows: [(q.clone(), JobFlow { depth, processed })].into(),
        };
        let rate = |points: &[(u64, u64, u64)]| {
            let mut h = CounterHistory::default();
            for &(at, depth, processed) in points {
                h = h.with_point(reading(at, depth, processed));
            }
            h.arrival_rate(&q, Duration::from_secs(60))
        };
        // 10 s: 30 more held and 50 processed: 8 jobs/s.
        assert_eq!(rate(&[(100, 10, 0), (110, 40, 50)]), Some(8.0));
        // Draining with no arrivals: as many processed as the depth fell.
        assert_eq!(rate(&[(100, 40, 0), (110, 0, 40)]), Some(0.0));
        // A reset processed total counts from zero.
        assert_eq!(rate(&[(100, 0, 900), (110, 0, 20)]), Some(2.0));
        // Jobs removed unprocessed arrive as 0, never negative.
        assert_eq!(rate(&[(100, 50, 0), (110, 0, 0)]), Some(0.0));
        // One reading gives no rate; a flow has no counters.
        assert_eq!(rate(&[(100, 1, 1)]), None);
        let h = CounterHistory::default()
            .with_point(reading(100, 1, 1))
            .with_point(reading(110, 2, 2));
        assert_eq!(h.rate(&q, Duration::from_secs(60), |c| c.published), None);
        // A queue that gains counters of its own is read by them.
        let mut both = reading(120, 3, 3);
        both.counters.insert(
            q.clone(),
            Counters {
                published: Some(7),
                ..Counters::default()
            },
        );
        let mut counted = reading(130, 0, 0);
        counted.counters = both.counters.clone();
        counted.counters.insert(
            q.clone(),
            Counters {
                published: Some(27),
                ..Counters::default()
            },
        );
        let h = h.with_point(both).with_point(counted);
        assert_eq!(h.arrival_rate(&q, Duration::from_secs(15)), Some(2.0));
    }

    #[test]
    fn a_flow_is_a_plain_keys_depth_or_a_preset_queues_waiting_and_active_jobs() {
        use crate::snapshot::{JobTotals, PresetFacts};
        let totals = JobTotals {
            processed: Some(10),
            failed: None,
        };
        let mut plain = QueueSample::named("list");
        plain.depth = Some(4);
        plain.set_jobs(totals);
        assert_eq!(
            JobFlow::of(&plain),
            Some(JobFlow {
                depth: 4,
                processed: 10
            })
        );
        // asynq: pending and active are held; scheduled and retry jobs
        // arrive when they are moved to pending.
        let states = |active: Option<u64>| {
            [
                (JobState::Waiting, Some(3)),
                (JobState::Active, active),
                (JobState::Delayed, Some(5)),
                (JobState::Retry, Some(7)),
                (JobState::Failed, Some(1)),
            ]
            .into_iter()
            .collect()
        };
        let mut queue = QueueSample::named("critical");
        queue.preset = Some(Box::new(PresetFacts {
            states: states(Some(2)),
            ..PresetFacts::default()
        }));
        queue.set_jobs(totals);
        assert_eq!(
            JobFlow::of(&queue),
            Some(JobFlow {
                depth: 5,
                processed: 10
            })
        );
        let mut unread = queue.clone();
        unread.preset = Some(Box::new(PresetFacts {
            states: states(None),
            ..PresetFacts::default()
        }));
        assert_eq!(JobFlow::of(&unread), None, "an unread state is unknown");
        let mut shared = queue.clone();
        if let Some(f) = shared.preset.as_mut() {
            f.unit = PresetUnit::Shared;
        }
        assert_eq!(JobFlow::of(&shared), None, "(all) has no flow");
        let mut counted = queue.clone();
        counted.counters_mut().published = Some(1);
        assert_eq!(JobFlow::of(&counted), None, "counters of its own");
        let mut no_total = queue.clone();
        no_total.set_jobs(JobTotals::default());
        assert_eq!(JobFlow::of(&no_total), None);
        // Sidekiq: a queue's running jobs are counted in `(all)` only.
        let mut busy_elsewhere = queue;
        if let Some(f) = busy_elsewhere.preset.as_mut() {
            f.states.remove(&JobState::Active);
            f.elsewhere = &[JobState::Active];
        }
        assert_eq!(JobFlow::of(&busy_elsewhere), None, "active held in (all)");
    }

    /// One kept reading as compared: its time, and each queue's values by name.
    type Reading = (SystemTime, Vec<(String, Option<Stored>)>);

    /// What a history holds, for comparing two: each reading's time and
    /// its queues' values, oldest first.
    fn readings(h: &CounterHistory) -> Vec<Reading> {
        h.points
            .iter()
            .map(|p| {
                let mut queues: Vec<_> = p
                    .index
                    .keys()
                    .map(|q| (q.name.clone(), p.stored(q)))
                    .collect();
                queues.sort_by(|a, b| a.0.cmp(&b.0));
                (p.at, queues)
            })
            .collect()
    }

    #[test]
    fn appending_readings_at_once_keeps_what_appending_them_one_by_one_keeps() {
        // Seeded random polls: steps from 50 ms to 40 s (some in one second,
        // as a compressed replay polls), now and then a clock set back, the
        // set of queues and their kinds changing, appended in random batches.
        let mut seed: u64 = 0x4715_0001;
        let mut next = || {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        let queue = |name: &str| QueueId {
            vhost: None,
            name: name.into(),
        };
        // Runs with readings in distinct seconds take the one-pass way.
        let mut one_pass_runs = 0;
        for _ in 0..300 {
            let (mut one_by_one, mut at_once) =
                (CounterHistory::default(), CounterHistory::default());
            let mut at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
            let sub_second = next() < 0.3;
            let set_back = next() < 0.2;
            let mut total = 0u64;
            for _ in 0..40 {
                let batch_len = 1 + (next() * 20.0) as usize;
                let mut batch = Vec::new();
                for _ in 0..batch_len {
                    let step = if sub_second && next() < 0.5 {
                        Duration::from_millis(50 + (next() * 900.0) as u64)
                    } else {
                        Duration::from_secs(1 + (next() * 40.0) as u64)
                    };
                    at = if set_back && next() < 0.05 {
                        at - Duration::from_secs(5)
                    } else {
                        at + step
                    };
                    total += (next() * 10.0) as u64;
                    let mut counters = HashMap::new();
                    let mut flows = HashMap::new();
                    counters.insert(
                        queue("a"),
                        Counters {
                            published: (next() < 0.9).then_some(total),
                            delivered: Some(total / 2),
                            ..Counters::default()
                        },
                    );
                    if next() < 0.8 {
                        flows.insert(
                            queue("b"),
                            JobFlow {
                                depth: (next() * 5.0) as u64,
                                processed: total,
                            },
                        );
                    }
                    batch.push(CounterPoint {
                        at,
                        counters,
                        flows,
                    });
                }
                for p in &batch {
                    one_by_one = one_by_one.with_point(p.clone());
                }
                at_once = at_once.with_points(batch);
                assert_eq!(readings(&at_once), readings(&one_by_one));
            }
            one_pass_runs += usize::from(!sub_second && !set_back);
        }
        assert!(
            one_pass_runs > 100 && one_pass_runs < 250,
            "both ways: {one_pass_runs}"
        );
    }

    #[test]
    fn appending_no_readings_changes_nothing() {
        let h = CounterHistory::default().with_point(point(1000, 1));
        assert_eq!(readings(&h.with_points(Vec::new())), readings(&h));
    }
}
