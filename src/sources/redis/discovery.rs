//! Discovery: which keys to poll, and what type each one is.
//!
//! Runs every `discovery_interval`: SCAN (bounded COUNT, never KEYS) for the
//! patterns (one shared pass for those without `types`), then one pipelined
//! TYPE batch for keys whose type SCAN did not already tell us. Exact keys
//! are always tracked, even when missing. A key whose TYPE Redis refused is
//! tracked with an unknown type and the refusal counted: a source whose ACL
//! lacks `TYPE` never looks healthy and empty.
//!
//! A round runs on its own task (see `RedisSource::poll`) with its own
//! deadline; [`adopt`] makes its outcome the tracked set.

use std::collections::BTreeMap;

use super::commands::{Conn, scan, type_of};
use super::glob;
use super::histogram::HistogramState;
use super::keyname::display_key;
use super::tracked::{KeyState, TrackedKey, carry_over_all};
use crate::config::{KeyType, RedisSourceConfig};
use crate::snapshot::Reason;

/// The outcome of one discovery round.
#[derive(Debug)]
pub struct Discovered {
    /// Keys to poll, exact keys first, then pattern keys in key order.
    pub tracked: Vec<TrackedKey>,
    /// Keys not tracked: found beyond `max_keys`, plus `collisions`.
    pub dropped: u64,
    /// Keys not tracked because another key renders to the same `queue` label.
    pub collisions: u64,
    /// One reason per `TYPE` Redis refused (its key is tracked, type unknown).
    pub refused: Vec<Reason>,
    /// The keys not tracked (beyond `max_keys`, or colliding), by `queue`
    /// label and `queues:` entry, at most [`NAMED_BEYOND`] of them: no
    /// poll reads them, so the scaler must not answer for their names.
    pub beyond: Vec<(String, usize)>,
}

/// How many untracked keys a round names; past it, coverage falls back to
/// the patterns they fell under (`coverage::gaps`). 100,000 names are a few
/// MB, kept once per round.
pub const NAMED_BEYOND: usize = 100_000;

/// Keys a round found, before they are tracked: what [`find`] learnt, which
/// zero config's recognition may still take keys out of (`presets::recognise`).
#[derive(Debug, Default)]
pub struct Candidates {
    /// Each key with the entry that found it and what TYPE (or SCAN) said.
    pub keys: BTreeMap<Vec<u8>, Candidate>,
    /// Exact keys in config order.
    exact_order: Vec<Vec<u8>>,
    /// One reason per `TYPE` Redis refused.
    refused: Vec<Reason>,
}

impl Candidates {
    /// Pattern keys whose types are known (zero config's steady round,
    /// which found them without [`find`]).
    pub fn of_pattern_keys(keys: BTreeMap<Vec<u8>, Candidate>) -> Self {
        Candidates {
            keys,
            ..Candidates::default()
        }
    }
}

/// One key found by a round.
#[derive(Debug)]
pub struct Candidate {
    /// Index of the `queues:` entry that found it (the first, in config order).
    pub spec: usize,
    /// Found as an exact `key:` (tracked even when missing).
    pub exact: bool,
    /// Its type, as far as Redis told.
    pub state: KeyState,
}

/// Runs one discovery round: [`find`], then [`track`] within `max_keys`.
pub async fn discover(
    conn: &mut Conn,
    config: &RedisSourceConfig,
    known: &[(Vec<u8>, usize)],
) -> redis::RedisResult<Discovered> {
    let found = find(conn, config, known).await?;
    Ok(track(found, config, config.max_keys))
}

/// Finds the keys of a round and their types. `known` are the pattern keys
/// tracked so far (key, spec index): in a cluster, those that the SCAN of
/// every primary did not return are re-checked with TYPE, since a key moving
/// between nodes during the scans (resharding) is missed by both; keys that
/// still exist stay.
pub async fn find(
    conn: &mut Conn,
    config: &RedisSourceConfig,
    known: &[(Vec<u8>, usize)],
) -> redis::RedisResult<Candidates> {
    // key → (spec index, exact, type if already known)
    let mut found: BTreeMap<Vec<u8>, (usize, bool, Option<KeyType>)> = BTreeMap::new();
    let mut exact_order: Vec<Vec<u8>> = Vec::new();
    for (i, spec) in config.queues.iter().enumerate() {
        if let Some(key) = spec.key() {
            let k = key.as_bytes().to_vec();
            if let std::collections::btree_map::Entry::Vacant(slot) = found.entry(k.clone()) {
                slot.insert((i, true, None));
                exact_order.push(k);
            }
        }
    }
    // Merged in config order, so the first spec wins.
    for (i, t, keys) in scan_patterns(conn, config).await? {
        for k in keys {
            found.entry(k).or_insert((i, false, t));
        }
    }
    if conn.is_cluster() {
        for (k, spec) in known {
            found.entry(k.clone()).or_insert((*spec, false, None));
        }
    }

    // Learn the types SCAN did not tell us, in pipelined batches.
    let unknown: Vec<Vec<u8>> = found
        .iter()
        .filter(|(_, (_, _, t))| t.is_none())
        .map(|(k, _)| k.clone())
        .collect();
    let types = type_of(conn, &unknown).await?;
    let mut states: BTreeMap<Vec<u8>, KeyState> = BTreeMap::new();
    let mut refused = Vec::new();
    for (k, state) in unknown.into_iter().zip(types) {
        if let KeyState::Unknown(reason) = state {
            refused.push(reason);
        }
        states.insert(k, state);
    }

    let mut keys = BTreeMap::new();
    for (key, (spec, exact, known)) in found {
        let state = match known {
            Some(t) => KeyState::Typed(t),
            None => states.remove(&key).unwrap_or(KeyState::Missing),
        };
        keys.insert(key, Candidate { spec, exact, state });
    }
    Ok(Candidates {
        keys,
        exact_order,
        refused,
    })
}

/// The keys every `pattern:` entry's SCAN found (one per type in its
/// `types`), in config order, each with its entry's index and the type
/// the SCAN asked for. Every SCAN runs concurrently on the multiplexed
/// connection.
async fn scan_patterns(
    conn: &Conn,
    config: &RedisSourceConfig,
) -> redis::RedisResult<Vec<(usize, Option<KeyType>, Vec<Vec<u8>>)>> {
    let scans: Vec<(usize, Option<KeyType>, &str)> = config
        .queues
        .iter()
        .enumerate()
        .filter_map(|(i, spec)| Some((i, spec, spec.pattern()?)))
        .flat_map(|(i, spec, pattern)| match &spec.types {
            Some(types) => types
                .iter()
                .map(|t| (i, Some(*t), pattern))
                .collect::<Vec<_>>(),
            None => vec![(i, None, pattern)],
        })
        .collect();
    // A SCAN pass costs Redis the same whatever it MATCHes, so patterns
    // without a TYPE filter share one pass over their common literal prefix
    // and are told apart here, exactly as SCAN MATCH would.
    let untyped: Vec<usize> = (0..scans.len()).filter(|&j| scans[j].1.is_none()).collect();
    let shared = (untyped.len() >= 2)
        .then(|| glob::covering_pattern(untyped.iter().map(|&j| scans[j].2.as_bytes())));
    let separate: Vec<usize> = (0..scans.len())
        .filter(|j| shared.is_none() || !untyped.contains(j))
        .collect();
    let (separate_keys, shared_keys) = futures_util::future::try_join(
        futures_util::future::try_join_all(separate.iter().map(|&j| {
            let mut conn = conn.clone();
            let (_, t, pattern) = scans[j];
            async move { scan(&mut conn, pattern.as_bytes(), t, config.scan_count).await }
        })),
        async {
            match &shared {
                Some(p) => scan(&mut conn.clone(), p, None, config.scan_count)
                    .await
                    .map(Some),
                None => Ok(None),
            }
        },
    )
    .await?;
    let mut results: Vec<Vec<Vec<u8>>> = vec![Vec::new(); scans.len()];
    for (&j, keys) in separate.iter().zip(separate_keys) {
        results[j] = keys;
    }
    if let Some(keys) = shared_keys {
        for &j in &untyped {
            let pattern = scans[j].2.as_bytes();
            results[j] = keys
                .iter()
                .filter(|k| glob::matches(pattern, k))
                .cloned()
                .collect();
        }
    }
    Ok(scans
        .iter()
        .zip(results)
        .map(|((i, t, _), keys)| (*i, *t, keys))
        .collect())
}

/// Whether a key a pattern entry `spec` found in `state` is tracked: it
/// must exist, be a queue type, and match `types`; one whose type Redis
/// refused to tell stays, unknown (its polls ask TYPE again, and count
/// the refusal), never dropped as if it did not exist.
fn pattern_takes(state: &KeyState, spec: &crate::config::QueueSpec) -> bool {
    match state {
        KeyState::Typed(t) => spec.types.as_ref().is_none_or(|ts| ts.contains(t)),
        KeyState::Unknown(_) => true,
        KeyState::Missing | KeyState::Unsupported(_) => false,
    }
}

/// Makes a round's keys tracked keys: pattern keys must exist and be of a
/// type their entry takes; exact keys first in config order, then pattern
/// keys in key order; at most `limit` (the excess counted as dropped).
pub fn track(found: Candidates, config: &RedisSourceConfig, limit: usize) -> Discovered {
    let Candidates {
        keys,
        exact_order,
        refused,
    } = found;

    let mut exact = Vec::new();
    let mut patterned = Vec::new();
    for (key, c) in keys {
        let Candidate {
            spec,
            exact: is_exact,
            state,
        } = c;
        if !is_exact && !pattern_takes(&state, &config.queues[spec]) {
            continue;
        }
        let name = display_key(&key);
        let regex = config.queues[spec].labels.as_ref().map(|l| l.regex());
        let labels = capture_labels(regex, &name);
        let tk = TrackedKey {
            key,
            name,
            labels,
            spec,
            state,
            exact: is_exact,
            histogram: HistogramState::default(),
            peek_paused_until: 0.0,
            unchanged: None,
            verify_at: 0.0,
        };
        if is_exact {
            exact.push(tk);
        } else {
            patterned.push(tk);
        }
    }
    // Exact keys keep config order and always come first.
    exact.sort_by_key(|k| exact_order.iter().position(|e| *e == k.key));
    let mut tracked = exact;
    tracked.extend(patterned);
    // Two keys whose `queue` labels are equal (a non-UTF-8 key and a key
    // spelled like its `\xNN` rendering) would be two series with one
    // identity, which Prometheus rejects as duplicates. Keep the first; the
    // other counts as dropped.
    let mut names = std::collections::HashSet::with_capacity(tracked.len());
    let before = tracked.len();
    let mut beyond = Vec::new();
    tracked.retain(|k| {
        let first = names.insert(k.name.clone());
        if !first && beyond.len() < NAMED_BEYOND {
            beyond.push((k.name.clone(), k.spec));
        }
        first
    });
    let collisions = (before - tracked.len()) as u64;
    let total = tracked.len();
    let dropped = total.saturating_sub(limit) as u64 + collisions;
    let room = NAMED_BEYOND.saturating_sub(beyond.len());
    beyond.extend(
        tracked
            .iter()
            .skip(limit)
            .take(room)
            .map(|k| (k.name.clone(), k.spec)),
    );
    tracked.truncate(limit);
    Discovered {
        tracked,
        dropped,
        collisions,
        refused,
        beyond,
    }
}

/// Labels from named captures; every capture name is present (empty when the
/// key does not match), so a family's label set stays stable.
pub fn capture_labels(re: Option<&regex::Regex>, name: &str) -> Vec<(String, String)> {
    let Some(re) = re else { return Vec::new() };
    let caps = re.captures(name);
    let mut labels: Vec<(String, String)> = re
        .capture_names()
        .flatten()
        .map(|n| {
            let v = caps
                .as_ref()
                .and_then(|c| c.name(n))
                .map(|m| m.as_str().to_string())
                .unwrap_or_default();
            (n.to_string(), v)
        })
        .collect();
    labels.sort();
    labels
}

/// The pattern keys of `tracked`, as [`discover`] takes them.
pub fn known_pattern_keys(tracked: &[TrackedKey]) -> Vec<(Vec<u8>, usize)> {
    tracked
        .iter()
        .filter(|k| !k.exact)
        .map(|k| (k.key.clone(), k.spec))
        .collect()
}

/// Makes a discovery round's keys the tracked set: what polls learned about
/// keys still tracked is carried over, and changes are logged (the
/// `max_keys` and collision warnings once per change, not every round).
/// Returns the round's refusals, to be counted.
pub fn adopt(
    mut found: Discovered,
    config: &RedisSourceConfig,
    tracked: &mut Vec<TrackedKey>,
    dropped: &mut u64,
) -> Vec<Reason> {
    if !found.refused.is_empty() {
        tracing::debug!(
            source = %config.name,
            keys = found.refused.len(),
            "Redis refused TYPE for some keys; their type and values are unknown"
        );
    }
    if found.tracked.len() != tracked.len() || found.dropped != *dropped {
        tracing::debug!(
            source = %config.name,
            tracked = found.tracked.len(),
            dropped = found.dropped,
            "discovery finished"
        );
    }
    if found.dropped > 0 && found.dropped != *dropped {
        let over_max = found.dropped - found.collisions;
        if over_max > 0 {
            tracing::warn!(
                source = %config.name,
                dropped = over_max,
                max_keys = config.max_keys,
                "more queue keys than max_keys; the excess is not tracked"
            );
        }
        if found.collisions > 0 {
            tracing::warn!(
                source = %config.name,
                dropped = found.collisions,
                "keys whose queue label renders the same as another key's (not UTF-8); only the first is tracked"
            );
        }
    }
    carry_over_all(tracked, &mut found.tracked);
    *tracked = found.tracked;
    *dropped = found.dropped;
    found.refused
}
