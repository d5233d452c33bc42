//! One `sources:` entry: [`SourceConfig`], the dispatch on `type:` to each
//! kind's schema (a Redis source's `- preset:` entries split from its
//! key/pattern entries), and the no-config default entries. Apart from the
//! loader so that environment overrides (`env`) can re-parse one entry
//! without depending on the loader.

use std::time::Duration;

use super::error::typed;
use super::preset::PresetEntry;
use super::rabbitmq::RabbitSourceConfig;
use super::redis::{QueueSpec, RedisSourceConfig};

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

/// Parses entry `i` of `sources`, its `type:` picking the schema.
pub(super) fn parse_source(
    i: usize,
    v: serde_json::Value,
) -> Result<SourceConfig, (String, String)> {
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

/// A Redis source: `- preset:` entries of `queues:` are taken out as
/// [`PresetEntry`]s (a library's name and options, resolved by `sources`),
/// the rest parsed as [`QueueSpec`]s, each with the path of its own
/// position in the list.
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
                presets.push(PresetEntry::parse(entry, &entry_at)?);
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
    if config.queues.is_empty() && config.presets.is_empty() {
        config.zero_config();
    }
    Ok(config)
}

/// The `sources` entries used when no config file is given: the local
/// Redis with zero config (no `queues:`: the queue libraries' queues are
/// recognised, other lists, zsets and streams reported as plain keys), and
/// the local RabbitMQ
/// management API (as guest) if it answers. Every other setting is the
/// documented default. Entries rather than typed values, so environment
/// overrides reach them as they reach a file's (`QUEUE_EXPORTER__SOURCES__REDIS__URL`).
pub(super) fn default_source_entries() -> Vec<serde_json::Value> {
    vec![
        serde_json::json!({
            "type": "redis",
            "name": "redis",
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
/// `default_source_entries`), parsed.
pub fn default_local_sources() -> Vec<SourceConfig> {
    default_source_entries()
        .into_iter()
        .enumerate()
        // Both entries parse (`load::tests::no_file_means_local_defaults`).
        .filter_map(|(i, v)| parse_source(i, v).ok())
        .collect()
}
