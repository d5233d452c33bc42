//! Zero config's discovery rounds: the I/O around the pure recognition
//! in [`recognise`](super::recognise). Every round makes one untyped SCAN
//! pass and asks `TYPE` of the names it does not know: at first and every
//! [`REFRESH`](super::remembered::REFRESH) a full round, which knows no
//! name and so asks it of every one, page by page; between, a remembered
//! round, which skips the names of no queue type the last round saw
//! ([`remembered`](super::remembered)). Where Redis refuses `TYPE`, a full
//! round makes the typed passes instead. With `plain_keys: false`, the
//! libraries alone in one pass. Then the marks' reads, the recognition,
//! and the plain keys left within `max_keys`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use super::super::commands::{
    Conn, PIPELINE_CHUNK, PIPELINES_IN_FLIGHT, ScanPages, scan_where, type_of,
};
use super::super::discovery::{self, Candidate, Candidates, Discovered};
use super::super::tracked::KeyState;
use super::Unit;
use super::consumed::consumed;
use super::library::Seen;
use super::library_round::{Learnt, read_marks};
use super::picture::{LeftOut, withheld_names};
use super::recognise::{
    Marks, Recognition, beside_marks, evidence, is_evidence, is_mark, marks_of, recognise,
};
use super::remembered::{Learner, Remembered};
use crate::config::{KeyType, PresetSpec, RedisSourceConfig};

/// What a zero-config round found: the plain keys to track and the
/// library entries recognised, each with its units.
#[derive(Debug)]
pub struct ZeroConfig {
    /// Lists, zsets and streams no recognised library consumed.
    pub plain: Discovered,
    /// One entry per library and prefix, as a `- preset:` entry would be.
    pub entries: Vec<(PresetSpec, Vec<Unit>)>,
    /// The keys the entries took (for `discover`, whose patterns must not
    /// reach them).
    pub consumed: BTreeSet<Vec<u8>>,
    /// What the round learnt of the names of no queue type, for the next
    /// (with plain keys only).
    pub remembered: Option<Remembered>,
    /// The round relied on what earlier rounds learnt (one SCAN pass).
    pub from_memory: bool,
    /// What the round could not tell, to be counted and logged.
    pub left_out: LeftOut,
    /// What the round recognised, for the library rounds until the next
    /// scan ([`library_round`](super::library_round)).
    pub learnt: Learnt,
}

/// What `seen` could not read, and the keys `recognition` left out for it.
fn left_out(seen: &Seen, recognition: &Recognition) -> LeftOut {
    LeftOut {
        unread: seen.unread.values().copied().collect(),
        keys: recognition.withheld.len(),
        withheld: withheld_names(&recognition.withheld),
        names_unknown: seen.names_unknown(),
        over: seen.over(),
        over_hides: seen.over_hides(),
    }
}

/// Runs the pure `pass` (recognition, the evidence check: each a pass over
/// every name found) on the blocking pool, so a large keyspace's pass
/// leaves the runtime's threads to polls and scrapes.
pub(super) async fn apart<T: Send + 'static>(
    pass: impl FnOnce() -> T + Send + 'static,
) -> redis::RedisResult<T> {
    tokio::task::spawn_blocking(pass).await.map_err(|e| {
        redis::RedisError::from((
            redis::ErrorKind::Client,
            "zero config's recognition pass ended",
            e.to_string(),
        ))
    })
}

/// One zero-config discovery round: one untyped SCAN pass, keeping the
/// names that may mark a library, and `TYPE` of the names `remembered`
/// does not hold (all of them in a full round: no memory, or memory older
/// than [`REFRESH`](super::remembered::REFRESH)); where `TYPE` is refused,
/// the typed passes. Then one pipeline reading the marks, then the
/// recognition and the plain keys left, within `max_keys` (library units
/// first: they are what the user came for).
pub async fn discover(
    conn: &mut Conn,
    config: &RedisSourceConfig,
    known: &[(Vec<u8>, usize)],
    remembered: Option<Remembered>,
    polled: &[(PresetSpec, Vec<Unit>)],
) -> redis::RedisResult<ZeroConfig> {
    if !config.plain_keys {
        return libraries_only(conn, config).await;
    }
    let (round, with_memory) = match remembered {
        Some(r) if r.type_refused() => (OnePass::Refused { type_refused: true }, false),
        Some(r) if r.fresh(Instant::now()) => {
            (one_pass_round(conn, config, known, Some(&r)).await?, true)
        }
        _ => (one_pass_round(conn, config, known, None).await?, false),
    };
    let from_memory = with_memory && matches!(round, OnePass::Done(..));
    let (found, mut marks, remembered) = match round {
        OnePass::Done(done) => *done,
        OnePass::Refused { type_refused } => {
            typed_passes(conn, config, known, type_refused).await?
        }
    };
    marks.beside = beside_marks(&found.keys, config.max_keys);
    let beyond = marks.keep_within(config.max_keys);
    let mut seen = read_marks(conn, marks, config).await?;
    seen.beyond(beyond, config.max_keys);
    let (seen, mut found, recognition) = apart(move || {
        let recognition = recognise(&seen, &found);
        (seen, found, recognition)
    })
    .await?;
    type_orphans_again(conn, &mut found, polled, &recognition).await?;
    let left_out = left_out(&seen, &recognition);
    let learnt = Learnt::new(&recognition.entries, &seen, &recognition.withheld);
    found
        .keys
        .retain(|k, _| !recognition.consumed.contains(k) && !recognition.withheld.contains(k));
    let units: usize = recognition.entries.iter().map(|(_, u)| u.len()).sum();
    let limit = config.max_keys.saturating_sub(units);
    let mut consumed = recognition.consumed;
    consumed.extend(recognition.withheld);
    Ok(ZeroConfig {
        plain: discovery::track(found, config, limit),
        entries: recognition.entries,
        consumed,
        remembered: Some(remembered),
        from_memory,
        left_out,
        learnt,
    })
}

/// A library queue removed while the round ran (BullMQ's `obliterate`, a
/// Sidekiq queue cleared) between its keys' `TYPE` and its mark's read
/// leaves keys typed as they were and no mark to claim them. The keys the
/// queues `polled` until now owned that nothing claims now are typed
/// again, so one deleted since is dropped, not tracked as an empty plain
/// queue until the next scan. Costs a command only when a queue went.
async fn type_orphans_again(
    conn: &Conn,
    found: &mut Candidates,
    polled: &[(PresetSpec, Vec<Unit>)],
    recognition: &Recognition,
) -> redis::RedisResult<()> {
    let orphans: Vec<Vec<u8>> = orphans(polled, &found.keys, recognition);
    if orphans.is_empty() {
        return Ok(());
    }
    let states = type_of(conn, &orphans).await?;
    for (key, state) in orphans.iter().zip(states) {
        if let Some(c) = found.keys.get_mut(key) {
            c.state = state;
        }
    }
    Ok(())
}

/// The keys the entries `polled` owned that `recognition` leaves plain
/// (pure).
fn orphans(
    polled: &[(PresetSpec, Vec<Unit>)],
    keys: &BTreeMap<Vec<u8>, Candidate>,
    recognition: &Recognition,
) -> Vec<Vec<u8>> {
    consumed(polled, keys)
        .into_iter()
        .filter(|k| !recognition.consumed.contains(k) && !recognition.withheld.contains(k))
        .collect()
}

/// A one-pass round's outcome.
enum OnePass {
    /// The keys found, the marks, and what the round learnt (boxed: the
    /// other variant is a flag).
    Done(Box<(Candidates, Marks, Remembered)>),
    /// `TYPE` was refused or failed: the typed passes must run instead.
    Refused {
        /// Refused for want of permission, so for every later round too.
        type_refused: bool,
    },
}

/// A full round where `TYPE` cannot be asked: the typed passes beside the
/// untyped marks pass, which remembers every name's hash; those of the
/// keys the typed passes found are left out.
async fn typed_passes(
    conn: &mut Conn,
    config: &RedisSourceConfig,
    known: &[(Vec<u8>, usize)],
    type_refused: bool,
) -> redis::RedisResult<(Candidates, Marks, Remembered)> {
    let learner = Remembered::full(type_refused);
    let mut plain_conn = conn.clone();
    let (found, marks) = futures_util::future::try_join(
        discovery::find(&mut plain_conn, config, known),
        scan_marks(conn, config.scan_count, false, Some(&learner)),
    )
    .await?;
    let remembered = learner.finish(found.keys.keys().map(Vec::as_slice));
    Ok((found, marks, remembered))
}

/// Names a one-pass round sends `TYPE` at once: the pipelined chunks
/// [`pipelined`] keeps in flight, then the next SCAN page. Also what it
/// holds of the keyspace at most, beside the queue keys found.
const TYPE_BATCH: usize = PIPELINES_IN_FLIGHT * PIPELINE_CHUNK;

/// One untyped pass, keeping the marks, and `TYPE` of the names (marks
/// too) `memory` does not hold, a batch at a time as the pages arrive
/// (and, in a cluster, of the keys tracked so far that no node returned:
/// see [`discovery::find`]). With no memory (a full round) that is every
/// name.
async fn one_pass_round(
    conn: &Conn,
    config: &RedisSourceConfig,
    known: &[(Vec<u8>, usize)],
    memory: Option<&Remembered>,
) -> redis::RedisResult<OnePass> {
    let learner = memory.map_or_else(|| Remembered::full(false), Remembered::steady);
    let mut typing = Typing {
        conn,
        queue_types: config.queues.first().and_then(|q| q.types.as_deref()),
        learner: &learner,
        keys: BTreeMap::new(),
    };
    let (mut marks, mut unknown) = (Vec::new(), Vec::new());
    let mut pages = ScanPages::new(conn, b"*", None, config.scan_count).await?;
    let mut held = Vec::new();
    while let Some(page) = pages.next_page().await? {
        for k in page {
            // A mark's name may also be a queue key's (a list named
            // `_kombu.binding.x` is a plain list): it is typed as any name.
            if is_mark(&k) {
                marks.push(k.clone());
            }
            if let Some(m) = memory {
                let h = m.hash(&k);
                if m.holds(h) {
                    held.push(h);
                    continue;
                }
            }
            unknown.push(k);
        }
        learner.hashes(&held);
        held.clear();
        if unknown.len() >= TYPE_BATCH
            && let Some(refused) = typing.sort(std::mem::take(&mut unknown)).await?
        {
            return Ok(refused);
        }
    }
    if conn.is_cluster() {
        unknown.extend(known.iter().map(|(k, _)| k.clone()));
        unknown.sort_unstable();
        unknown.dedup();
    }
    if let Some(refused) = typing.sort(unknown).await? {
        return Ok(refused);
    }
    let keys = typing.keys;
    let remembered = learner.finish(std::iter::empty());
    marks.sort_unstable();
    marks.dedup();
    Ok(OnePass::Done(Box::new((
        Candidates::of_pattern_keys(keys),
        marks_of(marks, Vec::new()),
        remembered,
    ))))
}

/// Sorts names by their `TYPE` for a one-pass round: the queue keys kept,
/// the rest learnt as no queue.
struct Typing<'a> {
    conn: &'a Conn,
    /// The `types:` of the source's `*` entry, if it names them.
    queue_types: Option<&'a [KeyType]>,
    learner: &'a Learner,
    /// The queue keys found so far.
    keys: BTreeMap<Vec<u8>, Candidate>,
}

impl Typing<'_> {
    /// Asks `TYPE` of `names` and sorts them; `Some` when Redis refused or
    /// failed it, so the round must run the typed passes instead.
    async fn sort(&mut self, names: Vec<Vec<u8>>) -> redis::RedisResult<Option<OnePass>> {
        let states = discovery_types(self.conn, &names).await?;
        let mut others = Vec::new();
        for (k, state) in names.iter().zip(states) {
            match state {
                KeyState::Typed(t) if self.queue_types.is_none_or(|ts| ts.contains(&t)) => {
                    let c = Candidate {
                        spec: 0,
                        exact: false,
                        state,
                    };
                    self.keys.insert(k.clone(), c);
                }
                KeyState::Missing => {}
                KeyState::Unknown(reason) => {
                    return Ok(Some(OnePass::Refused {
                        type_refused: reason == crate::snapshot::Reason::Auth,
                    }));
                }
                KeyState::Typed(_) | KeyState::Unsupported(_) => others.push(k.as_slice()),
            }
        }
        self.learner.others(others);
        Ok(None)
    }
}

/// Zero config with `plain_keys: false`: the libraries alone, in ONE SCAN
/// pass (the marks pass, also keeping the few names recognition asks the
/// type of, [`is_evidence`]), then the marks' reads, then `TYPE` of just
/// the keys [`recognise`] looks at for the registries and bindings found
/// ([`evidence`]), then `GET` of the `id` beside a Bull-named list or zset
/// found; the same recognition as with plain keys, no plain key.
async fn libraries_only(conn: &Conn, config: &RedisSourceConfig) -> redis::RedisResult<ZeroConfig> {
    let mut marks = scan_marks(conn, config.scan_count, true, None).await?;
    let names = std::mem::take(&mut marks.evidence);
    let beyond = marks.keep_within(config.max_keys);
    let marks_left = config.max_keys - (marks.sets.len() + marks.cmds.len());
    let mut seen = read_marks(conn, marks, config).await?;
    seen.beyond(beyond, config.max_keys);
    let (mut seen, wanted) = apart(move || {
        let wanted = evidence(&seen, names);
        (seen, wanted)
    })
    .await?;
    let states = discovery_types(conn, &wanted).await?;
    let mut found = Candidates::default();
    let mut refused = Vec::new();
    for (k, state) in wanted.into_iter().zip(states) {
        match state {
            KeyState::Typed(KeyType::List | KeyType::Zset | KeyType::Stream) => {}
            KeyState::Unknown(reason) => {
                refused.push(reason);
                continue;
            }
            _ => continue,
        }
        let c = Candidate {
            spec: 0,
            exact: false,
            state,
        };
        found.keys.insert(k, c);
    }
    // The marks beside the typed keys found, as with plain keys.
    let beside = beside_marks(&found.keys, config.max_keys);
    if !beside.is_empty() {
        let mut ids = Marks {
            beside,
            ..Marks::default()
        };
        let beyond = ids.keep_within(marks_left);
        seen.extend(read_marks(conn, ids, config).await?);
        seen.beyond(beyond, config.max_keys);
    }
    let (seen, recognition) = apart(move || {
        let recognition = recognise(&seen, &found);
        (seen, recognition)
    })
    .await?;
    let left_out = left_out(&seen, &recognition);
    let learnt = Learnt::new(&recognition.entries, &seen, &recognition.withheld);
    let plain = Discovered {
        tracked: Vec::new(),
        dropped: 0,
        collisions: 0,
        refused,
        beyond: Vec::new(),
    };
    Ok(ZeroConfig {
        plain,
        entries: recognition.entries,
        consumed: recognition.consumed,
        remembered: None,
        from_memory: false,
        left_out,
        learnt,
    })
}

/// `TYPE` of `keys` (none sent when there are none).
async fn discovery_types(conn: &Conn, keys: &[Vec<u8>]) -> redis::RedisResult<Vec<KeyState>> {
    match keys.is_empty() {
        true => Ok(Vec::new()),
        false => type_of(conn, keys).await,
    }
}

/// One untyped SCAN pass (bounded COUNT) for the names that may mark a
/// library, filtered as the replies arrive: one pass rather than a typed
/// pass for hashes and another for sets, since the read each name gets
/// (`HMGET`, `SMEMBERS`) tells its type anyway. `evidence`: also keep the
/// names [`is_evidence`] accepts (libraries only, with no typed passes).
/// `learner`: note every other name (a full round by typed passes; see
/// [`typed_passes`]).
async fn scan_marks(
    conn: &Conn,
    count: u32,
    evidence: bool,
    learner: Option<&Learner>,
) -> redis::RedisResult<Marks> {
    let keep = |k: &[u8]| {
        if is_mark(k) || (evidence && is_evidence(k)) {
            return true;
        }
        if let Some(l) = learner {
            l.other(l.hash(k));
        }
        false
    };
    let names = scan_where(&mut conn.clone(), b"*", None, count, &keep).await?;
    let (marks, evidence): (Vec<_>, Vec<_>) = names.into_iter().partition(|k| is_mark(k));
    Ok(marks_of(marks, evidence))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn a_long_recognition_pass_leaves_the_runtime_to_other_tasks() {
        // One thread: a pass run in place would hold it until it ends.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let ticks = Arc::new(AtomicUsize::new(0));
        let seen = ticks.clone();
        let (during, result) = rt.block_on(async move {
            let ticker = tokio::spawn(async move {
                loop {
                    seen.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            });
            tokio::task::yield_now().await;
            let before = ticks.load(Ordering::Relaxed);
            let result = super::apart(|| {
                std::thread::sleep(Duration::from_millis(200));
                42
            })
            .await;
            ticker.abort();
            (ticks.load(Ordering::Relaxed) - before, result)
        });
        assert_eq!(result.ok(), Some(42));
        assert!(during >= 5, "the other task ran {during} times");
    }
}
