//! Sources: one module per backend kind, all behind [`Source`], all driven
//! by the same loop ([`run`]) that times polls, counts errors, backs off and
//! publishes snapshots.

pub mod rabbitmq;
pub mod redis;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::hub::SnapshotPublisher;
use crate::shutdown::Shutdown;
use crate::snapshot::{
    CounterPoint, Coverage, JobFlow, QueueSample, QueueScope, Reason, Snapshot, SourceStats,
};

/// What a successful poll produced.
#[derive(Debug, Clone)]
pub struct PollOutput {
    /// Every tracked queue.
    pub queues: Vec<QueueSample>,
    /// Source-wide facts.
    pub stats: SourceStats,
    /// One reason per queue whose problem did not fail the poll, such as a
    /// RabbitMQ queue that is gone ([`Reason::NotFound`]).
    pub partial_errors: Vec<Reason>,
    /// What the poll left unread; no default, so each source says it.
    pub coverage: Coverage,
}

impl PollOutput {
    /// An output with no queues yet, vouching for what `coverage` says.
    pub fn new(coverage: Coverage) -> Self {
        PollOutput {
            queues: Vec::new(),
            stats: SourceStats::default(),
            partial_errors: Vec::new(),
            coverage,
        }
    }
}

/// Why a poll failed. Each variant maps to a `reason` label of
/// `queue_exporter_poll_errors_total`.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// Could not connect (refused, DNS, TLS handshake).
    #[error("cannot connect to {target}: {cause}")]
    Connect {
        /// Redacted address.
        target: String,
        /// Underlying error text (credential-free).
        cause: String,
    },
    /// The backend rejected our credentials or permissions.
    #[error("authentication or permission failure at {target}: {cause}")]
    Auth {
        /// Redacted address.
        target: String,
        /// Underlying error text.
        cause: String,
    },
    /// The backend did not answer in time.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// Discovery has not finished its first round yet (it goes on between
    /// polls, on its own deadline): no queue is known, so nothing can be
    /// reported, and an empty list would read as empty queues.
    #[error("discovery still running after {0:?} (first round; nothing known yet)")]
    Discovering(Duration),
    /// The backend answered with an error.
    #[error("backend error: {0}")]
    Backend(String),
    /// The backend answered something we could not understand.
    #[error("malformed response: {0}")]
    Malformed(String),
    /// An HTTP status we cannot use.
    #[error("HTTP status {status} from {target}")]
    HttpStatus {
        /// The status code.
        status: u16,
        /// Redacted URL.
        target: String,
    },
    /// The response exceeded the configured size bound.
    #[error("response larger than {limit} bytes from {target}")]
    TooLarge {
        /// The bound in bytes.
        limit: u64,
        /// Redacted URL.
        target: String,
    },
    /// A requested object does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// A local problem such as an unreadable secret file.
    #[error("configuration problem: {0}")]
    Config(String),
    /// A Redis Cluster's `CLUSTER SLOTS` leaves slots without a primary:
    /// the keys there cannot be read, so nothing is reported (an empty
    /// source would read as empty queues).
    #[error("Redis Cluster: {0}")]
    ClusterSlots(String),
}

impl SourceError {
    /// The `reason` label for this error.
    pub fn reason(&self) -> Reason {
        match self {
            SourceError::Connect { .. } => Reason::Connect,
            SourceError::Auth { .. } => Reason::Auth,
            SourceError::Timeout(_) | SourceError::Discovering(_) => Reason::Timeout,
            SourceError::Backend(_) => Reason::Backend,
            SourceError::Malformed(_) => Reason::Malformed,
            SourceError::HttpStatus { status, .. } if *status >= 500 => Reason::Http5xx,
            SourceError::HttpStatus { .. } => Reason::Http4xx,
            SourceError::TooLarge { .. } => Reason::TooLarge,
            SourceError::NotFound(_) => Reason::NotFound,
            SourceError::Config(_) => Reason::Config,
            SourceError::ClusterSlots(_) => Reason::ClusterSlots,
        }
    }
}

/// A backend that can be polled. Implementations keep their own connection
/// and discovery state between polls; the driver owns timing and publishing.
pub trait Source: Send + 'static {
    /// Collects one round of samples. Must never write to the backend.
    fn poll(&mut self)
    -> impl std::future::Future<Output = Result<PollOutput, SourceError>> + Send;

    /// A bound on one poll, after which it counts as a timeout.
    fn poll_timeout(&self) -> Duration;

    /// Which queue names this source's configuration can ever report.
    fn scope(&self) -> Arc<dyn QueueScope>;
}

/// Cap on the retry delay after a failed poll.
pub const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// First retry delay after a failed poll.
const MIN_BACKOFF: Duration = Duration::from_millis(100);

/// Polls `source` every `poll_interval` until shutdown, publishing a snapshot
/// after every attempt.
///
/// Polls after the first fall on the source's ticks: the wall-clock
/// multiples of `poll_interval`, shifted by a phase derived from the
/// source's name ([`phase_of`]). Two replicas of the exporter then read
/// the backend at the same instants and stamp their counter readings with
/// the same tick, so KEDA, round-robining over them, hears the same answer
/// from both; sources of other names poll at other phases, so many
/// exporters on one backend do not all hit it in the same millisecond.
pub async fn run<S: Source>(
    mut source: S,
    publisher: SnapshotPublisher,
    poll_interval: Duration,
    mut shutdown: Shutdown,
) {
    let name = publisher.current().source.clone();
    let phase = phase_of(&name, poll_interval);
    let mut backoff = MIN_BACKOFF;
    // The first poll runs at once; later ones on a tick, stamped with it.
    let mut tick: Option<SystemTime> = None;
    loop {
        let (snapshot, outcome) = poll_once_stamped(&mut source, &publisher, tick).await;
        let ok = outcome.is_ok();
        let up = snapshot.up;
        publisher.publish(snapshot);
        if ok {
            backoff = MIN_BACKOFF;
        } else if !up {
            backoff = backoff.saturating_mul(2).min(MAX_BACKOFF);
        }
        let now = SystemTime::now();
        let wait = if up {
            let wait = until_next_tick(now, poll_interval, phase);
            tick = Some(now + wait);
            wait
        } else {
            tick = None;
            backoff.min(poll_interval.max(MIN_BACKOFF))
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.recv() => {
                tracing::debug!(source = %name, "source stopping");
                return;
            }
        }
    }
}

/// The offset of a source's poll ticks within `interval`: a hash of its
/// name (FNV-1a), the same in every replica, different across sources.
pub fn phase_of(name: &str, interval: Duration) -> Duration {
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let nanos = interval.as_nanos().max(1);
    // Less than `interval`, which fits a u64 of nanoseconds (bounded at load).
    Duration::from_nanos((u128::from(hash) % nanos) as u64)
}

/// How long from `now` until the next tick (`k × interval + phase` since
/// the Unix epoch) strictly after it.
pub fn until_next_tick(now: SystemTime, interval: Duration, phase: Duration) -> Duration {
    let interval = interval.as_nanos().max(1);
    let now = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let since_tick = (now + interval - phase.as_nanos() % interval) % interval;
    // At most `interval`, which fits a u64 of nanoseconds (bounded at load).
    Duration::from_nanos((interval - since_tick) as u64)
}

/// Runs one poll and builds the next snapshot from the current one.
/// Returns the snapshot and whether the poll succeeded.
pub async fn poll_once<S: Source>(
    source: &mut S,
    publisher: &SnapshotPublisher,
) -> (Snapshot, bool) {
    let (snapshot, outcome) = poll_once_reporting(source, publisher).await;
    (snapshot, outcome.is_ok())
}

/// [`poll_once`], returning why the poll failed: `check --connect` prints
/// the cause on its summary line.
pub async fn poll_once_reporting<S: Source>(
    source: &mut S,
    publisher: &SnapshotPublisher,
) -> (Snapshot, Result<(), SourceError>) {
    poll_once_stamped(source, publisher, None).await
}

/// [`poll_once_reporting`] for a poll that ran on `tick`: its counter
/// readings are stamped with the tick rather than the end of the poll, so
/// replicas polling on the same ticks compute rates over the same instants.
async fn poll_once_stamped<S: Source>(
    source: &mut S,
    publisher: &SnapshotPublisher,
    tick: Option<SystemTime>,
) -> (Snapshot, Result<(), SourceError>) {
    let prev = publisher.current();
    let started = Instant::now();
    let result = match tokio::time::timeout(source.poll_timeout(), source.poll()).await {
        Ok(r) => r,
        Err(_) => Err(SourceError::Timeout(source.poll_timeout())),
    };
    let elapsed = started.elapsed().as_secs_f64();
    let mut polls = (*prev.polls).clone();
    polls.observe(elapsed);
    let mut next = Snapshot {
        generation: prev.generation + 1,
        polled: true,
        ..(*prev).clone()
    };
    let outcome = match result {
        Ok(out) => {
            for reason in &out.partial_errors {
                polls.count_error(*reason);
            }
            let now = SystemTime::now();
            if !prev.up {
                tracing::info!(source = %prev.source, queues = out.queues.len(), "source is up");
            }
            // A tick earlier than the newest reading (a clock step back)
            // stamps nothing: readings stay in order.
            let stamp = tick
                .filter(|t| prev.history.newest().is_none_or(|n| *t > n))
                .unwrap_or(now);
            next.history = Arc::new(prev.history.with_point(counter_point(stamp, &out.queues)));
            next.up = true;
            next.layout = crate::snapshot::next_layout(&prev.queues, prev.layout, &out.queues);
            // `Arc::new`, not `Arc::from`: the list is not copied (2.3 MB at
            // 10k queues); the spare room of a list built by pushing is given
            // back (the allocator shrinks a large block in place).
            let mut queues = out.queues;
            queues.shrink_to_fit();
            next.queues = Arc::new(queues);
            next.last_success = Some(now);
            let mut stats = out.stats;
            stats.age_parse_failures += prev.stats.age_parse_failures;
            next.stats = stats;
            next.coverage = Arc::new(out.coverage);
            Ok(())
        }
        Err(e) => {
            polls.count_error(e.reason());
            if prev.up || !prev.polled {
                tracing::warn!(source = %prev.source, reason = %e.reason(), error = %e, "poll failed; source is down");
            } else {
                tracing::debug!(source = %prev.source, reason = %e.reason(), error = %e, "poll failed again");
            }
            next.up = false;
            Err(e)
        }
    };
    next.polls = Arc::new(polls);
    (next, outcome)
}

/// The history's reading of one poll: each queue's counters and, for a
/// queue with a processed total and no counters of its own (a plain key
/// with `counters: processed`, asynq's queues...), its [`JobFlow`], from
/// which the scaler's WaitTime mode tells arrivals. Public for the
/// virtual-time closed loop (benches/waitgrid.rs), which polls as a source does.
pub fn counter_point(at: SystemTime, queues: &[QueueSample]) -> CounterPoint {
    let counters: HashMap<_, _> = queues
        .iter()
        .filter(|q| !q.counters().is_empty())
        .map(|q| (q.id(), q.counters()))
        .collect();
    let flows: HashMap<_, _> = queues
        .iter()
        .filter_map(|q| Some((q.id(), JobFlow::of(q)?)))
        .collect();
    CounterPoint {
        at,
        counters,
        flows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::HubBuilder;
    use crate::shutdown::ShutdownTrigger;
    use crate::snapshot::SourceKind;
    use std::sync::Mutex;

    #[test]
    fn ticks_fall_on_wall_clock_multiples_shifted_by_the_phase() {
        let at = |ms: u64| SystemTime::UNIX_EPOCH + Duration::from_millis(ms);
        let p = Duration::from_millis(500);
        let phase = Duration::from_millis(120);
        assert_eq!(
            until_next_tick(at(10_000), p, phase),
            Duration::from_millis(120)
        );
        assert_eq!(
            until_next_tick(at(10_119), p, phase),
            Duration::from_millis(1)
        );
        // Exactly on a tick: the next one, a whole interval on.
        assert_eq!(until_next_tick(at(10_120), p, phase), p);
        assert_eq!(
            until_next_tick(at(10_400), p, phase),
            Duration::from_millis(220)
        );
        // Two replicas that finished their polls at different moments wait
        // for the same instant.
        let a = at(10_130) + until_next_tick(at(10_130), p, phase);
        let b = at(10_390) + until_next_tick(at(10_390), p, phase);
        assert_eq!(a, b);
    }

    #[test]
    fn the_phase_is_the_names_in_every_replica_and_spreads_sources() {
        let p = Duration::from_secs(1);
        assert_eq!(phase_of("main", p), phase_of("main", p));
        assert!(phase_of("main", p) < p);
        let phases: std::collections::BTreeSet<Duration> = (0..50)
            .map(|i| phase_of(&format!("source-{i}"), p))
            .collect();
        assert!(phases.len() > 45, "{phases:?}");
    }

    /// Fails its first `failures` polls, then succeeds; records when it was polled.
    struct Flaky {
        failures: usize,
        polled_at: Arc<Mutex<Vec<tokio::time::Instant>>>,
    }

    impl Source for Flaky {
        async fn poll(&mut self) -> Result<PollOutput, SourceError> {
            let mut at = self.polled_at.lock().unwrap();
            at.push(tokio::time::Instant::now());
            if at.len() <= self.failures {
                Err(SourceError::Connect {
                    target: "x".into(),
                    cause: "refused".into(),
                })
            } else {
                Ok(PollOutput::new(Coverage::complete()))
            }
        }
        fn poll_timeout(&self) -> Duration {
            Duration::from_secs(1)
        }
        fn scope(&self) -> Arc<dyn QueueScope> {
            Arc::new(crate::snapshot::AnyName)
        }
    }

    /// Runs a source that fails its first `failures` polls for `run_for`
    /// of (paused, auto-advancing) time; returns the gaps between polls in ms.
    async fn poll_gaps(failures: usize, interval: Duration, run_for: Duration) -> Vec<u128> {
        let polled_at = Arc::new(Mutex::new(Vec::new()));
        let source = Flaky {
            failures,
            polled_at: polled_at.clone(),
        };
        let mut hub = HubBuilder::default();
        let publisher = hub.add_source("s", SourceKind::Redis, interval, source.scope());
        let trigger = ShutdownTrigger::new();
        let task = tokio::spawn(run(source, publisher, interval, trigger.subscribe()));
        tokio::time::sleep(run_for).await;
        trigger.fire();
        task.await.unwrap();
        let at = polled_at.lock().unwrap();
        at.windows(2).map(|w| (w[1] - w[0]).as_millis()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn retries_back_off_doubling_up_to_two_seconds_then_poll_on_the_interval() {
        let gaps = poll_gaps(7, Duration::from_secs(10), Duration::from_secs(30)).await;
        // 7 failures: 200, 400, 800, 1600, then capped at 2000 ms; after the
        // first success, the wait until the next wall-clock tick, at most
        // the poll interval (the wall clock does not move in paused time,
        // so the ticks themselves are tested on their own).
        assert!(gaps.len() >= 8, "{gaps:?}");
        assert_eq!(gaps[..7], [200, 400, 800, 1600, 2000, 2000, 2000]);
        assert!(
            gaps[7..].iter().all(|g| (1..=10_000).contains(g)),
            "{gaps:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_source_never_waits_longer_than_its_poll_interval() {
        let gaps = poll_gaps(
            usize::MAX,
            Duration::from_millis(500),
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(gaps[..3], [200, 400, 500]);
        assert!(gaps[2..].iter().all(|g| *g == 500), "{gaps:?}");
    }
}
