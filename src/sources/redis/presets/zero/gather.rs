//! Zero config's gather stage: all of a round's I/O, each step handing back
//! a plain value for the pure stages. A scan ([`scan`]) is one untyped
//! SCAN pass and `TYPE` of the names it does not know: at first and every
//! [`REFRESH`](super::super::remembered::REFRESH) a full round, which knows
//! no name and so asks it of every one, page by page; between, a
//! remembered round, which skips the names of no queue type the last round
//! saw ([`remembered`](super::super::remembered)). Where Redis refuses
//! `TYPE`, a full round makes the typed passes instead. Then the marks'
//! reads, in one pipeline beside the sets' bounded reads. With
//! `plain_keys: false`, the libraries alone in one pass ([`library_marks`],
//! then [`evidence_keys`]). A library round reads the marks the scan learnt
//! by name ([`learnt_marks`]), then the registries it lists again
//! ([`relisted`]). The keys a round must type again once classified are a
//! second step the orchestrator drives ([`retype`]).
//!
//! Which names are marks and how each is read is the libraries' (`marks`);
//! this file imports no later stage and not the orchestrator
//! (`tests/architecture.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use super::super::super::commands::{
    Conn, PIPELINE_CHUNK, PIPELINES_IN_FLIGHT, ScanPages, pipelined, scan_where, type_of,
};
use super::super::super::discovery::{self, Candidate, Candidates};
use super::super::super::tracked::KeyState;
use super::super::bounded::read_sets;
use super::super::library::Seen;
use super::super::registry::{Registries, registries};
use super::super::remembered::{Learner, Remembered};
use super::super::spec::PresetSpec;
use super::learnt::{Learnt, fixed_marks, relisted_each_round};
use super::marks::{Marks, beside_marks, is_evidence, is_mark, marks_named, marks_of, seen};
use crate::config::{KeyType, RedisSourceConfig};
use crate::snapshot::Reason;

/// What a keyspace scan gathered: the keys found with their types, what
/// the marks' reads found, and what the round learnt of the names.
#[derive(Debug)]
pub struct Gathered {
    /// Lists, zsets and streams (and keys of unknown type) found.
    pub found: Candidates,
    /// What the marks' reads found.
    pub seen: Seen,
    /// What the round learnt of the names of no queue type, for the next.
    pub remembered: Remembered,
    /// The round relied on what earlier rounds learnt (one SCAN pass).
    pub from_memory: bool,
}

/// One keyspace scan's I/O: one untyped SCAN pass, keeping the names that
/// may mark a library, and `TYPE` of the names `remembered` does not hold
/// (all of them in a full round: no memory, or memory older than
/// [`REFRESH`](super::super::remembered::REFRESH)); where `TYPE` is
/// refused, the typed passes. Then one pipeline reading the marks (those
/// named like one, and those beside the keys found), at most `max_keys`.
pub async fn scan(
    conn: &mut Conn,
    config: &RedisSourceConfig,
    known: &[(Vec<u8>, usize)],
    remembered: Option<Remembered>,
) -> redis::RedisResult<Gathered> {
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
    Ok(Gathered {
        found,
        seen,
        remembered,
        from_memory,
    })
}

/// Types again the keys of `found` named in `recheck` (classify's
/// [`Recognition::recheck`](super::classify::Recognition::recheck)), so one
/// deleted since its `TYPE` is dropped, not tracked as an empty plain
/// queue until the next scan. Sends nothing when `recheck` is empty (no
/// queue went while the round ran; the orchestrator then does not call
/// it).
pub async fn retype(
    conn: &Conn,
    found: &mut Candidates,
    recheck: &[Vec<u8>],
) -> redis::RedisResult<()> {
    if recheck.is_empty() {
        return Ok(());
    }
    let states = type_of(conn, recheck).await?;
    for (key, state) in recheck.iter().zip(states) {
        if let Some(c) = found.keys.get_mut(key) {
            c.state = state;
        }
    }
    Ok(())
}

/// What the libraries-only pass read of the marks.
#[derive(Debug)]
pub struct LibraryMarks {
    /// What the marks' reads found.
    pub seen: Seen,
    /// The names the pass kept whose type recognition may ask
    /// ([`is_evidence`]).
    pub names: Vec<Vec<u8>>,
    /// How many more marks the round may read (`max_keys` less those read).
    pub marks_left: usize,
}

/// Zero config with `plain_keys: false`, its first step: ONE SCAN pass
/// (the marks pass, also keeping the few names recognition asks the type
/// of, [`is_evidence`]), then the marks' reads.
pub async fn library_marks(
    conn: &Conn,
    config: &RedisSourceConfig,
) -> redis::RedisResult<LibraryMarks> {
    let mut marks = scan_marks(conn, config.scan_count, true, None).await?;
    let names = std::mem::take(&mut marks.evidence);
    let beyond = marks.keep_within(config.max_keys);
    let marks_left = config.max_keys - (marks.sets.len() + marks.cmds.len());
    let mut seen = read_marks(conn, marks, config).await?;
    seen.beyond(beyond, config.max_keys);
    Ok(LibraryMarks {
        seen,
        names,
        marks_left,
    })
}

/// What the libraries-only pass found of the keys recognition looks at.
#[derive(Debug)]
pub struct EvidenceKeys {
    /// The lists, zsets and streams among them, with their types.
    pub found: Candidates,
    /// One reason per `TYPE` Redis refused.
    pub refused: Vec<Reason>,
}

/// Zero config with `plain_keys: false`, its second step: `TYPE` of just
/// the keys recognition looks at for the marks found (`wanted`, from
/// `marks::evidence`), then the marks beside the typed keys found (`GET`
/// of the `id` beside a Bull-named list or zset...), read into `seen`
/// within the `marks_left` marks the round may still read.
pub async fn evidence_keys(
    conn: &Conn,
    config: &RedisSourceConfig,
    wanted: Vec<Vec<u8>>,
    seen: &mut Seen,
    marks_left: usize,
) -> redis::RedisResult<EvidenceKeys> {
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
    Ok(EvidenceKeys { found, refused })
}

/// A library round's first step: the marks the scan `learnt` read (its
/// registries and bindings, the refused ones, the sets over the cap), and
/// the registries libraries write under a fixed name, by name in one
/// pipeline; the marks beyond `max_keys` at the scan stay unread.
pub async fn learnt_marks(
    conn: &Conn,
    config: &RedisSourceConfig,
    learnt: &Learnt,
) -> redis::RedisResult<Seen> {
    let mut names: BTreeSet<Vec<u8>> = learnt.sets.keys().cloned().collect();
    names.extend(fixed_marks().iter().map(|m| m.to_vec()));
    names.extend(learnt.unread.iter().cloned());
    names.extend(learnt.over.keys().cloned());
    names.retain(|m| !learnt.beyond_max_keys(m));
    read_marks(conn, marks_named(names.into_iter().collect()), config).await
}

/// A library round's second step, once its marks are unchanged: the
/// registries of the entries `learnt` whose library lists its queues again
/// each round (`Recognise::relisted_each_round`: a `SCAN` of its pattern, its
/// queues' marks), in the order of `learnt`'s entries.
pub async fn relisted(
    conn: &Conn,
    config: &RedisSourceConfig,
    learnt: &Learnt,
) -> redis::RedisResult<Registries> {
    let again: Vec<PresetSpec> = learnt
        .entries
        .iter()
        .filter(|(s, _)| relisted_each_round(s))
        .map(|(s, _)| s.clone())
        .collect();
    registries(
        &again,
        &mut conn.clone(),
        config.scan_count,
        config.max_keys,
    )
    .await
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
/// [`pipelined`](super::super::super::commands::pipelined) keeps in flight, then the next SCAN page. Also what it
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

/// Reads every mark: the sets by bounded `SSCAN`, each whole only if it
/// holds at most `max_keys` members ([`read_sets`]), beside one pipeline of
/// the other marks' commands (each library's read: a `meta` hash's
/// fields, an `id`'s value, a sign's `TYPE`).
async fn read_marks(
    conn: &Conn,
    marks: Marks,
    config: &RedisSourceConfig,
) -> redis::RedisResult<Seen> {
    let cmds: Vec<redis::Cmd> = (marks.cmds.iter())
        .chain(&marks.beside)
        .chain(&marks.signs)
        .map(|(_, c)| c.clone())
        .collect();
    let others = async {
        match cmds.is_empty() {
            true => Ok(Vec::new()),
            false => pipelined(conn, cmds).await,
        }
    };
    let sets = read_sets(conn, &marks.sets, config.scan_count, config.max_keys);
    let (sets, replies) = futures_util::future::try_join(sets, others).await?;
    Ok(seen(marks, sets, &replies))
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
