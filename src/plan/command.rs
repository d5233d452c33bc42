//! `queue-exporter plan`: a recorded trace replayed for each candidate
//! trigger (the ScaledObject's own, `mode: WaitTime` at `targetWait`, and
//! a sweep of QueueLength values), each parsed by the exporter's own
//! `metadata::parse` and answered by its own `query::evaluate`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::{ScalerConfig, parse_duration};
use crate::plan::cluster::{Cluster, MetricType};
use crate::plan::plot::{self, Frame, PlotError, Series};
use crate::plan::prometheus::{self, PrometheusError};
use crate::plan::replay::{self, Exporter, Replay, Run, Traffic};
use crate::plan::scaledobject::{self, ScaledObjectError};
use crate::plan::score::{self, Score, Scoring};
use crate::plan::trace::{self, Trace, TraceError};
use crate::scaler::keys;
use crate::scaler::metadata::{self, Mode, ScalerQuery};
use crate::snapshot::{JobState, PresetKind};

/// The command line of `plan`.
#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// The recorded traffic: a CSV of `time,arrivals_per_second,service_seconds`
    /// (see docs/plan.md).
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "prometheus",
        conflicts_with = "prometheus"
    )]
    pub trace: Option<PathBuf>,
    /// Read the traffic from this Prometheus (query_range over the
    /// exporter's queue_depth, queue_messages_published_total (or
    /// queue_jobs_processed_total) and
    /// queue_service_time_seconds of the queue).
    #[arg(long, value_name = "URL")]
    pub prometheus: Option<String>,
    /// With --prometheus: the queue's name, or a glob of names as the
    /// trigger's `queue` takes it (default: the trigger's `queue`); the
    /// queues a glob matches are replayed as one holding all their jobs.
    #[arg(long, requires = "prometheus")]
    pub queue: Option<String>,
    /// The queue's job library (default: the trigger's `preset`): with
    /// --prometheus, the `preset` label read, where two libraries have a
    /// queue of that name; the library whose job states (`state`) the
    /// replayed queue has.
    #[arg(long)]
    pub preset: Option<String>,
    /// With --prometheus: the exporter's source of the queue (default: the
    /// trigger's `source`).
    #[arg(long, requires = "prometheus")]
    pub source: Option<String>,
    /// With --prometheus: how far back to read, up to now (or to --to).
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    pub since: Duration,
    /// With --prometheus: read from this time (RFC 3339 or unix seconds)
    /// instead of --since before the end.
    #[arg(long, requires = "prometheus", conflicts_with = "since", value_parser = trace::parse_time)]
    pub from: Option<f64>,
    /// With --prometheus: read up to this time (RFC 3339 or unix seconds)
    /// instead of now.
    #[arg(long, requires = "prometheus", value_parser = trace::parse_time)]
    pub to: Option<f64>,
    /// With --prometheus: the step between samples read (at most the
    /// scrape interval).
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub step: Duration,
    /// With --prometheus: the service time where the exporter measures none.
    #[arg(long, value_parser = parse_duration)]
    pub processing_time: Option<Duration>,
    /// With --prometheus: a file holding a bearer token.
    #[arg(long, value_name = "FILE", env = "PLAN_PROMETHEUS_BEARER_TOKEN_FILE")]
    pub bearer_token_file: Option<PathBuf>,
    /// With --prometheus: a basic auth user (with --basic-auth-password-file).
    #[arg(long, requires = "basic_auth_password_file")]
    pub basic_auth_user: Option<String>,
    /// With --prometheus: a file holding the basic auth password.
    #[arg(
        long,
        value_name = "FILE",
        requires = "basic_auth_user",
        env = "PLAN_PROMETHEUS_PASSWORD_FILE"
    )]
    pub basic_auth_password_file: Option<PathBuf>,
    /// With --prometheus over https://: a PEM file of the CA certificates
    /// that sign its certificate, trusted besides the system's roots.
    #[arg(long, value_name = "FILE", requires = "prometheus")]
    pub ca_file: Option<PathBuf>,
    /// With --prometheus over https://: a PEM file of the client
    /// certificate to show a Prometheus that asks for one (with --key-file).
    #[arg(long, value_name = "FILE", requires_all = ["prometheus", "key_file"])]
    pub cert_file: Option<PathBuf>,
    /// With --cert-file: a PEM file of the client certificate's private key.
    #[arg(long, value_name = "FILE", requires = "cert_file")]
    pub key_file: Option<PathBuf>,
    /// The ScaledObject to replay: its queue trigger, pollingInterval,
    /// cooldownPeriod, min/maxReplicaCount, fallback and HPA behavior (KEDA's and
    /// Kubernetes' defaults without it).
    #[arg(long, value_name = "FILE")]
    pub scaledobject: Option<PathBuf>,
    /// How long a new pod takes to start taking jobs.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub pod_start: Duration,
    /// A job is on time when it starts within this (default: the trigger's
    /// own targetWait).
    #[arg(long, value_parser = parse_duration)]
    pub target_wait: Option<Duration>,
    /// The recommendation is the cheapest candidate starting at least this
    /// percent of jobs on time.
    #[arg(long, default_value_t = 99.0)]
    pub percentile: f64,
    /// Price of one replica for an hour, to show each candidate's cost.
    #[arg(long)]
    pub price_per_replica_hour: Option<f64>,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// The recording ran this many times faster than the cluster it stands
    /// for (a time-compressed test loop, as `scripts/bench --closed-loop
    /// --measured`): the trace's times are stretched by it, and the
    /// trigger's durations (`targetWait`, `processingTime`, `window`...)
    /// are the recording's, as its exporter read them. 1 for a real cluster.
    #[arg(long, default_value_t = 1.0, value_name = "N")]
    pub time_scale: f64,
    /// The seed of the draw of each step's jobs' times within it: the same
    /// seed, the same jobs and the same figures.
    #[arg(long, default_value_t = SEED)]
    pub seed: u64,
    /// Replay each candidate over this many draws of the trace's jobs
    /// (seeds --seed, --seed + 1...): each shows the lowest share on time
    /// and the longest waits of any draw and the mean worker time, with
    /// their ranges, and is recommended only if every draw meets
    /// --percentile. Up to 50; each draw is a replay more.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub draws: u32,
    /// Draw replicas, jobs waiting and the longest wait over the replayed
    /// period, for the ScaledObject's trigger and the recommended one, into
    /// this SVG or PNG file (by its extension).
    #[arg(long, value_name = "FILE.svg|FILE.png")]
    pub plot: Option<PathBuf>,
}

/// Why `plan` cannot run: each is one line, exit 2.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// The trace cannot be read.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// The ScaledObject cannot be used.
    #[error(transparent)]
    ScaledObject(#[from] ScaledObjectError),
    /// Prometheus cannot be read, or has not what is needed.
    #[error(transparent)]
    Prometheus(#[from] PrometheusError),
    /// The plot cannot be written.
    #[error(transparent)]
    Plot(#[from] PlotError),
    /// A flag's value, or a missing input.
    #[error("{0}")]
    Input(String),
}

/// One trigger tried: its name, its metadata as the user would write it,
/// and what its replay scored.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// What it is, e.g. `QueueLength 12`.
    pub name: String,
    /// Its `metadata`, as the ScaledObject would hold it.
    pub meta: HashMap<String, String>,
    /// The replay's figures: with several draws, the lowest share on time
    /// and the longest waits of any, the mean worker time
    /// ([`score::worst_of`]).
    pub score: Score,
    /// Each draw's figures, in seed order (one with `--draws 1`).
    pub draws: Vec<Score>,
    /// The most replicas at once.
    pub peak_replicas: usize,
    /// Times the replica count changed.
    pub scale_events: usize,
    /// HPA syncs at which KEDA's `fallback` answered for a failing scaler.
    pub fallback_syncs: u64,
    /// Its `metricType`: the ScaledObject's own for its trigger,
    /// `AverageValue` (what the scaler's answers mean) for the others.
    pub metric_type: MetricType,
}

/// What `plan` found.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The trace replayed.
    pub trace: Trace,
    /// The cluster it was replayed in.
    pub cluster: Cluster,
    /// `targetWait`, seconds.
    pub target_wait: f64,
    /// `--time-scale`: cluster seconds per recorded (exporter) second.
    pub time_scale: f64,
    /// The scores' lead-in: seconds from the start not scored.
    pub lead_in: f64,
    /// The stretches left out of the scores (the gaps and the reaction
    /// time after each).
    pub left_out: Vec<(f64, f64)>,
    /// Jobs replayed.
    pub jobs: usize,
    /// Notes on what was assumed (a processingTime taken from the trace...).
    pub notes: Vec<String>,
    /// Every candidate, the ScaledObject's own first.
    pub candidates: Vec<Candidate>,
    /// The library whose queue the replay is read as, where the trigger
    /// counts job states ([`replay::Exporter::states_as`]).
    pub states_as: Option<PresetKind>,
    /// The seed of the first draw of the trace's jobs (`--seed`).
    pub seed: u64,
    /// How many draws each candidate is replayed over (`--draws`).
    pub draws: u32,
    /// The trace's service times are the exporter's measurement of the
    /// queue (`queue_service_time_seconds`): the WaitTime candidate then
    /// sets no `processingTime`, as the exporter measures it on the queue,
    /// and its replayed queue measures its own from its finished jobs.
    pub service_measured: bool,
    /// The index of the cheapest candidate on time, if any is.
    pub recommended: Option<usize>,
}

/// Keys that pick which of the user's queues are read: the replay's
/// world is one queue, so they are dropped for the replay (and kept in the
/// metadata shown). `state` is replayed ([`replayed_states`]).
const WORLD_KEYS: [&str; 4] = ["queue", "source", "preset", "group"];

/// The job states the replay models: the jobs waiting and those the
/// workers are on. Jobs in any other state (delayed, retrying, failed,
/// finished) are not in the recorded traffic.
const REPLAYED_STATES: [JobState; 2] = [JobState::Waiting, JobState::Active];

/// Runs `plan`.
pub fn run(options: &Options) -> Result<Plan, PlanError> {
    if !(options.percentile > 0.0 && options.percentile <= 100.0) {
        return Err(PlanError::Input(format!(
            "--percentile: {} is not above 0 and at most 100",
            options.percentile
        )));
    }
    if let Some(path) = &options.plot {
        plot::check_path(path)?;
    }
    let scale = options.time_scale;
    if !(1.0..=1000.0).contains(&scale) {
        return Err(PlanError::Input(format!(
            "--time-scale: {scale} is not from 1 to 1000"
        )));
    }
    let (own, cluster) = own_trigger(options)?;
    let own_query = own.as_ref().map(|o| &o.query);
    let read = read_trace(options, own.as_ref().map(|o| &o.meta))?;
    let states_as = replayed_states(options, own.as_ref(), &read.presets)?;
    let trace = read.trace.stretched(scale);
    let target_wait = match (options.target_wait, own_query.and_then(|q| q.wait.as_ref())) {
        (Some(t), _) => t.as_secs_f64(),
        (None, Some(w)) => w.target_wait.as_secs_f64() * scale,
        (None, None) => {
            return Err(PlanError::Input(
                "give --target-wait (no WaitTime trigger in --scaledobject says one)".to_owned(),
            ));
        }
    };
    let mut plan = prepare(trace, cluster, target_wait, scale);
    plan.notes.extend(read.notes);
    plan.service_measured = read.service_measured;
    plan.states_as = states_as;
    if scale != 1.0 {
        plan.notes.push(format!(
            "--time-scale {scale}: the recording's times are stretched {scale} times, and the triggers' durations are the recording's"
        ));
    }
    let base = own.as_ref().map(|o| o.meta.clone()).unwrap_or_default();
    let workers = own_query
        .and_then(|q| q.wait.as_ref())
        .map_or(1, |w| w.workers_per_replica.max(1) as usize);
    plan.seed = options.seed;
    plan.draws = options.draws;
    let traffics: Vec<Traffic> = (0..u64::from(options.draws))
        .map(|k| plan.trace.traffic(options.seed.wrapping_add(k)))
        .collect();
    let traffic = &traffics[..];
    plan.jobs = traffic.first().map_or(0, |t| t.arrivals.len());
    let bar = progress(&plan, own.is_some());
    let has_own = own.is_some();
    // The ScaledObject's own trigger and WaitTime, replayed side by side.
    let first = first_trials(&mut plan, own, &base);
    let done = try_candidates(&plan, traffic, workers, first, &bar)?;
    plan.candidates.extend(done);
    sweep(&mut plan, traffic, workers, &base, options.percentile, &bar)?;
    bar.finish_and_clear();
    plan.recommended = cheapest(&plan.candidates, options.percentile);
    if let (Some(path), Some(first)) = (&options.plot, traffic.first()) {
        draw_plot(&plan, first, workers, has_own, path)?;
    }
    Ok(plan)
}

/// The ScaledObject's own trigger (if any) and WaitTime at `targetWait`,
/// the candidates before the sweep; their notes go into `plan`.
fn first_trials(plan: &mut Plan, own: Option<Own>, base: &HashMap<String, String>) -> Vec<Trial> {
    let scale = plan.time_scale;
    let mut first = Vec::new();
    if let Some(o) = own {
        if o.metric_type == MetricType::Value {
            plan.notes.push(format!(
                "{} has metricType Value: the HPA multiplies its ready pods by the answer over the target, and KEDA's fallback does not apply to it; the other candidates are AverageValue, as the scaler's answers mean (docs/keda.md)",
                o.name
            ));
        }
        if !o.others.is_empty() {
            plan.notes.push(format!(
                "the ScaledObject's other triggers ({}) are not replayed: KEDA's HPA runs the most replicas any trigger asks, so each candidate's replicas here are the fewest the cluster would have run",
                o.others.join(", ")
            ));
        }
        first.push(Trial {
            name: o.name,
            meta: o.meta,
            metric_type: o.metric_type,
        });
    }
    // WaitTime's durations are the exporter's, as the recording's were.
    let fallback = plan.cluster.fallback.is_some_and(|f| f.replicas > 0);
    let starts = fallback || plan.cluster.min_replicas > 0;
    let service = if plan.service_measured && starts {
        Service::Measured
    } else if plan.service_measured {
        Service::Unstartable(plan.trace.mean_service() / scale)
    } else {
        Service::Trace(plan.trace.mean_service() / scale)
    };
    let wait = wait_candidate(base, plan.target_wait / scale, service, &mut plan.notes);
    first.push(Trial {
        name: format!("WaitTime {}", seconds(plan.target_wait)),
        meta: wait,
        metric_type: MetricType::AverageValue,
    });
    first
}

/// `--plot`: the ScaledObject's trigger (candidate 0, if there is one)
/// and the recommended one, replayed again with their timelines.
fn draw_plot(
    plan: &Plan,
    traffic: &Traffic,
    workers: usize,
    has_own: bool,
    path: &std::path::Path,
) -> Result<(), PlanError> {
    let mut drawn: Vec<usize> = has_own.then_some(0).into_iter().collect();
    drawn.extend(plan.recommended.filter(|&r| !(has_own && r == 0)));
    let series = drawn
        .into_iter()
        .map(|i| series_of(plan, traffic, workers, i))
        .collect::<Result<Vec<_>, _>>()?;
    let frame = Frame {
        target_wait: plan.target_wait,
        sync: plan.cluster.hpa_sync,
        gaps: &plan.trace.gaps,
        length: plan.trace.length,
    };
    Ok(plot::draw(path, &frame, &series)?)
}

/// Candidate `i` replayed again with its timeline, for `--plot`.
fn series_of(
    plan: &Plan,
    traffic: &Traffic,
    workers: usize,
    i: usize,
) -> Result<Series, PlanError> {
    let c = plan
        .candidates
        .get(i)
        .ok_or_else(|| PlanError::Input(format!("--plot: no candidate {i}")))?;
    let query =
        parse_for_replay(&c.meta).map_err(|e| PlanError::Input(format!("{}: {e}", c.name)))?;
    let run = replay_run(plan, traffic, workers, &query, c.metric_type, true);
    let label = if plan.recommended == Some(i) {
        format!("{} (recommended)", c.name)
    } else {
        c.name.clone()
    };
    Ok(Series {
        name: label,
        waits: traffic.arrivals.iter().copied().zip(run.waits).collect(),
        timeline: run.timeline,
    })
}

/// One replay of `query` over `traffic` in `plan`'s cluster, with its
/// timeline if asked.
fn replay_run(
    plan: &Plan,
    traffic: &Traffic,
    workers: usize,
    query: &ScalerQuery,
    metric_type: MetricType,
    timeline: bool,
) -> Run {
    let exporter = Exporter {
        poll: 1.0,
        speedup: plan.time_scale,
        warmup: 60.0_f64.max(2.0 * plan.target_wait) + 2.0,
        gaps: plan.trace.gaps.clone(),
        states_as: plan.states_as,
        service_max_age: crate::config::default_service_time_max_age().as_secs_f64(),
    };
    let setup = Replay {
        traffic,
        exporter: &exporter,
        cluster: &plan.cluster,
        length: plan.trace.length,
        workers_per_replica: workers,
        timeline,
        metric_type,
    };
    replay::replay(&setup, query, &ScalerConfig::default())
}

/// The ScaledObject's queue trigger: its name in the table, its metadata
/// and that metadata parsed for the replay.
struct Own {
    name: String,
    meta: HashMap<String, String>,
    query: ScalerQuery,
    metric_type: MetricType,
    /// The ScaledObject's other triggers, named for a note.
    others: Vec<String>,
}

/// The trigger and cluster of `--scaledobject`, or no trigger and the
/// defaults without it.
fn own_trigger(options: &Options) -> Result<(Option<Own>, Cluster), PlanError> {
    let pod_start = options.pod_start.as_secs_f64();
    let Some(path) = &options.scaledobject else {
        return Ok((None, Cluster::kubernetes_defaults(pod_start)));
    };
    let file = path.display().to_string();
    let so = scaledobject::read(&file, pod_start)?;
    let mode = so.trigger.get("mode").map_or("QueueLength", String::as_str);
    let setting = match mode {
        "WaitTime" => so.trigger.get("targetWait"),
        _ => so.trigger.get("value"),
    };
    let who = if so.name.is_empty() {
        "ScaledObject"
    } else {
        so.name.as_str()
    };
    let name = format!(
        "{who} ({mode} {})",
        setting.map_or("default", String::as_str)
    );
    let query = parse_for_replay(&so.trigger)
        .map_err(|e| PlanError::Input(format!("{file}: the external trigger's metadata: {e}")))?;
    let own = Own {
        name,
        meta: so.trigger,
        query,
        metric_type: so.metric_type,
        others: so.others,
    };
    Ok((Some(own), so.cluster))
}

/// The traffic read, and what was learnt reading it.
struct Read {
    /// The trace.
    trace: Trace,
    /// Notes for the output (the queues a glob matched).
    notes: Vec<String>,
    /// The `preset` labels of the queues read from Prometheus.
    presets: Vec<String>,
    /// Whether the service times are the exporter's measurement.
    service_measured: bool,
}

/// The trace, from `--trace` or from `--prometheus` (its queue, source
/// and preset from the flags or the trigger's `meta`), with a note naming
/// the queues a glob matched.
fn read_trace(
    options: &Options,
    meta: Option<&HashMap<String, String>>,
) -> Result<Read, PlanError> {
    let Some(url) = &options.prometheus else {
        let path = options
            .trace
            .as_ref()
            .map_or(String::new(), |p| p.display().to_string());
        return Ok(Read {
            trace: trace::read(&path)?,
            notes: Vec::new(),
            presets: Vec::new(),
            service_measured: false,
        });
    };
    let from_meta = |k: &str| meta.and_then(|m| m.get(k)).cloned();
    let queue = options
        .queue
        .clone()
        .or_else(|| from_meta("queue"))
        .ok_or_else(|| {
            PlanError::Input(
                "--prometheus: give --queue (or a --scaledobject whose trigger says queue)"
                    .to_owned(),
            )
        })?;
    let to = options.to.unwrap_or_else(|| prometheus::now().floor());
    let from = options
        .from
        .unwrap_or(to - options.since.as_secs_f64().round());
    if from >= to {
        return Err(PlanError::Input(format!(
            "--from {from} is not before --to {to}"
        )));
    }
    let source = prometheus::Source {
        url: url.clone(),
        queue,
        source: options.source.clone().or_else(|| from_meta("source")),
        preset: options.preset.clone().or_else(|| from_meta("preset")),
        from,
        to,
        step: options.step.as_secs_f64().max(1.0),
        processing_time: options.processing_time.map(|d| d.as_secs_f64()),
        bearer_token_file: options.bearer_token_file.clone(),
        basic_auth: options
            .basic_auth_user
            .clone()
            .zip(options.basic_auth_password_file.clone()),
        ca_file: options.ca_file.clone(),
        client_cert: options.cert_file.clone().zip(options.key_file.clone()),
    };
    let recorded = prometheus::read(&source)?;
    let mut notes = Vec::new();
    if recorded.queues.len() > 1 || recorded.queues.first() != Some(&source.queue) {
        const SHOWN: usize = 10;
        let mut names: Vec<String> = recorded
            .queues
            .iter()
            .take(SHOWN)
            .map(|q| format!("{q:?}"))
            .collect();
        if recorded.queues.len() > SHOWN {
            names.push(format!("and {} more", recorded.queues.len() - SHOWN));
        }
        notes.push(format!(
            "queue {:?} matched {} queue(s) ({}): replayed as one queue holding all their jobs, first in first out, as the trigger sums their backlogs",
            source.queue,
            recorded.queues.len(),
            names.join(", ")
        ));
    }
    Ok(Read {
        trace: recorded.trace,
        notes,
        presets: recorded.presets,
        service_measured: recorded.service_measured,
    })
}

/// The library whose queue the replay is read as, where the ScaledObject's
/// trigger counts job states (`state`): its `preset`, from `--preset`, the
/// trigger, or the one `preset` label of the queues read. `None` without
/// `state`. A state the replay does not model, or no library to read the
/// states as, is refused: a count the replay cannot know is never a 0.
fn replayed_states(
    options: &Options,
    own: Option<&Own>,
    recorded: &[String],
) -> Result<Option<PresetKind>, PlanError> {
    let Some((own, states)) = own.and_then(|o| o.query.states.as_ref().map(|s| (o, s))) else {
        return Ok(None);
    };
    if let Some(other) = states.iter().find(|s| !REPLAYED_STATES.contains(s)) {
        return Err(PlanError::Input(format!(
            "the trigger's state: plan replays a queue's waiting and active jobs (the jobs the workers are on), and its {} jobs are not in the recorded traffic; replay a trigger whose state lists only waiting and active",
            other.as_str()
        )));
    }
    let named = options
        .preset
        .clone()
        .or_else(|| own.meta.get("preset").cloned());
    let name = match (named, recorded) {
        (Some(n), _) => n,
        (None, [one]) => one.clone(),
        (None, []) => {
            return Err(PlanError::Input(
                "the trigger's state: job states are a library preset's, and neither the trigger nor --preset names one (nor do the queue's series): give --preset".to_owned(),
            ));
        }
        (None, many) => {
            return Err(PlanError::Input(format!(
                "the trigger's state: the queues read are of several presets ({}): give --preset",
                many.join(", ")
            )));
        }
    };
    crate::sources::redis::presets::library::named(&name)
        .map(|l| Some(l.kind()))
        .ok_or_else(|| PlanError::Input(format!("--preset: {name:?} is not a library preset")))
}

/// A progress bar of the candidates replayed, on stderr; indicatif draws
/// nothing when stderr is not a terminal. Its length is the most
/// candidates there can be (the sweep may stop early).
fn progress(plan: &Plan, own: bool) -> indicatif::ProgressBar {
    let top = sweep_top(plan);
    let sweep = (top.ln() / 1.25_f64.ln()).floor() as u64 + 1;
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(sweep + 1 + u64::from(own)),
        indicatif::ProgressDrawTarget::stderr(),
    );
    // The template is fixed and valid; the default style if it were not.
    let style = indicatif::ProgressStyle::with_template("{msg} {wide_bar} {pos}/{len} candidates")
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_message(format!("plan: replaying {} jobs per candidate", plan.jobs));
    bar
}

/// The highest QueueLength value the sweep tries: 2·targetWait per mean
/// job time (a value v keeps about v jobs waiting per worker, v·S of wait).
fn sweep_top(plan: &Plan) -> f64 {
    let service = plan.trace.mean_service().max(1e-3);
    (2.0 * plan.target_wait / service).clamp(2.0, 100_000.0)
}

/// The seed of the jobs' times drawn within the trace's steps.
pub const SEED: u64 = 47;

/// The plan before any candidate: the lead-in and what is left out.
fn prepare(trace: Trace, cluster: Cluster, target_wait: f64, time_scale: f64) -> Plan {
    // KEDA's poll, an HPA sync and a pod start: the replay starts from
    // the floor of replicas, a cluster at the trace's start may not have.
    let reaction = cluster.keda_poll + cluster.hpa_sync + cluster.pod_start;
    let left_out = trace
        .gaps
        .iter()
        .map(|&(a, b)| (a, (b + reaction).min(trace.length)))
        .collect();
    Plan {
        trace,
        cluster,
        target_wait,
        time_scale,
        lead_in: reaction,
        left_out,
        jobs: 0,
        notes: Vec::new(),
        candidates: Vec::new(),
        recommended: None,
        states_as: None,
        seed: SEED,
        draws: 1,
        service_measured: false,
    }
}

/// A duration for a name and for metadata: `30s`, `1500ms`.
pub fn seconds(s: f64) -> String {
    if (s - s.round()).abs() < 1e-9 {
        format!("{}s", s.round())
    } else {
        format!("{}ms", (s * 1000.0).round())
    }
}

/// `meta` parsed as the replay asks it: the world keys pointed at the
/// replayed queue.
fn parse_for_replay(meta: &HashMap<String, String>) -> Result<ScalerQuery, String> {
    let mut m: HashMap<String, String> = meta
        .iter()
        .filter(|(k, _)| !WORLD_KEYS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    m.insert("queue".into(), replay::QUEUE.into());
    m.insert("source".into(), replay::SOURCE.into());
    metadata::parse(&m).map_err(|e| e.to_string())
}

/// The WaitTime candidate: the user's keys WaitTime reads, mode WaitTime at `target_wait`,
/// and a processingTime from the trace if the user's has none.
fn wait_candidate(
    base: &HashMap<String, String>,
    target_wait: f64,
    service: Service,
    notes: &mut Vec<String>,
) -> HashMap<String, String> {
    let mut m = base.clone();
    // The user's keys WaitTime does not read (`value`, `activationValue`,
    // `operation`, `state`, `group`): the scaler would refuse them.
    for k in keys::ALL
        .iter()
        .filter(|k| !k.modes.accepts(Mode::WaitTime))
    {
        m.remove(k.name);
    }
    m.insert("mode".into(), "WaitTime".into());
    m.insert("targetWait".into(), seconds(target_wait));
    if m.contains_key("processingTime") {
        return m;
    }
    let (mean, why) = match service {
        Service::Measured => {
            notes.push(
                "WaitTime sets no processingTime: the exporter measures your queue's service time, and the replayed queue measures its own from its finished jobs (until one has, the scaler answers UNAVAILABLE and KEDA's fallback or minReplicaCount starts the pods)".to_owned(),
            );
            return m;
        }
        Service::Trace(mean) => (
            mean,
            "the trace's service times may not be measured by your exporter",
        ),
        Service::Unstartable(mean) => (
            mean,
            "without KEDA's fallback or a minReplicaCount of 1, a WaitTime trigger without it cannot start from zero replicas until a job has finished (docs/keda.md)",
        ),
    };
    let processing = seconds((mean * 1000.0).round() / 1000.0);
    notes.push(format!(
        "WaitTime's processingTime is the trace's mean service time, weighted by arrivals ({processing}): {why}"
    ));
    m.insert("processingTime".into(), processing);
    m
}

/// Where the WaitTime candidate's service time comes from.
#[derive(Debug, Clone, Copy)]
enum Service {
    /// Measured by the exporter, as on the user's queue: no `processingTime`.
    Measured,
    /// `processingTime` from the trace's mean (seconds): its service
    /// times may not be the exporter's measurement (`--trace`,
    /// `--processing-time`).
    Trace(f64),
    /// `processingTime` from the trace's mean although the exporter
    /// measures it: without `fallback` or `minReplicaCount` ≥ 1, a trigger
    /// without it cannot start from zero.
    Unstartable(f64),
}

/// A candidate to replay: its name, its metadata and its `metricType`.
struct Trial {
    name: String,
    /// Its metadata as the user would write it (shown, and in the YAML).
    meta: HashMap<String, String>,
    metric_type: MetricType,
}

/// One candidate replayed and scored.
fn try_candidate(
    plan: &Plan,
    traffics: &[Traffic],
    workers: usize,
    trial: Trial,
) -> Result<Candidate, PlanError> {
    let Trial {
        name,
        meta,
        metric_type,
    } = trial;
    let query = parse_for_replay(&meta).map_err(|e| PlanError::Input(format!("{name}: {e}")))?;
    let scoring = Scoring {
        target_wait: plan.target_wait,
        from: plan.lead_in,
        left_out: plan.left_out.clone(),
        workers_per_replica: workers,
    };
    let (mut draws, mut first) = (Vec::new(), None);
    for traffic in traffics {
        let run = replay_run(plan, traffic, workers, &query, metric_type, false);
        draws.push(score::score(&run, traffic, &scoring));
        first.get_or_insert(run);
    }
    let (Some(score), Some(run)) = (score::worst_of(&draws), first) else {
        return Err(PlanError::Input(format!("{name}: no draw to replay")));
    };
    // Peak replicas, scale events and fallback syncs are the first draw's.
    Ok(Candidate {
        name,
        meta,
        score,
        draws,
        peak_replicas: run.peak_replicas,
        scale_events: run.scale_events,
        fallback_syncs: run.fallback_syncs,
        metric_type,
    })
}

/// The trials replayed and scored, each on a thread of its own, the
/// results in the trials' order. A replay is one core's work from start
/// to end (each its own world and exporter, sharing only the traffic), so
/// the candidates of a week's trace take a core each: the figures are the
/// same as one after another.
fn try_candidates(
    plan: &Plan,
    traffic: &[Traffic],
    workers: usize,
    trials: Vec<Trial>,
    bar: &indicatif::ProgressBar,
) -> Result<Vec<Candidate>, PlanError> {
    std::thread::scope(|scope| {
        let running: Vec<_> = trials
            .into_iter()
            .map(|trial| {
                scope.spawn(move || {
                    let c = try_candidate(plan, traffic, workers, trial);
                    bar.inc(1);
                    c
                })
            })
            .collect();
        running
            .into_iter()
            .map(|r| {
                // A replay that panicked is a bug: the panic goes on as it
                // would have without the thread.
                r.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
            })
            .collect()
    })
}

/// How many replays run at once: the cores this process may use.
fn parallel_replays() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// QueueLength at 1, 1.25, 1.5625... (each within 25 % of the next), with
/// the user's other keys, until two in a row miss 90 % after one met the
/// percentile, or 2·targetWait per mean job time (a value v keeps about v
/// jobs waiting per worker, v·S of wait).
fn sweep(
    plan: &mut Plan,
    traffic: &[Traffic],
    workers: usize,
    base: &HashMap<String, String>,
    percentile: f64,
    bar: &indicatif::ProgressBar,
) -> Result<(), PlanError> {
    let top = sweep_top(plan);
    let mut values = std::iter::successors(Some(1.0_f64), |v| Some(v * 1.25))
        .take_while(|&v| v <= top)
        .map(|v| format!("{:.3}", v).parse::<f64>().unwrap_or(v));
    let (mut misses, mut held) = (0, false);
    // As many values at once as replays run; those past where the sweep
    // stops are dropped, so the candidates are the same as one by one.
    while misses < 2 {
        let trials: Vec<Trial> = values
            .by_ref()
            .take(parallel_replays())
            .map(|value| queue_length_trial(base, value))
            .collect();
        if trials.is_empty() {
            break;
        }
        for c in try_candidates(plan, traffic, workers, trials, bar)? {
            if misses >= 2 {
                break;
            }
            held = held || c.score.within_pct >= percentile;
            misses = if c.score.within_pct < if held { 90.0 } else { 0.0 } {
                misses + 1
            } else {
                0
            };
            plan.candidates.push(c);
        }
    }
    Ok(())
}

/// QueueLength at `value`, with the user's other keys QueueLength reads.
fn queue_length_trial(base: &HashMap<String, String>, value: f64) -> Trial {
    let mut m = base.clone();
    // The user's keys QueueLength does not read (WaitTime's).
    for k in keys::ALL
        .iter()
        .filter(|k| !k.modes.accepts(Mode::QueueLength))
    {
        m.remove(k.name);
    }
    m.insert("mode".into(), "QueueLength".into());
    m.insert("value".into(), format!("{value}"));
    Trial {
        name: format!("QueueLength {value}"),
        meta: m,
        metric_type: MetricType::AverageValue,
    }
}

/// The cheapest candidate (fewest worker-seconds) starting at least
/// `percentile` % on time.
fn cheapest(candidates: &[Candidate], percentile: f64) -> Option<usize> {
    candidates
        .iter()
        .enumerate()
        .filter(|(_, c)| c.score.within_pct >= percentile)
        .min_by(|a, b| a.1.score.worker_s.total_cmp(&b.1.score.worker_s))
        .map(|(i, _)| i)
}
