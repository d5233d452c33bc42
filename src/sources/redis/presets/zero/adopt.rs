//! Zero config's adopt stage (pure): from what a round gathered and how it
//! was classified, what the source takes on. The plain keys: those no
//! entry consumes or withholds, tracked within what `max_keys` leaves
//! after the library units (they are what the user came for); the record
//! of what the round could not tell ([`LeftOut`], here as the stage's
//! output, which the log line of `picture.rs` reads); and what the next
//! rounds start from ([`Learnt`], the names remembered). A library round
//! keeps the scan's entries (those a registry lists again, as read now),
//! the plain keys less those an entry now owns. Imports no orchestrator
//! (`tests/architecture.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::super::super::discovery::{self, Candidate, Discovered};
use super::super::super::keyname::display_key;
use super::super::super::tracked::KeyState;
use super::super::bounded::Bound;
use super::super::consumed::consumed;
use super::super::library::Seen;
use super::super::registry::Registries;
use super::super::remembered::Remembered;
use super::super::spec::PresetSpec;
use super::super::unit::Unit;
use super::classify::Recognition;
use super::gather::Gathered;
use super::learnt::{Learnt, fixed_marks, relisted_each_round};
use super::marks::{Hides, hides};
use crate::config::RedisSourceConfig;
use crate::snapshot::Reason;

/// What a zero-config scan found: the plain keys to track and the library
/// entries recognised, each with its units.
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
    /// scan.
    pub learnt: Learnt,
}

/// What a round could not tell because Redis refused or failed reading a
/// library's mark (`NOPERM` on a `meta` hash or a registry), or because
/// the mark was not read for a bound of discovery's work (beyond
/// `max_keys`, a set over the cap): the keys that mark may own are
/// reported neither as the library's nor as plain keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeftOut {
    /// One reason per mark Redis would not let the round read.
    pub unread: Vec<Reason>,
    /// The keys those marks may own, left out.
    pub keys: usize,
    /// Those keys by `queue` label: the scaler answers no number for them.
    pub withheld: Vec<String>,
    /// Unread marks whose library's queue names cannot be told from key
    /// names (a registry, a `meta` hash, a Bull `id`): any name may be one
    /// of that library's queues.
    pub names_unknown: Vec<String>,
    /// Marks not read for a bound, by name, with the bound: each counted as
    /// a dropped key.
    pub over: Vec<(String, Bound)>,
    /// The names those marks may hide: the scaler answers no number for
    /// them.
    pub over_hides: Hides,
}

/// The `queue` labels of withheld keys.
pub fn withheld_names(keys: &BTreeSet<Vec<u8>>) -> Vec<String> {
    keys.iter().map(|k| display_key(k)).collect()
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

/// What a scan that recognised `entries` from `seen` learnt, finished at
/// `scanned_at`, leaving `withheld` keys out for the marks it could not
/// read.
fn learnt(
    entries: &[(PresetSpec, Vec<Unit>)],
    seen: &Seen,
    withheld: &BTreeSet<Vec<u8>>,
    scanned_at: Instant,
) -> Learnt {
    Learnt {
        entries: entries.to_vec(),
        sets: seen.library_set_members(entries, &fixed_marks()),
        unread: seen.unread.keys().cloned().collect(),
        over: seen.bounded.clone(),
        withheld: withheld_names(withheld),
        scanned_at,
        took: Duration::ZERO,
    }
}

/// A scan's outcome, once its keys (`gathered`, those to recheck typed
/// again) are classified (`recognition`); `scanned_at`: now.
pub fn scan(
    gathered: Gathered,
    recognition: Recognition,
    config: &RedisSourceConfig,
    scanned_at: Instant,
) -> ZeroConfig {
    let Gathered {
        mut found,
        seen,
        remembered,
        from_memory,
    } = gathered;
    let left_out = left_out(&seen, &recognition);
    let learnt = learnt(
        &recognition.entries,
        &seen,
        &recognition.withheld,
        scanned_at,
    );
    found
        .keys
        .retain(|k, _| !recognition.consumed.contains(k) && !recognition.withheld.contains(k));
    let units: usize = recognition.entries.iter().map(|(_, u)| u.len()).sum();
    let limit = config.max_keys.saturating_sub(units);
    let mut consumed = recognition.consumed;
    consumed.extend(recognition.withheld);
    ZeroConfig {
        plain: discovery::track(found, config, limit),
        entries: recognition.entries,
        consumed,
        remembered: Some(remembered),
        from_memory,
        left_out,
        learnt,
    }
}

/// The libraries-only pass's outcome: the entries `recognition` found
/// from `seen`, no plain key (the `TYPE`s Redis `refused` counted).
pub fn libraries_only(
    seen: &Seen,
    refused: Vec<Reason>,
    recognition: Recognition,
    scanned_at: Instant,
) -> ZeroConfig {
    let left_out = left_out(seen, &recognition);
    let learnt = learnt(
        &recognition.entries,
        seen,
        &recognition.withheld,
        scanned_at,
    );
    let plain = Discovered {
        tracked: Vec::new(),
        dropped: 0,
        collisions: 0,
        refused,
        beyond: Vec::new(),
    };
    ZeroConfig {
        plain,
        entries: recognition.entries,
        consumed: recognition.consumed,
        remembered: None,
        from_memory: false,
        left_out,
        learnt,
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

/// A library round's outcome, its marks unchanged since the scan
/// `learnt`: its entries (the relisted ones as `read` now lists them, in
/// order; one listing no queue now is left out), the `plain` keys tracked
/// that they now own, and the marks left unread (`seen`'s now, the scan's
/// beyond `max_keys`).
pub fn library_round(
    learnt: &Learnt,
    seen: &Seen,
    read: Registries,
    plain: &[(Vec<u8>, KeyState)],
) -> LibraryRound {
    let mut fresh = read.units.into_iter();
    let entries: Vec<(PresetSpec, Vec<Unit>)> = learnt
        .entries
        .iter()
        .filter_map(|(spec, units)| {
            if relisted_each_round(spec) {
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
        .filter(|(m, _)| learnt.beyond_max_keys(m))
        .map(|(m, b)| (m.as_slice(), *b))
        .collect();
    over.extend(seen.bounded.iter().map(|(m, b)| (m.as_slice(), *b)));
    over.extend(read.over.iter().map(|(m, b)| (m.as_slice(), *b)));
    let over_hides = hides(over.keys().copied());
    LibraryRound {
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
    }
}
