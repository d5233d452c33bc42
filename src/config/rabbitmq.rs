//! The `type: rabbitmq` source's configuration: method, URLs, credentials,
//! and the queue filters (`include`/`exclude` compiled once, here).

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::duration::{Bounds, de_duration};

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
    /// Client certificate (PEM, the chain leaf first), for a server that
    /// asks for one (`verify_peer` with `fail_if_no_peer_cert`). With `key_file`.
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// The client certificate's private key (PEM, PKCS#8, PKCS#1 or SEC1). With `cert_file`.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
}

/// A RabbitMQ source.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RabbitSourceConfig {
    /// The `source` label.
    pub name: String,
    /// Which API to read.
    #[serde(default)]
    pub method: RabbitMethod,
    /// Management base URL, Prometheus plugin base URL, or AMQP URL.
    #[serde(default = "default_url")]
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
    pub include: Option<NameRegex>,
    /// Regex a queue name must not match.
    #[serde(default)]
    pub exclude: Option<NameRegex>,
    /// Exact queue names (required for `amqp`).
    #[serde(default)]
    pub queues: Vec<String>,
    /// Time between polls.
    #[serde(default = "default_poll_interval", deserialize_with = "de_duration")]
    pub poll_interval: Duration,
    /// How long a queue's service time measured from its acknowledgements
    /// is kept once the backlog that allowed it is gone: then it is
    /// unknown (WaitTime without `processingTime` answers `UNAVAILABLE`).
    #[serde(
        default = "super::duration::default_service_time_max_age",
        deserialize_with = "de_duration"
    )]
    pub service_time_max_age: Duration,
    /// Per HTTP request / AMQP operation.
    #[serde(default = "default_timeout", deserialize_with = "de_duration")]
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

impl RabbitSourceConfig {
    /// Checks what depends on several fields (the URL scheme on `method`, ...).
    pub(super) fn validate(&self, at: &dyn Fn(&str) -> String) -> Result<(), (String, String)> {
        self.validate_urls(at)?;
        self.validate_method(at)
    }

    /// The URLs: a scheme and a host fitting `method`, `urls` for method prometheus only.
    fn validate_urls(&self, at: &dyn Fn(&str) -> String) -> Result<(), (String, String)> {
        let c = self;
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
        Ok(())
    }

    /// What method amqp needs and refuses, the TLS files in pairs, sizes and durations, one password.
    fn validate_method(&self, at: &dyn Fn(&str) -> String) -> Result<(), (String, String)> {
        let c = self;
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
        match (&c.tls.cert_file, &c.tls.key_file) {
            (Some(_), None) => {
                return Err((
                    at("tls.key_file"),
                    "is required with tls.cert_file (the client certificate's key)".into(),
                ));
            }
            (None, Some(_)) => {
                return Err((
                    at("tls.cert_file"),
                    "is required with tls.key_file (the client certificate)".into(),
                ));
            }
            _ => {}
        }
        if c.max_response_bytes == 0 {
            return Err((at("max_response_bytes"), "must be greater than 0".into()));
        }
        for (field, d, bounds) in [
            ("poll_interval", c.poll_interval, Bounds::HOUR),
            ("timeout", c.timeout, Bounds::HOUR),
            ("service_time_max_age", c.service_time_max_age, Bounds::DAY),
        ] {
            bounds.check(d).map_err(|m| (at(field), m))?;
        }
        if c.password.is_some() && c.password_file.is_some() {
            return Err((
                at("password_file"),
                "set password or password_file, not both".into(),
            ));
        }
        Ok(())
    }
}

impl RabbitSourceConfig {
    /// A source named `name` with every default: the one place the defaults
    /// live, shared by YAML (serde defaults) and the no-config path.
    pub fn named(name: &str) -> Self {
        RabbitSourceConfig {
            name: name.into(),
            method: RabbitMethod::default(),
            url: default_url(),
            urls: Vec::new(),
            username: None,
            password: None,
            password_file: None,
            vhosts: Vec::new(),
            include: None,
            exclude: None,
            queues: Vec::new(),
            poll_interval: default_poll_interval(),
            timeout: default_timeout(),
            service_time_max_age: super::duration::default_service_time_max_age(),
            max_response_bytes: default_max_response_bytes(),
            stats: RabbitStats::default(),
            tls: ClientTlsConfig::default(),
        }
    }
}

/// The default management API of a local broker.
pub fn default_url() -> String {
    "http://127.0.0.1:15672".into()
}
fn default_poll_interval() -> Duration {
    Duration::from_secs(5)
}
fn default_timeout() -> Duration {
    Duration::from_secs(3)
}
fn default_max_response_bytes() -> u64 {
    64 * 1024 * 1024
}

/// An `include`/`exclude` regex over queue names, compiled at load.
#[derive(Debug, Clone)]
pub struct NameRegex(regex::Regex);

impl NameRegex {
    /// Compiles a regex; the error is one line.
    pub fn new(re: &str) -> Result<Self, String> {
        regex::Regex::new(re)
            .map(NameRegex)
            .map_err(|e| super::one_line(&e.to_string()))
    }

    /// The compiled regex.
    pub fn regex(&self) -> &regex::Regex {
        &self.0
    }
}

impl<'de> Deserialize<'de> for NameRegex {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        NameRegex::new(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SourceConfig;
    use crate::config::load::tests::load_yaml;

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
}
