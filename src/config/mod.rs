//! Configuration: the YAML file, `QUEUE_EXPORTER__*` env overrides and defaults.
//!
//! Loading goes YAML + env → a generic value (the `config` crate) → typed
//! structs through `serde_path_to_error`, so every problem is reported as one
//! line naming the file, the field path and the problem, e.g.
//! `config.yaml: sources[0].poll_interval: invalid duration "often"`.
//! Overrides of one source's fields (`QUEUE_EXPORTER__SOURCES__<index or
//! name>__<field>`) are applied here, on the source's entry, because the
//! `config` crate cannot address an element of a list.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde::de::DeserializeOwned;

mod duration;
mod preset;
mod rabbitmq;
mod redis;
mod secret;
mod web;

pub use duration::parse_duration;
use duration::{Bounds, de_opt_duration};
pub use preset::{ALL_QUEUES, CounterKeys, DEFAULT_STALLED_CHECK_LIMIT, Preset, PresetSpec};
pub use rabbitmq::{ClientTlsConfig, NameRegex, RabbitMethod, RabbitSourceConfig, RabbitStats};
pub use redis::{
    AgeSpec, CaptureLabels, JsonField, KeyType, ListEnd, QueueSpec, QueueTarget, RESERVED_LABELS,
    RedisSourceConfig, RedisTlsConfig, RedisUrl, ScoreMode, ScoreUnit, SentinelSpec, TimeUnit,
    UrlKind, default_age_buckets, default_age_histogram_interval,
};
pub use secret::{Redacted, read_secret_file};
pub use web::{
    ALLOWED_HEADERS, BcryptHash, ClientAuthType, HttpServerConfig, TlsVersion, WebConfig,
    WebTlsConfig,
};

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
    /// TLS and basic auth of the HTTP listener.
    pub web: WebConfig,
    /// Sources to poll, in config order.
    pub sources: Vec<SourceConfig>,
    /// How long SIGTERM waits for open streams, in-flight scrapes and polls
    /// to finish before aborting them (`shutdown_grace`, default 5 s).
    pub shutdown_grace: Duration,
    /// True when no file was given and `sources` are the built-in local defaults.
    pub default_sources: bool,
    /// Where the config came from (the file, or `<defaults>`), for messages.
    pub origin: String,
    /// Each source's entry as written (environment overrides applied), by
    /// name: a reload keeps a running source whose entry did not change.
    entries: HashMap<String, serde_json::Value>,
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
    web: WebConfig,
    #[serde(default)]
    sources: Option<Vec<serde_json::Value>>,
    #[serde(
        default = "default_shutdown_grace",
        deserialize_with = "duration::de_duration"
    )]
    shutdown_grace: Duration,
}

/// The default `shutdown_grace`.
fn default_shutdown_grace() -> Duration {
    crate::shutdown::DRAIN_TIMEOUT
}

/// Where the exporter listens.
#[derive(Debug, Clone, PartialEq, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Deserialize)]
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
            .unwrap_or_else(|| poll_interval.saturating_mul(3).max(Duration::from_secs(2)))
    }
}

/// Server certificate and optional client CA for the gRPC listener.
#[derive(Debug, Clone, PartialEq, Deserialize)]
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
        // A source's fields are overridden on its entry below; the rest of
        // the environment goes through the `config` crate.
        let (source_env, env): (Vec<_>, Vec<_>) = env
            .into_iter()
            .partition(|(k, _)| SourceOverride::applies_to(k));
        // `listen.http` for `QUEUE_EXPORTER__LISTEN__HTTP`, to blame problems
        // that an environment override introduced on it rather than the file.
        let mut blame = Blame {
            origin: origin.clone(),
            env_paths: env
                .iter()
                .filter_map(|(k, _)| {
                    let rest = k.strip_prefix(&format!("{ENV_PREFIX}__"))?;
                    Some((rest.to_lowercase().replace("__", "."), k.clone()))
                })
                .collect(),
        };

        let mut builder = config::Config::builder();
        if let Some(file) = &opts.file {
            // Read here rather than by `config::File`, which wants a regular
            // file: `-` and `/dev/stdin` from a pipe are valid config files.
            let text = read_config_text(file).map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => blame.error("", "file not found".into()),
                _ => blame.error("", format!("cannot read: {e}")),
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
            .map_err(|e| blame.error("", strip_origin(&e.to_string())))?;
        let value: serde_json::Value = merged
            .try_deserialize()
            .map_err(|e| blame.error("", strip_origin(&e.to_string())))?;
        // An empty YAML document deserializes as unit/null.
        let value = if value.is_null() {
            serde_json::Value::Object(Default::default())
        } else {
            value
        };
        let raw: RawConfig = typed(value, "").map_err(|(p, m)| blame.error(&p, m))?;

        let default_sources = raw.sources.is_none() && opts.file.is_none();
        let list = match raw.sources {
            Some(list) => list,
            None if opts.file.is_none() => default_source_entries(),
            None => Vec::new(),
        };
        let overrides = source_env
            .iter()
            .map(|(k, v)| SourceOverride::resolve(k, v, &list))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|(var, path, message)| ConfigError {
                origin: format!("environment variable {var}"),
                path,
                message,
            })?;
        blame
            .env_paths
            .extend(overrides.iter().map(|o| (o.dotted(), o.var.clone())));
        let mut sources = Vec::with_capacity(list.len());
        let mut entries = HashMap::new();
        for (i, entry) in list.into_iter().enumerate() {
            let mine: Vec<&SourceOverride> = overrides.iter().filter(|o| o.index == i).collect();
            let (source, entry) =
                parse_source_with(i, entry, &mine).map_err(|(p, m)| blame.error(&p, m))?;
            entries.insert(source.name().to_string(), entry);
            sources.push(source);
        }

        let mut config = Config {
            listen: raw.listen,
            log: raw.log,
            scaler: raw.scaler,
            web: raw.web,
            sources,
            shutdown_grace: raw.shutdown_grace,
            default_sources,
            origin: origin.clone(),
            entries,
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
        config.validate().map_err(|(p, m)| blame.error(&p, m))?;
        Ok(config)
    }

    /// The entry of the source named `name` as written (after environment
    /// overrides), for telling whether a reload changes it.
    pub fn source_entry(&self, name: &str) -> Option<&serde_json::Value> {
        self.entries.get(name)
    }

    /// Checks everything serde cannot: exclusive fields, regexes, names.
    fn validate(&self) -> Result<(), (String, String)> {
        if tracing_subscriber::EnvFilter::try_new(&self.log.level).is_err() {
            return Err((
                "log.level".into(),
                format!("invalid log level {:?}", self.log.level),
            ));
        }
        // Nothing to poll would serve an empty /metrics and answer KEDA
        // "unknown" for everything: a mistake, such as an empty re-read.
        if self.sources.is_empty() {
            return Err((
                "sources".into(),
                "no sources configured; list at least one (type: redis or rabbitmq)".into(),
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
            match source {
                SourceConfig::Redis(c) => c.validate(&at)?,
                SourceConfig::RabbitMq(c) => c.validate(&at)?,
            }
        }
        self.web.validate()?;
        Bounds::HOUR
            .check(self.shutdown_grace)
            .map_err(|m| ("shutdown_grace".to_string(), m))?;
        if let Some(s) = self.scaler.max_staleness {
            Bounds::DAY
                .check(s)
                .map_err(|m| ("scaler.max_staleness".to_string(), m))?;
        }
        Ok(())
    }
}

/// Turns a problem at a field path into a [`ConfigError`], blaming the
/// environment variable that set the field when there is one, else the file.
struct Blame {
    /// The file, `<stdin>` or `<defaults>`.
    origin: String,
    /// `(dotted field path, variable)` for every environment override.
    env_paths: Vec<(String, String)>,
}

impl Blame {
    /// The error for `message` at `path` (`sources[0].url`, or empty).
    fn error(&self, path: &str, message: String) -> ConfigError {
        let dotted = dotted(path);
        let from_env = self.env_paths.iter().find(|(p, _)| {
            !path.is_empty()
                && (dotted == *p
                    || dotted.starts_with(&format!("{p}."))
                    || p.starts_with(&format!("{dotted}.")))
        });
        ConfigError {
            origin: match from_env {
                Some((_, var)) => format!("environment variable {var}"),
                None => self.origin.clone(),
            },
            path: path.to_string(),
            message,
        }
    }
}

/// `sources[0].queues[1]` as `sources.0.queues.1`.
fn dotted(path: &str) -> String {
    path.replace('[', ".").replace(']', "")
}

/// One `QUEUE_EXPORTER__SOURCES__<which>__<field>[__<field>…]` variable,
/// resolved to the source it addresses.
#[derive(Debug)]
struct SourceOverride {
    /// The variable's name, for errors.
    var: String,
    /// The source's position in `sources`.
    index: usize,
    /// The field path below the source, lowercased: `["tls", "ca_file"]`.
    path: Vec<String>,
    /// The value as given.
    value: String,
}

/// Why a source override cannot be applied: (variable, field path, problem).
type OverrideError = (String, String, String);

impl SourceOverride {
    /// The first segment after the prefix that marks a source override.
    const SEGMENT: &'static str = "SOURCES";

    /// True for `QUEUE_EXPORTER__SOURCES` and everything below it.
    fn applies_to(var: &str) -> bool {
        var.strip_prefix(&format!("{ENV_PREFIX}__"))
            .and_then(|rest| rest.split("__").next())
            .is_some_and(|first| first.eq_ignore_ascii_case(Self::SEGMENT))
    }

    /// Finds the source `var` addresses among `entries` (the `sources` list
    /// as written): by index (`0`), or by name, upper-cased with every
    /// character other than a letter or digit written as `_` (`orders-eu`
    /// is `ORDERS_EU`). The value is never part of an error.
    fn resolve(
        var: &str,
        value: &str,
        entries: &[serde_json::Value],
    ) -> Result<SourceOverride, OverrideError> {
        let fail = |path: &str, m: String| (var.to_string(), path.to_string(), m);
        let rest = var.strip_prefix(&format!("{ENV_PREFIX}__")).unwrap_or(var);
        let mut segments = rest.split("__").skip(1);
        let which = segments.next().unwrap_or_default();
        let path: Vec<String> = segments.map(str::to_lowercase).collect();
        if which.is_empty() || path.is_empty() || path.iter().any(String::is_empty) {
            return Err(fail(
                "sources",
                format!(
                    "set one field of one source, by index or by name: {ENV_PREFIX}__SOURCES__0__URL or {ENV_PREFIX}__SOURCES__<NAME>__URL"
                ),
            ));
        }
        let names: Vec<&str> = entries
            .iter()
            .map(|e| e.get("name").and_then(|n| n.as_str()).unwrap_or(""))
            .collect();
        let known = || {
            let listed: Vec<String> = names
                .iter()
                .enumerate()
                .map(|(i, n)| format!("{i} ({})", env_name(n).to_uppercase()))
                .collect();
            if listed.is_empty() {
                "there are no sources to override".to_string()
            } else {
                format!("sources by index (name): {}", listed.join(", "))
            }
        };
        let index = if which.bytes().all(|b| b.is_ascii_digit()) {
            match which.parse::<usize>() {
                Ok(i) if i < entries.len() => i,
                _ => {
                    return Err(fail(
                        &format!("sources[{which}]"),
                        format!("no source at this index; {}", known()),
                    ));
                }
            }
        } else {
            let wanted = which.to_lowercase();
            let found: Vec<usize> = (0..names.len())
                .filter(|&i| env_name(names[i]) == wanted)
                .collect();
            match found.as_slice() {
                [i] => *i,
                [] => {
                    return Err(fail(
                        "sources",
                        format!("no source is named {which}; {}", known()),
                    ));
                }
                _ => {
                    return Err(fail(
                        "sources",
                        format!(
                            "{which} names {} sources; use the index instead",
                            found.len()
                        ),
                    ));
                }
            }
        };
        Ok(SourceOverride {
            var: var.to_string(),
            index,
            path,
            value: value.to_string(),
        })
    }

    /// `sources[0].queues[1].key`, as errors show paths.
    fn field_path(&self) -> String {
        let mut out = format!("sources[{}]", self.index);
        for segment in &self.path {
            if segment.bytes().all(|b| b.is_ascii_digit()) {
                out.push_str(&format!("[{segment}]"));
            } else {
                out.push('.');
                out.push_str(segment);
            }
        }
        out
    }

    /// `sources.0.tls.ca_file`, as [`Blame`] compares paths.
    fn dotted(&self) -> String {
        format!("sources.{}.{}", self.index, self.path.join("."))
    }

    /// The value to insert: a number, `true`/`false`, or a JSON list or map
    /// when it reads as one, otherwise (or when `as_text`) the text.
    fn json(&self, as_text: bool) -> serde_json::Value {
        if !as_text
            && let Ok(v) = serde_json::from_str::<serde_json::Value>(&self.value)
            && (v.is_number() || v.is_boolean() || v.is_array() || v.is_object())
        {
            return v;
        }
        serde_json::Value::String(self.value.clone())
    }

    /// Sets the field in `entry` (the source's entry), creating maps on the
    /// way; a list element is addressed by its index (`QUEUES__0__KEY`).
    fn apply(&self, entry: &mut serde_json::Value, as_text: bool) -> Result<(), (String, String)> {
        let fail = |m: String| (self.field_path(), m);
        let mut at = entry;
        // `resolve` refuses an empty path, so there is a last segment.
        let last = self.path.len().saturating_sub(1);
        for (depth, segment) in self.path.iter().enumerate() {
            if at.is_null() {
                *at = serde_json::Value::Object(Default::default());
            }
            let next = match at {
                serde_json::Value::Object(fields) => {
                    if depth == last {
                        fields.insert(segment.clone(), self.json(as_text));
                        return Ok(());
                    }
                    fields
                        .entry(segment.clone())
                        .or_insert(serde_json::Value::Null)
                }
                serde_json::Value::Array(items) => {
                    let len = items.len();
                    match segment.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                        Some(item) if depth == last => {
                            *item = self.json(as_text);
                            return Ok(());
                        }
                        Some(item) => item,
                        None => {
                            return Err(fail(format!(
                                "{segment} is not an index of this list of {len}"
                            )));
                        }
                    }
                }
                _ => {
                    return Err(fail(format!(
                        "cannot set {segment}: the field above it is not a map or a list"
                    )));
                }
            };
            at = next;
        }
        Ok(())
    }
}

/// A source name as it is written in an environment variable, lower-cased:
/// letters and digits kept, anything else `_`.
fn env_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// Parses source `i` after applying its environment overrides; returns it
/// with its final entry. An override is first read as a number, boolean or
/// JSON when it looks like one; if that field then fails to parse, it is
/// tried again as text (so a password `12345` is a string).
fn parse_source_with(
    i: usize,
    entry: serde_json::Value,
    overrides: &[&SourceOverride],
) -> Result<(SourceConfig, serde_json::Value), (String, String)> {
    let mut as_text = vec![false; overrides.len()];
    loop {
        let mut v = entry.clone();
        for (o, text) in overrides.iter().zip(&as_text) {
            o.apply(&mut v, *text)?;
        }
        match parse_source(i, v.clone()) {
            Ok(source) => return Ok((source, v)),
            Err((path, message)) => {
                let at = dotted(&path);
                let retry = overrides
                    .iter()
                    .zip(&as_text)
                    .position(|(o, text)| !*text && o.dotted() == at && !o.json(false).is_string());
                match retry {
                    Some(k) => as_text[k] = true,
                    None => return Err((path, message)),
                }
            }
        }
    }
}

/// Whether `path` names standard input (`-`).
fn is_stdin(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// Whether the config at `path` can be read only once: standard input
/// (`-`, `/dev/stdin`) and anything that is not a regular file (a pipe, a
/// FIFO, `/proc/self/fd/N` of one). Reading such a file again finds an
/// empty stream, or blocks until someone writes, so a reload refuses it.
/// Looks at the file's type without opening it (opening a FIFO blocks).
pub fn is_read_once(path: &Path) -> bool {
    is_stdin(path)
        || path == Path::new("/dev/stdin")
        || std::fs::metadata(path).is_ok_and(|m| !m.is_file())
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

pub(crate) fn one_line(s: &str) -> String {
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
    let source_type = match v.get("type") {
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
    // `type` picked the schema; the typed structs do not repeat it.
    let mut v = v;
    if let Some(fields) = v.as_object_mut() {
        fields.remove("type");
    }
    match source_type.as_str() {
        "redis" => parse_redis(v, &at).map(SourceConfig::Redis),
        "rabbitmq" => typed(v, &at).map(SourceConfig::RabbitMq),
        other => Err((
            format!("{at}.type"),
            format!("unknown source type {other:?} (expected redis or rabbitmq)"),
        )),
    }
}

/// A Redis source: `- preset:` entries of `queues:` are taken out and
/// parsed as [`PresetSpec`]s, the rest as [`QueueSpec`]s, each with the path
/// of its own position in the list.
fn parse_redis(mut v: serde_json::Value, at: &str) -> Result<RedisSourceConfig, (String, String)> {
    let mut presets = Vec::new();
    let mut plain = None;
    if v.get("queues").is_some_and(serde_json::Value::is_array)
        && let Some(serde_json::Value::Array(entries)) =
            v.as_object_mut().and_then(|o| o.remove("queues"))
    {
        let mut specs = Vec::new();
        for (j, entry) in entries.into_iter().enumerate() {
            let entry_at = format!("{at}.queues[{j}]");
            if entry.get("preset").is_some() {
                let raw: preset::RawPresetSpec = typed(entry, &entry_at)?;
                presets.push(PresetSpec::try_from(raw).map_err(|m| (entry_at, m))?);
            } else {
                specs.push(typed::<QueueSpec>(entry, &entry_at)?);
            }
        }
        plain = Some(specs);
    }
    // Anything else at `queues` (not a list) is left for serde to report.
    let mut config: RedisSourceConfig = typed(v, at)?;
    if let Some(specs) = plain {
        config.queues = specs;
    }
    config.presets = presets;
    Ok(config)
}

/// The `sources` entries used when no config file is given: the local
/// Redis, discovering lists, zsets and streams, and the local RabbitMQ
/// management API (as guest) if it answers. Every other setting is the
/// documented default. Entries rather than typed values, so environment
/// overrides reach them as they reach a file's (`QUEUE_EXPORTER__SOURCES__REDIS__URL`).
fn default_source_entries() -> Vec<serde_json::Value> {
    vec![
        serde_json::json!({
            "type": "redis",
            "name": "redis",
            "queues": [{ "pattern": "*", "types": ["list", "zset", "stream"] }],
        }),
        serde_json::json!({
            "type": "rabbitmq",
            "name": "rabbitmq",
            "username": "guest",
            "password": "guest",
        }),
    ]
}

/// The sources used when no config file is given (see
/// [`default_source_entries`]), parsed.
pub fn default_local_sources() -> Vec<SourceConfig> {
    default_source_entries()
        .into_iter()
        .enumerate()
        // Both entries parse (`tests::no_file_means_local_defaults`).
        .filter_map(|(i, v)| parse_source(i, v).ok())
        .collect()
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
            r.queues[3]
                .age
                .as_ref()
                .unwrap()
                .field
                .as_ref()
                .map(|f| f.dotted()),
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
    }

    #[test]
    fn shutdown_grace_defaults_to_five_seconds_and_must_be_positive() {
        assert_eq!(
            load_yaml(FULL).unwrap().shutdown_grace,
            Duration::from_secs(5)
        );
        let c = load_yaml(&format!("shutdown_grace: 1500ms\n{FULL}")).unwrap();
        assert_eq!(c.shutdown_grace, Duration::from_millis(1500));
        let e = load_yaml(&format!("shutdown_grace: 0s\n{FULL}")).unwrap_err();
        assert!(
            e.to_string()
                .contains("shutdown_grace: must be greater than 0"),
            "{e}"
        );
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
        let [SourceConfig::Redis(r), SourceConfig::RabbitMq(q)] = &c.sources[..] else {
            panic!("{:?}", c.sources)
        };
        assert_eq!((r.name.as_str(), q.name.as_str()), ("redis", "rabbitmq"));
        assert_eq!(r.url.as_str(), "redis://127.0.0.1:6379");
        assert_eq!(r.queues.len(), 1);
        assert_eq!(r.queues[0].target, QueueTarget::Pattern("*".into()));
        assert_eq!(
            r.queues[0].types,
            Some(vec![KeyType::List, KeyType::Zset, KeyType::Stream])
        );
        assert_eq!(r.poll_interval, RedisSourceConfig::named("x").poll_interval);
        assert_eq!(q.url, "http://127.0.0.1:15672");
        assert_eq!(q.username.as_deref(), Some("guest"));
        assert_eq!(q.password.as_deref(), Some("guest"));
        assert_eq!(default_local_sources().len(), 2);
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const TWO: &str = r#"
sources:
  - name: main
    type: redis
    url: redis://127.0.0.1:6379/0
    queues:
      - key: work-queue
  - name: orders-eu
    type: rabbitmq
    username: u
"#;

    fn redis_of(c: &Config) -> &RedisSourceConfig {
        match &c.sources[0] {
            SourceConfig::Redis(r) => r,
            other => panic!("{other:?}"),
        }
    }

    fn rabbit_of(c: &Config) -> &RabbitSourceConfig {
        match &c.sources[1] {
            SourceConfig::RabbitMq(r) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn env_overrides_reach_a_source_by_index_or_by_name() {
        let c = load_yaml_env(
            TWO,
            env(&[
                (
                    "QUEUE_EXPORTER__SOURCES__0__URL",
                    "redis://:pw@10.0.0.1:6380/2",
                ),
                ("QUEUE_EXPORTER__SOURCES__MAIN__MAX_KEYS", "5"),
                ("QUEUE_EXPORTER__SOURCES__main__POLL_INTERVAL", "250ms"),
                ("QUEUE_EXPORTER__SOURCES__MAIN__QUEUES__0__KEY", "other"),
                ("QUEUE_EXPORTER__SOURCES__ORDERS_EU__PASSWORD", "12345"),
                ("QUEUE_EXPORTER__SOURCES__1__VHOSTS", r#"["a","b"]"#),
                ("QUEUE_EXPORTER__SOURCES__1__TLS__CA_FILE", "/etc/ca.pem"),
                ("QUEUE_EXPORTER__LOG__FORMAT", "json"),
            ]),
        )
        .unwrap();
        let r = redis_of(&c);
        assert_eq!(r.url.as_str(), "redis://:pw@10.0.0.1:6380/2");
        assert_eq!(r.max_keys, 5);
        assert_eq!(r.poll_interval, Duration::from_millis(250));
        assert_eq!(r.queues[0].target, QueueTarget::Key("other".into()));
        let q = rabbit_of(&c);
        // A password of digits stays text.
        assert_eq!(q.password.as_deref(), Some("12345"));
        assert_eq!(q.vhosts, ["a", "b"]);
        assert_eq!(q.tls.ca_file.as_deref(), Some(Path::new("/etc/ca.pem")));
        assert_eq!(c.log.format, LogFormat::Json);
        // The entries a reload compares carry the overrides.
        assert_eq!(
            c.source_entry("main").unwrap()["url"],
            "redis://:pw@10.0.0.1:6380/2"
        );
        assert_eq!(c.source_entry("orders-eu").unwrap()["password"], "12345");
        let plain = load_yaml(TWO).unwrap();
        assert_ne!(plain.source_entry("main"), c.source_entry("main"));
        assert_eq!(
            plain.source_entry("main"),
            load_yaml(TWO).unwrap().source_entry("main")
        );
    }

    #[test]
    fn env_overrides_reach_the_default_sources() {
        let c = Config::load_with_env(
            &LoadOptions::default(),
            env(&[(
                "QUEUE_EXPORTER__SOURCES__REDIS__URL",
                "redis://127.0.0.1:7000",
            )]),
        )
        .unwrap();
        assert!(c.default_sources);
        assert_eq!(redis_of(&c).url.as_str(), "redis://127.0.0.1:7000");
    }

    #[test]
    fn bad_source_overrides_name_the_variable_and_never_the_value() {
        let cases = [
            (
                ("QUEUE_EXPORTER__SOURCES__2__URL", "redis://x"),
                "environment variable QUEUE_EXPORTER__SOURCES__2__URL: sources[2]: no source at this index; sources by index (name): 0 (MAIN), 1 (ORDERS_EU)",
            ),
            (
                ("QUEUE_EXPORTER__SOURCES__ORDERS__URL", "redis://x"),
                "environment variable QUEUE_EXPORTER__SOURCES__ORDERS__URL: sources: no source is named ORDERS; sources by index (name): 0 (MAIN), 1 (ORDERS_EU)",
            ),
            (
                ("QUEUE_EXPORTER__SOURCES__MAIN", "x"),
                "environment variable QUEUE_EXPORTER__SOURCES__MAIN: sources: set one field of one source",
            ),
            (
                ("QUEUE_EXPORTER__SOURCES", "x"),
                "environment variable QUEUE_EXPORTER__SOURCES: sources: set one field",
            ),
            (
                ("QUEUE_EXPORTER__SOURCES__MAIN__POLL_INTERVAL", "often"),
                r#"environment variable QUEUE_EXPORTER__SOURCES__MAIN__POLL_INTERVAL: sources[0].poll_interval: invalid duration "often""#,
            ),
            (
                ("QUEUE_EXPORTER__SOURCES__0__MAX_KEYS", "0"),
                "environment variable QUEUE_EXPORTER__SOURCES__0__MAX_KEYS: sources[0].max_keys: must be greater than 0",
            ),
            (
                ("QUEUE_EXPORTER__SOURCES__MAIN__PASWORD_FILE", "/x"),
                "environment variable QUEUE_EXPORTER__SOURCES__MAIN__PASWORD_FILE: sources[0].pasword_file: unknown field `pasword_file`",
            ),
            (
                ("QUEUE_EXPORTER__SOURCES__0__QUEUES__3__KEY", "k"),
                "environment variable QUEUE_EXPORTER__SOURCES__0__QUEUES__3__KEY: sources[0].queues[3].key: 3 is not an index of this list of 1",
            ),
            (
                (
                    "QUEUE_EXPORTER__SOURCES__MAIN__URL",
                    "http://qe:hunter2@127.0.0.1:1",
                ),
                "environment variable QUEUE_EXPORTER__SOURCES__MAIN__URL: sources[0].url: must start with redis://",
            ),
            (
                (
                    "QUEUE_EXPORTER__SOURCES__ORDERS_EU__URL",
                    "http://u:hunter2@[::1",
                ),
                "environment variable QUEUE_EXPORTER__SOURCES__ORDERS_EU__URL: sources[1].url: is not a valid URL",
            ),
        ];
        for ((var, value), want) in cases {
            let e = load_yaml_env(TWO, env(&[(var, value)]))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(want), "{var}: {e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
        // Two sources one variable name could mean are refused.
        let twins = "sources:
  - { name: a-b, type: redis }
  - { name: a_b, type: redis }
";
        let e = load_yaml_env(
            twins,
            env(&[("QUEUE_EXPORTER__SOURCES__A_B__MAX_KEYS", "1")]),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("A_B names 2 sources; use the index"),
            "{e}"
        );
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
                format!("{amqp}    tls: {{ cert_file: /c.pem }}\n"),
                "sources[0].tls.key_file: is required with tls.cert_file",
            ),
            (
                "    tls: { key_file: /c.key }\n".to_string(),
                "sources[0].tls.cert_file: is required with tls.key_file",
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

    #[test]
    fn web_block_keeps_user_names_as_written_and_checks_hashes() {
        let hash = bcrypt::hash("pw", 4).unwrap();
        let c = load_yaml(&format!(
            "web:\n  basic_auth_users:\n    Prometheus: \"{hash}\"\n{FULL}"
        ))
        .unwrap();
        let names: Vec<_> = c.web.basic_auth_users.keys().cloned().collect();
        assert_eq!(names, ["Prometheus"]);
        assert!(c.web.tls_server_config.is_none());
        let e = load_yaml(&format!(
            "web:\n  basic_auth_users:\n    bob: \"{}\"\n{FULL}",
            hash.replacen("$2b$04$", "$2b$99$", 1)
        ))
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "config.yaml: web.basic_auth_users.bob: has a bcrypt cost outside 4..=31"
        );
    }

    #[test]
    fn cluster_and_sentinel_settings_are_checked_with_one_line_errors() {
        let redis = |extra: &str| format!("sources:\n  - name: r\n    type: redis\n{extra}");
        let c = load_yaml(&redis(
            "    url: redis://10.0.0.1:7000\n    cluster: true\n",
        ))
        .unwrap();
        let SourceConfig::Redis(r) = &c.sources[0] else {
            panic!("redis")
        };
        assert!(r.is_cluster() && r.sentinel().is_none());
        let c = load_yaml(&redis("    url: redis+cluster://10.0.0.1:7000\n")).unwrap();
        let SourceConfig::Redis(r) = &c.sources[0] else {
            panic!("redis")
        };
        assert!(r.is_cluster() && !r.cluster);

        for (extra, want) in [
            (
                "    url: unix:///tmp/r.sock\n    cluster: true\n",
                "config.yaml: sources[0].cluster: needs a redis:// or rediss:// url (cluster nodes are reached over TCP)",
            ),
            (
                "    url: redis+cluster://:secret@h:7000/2\n",
                "config.yaml: sources[0].url: selects a database other than 0, which a Redis Cluster does not have",
            ),
            (
                "    url: redis://h:7000/1\n    cluster: true\n",
                "config.yaml: sources[0].url: selects a database other than 0, which a Redis Cluster does not have",
            ),
            (
                "    url: redis+sentinel://h:26379/m\n    cluster: true\n",
                "config.yaml: sources[0].cluster: cannot be combined with a redis+sentinel:// url (sentinels manage a master, not a cluster)",
            ),
            (
                "    url: redis+sentinel://:secret@h:26379\n",
                "config.yaml: sources[0].url: needs the master's name after the sentinels (redis+sentinel://[user:password@]host:port[,host:port…]/master_name[/db])",
            ),
        ] {
            let e = load_yaml(&redis(extra)).unwrap_err().to_string();
            assert_eq!(e, want);
            assert!(!e.contains("secret") && !e.contains('\n'), "{e}");
        }
    }
}
