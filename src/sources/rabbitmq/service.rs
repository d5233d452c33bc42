//! A RabbitMQ queue's service time, measured from its acknowledgements
//! ([`AckMeter`]): while a backlog keeps every consumer busy, the worker
//! time per message is consumer-seconds over messages acknowledged.
//! Without a backlog the acknowledgements follow the arrivals, not the
//! workers' capacity, so nothing is measured then: the last figure is kept
//! for the source's `service_time_max_age` (10 minutes by default) and
//! then dropped (unknown, never a guess).
//!
//! The assumption (docs/rabbitmq.md): one consumer is one worker taking one
//! message at a time. A consumer that works on several messages at once
//! (a Celery worker process with `concurrency: 8`) is measured as the time
//! per message per consumer, which is what `workersPerReplica` (consumers
//! per replica) then divides correctly.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::snapshot::{
    ArrivalsMeasure, Measures, QueueId, QueueSample, ServiceMeasure, ServiceSource, ServiceTime,
};

/// The span a measurement covers at most: the service time may change, so
/// an old busy stretch should not outweigh a recent one.
const SPAN: Duration = Duration::from_secs(120);
/// Counter changes of one busy stretch kept at most: a minute of RabbitMQ's
/// default 5 s statistics, and a bound (400 bytes a busy queue) whatever
/// the poll interval.
const MAX_CHANGES: usize = 12;

/// Per-queue acknowledgement readings between polls, turned into
/// [`ServiceTime`]s. Its size is bounded: an entry only for a queue of the
/// last poll that is busy or has a measurement kept, each with at most
/// [`MAX_CHANGES`] marks.
#[derive(Debug)]
pub struct AckMeter {
    /// Each queue's state, by (vhost, name).
    queues: HashMap<QueueId, QueueMeter>,
    /// How long a measurement is kept once the backlog that allowed it is
    /// gone (the source's `service_time_max_age`).
    hold: Duration,
}

/// One queue's busy stretch and its last measurement.
#[derive(Debug, Default)]
struct QueueMeter {
    /// The last reading of the current busy stretch (a backlog and
    /// consumers at each of its polls); `None` once the stretch ended.
    last: Option<Reading>,
    /// The stretch's readings that saw the ack counter change, oldest
    /// first, within [`SPAN`]. RabbitMQ updates its counters once per
    /// `collect_statistics_interval`, so such a reading is within one poll
    /// of the update, and a span between two of them is not skewed by the
    /// interval.
    changes: VecDeque<Mark>,
    /// The last measurement and when it was made.
    kept: Option<(ServiceTime, Instant)>,
}

/// What one poll saw of a busy queue.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Reading {
    /// When the poll finished.
    at: Instant,
    /// The queue's lifetime acknowledgements.
    acks: u64,
    /// Consumers attached.
    consumers: u64,
    /// Consumer-seconds since the stretch began (consumers between two
    /// readings taken as their mean).
    busy_seconds: f64,
}

/// A reading that saw the ack counter change: the part a measurement uses.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Mark {
    /// When the poll finished.
    at: Instant,
    /// The queue's lifetime acknowledgements.
    acks: u64,
    /// Consumer-seconds since the stretch began.
    busy_seconds: f64,
}

impl AckMeter {
    /// A meter with nothing measured that keeps a measurement for `hold`.
    pub fn holding(hold: Duration) -> Self {
        AckMeter {
            queues: HashMap::new(),
            hold,
        }
    }

    /// Reads one poll's queues (with `now`, when the poll finished) and
    /// fills each one's `BrokerFacts::service_time`; forgets queues the poll
    /// did not list.
    pub fn record(&mut self, queues: &mut [QueueSample], now: Instant) {
        let mut next = HashMap::new();
        for q in queues.iter_mut() {
            q.measures = measures(q);
            // A queue with no meter left to find and no busy reading to
            // start one measures nothing: no id is built for it (two
            // strings copied and hashed per queue and poll, where most
            // queues are idle; `stats: totals` reads no acks at all).
            if self.queues.is_empty() && !busy(q) {
                if let Some(b) = q.broker.as_deref_mut() {
                    b.service_time = None;
                }
                continue;
            }
            let id = q.id();
            let mut meter = self.queues.remove(&id).unwrap_or_default();
            let measured = meter.read(
                q.counters().acknowledged,
                q.ready,
                q.broker().consumers,
                now,
                self.hold,
            );
            // A measurement needs consumers, so a sample that has one has
            // broker facts already.
            if let Some(b) = q.broker.as_deref_mut() {
                b.service_time = measured;
            }
            if meter.last.is_some() || meter.kept.is_some() {
                next.insert(id, meter);
            }
        }
        self.queues = next;
    }
}

/// What the source measures of a RabbitMQ queue: its service time from
/// the ack counter (this meter), its arrivals from the publish counter
/// where the method read one (the source says nothing of them otherwise).
fn measures(q: &QueueSample) -> Measures {
    Measures {
        unread: None,
        service_time: ServiceMeasure::AckRate,
        arrivals: if q.counters().published.is_some() {
            ArrivalsMeasure::Counted
        } else {
            ArrivalsMeasure::Unsaid
        },
    }
}

/// Whether a sample is a reading [`QueueMeter::read`] measures from:
/// acknowledgements known while a backlog waits for busy consumers.
fn busy(q: &QueueSample) -> bool {
    q.counters().acknowledged.is_some()
        && q.ready.is_some_and(|r| r > 0)
        && q.broker().consumers.is_some_and(|c| c > 0)
}

impl QueueMeter {
    /// Adds one poll's reading; returns the service time to report.
    fn read(
        &mut self,
        acks: Option<u64>,
        ready: Option<u64>,
        consumers: Option<u64>,
        now: Instant,
        hold: Duration,
    ) -> Option<ServiceTime> {
        match (acks, ready, consumers) {
            (Some(acks), Some(ready), Some(consumers)) if ready > 0 && consumers > 0 => {
                if self.last.is_some_and(|l| acks < l.acks) {
                    // A reset counter (queue re-declared, broker restarted).
                    self.end_stretch();
                }
                let reading = match self.last {
                    None => Reading {
                        at: now,
                        acks,
                        consumers,
                        busy_seconds: 0.0,
                    },
                    Some(l) => {
                        let between = (l.consumers + consumers) as f64 / 2.0;
                        let dt = now.saturating_duration_since(l.at).as_secs_f64();
                        Reading {
                            at: now,
                            acks,
                            consumers,
                            busy_seconds: l.busy_seconds + between * dt,
                        }
                    }
                };
                if self.last.is_some_and(|l| l.acks != acks) {
                    self.changes.push_back(Mark {
                        at: now,
                        acks,
                        busy_seconds: reading.busy_seconds,
                    });
                }
                self.last = Some(reading);
                while self.changes.len() > MAX_CHANGES
                    || self
                        .changes
                        .front()
                        .is_some_and(|f| now.saturating_duration_since(f.at) > SPAN)
                {
                    self.changes.pop_front();
                }
                if let Some(m) = measure(&self.changes) {
                    self.kept = Some((m, now));
                }
            }
            // Not busy, or not known to be: whatever the acknowledgements
            // do now, they do not measure the workers.
            _ => self.end_stretch(),
        }
        if self
            .kept
            .is_some_and(|(_, at)| now.saturating_duration_since(at) > hold)
        {
            self.kept = None;
        }
        self.kept.map(|(m, _)| m)
    }

    /// Forgets the busy stretch (the measurement made from it is kept).
    fn end_stretch(&mut self) {
        self.last = None;
        self.changes.clear();
    }
}

/// Consumer-seconds over acknowledgements between the first and the last
/// counter change of a busy stretch; `None` before two changes.
fn measure(changes: &VecDeque<Mark>) -> Option<ServiceTime> {
    let (first, last) = (changes.front()?, changes.back()?);
    let acks = last.acks.checked_sub(first.acks)?;
    let mean = (last.busy_seconds - first.busy_seconds) / acks as f64;
    (acks > 0 && mean.is_finite() && mean > 0.0).then_some(ServiceTime {
        mean_seconds: mean,
        jobs: acks,
        from: ServiceSource::AckRate,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default `service_time_max_age`.
    const HOLD: Duration = Duration::from_secs(600);

    /// A meter fed one reading per second from `start`.
    struct Feed {
        meter: QueueMeter,
        start: Instant,
        t: u64,
    }

    impl Feed {
        fn new() -> Self {
            Feed {
                meter: QueueMeter::default(),
                start: Instant::now(),
                t: 0,
            }
        }

        /// The reading at the next second.
        fn poll(&mut self, acks: Option<u64>, ready: u64, consumers: u64) -> Option<f64> {
            self.t += 1;
            let now = self.start + Duration::from_secs(self.t);
            self.meter
                .read(acks, Some(ready), Some(consumers), now, HOLD)
                .map(|m| m.mean_seconds)
        }

        /// Skips `secs` seconds without a reading.
        fn wait(&mut self, secs: u64) {
            self.t += secs;
        }
    }

    #[test]
    fn every_queue_says_its_service_time_is_measured_from_the_ack_rate() {
        let mut meter = AckMeter::holding(HOLD);
        // An idle queue of the amqp method (no counters) and a queue whose
        // publish counter the management API read.
        let mut idle = QueueSample::named("idle");
        idle.broker_mut().vhost = "/".into();
        let mut counted = QueueSample::named("counted");
        counted.broker_mut().vhost = "/".into();
        counted.counters_mut().published = Some(10);
        let mut queues = [idle, counted];
        meter.record(&mut queues, Instant::now());
        for q in &queues {
            assert_eq!(
                q.measures.service_time,
                ServiceMeasure::AckRate,
                "{}",
                q.name
            );
            assert!(q.measures.service_time.is_measured());
            assert_eq!(q.measures.unread, None);
        }
        assert!(
            queues[0]
                .measures
                .service_time
                .missing_why(None)
                .contains("ack counter")
        );
        assert_eq!(queues[0].measures.arrivals, ArrivalsMeasure::Unsaid);
        assert_eq!(queues[1].measures.arrivals, ArrivalsMeasure::Counted);
    }

    #[test]
    fn busy_consumers_over_the_ack_rate_is_the_service_time() {
        // 4 consumers, 2 acks a second: 2 s per message.
        let mut f = Feed::new();
        assert_eq!(f.poll(Some(0), 50, 4), None);
        assert_eq!(
            f.poll(Some(2), 50, 4),
            None,
            "one fresh reading spans nothing"
        );
        let m = f.poll(Some(4), 50, 4).unwrap();
        assert!((m - 2.0).abs() < 1e-9, "{m}");
    }

    #[test]
    fn counters_updated_every_few_polls_measure_between_their_updates() {
        // RabbitMQ emits stats every 5 s; polls each second see steps of 10.
        let mut f = Feed::new();
        let mut last = None;
        for s in 0..21u64 {
            last = f.poll(Some(s / 5 * 10), 100, 4);
        }
        let m = last.unwrap();
        assert!((m - 2.0).abs() < 1e-9, "{m}");
    }

    #[test]
    fn consumers_changing_mid_stretch_count_as_their_mean() {
        let mut f = Feed::new();
        f.poll(Some(0), 9, 2);
        f.poll(Some(1), 9, 2);
        f.poll(Some(2), 9, 2); // 2 consumer-seconds for 1 ack so far
        let m = f.poll(Some(4), 9, 4).unwrap(); // + 3 consumer-seconds, 2 acks
        assert!((m - 5.0 / 3.0).abs() < 1e-9, "{m}");
    }

    #[test]
    fn without_a_backlog_nothing_is_measured() {
        // Acks follow arrivals when nothing waits: 4 consumers, 1 ack/s.
        let mut f = Feed::new();
        for s in 0..10 {
            assert_eq!(f.poll(Some(s), 0, 4), None);
        }
    }

    #[test]
    fn without_consumers_or_counters_nothing_is_measured() {
        let mut f = Feed::new();
        for s in 0..10 {
            assert_eq!(f.poll(Some(s), 10, 0), None);
        }
        for _ in 0..10 {
            assert_eq!(f.poll(None, 10, 4), None);
        }
        let mut meter = QueueMeter::default();
        let now = Instant::now();
        assert_eq!(meter.read(Some(1), None, Some(4), now, HOLD), None);
    }

    #[test]
    fn a_measurement_is_kept_for_the_hold_time_then_dropped() {
        let mut f = Feed::new();
        for s in 0..5 {
            f.poll(Some(s * 2), 10, 4);
        }
        assert_eq!(
            f.poll(Some(10), 0, 4),
            Some(2.0),
            "kept: the backlog is gone"
        );
        f.wait(HOLD.as_secs() - 3);
        assert_eq!(
            f.poll(Some(10), 0, 4),
            Some(2.0),
            "kept: within the hold time"
        );
        f.wait(2);
        assert_eq!(f.poll(Some(10), 0, 4), None, "dropped after the hold time");
    }

    #[test]
    fn a_stretch_broken_by_an_empty_queue_starts_over() {
        let mut f = Feed::new();
        f.poll(Some(0), 10, 1);
        f.poll(Some(1), 10, 1);
        f.poll(Some(2), 10, 1);
        assert_eq!(f.poll(Some(2), 10, 1), Some(1.0));
        // Idle for 100 s: the 100 s must not count as busy time.
        f.poll(Some(5), 0, 1);
        f.wait(100);
        f.poll(Some(5), 10, 1);
        f.poll(Some(9), 10, 1);
        assert_eq!(f.poll(Some(13), 10, 1), Some(0.25));
    }

    #[test]
    fn a_counter_reset_starts_over() {
        let mut f = Feed::new();
        for s in 0..4 {
            f.poll(Some(100 + s), 10, 1);
        }
        assert_eq!(f.poll(Some(0), 10, 1), Some(1.0), "the old figure is kept");
        f.poll(Some(3), 10, 1);
        assert_eq!(f.poll(Some(6), 10, 3), Some(2.0 / 3.0));
    }

    #[test]
    fn the_span_is_bounded() {
        let mut f = Feed::new();
        // 200 s at 1 s per message, then 2 s per message for 120 s.
        for s in 0..200 {
            f.poll(Some(s), 10, 1);
        }
        let mut last = None;
        for s in 0..121 {
            last = f.poll(Some(200 + s / 2), 10, 1);
        }
        let m = last.unwrap();
        assert!((m - 2.0).abs() < 0.05, "only the latest changes: {m}");
        assert!(f.meter.changes.len() <= MAX_CHANGES);
    }

    #[test]
    fn the_meter_fills_samples_and_forgets_unlisted_queues() {
        let mut meter = AckMeter::holding(HOLD);
        let start = Instant::now();
        let sample = |acks: u64| {
            let mut q = QueueSample::named("q");
            q.broker_mut().vhost = "/".into();
            q.broker_mut().consumers = Some(2);
            q.ready = Some(5);
            q.counters_mut().acknowledged = Some(acks);
            q
        };
        for s in 0..4u64 {
            let mut qs = vec![sample(s * 4)];
            meter.record(&mut qs, start + Duration::from_secs(s));
            if s == 3 {
                let m = qs[0].service_time().unwrap();
                assert_eq!(m.from, ServiceSource::AckRate);
                assert_eq!(m.jobs, 8);
                assert!((m.mean_seconds - 0.5).abs() < 1e-9);
            }
        }
        meter.record(&mut [], start + Duration::from_secs(5));
        assert!(meter.queues.is_empty());
        // A queue never busy takes no entry.
        let mut idle = vec![QueueSample::named("idle")];
        meter.record(&mut idle, start + Duration::from_secs(6));
        assert!(meter.queues.is_empty());
    }
}
