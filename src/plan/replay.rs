//! The replay: a queue's jobs through the exporter and the cluster, in
//! virtual time. The world is what `scripts/bench --closed-loop` runs for
//! real: one FIFO list, pods whose workers take the oldest job and spend its
//! service time on it, the exporter polling the list every `poll` seconds
//! (depth, the head's age and a `processed` counter, kept by the source's
//! own [`counter_point`] in the real history), and KEDA + the HPA
//! ([`super::cluster`]) asking the exporter's own [`query::evaluate`] at
//! every sync. Nothing of the scaler is written twice.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::config::ScalerConfig;
use crate::plan::cluster::{Cluster, Hpa, Keda, KedaMove, Metric, MetricType, Target};
use crate::scaler::metadata::ScalerQuery;
use crate::scaler::{held, query};
use crate::snapshot::{
    ArrivalsMeasure, CounterPoint, JobState, JobTotals, Measures, PresetFacts, PresetKind,
    QueueSample, QueueType, ServiceMeasure, ServiceSource, ServiceTime, Snapshot, SourceKind,
};
use crate::sources::counter_point;
use crate::sources::redis::presets::service;

/// The replayed source's name: a trigger's `source` must say it.
pub const SOURCE: &str = "sim";

/// The replayed queue's name: a trigger's `queue` must select it.
pub const QUEUE: &str = "sim:jobs";

/// The jobs of a replay: when each arrives and how long a worker spends on it.
#[derive(Debug, Clone, Default)]
pub struct Traffic {
    /// Arrival times, seconds from the start of the replay, sorted.
    pub arrivals: Vec<f64>,
    /// Each job's service time.
    pub service: Service,
}

/// How long a worker spends on a job.
#[derive(Debug, Clone)]
pub enum Service {
    /// Every job the same.
    Each(f64),
    /// Job by job, in arrival order (as long as `arrivals`).
    PerJob(Vec<f64>),
}

impl Default for Service {
    fn default() -> Self {
        Service::Each(0.0)
    }
}

impl Traffic {
    /// The service time of job `i`.
    fn service_of(&self, i: usize) -> f64 {
        match &self.service {
            Service::Each(s) => *s,
            Service::PerJob(each) => each.get(i).copied().unwrap_or(0.0),
        }
    }
}

/// The exporter's side of a replay.
#[derive(Debug, Clone)]
pub struct Exporter {
    /// Its `poll_interval`, replay seconds.
    pub poll: f64,
    /// Replay seconds per exporter second: 1 replays a cluster as it is;
    /// the bench's compressed real loop runs 15 (the exporter's clock, its
    /// history's one-per-second thinning and the trigger's durations run
    /// at replay time / speedup, as they do there).
    pub speedup: f64,
    /// Seconds the exporter polls the empty queue before the traffic, so
    /// its history holds a window when the jobs come.
    pub warmup: f64,
    /// Stretches (from, to) with no reading: the exporter's polls there
    /// publish nothing, so the scaler answers UNAVAILABLE once the last
    /// reading is stale, as it would with the exporter or its source down.
    pub gaps: Vec<(f64, f64)>,
    /// The library whose queue the replayed one is read as, for a trigger
    /// that counts job states (`state`): its `waiting` jobs are the
    /// backlog, its `active` ones the jobs the workers are on. `None`: a
    /// plain list, as for every trigger without `state`.
    pub states_as: Option<PresetKind>,
    /// The source's `service_time_max_age`, exporter seconds: for a
    /// `WaitTime` trigger without `processingTime`, the replayed queue's
    /// service time is measured from its finished jobs as a library
    /// preset's is (`sources::redis::presets::service`), and a
    /// queue with no job finished for this long has none.
    pub service_max_age: f64,
}

/// The library a replayed queue is read as where its trigger measures the
/// service time ([`Exporter::service_max_age`]) and counts no job states:
/// a name no library has, so no library's own rules apply to it.
pub const MEASURED: PresetKind = PresetKind::named("replayed");

/// What the replayed queue is read as, for one trigger.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Shape {
    /// A library's queue with job states ([`Exporter::states_as`]), or a
    /// plain list.
    library: Option<PresetKind>,
    /// Whether its service time is measured from its finished jobs.
    measured: bool,
}

/// One replay: the traffic, the exporter, the cluster and how long.
#[derive(Debug, Clone)]
pub struct Replay<'a> {
    /// The jobs.
    pub traffic: &'a Traffic,
    /// The exporter polling them.
    pub exporter: &'a Exporter,
    /// KEDA's and the HPA's timings.
    pub cluster: &'a Cluster,
    /// The replay's length: arrivals stop before it; the replay goes on
    /// until the backlog is done and the pods are gone, or long after.
    pub length: f64,
    /// Workers per replica.
    pub workers_per_replica: usize,
    /// Whether to keep the replay's timeline, one [`Moment`] per HPA sync.
    pub timeline: bool,
    /// The trigger's `metricType`: how the HPA reads its answers.
    pub metric_type: MetricType,
}

/// The state at one HPA sync, for plots.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Moment {
    /// Replay seconds.
    pub t: f64,
    /// Replicas after the sync.
    pub replicas: usize,
    /// Jobs waiting at the sync.
    pub backlog: usize,
    /// The scaler's answer, `None` when it answered an error.
    pub value: Option<f64>,
}

/// What a replay did, for [`super::score`].
#[derive(Debug, Clone, Default)]
pub struct Run {
    /// Each started job's wait, in arrival order.
    pub waits: Vec<f64>,
    /// Every pod, as (created, stopped): the worker time paid for.
    pub pods: Vec<(f64, f64)>,
    /// HPA syncs at which the scaler answered an error.
    pub ask_errors: u64,
    /// HPA syncs at which KEDA's `fallback` answered in the scaler's place.
    pub fallback_syncs: u64,
    /// Times the replica count changed.
    pub scale_events: usize,
    /// The most replicas at once.
    pub peak_replicas: usize,
    /// The timeline, if asked for.
    pub timeline: Vec<Moment>,
}

/// A replica: created at a decision, taking jobs `pod_start` later.
struct Pod {
    created: f64,
    /// When each worker's current (or last) job ends.
    busy_until: Vec<f64>,
    /// Set when the HPA removes it: it finishes the job it has.
    stopped: Option<f64>,
}

/// An `f64` ordered for a heap (times here are finite).
#[derive(Clone, Copy, PartialEq)]
struct Ordered(f64);
impl Eq for Ordered {}
impl PartialOrd for Ordered {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Ordered {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// The world of one replay: the jobs, the pods and what the exporter reads.
struct World<'a> {
    traffic: &'a Traffic,
    pod_start: f64,
    workers_per_replica: usize,
    /// Next job to start (FIFO: the backlog is `arrivals[head..arrived]`).
    head: usize,
    /// Waits of the started jobs, in order.
    waits: Vec<f64>,
    /// When the started jobs end and how long each took, soonest first,
    /// until counted in `finished`.
    ending: BinaryHeap<Reverse<(Ordered, Ordered)>>,
    /// How long the newest finished jobs took (at most the preset's
    /// measuring window), oldest first, and when the last one finished.
    recent: VecDeque<f64>,
    last_finish: Option<f64>,
    /// Whether finished jobs are recorded for a measured service time
    /// ([`World::measured_before`]): no work per job for other triggers.
    measuring: bool,
    /// The service time the exporter measured at its last read of the
    /// finished jobs, and when it read them.
    measured: Option<f64>,
    measured_at: f64,
    /// Jobs finished by the last [`World::processed`] call.
    finished: usize,
    pods: Vec<Pod>,
    /// The running pods (not removed), oldest first, as indices into
    /// `pods`: counting and removing them costs nothing however many pods
    /// a week's replay has made and removed.
    running: Vec<usize>,
    /// Pods no longer running, with the second they stopped.
    gone: Vec<(f64, f64)>,
    /// Free workers by when they are free: (time, pod index, worker).
    free: BinaryHeap<Reverse<(Ordered, usize, usize)>>,
    /// Replica count changes so far, and the most at once.
    scale_events: usize,
    peak: usize,
}

impl<'a> World<'a> {
    fn new(traffic: &'a Traffic, pod_start: f64, workers_per_replica: usize) -> Self {
        World {
            traffic,
            pod_start,
            workers_per_replica,
            head: 0,
            waits: Vec::with_capacity(traffic.arrivals.len()),
            ending: BinaryHeap::new(),
            recent: VecDeque::new(),
            last_finish: None,
            measuring: false,
            measured: None,
            measured_at: f64::NEG_INFINITY,
            finished: 0,
            pods: Vec::new(),
            running: Vec::new(),
            gone: Vec::new(),
            free: BinaryHeap::new(),
            scale_events: 0,
            peak: 0,
        }
    }

    /// Starts every job that a free worker takes before `t`.
    fn advance(&mut self, t: f64) {
        while let Some(&a) = self.traffic.arrivals.get(self.head) {
            if a >= t {
                return;
            }
            let Some(&Reverse((Ordered(f), p, w))) = self.free.peek() else {
                return;
            };
            if self.pods[p].stopped.is_some() {
                self.free.pop();
                continue;
            }
            let start = a.max(f);
            if start >= t {
                return;
            }
            self.free.pop();
            self.waits.push(start - a);
            let took = self.traffic.service_of(self.head);
            let done = start + took;
            self.ending.push(Reverse((Ordered(done), Ordered(took))));
            self.pods[p].busy_until[w] = done;
            self.free.push(Reverse((Ordered(done), p, w)));
            self.head += 1;
        }
    }

    fn live(&self) -> usize {
        self.running.len()
    }

    /// Pods not removed that had started by `t`: the HPA's ready pods.
    fn ready(&self, t: f64) -> usize {
        self.running
            .iter()
            .filter(|&&p| self.pods[p].created + self.pod_start <= t)
            .count()
    }

    /// Creates or removes pods (the newest first) at `t`.
    fn set_replicas(&mut self, n: usize, t: f64) {
        if n != self.live() {
            self.scale_events += 1;
        }
        while self.live() < n {
            let ready = t + self.pod_start;
            let p = self.pods.len();
            let k = self.workers_per_replica;
            self.pods.push(Pod {
                created: t,
                busy_until: vec![f64::NEG_INFINITY; k],
                stopped: None,
            });
            self.running.push(p);
            for w in 0..k {
                self.free.push(Reverse((Ordered(ready), p, w)));
            }
        }
        self.peak = self.peak.max(self.live());
        while self.live() > n {
            let Some(p) = self.running.pop() else {
                return;
            };
            let pod = &mut self.pods[p];
            // A busy worker finishes its job; a pod not started yet stops now.
            let end = pod.busy_until.iter().fold(t, |e, &b| e.max(b));
            pod.stopped = Some(end);
            self.gone.push((pod.created, end));
        }
    }

    /// Jobs waiting at `t` (after `advance(t)`).
    fn backlog(&self, t: f64) -> usize {
        self.traffic.arrivals.partition_point(|&a| a <= t) - self.head
    }

    /// Jobs finished by `t` (each worker INCRs `processed` after its job);
    /// `t` never goes back.
    fn processed(&mut self, t: f64) -> usize {
        while let Some(&Reverse((Ordered(done), Ordered(took)))) = self.ending.peek() {
            if done > t {
                break;
            }
            self.ending.pop();
            self.finished += 1;
            if !self.measuring {
                continue;
            }
            if self.recent.len() == service::WINDOW {
                self.recent.pop_front();
            }
            self.recent.push_back(took);
            self.last_finish = Some(done);
        }
        self.finished
    }

    /// The jobs finished before the replay, as the exporter of a queue
    /// with a history finds them (a library keeps its finished jobs, and
    /// the trace's service times are the exporter's measurement of them):
    /// a measuring window of jobs each taking the first job's time, the
    /// last finished as the replay starts. Without it a replayed queue
    /// would start as a new one, its service time unknown until its first
    /// job finished and was read, a cold start the trace did not have.
    /// From then on each finished job is recorded for [`World::measure`].
    fn measured_before(&mut self) {
        self.measuring = true;
        if self.traffic.arrivals.is_empty() {
            return;
        }
        let first = self.traffic.service_of(0);
        self.recent = std::iter::repeat_n(first, service::WINDOW).collect();
        self.last_finish = Some(0.0);
    }

    /// The service time the exporter reads at `t` (after `processed(t)`),
    /// exporter seconds, as a preset measures it: the winsorized mean of
    /// the newest finished jobs, read again every
    /// [`service::READ_EVERY`], none once no job finished within the
    /// source's `service_time_max_age`.
    fn measure(&mut self, exporter: &Exporter, t: f64) -> Option<f64> {
        if t - self.measured_at >= service::READ_EVERY * exporter.speedup {
            self.measured_at = t;
            let fresh = self
                .last_finish
                .is_some_and(|f| t - f <= exporter.service_max_age * exporter.speedup);
            self.measured = fresh
                .then(|| service::winsorized_mean(&self.recent))
                .flatten()
                .map(|m| m / exporter.speedup);
        }
        self.measured
    }
}

/// The exporter's clock at replay time `t`.
fn clock(exporter: &Exporter, t: f64) -> SystemTime {
    // A fixed epoch well after 1970, so ages and windows never underflow.
    SystemTime::UNIX_EPOCH
        + Duration::from_secs(1_700_000_000)
        + Duration::from_secs_f64((t + exporter.warmup + 1.0) / exporter.speedup)
}

/// What the source reads at a poll at replay time `t`: the queue's
/// sample, read as `shape` says.
fn read(exporter: &Exporter, w: &mut World, t: f64, shape: Shape) -> Vec<QueueSample> {
    let backlog = w.backlog(t) as u64;
    let oldest = w.traffic.arrivals.get(w.head).copied();
    let mut sample = QueueSample {
        queue_type: Some(QueueType::List),
        depth: Some(backlog),
        ready: Some(backlog),
        oldest_age_seconds: oldest
            .filter(|_| backlog > 0)
            .map(|a| (t - a) / exporter.speedup),
        // As the Redis source reads a plain list.
        measures: Measures {
            service_time: ServiceMeasure::PlainKey,
            arrivals: ArrivalsMeasure::Counted,
            unread: None,
        },
        ..QueueSample::named(QUEUE)
    };
    let processed = w.processed(t);
    sample.set_jobs(JobTotals {
        processed: Some(processed as u64),
        failed: None,
    });
    if shape.library.is_none() && !shape.measured {
        return vec![sample];
    }
    // Started and not finished: the jobs the workers are on.
    let active = w.head.saturating_sub(processed) as u64;
    let mut facts = PresetFacts {
        preset: shape.library.unwrap_or(MEASURED),
        states: [
            (JobState::Waiting, Some(backlog)),
            (JobState::Active, Some(active)),
        ]
        .into(),
        ..PresetFacts::default()
    };
    if shape.measured {
        facts.service_time = w.measure(exporter, t).map(|mean_seconds| ServiceTime {
            mean_seconds,
            jobs: w.recent.len() as u64,
            from: ServiceSource::FinishedJobs,
        });
        facts.finished_jobs = Some(
            "no job finished within the source's service_time_max_age (none has yet, or the workers are stopped)",
        );
        sample.measures.service_time = ServiceMeasure::FinishedJobs;
    }
    sample.preset = Some(Box::new(facts));
    vec![sample]
}

/// The exporter's polls since the scaler last read its snapshot. The
/// snapshot the scaler reads is the last poll's, with the history all of
/// them built; it is put together when the scaler reads it
/// ([`Polls::publish`]), not at every poll, because the replay polls every
/// second and asks at every HPA sync, 15 s apart, and building the history
/// at each poll was most of a replay's time. What the scaler reads is the
/// same either way ([`crate::snapshot::CounterHistory::with_points`]).
#[derive(Default)]
struct Polls {
    /// Each poll's counter reading, oldest first, as the source's own
    /// [`counter_point`] keeps it.
    points: Vec<CounterPoint>,
    /// The last poll's time and queues.
    last: Option<(SystemTime, Vec<QueueSample>)>,
}

impl Polls {
    /// A poll at replay time `t` that published (not in a gap).
    fn note(&mut self, exporter: &Exporter, w: &mut World, t: f64, shape: Shape) {
        let at = clock(exporter, t);
        let queues = read(exporter, w, t, shape);
        self.points.push(counter_point(at, &queues));
        self.last = Some((at, queues));
    }

    /// The snapshot after the polls noted since `prev`, or `None` if
    /// there were none.
    fn publish(&mut self, prev: &Snapshot) -> Option<Snapshot> {
        let (at, queues) = self.last.take()?;
        let points = std::mem::take(&mut self.points);
        let mut next = prev.clone();
        next.generation += points.len() as u64;
        next.history = Arc::new(prev.history.with_points(points));
        next.queues = Arc::new(queues);
        next.up = true;
        next.polled = true;
        next.last_success = Some(at);
        Some(next)
    }
}

/// The scaler's answer at one sync: active, target, value; `None` for an error.
type Answer = Option<(bool, f64, f64)>;

/// Replays `query` (a trigger's parsed metadata) over the traffic: the
/// exporter's polls, KEDA's and the HPA's decisions at each sync, until
/// the traffic is done and the pods are gone (or two cooldowns and windows
/// after its end).
pub fn replay(setup: &Replay, query: &ScalerQuery, config: &ScalerConfig) -> Run {
    let (exporter, cluster) = (setup.exporter, setup.cluster);
    // Job states only for a trigger that counts them; a measured service
    // time only for WaitTime without processingTime.
    let shape = Shape {
        library: query.states.as_ref().and(exporter.states_as),
        measured: query.wait.is_some_and(|w| w.processing_time.is_none()),
    };
    let mut w = World::new(setup.traffic, cluster.pod_start, setup.workers_per_replica);
    if shape.measured {
        w.measured_before();
    }
    let mut snap = Arc::new(Snapshot::initial(
        SOURCE,
        SourceKind::Redis,
        Duration::from_secs_f64(exporter.poll / exporter.speedup),
    ));
    let mut next_poll = -exporter.warmup;
    let mut now = 0.0;
    let end = setup.length;
    let (mut keda, mut hpa) = (Keda::default(), Hpa::default());
    let mut run = Run::default();
    let mut answers = held::Answers::default();
    let mut polls = Polls::default();
    w.set_replicas(cluster.min_replicas, 0.0);
    loop {
        // The exporter's polls up to now, each seeing the world as it is then.
        while next_poll <= now {
            w.advance(next_poll);
            if !exporter
                .gaps
                .iter()
                .any(|&(a, b)| a <= next_poll && next_poll < b)
            {
                polls.note(exporter, &mut w, next_poll, shape);
            }
            next_poll += exporter.poll;
        }
        w.advance(now);
        let backlog = w.backlog(now);
        if now >= end && backlog == 0 && w.live() == 0 {
            break;
        }
        if now >= end + 2.0 * (cluster.cooldown + cluster.behavior.down.stabilization) {
            break;
        }
        if let Some(next) = polls.publish(&snap) {
            snap = Arc::new(next);
        }
        let answer = ask(query, &snap, config, clock(exporter, now), &mut answers);
        if answer.is_none() {
            run.ask_errors += 1;
        }
        let target = Target {
            value: query.target,
            metric_type: setup.metric_type,
        };
        let metric = decide(cluster, &mut keda, &mut hpa, &mut w, answer, target, now);
        if let Some(Metric::Fallback(_)) = metric {
            run.fallback_syncs += 1;
        }
        if setup.timeline {
            run.timeline.push(Moment {
                t: now,
                replicas: w.live(),
                backlog,
                value: answer.map(|a| a.2),
            });
        }
        now += cluster.hpa_sync;
    }
    // The replay's own end is no scale event.
    run.scale_events = w.scale_events;
    run.peak_replicas = w.peak;
    w.set_replicas(0, now);
    w.advance(now);
    run.waits = w.waits;
    run.pods = w.gone;
    run
}

/// The scaler's answer to `query` at `at` from the snapshot `snap`, as the
/// gRPC service gives it: decided knowing what the HPA holds from the
/// `answers` given before ([`query::hold`]), then noted among them.
fn ask(
    query: &ScalerQuery,
    snap: &Arc<Snapshot>,
    config: &ScalerConfig,
    at: SystemTime,
    answers: &mut held::Answers,
) -> Answer {
    let reading = query::evaluate(query, std::slice::from_ref(snap), config, at).ok()?;
    let reaction = query.wait.map(|p| p.reaction_time).unwrap_or_default();
    let reading = query::hold(
        query,
        reading,
        answers.held(at, held::DEFAULT_WINDOW, reaction),
    );
    if reading.wait.is_some() {
        answers.note(at, reading.value, held::DEFAULT_WINDOW);
    }
    Some((reading.is_active(query), query.target, reading.value))
}

/// KEDA's poll (if due) and the HPA's sync on one answer (`target`: the
/// trigger's, for KEDA's `fallback`): the metric the HPA got, if any.
fn decide(
    cluster: &Cluster,
    keda: &mut Keda,
    hpa: &mut Hpa,
    w: &mut World,
    answer: Answer,
    target: Target,
    now: f64,
) -> Option<Metric> {
    match keda.poll(
        cluster,
        now,
        answer.map(|a| a.0),
        w.live(),
        target.metric_type,
    ) {
        Some(KedaMove::Activate) => w.set_replicas(1, now),
        Some(KedaMove::Deactivate) => {
            w.set_replicas(0, now);
            hpa.forget();
        }
        Some(KedaMove::Fallback(n)) => w.set_replicas(n.min(cluster.max_replicas), now),
        None => {}
    }
    let replicas = w.live();
    // At zero replicas the HPA is off and KEDA asks it nothing.
    if replicas == 0 {
        return None;
    }
    let metric = keda.metric(cluster, answer.map(|a| a.2), target, replicas)?;
    // Only the Value calculator counts ready pods: no pass over them otherwise.
    let ready = match target.metric_type {
        MetricType::Value => w.ready(now),
        MetricType::AverageValue => replicas,
    };
    let pods = (replicas, ready);
    let new = hpa.sync(cluster, now, pods, metric.value(), target);
    w.set_replicas(new, now);
    Some(metric)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An exporter polling every second, in real time, with the default
    /// `service_time_max_age` of 600 s.
    fn exporter() -> Exporter {
        Exporter {
            poll: 1.0,
            speedup: 1.0,
            warmup: 0.0,
            gaps: Vec::new(),
            states_as: None,
            service_max_age: 600.0,
        }
    }

    /// A world of `traffic` with one pod taking jobs at once, its queue
    /// measured as one with a history.
    fn world_of(traffic: &Traffic) -> World<'_> {
        let mut w = World::new(traffic, 0.0, 1);
        w.measured_before();
        w.set_replicas(1, 0.0);
        w
    }

    fn traffic(jobs: &[(f64, f64)]) -> Traffic {
        Traffic {
            arrivals: jobs.iter().map(|j| j.0).collect(),
            service: Service::PerJob(jobs.iter().map(|j| j.1).collect()),
        }
    }

    /// Steps the world to `t` as the exporter's polls do, and reads the
    /// service time it measures there.
    fn measured_at(w: &mut World, e: &Exporter, t: f64) -> Option<f64> {
        w.advance(t);
        w.processed(t);
        w.measure(e, t)
    }

    #[test]
    fn the_replayed_queue_starts_measured_as_a_queue_with_a_history_of_its_first_jobs() {
        let t = traffic(&[(0.0, 2.0), (1.0, 2.0)]);
        let mut w = world_of(&t);
        assert_eq!(measured_at(&mut w, &exporter(), 0.0), Some(2.0));
    }

    #[test]
    fn the_measured_service_time_follows_the_newest_finished_jobs() {
        // 100 jobs of 1 s, then 150 of 3 s, one after another on one worker.
        let mut jobs: Vec<(f64, f64)> = (0..100).map(|i| (f64::from(i), 1.0)).collect();
        jobs.extend((0..150).map(|i| (100.0 + 3.0 * f64::from(i), 3.0)));
        let t = traffic(&jobs);
        let (mut w, e) = (world_of(&t), exporter());
        let mut last = None;
        for s in 0..=560 {
            last = measured_at(&mut w, &e, f64::from(s));
            if s == 100 {
                assert_eq!(last, Some(1.0), "after the first 100 jobs, at {s} s");
            }
        }
        // The newest 100 finished jobs all took 3 s.
        assert_eq!(last, Some(3.0));
    }

    #[test]
    fn no_job_finished_within_the_max_age_leaves_the_service_time_unknown() {
        let t = traffic(&[(0.0, 2.0)]);
        let (mut w, e) = (world_of(&t), exporter());
        assert_eq!(measured_at(&mut w, &e, 100.0), Some(2.0));
        // Its last job finished at 2 s: known until 602 s, not after.
        assert_eq!(measured_at(&mut w, &e, 600.0), Some(2.0));
        assert_eq!(measured_at(&mut w, &e, 610.0), None);
    }
}
