//! What the source that read a queue says it could read and measure of it
//! ([`Measures`]): whether the last poll read it at all, and whether its
//! service time and its arrivals are measurable, each with why not.
//! Set where the sample is built (a Redis key's read, a library's queue, a
//! RabbitMQ queue), so readers answer from it and never infer a backend's
//! capabilities from which backend it is or which fields a sample has.
//! Three one-byte enums, so a sample stays at 200 bytes; their messages
//! live here, beside the variants a source picks.

/// What a source says it could read and measure of one queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Measures {
    /// `Some`: the last poll could not read this queue, so nothing of it is
    /// known (not even its type), and why; `None`: it was read (or the
    /// source says nothing of its reads).
    pub unread: Option<Unread>,
    /// Whether the source measures the queue's service time, and why not.
    pub service_time: ServiceMeasure,
    /// Whether the source reads a counter the queue's arrivals are measured
    /// from, and why not.
    pub arrivals: ArrivalsMeasure,
}

/// Why the last poll could not read a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unread {
    /// Redis refused or failed a command for this key (an ACL refusal, an
    /// error reply), or the key changed under the poll twice.
    RedisCommand,
}

impl Unread {
    /// What failed, for readers' messages ("the last poll could not read
    /// this key (…)").
    pub fn why(self) -> &'static str {
        match self {
            Unread::RedisCommand => "Redis refused or failed its command",
        }
    }
}

/// Whether and from what a source measures a queue's service time (the
/// worker time per job `WaitTime` needs without `processingTime`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ServiceMeasure {
    /// The source says nothing (a sample no source built): not measured.
    #[default]
    Unsaid,
    /// Measured from the queue library's finished jobs (their start and end
    /// stamps); what a missing measurement means is the library's own word,
    /// `PresetFacts::finished_jobs`.
    FinishedJobs,
    /// Measured from the broker's ack counter while a backlog keeps every
    /// consumer busy (RabbitMQ, `sources/rabbitmq/service.rs`).
    AckRate,
    /// Not measurable: the queue's library keeps no finished jobs with
    /// their start and end times.
    NoFinishedJobs,
    /// Not measurable: a plain Redis key holds no record of its jobs' times.
    PlainKey,
}

impl ServiceMeasure {
    /// Why the service time cannot be measured, or `None` when the source
    /// measures it (a measurement may still be missing right now:
    /// [`ServiceMeasure::missing_why`]).
    pub fn unmeasurable_why(self) -> Option<&'static str> {
        match self {
            ServiceMeasure::FinishedJobs | ServiceMeasure::AckRate => None,
            ServiceMeasure::NoFinishedJobs => Some(
                "that library keeps no finished jobs with their start and end times \
                 (the exporter measures the queues of the libraries that keep them, \
                 docs/presets.md, and RabbitMQ queues)",
            ),
            ServiceMeasure::PlainKey => Some(
                "a plain Redis key holds no record of how long its jobs took \
                 (the exporter measures the queues of the libraries that keep finished jobs, \
                 docs/presets.md, and RabbitMQ queues)",
            ),
            ServiceMeasure::Unsaid => Some("the source does not measure it"),
        }
    }

    /// Whether the source measures it.
    pub fn is_measured(self) -> bool {
        self.unmeasurable_why().is_none()
    }

    /// What a missing measurement of a measured service time means, for
    /// KEDA's message; `library` is the library's own word for its queues
    /// (`PresetFacts::finished_jobs`), where it has one.
    pub fn missing_why(self, library: Option<&'static str>) -> &'static str {
        match (self, library) {
            (ServiceMeasure::FinishedJobs, Some(why)) => why,
            (ServiceMeasure::AckRate, _) => {
                "it is measured from the ack counter while a backlog keeps every consumer \
                 busy, which has not happened within the source's service_time_max_age (or the method reads no \
                 ack counter: amqp, stats: totals, prometheus on RabbitMQ 3.10)"
            }
            _ => "the source has not measured it yet",
        }
    }
}

/// Whether a source reads a counter a queue's arrivals are measured from
/// (a publish counter, or a processed total beside the depth), read in two
/// polls within a trigger's window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ArrivalsMeasure {
    /// The source says nothing (a sample no source built).
    #[default]
    Unsaid,
    /// The source reads such a counter: the rate is known once two polls
    /// within the window read it.
    Counted,
    /// Not measurable: the queue's library keeps neither a job id counter
    /// nor a processed total per queue, and no `counters:` is configured.
    NoLibraryCounter,
    /// Not measurable: a plain Redis key (not a stream) with no
    /// `counters:` configured keeps no count of what was added.
    NoKeyCounter,
}

impl ArrivalsMeasure {
    /// Why the arrivals cannot be measured, or `None` when the source reads
    /// a counter for them (or says nothing).
    pub fn unmeasurable_why(self) -> Option<&'static str> {
        match self {
            ArrivalsMeasure::Unsaid | ArrivalsMeasure::Counted => None,
            ArrivalsMeasure::NoLibraryCounter => Some(
                "its library keeps neither a job id counter nor a processed total per queue, \
                 and the entry has no `counters:`",
            ),
            ArrivalsMeasure::NoKeyCounter => Some(
                "a plain Redis key keeps no count of what was added to it, \
                 and the entry has no `counters:`",
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_that_says_nothing_measures_nothing() {
        let m = Measures::default();
        assert_eq!(m.unread, None);
        assert!(!m.service_time.is_measured());
        assert_eq!(m.arrivals.unmeasurable_why(), None);
        assert_eq!(std::mem::size_of::<Measures>(), 3);
    }

    #[test]
    fn measured_service_times_name_why_one_is_missing() {
        let fin = ServiceMeasure::FinishedJobs;
        assert!(fin.is_measured());
        assert_eq!(fin.missing_why(Some("none finished")), "none finished");
        assert!(
            ServiceMeasure::AckRate
                .missing_why(None)
                .contains("ack counter")
        );
        assert!(
            ServiceMeasure::NoFinishedJobs
                .unmeasurable_why()
                .is_some_and(|w| w.contains("keeps no finished jobs"))
        );
        assert!(
            ServiceMeasure::PlainKey
                .unmeasurable_why()
                .is_some_and(|w| w.contains("plain Redis key"))
        );
    }
}
