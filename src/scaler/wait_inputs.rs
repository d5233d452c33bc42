//! The inputs of the `WaitTime` model ([`crate::scaler::wait`]) read from
//! one snapshot: each matched queue's backlog, oldest age, arrival rate and,
//! without `processingTime`, its measured service time.
//! Apart from the model so the model stays arithmetic on numbers, and apart
//! from `query` (which calls it) so that file keeps to selecting queues.

use std::time::Duration;

use crate::scaler::finite;
use crate::scaler::wait::{self, ServiceFrom, WaitInputs, WaitParams};
use crate::snapshot::{Arrivals, JobState, QueueSample, QueueType, ServiceTime, Snapshot};

/// The WaitTime model's inputs over `queues`: backlogs and arrival rates
/// summed, the oldest age the largest, the service time `processingTime`
/// or, without it, the queues' measured service times weighted by the jobs
/// each asks workers to start per second (its arrival rate plus its backlog
/// over `targetWait`), so the busiest queue's jobs count most. Any unknown
/// input the answer depends on is an error naming the queue and the input
/// (the query answers it as `UNAVAILABLE`).
pub fn gather(
    params: &WaitParams,
    window: Duration,
    s: &Snapshot,
    queues: &[&QueueSample],
) -> Result<WaitInputs, String> {
    let mut inputs = WaitInputs {
        backlog: 0.0,
        oldest_age: 0.0,
        newest_age: 0.0,
        arrival_rate: 0.0,
        service_time: params.processing_time.map_or(0.0, |p| p.as_secs_f64()),
        service_from: ServiceFrom::Set,
        finishing: Some(0.0),
        held: None,
    };
    // Measured service times with their weights (jobs to start per second).
    let mut measured: Vec<(ServiceTime, f64)> = Vec::new();
    for q in queues {
        let one = queue_inputs(params, window, s, q)?;
        measured.extend(one.measured);
        if one.backlog > 0 {
            inputs.newest_age = inputs.newest_age.max(one.newest);
        }
        inputs.backlog += one.backlog as f64;
        inputs.oldest_age = inputs.oldest_age.max(one.age);
        inputs.arrival_rate += one.arrivals;
        inputs.finishing = inputs
            .finishing
            .zip(s.history.finish_rate(&q.id(), wait::FINISH_SPAN))
            .map(|(sum, f)| sum + f);
    }
    if params.processing_time.is_none() {
        (inputs.service_time, inputs.service_from) = combine(&measured);
    }
    Ok(inputs)
}

/// One matched queue's inputs.
struct QueueInputs {
    /// Jobs waiting.
    backlog: u64,
    /// The oldest waiting job's age, seconds (0 when none waits).
    age: f64,
    /// The newest waiting job's age, seconds ([`newest_age`]; 0 when none
    /// waits).
    newest: f64,
    /// Jobs arriving per second.
    arrivals: f64,
    /// Without `processingTime`: its measured service time, with its
    /// weight (jobs to start per second); `None` for a queue with no work.
    measured: Option<(ServiceTime, f64)>,
}

/// The inputs of queue `q` of snapshot `s`; an unknown one the answer
/// depends on is an error naming the queue and the input.
fn queue_inputs(
    params: &WaitParams,
    window: Duration,
    s: &Snapshot,
    q: &QueueSample,
) -> Result<QueueInputs, String> {
    let unknown = |what: &str, hint: &str| {
        format!(
            "WaitTime of queue {:?} in source {}: its {what} is unknown{hint}",
            q.name, s.source
        )
    };
    // An input the model would compute with: finite, 0 to the cap.
    let checked = |v: f64, what: &str| {
        finite::input(v, || {
            format!(
                "WaitTime of queue {:?} in source {}: its {what}",
                q.name, s.source
            )
        })
    };
    let missing = q.queue_type == Some(QueueType::Missing);
    let backlog = backlog_of(q, missing, &unknown)?;
    // Nothing waits: nothing is late, whatever the source can tell of ages.
    let age = if backlog == 0 {
        0.0
    } else {
        let age = q.oldest_age_seconds.ok_or_else(|| {
            let why = q.preset.as_ref().and_then(|f| f.age_unknown_why);
            unknown(
                "oldest age",
                why.unwrap_or(
                    " (lists need `age:` in the exporter config, zsets `score: timestamp`, \
                     RabbitMQ messages a timestamp property)",
                ),
            )
        })?;
        checked(age, "oldest age (seconds)")?
    };
    let arrivals = arrivals_of(window, s, q, missing, &checked, &unknown)?;
    let measured = match params.processing_time {
        Some(_) => None,
        None => {
            let starts = arrivals + backlog as f64 / params.target_wait.as_secs_f64();
            measured_service(q, starts, &checked, &unknown)?
        }
    };
    let newest = if backlog > 0 {
        newest_age(backlog as f64, age, arrivals, || {
            s.history.since_last_arrival(&q.id())
        })
    } else {
        0.0
    };
    Ok(QueueInputs {
        backlog,
        age,
        newest,
        arrivals,
        measured,
    })
}

/// Queue `q`'s arrivals per second over `window`: 0 for a `missing` key
/// whose source's readings span the window, else an error saying which
/// counter would measure them.
fn arrivals_of(
    window: Duration,
    s: &Snapshot,
    q: &QueueSample,
    missing: bool,
    checked: &impl Fn(f64, &str) -> Result<f64, String>,
    unknown: &impl Fn(&str, &str) -> String,
) -> Result<f64, String> {
    match s.history.arrival_rate(&q.id(), window) {
        Some(r) => checked(r, "arrival rate (jobs per second)"),
        None if missing && s.history.spans(window) => Ok(0.0),
        None => {
            // The source says why where it reads no counter for them.
            let why = q
                .measures
                .arrivals
                .unmeasurable_why()
                .map_or(String::new(), |why| format!(": {why}"));
            let numbered = s.libraries.arriving_from(Arrivals::IdCounter).join(", ");
            let counted = s
                .libraries
                .arriving_from(Arrivals::ProcessedTotal)
                .join(", ");
            Err(unknown(
                "arrival rate",
                &format!(
                    "{why} (needs a publish counter, as RabbitMQ queues, streams, {numbered} queues and \
                     `counters: enqueued` have, or a processed total beside the depth, as {counted} \
                     queues and `counters: processed` have; read in two polls within window {})",
                    humantime::format_duration(window)
                ),
            ))
        }
    }
}

/// Queue `q`'s backlog: its waiting jobs (a preset's) or ready items; 0
/// for a key that is `missing`.
fn backlog_of(
    q: &QueueSample,
    missing: bool,
    unknown: &impl Fn(&str, &str) -> String,
) -> Result<u64, String> {
    Ok(match (&q.preset, missing) {
        (_, true) => 0,
        (Some(f), false) => f.known(JobState::Waiting).ok_or_else(|| {
            unknown(
                "backlog (waiting jobs)",
                &format!(
                    ": the last poll could not read them (see queue_exporter_poll_errors_total); {} preset",
                    f.preset
                ),
            )
        })?,
        (None, false) => q.ready.ok_or_else(|| {
            unknown(
                "backlog (ready items)",
                ": the last poll could not read this key (see queue_exporter_poll_errors_total)",
            )
        })?,
    })
}

/// Without `processingTime`: queue `q`'s measured service time with its
/// weight `starts` (the jobs it asks workers to start per second);
/// `None` for a queue with no work, which asks nothing of it.
fn measured_service(
    q: &QueueSample,
    starts: f64,
    checked: &impl Fn(f64, &str) -> Result<f64, String>,
    unknown: &impl Fn(&str, &str) -> String,
) -> Result<Option<(ServiceTime, f64)>, String> {
    match q.service_time() {
        Some(t) => {
            checked(t.mean_seconds, "measured service time (seconds per job)")?;
            Ok(Some((t, starts)))
        }
        None if starts <= 0.0 => Ok(None),
        None => Err(unknown(
            "service time",
            &format!(
                ": {}; set processingTime to the average worker time per job",
                q.measures
                    .service_time
                    .missing_why(q.preset.as_deref().and_then(|f| f.finished_jobs))
            ),
        )),
    }
}

/// The age of a queue's newest waiting job, from its `backlog`, its
/// oldest job's `age` and its `arrivals` per second over the window. While
/// jobs arrive, the backlog came over the last backlog / arrivals seconds
/// (first in, first out, the newest arrival waits while any job does), so
/// the newest is that much younger than the oldest. When none arrived
/// within the window, the counter history dates the last arrival
/// (`since_last`, at least the window ago), never older than the oldest;
/// taking the oldest's age then (the history showing no arrival) would put
/// a whole burst's tail on the newest job at once.
pub fn newest_age(
    backlog: f64,
    age: f64,
    arrivals: f64,
    since_last: impl FnOnce() -> Option<f64>,
) -> f64 {
    if arrivals > 0.0 {
        (age - backlog / arrivals).max(0.0)
    } else {
        since_last().map_or(age, |n| n.min(age))
    }
}

/// Several queues' measured service times as one: weighted by each
/// queue's jobs to start per second, or when none has any (all idle), by
/// the jobs each mean is over. [`ServiceFrom::Unneeded`] when none is known.
pub fn combine(measured: &[(ServiceTime, f64)]) -> (f64, ServiceFrom) {
    let Some((first, _)) = measured.first() else {
        return (0.0, ServiceFrom::Unneeded);
    };
    let busy: f64 = measured.iter().map(|(_, w)| w).sum();
    let weight = |t: &ServiceTime, w: f64| if busy > 0.0 { w } else { t.jobs as f64 };
    let total: f64 = measured.iter().map(|(t, w)| weight(t, *w)).sum();
    let sum: f64 = measured
        .iter()
        .map(|(t, w)| weight(t, *w) * t.mean_seconds)
        .sum();
    let mean = if total > 0.0 {
        sum / total
    } else {
        first.mean_seconds
    };
    (mean, ServiceFrom::Measured(first.from))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::ServiceSource;

    fn t(mean_seconds: f64, jobs: u64) -> ServiceTime {
        ServiceTime {
            mean_seconds,
            jobs,
            from: ServiceSource::FinishedJobs,
        }
    }

    #[test]
    fn the_newest_job_is_younger_by_the_backlogs_arrival_span_or_dated_by_the_history() {
        let never = || -> Option<f64> { panic!("the history is not asked while jobs arrive") };
        // 100 jobs at 2 a second came over the last 50 s: the oldest 60 s
        // old, the newest 10 s; never below 0.
        assert_eq!(newest_age(100.0, 60.0, 2.0, never), 10.0);
        assert_eq!(newest_age(100.0, 40.0, 2.0, never), 0.0);
        // None arrived within the window: the history's date, at most the
        // oldest's age; the oldest's when the history saw none.
        assert_eq!(newest_age(100.0, 300.0, 0.0, || Some(75.0)), 75.0);
        assert_eq!(newest_age(100.0, 60.0, 0.0, || Some(500.0)), 60.0);
        assert_eq!(newest_age(100.0, 60.0, 0.0, || None), 60.0);
    }

    #[test]
    fn several_queues_weigh_by_the_jobs_they_ask_to_start() {
        // 3 jobs/s of 1 s and 1 job/s of 5 s: 8 busy workers over 4 jobs/s.
        let (mean, from) = combine(&[(t(1.0, 100), 3.0), (t(5.0, 10), 1.0)]);
        assert!((mean - 2.0).abs() < 1e-9, "{mean}");
        assert_eq!(from, ServiceFrom::Measured(ServiceSource::FinishedJobs));
        // All idle: by the jobs measured.
        let (mean, _) = combine(&[(t(1.0, 30), 0.0), (t(4.0, 10), 0.0)]);
        assert!((mean - 1.75).abs() < 1e-9, "{mean}");
        // None known (every queue idle and unmeasured): not needed.
        assert_eq!(combine(&[]), (0.0, ServiceFrom::Unneeded));
    }
}
