//! The Redis source: discovers queue keys with SCAN/TYPE every
//! `discovery_interval`, and polls their sizes in pipelined batches every
//! `poll_interval`. Only read-only commands are issued; the whole source
//! works under the ACL `-@all +@read +@connection` (a cluster also needs
//! `+cluster|slots`). One server, a Redis Cluster (`cluster`) or the master
//! that sentinels name (`sentinel`) are all reached through `commands::Conn`.

mod age;
mod cluster;
mod cmd;
mod commands;
mod discovery;
pub mod glob;
mod histogram;
pub mod keyname;
mod poll;
mod presets;
mod reply;
mod scope;
mod sentinel;
pub mod tls;
mod tracked;
mod tracking;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::config::{RedisSourceConfig, read_secret_file};
use crate::snapshot::QueueScope;
use crate::sources::{PollOutput, Source, SourceError};
use commands::Conn;

pub use commands::PIPELINE_CHUNK;
pub use scope::RedisScope;
pub use tracked::TrackedKey;

/// A Redis server being watched.
pub struct RedisSource {
    /// The source's configuration.
    config: RedisSourceConfig,
    /// The connection, created lazily and reconnecting on its own.
    conn: Option<Conn>,
    /// For a `redis+sentinel://` URL: the sentinels asked for the master
    /// (boxed: most sources have none).
    sentinels: Option<Box<sentinel::Sentinels>>,
    /// Keys being polled, learned at discovery.
    tracked: Vec<TrackedKey>,
    /// Keys found beyond `max_keys` at the last discovery.
    dropped: u64,
    /// When the last discovery ran; `None` forces one.
    last_discovery: Option<Instant>,
    /// Library presets' logical queues (`- preset:` entries).
    presets: presets::PresetState,
    /// For one server (not a cluster) with `client_tracking`: which polled
    /// keys Redis says changed (see `tracking`); made with `conn`. Boxed:
    /// a client is large, and most sources have one `Option` of it.
    tracking: Option<Box<tracking::ChangeTracking>>,
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
        let sentinels = config.sentinel().map(|spec| {
            Box::new(sentinel::Sentinels::new(
                spec.clone(),
                manager_config(&config),
            ))
        });
        RedisSource {
            presets: presets::PresetState::new(&config.presets),
            config,
            conn: None,
            sentinels,
            tracked: Vec::new(),
            dropped: 0,
            last_discovery: None,
            tracking: None,
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

    /// The connection; with sentinels, first asks them for the master and
    /// reconnects if it moved.
    async fn connection(&mut self) -> Result<Conn, SourceError> {
        if let Some(sentinels) = &mut self.sentinels {
            let addr = sentinels.master().await.map_err(|e| {
                let target = format!("sentinels of master {:?}", sentinels.master_name());
                map_redis_error(e, &target, self.config.timeout)
            })?;
            if sentinels.current.as_ref() != Some(&addr) {
                if sentinels.current.is_some() {
                    tracing::info!(
                        source = %self.config.name,
                        master = %format!("{}:{}", addr.0, addr.1),
                        "sentinels name a new master; following it"
                    );
                }
                self.conn = None;
                self.tracking = None;
                sentinels.current = Some(addr);
            }
        }
        if let Some(c) = &self.conn {
            return Ok(c.clone());
        }
        let target = self.target();
        let mut info = self.config.url.info().clone();
        if let Some((host, port)) = self.sentinels.as_ref().and_then(|s| s.current.as_ref()) {
            info = cluster::at_addr(&info, host, *port);
        }
        if let Some(path) = &self.config.password_file {
            let password = read_secret_file(path).map_err(|e| {
                SourceError::Config(format!("cannot read password_file {}: {e}", path.display()))
            })?;
            let settings = info.redis_settings().clone().set_password(password);
            info = info.set_redis_settings(settings);
        }
        let cfg = manager_config(&self.config);
        let conn = if self.config.is_cluster() {
            cluster::ClusterConn::new(info, cfg).map(Conn::Cluster)
        } else {
            if self.config.client_tracking {
                // Pushes (invalidations) need RESP3; the shared connection
                // keeps the protocol the URL asks for.
                let settings = info
                    .redis_settings()
                    .clone()
                    .set_protocol(redis::ProtocolVersion::RESP3);
                let client = self.client(info.clone().set_redis_settings(settings))?;
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.config.timeout))
                    .set_response_timeout(Some(self.config.timeout));
                self.tracking = Some(Box::new(tracking::ChangeTracking::new(client, config)));
            }
            let client = self.client(info)?;
            ConnectionManager::new_lazy_with_config(client, cfg).map(Conn::Single)
        }
        .map_err(|e| SourceError::Connect {
            target,
            cause: e.to_string(),
        })?;
        self.conn = Some(conn.clone());
        Ok(conn)
    }

    /// A client for one server at `info`, with the source's TLS settings.
    fn client(&self, info: redis::ConnectionInfo) -> Result<redis::Client, SourceError> {
        match &self.config.tls {
            Some(tls) => {
                let certs =
                    tls::certificates(tls).map_err(|e| SourceError::Config(e.to_string()))?;
                redis::Client::build_with_tls(info, certs).map_err(|e| {
                    SourceError::Config(format!("tls: unusable certificates: {:?}", e.kind()))
                })
            }
            None => redis::Client::open(info).map_err(|e| {
                SourceError::Config(format!("invalid url {}: {:?}", self.target(), e.kind()))
            }),
        }
    }

    /// The connection this poll reads keys on, and what Redis says changed
    /// since the last poll (`None`: untracked, every key is read).
    async fn poll_connection(
        &mut self,
        shared: &Conn,
    ) -> Result<(Conn, Option<tracking::Changes>), SourceError> {
        let Some(tracking) = &mut self.tracking else {
            return Ok((shared.clone(), None));
        };
        match tracking.begin_poll().await {
            Ok(Some(t)) => Ok((t.conn, Some(t.changes))),
            Ok(None) => Ok((shared.clone(), None)),
            Err(e) => Err(self.map_error(e)),
        }
    }

    fn map_error(&self, e: redis::RedisError) -> SourceError {
        map_redis_error(e, &self.target(), self.config.timeout)
    }
}

/// Timeouts, retries and backoff of every connection a source makes (the
/// server, each cluster node, each sentinel).
fn manager_config(config: &RedisSourceConfig) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(config.timeout))
        .set_response_timeout(Some(config.timeout))
        .set_number_of_retries(1)
        .set_max_delay(crate::sources::MAX_BACKOFF)
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
        let mut conn = self.connection().await?;
        let due = self
            .last_discovery
            .is_none_or(|t| t.elapsed() >= self.config.discovery_interval);
        if due {
            conn.begin_discovery();
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
        let (mut poll_conn, changes) = self.poll_connection(&conn).await?;
        let now = SystemTime::now();
        let result = poll::poll_keys(
            &mut poll_conn,
            &self.config,
            &mut self.tracked,
            now,
            changes.as_ref(),
        )
        .await;
        let result = match result {
            Ok(r) => {
                if let (Some(t), Some(_)) = (&mut self.tracking, &changes) {
                    t.record(r.unchanged_keys, self.tracked.len());
                }
                r
            }
            Err(e) => {
                // Replies (and pushes) may be lost with the poll: start over.
                if let Some(t) = &mut self.tracking {
                    t.end();
                }
                return Err(self.map_error(e));
            }
        };
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
                q.set_jobs(totals);
            }
        }
        out.queues.extend(preset.samples);
        out.stats.tracked_keys = (self.tracked.len() + self.presets.tracked()) as u64;
        out.stats.dropped_keys = self.dropped;
        out.stats.age_parse_failures = result.age_parse_failures;
        out.stats.unchanged_keys = result.unchanged_keys;
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
