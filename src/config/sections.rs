//! The top-level sections besides `sources`: `listen`, `log` and `scaler`
//! (with its gRPC TLS). Plain serde structs with their defaults; apart from
//! the loader because they are what readers and `main` consume, and they
//! need nothing of the loading machinery.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::duration::de_opt_duration;

/// Where the exporter listens.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ListenConfig {
    /// `/metrics`, `/healthz`, `/readyz` and the landing page.
    pub http: SocketAddr,
    /// The KEDA external-scaler gRPC service; `None` (YAML `null`, or
    /// `off`, which an environment variable can say) disables it.
    #[serde(deserialize_with = "de_listener")]
    pub grpc: Option<SocketAddr>,
}

/// The words that turn a listener off, compared ignoring case. `off` is the
/// documented one; `none`, `null`, `~` and the empty text are what people
/// try from the environment, where YAML's `null` cannot be written, and none
/// of them is an address.
const LISTENER_OFF: [&str; 5] = ["off", "none", "null", "~", ""];

/// A listener's address, or `None` for YAML `null` or one of
/// [`LISTENER_OFF`].
fn de_listener<'de, D>(d: D) -> Result<Option<SocketAddr>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let Some(text) = Option::<String>::deserialize(d)? else {
        return Ok(None);
    };
    let text = text.trim();
    if LISTENER_OFF.iter().any(|w| text.eq_ignore_ascii_case(w)) {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|_| {
        serde::de::Error::custom(format!(
            "invalid socket address {text:?} (host:port, or off to disable the listener)"
        ))
    })
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
