//! Each preset entry's registry, read in the discovery round: the
//! logical queues a library names itself (RQ's, Sidekiq's and asynq's
//! sets; BullMQ's `meta` hashes and Bull's `id` keys by SCAN, told apart
//! by BullMQ's marks in the `meta` hash; the
//! priority-zset's priorities by SCAN).

use super::super::commands::{Conn, pipelined, scan};
use super::bounded::{Bound, SetRead, read_sets};
use super::{Unit, bull, bullmq, fixed_queues, key, sidekiq};
use crate::config::{KeyType, Preset, PresetSpec};
use crate::snapshot::Reason;

/// What the preset entries' registries named.
#[derive(Debug, Default)]
pub struct Registries {
    /// Per entry in config order, its logical queues, sorted.
    pub units: Vec<Vec<Unit>>,
    /// One `meta` hash per queue left out of every entry because Redis
    /// refused reading it, with why: the read tells whose the queue is
    /// (BullMQ's or Bull's, at a prefix both entries read); and each
    /// registry set Redis refused (`NOPERM` on `SMEMBERS`), whose entry then
    /// names no queue. Counted, never guessed.
    pub refused: Vec<(Vec<u8>, Reason)>,
    /// The keys under a refused registry's prefix (found by a bounded
    /// `SCAN`): the names its library's queues may have are among theirs.
    pub near_refused: Vec<Vec<u8>>,
    /// Marks not read for a bound (a registry over `max_keys` members, a
    /// `meta` hash beyond the `max_keys` marks a round reads), with the
    /// bound: the queues they may name are unknown. Counted, never guessed.
    pub over: Vec<(Vec<u8>, Bound)>,
}

/// Reads every preset entry's registry (bounded `SSCAN`, or SCAN with
/// bounded COUNT), reading at most `max_keys` marks in all (registries and
/// `meta` hashes) and a registry only if it holds at most `max_keys`
/// members; the others are [`Registries::over`].
pub async fn registries(
    specs: &[PresetSpec],
    conn: &mut Conn,
    scan_count: u32,
    max_keys: usize,
) -> redis::RedisResult<Registries> {
    let mut found = Registries::default();
    let mut marks_left = max_keys;
    for spec in specs {
        let units = match &spec.preset {
            Preset::Rq { prefix } | Preset::Sidekiq { prefix, .. } | Preset::Asynq { prefix } => {
                let registry = registry_key(&spec.preset, prefix);
                let read = match marks_left.checked_sub(1) {
                    Some(left) => {
                        marks_left = left;
                        let sets = std::slice::from_ref(&registry);
                        read_sets(conn, sets, scan_count, max_keys).await?.pop()
                    }
                    None => Some(SetRead::Over(Bound::MaxKeys(max_keys))),
                };
                let members = match read {
                    Some(SetRead::Members(m)) => m,
                    Some(SetRead::Over(bound)) => {
                        found.over.push((registry, bound));
                        Vec::new()
                    }
                    // A refused registry names no queue, and leaves the
                    // source up: which names its queues may have is
                    // learnt from the keys under its prefix.
                    Some(SetRead::Reply(v)) => match v.extract_error() {
                        Err(e) if e.code() == Some("NOPERM") => {
                            let under = match registry.strip_suffix(b"queues") {
                                Some(p) if !p.is_empty() => {
                                    key(&[&super::super::glob::escape(p), b"*"])
                                }
                                _ => b"queue:*".to_vec(),
                            };
                            found
                                .near_refused
                                .extend(scan(conn, &under, None, scan_count).await?);
                            found.refused.push((registry, Reason::Auth));
                            Vec::new()
                        }
                        Err(e) => return Err(e),
                        Ok(_) => Vec::new(),
                    },
                    None => Vec::new(),
                };
                registry_units(&spec.preset, members)
            }
            Preset::Bullmq { prefix, .. } => {
                let p = super::super::glob::escape(prefix.as_bytes());
                let pattern = key(&[&p, b":*:meta"]);
                let keys = scan(conn, &pattern, Some(KeyType::Hash), scan_count).await?;
                let mut names: Vec<Vec<u8>> = keys
                    .iter()
                    .filter_map(|k| bullmq::queue_of_meta(k))
                    .filter(|(pre, _)| *pre == prefix.as_bytes())
                    .map(|(_, name)| name.to_vec())
                    .collect();
                within(prefix, &mut names, &mut marks_left, max_keys, &mut found);
                // Bull 3.x/4.x writes a `meta` hash too while paused
                // (`paused` alone): only BullMQ's marks make it BullMQ's.
                let marked = bullmq_marked(conn, prefix, &names).await?;
                let bullmq = names
                    .into_iter()
                    .zip(marked)
                    .filter_map(|(q, m)| taken(prefix, q, m, true, &mut found.refused))
                    .map(Unit::Queue);
                sorted(bullmq.collect())
            }
            Preset::Bull { prefix, .. } => {
                let p = super::super::glob::escape(prefix.as_bytes());
                let pattern = key(&[&p, b":*:id"]);
                let keys = scan(conn, &pattern, None, scan_count).await?;
                let mut names: Vec<Vec<u8>> = keys
                    .iter()
                    .filter_map(|k| bull::queue_of_id(prefix.as_bytes(), k))
                    .map(<[u8]>::to_vec)
                    .collect();
                within(prefix, &mut names, &mut marks_left, max_keys, &mut found);
                // BullMQ keeps an `id` too: a queue whose `meta` carries
                // BullMQ's marks is BullMQ's, even at Bull's prefix.
                let marked = bullmq_marked(conn, prefix, &names).await?;
                let bull = names
                    .into_iter()
                    .zip(marked)
                    .filter_map(|(q, m)| taken(prefix, q, m, false, &mut found.refused))
                    .map(Unit::Queue);
                sorted(bull.collect())
            }
            Preset::PriorityZset { prefix } => {
                let p = super::super::glob::escape(prefix.as_bytes());
                let pattern = key(&[&p, b":pending:*"]);
                let keys = scan(conn, &pattern, Some(KeyType::Zset), scan_count).await?;
                let start = prefix.len() + b":pending:".len();
                // Each priority is a "queue" of the entry, beside the keys
                // shared by all priorities.
                let mut units: Vec<Unit> = keys
                    .into_iter()
                    .filter_map(|k| k.get(start..).map(<[u8]>::to_vec))
                    .filter(|p| !p.is_empty())
                    .map(Unit::Queue)
                    .collect();
                units.push(Unit::Shared);
                sorted(units)
            }
            Preset::Celery { .. } | Preset::Rediswq { .. } => fixed_queues(&spec.preset),
        };
        found.units.push(units);
    }
    Ok(found)
}

/// Keeps the first of the queues `names` at `prefix` whose `meta` hashes
/// the `left` marks a round may still read allow (in name order); the
/// others' `meta` hashes go to [`Registries::over`], unread.
fn within(
    prefix: &str,
    names: &mut Vec<Vec<u8>>,
    left: &mut usize,
    max_keys: usize,
    found: &mut Registries,
) {
    names.sort_unstable();
    names.dedup();
    let keep = names.len().min(*left);
    *left -= keep;
    for q in names.drain(keep..) {
        let meta = key(&[prefix.as_bytes(), b":", &q, b":meta"]);
        found.over.push((meta, Bound::MaxKeys(max_keys)));
    }
}

/// The queue `q` at `prefix` if an entry that wants queues with (`bullmq`)
/// or without BullMQ's marks takes it, its marks having read `marked`. A
/// refused read takes it in neither: its `meta` and reason go to `refused`.
fn taken(
    prefix: &str,
    q: Vec<u8>,
    marked: Result<bool, Reason>,
    bullmq: bool,
    refused: &mut Vec<(Vec<u8>, Reason)>,
) -> Option<Vec<u8>> {
    match marked {
        Ok(m) => (m == bullmq).then_some(q),
        Err(reason) => {
            refused.push((key(&[prefix.as_bytes(), b":", &q, b":meta"]), reason));
            None
        }
    }
}

/// Whether each queue `<prefix>:<q>:meta` of `names` carries BullMQ's
/// marks ([`bullmq::has_marks`]), in one pipeline of [`bullmq::marks_cmd`]
/// (none sent for no names): what tells BullMQ's queues from Bull's at a
/// prefix both use, as zero config tells them. `Err`: Redis refused the read.
async fn bullmq_marked(
    conn: &mut Conn,
    prefix: &str,
    names: &[Vec<u8>],
) -> redis::RedisResult<Vec<Result<bool, Reason>>> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let cmds = names
        .iter()
        .map(|q| bullmq::marks_cmd(&key(&[prefix.as_bytes(), b":", q, b":meta"])))
        .collect();
    let replies = pipelined(conn, cmds).await?;
    Ok(replies.iter().map(bullmq::has_marks).collect())
}

/// The registry set of a registry preset (RQ, Sidekiq, asynq) at `prefix`.
pub(super) fn registry_key(preset: &Preset, prefix: &str) -> Vec<u8> {
    match preset {
        Preset::Sidekiq { .. } => sidekiq::k(prefix, b"queues"),
        _ => key(&[prefix.as_bytes(), b":queues"]),
    }
}

/// A registry's members as the entry's units, sorted: RQ's full keys
/// `<prefix>:queue:<name>` give their names (others are skipped), Sidekiq
/// and asynq hold bare names; Sidekiq's entry also has its shared keys.
pub(super) fn registry_units(preset: &Preset, members: Vec<Vec<u8>>) -> Vec<Unit> {
    let mut units: Vec<Unit> = match preset {
        Preset::Rq { prefix } => {
            let full = key(&[prefix.as_bytes(), b":queue:"]);
            members
                .into_iter()
                .filter_map(|m| m.strip_prefix(full.as_slice()).map(<[u8]>::to_vec))
                .map(Unit::Queue)
                .collect()
        }
        _ => members.into_iter().map(Unit::Queue).collect(),
    };
    if matches!(preset, Preset::Sidekiq { .. }) {
        units.push(Unit::Shared);
    }
    sorted(units)
}

/// `units` sorted, without repeats.
pub(super) fn sorted(mut units: Vec<Unit>) -> Vec<Unit> {
    units.sort();
    units.dedup();
    units
}
