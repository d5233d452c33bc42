//! The closed-loop grid of issue 38 in virtual time: `scripts/bench
//! --closed-loop --grid` (scripts/bench.d/grid.py) hands this program one
//! regime per line of stdin (a Poisson trace, the job time, the world's
//! timings and a list of triggers) and reads one JSON result per trigger on
//! stdout.
//!
//! Nothing of the scaler is re-implemented: each trigger's metadata goes
//! through the exporter's own `metadata::parse`, each poll's sample through
//! the source's own `counter_point` into the real `CounterHistory`, and each
//! HPA sync asks the real `query::evaluate` (so `WaitTime` answers from
//! `wait_inputs::gather` and `wait::decide`, `QueueLength` from the backlog).
//! What is emulated is what closedloop.py emulates and what it runs for
//! real: a FIFO list of jobs taken by workers that spend the job time on
//! each (BLPOP there), the exporter polling it every `poll` seconds (depth,
//! the head's age and a `processed` counter), and KEDA + the HPA (the same
//! rules, line for line, as `Run.run` in closedloop.py).
//!
//! Times in the input are model seconds; `speedup` says how many model
//! seconds one exporter second stands for (15 to mirror closedloop.py's
//! compressed real run, 1 for the grid): the exporter's clock, its history's
//! one-per-second thinning and the trigger's durations run at model /
//! speedup, as they do in the real loop.
//!
//! Built by `scripts/bench` (`cargo build --release --bench waitgrid`) and
//! run directly; `cargo bench` alone runs nothing.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use queue_exporter::config::ScalerConfig;
use queue_exporter::scaler::metadata::{self, ScalerQuery};
use queue_exporter::scaler::query;
use queue_exporter::snapshot::{JobTotals, QueueSample, QueueType, Snapshot, SourceKind};
use queue_exporter::sources::counter_point;
use serde::Deserialize;
use serde_json::json;

/// One regime and the triggers to run against it.
#[derive(Deserialize)]
struct Regime {
    /// Names the regime in the output.
    cell: serde_json::Value,
    /// Arrival times, model seconds from the start, sorted.
    arrivals: Vec<f64>,
    /// Worker time per job (the truth; a trigger's `processingTime` may differ).
    service: f64,
    /// A job is on time when it starts within this.
    target_wait: f64,
    /// Model seconds per exporter second.
    speedup: f64,
    /// The exporter's `poll_interval`, model seconds.
    poll: f64,
    /// The world's timings, model seconds.
    hpa_sync: f64,
    keda_poll: f64,
    cooldown: f64,
    down_window: f64,
    pod_start: f64,
    /// Replicas the HPA may set, at most.
    max_replicas: usize,
    /// The HPA's tolerance (0.1).
    tolerance: f64,
    /// The trace's length (arrivals stop before it).
    length: f64,
    /// Model seconds the exporter polls the empty queue before the trace.
    warmup: f64,
    /// Jobs arriving before this, and worker time before it, are not
    /// scored: a lead-in past the cold start from zero replicas, whose wait
    /// (KEDA's poll, then a pod start) no trigger can shorten.
    #[serde(default)]
    score_from: f64,
    /// Workers per replica (1 in closedloop.py).
    #[serde(default = "one")]
    workers_per_replica: usize,
    /// Whether to return each run's timeline (model t, replicas, backlog, value).
    #[serde(default)]
    timeline: bool,
    triggers: Vec<Trigger>,
}

fn one() -> usize {
    1
}

/// A trigger: its name, its `scalerMetadata` and the ScaledObject's
/// `minReplicaCount`.
#[derive(Deserialize)]
struct Trigger {
    name: String,
    meta: HashMap<String, String>,
    /// KEDA's `minReplicaCount`: 0 scales to zero after `cooldownPeriod`
    /// inactive; 1 keeps a pod (QueueLength's backlog is 0 whenever the
    /// workers keep up, so with 0 KEDA stops them while jobs still arrive).
    #[serde(default)]
    min_replicas: usize,
}

/// A replica: created at a decision, taking jobs `pod_start` later.
struct Pod {
    created: f64,
    /// When each worker's current (or last) job ends.
    busy_until: Vec<f64>,
    /// Set when the HPA removes it: it finishes the job it has.
    stopped: Option<f64>,
}

/// The world of one run: the trace, the pods and the exporter's view.
struct World<'a> {
    r: &'a Regime,
    /// Next job to start (FIFO: the backlog is `arrivals[head..arrived]`).
    head: usize,
    /// Start times, in order (FIFO with identical workers starts in order).
    starts: Vec<f64>,
    /// Waits, model seconds.
    waits: Vec<f64>,
    pods: Vec<Pod>,
    /// Pods no longer running, with the second they stopped.
    gone: Vec<(f64, f64)>,
    /// Free workers by when they are free: (time, pod index, worker).
    free: BinaryHeap<Reverse<(Ordered, usize, usize)>>,
}

/// An `f64` ordered for the heap (times here are finite).
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

impl<'a> World<'a> {
    fn new(r: &'a Regime) -> Self {
        World {
            r,
            head: 0,
            starts: Vec::with_capacity(r.arrivals.len()),
            waits: Vec::with_capacity(r.arrivals.len()),
            pods: Vec::new(),
            gone: Vec::new(),
            free: BinaryHeap::new(),
        }
    }

    /// Starts every job that a free worker takes before `t`.
    fn advance(&mut self, t: f64) {
        while let Some(&a) = self.r.arrivals.get(self.head) {
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
            self.starts.push(start);
            self.waits.push(start - a);
            let done = start + self.r.service;
            self.pods[p].busy_until[w] = done;
            self.free.push(Reverse((Ordered(done), p, w)));
            self.head += 1;
        }
    }

    fn live(&self) -> usize {
        self.pods.iter().filter(|p| p.stopped.is_none()).count()
    }

    /// Creates or removes pods (the newest first) at `t`.
    fn set_replicas(&mut self, n: usize, t: f64) {
        while self.live() < n {
            let ready = t + self.r.pod_start;
            let p = self.pods.len();
            let k = self.r.workers_per_replica;
            self.pods.push(Pod {
                created: t,
                busy_until: vec![f64::NEG_INFINITY; k],
                stopped: None,
            });
            for w in 0..k {
                self.free.push(Reverse((Ordered(ready), p, w)));
            }
        }
        while self.live() > n {
            let Some(p) = self.pods.iter().rposition(|p| p.stopped.is_none()) else {
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
        self.r.arrivals.partition_point(|&a| a <= t) - self.head
    }

    /// Jobs finished by `t` (each worker INCRs `processed` after its job).
    fn processed(&self, t: f64) -> usize {
        self.starts.partition_point(|&s| s + self.r.service <= t)
    }
}

/// The exporter's clock at model time `t`.
fn clock(r: &Regime, t: f64) -> SystemTime {
    // A fixed epoch well after 1970, so ages and windows never underflow.
    SystemTime::UNIX_EPOCH
        + Duration::from_secs(1_700_000_000)
        + Duration::from_secs_f64((t + r.warmup + 1.0) / r.speedup)
}

/// The source's snapshot after a poll at model time `t`.
fn poll(r: &Regime, w: &World, prev: &Snapshot, t: f64) -> Snapshot {
    let backlog = w.backlog(t) as u64;
    let sample = QueueSample {
        queue_type: Some(QueueType::List),
        depth: Some(backlog),
        ready: Some(backlog),
        oldest_age_seconds: (backlog > 0).then(|| (t - r.arrivals[w.head]) / r.speedup),
        jobs: Some(Box::new(JobTotals {
            processed: Some(w.processed(t) as u64),
            failed: None,
        })),
        ..QueueSample::named(LIST)
    };
    let at = clock(r, t);
    let queues = vec![sample];
    let mut next = prev.clone();
    next.history = Arc::new(prev.history.with_point(counter_point(at, &queues)));
    next.queues = Arc::new(queues);
    next.generation += 1;
    next.up = true;
    next.polled = true;
    next.last_success = Some(at);
    next
}

/// The queue's name, as closedloop.py's.
const LIST: &str = "sim:jobs";

/// One trigger against the regime: closedloop.py's `Run.run` in virtual time.
fn run(r: &Regime, trigger: &Trigger, config: &ScalerConfig) -> serde_json::Value {
    let query: ScalerQuery = match metadata::parse(&trigger.meta) {
        Ok(q) => q,
        Err(e) => return json!({"name": trigger.name, "error": e.to_string()}),
    };
    let mut w = World::new(r);
    let mut snap = Arc::new(Snapshot::initial(
        "sim",
        SourceKind::Redis,
        Duration::from_secs_f64(r.poll / r.speedup),
    ));
    let mut next_poll = -r.warmup;
    let mut now = 0.0;
    let end = r.length;
    let (mut last_active, mut recs, mut next_keda): (Option<f64>, Vec<(f64, usize)>, f64) =
        (None, Vec::new(), 0.0);
    let mut errors = 0u64;
    let mut timeline = Vec::new();
    let floor = trigger.min_replicas;
    w.set_replicas(floor, 0.0);
    loop {
        // The exporter's polls up to now, each seeing the world as it is then.
        while next_poll <= now {
            w.advance(next_poll);
            snap = Arc::new(poll(r, &w, &snap, next_poll));
            next_poll += r.poll;
        }
        w.advance(now);
        let backlog = w.backlog(now);
        if now >= end && backlog == 0 && w.live() == 0 {
            break;
        }
        if now >= end + 2.0 * (r.cooldown + r.down_window) {
            break;
        }
        let answer =
            match query::evaluate(&query, std::slice::from_ref(&snap), config, clock(r, now)) {
                Ok(reading) => Some((reading.is_active(&query), query.target, reading.value)),
                Err(_) => {
                    errors += 1;
                    None
                }
            };
        let mut replicas = w.live();
        if let Some((active, _, _)) = answer
            && now >= next_keda
        {
            next_keda = now + r.keda_poll;
            if active {
                last_active = Some(now);
                if replicas == 0 {
                    w.set_replicas(1, now);
                }
            } else if replicas > 0
                && floor == 0
                && last_active.is_none_or(|l| now - l >= r.cooldown)
            {
                w.set_replicas(0, now);
                recs.clear();
            }
        }
        replicas = w.live();
        if let Some((_, target, value)) = answer
            && replicas > 0
        {
            let mut desired = replicas;
            if (1.0 - value / (target * replicas as f64)).abs() > r.tolerance {
                desired = ((value * 1000.0).round() / (target * 1000.0).round()).ceil() as usize;
            }
            desired = desired.clamp(floor.max(1), r.max_replicas);
            recs.retain(|&(t, _)| now - t < r.down_window);
            recs.push((now, desired));
            let new = if desired > replicas {
                desired.min((2 * replicas).max(replicas + 4))
            } else {
                replicas.min(recs.iter().map(|&(_, d)| d).max().unwrap_or(desired))
            };
            w.set_replicas(new, now);
        }
        if r.timeline {
            timeline.push(json!([now, w.live(), backlog, answer.map(|a| a.2)]));
        }
        now += r.hpa_sync;
    }
    w.set_replicas(0, now);
    w.advance(now);
    let from = r.score_from;
    let worker_s: f64 = w
        .gone
        .iter()
        .map(|(c, s)| (s - c.max(from)).max(0.0))
        .sum::<f64>()
        * r.workers_per_replica as f64;
    let first = r.arrivals.partition_point(|&a| a < from);
    let jobs = r.arrivals.len() - first;
    // Waits are in arrival order (FIFO), so the scored ones are a tail.
    let mut waits: Vec<f64> = w.waits.get(first..).unwrap_or_default().to_vec();
    waits.sort_by(f64::total_cmp);
    let within = waits.iter().filter(|&&x| x <= r.target_wait).count();
    let pct = |p: f64| -> Option<f64> {
        if waits.is_empty() {
            return None;
        }
        // bench.py's `pct`: the ceil(p·n/100)-th smallest.
        let n = waits.len();
        let k = ((p * n as f64 / 100.0).ceil() as usize).clamp(1, n);
        waits.get(k - 1).copied()
    };
    json!({
        "cell": r.cell, "name": trigger.name, "meta": trigger.meta, "jobs": jobs,
        "started": waits.len(), "left": jobs - waits.len(),
        "within_pct": if jobs > 0 { 100.0 * within as f64 / jobs as f64 } else { 100.0 },
        "p99_wait": pct(99.0), "max_wait": waits.last(), "worker_s": worker_s,
        "ask_errors": errors, "timeline": timeline,
    })
}

fn main() -> std::io::Result<()> {
    let config = ScalerConfig::default();
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let regime: Regime = serde_json::from_str(&line).map_err(std::io::Error::other)?;
        for trigger in &regime.triggers {
            writeln!(out, "{}", run(&regime, trigger, &config))?;
            out.flush()?;
        }
    }
    Ok(())
}
