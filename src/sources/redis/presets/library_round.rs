//! Zero config's rounds between keyspace scans: a round reads what the
//! last scan found, as the config `discover` prints would, instead of
//! every name again (docs/presets.md, "What does zero config cost Redis?").
//!
//! A scan (at first, then every `keyspace_scan_interval`: by default 100
//! times as long as the last scan took, from `discovery_interval` to 5
//! minutes, see [`Learnt::scan_every`]) makes an untyped pass over every name, since a new plain key,
//! BullMQ prefix, Sidekiq namespace or kombu exchange can be named
//! anything; that pass alone costs Redis 1.2-1.4x the presets' round
//! (BENCHMARKS.md, section 11). Between scans, a library round:
//! - reads every registry and kombu binding the scan read, the registries
//!   a library writes under a fixed name (`queues`, `rq:queues`,
//!   `asynq:queues`, `_kombu.binding.celery`) and the marks Redis refused,
//!   by name, in one pipeline; if any differs from the scan's (a queue
//!   added to a registry or binding, a library first used since, a
//!   refusal lifted), the round scans instead, so nothing the scan would
//!   find waits for the next;
//! - makes the `bullmq` preset's pass at each BullMQ prefix the scan found
//!   (`SCAN MATCH <prefix>:*:meta TYPE hash`, then the marks of each
//!   `meta`), so a queue a BullMQ app creates at a known prefix is found at
//!   once, as a `- preset: bullmq` entry finds it;
//! - keeps the plain keys tracked, less any a library entry now owns.
//!
//! What waits for the next scan (5 minutes at most by default): a new plain key, a BullMQ queue at a
//! prefix not seen before, an old Bull queue, a new Celery priority list.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::super::commands::{Conn, pipelined};
use super::super::discovery::Candidate;
use super::super::keyname::display_key;
use super::super::tracked::KeyState;
use super::bounded::{Bound, read_sets};
use super::consumed::consumed;
use super::library::Seen;
use super::picture::{LeftOut, withheld_names};
use super::recognise::{Marks, hides, marks_named, seen};
use super::{Unit, registries};
use crate::config::{PresetSpec, RedisSourceConfig};

/// The registries libraries write under a fixed name
/// ([`Library::fixed_marks`](super::library::Library::fixed_marks)): a
/// library round reads them whether the scan saw them or not, so that an
/// app started since (the exporter often starts first) is found at the
/// next round.
fn fixed_marks() -> Vec<&'static [u8]> {
    super::LIBRARIES
        .iter()
        .flat_map(|l| l.fixed_marks().iter().copied())
        .collect()
}

/// Unless `keyspace_scan_interval` says otherwise, scans are this many
/// times as long apart as the last scan took: scanning takes at most 1 %
/// of the time, so a keyspace that scans in 30 ms is scanned at every
/// round (30 s apart by default), one of a million names (a full scan
/// 2.4 s, a later one 1.2 s, measured) every 2-4 minutes.
const SCAN_TIME_SHARE: u32 = 100;

/// The longest time between scans unless `keyspace_scan_interval` says
/// otherwise: how long a new plain key or BullMQ prefix may wait.
pub const SCAN_AT_LEAST_EVERY: Duration = Duration::from_secs(300);

/// What the last keyspace scan recognised, for the library rounds after it.
#[derive(Debug)]
pub struct Learnt {
    /// The library entries the scan recognised, with their units.
    entries: Vec<(PresetSpec, Vec<Unit>)>,
    /// Every set the scan read that marks a library and has members (the
    /// registries its entries came from, those under a fixed name, kombu
    /// bindings), with its members sorted: a change means a scan. A set
    /// named like a registry that marks none is neither read nor compared.
    sets: BTreeMap<Vec<u8>, Vec<Vec<u8>>>,
    /// The marks Redis refused reading at the scan.
    unread: BTreeSet<Vec<u8>>,
    /// The marks the scan did not read for a bound: those beyond
    /// `max_keys` stay unread until the next scan; the sets over the cap
    /// are asked their size again (a change means a scan).
    over: BTreeMap<Vec<u8>, Bound>,
    /// The keys the scan left out for those refusals, by `queue` label.
    withheld: Vec<String>,
    /// When the scan finished: the next is due `keyspace_scan_interval`
    /// after.
    scanned_at: Instant,
    /// How long the scan took (wall time, which bounds Redis's CPU time).
    took: Duration,
}

impl Learnt {
    /// What a scan that recognised `entries` from `seen` learnt, leaving
    /// `withheld` keys out for the marks it could not read.
    pub(super) fn new(
        entries: &[(PresetSpec, Vec<Unit>)],
        seen: &Seen,
        withheld: &BTreeSet<Vec<u8>>,
    ) -> Self {
        Learnt {
            entries: entries.to_vec(),
            sets: seen.library_set_members(entries, &fixed_marks()),
            unread: seen.unread.keys().cloned().collect(),
            over: seen.bounded.clone(),
            withheld: withheld_names(withheld),
            scanned_at: Instant::now(),
            took: Duration::ZERO,
        }
    }

    /// How long the scan took.
    pub fn took(&self) -> Duration {
        self.took
    }

    /// Notes how long the scan took, from `started`.
    pub fn took_since(&mut self, started: Instant) {
        self.took = self.scanned_at.saturating_duration_since(started);
    }

    /// The time from this scan to the next: `set` (the source's
    /// `keyspace_scan_interval`) or [`SCAN_TIME_SHARE`] times as long as
    /// this scan took, from `discovery_interval` to [`SCAN_AT_LEAST_EVERY`].
    pub fn scan_every(&self, set: Option<Duration>, discovery_interval: Duration) -> Duration {
        set.unwrap_or_else(|| {
            self.took
                .saturating_mul(SCAN_TIME_SHARE)
                .max(discovery_interval)
                .min(SCAN_AT_LEAST_EVERY)
        })
    }

    /// Whether the round at `now` must scan the keyspace, scans being
    /// `every` apart.
    pub fn scan_due(&self, every: Duration, now: Instant) -> bool {
        now.saturating_duration_since(self.scanned_at) >= every
    }
}

/// What a library round found.
#[derive(Debug)]
pub struct LibraryRound {
    /// One entry per library and prefix, as the scan's, with the units
    /// read now.
    pub entries: Vec<(PresetSpec, Vec<Unit>)>,
    /// Plain keys tracked that an entry now owns (a list that was plain at
    /// the scan, whose BullMQ `meta` came since): no longer plain.
    pub now_owned: BTreeSet<Vec<u8>>,
    /// What the round could not read: the marks the scan could not read
    /// either (a change would have meant a scan).
    pub left_out: LeftOut,
}

/// One library round (see the module comment), given the plain keys
/// tracked with their types. `None` when a mark changed since the scan:
/// the round must scan instead.
pub async fn library_round(
    conn: &Conn,
    config: &RedisSourceConfig,
    plain: &[(Vec<u8>, KeyState)],
    learnt: &Learnt,
) -> redis::RedisResult<Option<LibraryRound>> {
    let mut names: BTreeSet<Vec<u8>> = learnt.sets.keys().cloned().collect();
    names.extend(fixed_marks().iter().map(|m| m.to_vec()));
    names.extend(learnt.unread.iter().cloned());
    let beyond_max_keys = |m: &Vec<u8>| matches!(learnt.over.get(m), Some(Bound::MaxKeys(_)));
    names.extend(learnt.over.keys().cloned());
    names.retain(|m| !beyond_max_keys(m));
    let seen = read_marks(conn, marks_named(names.into_iter().collect()), config).await?;
    let unread: BTreeSet<&Vec<u8>> = seen.unread.keys().collect();
    let over: BTreeSet<&Vec<u8>> = seen.bounded.keys().collect();
    let over_then: BTreeSet<&Vec<u8>> =
        learnt.over.keys().filter(|m| !beyond_max_keys(m)).collect();
    if seen.set_members() != learnt.sets
        || unread != learnt.unread.iter().collect()
        || over != over_then
    {
        return Ok(None);
    }
    let relisted = |s: &PresetSpec| super::lib(&s.preset).relisted_each_round();
    let again: Vec<PresetSpec> = learnt
        .entries
        .iter()
        .filter(|(s, _)| relisted(s))
        .map(|(s, _)| s.clone())
        .collect();
    let read = registries(
        &again,
        &mut conn.clone(),
        config.scan_count,
        config.max_keys,
    )
    .await?;
    // A `meta` refused since the scan: whose keys are beside it is unknown.
    if read.refused.iter().any(|(m, _)| !learnt.unread.contains(m)) {
        return Ok(None);
    }
    let mut fresh = read.units.into_iter();
    let entries: Vec<(PresetSpec, Vec<Unit>)> = learnt
        .entries
        .iter()
        .filter_map(|(spec, units)| {
            if relisted(spec) {
                let now = fresh.next().unwrap_or_default();
                (!now.is_empty()).then(|| (spec.clone(), now))
            } else {
                Some((spec.clone(), units.clone()))
            }
        })
        .collect();
    let tracked: BTreeMap<Vec<u8>, Candidate> = plain
        .iter()
        .map(|(k, state)| {
            let c = Candidate {
                spec: 0,
                exact: false,
                state: state.clone(),
            };
            (k.clone(), c)
        })
        .collect();
    let now_owned = consumed(&entries, &tracked);
    let mut over: BTreeMap<&[u8], Bound> = learnt
        .over
        .iter()
        .filter(|(m, _)| beyond_max_keys(m))
        .map(|(m, b)| (m.as_slice(), *b))
        .collect();
    over.extend(seen.bounded.iter().map(|(m, b)| (m.as_slice(), *b)));
    over.extend(read.over.iter().map(|(m, b)| (m.as_slice(), *b)));
    let over_hides = hides(over.keys().copied());
    Ok(Some(LibraryRound {
        entries,
        now_owned,
        left_out: LeftOut {
            unread: seen.unread.values().copied().collect(),
            keys: learnt.withheld.len(),
            withheld: learnt.withheld.clone(),
            names_unknown: seen.names_unknown(),
            over: over.into_iter().map(|(m, b)| (display_key(m), b)).collect(),
            over_hides,
        },
    }))
}

/// Reads every mark: the sets by bounded `SSCAN`, each whole only if it
/// holds at most `max_keys` members ([`read_sets`]), beside one pipeline of
/// the other marks' commands (each library's read: a `meta` hash's
/// fields, an `id`'s value, a sign's `TYPE`).
pub(super) async fn read_marks(
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

#[cfg(test)]
mod tests {
    use super::*;

    fn took(d: Duration) -> Learnt {
        Learnt {
            entries: Vec::new(),
            sets: BTreeMap::new(),
            unread: BTreeSet::new(),
            over: BTreeMap::new(),
            withheld: Vec::new(),
            scanned_at: Instant::now(),
            took: d,
        }
    }

    const MS: Duration = Duration::from_millis(1);
    const S: Duration = Duration::from_secs(1);

    #[test]
    fn scans_are_a_hundred_times_as_long_apart_as_a_scan_takes_from_the_round_to_five_minutes() {
        assert_eq!(took(30 * MS).scan_every(None, 30 * S), 30 * S);
        assert_eq!(took(1500 * MS).scan_every(None, 30 * S), 150 * S);
        assert_eq!(took(3 * S).scan_every(None, 30 * S), 300 * S);
        assert_eq!(took(60 * S).scan_every(None, 30 * S), 300 * S);
        // Rounds further apart than that: every round scans.
        assert_eq!(took(3 * S).scan_every(None, 600 * S), 300 * S);
    }

    #[test]
    fn a_set_keyspace_scan_interval_is_kept_as_it_is() {
        assert_eq!(
            took(3 * S).scan_every(Some(Duration::ZERO), 30 * S),
            Duration::ZERO
        );
        assert_eq!(took(MS).scan_every(Some(3600 * S), 30 * S), 3600 * S);
    }

    #[test]
    fn a_scan_is_due_once_its_interval_has_passed() {
        let l = took(MS);
        assert!(!l.scan_due(S, l.scanned_at));
        assert!(l.scan_due(S, l.scanned_at + S));
        assert!(l.scan_due(Duration::ZERO, l.scanned_at));
    }
}
