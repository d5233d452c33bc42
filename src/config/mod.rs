//! Configuration: the YAML file, `QUEUE_EXPORTER__*` env overrides and defaults.
//!
//! Loading goes YAML + env → a generic value (the `config` crate) → typed
//! structs through `serde_path_to_error`, so every problem is reported as one
//! line naming the file, the field path and the problem, e.g.
//! `config.yaml: sources[0].poll_interval: invalid duration "often"`.
//! Overrides of one source's fields (`QUEUE_EXPORTER__SOURCES__<index or
//! name>__<field>`) are applied on the source's entry, because the
//! `config` crate cannot address an element of a list.
//!
//! This file keeps [`Config`] and its top-level validation, and re-exports
//! what the rest of the crate uses; the parts live beside it: `error` (the
//! one-line error and its blame), `load` (file, stdin, defaults, CLI
//! overrides), `env` (per-source overrides), `source` (`sources:` entries),
//! `sections` (`listen`, `log`, `scaler`), and each source kind's schema.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

mod duration;
mod env;
mod error;
mod load;
mod preset;
mod rabbitmq;
mod redis;
mod secret;
mod sections;
mod source;
mod web;

pub(crate) use duration::Bounds;
pub use duration::{default_service_time_max_age, parse_duration};
pub use error::ConfigError;
pub(crate) use error::one_line;
pub use error::typed;
pub use load::{LoadOptions, is_read_once};
pub use preset::{ALL_QUEUES, CounterKeys, PresetEntry, QUEUE_PLACEHOLDER, check_counters};
pub use rabbitmq::{ClientTlsConfig, NameRegex, RabbitMethod, RabbitSourceConfig, RabbitStats};
pub use redis::{
    AgeSpec, CaptureLabels, JsonField, KeyType, ListEnd, MAX_AGE_BUCKETS, QueueSpec, QueueTarget,
    RESERVED_LABELS, RedisSourceConfig, RedisTlsConfig, RedisUrl, ScoreMode, SentinelSpec, UrlKind,
    default_age_buckets, default_age_histogram_interval,
};
pub use secret::{Password, Redacted, read_secret_file};
pub use sections::{GrpcTlsConfig, ListenConfig, LogConfig, LogFormat, ScalerConfig};
pub use source::{SourceConfig, default_local_sources};
pub use web::{
    ALLOWED_HEADERS, BcryptHash, ClientAuthType, HttpServerConfig, TlsVersion, WebConfig,
    WebTlsConfig,
};

/// Prefix of environment overrides (`QUEUE_EXPORTER__LISTEN__HTTP=...`).
pub const ENV_PREFIX: &str = "QUEUE_EXPORTER";

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

impl Config {
    /// The same config without Redis age histograms (`age_buckets: []`):
    /// what `once` polls unless `--histograms` asks for them. A first
    /// measurement of every histogram is most of a first poll's Redis work;
    /// a one-shot look at depths need not pay it, and the histogram series
    /// are then absent, never zeros.
    pub fn without_age_histograms(mut self) -> Self {
        for source in &mut self.sources {
            if let SourceConfig::Redis(c) = source {
                c.age_buckets.clear();
            }
        }
        self
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
