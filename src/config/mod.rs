//! Configuration: the YAML file, `QUEUE_EXPORTER__*` env overrides and defaults.
//!
//! Loading goes YAML + env → a generic value (the `config` crate) → typed
//! structs through `serde_path_to_error`, so every problem is reported as one
//! line naming the file, the field path and the problem, e.g.
//! `config.yaml: sources[0].poll_interval: invalid duration "often"`.

use std::collections::HashSet;
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

use duration::de_opt_duration;
pub use duration::parse_duration;
pub use preset::{ALL_QUEUES, CounterKeys, DEFAULT_STALLED_CHECK_LIMIT, Preset, PresetSpec};
pub use rabbitmq::{ClientTlsConfig, NameRegex, RabbitMethod, RabbitSourceConfig, RabbitStats};
pub use redis::{
    AgeSpec, CaptureLabels, JsonField, KeyType, ListEnd, QueueSpec, QueueTarget, RESERVED_LABELS,
    RedisSourceConfig, RedisUrl, ScoreMode, ScoreUnit, SentinelSpec, TimeUnit, UrlKind,
    default_age_buckets, default_age_histogram_interval,
};
pub use secret::{Redacted, read_secret_file};

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
    /// How long SIGTERM waits for open streams, in-flight scrapes and polls
    /// to finish before aborting them (`shutdown_grace`, default 5 s).
    pub shutdown_grace: Duration,
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
            shutdown_grace: raw.shutdown_grace,
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
                SourceConfig::Redis(c) => c.validate(&at)?,
                SourceConfig::RabbitMq(c) => c.validate(&at)?,
            }
        }
        if self.shutdown_grace.is_zero() {
            return Err(("shutdown_grace".into(), "must be greater than 0".into()));
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

/// Sources used when no config file is given: the local Redis, discovering
/// lists, zsets and streams, and the local RabbitMQ management API (as
/// guest) if it answers. Every other setting is the documented default.
pub fn default_local_sources() -> Vec<SourceConfig> {
    let mut discover_all = QueueSpec::new(QueueTarget::Pattern("*".into()));
    discover_all.types = Some(vec![KeyType::List, KeyType::Zset, KeyType::Stream]);
    let redis = RedisSourceConfig {
        queues: vec![discover_all],
        ..RedisSourceConfig::named("redis")
    };
    let rabbit = RabbitSourceConfig {
        username: Some("guest".into()),
        password: Some("guest".into()),
        ..RabbitSourceConfig::named("rabbitmq")
    };
    vec![SourceConfig::Redis(redis), SourceConfig::RabbitMq(rabbit)]
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
