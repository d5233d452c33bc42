//! One poll: a few read-only commands per tracked key, sent as pipelined
//! batches of about [`PIPELINE_CHUNK`](super::PIPELINE_CHUNK) commands.
//!
//! A key whose type changed since discovery answers `WRONGTYPE`; such keys
//! (and missing exact keys that appeared) are re-typed and measured again in
//! a second round trip of the same poll, so values are never stale or wrong.
//!
//! Over a tracked connection (see `tracking`), a key Redis has not reported
//! changed since its last read sends no command: its sample is made from
//! what that read found ([`Unchanged`]), by the same code as a fresh one.
//!
//! This file owns the chunked send/read machinery, the rounds, and the
//! per-key `plan`/`read` dispatch; what each key type asks and how its
//! replies read live beside it, one file per type (`list`, `zset`,
//! `stream`, `hash_set`), as `presets/` has one file per library.

use std::collections::VecDeque;
use std::time::SystemTime;

use redis::Value;

use super::budget::HistogramBudget;
use super::cmd::cmd;
use super::commands::{Conn, PIPELINE_CHUNK, pipelined, type_of};
use super::histogram::{self, HistogramPlan};
use super::reply;
use super::tracked::{KeyState, TrackedKey, Unchanged};
use super::tracking::Changes;
use crate::config::{KeyType, QueueSpec, RedisSourceConfig, ScoreMode};
use crate::snapshot::{
    ArrivalsMeasure, Measures, QueueSample, QueueType, Reason, ServiceMeasure, Unread,
};

mod hash_set;
mod list;
mod stream;
mod zset;

/// The samples of one poll.
#[derive(Debug, Default)]
pub struct Polled {
    /// One sample per tracked key.
    pub queues: Vec<QueueSample>,
    /// Peeked items whose timestamp could not be read in this poll.
    pub age_parse_failures: u64,
    /// One reason per key whose commands Redis refused (see [`key_error`]).
    pub key_errors: Vec<Reason>,
    /// Keys served from their last read (Redis reported no change).
    pub unchanged_keys: u64,
    /// Seconds since the oldest age histogram served was exact; `None`
    /// when none is served.
    pub histogram_staleness: Option<f64>,
}

/// Polls every tracked key, re-typing keys whose type changed. `changes`
/// is what Redis reported changed since the last poll when `conn` is
/// tracked; `None` reads every key and keeps nothing.
pub async fn poll_keys(
    conn: &mut Conn,
    config: &RedisSourceConfig,
    tracked: &mut [TrackedKey],
    now: SystemTime,
    changes: Option<&Changes>,
    budget: &mut HistogramBudget,
) -> redis::RedisResult<Polled> {
    for key in tracked.iter_mut() {
        if key.unchanged.is_some() && changes.is_none_or(|c| c.touches(&key.key)) {
            key.unchanged = None;
        }
    }
    let now_secs = crate::time::unix_seconds(now);
    let mut polled = Polled::default();
    let mut samples: Vec<Option<QueueSample>> = vec![None; tracked.len()];
    let mut pending: Vec<usize> = (0..tracked.len()).collect();

    // At most three rounds: measure, then re-type and re-measure what changed
    // (and measure histograms whose first round only located the due items,
    // or whose skipped buckets or probes turned out to matter); a key can
    // need two of these in one poll (a first measurement whose probe misses).
    const ROUNDS: usize = 3;
    budget.refill(now_secs);
    for round_index in 0..ROUNDS {
        let last_round = round_index + 1 == ROUNDS;
        // Commands go out in chunks while later keys are still planned, and
        // replies are read as their chunk arrives: Redis works while we plan
        // and read, and at most a few chunks of commands and replies are in
        // memory at once (not every command and reply of the poll).
        let mut round = Round {
            config,
            now_secs,
            last_round,
            keep: changes.is_some(),
            plans: Vec::with_capacity(pending.len()),
            replies: Replies::default(),
            next: 0,
            retype: Vec::new(),
            remeasure: Vec::new(),
        };
        run_round(
            &mut round,
            conn,
            tracked,
            &pending,
            round_index,
            budget,
            &mut polled,
            &mut samples,
        )
        .await?;
        if round.next < round.plans.len() {
            return Err(redis::RedisError::from((
                redis::ErrorKind::Client,
                "pipeline returned fewer replies than commands",
            )));
        }
        let Round {
            mut retype,
            remeasure,
            ..
        } = round;
        if retype.is_empty() && remeasure.is_empty() {
            break;
        }
        retype_keys(conn, tracked, &retype).await?;
        retype.extend(remeasure);
        pending = retype;
    }
    Ok(finish(polled, tracked, samples, now_secs))
}

/// The poll's outcome: every key's sample (its identity alone where no
/// round read it), and how stale the oldest histogram served is.
fn finish(
    mut polled: Polled,
    tracked: &[TrackedKey],
    samples: Vec<Option<QueueSample>>,
    now_secs: f64,
) -> Polled {
    // `enumerate` + `map` over the vector's own iterator collects in place
    // (`Option<QueueSample>` and `QueueSample` have the same layout), so
    // the poll never holds a second full list beside `samples` (2.3 MB at
    // 10,000 keys, on top of the published snapshot's list).
    polled.histogram_staleness = tracked
        .iter()
        .filter_map(|k| k.histogram.staleness(now_secs))
        .reduce(f64::max);
    polled.queues = samples
        .into_iter()
        .enumerate()
        .map(|(i, s)| s.unwrap_or_else(|| unread(&tracked[i])))
        .collect();
    polled
}

/// One round of a poll: every `pending` key planned (a histogram
/// measured only where `budget` allows, but in a measurement's later
/// rounds), its commands sent in chunks while later keys are still
/// planned, and replies read as their chunk arrives: Redis works while we
/// plan and read, and at most a few chunks are in memory at once.
#[allow(clippy::too_many_arguments)]
async fn run_round(
    round: &mut Round<'_>,
    conn: &mut Conn,
    tracked: &mut [TrackedKey],
    pending: &[usize],
    round_index: usize,
    budget: &mut HistogramBudget,
    polled: &mut Polled,
    samples: &mut [Option<QueueSample>],
) -> redis::RedisResult<()> {
    let config = round.config;
    let now_secs = round.now_secs;
    let mut chunk: Vec<redis::Cmd> = Vec::with_capacity(PIPELINE_CHUNK + 16);
    let mut in_flight: VecDeque<ChunkTask> = VecDeque::new();
    let result: redis::RedisResult<()> = async {
        for (n, &i) in pending.iter().enumerate() {
            yield_every(n).await;
            let key = &tracked[i];
            // A measurement's later rounds finish what the first paid for.
            let allowed = round_index > 0 || budget.allows();
            let p = plan(
                key,
                &config.queues[key.spec],
                config,
                now_secs,
                allowed,
                &mut chunk,
            );
            budget.charge(p.histogram.cost_ns);
            round.plans.push(p);
            let full = chunk.len() >= PIPELINE_CHUNK;
            if full {
                in_flight.push_back(send(conn, std::mem::take(&mut chunk)));
            }
            if full
                && in_flight.len() >= CHUNKS_IN_FLIGHT
                && let Some(task) = in_flight.pop_front()
            {
                round
                    .read_chunk(task, pending, tracked, polled, samples)
                    .await?;
            }
        }
        if !chunk.is_empty() {
            in_flight.push_back(send(conn, std::mem::take(&mut chunk)));
        }
        while let Some(task) = in_flight.pop_front() {
            round
                .read_chunk(task, pending, tracked, polled, samples)
                .await?;
        }
        // Keys after the last chunk's that sent nothing (unchanged).
        round
            .read_available(pending, tracked, polled, samples)
            .await;
        Ok(())
    }
    .await;
    // Chunks still in flight after an error are aborted as they drop.
    drop(in_flight);
    result
}

/// Asks the `retype` keys' types again, forgetting the histogram of a key
/// whose type changed.
async fn retype_keys(
    conn: &mut Conn,
    tracked: &mut [TrackedKey],
    retype: &[usize],
) -> redis::RedisResult<()> {
    let keys: Vec<Vec<u8>> = retype.iter().map(|&i| tracked[i].key.clone()).collect();
    let states = type_of(conn, &keys).await?;
    for (&i, state) in retype.iter().zip(states) {
        if tracked[i].state != state {
            tracing::debug!(key = %tracked[i].name, from = ?tracked[i].state, to = ?state, "key changed type");
            tracked[i].histogram.reset();
        }
        tracked[i].state = state;
    }
    Ok(())
}

/// Chunks of commands sent and not yet read, at most.
const CHUNKS_IN_FLIGHT: usize = 4;

/// A chunk of commands being sent, on its own task; its replies, in order.
/// Dropping it aborts the task, so no exit from a poll leaves a chunk
/// behind: an error, and also a poll that times out, whose future is
/// dropped where it stands (a bare `JoinHandle` would detach the task,
/// which then kept waiting for its replies, or in a cluster following
/// redirections, after the poll was over).
struct ChunkTask(tokio::task::JoinHandle<redis::RedisResult<Vec<Value>>>);

impl Drop for ChunkTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Sends one chunk of commands on its own task, so it goes out (and Redis
/// works on it) while the poll plans the next chunk.
fn send(conn: &Conn, cmds: Vec<redis::Cmd>) -> ChunkTask {
    let conn = conn.clone();
    ChunkTask(tokio::spawn(async move { pipelined(&conn, cmds).await }))
}

/// Replies received and not yet read, in command order.
#[derive(Default)]
struct Replies {
    /// Received replies; those before `start` are read.
    buf: Vec<Value>,
    /// The first unread reply.
    start: usize,
}

impl Replies {
    /// Appends the replies of the chunk `task` sends.
    async fn receive(&mut self, mut task: ChunkTask) -> redis::RedisResult<()> {
        let chunk = (&mut task.0).await.map_err(|e| {
            redis::RedisError::from((
                redis::ErrorKind::Client,
                "poll chunk task failed",
                e.to_string(),
            ))
        })??;
        if self.start > 0 && self.start * 2 >= self.buf.len() {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend(chunk);
        Ok(())
    }

    /// The next `n` replies, if all have arrived; they count as read.
    fn take(&mut self, n: usize) -> Option<&[Value]> {
        let r = self.buf.get(self.start..self.start + n)?;
        self.start += n;
        Some(r)
    }
}

/// One round of a poll: what was asked per key, the replies so far, and
/// what it decided beyond samples.
struct Round<'c> {
    /// The source's config: each key's spec, the age buckets.
    config: &'c RedisSourceConfig,
    /// The poll's time, in seconds since the epoch.
    now_secs: f64,
    /// Whether this is the last round (nothing can be measured again).
    last_round: bool,
    /// Whether the connection is tracked, so what reads find is kept.
    keep: bool,
    /// Per pending key, in order, the commands it sent.
    plans: Vec<Plan>,
    /// Replies received and not yet read.
    replies: Replies,
    /// The first pending key not read yet.
    next: usize,
    /// Keys (indices into `tracked`) whose type changed.
    retype: Vec<usize>,
    /// Keys to measure again in the next round.
    remeasure: Vec<usize>,
}

impl Round<'_> {
    /// Receives the replies of `task` and reads every key whose replies
    /// have now all arrived.
    async fn read_chunk(
        &mut self,
        task: ChunkTask,
        pending: &[usize],
        tracked: &mut [TrackedKey],
        polled: &mut Polled,
        samples: &mut [Option<QueueSample>],
    ) -> redis::RedisResult<()> {
        self.replies.receive(task).await?;
        self.read_available(pending, tracked, polled, samples).await;
        Ok(())
    }

    /// Reads every key whose replies have all arrived (at once for a key
    /// that sent nothing), in order.
    async fn read_available(
        &mut self,
        pending: &[usize],
        tracked: &mut [TrackedKey],
        polled: &mut Polled,
        samples: &mut [Option<QueueSample>],
    ) {
        let (config, now_secs, last_round) = (self.config, self.now_secs, self.last_round);
        while let Some((plan, &i)) = self.plans.get(self.next).zip(pending.get(self.next)) {
            let Some(r) = self.replies.take(plan.len) else {
                break;
            };
            yield_every(self.next).await;
            self.next += 1;
            let (retype, remeasure) = (&mut self.retype, &mut self.remeasure);
            let key = &mut tracked[i];
            match read(
                key,
                &config.queues[key.spec],
                plan,
                r,
                now_secs,
                &config.age_buckets,
            ) {
                KeyOutcome::Sample(s, age_failed, found) => {
                    polled.age_parse_failures += u64::from(age_failed);
                    polled.unchanged_keys += u64::from(plan.unchanged.is_some());
                    let found = found.filter(|_| self.keep);
                    settle_sample(key, plan, r, &s, found, config, now_secs);
                    samples[i] = Some(*s);
                }
                KeyOutcome::Retype if !last_round => {
                    key.unchanged = None;
                    retype.push(i);
                }
                KeyOutcome::Remeasure if !last_round => {
                    key.histogram.forget_hint();
                    remeasure.push(i);
                }
                KeyOutcome::Deferred {
                    oldest,
                    newest,
                    due,
                } if !last_round => {
                    key.histogram.defer(oldest, newest, due, now_secs);
                    remeasure.push(i);
                }
                KeyOutcome::Retype | KeyOutcome::Remeasure | KeyOutcome::Deferred { .. } => {
                    // Changed under us twice within one poll: report what we know.
                    key.unchanged = None;
                    samples[i] = Some(unread(key));
                }
                KeyOutcome::Failed(reason) => {
                    tracing::debug!(key = %key.name, %reason, "Redis refused a command for this key");
                    key.unchanged = None;
                    polled.key_errors.push(reason);
                    key.histogram.forget_values();
                    // Unknown: no values at all, never a made-up empty queue.
                    samples[i] = Some(unread(key));
                }
            }
        }
    }
}

/// What a key keeps of a sample `s` read from its replies `r` under
/// `plan`: whether it may be served unchanged (`found`), a list's
/// oversized peek paused, its histogram's record (the oldest zset
/// member's size bounding the next probes' replies).
fn settle_sample(
    key: &mut TrackedKey,
    plan: &Plan,
    r: &[Value],
    s: &QueueSample,
    found: Option<Unchanged>,
    config: &RedisSourceConfig,
    now_secs: f64,
) {
    // What follows reads the base commands' replies, which a
    // key served unchanged did not send.
    let fresh = plan.unchanged.is_none();
    key.keep(
        found,
        fresh,
        now_secs,
        config.discovery_interval.as_secs_f64(),
    );
    if let (KeyState::Typed(KeyType::List), true) = (&key.state, fresh) {
        list::pause_oversized_peek(key, r, now_secs);
    }
    // The oldest member's size bounds the next probes' replies.
    let member_len = match key.state {
        KeyState::Typed(KeyType::Zset) if fresh => zset::oldest_member_len(r),
        _ => None,
    };
    key.histogram.record(
        &key.key,
        plan.histogram,
        s.oldest_age_seconds,
        s.ready,
        member_len,
        s.age_histogram.clone(),
        config.age_histogram_interval,
        now_secs,
    );
}

/// Lets other tasks on this worker run between slices of a long loop over
/// keys: a poll of 4,000 keys is a few milliseconds of CPU in two loops,
/// which otherwise delay the scaler's requests queued on the same worker
/// (the gRPC p99 in the benchmark).
async fn yield_every(n: usize) {
    const SLICE: usize = 256;
    if n > 0 && n.is_multiple_of(SLICE) {
        tokio::task::yield_now().await;
    }
}

/// How many commands one key sent, and how to read their replies.
#[derive(Debug, Clone, Copy, Default)]
struct Plan {
    /// Number of commands (and replies) for this key.
    len: usize,
    /// What the age histogram asked (timestamp zsets).
    histogram: HistogramPlan,
    /// The list's age peek was skipped (an oversized head item, recently).
    peek_paused: bool,
    /// The key is unchanged since this was read: its base commands were not
    /// sent (a due histogram's were).
    unchanged: Option<Unchanged>,
}

/// Appends the commands that measure `key` to `out`.
fn plan(
    key: &TrackedKey,
    spec: &QueueSpec,
    config: &RedisSourceConfig,
    now_secs: f64,
    histograms_allowed: bool,
    out: &mut Vec<redis::Cmd>,
) -> Plan {
    let k = key.key.as_slice();
    let mut histogram = HistogramPlan::default();
    if let Some(found) = key.kept(now_secs) {
        // Nothing to ask but a histogram that is due (ages move with time).
        let mut v = Vec::new();
        if matches!(found, Unchanged::DueZset { .. }) {
            histogram =
                zset::plan_unchanged(key, spec, config, now_secs, histograms_allowed, &mut v);
        }
        let len = v.len();
        out.extend(v);
        return Plan {
            len,
            histogram,
            peek_paused: false,
            unchanged: Some(found),
        };
    }
    let mut peek_paused = false;
    let cmds = match &key.state {
        KeyState::Missing | KeyState::Unsupported(_) | KeyState::Unknown(_) => {
            vec![cmd("TYPE", k)]
        }
        KeyState::Typed(KeyType::List) => {
            let v;
            (v, peek_paused) = list::plan(key, spec, now_secs);
            v
        }
        KeyState::Typed(KeyType::Zset) if spec.score == ScoreMode::Timestamp => {
            let v;
            (v, histogram) = zset::plan(key, spec, config, now_secs, histograms_allowed);
            v
        }
        KeyState::Typed(t @ (KeyType::Zset | KeyType::Hash | KeyType::Set)) => {
            vec![hash_set::plan(t, k)]
        }
        KeyState::Typed(KeyType::Stream) => stream::plan(k),
    };
    let len = cmds.len();
    out.extend(cmds);
    Plan {
        len,
        histogram,
        peek_paused,
        unchanged: None,
    }
}

/// How one key's replies were read.
#[derive(Debug, PartialEq)]
enum KeyOutcome {
    /// A sample, whether an age could not be parsed, and what may be kept
    /// while the key is unchanged (`None`: read it again next poll).
    Sample(Box<QueueSample>, bool, Option<Unchanged>),
    /// The key's type is not what we thought; learn it and try again.
    Retype,
    /// Skipped age buckets or probes turned out to matter; measure again in full.
    Remeasure,
    /// A first histogram measurement located the due items; ask the buckets.
    Deferred {
        /// Age of the oldest due item.
        oldest: Option<f64>,
        /// Age of the newest due item.
        newest: Option<f64>,
        /// The due items counted.
        due: Option<u64>,
    },
    /// Redis answered an error for this key; the reason to count.
    Failed(Reason),
}

/// The `reason` for an error reply to a per-key command, or `None` when the
/// reply is not an error we must surface. `WRONGTYPE` means a type change
/// (handled by re-typing) and `no such key` a deleted stream (an empty queue);
/// anything else, such as `NOPERM` from an ACL that does not cover the key or
/// `LOADING` while Redis restarts, means the value is unknown. Before this,
/// such keys read as depth 0 (a TYPE error looked like `none`), which would
/// tell an autoscaler that the queue is empty.
fn key_error(v: &Value) -> Option<Reason> {
    let Value::ServerError(e) = v else {
        return None;
    };
    match e.code() {
        "WRONGTYPE" => None,
        _ if e.details().is_some_and(|d| d.contains("no such key")) => None,
        code if super::is_auth_error_code(code) => Some(Reason::Auth),
        _ => Some(Reason::Backend),
    }
}

/// A sample with only the identity and type filled in.
fn identity(key: &TrackedKey, queue_type: Option<QueueType>) -> QueueSample {
    QueueSample {
        name: key.name.clone(),
        labels: key.labels.clone(),
        queue_type,
        ..QueueSample::default()
    }
}

/// The sample of a key the poll could not read: its identity, no type,
/// and the mark saying so ([`Unread::RedisCommand`]), so readers answer
/// its values as unknown naming why.
fn unread(key: &TrackedKey) -> QueueSample {
    let mut s = identity(key, None);
    s.measures.unread = Some(Unread::RedisCommand);
    s
}

/// What the source measures of a plain key read under `spec`: never its
/// service time (a key holds no record of how long its jobs took); its
/// arrivals where a counter counts them (a stream's entries-added, a
/// configured `counters:` key).
fn plain_measures(s: &QueueSample, spec: &QueueSpec) -> Measures {
    let counted = s.queue_type == Some(QueueType::Stream) || spec.counters.is_some();
    Measures {
        unread: None,
        service_time: ServiceMeasure::PlainKey,
        arrivals: if counted {
            ArrivalsMeasure::Counted
        } else {
            ArrivalsMeasure::NoKeyCounter
        },
    }
}

/// One key's sample from its replies: pure, no I/O.
fn read(
    key: &TrackedKey,
    spec: &QueueSpec,
    plan: &Plan,
    r: &[Value],
    now_secs: f64,
    age_buckets: &[std::time::Duration],
) -> KeyOutcome {
    if r.iter().any(reply::is_wrongtype) {
        return KeyOutcome::Retype;
    }
    if let Some(reason) = r.iter().find_map(key_error) {
        return KeyOutcome::Failed(reason);
    }
    let mut age_failed = false;
    // What may be kept while the key is unchanged.
    let mut found = None;
    let mut s = match &key.state {
        KeyState::Missing if plan.unchanged == Some(Unchanged::Missing) => {
            found = plan.unchanged;
            missing(key, spec, age_buckets)
        }
        KeyState::Missing | KeyState::Unsupported(_) | KeyState::Unknown(_) => {
            // A refused TYPE failed above; an answered one tells an unknown
            // type, so `Unknown` always changes.
            let now_type = r.first().and_then(reply::as_str).unwrap_or("none");
            let changed = match (&key.state, now_type) {
                (KeyState::Missing, "none") => false,
                (KeyState::Unsupported(t), n) => t != n,
                _ => true,
            };
            if changed {
                return KeyOutcome::Retype;
            }
            match &key.state {
                KeyState::Missing => {
                    found = Some(Unchanged::Missing);
                    missing(key, spec, age_buckets)
                }
                KeyState::Unsupported(t) => identity(key, Some(QueueType::Other(t.clone()))),
                KeyState::Typed(_) | KeyState::Unknown(_) => identity(key, None),
            }
        }
        KeyState::Typed(KeyType::List) => {
            let s;
            (s, age_failed, found) = list::read(key, spec, plan, r, now_secs);
            s
        }
        KeyState::Typed(KeyType::Zset) if spec.score == ScoreMode::Timestamp => {
            match zset::read(key, spec, plan, r, now_secs, age_buckets) {
                Ok((s, kept)) => {
                    found = kept;
                    s
                }
                Err(again) => return again,
            }
        }
        KeyState::Typed(t @ (KeyType::Zset | KeyType::Hash | KeyType::Set)) => {
            let s;
            (s, found) = hash_set::read(key, t, plan, r);
            s
        }
        KeyState::Typed(KeyType::Stream) => stream::read(key, r),
    };
    if s.queue_type.is_none() {
        s.queue_type = Some(QueueType::Missing);
    }
    s.measures = plain_measures(&s, spec);
    KeyOutcome::Sample(Box::new(s), age_failed, found)
}

/// A configured key that does not exist: empty, which is true.
fn missing(key: &TrackedKey, spec: &QueueSpec, age_buckets: &[std::time::Duration]) -> QueueSample {
    let mut s = identity(key, Some(QueueType::Missing));
    s.depth = Some(0);
    s.ready = Some(0);
    if spec.score == ScoreMode::Timestamp {
        s.scheduled = Some(0);
        // Empty buckets, as a tracked zset that was emptied (and so deleted
        // by Redis) reports: the series must not vanish while the queue is empty.
        if !age_buckets.is_empty() {
            s.age_histogram = Some(std::sync::Arc::new(histogram::uniform(age_buckets, 0)));
        }
    }
    if spec.age.is_some() || spec.score == ScoreMode::Timestamp {
        s.oldest_age_seconds = Some(0.0);
    }
    s
}

/// Helpers shared with the per-type files' tests, and the tests of the
/// dispatch itself (kept values, re-typing, refusals, missing keys).
#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{AgeSpec, JsonField, ListEnd, QueueTarget};
    use crate::sources::redis::histogram::HistogramState;
    use crate::time::TimeUnit;
    use redis::Value::{Array, BulkString, Int};

    pub(super) const NOW: f64 = 1_000_000.0;

    #[test]
    fn a_plain_key_says_it_was_read_or_not_and_what_is_measured() {
        // A list read: its service time never measured, its arrivals only
        // with `counters:`.
        let k = key(KeyState::Typed(KeyType::List));
        let spec = QueueSpec::new(QueueTarget::Key("k".into()));
        let s = sample(read_with(&k, &spec, &[Int(3)]));
        assert_eq!(s.queue_type, Some(QueueType::List));
        assert_eq!(
            s.measures,
            Measures {
                unread: None,
                service_time: ServiceMeasure::PlainKey,
                arrivals: ArrivalsMeasure::NoKeyCounter,
            }
        );
        let mut counted = spec.clone();
        counted.counters = Some(crate::config::CounterKeys {
            processed: Some("p".into()),
            failed: None,
            enqueued: None,
        });
        let s = sample(read_with(&k, &counted, &[Int(3)]));
        assert_eq!(s.measures.arrivals, ArrivalsMeasure::Counted);
        // A refused read is a failure; the key's sample then says so.
        let refused = error("NOPERM User qe has no permissions to access the 'k' key");
        assert_eq!(
            read_with(&k, &spec, &[refused]),
            KeyOutcome::Failed(Reason::Auth)
        );
        let s = unread(&k);
        assert_eq!(s.measures.unread, Some(Unread::RedisCommand));
        assert_eq!((s.queue_type, s.depth), (None, None));
        assert!(
            s.measures
                .unread
                .is_some_and(|u| u.why().contains("Redis refused"))
        );
    }

    pub(super) fn key(state: KeyState) -> TrackedKey {
        TrackedKey {
            key: b"k".to_vec(),
            name: "k".into(),
            labels: Vec::new(),
            spec: 0,
            state,
            exact: false,
            histogram: HistogramState::default(),
            peek_paused_until: 0.0,
            unchanged: None,
            verify_at: 0.0,
        }
    }

    pub(super) fn timestamp_zset() -> QueueSpec {
        let mut spec = QueueSpec::new(QueueTarget::Pattern("*".into()));
        spec.score = ScoreMode::Timestamp;
        spec
    }

    /// A list key whose head item's JSON field `t` is its enqueue time.
    pub(super) fn list_with_age_field_t() -> QueueSpec {
        let mut spec = QueueSpec::new(QueueTarget::Key("k".into()));
        spec.age = Some(AgeSpec {
            end: ListEnd::Head,
            field: Some(JsonField::new("t").unwrap()),
            unit: TimeUnit::Seconds,
        });
        spec
    }

    pub(super) fn bulk(s: &str) -> Value {
        BulkString(s.as_bytes().to_vec())
    }

    /// `ZRANGE .. WITHSCORES` of one member (RESP2 shape).
    pub(super) fn scored(score: f64) -> Value {
        Array(vec![bulk("m"), bulk(&score.to_string())])
    }

    pub(super) fn error(line: &str) -> Value {
        redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).unwrap()
    }

    /// Reads `replies` for `key` with a plan of `replies.len()` commands.
    pub(super) fn read_with(key: &TrackedKey, spec: &QueueSpec, replies: &[Value]) -> KeyOutcome {
        let plan = Plan {
            len: replies.len(),
            histogram: HistogramPlan::default(),
            peek_paused: false,
            unchanged: None,
        };
        read(key, spec, &plan, replies, NOW, &[])
    }

    pub(super) fn sample(outcome: KeyOutcome) -> QueueSample {
        match outcome {
            KeyOutcome::Sample(s, _, _) => *s,
            other => panic!("expected a sample, got {other:?}"),
        }
    }

    /// (depth, ready, scheduled, oldest age) of a sample.
    pub(super) fn counts(s: &QueueSample) -> (Option<u64>, Option<u64>, Option<u64>, Option<f64>) {
        (s.depth, s.ready, s.scheduled, s.oldest_age_seconds)
    }

    /// Reads `key` at `now` from what an earlier read kept, sending nothing.
    fn read_unchanged(
        key: &TrackedKey,
        spec: &QueueSpec,
        found: Unchanged,
        now: f64,
    ) -> KeyOutcome {
        let plan = Plan {
            unchanged: Some(found),
            ..Plan::default()
        };
        read(key, spec, &plan, &[], now, &[])
    }

    #[test]
    fn what_a_read_keeps_serves_the_same_sample_later_with_older_ages() {
        let k = key(KeyState::Typed(KeyType::Zset));
        let spec = timestamp_zset();
        let KeyOutcome::Sample(fresh, false, Some(found)) =
            read_with(&k, &spec, &[Int(5), scored(NOW - 30.0), Int(0)])
        else {
            panic!("an all-due zset is kept");
        };
        let later = sample(read_unchanged(&k, &spec, found, NOW + 10.0));
        assert_eq!(counts(&later), (Some(5), Some(5), Some(0), Some(40.0)));
        assert_eq!(counts(&fresh), (Some(5), Some(5), Some(0), Some(30.0)));

        let k = key(KeyState::Typed(KeyType::List));
        let spec = list_with_age_field_t();
        let item = bulk(&format!("{{\"t\":{}}}", NOW - 12.0));
        let KeyOutcome::Sample(_, false, Some(found)) = read_with(&k, &spec, &[Int(3), item])
        else {
            panic!("a list with a readable head is kept");
        };
        let later = sample(read_unchanged(&k, &spec, found, NOW + 3.0));
        assert_eq!(counts(&later), (Some(3), Some(3), None, Some(15.0)));
        // An unreadable head is kept, and counted on every poll it is served.
        let KeyOutcome::Sample(_, true, Some(found)) =
            read_with(&k, &spec, &[Int(1), bulk("garbage")])
        else {
            panic!("an unreadable head is kept");
        };
        assert!(matches!(
            read_unchanged(&k, &spec, found, NOW + 1.0),
            KeyOutcome::Sample(_, true, _)
        ));
    }

    #[test]
    fn values_that_time_alone_changes_are_never_kept() {
        let k = key(KeyState::Typed(KeyType::Zset));
        // Scheduled items fall due with no write to say so.
        for replies in [
            [Int(10), scored(NOW - 5.0), Int(3)],
            [Int(4), scored(NOW + 60.0), Int(4)],
        ] {
            assert!(matches!(
                read_with(&k, &timestamp_zset(), &replies),
                KeyOutcome::Sample(_, _, None)
            ));
        }
        // A paused peek is looked at again once the pause ends.
        let k = key(KeyState::Typed(KeyType::List));
        let mut spec = QueueSpec::new(QueueTarget::Key("k".into()));
        spec.age = Some(AgeSpec {
            end: ListEnd::Head,
            field: None,
            unit: TimeUnit::Seconds,
        });
        let plan = Plan {
            len: 1,
            peek_paused: true,
            ..Plan::default()
        };
        assert!(matches!(
            read(&k, &spec, &plan, &[Int(2)], NOW, &[]),
            KeyOutcome::Sample(_, true, None)
        ));
    }

    #[test]
    fn a_changed_type_asks_for_a_retype_and_a_refusal_is_unknown() {
        let k = key(KeyState::Typed(KeyType::List));
        let spec = QueueSpec::new(QueueTarget::Key("k".into()));
        let wrongtype = error("WRONGTYPE Operation against a key holding the wrong kind of value");
        assert_eq!(read_with(&k, &spec, &[wrongtype]), KeyOutcome::Retype);
        let noperm = error("NOPERM User qe has no permissions to access the 'k' key");
        assert_eq!(
            read_with(&k, &spec, &[noperm]),
            KeyOutcome::Failed(Reason::Auth)
        );
        let loading = error("LOADING Redis is loading the dataset in memory");
        assert_eq!(
            read_with(&k, &spec, &[loading]),
            KeyOutcome::Failed(Reason::Backend)
        );
    }

    #[test]
    fn a_missing_exact_key_is_an_empty_queue_until_it_appears() {
        let k = key(KeyState::Missing);
        let spec = timestamp_zset();
        let s = sample(read_with(&k, &spec, &[bulk("none")]));
        assert_eq!(counts(&s), (Some(0), Some(0), Some(0), Some(0.0)));
        assert_eq!(s.queue_type, Some(QueueType::Missing));
        assert_eq!(read_with(&k, &spec, &[bulk("zset")]), KeyOutcome::Retype);
    }
}
