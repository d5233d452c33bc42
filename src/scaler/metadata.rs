//! Parsing and validating a trigger's `scalerMetadata` into a [`ScalerQuery`].
//!
//! Words follow KEDA's rabbitmq scaler. Keys are case-sensitive, so a typo
//! such as `activationvalue` is rejected instead of silently ignored; values
//! of `mode` and `operation` are matched case-insensitively.
//!
//! Hand-written rather than derived with serde for a reason users see: every
//! refusal names the key, the value and what is allowed, as one
//! `INVALID_ARGUMENT` line KEDA shows in the ScaledObject's events.
//!
//! Maps are bounded before anything else is read ([`MAX_KEYS`],
//! [`MAX_KEY_BYTES`], [`MAX_VALUE_BYTES`], [`MAX_TOTAL_BYTES`]): gRPC alone
//! lets a client send 4 MiB of metadata, which would be parsed, matched as
//! globs and cached on every request.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::scaler::finite;
use crate::scaler::keys::{self, Key};
pub use crate::scaler::mode::Mode;
pub use crate::scaler::selector::QueueSelector;
use crate::scaler::wait::WaitParams;
use crate::snapshot::{CounterHistory, JobState, Libraries, PresetKind, QueueSample, Snapshot};

/// Every key this scaler reads, as listed in error messages (declared in
/// [`crate::scaler::keys`]).
pub use crate::scaler::keys::ACCEPTED_KEYS;

/// Keys KEDA itself reads from trigger metadata and passes on to us; ignored.
/// `tlsCertFile` is KEDA's deprecated spelling of `tlsClientCert`.
pub const KEDA_KEYS: [&str; 7] = [
    "scalerAddress",
    "enableTLS",
    "unsafeSsl",
    "caCert",
    "tlsClientCert",
    "tlsClientKey",
    "tlsCertFile",
];

/// Most keys a map may have: ours (16) and KEDA's own (7) with room for
/// `*FromEnv` keys.
pub const MAX_KEYS: usize = 64;

/// Longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 256;

/// Longest value of one of our keys, in bytes: a queue name or glob, a
/// source, vhost or group name. KEDA's own keys (`caCert` may hold a PEM
/// chain) are bounded only by [`MAX_TOTAL_BYTES`].
pub const MAX_VALUE_BYTES: usize = 4 * 1024;

/// Most bytes of all keys and values together.
pub const MAX_TOTAL_BYTES: usize = 64 * 1024;

/// Default averaging window of the rate modes (`window`).
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(60);

/// Shortest accepted `window`.
pub const MIN_WINDOW: Duration = Duration::from_secs(1);

/// How the values of several matched queues become one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// The total; the default.
    Sum,
    /// The largest value.
    Max,
    /// The mean value.
    Avg,
}

impl Operation {
    /// Every operation, in documentation order.
    pub const ALL: [Operation; 3] = [Operation::Sum, Operation::Max, Operation::Avg];

    /// The spelling used in metadata and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Sum => "sum",
            Operation::Max => "max",
            Operation::Avg => "avg",
        }
    }

    /// Parses an operation name, ignoring case.
    fn parse(s: &str) -> Option<Operation> {
        Operation::ALL
            .into_iter()
            .find(|o| o.as_str().eq_ignore_ascii_case(s))
    }
}

/// A validated trigger: what to measure and how to turn it into replicas.
#[derive(Debug, Clone)]
pub struct ScalerQuery {
    /// Which queues (`queue`).
    pub queue: QueueSelector,
    /// Restricts matching to one configured source (`source`).
    pub source: Option<String>,
    /// Restricts matching to one RabbitMQ vhost (`vhost`).
    pub vhost: Option<String>,
    /// What is measured (`mode`).
    pub mode: Mode,
    /// The stream consumer group for [`Mode::Lag`] (`group`).
    pub group: Option<String>,
    /// Per-replica target, > 0 (`value`).
    pub target: f64,
    /// Active iff the value is above this (`activationValue`).
    pub activation: f64,
    /// How several matched queues combine (`operation`).
    pub operation: Operation,
    /// Averaging window of the rate modes (`window`).
    pub window: Duration,
    /// Job states summed for a library preset's queue in mode QueueLength
    /// (`state`, a comma list); `None` means `waiting`.
    pub states: Option<Vec<JobState>>,
    /// Restricts matching to one library preset's queues (`preset`), for
    /// when two libraries have a queue of the same name.
    pub preset: Option<PresetKind>,
    /// `targetWait`, `processingTime` and `workersPerReplica`: set exactly
    /// when the mode is [`Mode::WaitTime`].
    pub wait: Option<WaitParams>,
    /// The queues this query matched in the latest snapshots, so repeated
    /// requests between polls do not test every queue name again.
    pub memo: MatchMemo,
}

/// Which queues of each snapshot a query matched, remembered for as long
/// as the snapshots' queue layouts stay the same (usually from one
/// discovery to the next, across polls).
///
/// Measured reason: with 1,000 trigger maps over 4,000 queues, testing
/// every name on every `GetMetrics` took about half of the scaler's CPU.
/// A clone starts empty: it is a cache, not part of the query.
#[derive(Debug, Default)]
pub struct MatchMemo(std::sync::Mutex<Option<Arc<Matched>>>);

/// The matches for one set of queue lists.
#[derive(Debug)]
pub struct Matched {
    /// The lists the indices point into, by layout.
    keys: Vec<ListKey>,
    /// Per list, the positions of the matching queues.
    pub indices: Vec<Vec<u32>>,
}

/// What a position in a snapshot's queue list means: its layout when the
/// source published one (positions stay valid while it holds), else the
/// list itself (held, so its address is not reused by another list).
#[derive(Debug, Clone)]
pub enum ListKey {
    /// A published layout ([`Snapshot::layout`]).
    Layout(u64),
    /// A list with no layout (a snapshot that was never published).
    List(Arc<Vec<QueueSample>>),
}

impl ListKey {
    /// The key of `snapshot`'s queue list.
    pub fn of(snapshot: &Snapshot) -> ListKey {
        match snapshot.layout {
            0 => ListKey::List(snapshot.queues.clone()),
            layout => ListKey::Layout(layout),
        }
    }

    /// Whether positions in one list mean the same queues in the other.
    pub fn same(&self, other: &ListKey) -> bool {
        match (self, other) {
            (ListKey::Layout(a), ListKey::Layout(b)) => a == b,
            (ListKey::List(a), ListKey::List(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Clone for MatchMemo {
    fn clone(&self) -> Self {
        MatchMemo::default()
    }
}

impl MatchMemo {
    /// The matches in the lists named by `keys`, from the memo when it was
    /// computed for the same layouts, else from `compute` (one index list
    /// per list).
    pub fn get_or_compute(
        &self,
        keys: Vec<ListKey>,
        compute: impl FnOnce() -> Vec<Vec<u32>>,
    ) -> Arc<Matched> {
        // A poisoned lock only means another request panicked while
        // storing; the memo is a cache and is simply recomputed.
        let mut memo = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = memo.as_ref()
            && m.keys.len() == keys.len()
            && m.keys.iter().zip(&keys).all(|(a, b)| a.same(b))
        {
            return m.clone();
        }
        let indices = compute();
        let m = Arc::new(Matched { keys, indices });
        *memo = Some(m.clone());
        m
    }
}

/// Why metadata was refused; always names the key. Maps to `INVALID_ARGUMENT`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MetadataError {
    /// Keys this scaler does not know (typos are caught here).
    #[error("scalerMetadata: unknown key{} {}; accepted keys: {}", if .keys.len() > 1 { "s" } else { "" }, quoted(.keys), ACCEPTED_KEYS.join(", "))]
    UnknownKeys {
        /// The unknown keys, sorted.
        keys: Vec<String>,
    },
    /// A known key with a missing or bad value.
    #[error("scalerMetadata.{key}: {problem}")]
    Invalid {
        /// The key.
        key: &'static str,
        /// What is wrong and what is allowed.
        problem: String,
    },
    /// The map, a key or a value is beyond the size limits.
    #[error("scalerMetadata{}: {problem}", .key.as_deref().map(|k| format!(".{k}")).unwrap_or_default())]
    TooLarge {
        /// The offending key (cut to 64 bytes), when one key is at fault.
        key: Option<String>,
        /// Which limit, and by how much.
        problem: String,
    },
}

/// The bytes of all keys and values of `meta`.
pub fn size_bytes(meta: &HashMap<String, String>) -> usize {
    meta.iter().map(|(k, v)| k.len() + v.len()).sum()
}

/// `key` cut to 64 bytes (on a char boundary) for messages.
fn short_key(key: &str) -> String {
    const MAX: usize = 64;
    if key.len() <= MAX {
        return key.to_string();
    }
    let mut end = MAX;
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &key[..end])
}

/// Refuses maps beyond the limits; the error names the key at fault (the
/// first in sorted order) or, for the total, the largest value's key.
fn check_size(meta: &HashMap<String, String>) -> Result<(), MetadataError> {
    let too_large = |key: Option<&str>, problem: String| MetadataError::TooLarge {
        key: key.map(short_key),
        problem,
    };
    if meta.len() > MAX_KEYS {
        return Err(too_large(
            None,
            format!("{} keys; at most {MAX_KEYS} are accepted", meta.len()),
        ));
    }
    let mut keys: Vec<&String> = meta.keys().collect();
    keys.sort();
    for key in &keys {
        if key.len() > MAX_KEY_BYTES {
            return Err(too_large(
                Some(key),
                format!("key of {} bytes; at most {MAX_KEY_BYTES}", key.len()),
            ));
        }
    }
    for key in &keys {
        let len = meta[*key].len();
        if len > MAX_VALUE_BYTES && !is_keda_key(key) {
            return Err(too_large(
                Some(key),
                format!("value of {len} bytes; at most {MAX_VALUE_BYTES}"),
            ));
        }
    }
    let total = size_bytes(meta);
    if total > MAX_TOTAL_BYTES {
        let largest = keys
            .iter()
            .max_by_key(|k| meta[**k].len())
            .map(|k| k.as_str());
        let largest_len = largest.map_or(0, |k| meta[k].len());
        return Err(too_large(
            largest,
            format!(
                "keys and values take {total} bytes in all, at most {MAX_TOTAL_BYTES}; this key's value is the largest ({largest_len} bytes)"
            ),
        ));
    }
    Ok(())
}

/// `"a", "b"`: keys as they were written, quoted so odd spellings are visible.
fn quoted(keys: &[String]) -> String {
    keys.iter()
        .map(|k| format!("{k:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// True for keys KEDA adds on its own (`scalerAddress`, `*FromEnv`, ...).
fn is_keda_key(key: &str) -> bool {
    KEDA_KEYS.contains(&key) || key.ends_with("FromEnv")
}

/// [`parse`] knowing every library the exporter has, as a running
/// exporter's snapshots tell of them: for tests.
#[cfg(test)]
pub(crate) fn parse_known(meta: &HashMap<String, String>) -> Result<ScalerQuery, MetadataError> {
    parse_with(meta, &crate::sources::redis::presets::library::catalogue())
}

/// Parses `scalerMetadata` knowing no queue library, so a `preset` is
/// refused: for a caller with no snapshot at hand (`benches/waitgrid.rs`);
/// the scaler parses with [`parse_with`].
pub fn parse(meta: &HashMap<String, String>) -> Result<ScalerQuery, MetadataError> {
    parse_with(meta, &Libraries::default())
}

/// Parses `scalerMetadata`; `libraries`, the queue libraries the
/// snapshots tell of, are what `preset` may name. Empty values count as
/// absent.
pub fn parse_with(
    meta: &HashMap<String, String>,
    libraries: &Libraries,
) -> Result<ScalerQuery, MetadataError> {
    check_size(meta)?;
    check_keys(meta)?;
    let given = |key: &Key| {
        meta.get(key.name)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
    };

    let queue = given(&keys::QUEUE).ok_or_else(|| {
        invalid(
            keys::QUEUE.name,
            "required: a queue name exactly as in the `queue` label, or a glob such as jobs:pending:*"
                .into(),
        )
    })?;

    let mode = parse_mode(given(&keys::MODE))?;
    // A key this mode does not read is refused, never ignored.
    let mut unread = keys::ALL.iter().filter(|k| given(k).is_some());
    if let Some((key, problem)) = unread.find_map(|k| k.refusal(mode).map(|p| (k.name, p))) {
        return Err(invalid(key, problem));
    }
    // What the trigger wrote, or the key's declared default in this mode.
    let value = |key: &Key| given(key).or(key.default_for(mode));

    let operation = parse_operation(value(&keys::OPERATION))?;

    let wait = match mode {
        Mode::WaitTime => Some(
            WaitParams::from_metadata(&|name| given(name))
                .map_err(|(key, problem)| MetadataError::Invalid { key, problem })?,
        ),
        _ => None,
    };

    let target = parse_target(value(&keys::VALUE))?;
    let activation = parse_activation(value(&keys::ACTIVATION_VALUE))?;
    let window = parse_window(value(&keys::WINDOW))?;
    let group = given(&keys::GROUP).map(str::to_string);
    let states = match given(&keys::STATE) {
        None => None,
        Some(list) => Some(parse_states(list).map_err(|p| invalid(keys::STATE.name, p))?),
    };
    let preset = parse_preset(given(&keys::PRESET), libraries)?;

    Ok(ScalerQuery {
        states,
        preset,
        queue: QueueSelector::new(queue),
        source: given(&keys::SOURCE).map(str::to_string),
        vhost: given(&keys::VHOST).map(str::to_string),
        mode,
        group,
        target,
        activation,
        operation,
        window,
        wait,
        memo: MatchMemo::default(),
    })
}

/// `mode`, or its declared default when left out.
fn parse_mode(written: Option<&str>) -> Result<Mode, MetadataError> {
    // Every mode reads `mode`, so any mode gives its default.
    match written.or(keys::MODE.default_for(Mode::QueueLength)) {
        None => Ok(Mode::QueueLength),
        Some(m) => Mode::parse(m).ok_or_else(|| {
            let all: Vec<_> = Mode::ALL.iter().map(|m| m.as_str()).collect();
            invalid(
                keys::MODE.name,
                format!("{m:?} is not one of {}", all.join(", ")),
            )
        }),
    }
}

/// `operation`; `None` (mode WaitTime, which reads none) is a sum.
fn parse_operation(value: Option<&str>) -> Result<Operation, MetadataError> {
    match value {
        None => Ok(Operation::Sum),
        Some(o) => Operation::parse(o).ok_or_else(|| {
            let all: Vec<_> = Operation::ALL.iter().map(|o| o.as_str()).collect();
            invalid(
                keys::OPERATION.name,
                format!("{o:?} is not one of {}", all.join(", ")),
            )
        }),
    }
}

/// `value`: the per-replica target; `None` (mode WaitTime, which reads
/// no `value`) is 1, since WaitTime's value is replicas.
fn parse_target(value: Option<&str>) -> Result<f64, MetadataError> {
    Ok(match value {
        None => 1.0,
        Some(v) => match v.parse::<f64>() {
            // Sent to KEDA in the metric spec: within the cap every value
            // KEDA receives keeps to.
            Ok(t) if t.is_finite() && t > 0.0 && t <= finite::MAX_VALUE => t,
            _ => {
                return Err(invalid(
                    keys::VALUE.name,
                    format!(
                        "must be a number > 0 and at most {:e} (the per-replica target), got {v:?}",
                        finite::MAX_VALUE
                    ),
                ));
            }
        },
    })
}

/// `activationValue`: active iff the value is above it; `None` (mode
/// WaitTime, active while jobs wait or arrive) is 0.
fn parse_activation(value: Option<&str>) -> Result<f64, MetadataError> {
    Ok(match value {
        None => 0.0,
        Some(v) => match v.parse::<f64>() {
            Ok(a) if a.is_finite() && a >= 0.0 => a,
            _ => {
                return Err(invalid(
                    keys::ACTIVATION_VALUE.name,
                    format!("must be a number >= 0 (active iff the value is above it), got {v:?}"),
                ));
            }
        },
    })
}

/// `window`: over how long a rate is read; `None` (a mode that reads no
/// rate) is [`DEFAULT_WINDOW`], unused.
fn parse_window(value: Option<&str>) -> Result<Duration, MetadataError> {
    Ok(match value {
        None => DEFAULT_WINDOW,
        Some(w) => {
            let max = CounterHistory::RETENTION;
            match humantime::parse_duration(w) {
                Ok(d) if (MIN_WINDOW..=max).contains(&d) => d,
                _ => {
                    return Err(invalid(
                        keys::WINDOW.name,
                        format!(
                            "must be a duration from {} to {} such as 30s or 1m, got {w:?}",
                            humantime::format_duration(MIN_WINDOW),
                            humantime::format_duration(max)
                        ),
                    ));
                }
            }
        }
    })
}

/// `preset`: one of the libraries the snapshots tell of.
fn parse_preset(
    name: Option<&str>,
    libraries: &Libraries,
) -> Result<Option<PresetKind>, MetadataError> {
    Ok(match name {
        None => None,
        Some(name) => Some(libraries.named(name).ok_or_else(|| {
            let names = libraries.names();
            invalid(
                keys::PRESET.name,
                format!(
                    "unknown preset {name:?} (expected one of {})",
                    names.join(", ")
                ),
            )
        })?),
    })
}

/// Refuses the keys neither the scaler nor KEDA reads, all named, sorted.
fn check_keys(meta: &HashMap<String, String>) -> Result<(), MetadataError> {
    let mut unknown: Vec<String> = meta
        .keys()
        .filter(|k| !ACCEPTED_KEYS.contains(&k.as_str()) && !is_keda_key(k))
        .cloned()
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    unknown.sort();
    Err(MetadataError::UnknownKeys { keys: unknown })
}

/// A refusal of `key`'s value.
fn invalid(key: &'static str, problem: String) -> MetadataError {
    MetadataError::Invalid { key, problem }
}

/// A `state` comma list: each a normalized job state, no duplicates.
fn parse_states(list: &str) -> Result<Vec<JobState>, String> {
    let mut states = Vec::new();
    for word in list.split(',').map(str::trim) {
        let state = JobState::parse(&word.to_ascii_lowercase()).ok_or_else(|| {
            let all: Vec<&str> = JobState::ALL.iter().map(|s| s.as_str()).collect();
            format!(
                "{word:?} is not a job state; a comma list of {}",
                all.join(", ")
            )
        })?;
        if states.contains(&state) {
            return Err(format!("{word:?} is listed twice"));
        }
        states.push(state);
    }
    Ok(states)
}

#[cfg(test)]
mod tests {
    use super::parse_known as parse;
    use super::*;

    #[test]
    fn oversized_maps_are_refused_naming_the_key() {
        let big = "q".repeat(MAX_VALUE_BYTES + 1);
        let e = parse(&meta(&[("queue", big.as_str()), ("mode", "Age")])).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "scalerMetadata.queue: value of {} bytes; at most {MAX_VALUE_BYTES}",
                MAX_VALUE_BYTES + 1
            )
        );
        // At the limit it is only a (long) queue name.
        let max = "q".repeat(MAX_VALUE_BYTES);
        assert!(parse(&meta(&[("queue", max.as_str())])).is_ok());

        // A long key is named by its first 64 bytes, before unknown-key checks.
        let key = "k".repeat(MAX_KEY_BYTES + 1);
        let e = parse(&meta(&[("queue", "q"), (key.as_str(), "v")])).unwrap_err();
        let shown = format!(
            "scalerMetadata.{}…: key of 257 bytes; at most 256",
            "k".repeat(64)
        );
        assert_eq!(e.to_string(), shown);

        let many: Vec<(String, String)> = (0..=MAX_KEYS)
            .map(|i| (format!("k{i}FromEnv"), "x".into()))
            .collect();
        let many: HashMap<String, String> = many.into_iter().collect();
        let e = parse(&many).unwrap_err();
        assert_eq!(
            e.to_string(),
            "scalerMetadata: 65 keys; at most 64 are accepted"
        );

        // KEDA's own keys may be long (a PEM in caCert), within the total.
        let pem = "p".repeat(20_000);
        assert!(parse(&meta(&[("queue", "q"), ("caCert", pem.as_str())])).is_ok());
        let pem = "p".repeat(MAX_TOTAL_BYTES);
        let e = parse(&meta(&[
            ("queue", "q"),
            ("caCert", pem.as_str()),
            ("tlsClientKey", "k"),
        ]))
        .unwrap_err();
        assert!(
            e.to_string().starts_with(&format!(
                "scalerMetadata.caCert: keys and values take {} bytes in all, at most {MAX_TOTAL_BYTES}",
                MAX_TOTAL_BYTES + "queue".len() + 1 + "caCert".len() + "tlsClientKey".len() + 1
            )),
            "{e}"
        );
        // Values never appear in these messages.
        assert!(!e.to_string().contains("ppp"));
    }

    #[test]
    fn state_is_a_comma_list_of_job_states_for_queue_length() {
        let q = parse(&meta(&[
            ("queue", "default"),
            ("state", "waiting, Delayed"),
        ]))
        .unwrap();
        assert_eq!(q.states, Some(vec![JobState::Waiting, JobState::Delayed]));
        assert_eq!(parse(&meta(&[("queue", "d")])).unwrap().states, None);
        for (state, mode, want) in [
            (
                "waiting,queued",
                "QueueLength",
                "scalerMetadata.state: \"queued\" is not a job state",
            ),
            (
                "waiting,,active",
                "QueueLength",
                "scalerMetadata.state: \"\" is not a job state",
            ),
            (
                "active,active",
                "QueueLength",
                "scalerMetadata.state: \"active\" is listed twice",
            ),
            (
                "waiting",
                "Age",
                "scalerMetadata.state: applies only to mode QueueLength",
            ),
        ] {
            let e = parse(&meta(&[("queue", "d"), ("state", state), ("mode", mode)]))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(want), "{state}: {e}");
        }
    }

    fn meta(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults() {
        let q = parse(&meta(&[("queue", "work")])).unwrap();
        assert_eq!(q.queue.text(), "work");
        assert!(!q.queue.is_glob());
        assert_eq!(q.mode, Mode::QueueLength);
        assert_eq!(q.target, 5.0);
        assert_eq!(q.activation, 0.0);
        assert_eq!(q.operation, Operation::Sum);
        assert_eq!(q.window, Duration::from_secs(60));
        assert_eq!(q.source, None);
        assert_eq!(q.vhost, None);
    }

    #[test]
    fn keda_keys_are_ignored() {
        let q = parse(&meta(&[
            ("queue", "work"),
            ("scalerAddress", "x:9732"),
            ("enableTLS", "true"),
            ("unsafeSsl", "false"),
            ("caCert", "..."),
            ("tlsClientCert", "..."),
            ("tlsClientKey", "..."),
            ("passwordFromEnv", "P"),
        ]));
        assert!(q.is_ok(), "{q:?}");
    }

    #[test]
    fn unknown_keys_list_the_accepted_ones() {
        let e = parse(&meta(&[("queue", "w"), ("activationvalue", "3")])).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("\"activationvalue\""), "{msg}");
        assert!(msg.contains("activationValue"), "{msg}");
        assert!(msg.contains("accepted keys: queue, source"), "{msg}");
    }

    #[test]
    fn bad_values_name_the_key_and_allowed_values() {
        let cases = [
            (vec![("mode", "QueueLength")], "queue", "required"),
            (vec![("queue", "w"), ("value", "-1")], "value", "> 0"),
            (vec![("queue", "w"), ("value", "0")], "value", "> 0"),
            (vec![("queue", "w"), ("value", "NaN")], "value", "> 0"),
            (
                vec![("queue", "w"), ("value", "1e13")],
                "value",
                "at most 1e12",
            ),
            (
                vec![("queue", "w"), ("mode", "Length")],
                "mode",
                "QueueLength, Ready",
            ),
            (
                vec![("queue", "w"), ("operation", "mean")],
                "operation",
                "sum, max, avg",
            ),
            (
                vec![("queue", "w"), ("activationValue", "-2")],
                "activationValue",
                ">= 0",
            ),
            (
                vec![("queue", "w"), ("mode", "PublishRate"), ("window", "soon")],
                "window",
                "30s",
            ),
            (
                vec![("queue", "w"), ("mode", "PublishRate"), ("window", "2h")],
                "window",
                "15m",
            ),
            (vec![("queue", "w"), ("window", "1m")], "window", "only"),
            (vec![("queue", "w"), ("group", "g")], "group", "only"),
        ];
        for (pairs, key, needle) in cases {
            let e = parse(&meta(&pairs)).unwrap_err();
            let msg = e.to_string();
            assert!(msg.starts_with(&format!("scalerMetadata.{key}: ")), "{msg}");
            assert!(msg.contains(needle), "{msg}");
        }
    }

    #[test]
    fn wait_time_takes_its_own_keys_and_refuses_the_fixed_target() {
        let base = [
            ("queue", "work"),
            ("mode", "waittime"),
            ("targetWait", "30s"),
            ("processingTime", "1500ms"),
        ];
        let q = parse(&meta(&base)).unwrap();
        assert_eq!(q.mode, Mode::WaitTime);
        assert_eq!(q.target, 1.0);
        assert_eq!(q.window, DEFAULT_WINDOW);
        assert_eq!(
            q.wait,
            Some(WaitParams {
                target_wait: Duration::from_secs(30),
                processing_time: Some(Duration::from_millis(1500)),
                workers_per_replica: 1,
                percentile: crate::scaler::wait::PERCENTILE,
                reaction_time: crate::scaler::wait::DEFAULT_REACTION_TIME,
            })
        );
        let with = |extra: &[(&str, &str)]| {
            let mut pairs = base.to_vec();
            pairs.extend_from_slice(extra);
            parse(&meta(&pairs))
        };
        let q = with(&[("workersPerReplica", "10"), ("window", "20s")]).unwrap();
        assert_eq!(q.wait.map(|w| w.workers_per_replica), Some(10));
        let slow = with(&[("reactionTime", "2m")]).unwrap();
        assert_eq!(
            slow.wait.map(|w| w.reaction_time),
            Some(Duration::from_secs(120))
        );
        for (given, share) in [("95", 0.95), ("99.9%", 0.999), (" 50 ", 0.5)] {
            let q = with(&[("targetWaitPercentile", given)]).unwrap();
            let got = q.wait.map(|w| w.percentile).unwrap();
            assert!((got - share).abs() < 1e-12, "{given}: {got}");
        }
        assert_eq!(q.window, Duration::from_secs(20));
        for (extra, key, needle) in [
            (vec![("value", "5")], "value", "fixed"),
            (
                vec![("activationValue", "1")],
                "activationValue",
                "wait or arrive",
            ),
            (vec![("operation", "max")], "operation", "sums backlogs"),
            (
                vec![("state", "waiting")],
                "state",
                "only to mode QueueLength",
            ),
            (
                vec![("workersPerReplica", "0")],
                "workersPerReplica",
                "whole number",
            ),
            (
                vec![("workersPerReplica", "2.5")],
                "workersPerReplica",
                "whole number",
            ),
            (vec![("targetWait", "soon")], "targetWait", "duration"),
            (vec![("targetWait", "0s")], "targetWait", "from 1ms"),
            (vec![("processingTime", "2d")], "processingTime", "to 1day"),
            (vec![("reactionTime", "0s")], "reactionTime", "from 1ms"),
            (
                vec![("targetWaitPercentile", "0.99")],
                "targetWaitPercentile",
                "percentage from 50 to 99.99",
            ),
            (
                vec![("targetWaitPercentile", "100")],
                "targetWaitPercentile",
                "percentage",
            ),
            (
                vec![("targetWaitPercentile", "NaN")],
                "targetWaitPercentile",
                "percentage",
            ),
        ] {
            let mut pairs: Vec<(&str, &str)> = base
                .iter()
                .filter(|(k, _)| !extra.iter().any(|(e, _)| e == k))
                .copied()
                .collect();
            pairs.extend(extra);
            let e = parse(&meta(&pairs)).unwrap_err().to_string();
            assert!(e.starts_with(&format!("scalerMetadata.{key}: ")), "{e}");
            assert!(e.contains(needle), "{e}");
        }
        // targetWait is required with WaitTime.
        let pairs: Vec<(&str, &str)> = base
            .iter()
            .filter(|(k, _)| *k != "targetWait")
            .copied()
            .collect();
        let e = parse(&meta(&pairs)).unwrap_err().to_string();
        assert!(e.starts_with("scalerMetadata.targetWait: required"), "{e}");
        // processingTime is optional here: whether the queue's service time
        // is measured is known only against the data (query.rs).
        let pairs: Vec<(&str, &str)> = base
            .iter()
            .filter(|(k, _)| *k != "processingTime")
            .copied()
            .collect();
        let q = parse(&meta(&pairs)).unwrap();
        assert_eq!(q.wait.map(|w| w.processing_time), Some(None));
        // Refused with any other mode.
        let wait_keys = ["targetWait", "processingTime", "workersPerReplica"]
            .into_iter()
            .chain(["targetWaitPercentile", "reactionTime"]);
        for key in wait_keys {
            let e = parse(&meta(&[("queue", "w"), (key, "1")]))
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with(&format!(
                    "scalerMetadata.{key}: applies only to mode WaitTime"
                )),
                "{e}"
            );
        }
        assert_eq!(parse(&meta(&[("queue", "w")])).unwrap().wait, None);
    }

    #[test]
    fn a_key_left_out_reads_as_its_declared_default_in_every_mode_that_reads_it() {
        for mode in Mode::ALL {
            let mut base = vec![("queue", "w"), ("mode", mode.as_str())];
            if mode == Mode::WaitTime {
                base.extend([("targetWait", "30s"), ("processingTime", "2s")]);
            }
            let left_out = parse(&meta(&base)).unwrap();
            // `mode` itself is written in `base`: its default is below.
            for key in crate::scaler::keys::read_by(mode).filter(|k| k.name != "mode") {
                let Some(default) = key.default_for(mode) else {
                    continue;
                };
                let mut written = base.clone();
                written.retain(|(k, _)| *k != key.name);
                written.push((key.name, default));
                let written = parse(&meta(&written)).unwrap();
                assert_eq!(
                    format!("{left_out:?}"),
                    format!("{written:?}"),
                    "{mode}: {} left out differs from {}={default}",
                    key.name,
                    key.name
                );
            }
        }
        let mode = crate::scaler::keys::MODE.default_for(Mode::Age).unwrap();
        assert_eq!(
            format!("{:?}", parse(&meta(&[("queue", "w")])).unwrap()),
            format!(
                "{:?}",
                parse(&meta(&[("queue", "w"), ("mode", mode)])).unwrap()
            )
        );
    }

    #[test]
    fn a_key_its_mode_does_not_read_is_refused_naming_it() {
        for mode in Mode::ALL {
            for key in crate::scaler::keys::ALL {
                let Some(why) = key.refusal(mode) else {
                    continue;
                };
                let e = parse(&meta(&[
                    ("queue", "w"),
                    ("mode", mode.as_str()),
                    (key.name, "1"),
                ]))
                .unwrap_err()
                .to_string();
                assert_eq!(e, format!("scalerMetadata.{}: {why}", key.name), "{mode}");
            }
        }
    }

    #[test]
    fn values_are_case_insensitive_and_trimmed() {
        let q = parse(&meta(&[
            ("queue", " jobs:* "),
            ("mode", "publishrate"),
            ("operation", "MAX"),
            ("window", "30s"),
            ("value", "2.5"),
            ("activationValue", "1"),
            ("source", ""),
        ]))
        .unwrap();
        assert_eq!(q.mode, Mode::PublishRate);
        assert_eq!(q.operation, Operation::Max);
        assert_eq!(q.window, Duration::from_secs(30));
        assert_eq!(q.target, 2.5);
        assert_eq!(q.activation, 1.0);
        assert_eq!(q.source, None);
        assert!(q.queue.is_glob());
    }
}
