//! Each preset entry's registry, read in the discovery round: the
//! logical queues a library names itself ([`Registry`]: a set of names, or
//! keys found by SCAN, each queue's mark read where two libraries share a
//! layout).

use super::super::commands::{Conn, pipelined, scan};
use super::bounded::{Bound, SetRead, read_sets};
use super::library::{Mark, Registry};
use super::spec::{Preset, PresetSpec};
use super::{Unit, fixed_queues, key, sorted};
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

/// The most members a configured preset's registry is read to: ten times
/// `max_keys`, so an entry naming more queues than `max_keys` leaves still
/// tracks the first by name and counts the rest, while a set far larger
/// (an app's own set mistaken for a registry) costs at most this many
/// members a round. Zero config, which cannot tell a registry from an
/// app's set, reads a set only to `max_keys`.
pub(super) fn registry_cap(max_keys: usize) -> usize {
    max_keys.saturating_mul(10)
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
        let preset = &spec.preset;
        let library = super::lib(preset);
        let units = match library.registry(preset) {
            Registry::Set(registry) => {
                let read = match marks_left.checked_sub(1) {
                    Some(left) => {
                        marks_left = left;
                        let sets = std::slice::from_ref(&registry);
                        read_sets(conn, sets, scan_count, registry_cap(max_keys))
                            .await?
                            .pop()
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
                            refused_registry(conn, registry, scan_count, &mut found).await?;
                            Vec::new()
                        }
                        Err(e) => return Err(e),
                        Ok(_) => Vec::new(),
                    },
                    None => Vec::new(),
                };
                library.registry_units(preset, members)
            }
            Registry::Scan { pattern, key_type } => {
                let keys = scan(conn, &pattern, key_type, scan_count).await?;
                let mut names: Vec<Vec<u8>> = keys
                    .iter()
                    .filter_map(|k| library.queue_of_key(preset, k))
                    .collect();
                let mut units: Vec<Unit> = match library.queue_mark(preset, b"") {
                    // Each queue's mark tells whether it is this library's.
                    Some(_) => {
                        within(preset, &mut names, &mut marks_left, max_keys, &mut found);
                        let marked = marked(conn, preset, &names).await?;
                        names
                            .into_iter()
                            .zip(marked)
                            .filter_map(|(q, m)| taken(preset, q, m, &mut found.refused))
                            .map(Unit::Queue)
                            .collect()
                    }
                    None => names.into_iter().map(Unit::Queue).collect(),
                };
                units.extend(library.fixed_queues(preset));
                sorted(units)
            }
            Registry::Fixed => fixed_queues(preset),
        };
        found.units.push(units);
    }
    Ok(found)
}

/// A registry Redis refused to read: recorded as refused, with the keys
/// under its prefix (found by a bounded SCAN), from which the names its
/// queues may have are learnt.
async fn refused_registry(
    conn: &mut Conn,
    registry: Vec<u8>,
    scan_count: u32,
    found: &mut Registries,
) -> redis::RedisResult<()> {
    let under = match registry.strip_suffix(b"queues") {
        Some(p) if !p.is_empty() => key(&[&super::super::glob::escape(p), b"*"]),
        _ => b"queue:*".to_vec(),
    };
    found
        .near_refused
        .extend(scan(conn, &under, None, scan_count).await?);
    found.refused.push((registry, Reason::Auth));
    Ok(())
}

/// Keeps the first of the queues `names` of `preset` whose marks the
/// `left` marks a round may still read allow (in name order); the others'
/// marks go to [`Registries::over`], unread.
fn within(
    preset: &Preset,
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
        if let Some(mark) = super::lib(preset).queue_mark(preset, &q) {
            found.over.push((mark.key, Bound::MaxKeys(max_keys)));
        }
    }
}

/// The queue `q` if `preset`'s library takes it, its mark having read
/// `marked`. A refused read takes it in no entry: its mark and reason go
/// to `refused`.
fn taken(
    preset: &Preset,
    q: Vec<u8>,
    marked: Result<bool, Reason>,
    refused: &mut Vec<(Vec<u8>, Reason)>,
) -> Option<Vec<u8>> {
    match marked {
        Ok(m) => m.then_some(q),
        Err(reason) => {
            if let Some(mark) = super::lib(preset).queue_mark(preset, &q) {
                refused.push((mark.key, reason));
            }
            None
        }
    }
}

/// Whether `preset`'s library takes each queue of `names`, by the reads of
/// their marks, in one pipeline (none sent for no names): what tells two
/// libraries' queues apart at a prefix both use, as zero config tells
/// them. `Err`: Redis refused the read.
async fn marked(
    conn: &mut Conn,
    preset: &Preset,
    names: &[Vec<u8>],
) -> redis::RedisResult<Vec<Result<bool, Reason>>> {
    let library = super::lib(preset);
    let marks: Vec<Mark> = names
        .iter()
        .filter_map(|q| library.queue_mark(preset, q))
        .collect();
    if marks.is_empty() {
        return Ok(Vec::new());
    }
    let cmds = marks.iter().map(|m| m.cmd.clone()).collect();
    let replies = pipelined(conn, cmds).await?;
    Ok(replies.iter().map(|v| library.takes_marked(v)).collect())
}
