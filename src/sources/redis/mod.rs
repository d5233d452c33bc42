//! The Redis source: discovers queue keys with SCAN/TYPE every
//! `discovery_interval`, and polls their sizes in pipelined batches every
//! `poll_interval`. Only read-only commands are issued; the whole source
//! works under the ACL `-@all +@read +@connection`.

mod age;
mod commands;
mod discovery;
pub mod glob;
mod histogram;
pub mod keyname;
mod poll;
mod presets;
mod reply;
mod scope;
pub mod tls;
mod tracked;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::config::{RedisSourceConfig, read_secret_file};
use crate::snapshot::QueueScope;
use crate::sources::{PollOutput, Source, SourceError};

pub use commands::PIPELINE_CHUNK;
pub use scope::RedisScope;
pub use tracked::TrackedKey;

/// A Redis server being watched.
pub struct RedisSource {
    /// The source's configuration.
    config: RedisSourceConfig,
    /// The connection, created lazily and reconnecting on its own.
    conn: Option<ConnectionManager>,
    /// Keys being polled, learned at discovery.
    tracked: Vec<TrackedKey>,
    /// Keys found beyond `max_keys` at the last discovery.
    dropped: u64,
    /// When the last discovery ran; `None` forces one.
    last_discovery: Option<Instant>,
    /// Library presets' logical queues (`- preset:` entries).
    presets: presets::PresetState,
}

impl std::fmt::Debug for RedisSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSource")
            .field("name", &self.config.name)
            .field("url", &self.config.url)
            .field("tracked", &self.tracked.len())
            .finish()
    }
}

impl RedisSource {
    /// Builds the source; no connection is made until the first poll.
    pub fn new(config: RedisSourceConfig) -> Self {
        RedisSource {
            presets: presets::PresetState::new(&config.presets),
            config,
            conn: None,
            tracked: Vec::new(),
            dropped: 0,
            last_discovery: None,
        }
    }

    /// The keys currently tracked (for tests and debugging).
    pub fn tracked(&self) -> &[TrackedKey] {
        &self.tracked
    }

    /// Forces discovery on the next poll.
    pub fn rediscover(&mut self) {
        self.last_discovery = None;
    }

    fn target(&self) -> String {
        self.config.url.redacted()
    }

    fn connection(&mut self) -> Result<ConnectionManager, SourceError> {
        if let Some(c) = &self.conn {
            return Ok(c.clone());
        }
        let target = self.target();
        let mut info = self.config.url.info().clone();
        if let Some(path) = &self.config.password_file {
            let password = read_secret_file(path).map_err(|e| {
                SourceError::Config(format!("cannot read password_file {}: {e}", path.display()))
            })?;
            let settings = info.redis_settings().clone().set_password(password);
            info = info.set_redis_settings(settings);
        }
        let client = match &self.config.tls {
            Some(tls) => {
                let certs =
                    tls::certificates(tls).map_err(|e| SourceError::Config(e.to_string()))?;
                redis::Client::build_with_tls(info, certs).map_err(|e| {
                    SourceError::Config(format!("tls: unusable certificates: {:?}", e.kind()))
                })?
            }
            None => redis::Client::open(info).map_err(|e| {
                SourceError::Config(format!("invalid url {target}: {:?}", e.kind()))
            })?,
        };
        let cfg = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.config.timeout))
            .set_response_timeout(Some(self.config.timeout))
            .set_number_of_retries(1)
            .set_max_delay(crate::sources::MAX_BACKOFF);
        let conn = ConnectionManager::new_lazy_with_config(client, cfg).map_err(|e| {
            SourceError::Connect {
                target,
                cause: e.to_string(),
            }
        })?;
        self.conn = Some(conn.clone());
        Ok(conn)
    }

    fn map_error(&self, e: redis::RedisError) -> SourceError {
        map_redis_error(e, &self.target(), self.config.timeout)
    }
}

/// Whether a Redis error code means our credentials or permissions were
/// refused: the one place these codes are classified.
pub(crate) fn is_auth_error_code(code: &str) -> bool {
    matches!(code, "NOAUTH" | "WRONGPASS" | "NOPERM")
}

/// Maps a client error to a [`SourceError`] whose reason label fits.
/// `timeout` is the per-command response timeout, for the message.
pub fn map_redis_error(e: redis::RedisError, target: &str, timeout: Duration) -> SourceError {
    if e.code().is_some_and(is_auth_error_code)
        || e.kind() == redis::ErrorKind::AuthenticationFailed
    {
        return SourceError::Auth {
            target: target.to_string(),
            cause: e.to_string(),
        };
    }
    if e.is_timeout() {
        return SourceError::Timeout(timeout);
    }
    if e.is_connection_refusal() || e.is_io_error() || e.is_connection_dropped() {
        return SourceError::Connect {
            target: target.to_string(),
            cause: e.to_string(),
        };
    }
    SourceError::Backend(e.to_string())
}

impl Source for RedisSource {
    async fn poll(&mut self) -> Result<PollOutput, SourceError> {
        let mut conn = self.connection()?;
        let due = self
            .last_discovery
            .is_none_or(|t| t.elapsed() >= self.config.discovery_interval);
        if due {
            discovery::rediscover(
                &mut conn,
                &self.config,
                &mut self.tracked,
                &mut self.dropped,
            )
            .await
            .map_err(|e| self.map_error(e))?;
            // Presets: re-read the libraries' registries.
            self.presets
                .discover(&mut conn, self.config.scan_count)
                .await
                .map_err(|e| self.map_error(e))?;
            self.last_discovery = Some(Instant::now());
        }
        let now = SystemTime::now();
        let result = poll::poll_keys(&mut conn, &self.config, &mut self.tracked, now)
            .await
            .map_err(|e| self.map_error(e))?;
        let mut out = PollOutput {
            queues: result.queues,
            ..PollOutput::default()
        };
        // Presets: logical queues, and `counters:` totals of plain keys.
        let preset = self
            .presets
            .poll(&conn, &self.config.queues, now)
            .await
            .map_err(|e| self.map_error(e))?;
        for (name, totals) in preset.plain_totals {
            for q in out.queues.iter_mut().filter(|q| q.name == name) {
                q.jobs = totals;
            }
        }
        out.queues.extend(preset.samples);
        out.stats.tracked_keys = (self.tracked.len() + self.presets.tracked()) as u64;
        out.stats.dropped_keys = self.dropped;
        out.stats.age_parse_failures = result.age_parse_failures;
        // Keys Redis refused to answer for are counted without failing the poll.
        out.partial_errors = result.key_errors;
        out.partial_errors.extend(preset.key_errors);
        Ok(out)
    }

    fn poll_timeout(&self) -> Duration {
        // Discovery of a large keyspace takes many SCAN round trips; bound the
        // whole poll generously, individual commands by `timeout`.
        (self.config.timeout * 4).max(self.config.poll_interval)
    }

    fn scope(&self) -> Arc<dyn QueueScope> {
        Arc::new(RedisScope::new(&self.config))
    }
}
