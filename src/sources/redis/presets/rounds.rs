//! Zero config's discovery rounds: the I/O around the pure recognition
//! in [`recognise`](super::recognise). A full round (the typed passes
//! beside the marks pass) at first and every
//! [`REFRESH`](super::remembered::REFRESH); between, a remembered round of
//! one pass ([`remembered`](super::remembered)); with `plain_keys: false`,
//! the libraries alone in one pass. Then the marks' reads, the recognition,
//! and the plain keys left within `max_keys`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use super::super::commands::{Conn, pipelined, scan_where, type_of};
use super::super::discovery::{self, Candidate, Candidates, Discovered};
use super::super::tracked::KeyState;
use super::recognise::{
    Marks, Seen, bull_candidates, evidence, is_evidence, is_mark, marks_of, recognise, seen,
};
use super::remembered::{Learner, Remembered};
use super::{Unit, bullmq};
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
}

/// One zero-config discovery round. A full round: the source's typed SCANs
/// (its one `*` entry, through [`discovery::find`]) beside one untyped SCAN
/// for the names that may mark a library, which also remembers the names
/// of no queue type. A steady round, while `remembered` is fresh: the
/// untyped SCAN alone, then `TYPE` of the names it does not remember
/// ([`remembered`](super::remembered)). Then one pipeline reading the
/// marks, then the recognition and the plain keys left, within `max_keys`
/// (library units first: they are what the user came for).
pub async fn discover(
    conn: &mut Conn,
    config: &RedisSourceConfig,
    known: &[(Vec<u8>, usize)],
    remembered: Option<Remembered>,
) -> redis::RedisResult<ZeroConfig> {
    if !config.plain_keys {
        return libraries_only(conn, config).await;
    }
    let steady = match remembered.filter(|r| r.fresh(Instant::now())) {
        Some(r) => steady_round(conn, config, known, &r).await?,
        None => Steady::Full {
            type_refused: false,
        },
    };
    let from_memory = matches!(steady, Steady::Done(..));
    let (mut found, mut marks, remembered) = match steady {
        Steady::Done(done) => *done,
        Steady::Full { type_refused } => full_round(conn, config, known, type_refused).await?,
    };
    marks.bull_ids = bull_candidates(&found.keys, config.max_keys);
    let seen = read_marks(conn, marks).await?;
    let recognition = recognise(&seen, &found);
    found.keys.retain(|k, _| !recognition.consumed.contains(k));
    let units: usize = recognition.entries.iter().map(|(_, u)| u.len()).sum();
    let limit = config.max_keys.saturating_sub(units);
    Ok(ZeroConfig {
        plain: discovery::track(found, config, limit),
        entries: recognition.entries,
        consumed: recognition.consumed,
        remembered: Some(remembered),
        from_memory,
    })
}

/// A steady round's outcome.
enum Steady {
    /// The keys found, the marks, and what the round learnt (boxed: the
    /// other variant is a flag).
    Done(Box<(Candidates, Marks, Remembered)>),
    /// A full round must run instead: `TYPE` was refused or failed.
    Full {
        /// Refused for want of permission, so for every later round too.
        type_refused: bool,
    },
}

/// The typed passes beside the untyped marks pass, which remembers every
/// name's hash; those of the keys the typed passes found are left out.
async fn full_round(
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

/// The untyped pass alone, keeping the marks and the names `remembered`
/// does not hold, then `TYPE` of those (and, in a cluster, of the keys
/// tracked so far that no node returned: see [`discovery::find`]).
async fn steady_round(
    conn: &Conn,
    config: &RedisSourceConfig,
    known: &[(Vec<u8>, usize)],
    remembered: &Remembered,
) -> redis::RedisResult<Steady> {
    let learner = remembered.steady();
    let keep = |k: &[u8]| {
        if is_mark(k) {
            return true;
        }
        let h = remembered.hash(k);
        if remembered.holds(h) {
            learner.other(h);
            return false;
        }
        true
    };
    let names = scan_where(&mut conn.clone(), b"*", None, config.scan_count, &keep).await?;
    let (marks, mut unknown): (Vec<_>, Vec<_>) = names.into_iter().partition(|k| is_mark(k));
    if conn.is_cluster() {
        unknown.extend(known.iter().map(|(k, _)| k.clone()));
        unknown.sort_unstable();
        unknown.dedup();
    }
    let states = discovery_types(conn, &unknown).await?;
    let queue_types = config.queues.first().and_then(|q| q.types.as_deref());
    let mut keys = BTreeMap::new();
    for (k, state) in unknown.into_iter().zip(states) {
        match state {
            KeyState::Typed(t) if queue_types.is_none_or(|ts| ts.contains(&t)) => {
                let c = Candidate {
                    spec: 0,
                    exact: false,
                    state,
                };
                keys.insert(k, c);
            }
            KeyState::Missing => {}
            KeyState::Unknown(reason) => {
                return Ok(Steady::Full {
                    type_refused: reason == crate::snapshot::Reason::Auth,
                });
            }
            KeyState::Typed(_) | KeyState::Unsupported(_) => learner.others([k.as_slice()]),
        }
    }
    let remembered = learner.finish(std::iter::empty());
    Ok(Steady::Done(Box::new((
        Candidates::of_pattern_keys(keys),
        marks_of(marks, Vec::new()),
        remembered,
    ))))
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
    let mut seen = read_marks(conn, marks).await?;
    let wanted = evidence(&seen, names);
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
    // Bull: the `id` beside a Bull-named list or zset, as with plain keys.
    let bull_ids = bull_candidates(&found.keys, config.max_keys);
    if !bull_ids.is_empty() {
        let ids = Marks {
            bull_ids,
            ..Marks::default()
        };
        seen.bull_ids = read_marks(conn, ids).await?.bull_ids;
    }
    let recognition = recognise(&seen, &found);
    let plain = Discovered {
        tracked: Vec::new(),
        dropped: 0,
        collisions: 0,
        refused,
    };
    Ok(ZeroConfig {
        plain,
        entries: recognition.entries,
        consumed: recognition.consumed,
        remembered: None,
        from_memory: false,
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
/// `learner`: note every other name (a full round; see [`full_round`]).
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

/// Reads every mark in one pipeline: `SMEMBERS` of each set, `HMGET
/// version opts.maxLenEvents` of each `meta` hash.
async fn read_marks(conn: &Conn, marks: Marks) -> redis::RedisResult<Seen> {
    let mut cmds: Vec<redis::Cmd> = marks
        .sets
        .iter()
        .map(|s| super::cmd("SMEMBERS", s))
        .collect();
    cmds.extend(marks.metas.iter().map(|m| bullmq::marks_cmd(m)));
    cmds.extend(marks.bull_ids.iter().map(|id| super::cmd("GET", id)));
    if cmds.is_empty() {
        return Ok(Seen::default());
    }
    let replies = pipelined(conn, cmds).await?;
    Ok(seen(marks, &replies))
}

/// SCAN passes a zero-config round makes over the keyspace: its plain
/// keys' three types, and the names that may mark a library; with
/// `plain_keys: false`, the last alone.
pub fn passes(config: &RedisSourceConfig) -> u64 {
    if config.plain_keys { 4 } else { 1 }
}
