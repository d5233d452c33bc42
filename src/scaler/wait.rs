//! The `WaitTime` model: how many replicas start jobs within `targetWait`,
//! from the backlog, the oldest job's age, the arrival rate and the
//! service time (docs/keda.md, "How does mode WaitTime compute replicas?").
//!
//! Pure arithmetic on numbers the query gathered from one snapshot: no
//! I/O, no clock, so every exporter replica answers the same and the model
//! is tested on its own.

use std::time::Duration;

use crate::snapshot::ServiceSource;

/// Share of jobs the steady-state term wants started within `targetWait`
/// unless `targetWaitPercentile` says otherwise.
pub const PERCENTILE: f64 = 0.99;

/// Accepted `targetWaitPercentile`, in percent: below 50 the objective is
/// no longer "jobs start on time"; 99.99 already asks Erlang C for a
/// margin a `window` average cannot promise.
pub const PERCENTILE_RANGE: std::ops::RangeInclusive<f64> = 50.0..=99.99;

/// Highest utilisation the steady-state term plans for: a margin for the
/// arrival rate being an average over `window`. Erlang C alone would run
/// large pools closer to 1.
pub const MAX_UTILISATION: f64 = 0.95;

/// The share γ of the arrivals' busy workers (a = λS) the drain term adds to
/// the backlog's. With FIFO the backlog is served before later arrivals, so
/// B·S/W workers alone start it within W (γ = 0); γ keeps that true when
/// `processingTime` is set too low: set 30 % low, the backlog settles where
/// B·0.7S/W + γ·0.7a = a, a wait of (1 − 0.7γ)/0.7 · W, so γ = 0.7 keeps it
/// near 0.73 W. Measured in the closed loop (scripts/bench --closed-loop):
/// adding all of a (γ = 1) overshot every burst by the backlog's B·S/W
/// workers, which the HPA's scale-down window then kept for 5 minutes.
pub const ARRIVAL_SHARE: f64 = 0.7;

/// Above this offered load (busy workers), the steady-state term is the
/// utilisation cap alone: there Erlang C's margin (about the square root of
/// the load) is far below the cap's 11 %, and its search would cost a step
/// per worker.
const ERLANG_MAX_LOAD: f64 = 100_000.0;

/// Accepted `targetWait` and `processingTime`: from 1 ms (the simulation
/// compresses time) to a day; beyond, a job queue is not what is scaled.
pub const WAIT_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(1)..=Duration::from_secs(24 * 3600);

/// Largest `workersPerReplica`.
pub const MAX_WORKERS_PER_REPLICA: u32 = 10_000;

/// What a `WaitTime` trigger asks for (`targetWait`, `processingTime`,
/// `workersPerReplica`), checked when the metadata is parsed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WaitParams {
    /// A job should start within this long after it was enqueued (`targetWait`).
    pub target_wait: Duration,
    /// Average worker time per job (`processingTime`); `None`: the
    /// exporter's measurement of each queue (refused where it has none).
    pub processing_time: Option<Duration>,
    /// Jobs one replica works on at once (`workersPerReplica`; Sidekiq's
    /// concurrency, say), so replicas = workers / this.
    pub workers_per_replica: u32,
    /// Share of arriving jobs the steady-state term starts within
    /// `targetWait` (`targetWaitPercentile` / 100; default [`PERCENTILE`]).
    pub percentile: f64,
}

impl WaitParams {
    /// The metadata keys these come from.
    pub const KEYS: [&'static str; 4] = [
        "targetWait",
        "processingTime",
        "workersPerReplica",
        "targetWaitPercentile",
    ];

    /// Reads `targetWait` (required), `processingTime` (optional: where it
    /// is missing, the query needs queues whose service time the exporter
    /// measures) and `workersPerReplica` (default 1) through `get`; a
    /// refusal is the key and what is wrong.
    pub fn from_metadata<'a>(
        get: &impl Fn(&str) -> Option<&'a str>,
    ) -> Result<WaitParams, (&'static str, String)> {
        let duration = |key: &'static str, v: &str| match humantime::parse_duration(v) {
            Ok(d) if WAIT_RANGE.contains(&d) => Ok(d),
            _ => Err((
                key,
                format!(
                    "must be a duration from {} to {} such as 30s or 2m, got {v:?}",
                    humantime::format_duration(*WAIT_RANGE.start()),
                    humantime::format_duration(*WAIT_RANGE.end())
                ),
            )),
        };
        let target_wait = get("targetWait").ok_or((
            "targetWait",
            "required with mode WaitTime: how soon after it is enqueued a job should start, such as 30s"
                .to_string(),
        ))?;
        let target_wait = duration("targetWait", target_wait)?;
        let processing_time = get("processingTime")
            .map(|v| duration("processingTime", v))
            .transpose()?;
        let workers_per_replica = match get("workersPerReplica") {
            None => 1,
            Some(v) => match v.parse::<u32>() {
                Ok(n) if (1..=MAX_WORKERS_PER_REPLICA).contains(&n) => n,
                _ => {
                    return Err((
                        "workersPerReplica",
                        format!(
                            "must be a whole number from 1 to {MAX_WORKERS_PER_REPLICA} (jobs one replica works on at once), got {v:?}"
                        ),
                    ));
                }
            },
        };
        let percentile = match get("targetWaitPercentile") {
            None => PERCENTILE,
            Some(v) => match v.trim().trim_end_matches('%').trim().parse::<f64>() {
                Ok(p) if PERCENTILE_RANGE.contains(&p) => p / 100.0,
                _ => {
                    return Err((
                        "targetWaitPercentile",
                        format!(
                            "must be a percentage from {} to {} (the share of jobs to start within targetWait, such as 95 or 99.9), got {v:?}",
                            PERCENTILE_RANGE.start(),
                            PERCENTILE_RANGE.end()
                        ),
                    ));
                }
            },
        };
        Ok(WaitParams {
            target_wait,
            processing_time,
            workers_per_replica,
            percentile,
        })
    }
}

/// The model's inputs over the matched queues, each known (the query turns
/// an unknown one into `UNAVAILABLE` before the model runs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WaitInputs {
    /// Jobs waiting for a worker (ready; `waiting` for presets), summed.
    pub backlog: f64,
    /// Seconds the oldest waiting job has waited (the largest over queues).
    pub oldest_age: f64,
    /// Jobs arriving per second over `window`, summed.
    pub arrival_rate: f64,
    /// Seconds of worker time per job.
    pub service_time: f64,
    /// Where `service_time` comes from.
    pub service_from: ServiceFrom,
}

/// Where the service time a WaitTime answer used comes from, so pages and
/// logs can say whether it was measured or set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceFrom {
    /// The trigger's `processingTime`.
    Set,
    /// Measured by the source, this way.
    Measured(ServiceSource),
    /// Not known and not needed: nothing waits or arrives at a queue whose
    /// service time is unknown, so the answer does not depend on it
    /// (`service_time` is then 0 and shown as absent).
    Unneeded,
}

impl ServiceFrom {
    /// The word used in logs, JSON and pages (`processingTime`,
    /// `finished_jobs`, `ack_rate`, `unneeded`).
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceFrom::Set => "processingTime",
            ServiceFrom::Measured(s) => s.as_str(),
            ServiceFrom::Unneeded => "unneeded",
        }
    }
}

/// Which term of the model set the answer, so a page or a log can say why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// Nothing waits and nothing arrives: 0 replicas.
    Idle,
    /// (a) Enough workers for the arrival rate (Erlang C and the utilisation cap).
    Steady,
    /// (b) The arrivals' workers plus those that start the backlog within `targetWait`.
    Drain,
    /// (b) while jobs are already older than `targetWait`: the same drain
    /// term, named apart so a page or a log says the jobs are late.
    CatchUp,
}

impl Bound {
    /// The word used in logs, metrics and pages.
    pub fn as_str(self) -> &'static str {
        match self {
            Bound::Idle => "idle",
            Bound::Steady => "steady",
            Bound::Drain => "drain",
            Bound::CatchUp => "catch-up",
        }
    }
}

/// The model's answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WaitDecision {
    /// What the model was given.
    pub inputs: WaitInputs,
    /// Workers needed (a float: KEDA's `AverageValue` target of 1 makes the
    /// HPA set ceil(replicas)).
    pub workers: f64,
    /// `workers / workersPerReplica`: the value `GetMetrics` answers.
    pub replicas: f64,
    /// The term that set `workers`.
    pub bound: Bound,
    /// `IsActive`: jobs wait or arrive.
    pub active: bool,
}

/// The replicas that start jobs within `params.target_wait`.
///
/// With S the service time, W the target wait, λ the arrival rate, B the
/// backlog and A the oldest job's age, and a = λS the busy workers the
/// arrivals alone keep:
/// - (a) steady state: the fewest workers N > a for which Erlang C puts
///   P(wait > W) = C(N, a)·e^{−(N−a)W/S} at most 1 − p (p the percentile,
///   [`PERCENTILE`] unless `targetWaitPercentile` is set), and at least
///   a / [`MAX_UTILISATION`];
/// - (b) drain: B·min(1, S/W) + γa ([`ARRIVAL_SHARE`]), so the backlog
///   starts within W (served first, FIFO; ages taken as spread evenly up to
///   A, the newest job is the last to start, and B·S of work must be done
///   within its W), with a share of the arrivals' workers on top as a
///   margin for an underestimated S;
/// - late jobs (A > W) get no term of their own: they are drained by (b)
///   like the rest ([`Bound::CatchUp`] names the answer then). A worker
///   per late job, the first version of this model, came a pod start too
///   late to help them and was then held by the HPA's scale-down window:
///   3× the worker time of the best `QueueLength` after a 10× burst in the
///   closed-loop grid (scripts/bench --closed-loop --grid), for no job more
///   on time.
///
/// The answer is max((a), (b)) workers, over `workersPerReplica`.
pub fn decide(params: &WaitParams, inputs: WaitInputs) -> WaitDecision {
    let WaitInputs {
        backlog,
        oldest_age,
        arrival_rate,
        service_time,
        ..
    } = inputs;
    let wait = params.target_wait.as_secs_f64();
    let load = arrival_rate * service_time;
    let steady = steady_workers(load, wait, service_time, params.percentile);
    let per_job = if wait > 0.0 {
        (service_time / wait).min(1.0)
    } else {
        1.0
    };
    let drain = ARRIVAL_SHARE * load + backlog * per_job;
    let (workers, bound) = if backlog <= 0.0 && arrival_rate <= 0.0 {
        (0.0, Bound::Idle)
    } else if drain > steady {
        let bound = if oldest_age > wait && backlog > 0.0 {
            Bound::CatchUp
        } else {
            Bound::Drain
        };
        (drain, bound)
    } else {
        (steady, Bound::Steady)
    };
    let replicas = workers / f64::from(params.workers_per_replica.max(1));
    WaitDecision {
        inputs,
        workers,
        replicas,
        bound,
        active: backlog > 0.0 || arrival_rate > 0.0,
    }
}

/// (a): the fewest workers for offered load `load` (busy workers) so that
/// the share `percentile` of jobs wait at most `wait` seconds by Erlang C
/// (M/M/N), and at least `load / MAX_UTILISATION`. 0 for no load.
pub fn steady_workers(load: f64, wait: f64, service_time: f64, percentile: f64) -> f64 {
    // NaN fails `is_finite`, so every check below compares numbers.
    if !load.is_finite() || load <= 0.0 {
        return 0.0;
    }
    let capped = load / MAX_UTILISATION;
    if load > ERLANG_MAX_LOAD || !service_time.is_finite() || service_time <= 0.0 {
        return capped;
    }
    // Erlang B by its stable recursion B(k) = aB(k−1) / (k + aB(k−1)),
    // carried up to the first N above the load, then on until the wait
    // percentile holds; C(N) = N·B / (N − a(1 − B)).
    let mut erlang_b = 1.0;
    let mut n = 0.0;
    while n <= load {
        n += 1.0;
        erlang_b = load * erlang_b / (n + load * erlang_b);
    }
    loop {
        let erlang_c = n * erlang_b / (n - load * (1.0 - erlang_b));
        let late = erlang_c * (-(n - load) * wait / service_time).exp();
        // Erlang C falls towards 0 as N grows, so this ends; the bound
        // only guards against a wait of 0 making that slow.
        if late <= 1.0 - percentile || n > 10.0 * load + 100.0 {
            return n.max(capped);
        }
        n += 1.0;
        erlang_b = load * erlang_b / (n + load * erlang_b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(wait_s: f64, per_replica: u32) -> WaitParams {
        WaitParams {
            target_wait: Duration::from_secs_f64(wait_s),
            processing_time: Some(Duration::from_secs(1)),
            percentile: PERCENTILE,
            workers_per_replica: per_replica,
        }
    }

    fn inputs(backlog: f64, oldest_age: f64, arrival_rate: f64, service_time: f64) -> WaitInputs {
        WaitInputs {
            backlog,
            oldest_age,
            arrival_rate,
            service_time,
            service_from: ServiceFrom::Set,
        }
    }

    /// P(wait > t) in M/M/N from Erlang C's closed form, summed directly.
    fn erlang_late(n: u32, load: f64, wait: f64, service: f64) -> f64 {
        let mut term = 1.0;
        let mut sum = 0.0;
        for k in 0..n {
            if k > 0 {
                term *= load / f64::from(k);
            }
            sum += term;
        }
        let top = term * load / f64::from(n) * f64::from(n) / (f64::from(n) - load);
        top / (sum + top) * (-(f64::from(n) - load) * wait / service).exp()
    }

    #[test]
    fn nothing_waiting_or_arriving_is_idle_and_zero() {
        let d = decide(&params(30.0, 1), inputs(0.0, 0.0, 0.0, 2.0));
        assert_eq!((d.replicas, d.bound, d.active), (0.0, Bound::Idle, false));
    }

    #[test]
    fn steady_state_is_the_fewest_workers_erlang_c_allows_under_the_cap() {
        for (rate, service, wait) in [(1.0, 2.0, 30.0), (5.0, 2.0, 4.0), (50.0, 1.0, 2.0)] {
            let load = rate * service;
            let n = steady_workers(load, wait, service, PERCENTILE);
            let cap = load / MAX_UTILISATION;
            assert!(n >= cap, "{rate} {service} {wait}: {n}");
            // Whole workers from Erlang C unless the cap is above them;
            // Erlang C holds at n, and one fewer worker breaks it or the cap.
            assert!(n.fract() == 0.0 || n == cap, "{n}");
            let m = n.ceil() as u32;
            assert!(erlang_late(m, load, wait, service) <= 1.0 - PERCENTILE);
            assert!(
                erlang_late(m - 1, load, wait, service) > 1.0 - PERCENTILE
                    || f64::from(m - 1) < cap,
                "{rate} {service} {wait}: {n} is not the fewest"
            );
        }
        // A tight wait against a long job needs Erlang C's margin above the cap:
        // 2 busy workers, 1 s to start a 10 s job.
        let n = steady_workers(2.0, 1.0, 10.0, PERCENTILE);
        assert!(n > 2.0 / MAX_UTILISATION, "{n}");
        assert!(erlang_late(n as u32, 2.0, 1.0, 10.0) <= 1.0 - PERCENTILE);
        // Beyond the search bound the cap answers.
        assert_eq!(
            steady_workers(2e5, 1.0, 1.0, PERCENTILE),
            2e5 / MAX_UTILISATION
        );
    }

    #[test]
    fn a_lower_percentile_asks_fewer_workers_and_holds_at_its_own_share() {
        // 40 jobs/s of 1 s: 40 busy workers, 2 s to start.
        let (load, wait, service) = (40.0, 2.0, 1.0);
        let strict = steady_workers(load, wait, service, 0.999);
        let default = steady_workers(load, wait, service, PERCENTILE);
        let loose = steady_workers(load, wait, service, 0.90);
        assert!(
            strict > default && default >= loose,
            "{strict} {default} {loose}"
        );
        let m = loose.ceil() as u32;
        assert!(erlang_late(m, load, wait, service) <= 0.10);
        assert!(
            erlang_late(m - 1, load, wait, service) > 0.10
                || f64::from(m - 1) < load / MAX_UTILISATION
        );
        // The drain term is not a percentile: a backlog still starts within W.
        let mut p = params(10.0, 1);
        p.percentile = 0.5;
        let d = decide(&p, inputs(100.0, 5.0, 0.0, 1.0));
        assert_eq!(d.workers, 10.0);
    }

    #[test]
    fn arrivals_alone_are_active_and_set_by_the_steady_term() {
        // 2 jobs/s of 1.5 s each: 3 busy workers.
        let d = decide(&params(10.0, 1), inputs(0.0, 0.0, 2.0, 1.5));
        assert!(d.active);
        assert_eq!(d.bound, Bound::Steady);
        assert_eq!(d.workers, steady_workers(3.0, 10.0, 1.5, PERCENTILE));
        assert!(d.workers >= 3.0 / MAX_UTILISATION);
    }

    #[test]
    fn a_backlog_starts_within_the_target_wait() {
        // 600 jobs of 2 s to start within 60 s: 20 workers; none arriving.
        let d = decide(&params(60.0, 1), inputs(600.0, 10.0, 0.0, 2.0));
        assert_eq!((d.workers, d.bound, d.active), (20.0, Bound::Drain, true));
        // A share of the arrivals' workers on top: 2/s of 2 s keep 4 busy.
        let d = decide(&params(60.0, 1), inputs(600.0, 10.0, 2.0, 2.0));
        assert!(
            (d.workers - (20.0 + ARRIVAL_SHARE * 4.0)).abs() < 1e-9,
            "{d:?}"
        );
        // workersPerReplica divides the workers.
        let e = decide(&params(60.0, 8), inputs(600.0, 10.0, 2.0, 2.0));
        assert!((e.replicas - d.workers / 8.0).abs() < 1e-9);
        // A job longer than the wait needs a worker each, never more.
        let d = decide(&params(1.0, 1), inputs(7.0, 0.5, 0.0, 5.0));
        assert_eq!(d.workers, 7.0);
    }

    #[test]
    fn late_jobs_are_drained_like_the_rest_and_named_catch_up() {
        // Changed deliberately (issue 38): a worker per late job came a pod
        // start too late to help them, and the HPA then held it 5 minutes.
        let p = params(30.0, 1);
        let at = |age: f64| decide(&p, inputs(300.0, age, 1.0, 1.0));
        let drain = ARRIVAL_SHARE * 1.0 + 300.0 / 30.0;
        let on_time = at(30.0);
        assert_eq!(on_time.bound, Bound::Drain);
        assert!((on_time.workers - drain).abs() < 1e-9);
        for age in [30.0 + 1e-6, 60.0, 600.0, 1e9] {
            let late = at(age);
            assert_eq!(late.bound, Bound::CatchUp, "{age}");
            assert!((late.workers - drain).abs() < 1e-9, "{age}: {late:?}");
        }
    }

    #[test]
    fn the_answer_grows_with_backlog_arrivals_and_service_time() {
        let p = params(20.0, 1);
        let base = inputs(40.0, 10.0, 3.0, 1.0);
        let d = decide(&p, base).workers;
        // The oldest age names the bound only (late jobs drain like the rest).
        for more in [
            WaitInputs {
                backlog: 80.0,
                ..base
            },
            WaitInputs {
                arrival_rate: 6.0,
                ..base
            },
            WaitInputs {
                service_time: 2.0,
                ..base
            },
        ] {
            assert!(decide(&p, more).workers > d, "{more:?}");
        }
    }
}
