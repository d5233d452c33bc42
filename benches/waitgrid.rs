//! The closed-loop grid of issue 38 in virtual time: `scripts/bench
//! --closed-loop --grid` (scripts/bench.d/grid.py) hands this program one
//! regime per line of stdin (a Poisson trace, the job time, the world's
//! timings and a list of triggers) and reads one JSON result per trigger on
//! stdout.
//!
//! A thin caller of the library's `plan` module, which `queue-exporter
//! plan` runs too: each trigger's metadata goes through the exporter's own
//! `metadata::parse`, and `plan::replay` steps the world closedloop.py runs
//! for real (a FIFO list, workers spending the job time on each, the
//! exporter's polls through the source's own `counter_point`, KEDA and the
//! HPA by `plan::cluster`'s rules), answered at each sync by the real
//! `query::evaluate`; `plan::score` scores it.
//!
//! Times in the input are model seconds; `speedup` says how many model
//! seconds one exporter second stands for (15 to mirror closedloop.py's
//! compressed real run, 1 for the grid).
//!
//! Built by `scripts/bench` (`cargo build --release --bench waitgrid`) and
//! run directly; `cargo bench` alone runs nothing.

use std::collections::HashMap;
use std::io::{BufRead, Write};

use queue_exporter::config::ScalerConfig;
use queue_exporter::plan::cluster::{Behavior, Cluster, MetricType};
use queue_exporter::plan::replay::{self, Exporter, Replay, Service, Traffic};
use queue_exporter::plan::score::{self, Scoring};
use queue_exporter::scaler::metadata;
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

/// One trigger against the regime: closedloop.py's `Run.run` in virtual time.
fn run(
    r: &Regime,
    traffic: &Traffic,
    trigger: &Trigger,
    config: &ScalerConfig,
) -> serde_json::Value {
    let query = match metadata::parse(&trigger.meta) {
        Ok(q) => q,
        Err(e) => return json!({"name": trigger.name, "error": e.to_string()}),
    };
    let cluster = Cluster {
        hpa_sync: r.hpa_sync,
        keda_poll: r.keda_poll,
        cooldown: r.cooldown,
        pod_start: r.pod_start,
        min_replicas: trigger.min_replicas,
        max_replicas: r.max_replicas,
        tolerance: r.tolerance,
        // Kubernetes' default scale-up and scale-down policies, with the
        // regime's scale-down window.
        behavior: Behavior::kubernetes_default(r.down_window),
        // The grid's scaler never fails.
        fallback: None,
    };
    let exporter = Exporter {
        poll: r.poll,
        speedup: r.speedup,
        warmup: r.warmup,
        gaps: Vec::new(),
        states_as: None,
        service_max_age: queue_exporter::config::default_service_time_max_age().as_secs_f64(),
    };
    let setup = Replay {
        traffic,
        exporter: &exporter,
        cluster: &cluster,
        length: r.length,
        workers_per_replica: r.workers_per_replica,
        timeline: r.timeline,
        metric_type: MetricType::AverageValue,
    };
    let ran = replay::replay(&setup, &query, config);
    let scoring = Scoring {
        target_wait: r.target_wait,
        from: r.score_from,
        left_out: Vec::new(),
        workers_per_replica: r.workers_per_replica,
    };
    let s = score::score(&ran, traffic, &scoring);
    let timeline: Vec<_> = ran
        .timeline
        .iter()
        .map(|m| json!([m.t, m.replicas, m.backlog, m.value]))
        .collect();
    json!({
        "cell": r.cell, "name": trigger.name, "meta": trigger.meta, "jobs": s.jobs,
        "started": s.started, "left": s.jobs - s.started,
        "within_pct": s.within_pct, "p99_wait": s.p99_wait, "max_wait": s.max_wait,
        "worker_s": s.worker_s, "ask_errors": ran.ask_errors, "timeline": timeline,
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
        let mut regime: Regime = serde_json::from_str(&line).map_err(std::io::Error::other)?;
        let traffic = Traffic {
            arrivals: std::mem::take(&mut regime.arrivals),
            service: Service::Each(regime.service),
        };
        for trigger in &regime.triggers {
            writeln!(out, "{}", run(&regime, &traffic, trigger, &config))?;
            out.flush()?;
        }
    }
    Ok(())
}
