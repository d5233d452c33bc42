//! Configuration: the YAML file, `QUEUE_EXPORTER__*` env overrides and defaults.
//!
//! Loading goes YAML + env → a generic value (the `config` crate) → typed
//! structs through `serde_path_to_error`, so every problem is reported as one
//! line naming the file, the field path and the problem, e.g.
//! `config.yaml: sources[0].poll_interval: invalid duration "often"`.

use std::collections::HashSet;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

/// Prefix of environment overrides (`QUEUE_EXPORTER__LISTEN__HTTP=...`).
pub const ENV_PREFIX: &str = "QUEUE_EXPORTER";

/// A configuration problem, always naming where it is.
#[derive(Debug, thiserror::Error)]
#[error("{origin}: {}{message}", path_prefix(.path))]
pub struct ConfigError {
    /// The file, `<defaults>`, or `environment variable NAME` the problem is in.
    pub origin: String,
    /// Dotted path of the field, e.g. `sources[0].poll_interval`; empty for file-level problems.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

fn path_prefix(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!("{path}: ")
    }
}

/// The whole configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Listening addresses.
    pub listen: ListenConfig,
    /// Logging options.
    pub log: LogConfig,
    /// The KEDA external scaler's options.
    pub scaler: ScalerConfig,
    /// Sources to poll, in config order.
    pub sources: Vec<SourceConfig>,
    /// True when no file was given and `sources` are the built-in local defaults.
    pub default_sources: bool,
    /// Where the config came from (the file, or `<defaults>`), for messages.
    pub origin: String,
}

/// The top level as written in YAML; `sources` are typed separately so that
/// each source's type picks its schema.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    listen: ListenConfig,
    #[serde(default)]
    log: LogConfig,
    #[serde(default)]
    scaler: ScalerConfig,
    #[serde(default)]
    sources: Option<Vec<serde_json::Value>>,
}

/// Where the exporter listens.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ListenConfig {
    /// `/metrics`, `/healthz`, `/readyz` and the landing page.
    pub http: SocketAddr,
    /// The KEDA external-scaler gRPC service; `null` disables it.
    pub grpc: Option<SocketAddr>,
}

impl Default for ListenConfig {
    fn default() -> Self {
        ListenConfig {
            http: SocketAddr::from(([127, 0, 0, 1], 9731)),
            grpc: Some(SocketAddr::from(([127, 0, 0, 1], 9732))),
        }
    }
}

/// Log output options.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `text` for humans, `json` for log pipelines.
    pub format: LogFormat,
    /// A `tracing` filter such as `info` or `queue_exporter=debug`.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: LogFormat::Text,
            level: "info".into(),
        }
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// KEDA external scaler options.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScalerConfig {
    /// Data older than this is refused with `UNAVAILABLE`; default 3 × the
    /// source's poll interval, at least 2 s.
    #[serde(deserialize_with = "de_opt_duration")]
    pub max_staleness: Option<Duration>,
    /// TLS for the gRPC listener (mTLS when `client_ca_file` is set).
    pub tls: Option<GrpcTlsConfig>,
}

impl ScalerConfig {
    /// The staleness limit for a source polling every `poll_interval`.
    pub fn max_staleness_for(&self, poll_interval: Duration) -> Duration {
        self.max_staleness
            .unwrap_or_else(|| (poll_interval * 3).max(Duration::from_secs(2)))
    }
}

/// Server certificate and optional client CA for the gRPC listener.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrpcTlsConfig {
    /// PEM certificate chain.
    pub cert_file: PathBuf,
    /// PEM private key.
    pub key_file: PathBuf,
    /// PEM CA bundle; when set, clients must present a certificate it signed.
    pub client_ca_file: Option<PathBuf>,
}

/// One configured source.
#[derive(Debug, Clone)]
pub enum SourceConfig {
    /// `type: redis`.
    Redis(RedisSourceConfig),
    /// `type: rabbitmq`.
    RabbitMq(RabbitSourceConfig),
}

impl SourceConfig {
    /// The `source` label.
    pub fn name(&self) -> &str {
        match self {
            SourceConfig::Redis(c) => &c.name,
            SourceConfig::RabbitMq(c) => &c.name,
        }
    }

    /// How often the source polls.
    pub fn poll_interval(&self) -> Duration {
        match self {
            SourceConfig::Redis(c) => c.poll_interval,
            SourceConfig::RabbitMq(c) => c.poll_interval,
        }
    }
}

/// A Redis source.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisSourceConfig {
    /// The `source` label.
    pub name: String,
    /// Always `redis`; checked before this struct is parsed.
    #[serde(rename = "type")]
    pub kind: String,
    /// `redis://` or `rediss://` URL; may carry user and password.
    #[serde(default = "default_redis_url")]
    pub url: String,
    /// File holding the password; overrides the URL's. Trailing newline ignored.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// Time between polls.
    #[serde(default = "default_redis_poll", deserialize_with = "de_duration")]
    pub poll_interval: Duration,
    /// Time between SCAN/TYPE discovery rounds.
    #[serde(default = "default_discovery", deserialize_with = "de_duration")]
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
    /// Which keys to watch.
    #[serde(default)]
    pub queues: Vec<QueueSpec>,
}

/// One `queues:` entry of a Redis source: an exact key or a glob.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueSpec {
    /// An exact key; reported (as depth 0) even while it does not exist.
    #[serde(default)]
    pub key: Option<String>,
    /// A Redis glob expanded with SCAN MATCH at discovery.
    #[serde(default)]
    pub pattern: Option<String>,
    /// Regex over the key name; named captures become labels.
    #[serde(default)]
    pub labels: Option<String>,
    /// Only track keys of these types (patterns); default: all queue types.
    #[serde(default)]
    pub types: Option<Vec<KeyType>>,
    /// What zset scores mean.
    #[serde(default)]
    pub score: ScoreMode,
    /// Unit of timestamp scores.
    #[serde(default)]
    pub score_unit: ScoreUnit,
    /// How to read the oldest item's age from a list.
    #[serde(default)]
    pub age: Option<AgeSpec>,
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
    /// Dotted JSON path to the timestamp; absent means the whole item is the timestamp.
    #[serde(default)]
    pub field: Option<String>,
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

/// How the RabbitMQ source reads queue stats.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RabbitMethod {
    /// The management HTTP API, paged.
    #[default]
    Management,
    /// The `rabbitmq_prometheus` plugin's detailed endpoint on every node.
    Prometheus,
    /// Passive `queue.declare` over AMQP.
    Amqp,
}

/// How much the RabbitMQ source asks for per queue (methods `management`
/// and `prometheus`; `amqp` always sees ready messages and consumers only).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RabbitStats {
    /// Everything the contract has: depth, ready, unacked, consumers,
    /// utilisation, oldest message age and the message counters.
    #[default]
    Full,
    /// Only depth, ready and unacked (plus type and state from the management
    /// API): `disable_stats=true&enable_queue_totals=true`, or only the
    /// `queue_coarse_metrics` family. Several times cheaper at thousands of queues.
    Totals,
}

/// TLS options for outgoing HTTPS/AMQPS connections.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientTlsConfig {
    /// Extra CA bundle (PEM).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Accept any server certificate. For tests only.
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

/// A RabbitMQ source.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RabbitSourceConfig {
    /// The `source` label.
    pub name: String,
    /// Always `rabbitmq`; checked before this struct is parsed.
    #[serde(rename = "type")]
    pub kind: String,
    /// Which API to read.
    #[serde(default)]
    pub method: RabbitMethod,
    /// Management base URL, Prometheus plugin base URL, or AMQP URL.
    #[serde(default = "default_rabbit_url")]
    pub url: String,
    /// Every node's Prometheus plugin base URL (method `prometheus`).
    #[serde(default)]
    pub urls: Vec<String>,
    /// User name, unless in the URL.
    #[serde(default)]
    pub username: Option<String>,
    /// Password, unless in the URL or `password_file`.
    #[serde(default)]
    pub password: Option<String>,
    /// File holding the password. Trailing newline ignored.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// Vhosts to read; empty means all.
    #[serde(default)]
    pub vhosts: Vec<String>,
    /// Regex a queue name must match.
    #[serde(default)]
    pub include: Option<String>,
    /// Regex a queue name must not match.
    #[serde(default)]
    pub exclude: Option<String>,
    /// Exact queue names (required for `amqp`).
    #[serde(default)]
    pub queues: Vec<String>,
    /// Time between polls.
    #[serde(default = "default_rabbit_poll", deserialize_with = "de_duration")]
    pub poll_interval: Duration,
    /// Per HTTP request / AMQP operation.
    #[serde(default = "default_rabbit_timeout", deserialize_with = "de_duration")]
    pub timeout: Duration,
    /// Largest response body accepted, in bytes.
    #[serde(default = "default_max_response_bytes")]
    pub max_response_bytes: u64,
    /// How much to ask for per queue: `full` (default) or `totals`.
    #[serde(default)]
    pub stats: RabbitStats,
    /// TLS for https:// and amqps://.
    #[serde(default)]
    pub tls: ClientTlsConfig,
}

fn default_redis_url() -> String {
    "redis://127.0.0.1:6379".into()
}
fn default_redis_poll() -> Duration {
    Duration::from_secs(1)
}
/// The default `age_histogram_interval`: a common Prometheus scrape interval.
pub fn default_age_histogram_interval() -> Duration {
    Duration::from_secs(15)
}
fn default_discovery() -> Duration {
    Duration::from_secs(30)
}
fn default_timeout() -> Duration {
    Duration::from_secs(5)
}
fn default_max_keys() -> usize {
    10_000
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
fn default_rabbit_url() -> String {
    "http://127.0.0.1:15672".into()
}
fn default_rabbit_poll() -> Duration {
    Duration::from_secs(5)
}
fn default_rabbit_timeout() -> Duration {
    Duration::from_secs(3)
}
fn default_max_response_bytes() -> u64 {
    64 * 1024 * 1024
}

/// Parses `250ms`, `1s`, `2m`, `1h30m`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim()).map_err(|_| format!("invalid duration {s:?}"))
}

fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    duration_from_value(&v).map_err(serde::de::Error::custom)
}

fn de_opt_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    if v.is_null() {
        return Ok(None);
    }
    duration_from_value(&v)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

fn de_durations<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Duration>, D::Error> {
    let v = Vec::<serde_json::Value>::deserialize(d)?;
    v.iter()
        .map(duration_from_value)
        .collect::<Result<_, _>>()
        .map_err(serde::de::Error::custom)
}

fn duration_from_value(v: &serde_json::Value) -> Result<Duration, String> {
    match v {
        serde_json::Value::String(s) => parse_duration(s),
        other => Err(format!(
            "invalid duration {other}: write it with a unit, like 250ms, 1s or 2m"
        )),
    }
}

/// How a config was asked for on the command line.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// The YAML file; `None` for built-in defaults.
    pub file: Option<PathBuf>,
    /// `--listen-http` override.
    pub listen_http: Option<SocketAddr>,
    /// `--log-format` override.
    pub log_format: Option<LogFormat>,
    /// `--log-level` override.
    pub log_level: Option<String>,
}

impl Config {
    /// Loads the file (if any), applies env overrides then CLI overrides, and validates.
    pub fn load(opts: &LoadOptions) -> Result<Config, ConfigError> {
        let env = std::env::vars().filter(|(k, _)| k.starts_with(&format!("{ENV_PREFIX}__")));
        Self::load_with_env(opts, env.collect())
    }

    /// Like [`Config::load`] with an explicit environment, for tests.
    pub fn load_with_env(
        opts: &LoadOptions,
        env: Vec<(String, String)>,
    ) -> Result<Config, ConfigError> {
        let origin = match &opts.file {
            Some(f) if is_stdin(f) => "<stdin>".to_string(),
            Some(f) => f.display().to_string(),
            None => "<defaults>".to_string(),
        };
        // `listen.http` for `QUEUE_EXPORTER__LISTEN__HTTP`, to blame problems
        // that an environment override introduced on it rather than the file.
        let env_paths: Vec<(String, String)> = env
            .iter()
            .filter_map(|(k, _)| {
                let rest = k.strip_prefix(&format!("{ENV_PREFIX}__"))?;
                Some((rest.to_lowercase().replace("__", "."), k.clone()))
            })
            .collect();
        let err = |path: &str, message: String| {
            let dotted = path.replace('[', ".").replace(']', "");
            let from_env = env_paths.iter().find(|(p, _)| {
                !path.is_empty()
                    && (dotted == *p
                        || dotted.starts_with(&format!("{p}."))
                        || p.starts_with(&format!("{dotted}.")))
            });
            ConfigError {
                origin: match from_env {
                    Some((_, var)) => format!("environment variable {var}"),
                    None => origin.clone(),
                },
                path: path.to_string(),
                message,
            }
        };

        let mut builder = config::Config::builder();
        if let Some(file) = &opts.file {
            // Read here rather than by `config::File`, which wants a regular
            // file: `-` and `/dev/stdin` from a pipe are valid config files.
            let text = read_config_text(file).map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => err("", "file not found".into()),
                _ => err("", format!("cannot read: {e}")),
            })?;
            builder = builder.add_source(config::File::from_str(&text, config::FileFormat::Yaml));
        }
        let env_map: config::Map<String, String> = env.iter().cloned().collect();
        builder = builder.add_source(
            config::Environment::with_prefix(ENV_PREFIX)
                .separator("__")
                .try_parsing(true)
                .source(Some(env_map)),
        );
        let merged = builder
            .build()
            .map_err(|e| err("", strip_origin(&e.to_string())))?;
        let value: serde_json::Value = merged
            .try_deserialize()
            .map_err(|e| err("", strip_origin(&e.to_string())))?;
        // An empty YAML document deserializes as unit/null.
        let value = if value.is_null() {
            serde_json::Value::Object(Default::default())
        } else {
            value
        };
        let raw: RawConfig = typed(value, "").map_err(|(p, m)| err(&p, m))?;

        let default_sources = raw.sources.is_none() && opts.file.is_none();
        let sources = match raw.sources {
            Some(list) => list
                .into_iter()
                .enumerate()
                .map(|(i, v)| parse_source(i, v))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|(p, m)| err(&p, m))?,
            None if opts.file.is_none() => default_local_sources(),
            None => Vec::new(),
        };

        let mut config = Config {
            listen: raw.listen,
            log: raw.log,
            scaler: raw.scaler,
            sources,
            default_sources,
            origin: origin.clone(),
        };
        if let Some(addr) = opts.listen_http {
            config.listen.http = addr;
        }
        if let Some(f) = opts.log_format {
            config.log.format = f;
        }
        if let Some(l) = &opts.log_level {
            config.log.level = l.clone();
        }
        config.validate().map_err(|(p, m)| err(&p, m))?;
        Ok(config)
    }

    /// Checks everything serde cannot: exclusive fields, regexes, names.
    fn validate(&self) -> Result<(), (String, String)> {
        if tracing_subscriber::EnvFilter::try_new(&self.log.level).is_err() {
            return Err((
                "log.level".into(),
                format!("invalid log level {:?}", self.log.level),
            ));
        }
        let mut names = HashSet::new();
        for (i, source) in self.sources.iter().enumerate() {
            let at = |field: &str| format!("sources[{i}].{field}");
            if source.name().is_empty() {
                return Err((at("name"), "must not be empty".into()));
            }
            if !names.insert(source.name().to_string()) {
                return Err((
                    at("name"),
                    format!("duplicate source name {:?}", source.name()),
                ));
            }
            if source.poll_interval().is_zero() {
                return Err((at("poll_interval"), "must be greater than 0".into()));
            }
            match source {
                SourceConfig::Redis(c) => validate_redis(c, &at)?,
                SourceConfig::RabbitMq(c) => validate_rabbit(c, &at)?,
            }
        }
        if let Some(s) = self.scaler.max_staleness
            && s.is_zero()
        {
            return Err((
                "scaler.max_staleness".into(),
                "must be greater than 0".into(),
            ));
        }
        Ok(())
    }
}

/// Whether `path` names standard input (`-`).
fn is_stdin(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// The config file's text; `-` reads standard input.
fn read_config_text(path: &Path) -> std::io::Result<String> {
    if is_stdin(path) {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)?;
        Ok(text)
    } else {
        std::fs::read_to_string(path)
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

fn validate_redis(
    c: &RedisSourceConfig,
    at: &dyn Fn(&str) -> String,
) -> Result<(), (String, String)> {
    if !(c.url.starts_with("redis://")
        || c.url.starts_with("rediss://")
        || c.url.starts_with("unix://")
        || c.url.starts_with("redis+unix://"))
    {
        return Err((
            at("url"),
            "must start with redis://, rediss:// or unix://".into(),
        ));
    }
    if c.discovery_interval.is_zero() {
        return Err((at("discovery_interval"), "must be greater than 0".into()));
    }
    if c.max_keys == 0 {
        return Err((at("max_keys"), "must be greater than 0".into()));
    }
    if c.scan_count == 0 {
        return Err((at("scan_count"), "must be greater than 0".into()));
    }
    if c.age_buckets.windows(2).any(|w| w[0] >= w[1]) || c.age_buckets.iter().any(|d| d.is_zero()) {
        return Err((
            at("age_buckets"),
            "must be positive and strictly increasing".into(),
        ));
    }
    for (j, q) in c.queues.iter().enumerate() {
        let qat = |f: &str| at(&format!("queues[{j}].{f}"));
        match (&q.key, &q.pattern) {
            (Some(_), Some(_)) => {
                return Err((
                    at(&format!("queues[{j}]")),
                    "set either key or pattern, not both".into(),
                ));
            }
            (None, None) => {
                return Err((
                    at(&format!("queues[{j}]")),
                    "needs a key or a pattern".into(),
                ));
            }
            (Some(k), None) if k.is_empty() => {
                return Err((qat("key"), "must not be empty".into()));
            }
            (None, Some(p)) if p.is_empty() => {
                return Err((qat("pattern"), "must not be empty".into()));
            }
            _ => {}
        }
        if let Some(re) = &q.labels {
            let compiled =
                regex::Regex::new(re).map_err(|e| (qat("labels"), one_line(&e.to_string())))?;
            for name in compiled.capture_names().flatten() {
                if RESERVED_LABELS.contains(&name) {
                    return Err((
                        qat("labels"),
                        format!("capture name {name:?} is reserved by the exporter"),
                    ));
                }
                if name.starts_with("__") {
                    return Err((
                        qat("labels"),
                        format!("capture name {name:?} must not start with __"),
                    ));
                }
                // The regex crate accepts names such as `a.b`, `p[0]` or `ü`,
                // which are not Prometheus label names and would make every
                // scrape invalid.
                if !is_label_name(name) {
                    return Err((
                        qat("labels"),
                        format!(
                            "capture name {name:?} is not a valid label name ([a-zA-Z_][a-zA-Z0-9_]*)"
                        ),
                    ));
                }
            }
        }
        if let Some(types) = &q.types
            && types.is_empty()
        {
            return Err((qat("types"), "must list at least one type".into()));
        }
        if let Some(age) = &q.age
            && let Some(field) = &age.field
            && (field.is_empty() || field.split('.').any(str::is_empty))
        {
            return Err((qat("age.field"), format!("invalid JSON path {field:?}")));
        }
    }
    Ok(())
}

fn validate_rabbit(
    c: &RabbitSourceConfig,
    at: &dyn Fn(&str) -> String,
) -> Result<(), (String, String)> {
    let schemes: &[&str] = match c.method {
        RabbitMethod::Amqp => &["amqp://", "amqps://"],
        _ => &["http://", "https://"],
    };
    if !schemes.iter().any(|s| c.url.starts_with(s)) {
        return Err((
            at("url"),
            format!(
                "must start with {} for method {:?}",
                schemes.join(" or "),
                c.method
            )
            .to_lowercase(),
        ));
    }
    // Never echo a URL here: it may carry a password.
    let url_ok = match c.method {
        RabbitMethod::Amqp => c.url.parse::<lapin::uri::AMQPUri>().is_ok(),
        _ => reqwest::Url::parse(&c.url).is_ok_and(|u| u.has_host()),
    };
    if !url_ok {
        return Err((at("url"), "is not a valid URL".into()));
    }
    for (j, u) in c.urls.iter().enumerate() {
        if !(u.starts_with("http://") || u.starts_with("https://")) {
            return Err((
                at(&format!("urls[{j}]")),
                "must start with http:// or https://".into(),
            ));
        }
        if !reqwest::Url::parse(u).is_ok_and(|u| u.has_host()) {
            return Err((at(&format!("urls[{j}]")), "is not a valid URL".into()));
        }
    }
    if !c.urls.is_empty() && c.method != RabbitMethod::Prometheus {
        return Err((
            at("urls"),
            "is only used by method prometheus (one URL per cluster node)".into(),
        ));
    }
    if c.method == RabbitMethod::Amqp && c.queues.is_empty() {
        return Err((
            at("queues"),
            "method amqp needs the queue names to check".into(),
        ));
    }
    if c.method == RabbitMethod::Amqp && !c.vhosts.is_empty() {
        return Err((
            at("vhosts"),
            "method amqp reads one vhost, from the url path (amqp://host:5672/vhost, %2F for /)"
                .into(),
        ));
    }
    if c.method == RabbitMethod::Amqp && c.tls.insecure_skip_verify {
        return Err((
            at("tls.insecure_skip_verify"),
            "is not supported for amqps://; give the server's CA in tls.ca_file".into(),
        ));
    }
    if c.max_response_bytes == 0 {
        return Err((at("max_response_bytes"), "must be greater than 0".into()));
    }
    for (field, re) in [("include", &c.include), ("exclude", &c.exclude)] {
        if let Some(re) = re {
            regex::Regex::new(re).map_err(|e| (at(field), one_line(&e.to_string())))?;
        }
    }
    if c.timeout.is_zero() {
        return Err((at("timeout"), "must be greater than 0".into()));
    }
    if c.password.is_some() && c.password_file.is_some() {
        return Err((
            at("password_file"),
            "set password or password_file, not both".into(),
        ));
    }
    Ok(())
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The `config` crate prefixes some messages with the file; we add our own.
fn strip_origin(s: &str) -> String {
    one_line(s)
}

fn typed<T: DeserializeOwned>(
    value: serde_json::Value,
    prefix: &str,
) -> Result<T, (String, String)> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let inner = e.path().to_string();
        let path = match (prefix.is_empty(), inner == ".") {
            (true, _) => inner,
            (false, true) => prefix.to_string(),
            (false, false) => format!("{prefix}.{inner}"),
        };
        let path = if path == "." { String::new() } else { path };
        (path, one_line(&e.into_inner().to_string()))
    })
}

fn parse_source(i: usize, v: serde_json::Value) -> Result<SourceConfig, (String, String)> {
    let at = format!("sources[{i}]");
    let kind = match v.get("type") {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(other) => {
            return Err((
                format!("{at}.type"),
                format!("expected a string, got {other}"),
            ));
        }
        None => {
            return Err((
                format!("{at}.type"),
                "missing (expected redis or rabbitmq)".into(),
            ));
        }
    };
    match kind.as_str() {
        "redis" => typed(v, &at).map(SourceConfig::Redis),
        "rabbitmq" => typed(v, &at).map(SourceConfig::RabbitMq),
        other => Err((
            format!("{at}.type"),
            format!("unknown source type {other:?} (expected redis or rabbitmq)"),
        )),
    }
}

/// Sources used when no config file is given: the local Redis, discovering
/// lists, zsets and streams, and the local RabbitMQ management API if it answers.
pub fn default_local_sources() -> Vec<SourceConfig> {
    vec![
        SourceConfig::Redis(RedisSourceConfig {
            name: "redis".into(),
            kind: "redis".into(),
            url: default_redis_url(),
            password_file: None,
            poll_interval: default_redis_poll(),
            discovery_interval: default_discovery(),
            timeout: default_timeout(),
            max_keys: default_max_keys(),
            scan_count: default_scan_count(),
            age_buckets: default_age_buckets(),
            age_histogram_interval: default_age_histogram_interval(),
            queues: vec![QueueSpec {
                key: None,
                pattern: Some("*".into()),
                labels: None,
                types: Some(vec![KeyType::List, KeyType::Zset, KeyType::Stream]),
                score: ScoreMode::Plain,
                score_unit: ScoreUnit::Seconds,
                age: None,
            }],
        }),
        SourceConfig::RabbitMq(RabbitSourceConfig {
            name: "rabbitmq".into(),
            kind: "rabbitmq".into(),
            method: RabbitMethod::Management,
            url: "http://127.0.0.1:15672".into(),
            urls: Vec::new(),
            username: Some("guest".into()),
            password: Some("guest".into()),
            password_file: None,
            vhosts: Vec::new(),
            include: None,
            exclude: None,
            queues: Vec::new(),
            poll_interval: default_rabbit_poll(),
            timeout: default_rabbit_timeout(),
            max_response_bytes: default_max_response_bytes(),
            stats: RabbitStats::Full,
            tls: ClientTlsConfig::default(),
        }),
    ]
}

/// Reads a secret file, dropping one trailing newline (and `\r`).
pub fn read_secret_file(path: &Path) -> std::io::Result<String> {
    let mut s = std::fs::read_to_string(path)?;
    if s.ends_with('\n') {
        s.pop();
        if s.ends_with('\r') {
            s.pop();
        }
    }
    Ok(s)
}

/// Hides the password (and user info) of a URL for logs and errors.
pub struct Redacted<'a>(pub &'a str);

impl fmt::Display for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        match (s.find("://"), s.rfind('@')) {
            (Some(scheme_end), Some(at)) if at > scheme_end => {
                write!(f, "{}://***@{}", &s[..scheme_end], &s[at + 1..])
            }
            _ => f.write_str(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn load_yaml(yaml: &str) -> Result<Config, ConfigError> {
        load_yaml_env(yaml, Vec::new())
    }

    fn load_yaml_env(yaml: &str, env: Vec<(String, String)>) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::File::create(&path)
            .unwrap()
            .write_all(yaml.as_bytes())
            .unwrap();
        let opts = LoadOptions {
            file: Some(path),
            ..LoadOptions::default()
        };
        Config::load_with_env(&opts, env).map_err(|mut e| {
            if !e.origin.starts_with("environment") {
                e.origin = "config.yaml".into();
            }
            e
        })
    }

    const FULL: &str = r#"
listen:
  http: 127.0.0.1:9731
log: { format: text, level: info }
sources:
  - name: main
    type: redis
    url: redis://127.0.0.1:6379/0
    poll_interval: 1s
    discovery_interval: 30s
    max_keys: 10000
    queues:
      - key: work-queue
      - pattern: "jobs:pending:*"
        labels: "jobs:pending:(?P<priority>[^:]+)"
        score: timestamp
        score_unit: seconds
      - key: jobs:processing
      - key: emails
        age: { end: head, field: enqueued_at, unit: auto }
"#;

    #[test]
    fn the_documented_example_loads() {
        let c = load_yaml(FULL).unwrap();
        assert_eq!(c.sources.len(), 1);
        let SourceConfig::Redis(r) = &c.sources[0] else {
            panic!("not redis")
        };
        assert_eq!(r.poll_interval, Duration::from_secs(1));
        assert_eq!(r.queues.len(), 4);
        assert_eq!(r.queues[1].score, ScoreMode::Timestamp);
        assert_eq!(
            r.queues[3].age.as_ref().unwrap().field.as_deref(),
            Some("enqueued_at")
        );
        assert!(!c.default_sources);
        assert_eq!(r.age_histogram_interval, Duration::from_secs(15));
        let c = load_yaml(&FULL.replace(
            "poll_interval: 1s",
            "poll_interval: 1s\n    age_histogram_interval: 0s",
        ))
        .unwrap();
        let SourceConfig::Redis(r) = &c.sources[0] else {
            panic!("not redis")
        };
        assert_eq!(r.age_histogram_interval, Duration::ZERO);
    }

    #[test]
    fn bad_duration_names_file_field_and_value() {
        let e = load_yaml(&FULL.replace("poll_interval: 1s", "poll_interval: often")).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"config.yaml: sources[0].poll_interval: invalid duration "often""#
        );
    }

    #[test]
    fn unknown_fields_and_types_are_errors() {
        let e = load_yaml(&FULL.replace("max_keys:", "max_keyz:")).unwrap_err();
        assert!(e.to_string().starts_with("config.yaml: sources[0]"), "{e}");
        assert!(e.to_string().contains("max_keyz"), "{e}");

        let e = load_yaml(&FULL.replace("type: redis", "type: memcached")).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"config.yaml: sources[0].type: unknown source type "memcached" (expected redis or rabbitmq)"#
        );

        let e = load_yaml("listen:\n  htp: 1.2.3.4:5\n").unwrap_err();
        assert!(e.to_string().contains("htp"), "{e}");
    }

    #[test]
    fn key_and_pattern_are_exclusive_and_regex_is_checked() {
        let e = load_yaml(&FULL.replace("- key: work-queue", "- key: a\n        pattern: b"))
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("config.yaml: sources[0].queues[0]: "),
            "{e}"
        );
        let e = load_yaml(&FULL.replace("(?P<priority>[^:]+)", "(?P<priority>[")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("config.yaml: sources[0].queues[1].labels: "),
            "{e}"
        );
        let e = load_yaml(&FULL.replace("(?P<priority>", "(?P<queue>")).unwrap_err();
        assert!(e.to_string().contains("reserved"), "{e}");
        for bad in ["prio.rity", "prio[0]", "prïo"] {
            let e = load_yaml(&FULL.replace("(?P<priority>", &format!("(?P<{bad}>"))).unwrap_err();
            assert!(e.to_string().contains("not a valid label name"), "{e}");
        }
        assert!(is_label_name("_p2") && !is_label_name("2p") && !is_label_name(""));
    }

    #[test]
    fn env_overrides_with_double_underscore() {
        let c = load_yaml_env(
            FULL,
            vec![
                ("QUEUE_EXPORTER__LISTEN__HTTP".into(), "0.0.0.0:9999".into()),
                ("QUEUE_EXPORTER__LOG__FORMAT".into(), "json".into()),
            ],
        )
        .unwrap();
        assert_eq!(c.listen.http, "0.0.0.0:9999".parse().unwrap());
        assert_eq!(c.log.format, LogFormat::Json);
        // A bad or unknown override is blamed on its variable, not the file.
        let e = load_yaml_env(
            FULL,
            vec![("QUEUE_EXPORTER__LISTEN__HTTPX".into(), "1".into())],
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "environment variable QUEUE_EXPORTER__LISTEN__HTTPX: listen.httpx: unknown field `httpx`, expected `http` or `grpc`"
        );
        let e = load_yaml_env(
            FULL,
            vec![("QUEUE_EXPORTER__LOG__FORMAT".into(), "xml".into())],
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("environment variable QUEUE_EXPORTER__LOG__FORMAT: log.format: "),
            "{e}"
        );
        // Problems in the file still name the file.
        let e = load_yaml_env(
            &FULL.replace("poll_interval: 1s", "poll_interval: often"),
            vec![("QUEUE_EXPORTER__LOG__FORMAT".into(), "json".into())],
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("config.yaml: sources[0].poll_interval"),
            "{e}"
        );
    }

    #[test]
    fn no_file_means_local_defaults() {
        let c = Config::load_with_env(&LoadOptions::default(), Vec::new()).unwrap();
        assert!(c.default_sources);
        assert_eq!(c.listen.http, "127.0.0.1:9731".parse().unwrap());
        assert!(matches!(c.sources[0], SourceConfig::Redis(_)));
    }

    #[test]
    fn duplicate_names_and_missing_file() {
        let two = format!(
            "{FULL}{}",
            &FULL[FULL.find("  - name").unwrap()..].replace("sources:\n", "")
        );
        let e = load_yaml(&two).unwrap_err();
        assert!(e.to_string().contains("sources[1].name: duplicate"), "{e}");

        let opts = LoadOptions {
            file: Some("/nonexistent/qe.yaml".into()),
            ..LoadOptions::default()
        };
        let e = Config::load_with_env(&opts, Vec::new()).unwrap_err();
        assert_eq!(e.to_string(), "/nonexistent/qe.yaml: file not found");
    }

    #[test]
    fn redaction_hides_credentials() {
        assert_eq!(
            Redacted("redis://user:secret@host:6379/0").to_string(),
            "redis://***@host:6379/0"
        );
        assert_eq!(
            Redacted("redis://host:6379").to_string(),
            "redis://host:6379"
        );
    }

    #[test]
    fn secret_files_drop_one_trailing_newline() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pw");
        std::fs::write(&p, "s3cret\n").unwrap();
        assert_eq!(read_secret_file(&p).unwrap(), "s3cret");
    }

    #[test]
    fn rabbitmq_sources_are_checked_per_method() {
        let rabbit = |extra: &str| {
            load_yaml(&format!(
                "sources:\n  - name: r\n    type: rabbitmq\n{extra}"
            ))
        };
        let c = rabbit("    stats: totals\n").unwrap();
        let SourceConfig::RabbitMq(r) = &c.sources[0] else {
            panic!("not rabbitmq")
        };
        assert_eq!(r.stats, RabbitStats::Totals);
        assert_eq!(r.method, RabbitMethod::Management);

        let amqp = "    method: amqp\n    url: amqp://u:p@h:5672/v\n    queues: [q]\n";
        assert!(rabbit(amqp).is_ok());
        let cases = [
            (
                format!("{amqp}    vhosts: [a]\n"),
                "sources[0].vhosts: method amqp reads one vhost",
            ),
            (
                format!("{amqp}    tls: {{ insecure_skip_verify: true }}\n"),
                "sources[0].tls.insecure_skip_verify: ",
            ),
            (
                "    urls: [\"http://n1:15692\"]\n".to_string(),
                "sources[0].urls: is only used by method prometheus",
            ),
            (
                "    method: prometheus\n    urls: [\"ftp://n1\"]\n".to_string(),
                "sources[0].urls[0]: must start with http://",
            ),
            ("    stats: some\n".to_string(), "sources[0].stats"),
            (
                "    max_response_bytes: 0\n".to_string(),
                "sources[0].max_response_bytes: ",
            ),
            (
                "    url: \"http://user:hunter2@\"\n".to_string(),
                "sources[0].url: is not a valid URL",
            ),
        ];
        for (extra, want) in cases {
            let e = rabbit(&extra).unwrap_err().to_string();
            assert!(e.contains(want), "{extra}: {e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
    }
}
