//! The model every reader sees: one immutable [`Snapshot`] per source.
//!
//! Sources build these; readers (`/metrics`, the KEDA scaler) only read them.
//! Nothing in here talks to a backend.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Which kind of backend a source talks to; readers use it for labels and
/// to know which metadata (for example `vhost`) applies.
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
    /// The backend kind, so readers can apply kind-specific metadata.
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
        }
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

/// A queue name or glob a reader asks about, in the terms a [`QueueScope`]
/// needs. Readers build it; sources' scopes answer it.
#[derive(Clone, Copy)]
pub struct NameQuery<'a> {
    /// The text as given: an exact name, or a glob.
    pub text: &'a str,
    /// Whether `text` is a glob (else it names one queue exactly).
    pub is_glob: bool,
    /// What every name the glob matches starts with (the whole text when exact).
    pub literal_prefix: &'a str,
    /// Whether the query selects this queue name.
    pub selects: &'a dyn Fn(&str) -> bool,
    /// The RabbitMQ vhost the query is restricted to, if any.
    pub vhost: Option<&'a str>,
}

impl fmt::Debug for NameQuery<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NameQuery")
            .field("text", &self.text)
            .field("is_glob", &self.is_glob)
            .field("vhost", &self.vhost)
            .finish()
    }
}

/// How far a source's configuration reaches over the names a query selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// No name the query selects can ever be reported by this source: a
    /// typo, as far as this source is concerned.
    Never,
    /// Some selected names might be reported (or the scope cannot tell).
    Some,
    /// Every name the query selects would be reported if it existed, so a
    /// name that does not exist right now is an empty queue (Redis deletes
    /// a key when it empties).
    All,
}

/// What queue names a source's *configuration* can produce, independent of
/// what exists right now. Implemented by each source kind from its config.
pub trait QueueScope: fmt::Debug + Send + Sync {
    /// How far this source reaches over the names `query` selects.
    fn reach(&self, query: &NameQuery<'_>) -> Reach;
}

/// The scope of a source that says nothing about its names: it might hold
/// anything and covers nothing (the scope of [`Snapshot::initial`]).
#[derive(Debug, Clone, Copy)]
pub struct AnyName;

impl QueueScope for AnyName {
    fn reach(&self, _query: &NameQuery<'_>) -> Reach {
        Reach::Some
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
    /// Cumulative message counters, where the backend keeps them.
    /// Boxed, and `None` when empty, since most queues have none: see
    /// [`QueueSample::counters`] and [`QueueSample::set_counters`].
    pub counters: Option<Box<Counters>>,
    /// What a library preset knows about this logical queue (per-state
    /// depths, paused, stalled work); `None` for plain keys and RabbitMQ.
    pub preset: Option<Box<PresetFacts>>,
    /// Lifetime totals of jobs processed and failed, where the library keeps
    /// them or `counters:` keys are configured; `None` when neither is
    /// known. See [`QueueSample::jobs`] and [`QueueSample::set_jobs`].
    pub jobs: Option<Box<JobTotals>>,
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
}

/// A job's state as one normalized word: the `state` label of
/// `queue_depth` for preset queues. Each library's own words map onto these
/// (README, "Presets").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum JobState {
    /// Ready for a worker, prioritized included.
    Waiting,
    /// Taken by a worker.
    Active,
    /// Scheduled for later.
    Delayed,
    /// Failed and waiting for a retry.
    Retry,
    /// Dead or archived.
    Failed,
    /// Finished (as far as the library keeps them).
    Completed,
    /// A word of the presets issue's vocabulary, kept so `state: paused`
    /// stays a valid trigger word; no preset maps a key to it: a paused
    /// queue's backlog stays `Waiting` and the pause is `PresetFacts::paused`.
    Paused,
}

impl JobState {
    /// Every state, in exposition order.
    pub const ALL: [JobState; 7] = [
        JobState::Waiting,
        JobState::Active,
        JobState::Delayed,
        JobState::Retry,
        JobState::Failed,
        JobState::Completed,
        JobState::Paused,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Waiting => "waiting",
            JobState::Active => "active",
            JobState::Delayed => "delayed",
            JobState::Retry => "retry",
            JobState::Failed => "failed",
            JobState::Completed => "completed",
            JobState::Paused => "paused",
        }
    }

    /// Parses a label value (lowercase, as written in trigger metadata).
    pub fn parse(s: &str) -> Option<JobState> {
        JobState::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A preset's view of one logical queue, spread by the library over
/// several keys.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PresetFacts {
    /// The preset's name (`rq`, `sidekiq`, ...): the `preset` label, so two
    /// libraries' `default` queues stay distinct series.
    pub preset: &'static str,
    /// What the sample stands for: one logical queue, or keys its queues
    /// share. Set by the preset, never inferred from which states are present
    /// (a state can be absent because its read was refused).
    pub unit: PresetUnit,
    /// Jobs per state. A state the library does not have is absent (it holds
    /// no jobs); a state it has whose read failed (an ACL refusal, a reply we
    /// cannot read) is present as `None`: unknown, never 0.
    pub states: BTreeMap<JobState, Option<u64>>,
    /// Whether the queue is paused; `None` where the library cannot pause.
    pub paused: Option<bool>,
    /// Work a worker took and lost, by the library's own definition;
    /// `None` where it cannot be told.
    pub stalled: Option<u64>,
    /// Delayed, scheduled or retrying jobs whose due time has passed but
    /// that still sit in the library's time-ordered set (a subset of
    /// `delayed`/`retry`): nothing (worker, poller, forwarder) has moved
    /// them. `None` where the library has no such set.
    pub overdue: Option<u64>,
}

/// What a preset sample stands for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PresetUnit {
    /// One logical queue of the library: its backlog is `waiting` and it has
    /// an oldest job.
    #[default]
    Queue,
    /// Keys the library's queues share (Sidekiq's and Celery's `(all)`, the
    /// priority-zset layout's `processing`/`completed`/`dlq`): no job waits
    /// in them, so they have no age and hold no `waiting` jobs.
    Shared,
}

impl PresetFacts {
    /// The sum of `states`' depths: states the library lacks hold no jobs
    /// (0); `None` when any asked state it has is unknown, so a refused read
    /// never turns into a smaller sum. [`PresetFacts::unknown_states`] names them.
    pub fn depth_of(&self, states: &[JobState]) -> Option<u64> {
        states
            .iter()
            .map(|s| self.states.get(s).copied().unwrap_or(Some(0)))
            .sum()
    }

    /// Which of `states` the library has but the poll could not read.
    pub fn unknown_states(&self, states: &[JobState]) -> Vec<JobState> {
        states
            .iter()
            .copied()
            .filter(|s| self.states.get(s) == Some(&None))
            .collect()
    }

    /// The known depth of `state`, if the library has it and it was read.
    pub fn known(&self, state: JobState) -> Option<u64> {
        self.states.get(&state).copied().flatten()
    }
}

/// Lifetime job totals (library counters or configured `counters:` keys).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct JobTotals {
    /// Jobs processed (successfully or not, as the library counts).
    pub processed: Option<u64>,
    /// Jobs failed.
    pub failed: Option<u64>,
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
        self.counters.as_deref().copied().unwrap_or_default()
    }

    /// Sets the counters; empty ones take no memory.
    pub fn set_counters(&mut self, counters: Counters) {
        self.counters = (!counters.is_empty()).then(|| Box::new(counters));
    }

    /// The counters, to be filled in one by one.
    pub fn counters_mut(&mut self) -> &mut Counters {
        self.counters.get_or_insert_with(Box::default)
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
        };
        self.broker.as_deref().unwrap_or(&NONE)
    }

    /// The broker's facts, to be filled in one by one (a RabbitMQ sample).
    pub fn broker_mut(&mut self) -> &mut BrokerFacts {
        self.broker.get_or_insert_with(Box::default)
    }

    /// The lifetime job totals (both `None` where nothing keeps them).
    pub fn jobs(&self) -> JobTotals {
        self.jobs.as_deref().copied().unwrap_or_default()
    }

    /// Sets the job totals; unknown ones take no memory.
    pub fn set_jobs(&mut self, jobs: JobTotals) {
        self.jobs = (jobs != JobTotals::default()).then(|| Box::new(jobs));
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
}

impl Reason {
    /// Every reason, in the order they are exported.
    pub const ALL: [Reason; 10] = [
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
    /// Messages published into the queue (RabbitMQ `publish`, Redis stream `entries-added`).
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

/// Cumulative record of one source's polls.
#[derive(Debug, Clone, Default)]
pub struct PollRecord {
    /// Poll duration histogram: cumulative counts per bucket of [`POLL_DURATION_BUCKETS`].
    pub duration_bucket_counts: Vec<u64>,
    /// Sum of all poll durations in seconds.
    pub duration_sum: f64,
    /// Number of polls measured.
    pub duration_count: u64,
    /// Failed polls (and per-queue failures) by reason.
    pub errors: BTreeMap<Reason, u64>,
}

/// Upper bounds (seconds) of the poll duration histogram.
pub const POLL_DURATION_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

impl PollRecord {
    /// Records one poll's duration.
    pub fn observe(&mut self, seconds: f64) {
        if self.duration_bucket_counts.len() != POLL_DURATION_BUCKETS.len() {
            self.duration_bucket_counts = vec![0; POLL_DURATION_BUCKETS.len()];
        }
        for (bound, count) in POLL_DURATION_BUCKETS
            .iter()
            .zip(self.duration_bucket_counts.iter_mut())
        {
            if seconds <= *bound {
                *count += 1;
            }
        }
        self.duration_sum += seconds;
        self.duration_count += 1;
    }

    /// Counts one error with a reason label.
    pub fn count_error(&mut self, reason: Reason) {
        *self.errors.entry(reason).or_insert(0) += 1;
    }
}

/// Counter readings over time, for rates computed by readers.
///
/// Bounded whatever the poll frequency or the number of queues: readings are
/// kept at most one per second for the last minute and one per 15 s up to
/// [`Self::RETENTION`] (at most ~120 readings), and only the two counters
/// rates use are kept, as blocks of an array per reading over a queue index
/// that consecutive readings share while the set of queues does not change;
/// unchanged blocks are shared too (see [`VALUE_BLOCK`]).
#[derive(Debug, Clone, Default)]
pub struct CounterHistory {
    /// Readings, oldest first.
    points: VecDeque<Arc<StoredPoint>>,
}

/// All counters of one source at one instant, as a source reports them.
#[derive(Debug, Clone)]
pub struct CounterPoint {
    /// When the counters were read.
    pub at: SystemTime,
    /// Counters per queue (only queues that have any).
    pub counters: HashMap<QueueId, Counters>,
}

/// One kept reading: the counters rates use, by position in `index`.
#[derive(Debug)]
struct StoredPoint {
    /// When the counters were read.
    at: SystemTime,
    /// Queue → position in `blocks`; shared with neighbouring readings.
    index: Arc<HashMap<QueueId, usize>>,
    /// `(published, delivered)` by position, [`VALUE_BLOCK`] queues per
    /// block; `u64::MAX` where unknown. A block equal to the previous
    /// reading's (over the same index) is shared with it.
    blocks: Box<[ValueBlock]>,
}

/// Up to [`VALUE_BLOCK`] queues' `(published, delivered)`.
type ValueBlock = Arc<[(u64, u64)]>;

/// Queues per block of a kept reading. Idle queues' counters do not move,
/// so their blocks are shared by consecutive readings: 5,000 idle RabbitMQ
/// queues cost ~1 KB per reading instead of 80 KB (~120 readings are kept).
/// Small enough that one busy queue unshares little, large enough that the
/// per-block pointer and count stay a few percent.
const VALUE_BLOCK: usize = 64;

impl StoredPoint {
    /// The counters of `queue`, with only the fields rates use.
    fn get(&self, queue: &QueueId) -> Option<Counters> {
        let i = *self.index.get(queue)?;
        let (published, delivered) = *self.blocks.get(i / VALUE_BLOCK)?.get(i % VALUE_BLOCK)?;
        let known = |v: u64| (v != u64::MAX).then_some(v);
        Some(Counters {
            published: known(published),
            delivered: known(delivered),
            ..Counters::default()
        })
    }
}

impl CounterHistory {
    /// How long readings are kept; the longest rate window a reader may ask for.
    pub const RETENTION: Duration = Duration::from_secs(15 * 60);
    /// Readings younger than this (from the newest) are kept one per second.
    const FINE_SPAN: Duration = Duration::from_secs(60);
    /// Spacing of older readings.
    const COARSE_STEP: Duration = Duration::from_secs(15);

    /// Returns a new history with `point` appended, thinned to the kept
    /// resolution and without readings older than [`Self::RETENTION`].
    pub fn with_point(&self, point: CounterPoint) -> CounterHistory {
        let stored = Arc::new(self.store(point));
        let newest = stored.at;
        let mut kept: VecDeque<Arc<StoredPoint>> = VecDeque::with_capacity(self.points.len() + 1);
        // Oldest first: keep a reading when it lies at least one step (by
        // its age) after the last one kept; the newest is always kept.
        let mut last_kept: Option<SystemTime> = None;
        for p in &self.points {
            let age = newest.duration_since(p.at).unwrap_or(Duration::ZERO);
            if age > Self::RETENTION {
                continue;
            }
            let step = if age <= Self::FINE_SPAN {
                Duration::from_millis(900)
            } else {
                Self::COARSE_STEP - Duration::from_millis(500)
            };
            let far_enough =
                last_kept.is_none_or(|l| p.at.duration_since(l).unwrap_or(Duration::ZERO) >= step);
            if far_enough {
                kept.push_back(p.clone());
                last_kept = Some(p.at);
            }
        }
        kept.push_back(stored);
        CounterHistory { points: kept }
    }

    /// The stored form of `point`, sharing the newest reading's index when
    /// the queues are the same.
    fn store(&self, point: CounterPoint) -> StoredPoint {
        let same_queues = self.points.back().filter(|last| {
            last.index.len() == point.counters.len()
                && point.counters.keys().all(|q| last.index.contains_key(q))
        });
        let index = match same_queues {
            Some(last) => last.index.clone(),
            None => Arc::new(
                point
                    .counters
                    .keys()
                    .enumerate()
                    .map(|(i, q)| (q.clone(), i))
                    .collect(),
            ),
        };
        let mut values = vec![(u64::MAX, u64::MAX); index.len()];
        for (q, c) in &point.counters {
            if let Some(&i) = index.get(q) {
                values[i] = (
                    c.published.unwrap_or(u64::MAX),
                    c.delivered.unwrap_or(u64::MAX),
                );
            }
        }
        // Positions mean the same queues only over the same index.
        let previous = self
            .points
            .back()
            .filter(|last| Arc::ptr_eq(&last.index, &index))
            .map(|last| &last.blocks);
        let blocks = values
            .chunks(VALUE_BLOCK)
            .enumerate()
            .map(|(b, chunk)| match previous.and_then(|p| p.get(b)) {
                Some(old) if **old == *chunk => old.clone(),
                _ => Arc::from(chunk),
            })
            .collect();
        StoredPoint {
            at: point.at,
            index,
            blocks,
        }
    }

    /// How many readings are kept.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// Whether there are no readings.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Whether the readings span `window`: a reading older than the newest
    /// lies inside it, so a queue without counters in them has a rate of 0.
    pub fn spans(&self, window: Duration) -> bool {
        let Some(newest) = self.points.back() else {
            return false;
        };
        let start = newest
            .at
            .checked_sub(window)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        self.points
            .iter()
            .any(|p| p.at >= start && p.at < newest.at)
    }

    /// Per-second rate of `pick(counters)` for `queue` over `window`, from the
    /// oldest reading inside the window to the newest. `None` when fewer than
    /// two readings cover the queue. A counter reset counts from zero. Only
    /// `published` and `delivered` are kept for rates.
    pub fn rate(
        &self,
        queue: &QueueId,
        window: Duration,
        pick: impl Fn(&Counters) -> Option<u64>,
    ) -> Option<f64> {
        let newest = self.points.back()?;
        let last = pick(&newest.get(queue)?)?;
        let start = newest
            .at
            .checked_sub(window)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let first = self
            .points
            .iter()
            .filter(|p| p.at >= start && p.at < newest.at)
            .find_map(|p| Some((p.at, pick(&p.get(queue)?)?)))?;
        let seconds = newest.at.duration_since(first.0).ok()?.as_secs_f64();
        if seconds <= 0.0 {
            return None;
        }
        let delta = if last >= first.1 {
            last - first.1
        } else {
            last
        };
        Some(delta as f64 / seconds)
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
        assert!(q.jobs.is_none());
        let known = JobTotals {
            processed: Some(3),
            failed: None,
        };
        q.set_jobs(known);
        assert_eq!(q.jobs(), known);
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

    fn point(at_secs: u64, published: u64) -> CounterPoint {
        let mut counters = HashMap::new();
        counters.insert(
            QueueId {
                vhost: None,
                name: "q".into(),
            },
            Counters {
                published: Some(published),
                ..Counters::default()
            },
        );
        CounterPoint {
            at: SystemTime::UNIX_EPOCH + Duration::from_secs(at_secs),
            counters,
        }
    }

    #[test]
    fn rate_averages_over_the_window() {
        let mut h = CounterHistory::default();
        for (t, v) in [(1000, 0), (1030, 30), (1060, 90), (1090, 150)] {
            h = h.with_point(point(t, v));
        }
        let q = QueueId {
            vhost: None,
            name: "q".into(),
        };
        // Window 60 s: from t=1030 (30) to t=1090 (150) → 2/s.
        let r = h
            .rate(&q, Duration::from_secs(60), |c| c.published)
            .unwrap();
        assert!((r - 2.0).abs() < 1e-9, "{r}");
        // A single reading gives no rate.
        let one = CounterHistory::default().with_point(point(1, 5));
        assert_eq!(one.rate(&q, Duration::from_secs(60), |c| c.published), None);
    }

    #[test]
    fn history_drops_old_points() {
        let mut h = CounterHistory::default();
        for t in 0..2000u64 {
            h = h.with_point(point(t, t));
        }
        assert!(h.len() <= CounterHistory::RETENTION.as_secs() as usize + 2);
    }

    #[test]
    fn history_size_does_not_grow_with_poll_frequency() {
        let q = QueueId {
            vhost: None,
            name: "q".into(),
        };
        for poll_ms in [100u64, 250, 1000] {
            let mut h = CounterHistory::default();
            let polls = 20 * 60 * 1000 / poll_ms;
            for i in 0..polls {
                let mut p = point(0, i);
                p.at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_000_000 + i * poll_ms);
                h = h.with_point(p);
            }
            // ~60 fine readings plus ~56 coarse ones, whatever the interval.
            assert!((100..=125).contains(&h.len()), "{poll_ms} ms: {}", h.len());
            // Consecutive readings over the same queues share one index.
            let first = &h.points[0].index;
            assert!(h.points.iter().all(|p| Arc::ptr_eq(&p.index, first)));
            // The counter moves every poll: no block is shared.
            assert!(
                h.points
                    .iter()
                    .zip(h.points.iter().skip(1))
                    .all(|(a, b)| !Arc::ptr_eq(&a.blocks[0], &b.blocks[0]))
            );
            // Rates stay exact over short and long windows: 1 count per poll.
            let per_second = 1000.0 / poll_ms as f64;
            for window in [2, 60, 600] {
                let r = h
                    .rate(&q, Duration::from_secs(window), |c| c.published)
                    .unwrap();
                assert!(
                    (r - per_second).abs() < 1e-6,
                    "{poll_ms} ms over {window} s: {r}"
                );
            }
        }
    }

    #[test]
    fn idle_queues_share_their_counter_blocks_between_readings() {
        let ids: Vec<QueueId> = (0..200)
            .map(|i| QueueId {
                vhost: Some("/".into()),
                name: format!("q{i}"),
            })
            .collect();
        let reading = |at: u64, busy: u64| CounterPoint {
            at: SystemTime::UNIX_EPOCH + Duration::from_secs(at),
            counters: ids
                .iter()
                .enumerate()
                .map(|(i, q)| {
                    let published = if i == 0 { busy } else { 7 };
                    let c = Counters {
                        published: Some(published),
                        delivered: (i % 2 == 0).then_some(3),
                        ..Counters::default()
                    };
                    (q.clone(), c)
                })
                .collect(),
        };
        let mut h = CounterHistory::default();
        for t in 0..5 {
            h = h.with_point(reading(1000 + t, t * 10));
        }
        let (a, b) = (&h.points[3], &h.points[4]);
        let busy_block = *a.index.get(&ids[0]).unwrap() / VALUE_BLOCK;
        for (n, (x, y)) in a.blocks.iter().zip(b.blocks.iter()).enumerate() {
            assert_eq!(Arc::ptr_eq(x, y), n != busy_block, "block {n}");
        }
        // Values read back exactly, shared or not.
        let r = h.rate(&ids[0], Duration::from_secs(60), |c| c.published);
        assert_eq!(r, Some(10.0));
        assert_eq!(
            h.rate(&ids[5], Duration::from_secs(60), |c| c.published),
            Some(0.0)
        );
        assert_eq!(h.points[4].get(&ids[1]).unwrap().delivered, None);
        assert_eq!(h.points[4].get(&ids[2]).unwrap().delivered, Some(3));
    }

    #[test]
    fn poll_record_histogram_is_cumulative() {
        let mut t = PollRecord::default();
        t.observe(0.003);
        t.observe(0.2);
        assert_eq!(t.duration_count, 2);
        assert_eq!(t.duration_bucket_counts[0], 0); // 1 ms
        assert_eq!(t.duration_bucket_counts[2], 1); // 5 ms
        assert_eq!(t.duration_bucket_counts[11], 2); // 5 s
    }
}
