//! The model every reader sees: one immutable [`Snapshot`] per source, and
//! the queue samples in it (`QueueSample`, `QueueType`, `Reason`, …).
//!
//! Sources build these; readers (`/metrics`, the KEDA scaler) only read them.
//! Nothing in here talks to a backend. The parts with their own logic live
//! beside this file, re-exported here so every caller names them
//! `crate::snapshot::X`: a source's name scope (`scope`), a preset's facts
//! (`preset`), the poll record (`poll`) and the counter history behind
//! rates (`history`).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

mod coverage;
mod history;
mod libraries;
mod measures;
mod poll;
mod preset;
mod scope;
mod service;

pub use coverage::{
    Coverage, EveryName, ExactNames, Gap, GapKind, HiddenNames, VhostNames, Vouched,
};
pub use history::{CounterHistory, CounterPoint, JobFlow};
pub use libraries::{Arrivals, Libraries, LibraryFacts};
pub use measures::{ArrivalsMeasure, Measures, ServiceMeasure, Unread};
pub use poll::{POLL_DURATION_BUCKETS, PollRecord};
pub use preset::{CountedIn, JobState, JobTotals, PresetFacts, PresetKind, PresetUnit};
pub use scope::{AnyName, NameQuery, QueueScope, Reach};
pub use service::{ServiceSource, ServiceTime};

/// Which kind of backend a source talks to, for logs and what a source
/// reports of itself. Readers never test it to infer what a queue's
/// backend can tell (that is each sample's [`QueueSample::measures`], set
/// by its source; `tests/architecture.rs` holds readers to it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceKind {
    /// A Redis server (lists, zsets, hashes, sets, streams).
    Redis,
    /// A RabbitMQ broker or cluster.
    RabbitMq,
}

impl SourceKind {
    /// The lowercase name used in configs and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Redis => "redis",
            SourceKind::RabbitMq => "rabbitmq",
        }
    }
}

/// One poll's view of one source, immutable once published.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The configured source name; the `source` label.
    pub source: Arc<str>,
    /// The backend kind (see [`SourceKind`]: never a reader's sign of what
    /// a queue can tell).
    pub kind: SourceKind,
    /// How often the source polls; readers derive staleness limits from it.
    pub poll_interval: Duration,
    /// Bumped on every publish, so caches can tell snapshots apart.
    pub generation: u64,
    /// Whether the most recent poll succeeded.
    pub up: bool,
    /// Whether at least one poll (successful or not) has finished.
    pub polled: bool,
    /// The queues seen by the last *successful* poll. Kept when a later poll
    /// fails so the scaler can bridge a short blip; `/metrics` hides them
    /// while `up` is false instead of presenting them as fresh.
    pub queues: Arc<Vec<QueueSample>>,
    /// Names the shape of `queues` (each queue's name, vhost and preset, in
    /// order): two snapshots with the same non-zero layout differ only in
    /// values, so a reader can keep what it matched by position across
    /// polls. 0 means unknown (compare the lists themselves).
    pub layout: u64,
    /// When `queues` was collected (end of the last successful poll).
    pub last_success: Option<SystemTime>,
    /// Source-wide facts such as tracked and dropped keys.
    pub stats: SourceStats,
    /// Cumulative record of the source's polls (durations, errors by reason).
    pub polls: Arc<PollRecord>,
    /// Recent counter readings, oldest first, for rate computations.
    pub history: Arc<CounterHistory>,
    /// Which queue names the source's configuration can ever report; the
    /// scaler uses it to tell a drained queue (0) from a typo (`NOT_FOUND`).
    pub scope: Arc<dyn QueueScope>,
    /// What the last successful poll left unread (keys beyond `max_keys`,
    /// keys held back, vhosts it may not read): the scaler answers a
    /// number only for names it vouches for.
    pub coverage: Arc<Coverage>,
    /// The queue libraries the exporter knows (their names, where their
    /// arrivals come from), for readers' messages: the same for every
    /// source, set where the source is registered.
    pub libraries: Arc<Libraries>,
}

impl Snapshot {
    /// The snapshot a source starts with: nothing polled yet.
    pub fn initial(source: &str, kind: SourceKind, poll_interval: Duration) -> Self {
        Snapshot {
            source: Arc::from(source),
            kind,
            poll_interval,
            generation: 0,
            up: false,
            polled: false,
            queues: Arc::new(Vec::new()),
            layout: 0,
            last_success: None,
            stats: SourceStats::default(),
            polls: Arc::new(PollRecord::default()),
            history: Arc::new(CounterHistory::default()),
            scope: Arc::new(AnyName),
            // Nothing polled yet: no reader answers before a successful
            // poll (it has no data age), which sets the poll's coverage.
            coverage: Arc::new(Coverage::complete()),
            libraries: Arc::default(),
        }
    }

    /// The same snapshot telling of `libraries`.
    pub fn with_libraries(self, libraries: Arc<Libraries>) -> Self {
        Snapshot { libraries, ..self }
    }

    /// The same snapshot with the source's configured scope.
    pub fn with_scope(self, scope: Arc<dyn QueueScope>) -> Self {
        Snapshot { scope, ..self }
    }

    /// Age of the queue data, or `None` if there never was a successful poll.
    pub fn data_age(&self, now: SystemTime) -> Option<Duration> {
        self.last_success
            .map(|t| now.duration_since(t).unwrap_or(Duration::ZERO))
    }
}

/// The layout for `next`, a new queue list replacing `prev` (of layout
/// `prev_layout`): the same when every queue keeps its name, vhost and
/// preset at the same position, else a new, never used, number.
///
/// Measured reason: the scaler's per-query matches were dropped with each
/// poll, so after every poll each of 1,000 trigger maps matched its names
/// again, on the request path; that set the gRPC p99.
pub fn next_layout(prev: &[QueueSample], prev_layout: u64, next: &[QueueSample]) -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let same = prev_layout != 0
        && prev.len() == next.len()
        && prev.iter().zip(next).all(|(a, b)| {
            a.name == b.name
                && a.vhost() == b.vhost()
                && a.preset.as_ref().map(|p| &p.preset) == b.preset.as_ref().map(|p| &p.preset)
        });
    if same {
        prev_layout
    } else {
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }
}

/// Source-wide facts published with each successful poll.
#[derive(Debug, Clone, Default)]
pub struct SourceStats {
    /// Keys (or queues) currently tracked.
    pub tracked_keys: u64,
    /// Keys found by discovery but not tracked because of `max_keys`.
    pub dropped_keys: u64,
    /// Extra per-vhost queue counts (RabbitMQ); empty for Redis.
    pub queues_per_vhost: BTreeMap<String, u64>,
    /// Age values that could not be parsed from peeked items, cumulative.
    pub age_parse_failures: u64,
    /// Keys the last poll served from their previous read, because Redis
    /// reported no change to them since (Redis `client_tracking`).
    pub unchanged_keys: u64,
    /// Seconds since the oldest age histogram the last poll served was
    /// exact (Redis): histograms are measured within a Redis-CPU budget,
    /// so this says how stale one may be. `None`: no histogram served.
    pub age_histogram_staleness_seconds: Option<f64>,
    /// Discovery rounds finished so far (Redis), by kind; `None` for
    /// sources without discovery rounds (RabbitMQ).
    pub discovery_rounds: Option<DiscoveryRounds>,
}

/// Discovery rounds a Redis source has finished, cumulative: what its
/// discovery costs Redis depends on which kind ran (docs/presets.md,
/// "What zero config costs").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiscoveryRounds {
    /// Rounds that scanned for every entry afresh (every round, except
    /// zero config's remembered ones).
    pub full: u64,
    /// Zero-config rounds that made one untyped SCAN pass and asked `TYPE`
    /// only of the names the last rounds had not seen as no queue.
    pub remembered: u64,
    /// Zero-config rounds between keyspace scans, which read the libraries
    /// the last scan found by name (no untyped pass).
    pub libraries: u64,
}

/// The type of a queue as the backend reports it; the `type` label of `queue_info`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum QueueType {
    /// A Redis list.
    List,
    /// A Redis sorted set.
    Zset,
    /// A Redis hash.
    Hash,
    /// A Redis set.
    Set,
    /// A Redis stream, or a RabbitMQ stream queue.
    Stream,
    /// A configured key that does not exist (yet).
    Missing,
    /// Any other type name the backend reports: RabbitMQ's `classic` or
    /// `quorum`, or a Redis type we cannot measure such as `string`.
    Other(String),
    /// A configured key whose jobs a library preset counts in one of its
    /// queues: the sample is only a mark naming that queue, so no job is
    /// counted twice (see [`QueueSample::count_in`]). Held here, not in a
    /// field of its own, so that every sample stays at 200 bytes.
    Counted(Box<CountedIn>),
}

impl QueueType {
    /// The label value used in `queue_info{type}`.
    pub fn as_str(&self) -> &str {
        match self {
            QueueType::List => "list",
            QueueType::Zset => "zset",
            QueueType::Hash => "hash",
            QueueType::Set => "set",
            QueueType::Stream => "stream",
            QueueType::Missing => "none",
            QueueType::Other(t) => t,
            QueueType::Counted(_) => "counted",
        }
    }
}

/// Everything known about one queue at one instant. `None` means unknown,
/// and is never rendered as 0.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueSample {
    /// The queue name exactly as it appears in the `queue` label.
    pub name: String,
    /// Extra labels from the pattern's named captures, sorted by name.
    pub labels: Vec<(String, String)>,
    /// The backend's type for this queue (the `type` label of `queue_info`);
    /// `None` only before discovery.
    pub queue_type: Option<QueueType>,
    /// Total items held (LLEN, ZCARD, HLEN, SCARD, XLEN, `messages`).
    pub depth: Option<u64>,
    /// Items a worker could take now.
    pub ready: Option<u64>,
    /// Items waiting for a future due time.
    pub scheduled: Option<u64>,
    /// Age in seconds of the oldest waiting item; 0 when the queue is known empty.
    pub oldest_age_seconds: Option<f64>,
    /// Distribution of waiting items' ages (timestamp zsets). Shared with
    /// the source's per-key state: between measurements, polls serve the
    /// last one without copying it.
    pub age_histogram: Option<Arc<AgeHistogram>>,
    /// Consumer groups (Redis streams).
    pub groups: Vec<GroupSample>,
    /// What only a broker's queue has (RabbitMQ: vhost, state, unacked,
    /// consumers). Boxed, and `None` for Redis, like the optional parts
    /// below: a poll builds a new list of samples while readers still serve
    /// the last one, so the sample's size is paid twice per queue at the
    /// peak (10,000 Redis queues: 312 bytes a sample before, 200 after;
    /// issue 11, target 7). See [`QueueSample::vhost`] and
    /// [`QueueSample::broker_mut`].
    pub broker: Option<Box<BrokerFacts>>,
    /// Cumulative message counters and lifetime job totals, where the
    /// backend, the library or configured `counters:` keys keep them.
    /// Boxed together, and `None` when both are empty, since most queues
    /// have neither (one box, not two, left room for [`QueueSample::measures`]
    /// within 200 bytes): see [`QueueSample::counters`],
    /// [`QueueSample::jobs`] and their setters.
    pub totals: Option<Box<Totals>>,
    /// What a library preset knows about this logical queue (per-state
    /// depths, paused, stalled work); `None` for plain keys and RabbitMQ.
    pub preset: Option<Box<PresetFacts>>,
    /// What the source says it could read and measure of this queue (read
    /// or not, service time and arrivals measurable or not, and why): set
    /// where the sample is built, so readers never infer it from the
    /// backend's kind or the sample's shape.
    pub measures: Measures,
}

/// A queue's cumulative counters and lifetime job totals, boxed together
/// in [`QueueSample::totals`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Totals {
    /// Cumulative message counters (all `None` where none is kept).
    pub counters: Counters,
    /// Lifetime totals of jobs processed and failed, where the library
    /// keeps them or `counters:` keys are configured.
    pub jobs: JobTotals,
}

impl Totals {
    /// True when nothing is known.
    fn is_empty(&self) -> bool {
        self.counters.is_empty() && self.jobs == JobTotals::default()
    }
}

/// The facts only a broker's queue has (RabbitMQ); see
/// [`QueueSample::broker`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BrokerFacts {
    /// The RabbitMQ vhost the queue lives in.
    pub vhost: String,
    /// Backend-specific state (RabbitMQ `running`, `idle`, ...).
    pub state: Option<String>,
    /// Items delivered but not yet acknowledged.
    pub unacked: Option<u64>,
    /// Attached consumers.
    pub consumers: Option<u64>,
    /// RabbitMQ's consumer utilisation, 0..1.
    pub consumer_utilisation: Option<f64>,
    /// Worker time per message, measured; `None` until measured.
    pub service_time: Option<ServiceTime>,
}

impl QueueSample {
    /// A sample with only identity fields set.
    pub fn named(name: impl Into<String>) -> Self {
        QueueSample {
            name: name.into(),
            ..QueueSample::default()
        }
    }

    /// The queue's cumulative counters (all `None` where the backend keeps
    /// none).
    pub fn counters(&self) -> Counters {
        self.totals
            .as_deref()
            .map(|t| t.counters)
            .unwrap_or_default()
    }

    /// Sets the counters; empty ones take no memory.
    pub fn set_counters(&mut self, counters: Counters) {
        let jobs = self.jobs();
        self.set_totals(Totals { counters, jobs });
    }

    /// Sets counters and job totals; when nothing is known, no memory.
    fn set_totals(&mut self, totals: Totals) {
        self.totals = (!totals.is_empty()).then(|| Box::new(totals));
    }

    /// Makes this sample of a configured key the mark that `by`, a preset
    /// queue, counts its jobs ([`QueueType::Counted`]): only its name and
    /// labels stay (its jobs, age and `counters:` are that queue's), so no
    /// reader counts a job twice. `/metrics` leaves such a sample out; the
    /// scaler names the queue that counts it.
    pub fn count_in(&mut self, by: CountedIn) {
        *self = QueueSample {
            name: std::mem::take(&mut self.name),
            labels: std::mem::take(&mut self.labels),
            queue_type: Some(QueueType::Counted(Box::new(by))),
            ..QueueSample::default()
        };
    }

    /// The preset queue that counts this configured key's jobs, if one does.
    pub fn counted_in(&self) -> Option<&CountedIn> {
        match &self.queue_type {
            Some(QueueType::Counted(by)) => Some(by),
            _ => None,
        }
    }

    /// The counters, to be filled in one by one.
    pub fn counters_mut(&mut self) -> &mut Counters {
        &mut self.totals.get_or_insert_with(Box::default).counters
    }

    /// The RabbitMQ vhost; `None` for Redis.
    pub fn vhost(&self) -> Option<&str> {
        self.broker.as_deref().map(|b| b.vhost.as_str())
    }

    /// The broker's facts (all `None`, vhost empty, for Redis).
    pub fn broker(&self) -> &BrokerFacts {
        static NONE: BrokerFacts = BrokerFacts {
            vhost: String::new(),
            state: None,
            unacked: None,
            consumers: None,
            consumer_utilisation: None,
            service_time: None,
        };
        self.broker.as_deref().unwrap_or(&NONE)
    }

    /// The broker's facts, to be filled in one by one (a RabbitMQ sample).
    pub fn broker_mut(&mut self) -> &mut BrokerFacts {
        self.broker.get_or_insert_with(Box::default)
    }

    /// The lifetime job totals (both `None` where nothing keeps them).
    pub fn jobs(&self) -> JobTotals {
        self.totals.as_deref().map(|t| t.jobs).unwrap_or_default()
    }

    /// Sets the job totals; unknown ones take no memory.
    pub fn set_jobs(&mut self, jobs: JobTotals) {
        let counters = self.counters();
        self.set_totals(Totals { counters, jobs });
    }

    /// How long workers spend per job, where the source measured it
    /// (a library preset's finished jobs, a broker's acknowledgement rate).
    pub fn service_time(&self) -> Option<ServiceTime> {
        self.preset
            .as_deref()
            .and_then(|p| p.service_time)
            .or_else(|| self.broker.as_deref().and_then(|b| b.service_time))
    }

    /// The key that identifies this queue inside its source.
    pub fn id(&self) -> QueueId {
        QueueId {
            vhost: self.vhost().map(str::to_string),
            name: self.name.clone(),
        }
    }
}

/// Identity of a queue within one source.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueId {
    /// RabbitMQ vhost, `None` for Redis.
    pub vhost: Option<String>,
    /// Queue name as in the `queue` label.
    pub name: String,
}

/// Why a poll (or one queue of a poll) failed: the `reason` label of
/// `queue_exporter_poll_errors_total`. One enum, so a typo cannot create a
/// new series; each source exports every reason from the start (at 0), so
/// `rate()` and `increase()` alerts work before the first error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// Could not connect (refused, DNS, TLS handshake, connection dropped).
    Connect,
    /// Credentials or permissions refused (`NOAUTH`, `WRONGPASS`, `NOPERM`, 401/403).
    Auth,
    /// No answer in time.
    Timeout,
    /// The backend answered with an error.
    Backend,
    /// An answer we could not understand.
    Malformed,
    /// An HTTP 5xx status.
    Http5xx,
    /// Any other unusable HTTP status.
    Http4xx,
    /// A response over the size bound.
    TooLarge,
    /// A queue or vhost that is gone.
    NotFound,
    /// A local problem, such as an unreadable secret file.
    Config,
    /// A Redis Cluster whose `CLUSTER SLOTS` leaves hash slots without a
    /// primary (not formed yet, or slots deleted): keys there cannot be read.
    ClusterSlots,
}

impl Reason {
    /// Every reason, in the order they are exported.
    pub const ALL: [Reason; 11] = [
        Reason::Connect,
        Reason::Auth,
        Reason::Timeout,
        Reason::Backend,
        Reason::Malformed,
        Reason::Http5xx,
        Reason::Http4xx,
        Reason::TooLarge,
        Reason::NotFound,
        Reason::Config,
        Reason::ClusterSlots,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Connect => "connect",
            Reason::Auth => "auth",
            Reason::Timeout => "timeout",
            Reason::Backend => "backend",
            Reason::Malformed => "malformed",
            Reason::Http5xx => "http_5xx",
            Reason::Http4xx => "http_4xx",
            Reason::TooLarge => "too_large",
            Reason::NotFound => "not_found",
            Reason::Config => "config",
            Reason::ClusterSlots => "cluster_slots",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A gauge histogram of waiting items' ages.
#[derive(Debug, Clone, PartialEq)]
pub struct AgeHistogram {
    /// `(upper bound in seconds, cumulative count)` pairs, ascending, without `+Inf`.
    pub buckets: Vec<(f64, u64)>,
    /// All waiting items (the `+Inf` bucket and `_gcount`).
    pub count: u64,
}

/// One stream consumer group.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSample {
    /// The group name; the `group` label.
    pub name: String,
    /// Entries not yet delivered to the group; `None` when Redis cannot tell.
    pub lag: Option<u64>,
    /// Entries delivered but not acknowledged (the PEL size); `None` when
    /// the reply lacked the field or it was not a count (absent on `/metrics`).
    pub pending: Option<u64>,
    /// Consumers in the group; `None` when the reply lacked the field or it
    /// was not a count.
    pub consumers: Option<u64>,
}

/// Monotonic message counters as reported by the backend.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counters {
    /// Messages published into the queue (RabbitMQ `publish`, Redis stream
    /// `entries-added`, BullMQ's `id` counter, a `counters: enqueued` key).
    pub published: Option<u64>,
    /// Messages delivered to consumers (RabbitMQ `deliver_get`).
    pub delivered: Option<u64>,
    /// Messages acknowledged.
    pub acknowledged: Option<u64>,
    /// Messages redelivered.
    pub redelivered: Option<u64>,
}

impl Counters {
    /// True when no counter is known.
    pub fn is_empty(&self) -> bool {
        self.published.is_none()
            && self.delivered.is_none()
            && self.acknowledged.is_none()
            && self.redelivered.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A poll holds two lists of samples at its peak (the new one and the
    /// one readers still serve), so a sample's size is paid twice per queue:
    /// what only some queues have stays boxed (issue 11, target 7).
    #[test]
    fn a_sample_stays_small() {
        let size = std::mem::size_of::<QueueSample>();
        assert!(size <= 200, "QueueSample is {size} bytes");
        let redis = QueueSample::named("q");
        assert_eq!(redis.vhost(), None);
        assert_eq!(redis.broker(), &BrokerFacts::default());
        assert_eq!(redis.jobs(), JobTotals::default());
    }

    #[test]
    fn unknown_job_totals_take_no_memory() {
        let mut q = QueueSample::named("q");
        q.set_jobs(JobTotals::default());
        assert!(q.totals.is_none());
        let known = JobTotals {
            processed: Some(3),
            failed: None,
        };
        q.set_jobs(known);
        assert_eq!(q.jobs(), known);
        // Counters and totals share one box: setting one keeps the other.
        let published = Counters {
            published: Some(7),
            ..Counters::default()
        };
        q.set_counters(published);
        assert_eq!((q.counters(), q.jobs()), (published, known));
        q.set_jobs(JobTotals::default());
        assert_eq!(q.counters(), published);
        q.set_counters(Counters::default());
        assert!(q.totals.is_none());
    }

    fn queue(name: &str, depth: u64) -> QueueSample {
        QueueSample {
            name: name.into(),
            depth: Some(depth),
            ..QueueSample::default()
        }
    }

    #[test]
    fn a_queue_sample_stays_small_and_an_optional_one_is_no_larger() {
        // Every poll builds a list of these beside the published one (10,000
        // of them at the memory target): rare parts (a preset's facts, counters) are
        // boxed and the age histogram is shared with the source's state.
        let size = std::mem::size_of::<QueueSample>();
        eprintln!("QueueSample: {size} bytes");
        assert!(size <= 320, "QueueSample grew to {size} bytes");
        // The Redis poll collects `Vec<Option<QueueSample>>` into
        // `Vec<QueueSample>` in place, which needs the same layout.
        assert_eq!(std::mem::size_of::<Option<QueueSample>>(), size);
    }

    #[test]
    fn a_layout_holds_while_only_values_change_and_is_new_otherwise() {
        let first = [queue("a", 1), queue("b", 2)];
        let layout = next_layout(&[], 0, &first);
        assert_ne!(layout, 0);
        // New depths, same queues in the same order: the same layout.
        let values = [queue("a", 5), queue("b", 0)];
        assert_eq!(next_layout(&first, layout, &values), layout);
        // A queue added, removed, renamed or moved: a new layout.
        for changed in [
            vec![queue("a", 1)],
            vec![queue("a", 1), queue("b", 2), queue("c", 3)],
            vec![queue("b", 2), queue("a", 1)],
            vec![queue("a", 1), queue("B", 2)],
        ] {
            let next = next_layout(&first, layout, &changed);
            assert!(next != layout && next != 0, "{changed:?}");
        }
        // Another vhost is another queue.
        let mut other = values.clone();
        other[0].broker_mut().vhost = "v".into();
        assert_ne!(next_layout(&first, layout, &other), layout);
        // An unknown previous layout is never reused.
        assert_ne!(next_layout(&first, 0, &values), 0);
    }
}
