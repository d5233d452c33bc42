//! A `prometheus-client` [`Collector`] that encodes a set of snapshots.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeLabelSet, NoLabelSet,
};
use prometheus_client::metrics::MetricType;

use super::Format;
use super::labels::{
    CauseLabels, QueueLabels, ReasonLabels, RoundLabels, SourceLabels, VhostLabels,
};
use crate::snapshot::{GapKind, POLL_DURATION_BUCKETS, QueueSample, Reason, Snapshot};
use crate::time::unix_seconds;

/// Name of the age gauge histogram family.
pub const AGE_HISTOGRAM: &str = "queue_message_age_seconds";

/// Encodes the snapshots it was built with.
#[derive(Debug)]
pub struct SnapshotCollector {
    /// The snapshots to encode, in config order.
    pub snapshots: Vec<Arc<Snapshot>>,
    /// The target format; only the age histogram differs.
    pub format: Format,
}

type Enc<'a> = DescriptorEncoder<'a>;

fn gauges<L: EncodeLabelSet, V: EncodeGaugeValue>(
    enc: &mut Enc<'_>,
    name: &str,
    help: &str,
    metric_type: MetricType,
    samples: impl Iterator<Item = (L, V)>,
) -> std::fmt::Result {
    let mut samples = samples.peekable();
    if samples.peek().is_none() {
        return Ok(());
    }
    let mut family = enc.encode_descriptor(name, help, None, metric_type)?;
    for (labels, value) in samples {
        family.encode_family(&labels)?.encode_gauge(&value)?;
    }
    Ok(())
}

fn counters<L: EncodeLabelSet, V: EncodeCounterValue>(
    enc: &mut Enc<'_>,
    name: &str,
    help: &str,
    samples: impl Iterator<Item = (L, V)>,
) -> std::fmt::Result {
    let mut samples = samples.peekable();
    if samples.peek().is_none() {
        return Ok(());
    }
    let mut family = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, value) in samples {
        family
            .encode_family(&labels)?
            .encode_counter::<NoLabelSet, _, u64>(&value, None)?;
    }
    Ok(())
}

impl SnapshotCollector {
    /// Every queue of every source that is up. Queues of a source that is
    /// down are not shown: they would look fresh while they are not. Nor are
    /// configured keys a preset queue counts (`counted_in`): that queue's
    /// series have their jobs.
    fn queues(&self) -> impl Iterator<Item = (&str, &QueueSample)> + '_ {
        self.snapshots.iter().filter(|s| s.up).flat_map(|s| {
            s.queues
                .iter()
                .filter(|q| q.counted_in().is_none())
                .map(move |q| (&*s.source, q))
        })
    }

    fn queue_gauge<V: EncodeGaugeValue>(
        &self,
        enc: &mut Enc<'_>,
        name: &str,
        help: &str,
        pick: impl Fn(&QueueSample) -> Option<V>,
    ) -> std::fmt::Result {
        gauges(
            enc,
            name,
            help,
            MetricType::Gauge,
            self.queues()
                .filter_map(|(s, q)| Some((QueueLabels::of(s, q), pick(q)?))),
        )
    }

    fn queue_counter(
        &self,
        enc: &mut Enc<'_>,
        name: &str,
        help: &str,
        pick: impl Fn(&QueueSample) -> Option<u64>,
    ) -> std::fmt::Result {
        counters(
            enc,
            name,
            help,
            self.queues()
                .filter_map(|(s, q)| Some((QueueLabels::of(s, q), pick(q)?))),
        )
    }

    fn encode_queues(&self, enc: &mut Enc<'_>) -> std::fmt::Result {
        self.encode_depths(enc)?;
        self.encode_broker_gauges(enc)?;
        self.encode_age_histogram(enc)?;
        self.encode_stream_groups(enc)?;
        self.encode_queue_counters(enc)
    }

    /// The depths (per job state for presets) and what a library preset
    /// tells beside them: pause, stalled and overdue jobs, the oldest
    /// active job's age, service time.
    fn encode_depths(&self, enc: &mut Enc<'_>) -> std::fmt::Result {
        // Plain keys and RabbitMQ queues: one series without `state`.
        // Preset queues: one series per job state, with `state` and `preset`
        // (and no stateless total, so `sum` never counts a job twice).
        gauges(
            enc,
            "queue_depth",
            "Items held by the queue (LLEN, ZCARD, HLEN, SCARD, XLEN, or RabbitMQ messages); \
             for library presets, jobs per normalized state",
            MetricType::Gauge,
            self.queues()
                .filter_map(|(s, q)| Some((QueueLabels::of(s, q), q.depth?)))
                .chain(self.queues().flat_map(|(s, q)| {
                    q.preset.iter().flat_map(move |f| {
                        // An unknown state (`None`) is absent, never 0.
                        f.states.iter().filter_map(move |(state, n)| {
                            Some((
                                QueueLabels {
                                    job_state: Some(*state),
                                    ..QueueLabels::of(s, q)
                                },
                                (*n)?,
                            ))
                        })
                    })
                })),
        )?;
        self.queue_gauge(
            enc,
            "queue_paused",
            "1 if the library preset's queue is paused, else 0",
            |q| q.preset.as_ref()?.paused.map(u64::from),
        )?;
        self.queue_gauge(
            enc,
            "queue_stalled_jobs",
            "Jobs a worker took and lost (expired lease, lock or heartbeat), by the library's own rule",
            |q| q.preset.as_ref()?.stalled,
        )?;
        self.queue_gauge(
            enc,
            "queue_overdue_jobs",
            "Delayed, scheduled or retrying jobs whose due time has passed but that no worker, \
             poller or forwarder has moved to the queue yet (a subset of state delayed/retry)",
            |q| q.preset.as_ref()?.overdue,
        )?;
        self.queue_gauge(
            enc,
            "queue_oldest_active_job_age_seconds",
            "How long the job running longest has run, where the library stamps when a worker \
             took it; 0 when none runs, absent when unknown",
            |q| {
                q.preset
                    .as_ref()?
                    .oldest_active_age_seconds
                    .filter(|a| a.is_finite())
            },
        )?;
        gauges(
            enc,
            "queue_service_time_seconds",
            "Mean worker seconds per job, measured by the exporter (from: finished_jobs, the \
             newest finished jobs' start and end times; ack_rate, busy RabbitMQ consumers over \
             their ack rate); absent where not measured",
            MetricType::Gauge,
            self.queues().filter_map(|(s, q)| {
                let t = q.service_time()?;
                let labels = QueueLabels {
                    from: Some(t.from.as_str()),
                    ..QueueLabels::of(s, q)
                };
                Some((labels, t.mean_seconds))
            }),
        )?;
        Ok(())
    }

    /// What a broker tells of a queue: ready, unacked, scheduled items,
    /// consumers, the oldest item's age.
    fn encode_broker_gauges(&self, enc: &mut Enc<'_>) -> std::fmt::Result {
        self.queue_gauge(
            enc,
            "queue_messages_ready",
            "Items a worker could take now",
            |q| q.ready,
        )?;
        self.queue_gauge(
            enc,
            "queue_messages_unacked",
            "Items delivered to a consumer and not yet acknowledged",
            |q| q.broker().unacked,
        )?;
        self.queue_gauge(
            enc,
            "queue_messages_scheduled",
            "Items waiting for a due time in the future",
            |q| q.scheduled,
        )?;
        self.queue_gauge(
            enc,
            "queue_consumers",
            "Consumers attached to the queue",
            |q| q.broker().consumers,
        )?;
        self.queue_gauge(
            enc,
            "queue_consumer_utilisation",
            "Fraction of time the queue could deliver to consumers immediately (RabbitMQ)",
            |q| q.broker().consumer_utilisation,
        )?;
        self.queue_gauge(
            enc,
            "queue_oldest_message_age_seconds",
            "Age of the oldest waiting item; 0 when none is waiting, absent when unknown",
            // A `-inf` zset score has no age: absent, as unknown, not `+Inf`
            // (the scaler names the input instead).
            |q| q.oldest_age_seconds.filter(|a| a.is_finite()),
        )?;
        Ok(())
    }

    /// Redis streams' consumer groups, then every queue's `queue_info`.
    fn encode_stream_groups(&self, enc: &mut Enc<'_>) -> std::fmt::Result {
        let group_samples = |pick: fn(&crate::snapshot::GroupSample) -> Option<u64>| {
            self.queues().flat_map(move |(s, q)| {
                q.groups.iter().filter_map(move |g| {
                    Some((
                        QueueLabels {
                            group: Some(&g.name),
                            ..QueueLabels::of(s, q)
                        },
                        pick(g)?,
                    ))
                })
            })
        };
        gauges(
            enc,
            "queue_stream_group_lag",
            "Stream entries not yet delivered to the consumer group",
            MetricType::Gauge,
            group_samples(|g| g.lag),
        )?;
        gauges(
            enc,
            "queue_stream_group_pending",
            "Stream entries delivered to the group and not yet acknowledged",
            MetricType::Gauge,
            group_samples(|g| g.pending),
        )?;
        gauges(
            enc,
            "queue_stream_group_consumers",
            "Consumers in the stream consumer group",
            MetricType::Gauge,
            group_samples(|g| g.consumers),
        )?;

        gauges(
            enc,
            "queue_info",
            "Always 1; the type label gives the queue's type (and state where the backend has one)",
            MetricType::Gauge,
            self.queues().filter_map(|(s, q)| {
                let queue_type = q.queue_type.as_ref()?;
                Some((
                    QueueLabels {
                        info: Some((queue_type.as_str(), q.broker().state.as_deref())),
                        ..QueueLabels::of(s, q)
                    },
                    1u64,
                ))
            }),
        )?;
        Ok(())
    }

    /// The queues' counters: messages published, delivered, acknowledged,
    /// redelivered; jobs processed and failed.
    fn encode_queue_counters(&self, enc: &mut Enc<'_>) -> std::fmt::Result {
        self.queue_counter(
            enc,
            "queue_messages_published",
            "Messages published to the queue (RabbitMQ publish, Redis stream entries-added, a queue library's job id counter, counters: enqueued)",
            |q| q.counters().published,
        )?;
        self.queue_counter(
            enc,
            "queue_messages_delivered",
            "Messages delivered to consumers (RabbitMQ deliver_get)",
            |q| q.counters().delivered,
        )?;
        self.queue_counter(
            enc,
            "queue_messages_acknowledged",
            "Messages acknowledged by consumers",
            |q| q.counters().acknowledged,
        )?;
        self.queue_counter(
            enc,
            "queue_messages_redelivered",
            "Messages delivered again after a reject or a lost consumer",
            |q| q.counters().redelivered,
        )?;
        self.queue_counter(
            enc,
            "queue_jobs_processed",
            "Jobs processed, from the library's totals or configured counters keys",
            |q| q.jobs().processed,
        )?;
        self.queue_counter(
            enc,
            "queue_jobs_failed",
            "Jobs failed, from the library's totals or configured counters keys",
            |q| q.jobs().failed,
        )?;
        Ok(())
    }

    /// OpenMetrics: a histogram family that [`super::finish`] retypes to
    /// `gaugehistogram`. Classic text: `_bucket` (untyped, as promtool's
    /// linter requires for `le` outside histograms) and `_gcount` gauges.
    fn encode_age_histogram(&self, enc: &mut Enc<'_>) -> std::fmt::Result {
        let help = "Ages of waiting items (timestamp zsets), counted with ZCOUNT per bucket bound";
        let with_hist = || {
            self.queues()
                .filter_map(|(s, q)| Some((s, q, q.age_histogram.as_ref()?)))
        };
        if with_hist().next().is_none() {
            return Ok(());
        }
        match self.format {
            Format::OpenMetrics => {
                let mut family =
                    enc.encode_descriptor(AGE_HISTOGRAM, help, None, MetricType::Histogram)?;
                for (s, q, h) in with_hist() {
                    // encode_histogram wants per-bucket counts, +Inf included.
                    let mut prev = 0;
                    let mut buckets: Vec<(f64, u64)> = h
                        .buckets
                        .iter()
                        .map(|(b, c)| {
                            let d = c.saturating_sub(prev);
                            prev = *c;
                            (*b, d)
                        })
                        .collect();
                    buckets.push((f64::INFINITY, h.count.saturating_sub(prev)));
                    family
                        .encode_family(&QueueLabels::of(s, q))?
                        .encode_histogram::<NoLabelSet>(0.0, h.count, &buckets, None)?;
                }
                Ok(())
            }
            Format::Classic => {
                let bucket_name = format!("{AGE_HISTOGRAM}_bucket");
                let mut family =
                    enc.encode_descriptor(&bucket_name, help, None, MetricType::Unknown)?;
                for (s, q, h) in with_hist() {
                    let bounds = h
                        .buckets
                        .iter()
                        .map(|(b, c)| (format!("{b:?}"), *c))
                        .chain([("+Inf".to_string(), h.count)]);
                    for (b, c) in bounds {
                        let labels = QueueLabels {
                            le: Some(&b),
                            ..QueueLabels::of(s, q)
                        };
                        family.encode_family(&labels)?.encode_gauge(&c)?;
                    }
                }
                gauges(
                    enc,
                    &format!("{AGE_HISTOGRAM}_gcount"),
                    "Waiting items counted by queue_message_age_seconds_bucket",
                    MetricType::Gauge,
                    with_hist().map(|(s, q, h)| (QueueLabels::of(s, q), h.count)),
                )
            }
        }
    }

    fn encode_self(&self, enc: &mut Enc<'_>) -> std::fmt::Result {
        self.encode_source_gauges(enc)?;
        self.encode_source_counters(enc)?;
        self.encode_rabbitmq_queues(enc)?;
        self.encode_poll_durations(enc)
    }

    /// Each source's snapshot, with its labels.
    fn sources(&self) -> impl Iterator<Item = (SourceLabels, &Arc<Snapshot>)> + '_ {
        self.snapshots.iter().map(|s| {
            (
                SourceLabels {
                    source: s.source.to_string(),
                },
                s,
            )
        })
    }

    /// Each source's state: up, last success, keys tracked, dropped and
    /// unchanged, coverage gaps, histogram staleness.
    fn encode_source_gauges(&self, enc: &mut Enc<'_>) -> std::fmt::Result {
        let src = || self.sources();
        gauges(
            enc,
            "queue_exporter_source_up",
            "1 if the last poll of the source succeeded",
            MetricType::Gauge,
            src().map(|(l, s)| (l, u64::from(s.up))),
        )?;
        gauges(
            enc,
            "queue_exporter_last_success_timestamp_seconds",
            "Unix time of the source's last successful poll",
            MetricType::Gauge,
            src().filter_map(|(l, s)| Some((l, unix_seconds(s.last_success?)))),
        )?;
        gauges(
            enc,
            "queue_exporter_tracked_keys",
            "Queues (keys) the source is tracking",
            MetricType::Gauge,
            src()
                .filter(|(_, s)| s.last_success.is_some())
                .map(|(l, s)| (l, s.stats.tracked_keys)),
        )?;
        gauges(
            enc,
            "queue_exporter_dropped_keys",
            "Queues (keys) found but not tracked because of max_keys",
            MetricType::Gauge,
            src()
                .filter(|(_, s)| s.last_success.is_some())
                .map(|(l, s)| (l, s.stats.dropped_keys)),
        )?;
        gauges(
            enc,
            "queue_exporter_coverage_gaps",
            "What the last successful poll left unread, by cause (max_keys, label_collision, \
             refused, check_failed, discovery_bounds, round_unfinished): KEDA gets no number \
             for a name a gap may hide; 0 for every cause when the poll read everything",
            MetricType::Gauge,
            self.snapshots.iter().filter(|s| s.up).flat_map(|s| {
                GapKind::ALL.into_iter().map(move |kind| {
                    let labels = CauseLabels {
                        source: s.source.to_string(),
                        cause: kind.as_str().to_string(),
                    };
                    (labels, s.coverage.count(kind) as u64)
                })
            }),
        )?;
        gauges(
            enc,
            "queue_exporter_unchanged_keys",
            "Keys the last poll served from their previous read: Redis reported no change since",
            MetricType::Gauge,
            src()
                .filter(|(_, s)| s.last_success.is_some())
                .map(|(l, s)| (l, s.stats.unchanged_keys)),
        )?;
        gauges(
            enc,
            "queue_exporter_message_age_staleness_seconds",
            "Seconds since the oldest age histogram the last poll served was measured",
            MetricType::Gauge,
            src()
                .filter(|(_, s)| s.last_success.is_some())
                .filter_map(|(l, s)| Some((l, s.stats.age_histogram_staleness_seconds?))),
        )?;
        Ok(())
    }

    /// Each source's counters: age parse failures, poll errors by reason,
    /// discovery rounds by kind.
    fn encode_source_counters(&self, enc: &mut Enc<'_>) -> std::fmt::Result {
        let src = || self.sources();
        counters(
            enc,
            "queue_exporter_age_parse_failures",
            "Peeked items whose timestamp could not be read",
            src()
                .filter(|(_, s)| s.polled)
                .map(|(l, s)| (l, s.stats.age_parse_failures)),
        )?;
        counters(
            enc,
            "queue_exporter_poll_errors",
            "Failed polls (and per-queue failures) by reason",
            self.snapshots.iter().flat_map(|s| {
                // Every reason, at 0 until it happens.
                Reason::ALL.into_iter().map(move |reason| {
                    let n = s.polls.errors.get(&reason).copied().unwrap_or(0);
                    (
                        ReasonLabels {
                            source: s.source.to_string(),
                            reason: reason.as_str().to_string(),
                        },
                        n,
                    )
                })
            }),
        )?;
        counters(
            enc,
            "queue_exporter_discovery_rounds",
            "Discovery rounds finished (Redis), by kind: full, remembered (zero config's one-pass scans) or libraries (zero config's rounds between scans)",
            self.snapshots.iter().flat_map(|s| {
                let rounds = s.stats.discovery_rounds;
                let source = s.source.to_string();
                rounds.into_iter().flat_map(move |r| {
                    [
                        ("full", r.full),
                        ("remembered", r.remembered),
                        ("libraries", r.libraries),
                    ]
                    .map(|(round, n)| {
                        let source = source.clone();
                        let round = round.to_string();
                        (RoundLabels { source, round }, n)
                    })
                })
            }),
        )?;
        Ok(())
    }

    /// RabbitMQ queues seen in the last poll, by vhost.
    fn encode_rabbitmq_queues(&self, enc: &mut Enc<'_>) -> std::fmt::Result {
        gauges(
            enc,
            "queue_exporter_rabbitmq_queues",
            "RabbitMQ queues seen in the last poll, by vhost",
            MetricType::Gauge,
            self.snapshots.iter().filter(|s| s.up).flat_map(|s| {
                s.stats.queues_per_vhost.iter().map(move |(vhost, n)| {
                    (
                        VhostLabels {
                            source: s.source.to_string(),
                            vhost: vhost.clone(),
                        },
                        *n,
                    )
                })
            }),
        )?;
        Ok(())
    }

    /// How long each source's polls took, as a histogram.
    fn encode_poll_durations(&self, enc: &mut Enc<'_>) -> std::fmt::Result {
        let polled: Vec<_> = self
            .snapshots
            .iter()
            .filter(|s| s.polls.duration_count > 0)
            .collect();
        if !polled.is_empty() {
            let mut family = enc.encode_descriptor(
                "queue_exporter_poll_duration_seconds",
                "Time taken by each poll of the source, discovery included",
                None,
                MetricType::Histogram,
            )?;
            for s in polled {
                let t = &s.polls;
                let mut prev = 0;
                let mut buckets: Vec<(f64, u64)> = POLL_DURATION_BUCKETS
                    .iter()
                    .zip(&t.duration_bucket_counts)
                    .map(|(b, c)| {
                        let d = c.saturating_sub(prev);
                        prev = *c;
                        (*b, d)
                    })
                    .collect();
                buckets.push((f64::INFINITY, t.duration_count.saturating_sub(prev)));
                family
                    .encode_family(&SourceLabels {
                        source: s.source.to_string(),
                    })?
                    .encode_histogram::<NoLabelSet>(
                        t.duration_sum,
                        t.duration_count,
                        &buckets,
                        None,
                    )?;
            }
        }
        Ok(())
    }
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        self.encode_queues(&mut encoder)?;
        self.encode_self(&mut encoder)
    }
}
