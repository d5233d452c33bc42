//! The `type: redis` source's configuration, parsed into typed values:
//! a checked URL, compiled label regexes, a key-or-pattern target. The Redis
//! source takes these as they are and never re-validates them.
//!
//! This file holds the source's own fields (`RedisSourceConfig`, its
//! defaults and cross-field checks, `RedisTlsConfig`); the URL (`url`) and
//! the `queues:` entries (`queue`) are beside it.

use std::path::PathBuf;
use std::time::Duration;

use redis::ConnectionAddr;
use serde::Deserialize;

mod queue;
mod url;

pub use queue::{
    AgeSpec, CaptureLabels, JsonField, KeyType, ListEnd, QueueSpec, QueueTarget, RESERVED_LABELS,
    ScoreMode,
};
pub use url::{RedisUrl, SentinelSpec, UrlKind};

use super::duration::{Bounds, de_duration, de_durations, de_opt_duration};
use super::secret::Password;

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
    /// The password, kept out of the URL (as KEDA's and redis_exporter's
    /// users write it, often from an environment variable). Refused beside
    /// `password_file` or a URL that carries a password: one place only.
    #[serde(default)]
    pub password: Option<Password>,
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
    /// How long a queue's service time measured from its library's
    /// finished jobs is kept with no newly finished job: then it is
    /// unknown (WaitTime without `processingTime` answers `UNAVAILABLE`).
    #[serde(
        default = "super::duration::default_service_time_max_age",
        deserialize_with = "de_duration"
    )]
    pub service_time_max_age: Duration,
    /// Ask Redis which polled keys changed (`CLIENT TRACKING` over a second,
    /// RESP3 connection) and read only those: an idle queue then costs no
    /// command per poll. Ignored for a cluster. A server that refuses it is
    /// polled without it. `false`: read every key on every poll.
    #[serde(default = "default_client_tracking")]
    pub client_tracking: bool,
    /// Zero config only: whether the lists, zsets and streams that belong
    /// to no recognised library are reported too (`true`, the default).
    /// `false` recognises the libraries alone in one SCAN pass, with no
    /// `TYPE` of every name at the first round and every ten minutes
    /// (docs/presets.md, "What does zero config cost Redis?"). Refused on a
    /// source that lists `queues:`.
    #[serde(default = "default_plain_keys")]
    pub plain_keys: bool,
    /// Zero config only: the time between scans of the whole keyspace,
    /// which find new plain keys, BullMQ prefixes, Sidekiq namespaces and
    /// Celery exchanges. Between, a round reads what the last scan found,
    /// as `discover`'s printed config would, at the presets' cost
    /// (docs/presets.md, "What does zero config cost Redis?"). Unset:
    /// 100 times as long as the last scan took, from `discovery_interval`
    /// to 5 minutes (a scan is at most 1 % of the time: a small keyspace
    /// is scanned every round). `0s`: every round scans. Refused on a
    /// source that lists `queues:`.
    #[serde(default, deserialize_with = "de_opt_duration")]
    pub keyspace_scan_interval: Option<Duration>,
    /// Which keys to watch.
    #[serde(default)]
    pub queues: Vec<QueueSpec>,
    /// Which libraries' queues to watch: the `- preset:` entries of
    /// `queues:` as written, split out by the loader (never written as a
    /// field); `sources` resolves them against the libraries.
    #[serde(skip)]
    pub presets: Vec<super::PresetEntry>,
    /// Zero config: the source was given no `queues:` (nor is it the
    /// built-in local source with any), so discovery recognises the queue
    /// libraries' keys (Sidekiq, RQ, asynq, BullMQ, Celery) itself and
    /// reports the other lists, zsets and streams as plain keys (`queues`
    /// then holds the one pattern entry [`RedisSourceConfig::zero_config`]
    /// makes). Set by the loader, never written as a field.
    #[serde(skip)]
    pub recognise: bool,
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
            password: None,
            tls: None,
            poll_interval: default_poll_interval(),
            discovery_interval: default_discovery_interval(),
            service_time_max_age: super::duration::default_service_time_max_age(),
            timeout: default_timeout(),
            max_keys: default_max_keys(),
            scan_count: default_scan_count(),
            age_buckets: default_age_buckets(),
            age_histogram_interval: default_age_histogram_interval(),
            client_tracking: default_client_tracking(),
            plain_keys: default_plain_keys(),
            keyspace_scan_interval: None,
            queues: Vec::new(),
            presets: Vec::new(),
            recognise: false,
        }
    }

    /// Makes this source a zero-config one (see `recognise`): its plain
    /// keys are the lists, zsets and streams of the whole keyspace, found
    /// by the pattern entry `*` with those types; none with `plain_keys:
    /// false` (the libraries alone).
    pub fn zero_config(&mut self) {
        self.queues = match self.plain_keys {
            true => vec![QueueSpec::every_queue_key()],
            false => Vec::new(),
        };
        self.presets = Vec::new();
        self.recognise = true;
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
        self.validate_zero_config(at)?;
        self.validate_connection(at)?;
        self.validate_bounds(at)
    }

    /// Fields that apply only to zero config, refused on a source listing its queues.
    fn validate_zero_config(&self, at: &dyn Fn(&str) -> String) -> Result<(), (String, String)> {
        let zero_config_only = [
            ("plain_keys", !self.plain_keys),
            (
                "keyspace_scan_interval",
                self.keyspace_scan_interval.is_some(),
            ),
        ];
        for (field, set) in zero_config_only {
            if set && !self.recognise {
                return Err((
                    at(field),
                    "only applies to zero config (a source without queues:); this source lists its queues"
                        .into(),
                ));
            }
        }
        Ok(())
    }

    /// How the source reaches Redis: one password, TLS only with `rediss://` (a key with a certificate), a cluster over TCP on database 0.
    fn validate_connection(&self, at: &dyn Fn(&str) -> String) -> Result<(), (String, String)> {
        if self.password.is_some() {
            if self.password_file.is_some() {
                return Err((
                    at("password_file"),
                    "set password or password_file, not both".into(),
                ));
            }
            if self.url.info().redis_settings().password().is_some() {
                return Err((
                    at("password"),
                    "the url carries a password too; give it in one place (remove it from the url)"
                        .into(),
                ));
            }
        }
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
        Ok(())
    }

    /// Durations, age buckets and sizes within what makes sense.
    fn validate_bounds(&self, at: &dyn Fn(&str) -> String) -> Result<(), (String, String)> {
        let durations = [
            ("poll_interval", self.poll_interval, Bounds::HOUR),
            ("timeout", self.timeout, Bounds::HOUR),
            ("discovery_interval", self.discovery_interval, Bounds::DAY),
            (
                "service_time_max_age",
                self.service_time_max_age,
                Bounds::DAY,
            ),
            (
                "keyspace_scan_interval",
                self.keyspace_scan_interval.unwrap_or_default(),
                Bounds::DAY_OR_ZERO,
            ),
            (
                "age_histogram_interval",
                self.age_histogram_interval,
                Bounds::DAY_OR_ZERO,
            ),
        ];
        for (field, d, bounds) in durations {
            bounds.check(d).map_err(|m| (at(field), m))?;
        }
        if self.age_buckets.len() > MAX_AGE_BUCKETS {
            return Err((
                at("age_buckets"),
                format!(
                    "{} bounds; at most {MAX_AGE_BUCKETS}",
                    self.age_buckets.len()
                ),
            ));
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
fn default_plain_keys() -> bool {
    true
}

fn default_scan_count() -> u32 {
    1000
}
/// Most `age_buckets` bounds: a histogram measurement keeps which bounds it
/// asked by window in one `u64` bit set (`histogram::HistogramPlan`), and
/// each bound costs a command per zset per measurement.
pub const MAX_AGE_BUCKETS: usize = 64;

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

#[cfg(test)]
mod tests {
    use crate::config::SourceConfig;
    use crate::config::load::tests::load_yaml;

    #[test]
    fn plain_keys_false_is_for_zero_config_alone() {
        let redis = |extra: &str| format!("sources:\n  - name: r\n    type: redis\n{extra}");
        let c = load_yaml(&redis("    plain_keys: false\n")).unwrap();
        let SourceConfig::Redis(r) = &c.sources[0] else {
            panic!("redis")
        };
        assert!(r.recognise && !r.plain_keys && r.queues.is_empty());
        let c = load_yaml(&redis("")).unwrap();
        let SourceConfig::Redis(r) = &c.sources[0] else {
            panic!("redis")
        };
        assert!(r.recognise && r.plain_keys && r.queues.len() == 1);
        let e = load_yaml(&redis(
            "    plain_keys: false\n    queues:\n      - key: a\n",
        ))
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "config.yaml: sources[0].plain_keys: only applies to zero config (a source without queues:); this source lists its queues"
        );
        let e = load_yaml(&redis(
            "    keyspace_scan_interval: 1m\n    queues:\n      - key: a\n",
        ))
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "config.yaml: sources[0].keyspace_scan_interval: only applies to zero config (a source without queues:); this source lists its queues"
        );
        let c = load_yaml(&redis("    keyspace_scan_interval: 0s\n")).unwrap();
        let SourceConfig::Redis(r) = &c.sources[0] else {
            panic!("redis")
        };
        assert_eq!(r.keyspace_scan_interval, Some(std::time::Duration::ZERO));
        let e = load_yaml(&redis("    keyspace_scan_interval: 2d\n"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "config.yaml: sources[0].keyspace_scan_interval: at most 24h"
        );
        let e = load_yaml(&redis("    plain_keys: some\n"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("config.yaml: sources[0].plain_keys: "), "{e}");
    }

    #[test]
    fn at_most_64_age_buckets_are_accepted() {
        let redis = |n: usize| {
            let bounds: Vec<String> = (1..=n).map(|s| format!("{s}s")).collect();
            format!(
                "sources:\n  - name: r\n    type: redis\n    age_buckets: [{}]\n",
                bounds.join(", ")
            )
        };
        let c = load_yaml(&redis(super::MAX_AGE_BUCKETS)).unwrap();
        let SourceConfig::Redis(r) = &c.sources[0] else {
            panic!("redis")
        };
        assert_eq!(r.age_buckets.len(), 64);
        let e = load_yaml(&redis(65)).unwrap_err().to_string();
        assert_eq!(
            e,
            "config.yaml: sources[0].age_buckets: 65 bounds; at most 64"
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
