//! The inputs of the `WaitTime` model ([`crate::scaler::wait`]) read from
//! one snapshot: each matched queue's backlog, oldest age and arrival rate.
//! Apart from the model so the model stays arithmetic on numbers, and apart
//! from `query` (which calls it) so that file keeps to selecting queues.

use std::time::Duration;

use crate::scaler::wait::{WaitInputs, WaitParams};
use crate::snapshot::{JobState, QueueSample, QueueType, Snapshot};

/// The WaitTime model's inputs over `queues`: backlogs and arrival rates
/// summed, the oldest age the largest, the service time `processingTime`.
/// Any unknown one is an error naming the queue and the input (the query
/// answers it as `UNAVAILABLE`).
pub fn gather(
    params: &WaitParams,
    window: Duration,
    s: &Snapshot,
    queues: &[&QueueSample],
) -> Result<WaitInputs, String> {
    let mut inputs = WaitInputs {
        backlog: 0.0,
        oldest_age: 0.0,
        arrival_rate: 0.0,
        service_time: params.processing_time.as_secs_f64(),
    };
    for q in queues {
        let unknown = |what: &str, hint: &str| {
            format!(
                "WaitTime of queue {:?} in source {}: its {what} is unknown{hint}",
                q.name, s.source
            )
        };
        let missing = q.queue_type == Some(QueueType::Missing);
        let backlog = match (&q.preset, missing) {
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
        };
        // Nothing waits: nothing is late, whatever the source can tell of ages.
        let age = if backlog == 0 {
            0.0
        } else {
            q.oldest_age_seconds.ok_or_else(|| {
                unknown(
                    "oldest age",
                    " (lists need `age:` in the exporter config, zsets `score: timestamp`, \
                     RabbitMQ messages a timestamp property)",
                )
            })?
        };
        let arrivals = match s.history.arrival_rate(&q.id(), window) {
            Some(r) => r,
            None if missing && s.history.spans(window) => 0.0,
            None => {
                return Err(unknown(
                    "arrival rate",
                    &format!(
                        " (needs a publish counter, as RabbitMQ queues, streams and BullMQ queues have, or for a list `counters: processed`, read in two polls within \
                         window {})",
                        humantime::format_duration(window)
                    ),
                ));
            }
        };
        inputs.backlog += backlog as f64;
        inputs.oldest_age = inputs.oldest_age.max(age);
        inputs.arrival_rate += arrivals;
    }
    Ok(inputs)
}
