//! Loading: the YAML file (or `-`/stdin, or the built-in defaults), the
//! environment through the `config` crate, per-source overrides, then CLI
//! overrides, each problem blamed on where it came from. Apart from `Config`
//! itself, which the rest of the crate reads without caring how it was made.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::duration;
use super::env::{SourceOverride, parse_source_with};
use super::error::{Blame, ConfigError, EnvSetting, one_line, typed};
use super::sections::{ListenConfig, LogConfig, LogFormat, ScalerConfig};
use super::source::default_source_entries;
use super::{Config, ENV_PREFIX, WebConfig};

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
        let mut blame = blame_of(&origin, &env);
        let value = merged_value(opts, &env, &blame)?;
        let raw: RawConfig = typed(value, "").map_err(|(p, m)| blame.error(&p, m))?;

        let default_sources = raw.sources.is_none() && opts.file.is_none();
        let list = match raw.sources {
            Some(list) => list,
            None if opts.file.is_none() => default_source_entries(),
            None => Vec::new(),
        };
        let (sources, entries) = parse_sources(list, &source_env, &mut blame)?;

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
}

/// Who to blame for a problem at a path: the config's `origin`, or the
/// environment variable that set it (`listen.http` for
/// `QUEUE_EXPORTER__LISTEN__HTTP`, rather than the file).
fn blame_of(origin: &str, env: &[(String, String)]) -> Blame {
    // `listen.http` for `QUEUE_EXPORTER__LISTEN__HTTP`, to blame problems
    // that an environment override introduced on it rather than the file.
    Blame {
        origin: origin.to_string(),
        env_paths: env
            .iter()
            .filter_map(|(k, v)| {
                let rest = k.strip_prefix(&format!("{ENV_PREFIX}__"))?;
                Some(EnvSetting {
                    path: rest.to_lowercase().replace("__", "."),
                    var: k.clone(),
                    value: v.clone(),
                })
            })
            .collect(),
    }
}

/// The file (if any) and the environment `env`, merged by the `config`
/// crate into one value (an empty document as an empty map).
fn merged_value(
    opts: &LoadOptions,
    env: &[(String, String)],
    blame: &Blame,
) -> Result<serde_json::Value, ConfigError> {
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
    Ok(value)
}

/// Each entry of `list` parsed as a source, with the per-source
/// overrides of `source_env` applied (and recorded in `blame`); also each
/// source's entry as written, by name.
fn parse_sources(
    list: Vec<serde_json::Value>,
    source_env: &[(String, String)],
    blame: &mut Blame,
) -> Result<(Vec<super::SourceConfig>, HashMap<String, serde_json::Value>), ConfigError> {
    let overrides = source_env
        .iter()
        .map(|(k, v)| SourceOverride::resolve(k, v, &list))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|(var, path, message)| ConfigError {
            origin: format!("environment variable {var}"),
            path,
            message,
        })?;
    blame.env_paths.extend(overrides.iter().map(|o| EnvSetting {
        path: o.dotted(),
        var: o.var.clone(),
        value: o.value().to_string(),
    }));
    let mut sources = Vec::with_capacity(list.len());
    let mut entries = HashMap::new();
    for (i, entry) in list.into_iter().enumerate() {
        let mine: Vec<&SourceOverride> = overrides.iter().filter(|o| o.index == i).collect();
        let (source, entry) =
            parse_source_with(i, entry, &mine).map_err(|(p, m)| blame.error(&p, m))?;
        entries.insert(source.name().to_string(), entry);
        sources.push(source);
    }
    Ok((sources, entries))
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

/// The `config` crate prefixes some messages with the file; we add our own.
fn strip_origin(s: &str) -> String {
    one_line(s)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::config::{
        KeyType, QueueTarget, RedisSourceConfig, ScoreMode, SourceConfig, default_local_sources,
    };
    use std::io::Write;

    pub(in crate::config) fn load_yaml(yaml: &str) -> Result<Config, ConfigError> {
        load_yaml_env(yaml, Vec::new())
    }

    pub(in crate::config) fn load_yaml_env(
        yaml: &str,
        env: Vec<(String, String)>,
    ) -> Result<Config, ConfigError> {
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

    pub(in crate::config) const FULL: &str = r#"
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
        assert!(r.recognise, "zero config");
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
}
