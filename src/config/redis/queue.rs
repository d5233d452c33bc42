//! The `queues:` entries of a Redis source: a key or a pattern
//! ([`QueueTarget`]), its label regex (compiled, capture names checked), key
//! types, score meaning, and how to read a list item's age (a checked
//! [`JsonField`]). Apart from the source struct because these are what
//! discovery and polling read per key, and they carry their own checks.

use serde::{Deserialize, Deserializer};

use super::super::preset::{CounterKeys, check_counters};
use crate::time::TimeUnit;

/// One `queues:` entry of a Redis source: an exact key or a glob.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "RawQueueSpec")]
pub struct QueueSpec {
    /// What the entry names.
    pub target: QueueTarget,
    /// Regex over the key name; named captures become labels.
    pub labels: Option<CaptureLabels>,
    /// Only track keys of these types (patterns); `None`: all queue types.
    pub types: Option<Vec<KeyType>>,
    /// What zset scores mean.
    pub score: ScoreMode,
    /// Unit of timestamp scores: always a fixed-scale number
    /// ([`TimeUnit::is_fixed_number`], checked at load).
    pub score_unit: TimeUnit,
    /// How to read the oldest item's age from a list.
    pub age: Option<AgeSpec>,
    /// Integer string keys read with `GET` as this queue's job totals
    /// (`key:` entries only: a pattern names many queues).
    pub counters: Option<CounterKeys>,
}

impl QueueSpec {
    /// An entry for `target` with every other field at its default.
    pub fn new(target: QueueTarget) -> Self {
        QueueSpec {
            target,
            labels: None,
            types: None,
            score: ScoreMode::default(),
            score_unit: TimeUnit::Seconds,
            age: None,
            counters: None,
        }
    }

    /// `pattern: "*"` with `types: [list, zset, stream]`: every key of a
    /// type a queue is kept in (zero config's plain keys).
    pub fn every_queue_key() -> Self {
        QueueSpec {
            types: Some(vec![KeyType::List, KeyType::Zset, KeyType::Stream]),
            ..QueueSpec::new(QueueTarget::Pattern("*".into()))
        }
    }

    /// The exact key, for `key:` entries.
    pub fn key(&self) -> Option<&str> {
        match &self.target {
            QueueTarget::Key(k) => Some(k),
            QueueTarget::Pattern(_) => None,
        }
    }

    /// The glob, for `pattern:` entries.
    pub fn pattern(&self) -> Option<&str> {
        match &self.target {
            QueueTarget::Pattern(p) => Some(p),
            QueueTarget::Key(_) => None,
        }
    }
}

/// What a `queues:` entry names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueTarget {
    /// An exact key; reported (as depth 0) even while it does not exist.
    Key(String),
    /// A Redis glob expanded with SCAN MATCH at discovery.
    Pattern(String),
}

/// A `queues:` entry as written, before the key/pattern choice is checked.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQueueSpec {
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    pattern: Option<String>,
    #[serde(default)]
    labels: Option<CaptureLabels>,
    #[serde(default)]
    types: Option<Vec<KeyType>>,
    #[serde(default)]
    score: ScoreMode,
    #[serde(default = "seconds")]
    score_unit: TimeUnit,
    #[serde(default)]
    age: Option<AgeSpec>,
    #[serde(default)]
    counters: Option<CounterKeys>,
}

impl TryFrom<RawQueueSpec> for QueueSpec {
    type Error = String;

    fn try_from(raw: RawQueueSpec) -> Result<Self, String> {
        let target = match (raw.key, raw.pattern) {
            (Some(_), Some(_)) => return Err("set either key or pattern, not both".into()),
            (None, None) => return Err("needs a key or a pattern".into()),
            (Some(k), None) if k.is_empty() => return Err("key: must not be empty".into()),
            (None, Some(p)) if p.is_empty() => return Err("pattern: must not be empty".into()),
            (Some(k), None) => QueueTarget::Key(k),
            (None, Some(p)) => QueueTarget::Pattern(p),
        };
        if !raw.score_unit.is_fixed_number() {
            return Err(
                "score_unit: must be seconds, milliseconds, microseconds or nanoseconds \
                 (scores are numbers of one scale)"
                    .into(),
            );
        }
        if raw.types.as_ref().is_some_and(Vec::is_empty) {
            return Err("types: must list at least one type".into());
        }
        if let Some(c) = &raw.counters {
            check_counters(c)?;
            if c.per_queue() {
                return Err("counters: {queue} is replaced on a preset entry only \
                            (a key entry's counters are the keys it names)"
                    .into());
            }
            if matches!(target, QueueTarget::Pattern(_)) {
                return Err("counters: only on a key entry (a pattern names many queues)".into());
            }
        }
        Ok(QueueSpec {
            target,
            labels: raw.labels,
            types: raw.types,
            score: raw.score,
            score_unit: raw.score_unit,
            age: raw.age,
            counters: raw.counters,
        })
    }
}

/// Scores are unix seconds unless `score_unit` says otherwise.
fn seconds() -> TimeUnit {
    TimeUnit::Seconds
}

/// Label names a capture group may not take, because the exporter sets them.
pub const RESERVED_LABELS: [&str; 7] = ["source", "queue", "vhost", "group", "type", "state", "le"];

/// True for a valid Prometheus label name: `[a-zA-Z_][a-zA-Z0-9_]*`.
fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The `labels:` regex, compiled, whose named captures are checked to be
/// label names the exporter does not set itself.
#[derive(Debug, Clone)]
pub struct CaptureLabels(regex::Regex);

impl CaptureLabels {
    /// Compiles and checks a `labels:` regex.
    pub fn new(re: &str) -> Result<Self, String> {
        let compiled =
            regex::Regex::new(re).map_err(|e| super::super::error::one_line(&e.to_string()))?;
        for name in compiled.capture_names().flatten() {
            if RESERVED_LABELS.contains(&name) {
                return Err(format!("capture name {name:?} is reserved by the exporter"));
            }
            if name.starts_with("__") {
                return Err(format!("capture name {name:?} must not start with __"));
            }
            // The regex crate accepts names such as `a.b`, `p[0]` or `ü`,
            // which are not Prometheus label names and would make every
            // scrape invalid.
            if !is_label_name(name) {
                return Err(format!(
                    "capture name {name:?} is not a valid label name ([a-zA-Z_][a-zA-Z0-9_]*)"
                ));
            }
        }
        Ok(CaptureLabels(compiled))
    }

    /// The compiled regex.
    pub fn regex(&self) -> &regex::Regex {
        &self.0
    }
}

impl<'de> Deserialize<'de> for CaptureLabels {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        CaptureLabels::new(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// Redis key types the exporter understands.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum KeyType {
    /// LLEN.
    List,
    /// ZCARD.
    Zset,
    /// HLEN.
    Hash,
    /// SCARD.
    Set,
    /// XLEN + XINFO GROUPS.
    Stream,
}

impl KeyType {
    /// The name Redis uses in TYPE replies.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyType::List => "list",
            KeyType::Zset => "zset",
            KeyType::Hash => "hash",
            KeyType::Set => "set",
            KeyType::Stream => "stream",
        }
    }

    /// Parses a TYPE reply; `None` for `none` and non-queue types such as `string`.
    pub fn from_redis(s: &str) -> Option<KeyType> {
        Some(match s {
            "list" => KeyType::List,
            "zset" => KeyType::Zset,
            "hash" => KeyType::Hash,
            "set" => KeyType::Set,
            "stream" => KeyType::Stream,
            _ => return None,
        })
    }

    /// Every queue type.
    pub const ALL: [KeyType; 5] = [
        KeyType::List,
        KeyType::Zset,
        KeyType::Hash,
        KeyType::Set,
        KeyType::Stream,
    ];
}

/// Meaning of zset scores.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ScoreMode {
    /// Priorities or anything else: depth only.
    #[default]
    Plain,
    /// Enqueue or due times: ready/scheduled split, age, age histogram.
    Timestamp,
}

/// How to find the enqueue time of a list's oldest item.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AgeSpec {
    /// Which end holds the oldest item.
    #[serde(default)]
    pub end: ListEnd,
    /// Where the timestamp is in a JSON item; absent means the whole item is the timestamp.
    #[serde(default)]
    pub field: Option<JsonField>,
    /// Unit of the timestamp.
    #[serde(default)]
    pub unit: TimeUnit,
}

/// The end of a list that holds the oldest item.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ListEnd {
    /// `LINDEX 0`: producers RPUSH, workers LPOP.
    #[default]
    Head,
    /// `LINDEX -1`: producers LPUSH, workers RPOP.
    Tail,
}

/// A dotted JSON path (`meta.enqueued_at`), checked and turned into a JSON
/// pointer (`/meta/enqueued_at`) once, for `serde_json::Value::pointer`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonField {
    /// The path as written.
    dotted: String,
    /// The same path as a JSON pointer.
    pointer: String,
}

impl JsonField {
    /// Parses a dotted path; every segment must be non-empty.
    pub fn new(dotted: &str) -> Result<Self, String> {
        if dotted.is_empty() || dotted.split('.').any(str::is_empty) {
            return Err(format!("invalid JSON path {dotted:?}"));
        }
        let pointer = dotted
            .split('.')
            .map(|seg| format!("/{}", seg.replace('~', "~0").replace('/', "~1")))
            .collect();
        Ok(JsonField {
            dotted: dotted.to_string(),
            pointer,
        })
    }

    /// The path as written.
    pub fn dotted(&self) -> &str {
        &self.dotted
    }

    /// The path as a JSON pointer.
    pub fn pointer(&self) -> &str {
        &self.pointer
    }
}

impl<'de> Deserialize<'de> for JsonField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        JsonField::new(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_names_follow_prometheus() {
        assert!(is_label_name("_p2") && !is_label_name("2p") && !is_label_name(""));
    }

    #[test]
    fn json_fields_become_pointers() {
        assert_eq!(
            JsonField::new("meta.times.0").unwrap().pointer(),
            "/meta/times/0"
        );
        assert_eq!(JsonField::new("a/b.~c").unwrap().pointer(), "/a~1b/~0c");
        assert!(JsonField::new("a..b").is_err() && JsonField::new("").is_err());
    }
}
