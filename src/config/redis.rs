//! The `type: redis` source's configuration, parsed into typed values:
//! a checked URL, compiled label regexes, a key-or-pattern target. The Redis
//! source takes these as they are and never re-validates them.

use std::path::PathBuf;
use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo};
use serde::{Deserialize, Deserializer};

use super::duration::{Bounds, de_duration, de_durations};
use super::secret::Redacted;

/// A Redis source.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisSourceConfig {
    /// The `source` label.
    pub name: String,
    /// `redis://`, `rediss://` or `unix://` URL; may carry user and password.
    /// `redis+cluster://` reaches a Redis Cluster through one of its nodes,
    /// `redis+sentinel://` the master that sentinels name (see [`UrlKind`]).
    #[serde(default)]
    pub url: RedisUrl,
    /// The URL's node is one node of a Redis Cluster (same as the
    /// `redis+cluster://` scheme): SCAN runs on every primary, pipelines
    /// are split per slot owner, MOVED/ASK are followed.
    #[serde(default)]
    pub cluster: bool,
    /// File holding the password; overrides the URL's. Trailing newline ignored.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// CA and client certificate for `rediss://` (none: the built-in web
    /// roots and no client certificate). Boxed: rarely set, and three paths
    /// would grow every source by their size.
    #[serde(default)]
    pub tls: Option<Box<RedisTlsConfig>>,
    /// Time between polls.
    #[serde(default = "default_poll_interval", deserialize_with = "de_duration")]
    pub poll_interval: Duration,
    /// Time between SCAN/TYPE discovery rounds.
    #[serde(
        default = "default_discovery_interval",
        deserialize_with = "de_duration"
    )]
    pub discovery_interval: Duration,
    /// Per-command response timeout, and connect timeout.
    #[serde(default = "default_timeout", deserialize_with = "de_duration")]
    pub timeout: Duration,
    /// Cap on tracked keys; the excess is counted in `queue_exporter_dropped_keys`.
    #[serde(default = "default_max_keys")]
    pub max_keys: usize,
    /// COUNT hint for each SCAN call.
    #[serde(default = "default_scan_count")]
    pub scan_count: u32,
    /// Upper bounds of `queue_message_age_seconds`.
    #[serde(default = "default_age_buckets", deserialize_with = "de_durations")]
    pub age_buckets: Vec<Duration>,
    /// How often each key's age histogram is measured (staggered across
    /// polls); between measurements the last one is served. The histogram
    /// costs one ZCOUNT per bucket, each a scan of the due items of a small
    /// zset, so measuring it every poll would dominate the poll. `0s`
    /// measures on every poll.
    #[serde(
        default = "default_age_histogram_interval",
        deserialize_with = "de_duration"
    )]
    pub age_histogram_interval: Duration,
    /// Ask Redis which polled keys changed (`CLIENT TRACKING` over a second,
    /// RESP3 connection) and read only those: an idle queue then costs no
    /// command per poll. Ignored for a cluster. A server that refuses it is
    /// polled without it. `false`: read every key on every poll.
    #[serde(default = "default_client_tracking")]
    pub client_tracking: bool,
    /// Which keys to watch.
    #[serde(default)]
    pub queues: Vec<QueueSpec>,
    /// Which libraries' queues to watch: the `- preset:` entries of
    /// `queues:`, split out by the loader (never written as a field).
    #[serde(skip)]
    pub presets: Vec<super::PresetSpec>,
}

impl RedisSourceConfig {
    /// A source named `name` with every default and no queues: the one place
    /// the defaults live, shared by YAML (serde defaults) and the no-config path.
    pub fn named(name: &str) -> Self {
        RedisSourceConfig {
            name: name.into(),
            url: RedisUrl::default(),
            cluster: false,
            password_file: None,
            tls: None,
            poll_interval: default_poll_interval(),
            discovery_interval: default_discovery_interval(),
            timeout: default_timeout(),
            max_keys: default_max_keys(),
            scan_count: default_scan_count(),
            age_buckets: default_age_buckets(),
            age_histogram_interval: default_age_histogram_interval(),
            client_tracking: default_client_tracking(),
            queues: Vec::new(),
            presets: Vec::new(),
        }
    }

    /// Whether the source talks to a Redis Cluster (`cluster: true` or a
    /// `redis+cluster://` URL).
    pub fn is_cluster(&self) -> bool {
        self.cluster || matches!(self.url.kind(), UrlKind::Cluster)
    }

    /// The sentinels and master name of a `redis+sentinel://` URL.
    pub fn sentinel(&self) -> Option<&SentinelSpec> {
        match self.url.kind() {
            UrlKind::Sentinel(s) => Some(s),
            _ => None,
        }
    }

    /// Checks what serde cannot check field by field.
    pub(super) fn validate(&self, at: &dyn Fn(&str) -> String) -> Result<(), (String, String)> {
        let tls_url = matches!(self.url.info().addr(), ConnectionAddr::TcpTls { .. });
        if let ConnectionAddr::TcpTls { insecure: true, .. } = self.url.info().addr() {
            return Err((
                at("url"),
                "#insecure (no certificate check) is not supported; give the server's CA in tls.ca_file"
                    .into(),
            ));
        }
        if let Some(tls) = &self.tls {
            if !tls_url {
                return Err((at("tls"), "is only used with a rediss:// url".into()));
            }
            match (&tls.cert_file, &tls.key_file) {
                (Some(_), None) => {
                    return Err((at("tls.key_file"), "is needed with tls.cert_file".into()));
                }
                (None, Some(_)) => {
                    return Err((at("tls.cert_file"), "is needed with tls.key_file".into()));
                }
                _ => {}
            }
        }
        if self.cluster {
            if self.sentinel().is_some() {
                return Err((
                    at("cluster"),
                    "cannot be combined with a redis+sentinel:// url (sentinels manage a master, not a cluster)".into(),
                ));
            }
            if matches!(self.url.info().addr(), ConnectionAddr::Unix(_)) {
                return Err((
                    at("cluster"),
                    "needs a redis:// or rediss:// url (cluster nodes are reached over TCP)".into(),
                ));
            }
        }
        if self.is_cluster() && self.url.info().redis_settings().db() != 0 {
            return Err((
                at("url"),
                "selects a database other than 0, which a Redis Cluster does not have".into(),
            ));
        }
        if self.tls.is_some() && (self.is_cluster() || self.sentinel().is_some()) {
            return Err((
                at("tls"),
                "is not supported with Redis Cluster or Sentinel yet; use rediss+cluster:// or rediss+sentinel:// with certificates the system trusts".into(),
            ));
        }
        let durations = [
            ("poll_interval", self.poll_interval, Bounds::HOUR),
            ("timeout", self.timeout, Bounds::HOUR),
            ("discovery_interval", self.discovery_interval, Bounds::DAY),
            (
                "age_histogram_interval",
                self.age_histogram_interval,
                Bounds::DAY_OR_ZERO,
            ),
        ];
        for (field, d, bounds) in durations {
            bounds.check(d).map_err(|m| (at(field), m))?;
        }
        for (j, d) in self.age_buckets.iter().enumerate() {
            Bounds::YEAR
                .check(*d)
                .map_err(|m| (at(&format!("age_buckets[{j}]")), m))?;
        }
        if self.max_keys == 0 {
            return Err((at("max_keys"), "must be greater than 0".into()));
        }
        if self.scan_count == 0 {
            return Err((at("scan_count"), "must be greater than 0".into()));
        }
        if self.age_buckets.windows(2).any(|w| w[0] >= w[1])
            || self.age_buckets.iter().any(|d| d.is_zero())
        {
            return Err((
                at("age_buckets"),
                "must be positive and strictly increasing".into(),
            ));
        }
        Ok(())
    }
}

fn default_poll_interval() -> Duration {
    Duration::from_secs(1)
}
/// The default `age_histogram_interval`: a common Prometheus scrape interval.
pub fn default_age_histogram_interval() -> Duration {
    Duration::from_secs(15)
}
fn default_discovery_interval() -> Duration {
    Duration::from_secs(30)
}
fn default_timeout() -> Duration {
    Duration::from_secs(5)
}
fn default_max_keys() -> usize {
    10_000
}
fn default_client_tracking() -> bool {
    true
}

fn default_scan_count() -> u32 {
    1000
}
/// Default age histogram bounds: 1 s to 1 day. Each bound below the oldest
/// item's age costs one ZCOUNT per timestamp zset per poll.
pub fn default_age_buckets() -> Vec<Duration> {
    [1, 10, 60, 300, 900, 3600, 86_400]
        .into_iter()
        .map(Duration::from_secs)
        .collect()
}

/// TLS files for a `rediss://` source, read (and their PEM checked) by
/// `check` and at startup, then again when the source connects.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisTlsConfig {
    /// PEM CA bundle the server's certificate must chain to; replaces the
    /// built-in web roots (a private CA is the usual case for Redis).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate chain, for servers with `tls-auth-clients yes`.
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file` (PKCS#8, PKCS#1 or SEC1).
    #[serde(default)]
    pub key_file: Option<PathBuf>,
}

/// A Redis URL, checked and parsed once at load. Keeps the text (for
/// redacted display) and the parsed connection info (for connecting).
#[derive(Clone)]
pub struct RedisUrl {
    /// The URL as written; may carry a password, so only shown through [`Redacted`].
    text: String,
    /// What the `redis` crate parsed from it. For `redis+sentinel://`, the
    /// user, password, database and TLS used on the master (its address is
    /// replaced by the one the sentinels answer).
    info: ConnectionInfo,
    /// Which deployment the scheme names.
    kind: UrlKind,
}

/// The deployment a URL's scheme names.
#[derive(Debug, Clone)]
pub enum UrlKind {
    /// `redis://`, `rediss://`, `unix://`: one server.
    Standalone,
    /// `redis+cluster://`, `rediss+cluster://`: a node of a Redis Cluster.
    Cluster,
    /// `redis+sentinel://`, `rediss+sentinel://`: the master sentinels name
    /// (boxed: rare, and it would make every source config larger).
    Sentinel(Box<SentinelSpec>),
}

/// The sentinels of a `redis+sentinel://` URL and the master to ask them for.
#[derive(Debug, Clone)]
pub struct SentinelSpec {
    /// The name the sentinels monitor the master under (`sentinel monitor <name> …`).
    pub master_name: String,
    /// Each sentinel (no credentials; TLS as the URL's scheme says), tried in order.
    pub sentinels: Vec<ConnectionInfo>,
}

/// The port of a sentinel written without one.
const SENTINEL_PORT: u16 = 26379;

impl RedisUrl {
    /// The default, `redis://127.0.0.1:6379`.
    const DEFAULT: &'static str = "redis://127.0.0.1:6379";

    /// Parses a URL; the error never echoes it (it may carry a password).
    pub fn parse(text: &str) -> Result<RedisUrl, String> {
        let parse = |url: &str| {
            url.into_connection_info()
                .map_err(|e| format!("is not a valid Redis URL ({:?})", e.kind()))
        };
        let (info, kind) = if let Some(rest) = text.strip_prefix("redis+cluster://") {
            (parse(&format!("redis://{rest}"))?, UrlKind::Cluster)
        } else if let Some(rest) = text.strip_prefix("rediss+cluster://") {
            (parse(&format!("rediss://{rest}"))?, UrlKind::Cluster)
        } else if let Some(rest) = text.strip_prefix("redis+sentinel://") {
            parse_sentinel("redis", rest)?
        } else if let Some(rest) = text.strip_prefix("rediss+sentinel://") {
            parse_sentinel("rediss", rest)?
        } else {
            let schemes = ["redis://", "rediss://", "unix://", "redis+unix://"];
            if !schemes.iter().any(|s| text.starts_with(s)) {
                return Err(
                    "must start with redis://, rediss://, unix://, redis+cluster:// or redis+sentinel://"
                        .into(),
                );
            }
            (parse(text)?, UrlKind::Standalone)
        };
        Ok(RedisUrl {
            text: text.to_string(),
            info,
            kind,
        })
    }

    /// Which deployment the URL names.
    pub fn kind(&self) -> &UrlKind {
        &self.kind
    }

    /// The URL as written. Never log it: use [`RedisUrl::redacted`].
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The URL with any user info hidden, for logs and errors.
    pub fn redacted(&self) -> String {
        Redacted(&self.text).to_string()
    }

    /// The parsed connection info.
    pub fn info(&self) -> &ConnectionInfo {
        &self.info
    }
}

/// `[user[:password]@]host[:port][,host[:port]…]/master_name[/db][?query]`
/// after a `redis+sentinel://` (`scheme` `redis`) or `rediss+sentinel://`
/// (`rediss`): the master's connection info (credentials, database, TLS, and
/// the first sentinel's address as a placeholder) and the sentinels. Errors
/// never echo the text (it may carry a password).
fn parse_sentinel(scheme: &str, rest: &str) -> Result<(ConnectionInfo, UrlKind), String> {
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, format!("?{q}")),
        None => (rest, String::new()),
    };
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (user_info, hosts) = match authority.rsplit_once('@') {
        Some((u, h)) => (format!("{u}@"), h),
        None => (String::new(), authority),
    };
    let usage = "(redis+sentinel://[user:password@]host:port[,host:port…]/master_name[/db])";
    let mut sentinels = Vec::new();
    let mut first = None;
    for host in hosts.split(',') {
        if host.is_empty() {
            return Err(format!("has an empty sentinel address {usage}"));
        }
        // A port is present after the last `:` unless that `:` is inside
        // an IPv6 literal (`[::1]`).
        let has_port = match host.rfind(']') {
            Some(end) => host[end..].contains(':'),
            None => host.contains(':'),
        };
        let host = if has_port {
            host.to_string()
        } else {
            format!("{host}:{SENTINEL_PORT}")
        };
        let info = format!("{scheme}://{host}")
            .into_connection_info()
            .map_err(|e| format!("has an invalid sentinel address ({:?}) {usage}", e.kind()))?;
        first.get_or_insert(host);
        sentinels.push(info);
    }
    let first = first.ok_or_else(|| format!("names no sentinel {usage}"))?;
    let mut segments = path.split('/');
    let master_name = segments
        .next()
        .map(|m| {
            percent_encoding::percent_decode_str(m)
                .decode_utf8_lossy()
                .into_owned()
        })
        .filter(|m| !m.is_empty())
        .ok_or_else(|| format!("needs the master's name after the sentinels {usage}"))?;
    let db = segments.next().unwrap_or("");
    if segments.next().is_some() {
        return Err(format!("has more path than /master_name/db {usage}"));
    }
    let info = format!("{scheme}://{user_info}{first}/{db}{query}")
        .into_connection_info()
        .map_err(|e| format!("is not a valid Redis URL ({:?}) {usage}", e.kind()))?;
    Ok((
        info,
        UrlKind::Sentinel(Box::new(SentinelSpec {
            master_name,
            sentinels,
        })),
    ))
}

impl Default for RedisUrl {
    fn default() -> Self {
        // A constant the `redis` crate always parses (covered by a test).
        RedisUrl::parse(Self::DEFAULT).unwrap_or_else(|e| unreachable!("{e}"))
    }
}

impl std::fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl<'de> Deserialize<'de> for RedisUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        RedisUrl::parse(&text).map_err(serde::de::Error::custom)
    }
}

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
    /// Unit of timestamp scores.
    pub score_unit: ScoreUnit,
    /// How to read the oldest item's age from a list.
    pub age: Option<AgeSpec>,
    /// Integer string keys read with `GET` as this queue's job totals
    /// (`key:` entries only: a pattern names many queues).
    pub counters: Option<super::CounterKeys>,
}

impl QueueSpec {
    /// An entry for `target` with every other field at its default.
    pub fn new(target: QueueTarget) -> Self {
        QueueSpec {
            target,
            labels: None,
            types: None,
            score: ScoreMode::default(),
            score_unit: ScoreUnit::default(),
            age: None,
            counters: None,
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
    #[serde(default)]
    score_unit: ScoreUnit,
    #[serde(default)]
    age: Option<AgeSpec>,
    #[serde(default)]
    counters: Option<super::CounterKeys>,
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
        if raw.types.as_ref().is_some_and(Vec::is_empty) {
            return Err("types: must list at least one type".into());
        }
        if let Some(c) = &raw.counters {
            super::preset::check_counters(c)?;
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
        let compiled = regex::Regex::new(re).map_err(|e| super::one_line(&e.to_string()))?;
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

/// Unit of timestamp scores.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ScoreUnit {
    /// Unix seconds (may be fractional).
    #[default]
    Seconds,
    /// Unix milliseconds.
    Milliseconds,
}

impl ScoreUnit {
    /// Converts a score in this unit to unix seconds.
    pub fn to_unix_seconds(self, score: f64) -> f64 {
        match self {
            ScoreUnit::Seconds => score,
            ScoreUnit::Milliseconds => score / 1000.0,
        }
    }
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

/// Unit of a timestamp found in an item.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TimeUnit {
    /// Unix seconds.
    Seconds,
    /// Unix milliseconds.
    Milliseconds,
    /// Unix microseconds.
    Microseconds,
    /// Unix nanoseconds.
    Nanoseconds,
    /// An RFC 3339 string.
    Rfc3339,
    /// Guess from the magnitude (s, ms, µs, ns) or parse RFC 3339 text.
    #[default]
    Auto,
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
    fn the_default_url_parses_and_never_shows_a_password() {
        assert_eq!(RedisUrl::default().as_str(), "redis://127.0.0.1:6379");
        let u = RedisUrl::parse("redis://user:secret@host:6379/1").unwrap();
        assert!(!format!("{u:?}").contains("secret"));
        assert!(RedisUrl::parse("http://x").is_err());
    }

    #[test]
    fn cluster_and_sentinel_urls_parse() {
        let u = RedisUrl::parse("redis+cluster://u:p@10.0.0.1:7000").unwrap();
        assert!(matches!(u.kind(), UrlKind::Cluster));
        assert_eq!(
            u.info().addr(),
            &redis::ConnectionAddr::Tcp("10.0.0.1".into(), 7000)
        );
        assert_eq!(u.info().redis_settings().password(), Some("p"));
        let u = RedisUrl::parse("rediss+cluster://10.0.0.1:7000").unwrap();
        assert!(matches!(
            u.info().addr(),
            redis::ConnectionAddr::TcpTls { port: 7000, .. }
        ));

        let u = RedisUrl::parse("redis+sentinel://qe:p%40ss@s1:26380,s2,[::1]:5/my%20master/2")
            .unwrap();
        let UrlKind::Sentinel(spec) = u.kind() else {
            panic!("sentinel")
        };
        assert_eq!(spec.master_name, "my master");
        let addrs: Vec<_> = spec.sentinels.iter().map(|s| s.addr().clone()).collect();
        assert_eq!(
            addrs,
            [
                redis::ConnectionAddr::Tcp("s1".into(), 26380),
                redis::ConnectionAddr::Tcp("s2".into(), 26379),
                redis::ConnectionAddr::Tcp("::1".into(), 5),
            ]
        );
        // Credentials and database are the master's, never the sentinels'.
        assert_eq!(u.info().redis_settings().password(), Some("p@ss"));
        assert_eq!(u.info().redis_settings().username(), Some("qe"));
        assert_eq!(u.info().redis_settings().db(), 2);
        assert!(
            spec.sentinels
                .iter()
                .all(|s| s.redis_settings().password().is_none())
        );
        assert!(!format!("{u:?}").contains("p%40ss"));

        for bad in [
            "redis+sentinel://:secret@s1:26379",
            "redis+sentinel://:secret@s1,,s2/m",
            "redis+sentinel://:secret@s1/m/0/x",
            "redis+sentinel://:secret@s1/m/notadb",
            "redis+sentinel://:secret@s1:99999/m",
        ] {
            let e = RedisUrl::parse(bad).map(|_| ()).unwrap_err();
            assert!(!e.contains("secret"), "{e}");
        }
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
