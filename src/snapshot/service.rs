//! A queue's measured service time: how long a worker spends on one job,
//! as the backend's own records show it. The `WaitTime` scaler uses it
//! where a trigger sets no `processingTime` (docs/keda.md).

/// How long workers spend per job, measured from the backend's records.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServiceTime {
    /// Mean worker seconds per job over the jobs measured (for finished
    /// jobs a winsorized mean, so one stuck job does not set it; a job
    /// shorter than its stamps' resolution counts as that, never 0).
    pub mean_seconds: f64,
    /// How many jobs (or, for a rate, acknowledgements) the mean is over:
    /// a mean of few is shown as such, so a reader can weigh it.
    pub jobs: u64,
    /// Where the figure comes from.
    pub from: ServiceSource,
}

/// Where a measured service time comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceSource {
    /// Recently finished jobs' own start and end times (BullMQ
    /// `finishedOn − processedOn`, RQ `ended_at − started_at`).
    FinishedJobs,
    /// Busy consumers divided by the acknowledgement rate, while a backlog
    /// kept every consumer busy (RabbitMQ).
    AckRate,
}

impl ServiceSource {
    /// The value of a `from` label.
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceSource::FinishedJobs => "finished_jobs",
            ServiceSource::AckRate => "ack_rate",
        }
    }
}
