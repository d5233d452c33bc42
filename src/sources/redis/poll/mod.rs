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

use std::collections::VecDeque;
use std::time::SystemTime;

use redis::Value;

use super::age::item_timestamp;
use super::cmd::cmd;
use super::commands::{Conn, PIPELINE_CHUNK, pipelined, type_of};
use super::histogram::{self, Again, HistogramPlan};
use super::keyname::display_key;
use super::reply;
use super::tracked::{Head, KeyState, MAX_PEEK_BYTES, PEEK_PAUSE_SECS, TrackedKey, Unchanged};
use super::tracking::Changes;
use crate::config::{KeyType, ListEnd, QueueSpec, RedisSourceConfig, ScoreMode};
use crate::snapshot::{Counters, GroupSample, QueueSample, QueueType, Reason};

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
) -> redis::RedisResult<Polled> {
    for key in tracked.iter_mut() {
        if key.unchanged.is_some() && changes.is_none_or(|c| c.touches(&key.key)) {
            key.unchanged = None;
        }
    }
    let now_secs = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let mut polled = Polled::default();
    let mut samples: Vec<Option<QueueSample>> = vec![None; tracked.len()];
    let mut pending: Vec<usize> = (0..tracked.len()).collect();

    // At most three rounds: measure, then re-type and re-measure what changed
    // (and measure histograms whose first round only located the due items,
    // or whose skipped buckets or probes turned out to matter); a key can
    // need two of these in one poll (a first measurement whose probe misses).
    const ROUNDS: usize = 3;
    for round in 0..ROUNDS {
        let last_round = round + 1 == ROUNDS;
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
        let mut chunk: Vec<redis::Cmd> = Vec::with_capacity(PIPELINE_CHUNK + 16);
        let mut in_flight: VecDeque<ChunkTask> = VecDeque::new();
        let result: redis::RedisResult<()> = async {
            for (n, &i) in pending.iter().enumerate() {
                yield_every(n).await;
                let key = &tracked[i];
                round.plans.push(plan(
                    key,
                    &config.queues[key.spec],
                    config,
                    now_secs,
                    &mut chunk,
                ));
                let full = chunk.len() >= PIPELINE_CHUNK;
                if full {
                    in_flight.push_back(send(conn, std::mem::take(&mut chunk)));
                }
                if full
                    && in_flight.len() >= CHUNKS_IN_FLIGHT
                    && let Some(task) = in_flight.pop_front()
                {
                    round
                        .read_chunk(task, &pending, tracked, &mut polled, &mut samples)
                        .await?;
                }
            }
            if !chunk.is_empty() {
                in_flight.push_back(send(conn, std::mem::take(&mut chunk)));
            }
            while let Some(task) = in_flight.pop_front() {
                round
                    .read_chunk(task, &pending, tracked, &mut polled, &mut samples)
                    .await?;
            }
            // Keys after the last chunk's that sent nothing (unchanged).
            round
                .read_available(&pending, tracked, &mut polled, &mut samples)
                .await;
            Ok(())
        }
        .await;
        // Chunks still in flight after an error are aborted as they drop.
        drop(in_flight);
        result?;
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
        let keys: Vec<Vec<u8>> = retype.iter().map(|&i| tracked[i].key.clone()).collect();
        let states = type_of(conn, &keys).await?;
        for (&i, state) in retype.iter().zip(states) {
            if tracked[i].state != state {
                tracing::debug!(key = %tracked[i].name, from = ?tracked[i].state, to = ?state, "key changed type");
                tracked[i].histogram.reset();
            }
            tracked[i].state = state;
        }
        retype.extend(remeasure);
        pending = retype;
    }
    // `enumerate` + `map` over the vector's own iterator collects in place
    // (`Option<QueueSample>` and `QueueSample` have the same layout), so
    // the poll never holds a second full list beside `samples` (2.3 MB at
    // 10,000 keys, on top of the published snapshot's list).
    polled.queues = samples
        .into_iter()
        .enumerate()
        .map(|(i, s)| s.unwrap_or_else(|| identity(&tracked[i], None)))
        .collect();
    Ok(polled)
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
                    // What follows reads the base commands' replies, which a
                    // key served unchanged did not send.
                    let fresh = plan.unchanged.is_none();
                    key.keep(
                        found.filter(|_| self.keep),
                        fresh,
                        now_secs,
                        config.discovery_interval.as_secs_f64(),
                    );
                    if let (KeyState::Typed(KeyType::List), Some(Value::BulkString(item)), true) =
                        (&key.state, r.get(1), fresh)
                        && item.len() > MAX_PEEK_BYTES
                    {
                        if key.peek_paused_until == 0.0 {
                            tracing::warn!(
                                key = %key.name,
                                bytes = item.len(),
                                "head item too large to peek for age; its age is unknown, \
                                 re-checked once a minute"
                            );
                        }
                        key.peek_paused_until = now_secs + PEEK_PAUSE_SECS;
                    }
                    // The oldest member's size bounds the next probes' replies.
                    let member_len = match key.state {
                        KeyState::Typed(KeyType::Zset) if fresh => {
                            r.get(1).and_then(reply::first_member_len)
                        }
                        _ => None,
                    };
                    key.histogram.record(
                        &key.key,
                        plan.histogram,
                        s.oldest_age_seconds,
                        member_len,
                        s.age_histogram.clone(),
                        config.age_histogram_interval,
                        now_secs,
                    );
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
                KeyOutcome::Deferred { oldest, newest } if !last_round => {
                    key.histogram.defer(oldest, newest, now_secs);
                    remeasure.push(i);
                }
                KeyOutcome::Retype | KeyOutcome::Remeasure | KeyOutcome::Deferred { .. } => {
                    // Changed under us twice within one poll: report what we know.
                    key.unchanged = None;
                    samples[i] = Some(identity(key, None));
                }
                KeyOutcome::Failed(reason) => {
                    tracing::debug!(key = %key.name, %reason, "Redis refused a command for this key");
                    key.unchanged = None;
                    polled.key_errors.push(reason);
                    key.histogram.forget_values();
                    // Unknown: no values at all, never a made-up empty queue.
                    samples[i] = Some(identity(key, None));
                }
            }
        }
    }
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
    out: &mut Vec<redis::Cmd>,
) -> Plan {
    let k = key.key.as_slice();
    let mut histogram = HistogramPlan::default();
    if let Some(found) = key.kept(now_secs) {
        // Nothing to ask but a histogram that is due (ages move with time).
        let mut v = Vec::new();
        if matches!(found, Unchanged::DueZset { .. }) {
            histogram =
                key.histogram
                    .plan(k, spec.score_unit, &config.age_buckets, now_secs, &mut v);
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
            let mut v = vec![cmd("LLEN", k)];
            if spec.age.is_some() && now_secs < key.peek_paused_until {
                peek_paused = true;
            } else if let Some(age) = &spec.age {
                let mut c = cmd("LINDEX", k);
                c.arg(match age.end {
                    ListEnd::Head => 0,
                    ListEnd::Tail => -1,
                });
                v.push(c);
            }
            v
        }
        KeyState::Typed(KeyType::Zset) if spec.score == ScoreMode::Timestamp => {
            let now = histogram::score_arg(spec.score_unit, now_secs);
            let mut oldest = cmd("ZRANGE", k);
            oldest.arg(0).arg(0).arg("WITHSCORES");
            // The scheduled items; ready = ZCARD - scheduled. When everything
            // is due (the common case) Redis answers 0 from the zset's last
            // score without a scan (`zzlIsInRange`/`zslIsInRange`), which is
            // cheaper than `ZRANGE (now +inf BYSCORE LIMIT 0 1` (0.71 vs 1.00
            // µs per call on a 100-item listpack) and also counts a zset
            // holding both due and scheduled items in the same round trip.
            let mut scheduled = cmd("ZCOUNT", k);
            scheduled.arg(format!("({now}")).arg("+inf");
            let mut v = vec![cmd("ZCARD", k), oldest, scheduled];
            histogram =
                key.histogram
                    .plan(k, spec.score_unit, &config.age_buckets, now_secs, &mut v);
            v
        }
        KeyState::Typed(KeyType::Zset) => vec![cmd("ZCARD", k)],
        KeyState::Typed(KeyType::Hash) => vec![cmd("HLEN", k)],
        KeyState::Typed(KeyType::Set) => vec![cmd("SCARD", k)],
        KeyState::Typed(KeyType::Stream) => {
            let mut info = redis::cmd("XINFO");
            info.arg("STREAM").arg(k);
            let mut groups = redis::cmd("XINFO");
            groups.arg("GROUPS").arg(k);
            vec![info, groups]
        }
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
    // A missing key (or one that was deleted) makes some commands answer
    // "no such key"; for streams that is an error, for the rest an empty value.
    let no_such_key = r
        .iter()
        .filter_map(reply::server_error)
        .any(|e| e.contains("no such key"));
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
            let mut s = identity(key, Some(QueueType::List));
            let (len, head) = match plan.unchanged {
                Some(Unchanged::List { len, head }) => {
                    age_failed = head == Head::Unreadable;
                    (Some(len), Some(head))
                }
                _ => {
                    let len = r.first().and_then(reply::as_u64);
                    let head;
                    (head, age_failed) = list_head(spec, plan, len, r.get(1));
                    (len, head)
                }
            };
            s.depth = len;
            s.ready = len;
            match head {
                Some(Head::Empty) => s.oldest_age_seconds = Some(0.0),
                Some(Head::At(ts)) => s.oldest_age_seconds = Some((now_secs - ts).max(0.0)),
                _ => {}
            }
            if let (Some(len), Some(head)) = (len, head) {
                found = Some(Unchanged::List { len, head });
            }
            s
        }
        KeyState::Typed(KeyType::Zset) if spec.score == ScoreMode::Timestamp => {
            let mut s = identity(key, Some(QueueType::Zset));
            // After ZCARD, the oldest item and the scheduled count (unless
            // unchanged): the histogram's replies.
            let (card, oldest, scheduled, asked) = match plan.unchanged {
                Some(Unchanged::DueZset { card, oldest }) => (Some(card), Some(oldest), Some(0), r),
                _ => (
                    r.first().and_then(reply::as_u64),
                    r.get(1).and_then(reply::first_score),
                    r.get(2).and_then(reply::as_u64),
                    r.get(3..).unwrap_or_default(),
                ),
            };
            // Kept only with nothing scheduled: scheduled items fall due
            // with time alone, with no write to tell us.
            if let (Some(card), Some(oldest), Some(0)) = (card, oldest, scheduled) {
                found = Some(Unchanged::DueZset { card, oldest });
            }
            let due = match (card, oldest, scheduled) {
                (Some(0), _, _) | (_, Some(None), _) => Some(0),
                // The zset changed between the commands: no more than it holds.
                (Some(c), Some(Some(_)), Some(sch)) => Some(c.saturating_sub(sch)),
                _ => None,
            };
            s.depth = card;
            s.ready = due;
            s.scheduled = match (card, due) {
                (Some(c), Some(d)) => Some(c.saturating_sub(d)),
                _ => None,
            };
            s.oldest_age_seconds = match (due, oldest) {
                (Some(0), _) => Some(0.0),
                (Some(_), Some(Some(score))) => {
                    Some((now_secs - spec.score_unit.to_unix_seconds(score)).max(0.0))
                }
                _ => None,
            };
            let age_of = |score: f64| (now_secs - spec.score_unit.to_unix_seconds(score)).max(0.0);
            s.age_histogram = match key.histogram.read(
                plan.histogram,
                asked,
                due,
                s.oldest_age_seconds,
                age_buckets,
                age_of,
            ) {
                Ok(h) => h,
                Err(Again::Remeasure) => return KeyOutcome::Remeasure,
                Err(Again::Deferred { newest }) => {
                    return KeyOutcome::Deferred {
                        oldest: s.oldest_age_seconds,
                        newest,
                    };
                }
            };
            s
        }
        KeyState::Typed(t @ (KeyType::Zset | KeyType::Hash | KeyType::Set)) => {
            let (queue_type, ready) = match t {
                KeyType::Zset => (QueueType::Zset, true),
                KeyType::Hash => (QueueType::Hash, false),
                _ => (QueueType::Set, false),
            };
            let mut s = identity(key, Some(queue_type));
            s.depth = match plan.unchanged {
                Some(Unchanged::Size(n)) => Some(n),
                _ => r.first().and_then(reply::as_u64),
            };
            if ready {
                s.ready = s.depth;
            }
            found = s.depth.map(Unchanged::Size);
            s
        }
        KeyState::Typed(KeyType::Stream) => {
            let mut s = identity(key, Some(QueueType::Stream));
            if no_such_key {
                // Deleted since discovery: empty until discovery confirms it is gone.
                s.depth = Some(0);
                s.ready = Some(0);
            } else {
                read_stream(&mut s, r);
            }
            s
        }
    };
    if s.queue_type.is_none() {
        s.queue_type = Some(QueueType::Missing);
    }
    KeyOutcome::Sample(Box::new(s), age_failed, found)
}

/// What a list's age peek found, from the `LINDEX` reply, and whether its
/// age could not be read (counted as a parse failure). `None` when it is
/// unknown for now (skipped while paused, too large to parse, or the length
/// is unknown): never kept, so the next poll peeks again.
fn list_head(
    spec: &QueueSpec,
    plan: &Plan,
    len: Option<u64>,
    item: Option<&Value>,
) -> (Option<Head>, bool) {
    let Some(age) = &spec.age else {
        return (Some(Head::NotPeeked), false);
    };
    match (len, item) {
        (None, _) => (None, false),
        (Some(0), _) => (Some(Head::Empty), false),
        (Some(_), _) if plan.peek_paused => (None, true),
        (Some(_), Some(Value::BulkString(item))) if item.len() > MAX_PEEK_BYTES => (None, true),
        (Some(_), Some(Value::BulkString(item))) => match item_timestamp(item, age) {
            Some(ts) => (Some(Head::At(ts)), false),
            None => (Some(Head::Unreadable), true),
        },
        // The list emptied between LLEN and LINDEX.
        (Some(_), Some(Value::Nil)) => (Some(Head::Empty), false),
        _ => (None, false),
    }
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

/// A stream's length, counter and consumer groups from `XINFO STREAM` and
/// `XINFO GROUPS` (pure). A group field that is missing or not a count stays
/// `None` (absent on `/metrics`), never 0; a group entry that cannot be read
/// at all, or a groups reply that is not a list, makes `ready` unknown, since
/// the unread group may be the slowest.
fn read_stream(s: &mut QueueSample, r: &[Value]) {
    if let Some(info) = r.first().and_then(reply::as_pairs) {
        s.depth = reply::field(&info, "length").and_then(reply::as_u64);
        s.set_counters(Counters {
            published: reply::field(&info, "entries-added").and_then(reply::as_u64),
            ..Counters::default()
        });
    }
    let groups = r.get(1).and_then(reply::as_array);
    let mut every_group_read = groups.is_some();
    for g in groups.unwrap_or_default() {
        // Group names are binary-safe like keys: render them the same way
        // rather than skipping a group whose name is not UTF-8.
        let Some((p, name)) = reply::as_pairs(g).and_then(|p| {
            let name = reply::field(&p, "name").and_then(reply::as_bytes)?;
            Some((p, name))
        }) else {
            every_group_read = false;
            continue;
        };
        let count = |field: &str| reply::field(&p, field).and_then(reply::as_u64);
        s.groups.push(GroupSample {
            name: display_key(name),
            lag: count("lag"),
            pending: count("pending"),
            consumers: count("consumers"),
        });
    }
    // Work waiting for the slowest group; absent when Redis cannot tell a lag
    // or a group could not be read.
    s.ready = if !every_group_read {
        None
    } else if s.groups.is_empty() {
        s.depth
    } else {
        s.groups
            .iter()
            .map(|g| g.lag)
            .collect::<Option<Vec<_>>>()
            .and_then(|l| l.into_iter().max())
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{AgeSpec, JsonField, QueueTarget, TimeUnit};
    use crate::sources::redis::histogram::HistogramState;
    use redis::Value::{Array, BulkString, Int, Nil};

    const NOW: f64 = 1_000_000.0;

    fn key(state: KeyState) -> TrackedKey {
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

    fn timestamp_zset() -> QueueSpec {
        let mut spec = QueueSpec::new(QueueTarget::Pattern("*".into()));
        spec.score = ScoreMode::Timestamp;
        spec
    }

    /// A list key whose head item's JSON field `t` is its enqueue time.
    fn list_with_age_field_t() -> QueueSpec {
        let mut spec = QueueSpec::new(QueueTarget::Key("k".into()));
        spec.age = Some(AgeSpec {
            end: ListEnd::Head,
            field: Some(JsonField::new("t").unwrap()),
            unit: TimeUnit::Seconds,
        });
        spec
    }

    fn bulk(s: &str) -> Value {
        BulkString(s.as_bytes().to_vec())
    }

    /// `ZRANGE .. WITHSCORES` of one member (RESP2 shape).
    fn scored(score: f64) -> Value {
        Array(vec![bulk("m"), bulk(&score.to_string())])
    }

    fn error(line: &str) -> Value {
        redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).unwrap()
    }

    /// Reads `replies` for `key` with a plan of `replies.len()` commands.
    fn read_with(key: &TrackedKey, spec: &QueueSpec, replies: &[Value]) -> KeyOutcome {
        let plan = Plan {
            len: replies.len(),
            histogram: HistogramPlan::default(),
            peek_paused: false,
            unchanged: None,
        };
        read(key, spec, &plan, replies, NOW, &[])
    }

    fn sample(outcome: KeyOutcome) -> QueueSample {
        match outcome {
            KeyOutcome::Sample(s, _, _) => *s,
            other => panic!("expected a sample, got {other:?}"),
        }
    }

    /// (depth, ready, scheduled, oldest age) of a sample.
    fn counts(s: &QueueSample) -> (Option<u64>, Option<u64>, Option<u64>, Option<f64>) {
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
    fn a_timestamp_zset_with_everything_due_is_all_ready() {
        let k = key(KeyState::Typed(KeyType::Zset));
        let s = sample(read_with(
            &k,
            &timestamp_zset(),
            &[Int(5), scored(NOW - 30.0), Int(0)],
        ));
        assert_eq!(counts(&s), (Some(5), Some(5), Some(0), Some(30.0)));
    }

    #[test]
    fn a_timestamp_zset_with_everything_scheduled_has_nothing_ready_and_age_zero() {
        let k = key(KeyState::Typed(KeyType::Zset));
        let s = sample(read_with(
            &k,
            &timestamp_zset(),
            &[Int(4), scored(NOW + 60.0), Int(4)],
        ));
        assert_eq!(counts(&s), (Some(4), Some(0), Some(4), Some(0.0)));
    }

    #[test]
    fn a_mixed_timestamp_zset_is_split_by_the_scheduled_count_in_one_round() {
        let k = key(KeyState::Typed(KeyType::Zset));
        let s = sample(read_with(
            &k,
            &timestamp_zset(),
            &[Int(10), scored(NOW - 5.0), Int(3)],
        ));
        assert_eq!(counts(&s), (Some(10), Some(7), Some(3), Some(5.0)));
    }

    #[test]
    fn a_zset_that_shrank_between_the_commands_never_reads_negative() {
        let k = key(KeyState::Typed(KeyType::Zset));
        let s = sample(read_with(
            &k,
            &timestamp_zset(),
            &[Int(2), scored(NOW - 5.0), Int(3)],
        ));
        assert_eq!(counts(&s), (Some(2), Some(0), Some(2), Some(0.0)));
    }

    #[test]
    fn an_empty_timestamp_zset_is_empty_with_age_zero() {
        let k = key(KeyState::Typed(KeyType::Zset));
        let s = sample(read_with(
            &k,
            &timestamp_zset(),
            &[Int(0), Array(vec![]), Int(0)],
        ));
        assert_eq!(counts(&s), (Some(0), Some(0), Some(0), Some(0.0)));
    }

    #[test]
    fn a_list_reads_its_length_and_the_peeked_items_age() {
        let k = key(KeyState::Typed(KeyType::List));
        let spec = list_with_age_field_t();
        let item = bulk(&format!("{{\"t\":{}}}", NOW - 12.0));
        let s = sample(read_with(&k, &spec, &[Int(3), item]));
        assert_eq!(counts(&s), (Some(3), Some(3), None, Some(12.0)));
        // Emptied between LLEN and LINDEX: nothing waits.
        let s = sample(read_with(&k, &spec, &[Int(1), Nil]));
        assert_eq!(s.oldest_age_seconds, Some(0.0));
        // An unreadable item: age unknown, and counted as a parse failure.
        match read_with(&k, &spec, &[Int(1), bulk("garbage")]) {
            KeyOutcome::Sample(s, failed, _) => assert!(failed && s.oldest_age_seconds.is_none()),
            other => panic!("{other:?}"),
        }
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

    /// `XINFO GROUPS` replies, one group each, with what it must read as.
    #[test]
    fn stream_group_fields_missing_or_malformed_are_unknown_never_zero() {
        let info = Array(vec![bulk("length"), Int(9), bulk("entries-added"), Int(12)]);
        let group = |fields: Vec<Value>| Array(vec![Array(fields)]);
        let complete = || {
            vec![
                bulk("name"),
                bulk("g"),
                bulk("consumers"),
                Int(2),
                bulk("pending"),
                Int(3),
                bulk("lag"),
                Int(4),
            ]
        };
        let without = |field: &str| {
            let mut f = complete();
            let i = f.iter().position(|v| *v == bulk(field)).unwrap();
            f.drain(i..i + 2);
            f
        };
        let with = |field: &str, v: Value| {
            let mut f = complete();
            let i = f.iter().position(|x| *x == bulk(field)).unwrap();
            f[i + 1] = v;
            f
        };
        // (case, groups reply, pending, consumers, lag, stream ready)
        type Row = (
            &'static str,
            Value,
            Option<u64>,
            Option<u64>,
            Option<u64>,
            Option<u64>,
        );
        let table: Vec<Row> = vec![
            (
                "complete",
                group(complete()),
                Some(3),
                Some(2),
                Some(4),
                Some(4),
            ),
            (
                "pending missing",
                group(without("pending")),
                None,
                Some(2),
                Some(4),
                Some(4),
            ),
            (
                "consumers missing",
                group(without("consumers")),
                Some(3),
                None,
                Some(4),
                Some(4),
            ),
            (
                "pending not a count",
                group(with("pending", bulk("x"))),
                None,
                Some(2),
                Some(4),
                Some(4),
            ),
            (
                "consumers negative",
                group(with("consumers", Int(-1))),
                Some(3),
                None,
                Some(4),
                Some(4),
            ),
            (
                "lag nil (Redis cannot tell)",
                group(with("lag", Nil)),
                Some(3),
                Some(2),
                None,
                None,
            ),
        ];
        for (case, groups, pending, consumers, lag, ready) in table {
            let mut s = QueueSample::named("s");
            read_stream(&mut s, &[info.clone(), groups]);
            let g = &s.groups[0];
            assert_eq!(
                (g.pending, g.consumers, g.lag),
                (pending, consumers, lag),
                "{case}"
            );
            assert_eq!(s.ready, ready, "{case}");
            assert_eq!(s.depth, Some(9), "{case}");
        }
        // A group entry without a name, or a groups reply that is not a
        // list: that group may be the slowest, so `ready` is unknown.
        for (case, groups) in [
            ("group without a name", group(without("name"))),
            ("group not a map", Array(vec![Int(1)])),
            ("groups not a list", bulk("?")),
        ] {
            let mut s = QueueSample::named("s");
            read_stream(&mut s, &[info.clone(), groups]);
            assert!(s.groups.is_empty(), "{case}");
            assert_eq!(s.ready, None, "{case}");
        }
        // No groups at all: everything in the stream is ready.
        let mut s = QueueSample::named("s");
        read_stream(&mut s, &[info.clone(), Array(vec![])]);
        assert_eq!(s.ready, Some(9));
    }

    #[test]
    fn a_deleted_stream_is_empty_until_discovery_confirms_it_is_gone() {
        let k = key(KeyState::Typed(KeyType::Stream));
        let spec = QueueSpec::new(QueueTarget::Key("k".into()));
        let gone = error("ERR no such key");
        let s = sample(read_with(&k, &spec, &[gone.clone(), gone]));
        assert_eq!((s.depth, s.ready), (Some(0), Some(0)));
    }
}
