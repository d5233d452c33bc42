//! The Redis source: discovers queue keys with SCAN/TYPE every
//! `discovery_interval`, and polls their sizes in pipelined batches every
//! `poll_interval`. Discovery runs on its own task with its own deadline, so
//! a keyspace whose SCAN outlasts a poll never keeps the source down: polls
//! serve the keys known so far while it goes on (see [`RedisSource::poll`]).
//! Only read-only commands are issued; the whole source
//! works under the ACL `-@all +@read +@connection` (a cluster also needs
//! `+cluster|slots`). One server, a Redis Cluster (`cluster`) or the master
//! that sentinels name (`sentinel`) are all reached through `commands::Conn`.

mod age;
mod bucket_ask;
mod budget;
mod cluster;
mod cmd;
mod commands;
mod coverage;
mod discovery;
pub mod glob;
mod histogram;
pub mod keyname;
mod poll;
pub(crate) mod presets;
mod reply;
mod rounds;
mod scope;
mod sentinel;
pub mod tls;
mod tracked;
mod tracking;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::config::{RedisSourceConfig, read_secret_file};
use crate::snapshot::{QueueScope, Reason};
use crate::sources::{PollOutput, Source, SourceError};
use commands::Conn;
pub(crate) use reply::is_auth_error_code;
use rounds::{DiscoveryFailure, DiscoveryTask, Found, Plain, RoundInput, RoundKind, Rounds};

pub use commands::PIPELINE_CHUNK;
pub use presets::library::{catalogue, names as library_names};
pub use presets::library::{has_prefix, printed_options, recognised_libraries};
pub use presets::picture::library as library_name;
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
    /// What the last rounds left unread: the coverage each poll publishes.
    /// Boxed, as the fields below.
    unread: Box<coverage::Unread>,
    /// Discovery rounds: when the last one finished, and the one running.
    /// Boxed: a `RedisSource` stays about as large as a `RabbitSource`.
    discovery: Box<Rounds>,
    /// Library presets' logical queues (`- preset:` entries).
    presets: presets::PresetState,
    /// The `- preset:` entries of the config, resolved against their
    /// libraries (none for zero config, which finds its own).
    configured: Arc<[presets::PresetSpec]>,
    /// For one server (not a cluster) with `client_tracking`: which polled
    /// keys Redis says changed (see `tracking`); made with `conn`. Boxed:
    /// a client is large, and most sources have one `Option` of it.
    tracking: Option<Box<tracking::ChangeTracking>>,
    /// The Redis CPU age histograms may still spend (see `budget`). Boxed,
    /// as the fields above.
    histogram_budget: Box<budget::HistogramBudget>,
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
        let configured = resolved_presets(&config);
        let sentinels = config.sentinel().map(|spec| {
            Box::new(sentinel::Sentinels::new(
                spec.clone(),
                manager_config(&config),
            ))
        });
        RedisSource {
            presets: presets::PresetState::new(&configured, config.service_time_max_age),
            configured: configured.into(),
            config,
            conn: None,
            sentinels,
            tracked: Vec::new(),
            dropped: 0,
            unread: Box::default(),
            discovery: Box::default(),
            tracking: None,
            histogram_budget: Box::default(),
        }
    }

    /// The keys currently tracked (for tests and debugging).
    pub fn tracked(&self) -> &[TrackedKey] {
        &self.tracked
    }

    /// Forces a fresh discovery round on the next poll (a running one is
    /// dropped); until it lands, polls serve the keys known so far.
    pub fn rediscover(&mut self) {
        self.discovery.force();
    }

    /// How long a discovery round may run before it is given up: ten
    /// times the longer of `discovery_interval` and the poll's deadline
    /// (5 minutes by default). Each of its commands is bounded by `timeout`
    /// anyway; this only ends a round that keeps going far longer than
    /// any keyspace should need.
    fn discovery_deadline(&self) -> Duration {
        self.config
            .discovery_interval
            .max(self.poll_timeout())
            .saturating_mul(10)
    }

    /// Starts a discovery round when one is due, and takes the outcome of
    /// a round that has finished. A round runs on its own task, so a slow
    /// one goes on across polls (never restarted by a poll's deadline);
    /// meanwhile polls serve the keys known so far. The poll that starts a
    /// round waits a little for it (a fast server's round lands in the same
    /// poll, as before); before any round has finished, nothing is known
    /// and the poll fails ([`SourceError::Discovering`]) rather than report
    /// no queues. Returns refusals to count.
    async fn discover(&mut self, conn: &Conn) -> Result<Vec<Reason>, SourceError> {
        let due = self.discovery.forced
            || self
                .discovery
                .last
                .is_none_or(|t| t.elapsed() >= self.config.discovery_interval);
        let mut wait = Duration::ZERO;
        if due && self.discovery.running.is_none() {
            wait = self.start_round(conn);
        }
        // Known keys: those of the last round that finished.
        let known = self.discovery.last.is_some();
        if !known {
            wait = self.poll_timeout() / 2;
        }
        let Some(task) = &mut self.discovery.running else {
            return Ok(Vec::new());
        };
        let joined = match tokio::time::timeout(wait, &mut task.handle).await {
            Ok(joined) => joined,
            Err(_) if known => return Ok(Vec::new()),
            Err(_) => return Err(SourceError::Discovering(task.started.elapsed())),
        };
        self.discovery.running = None;
        // A round that failed is tried again at the next poll.
        self.discovery.forced = !matches!(joined, Ok(Ok(_) | Err(DiscoveryFailure::Deadline(_))));
        let found = match joined {
            Ok(Ok(found)) => found,
            Ok(Err(DiscoveryFailure::Redis(e))) => return Err(self.map_error(e)),
            Ok(Err(DiscoveryFailure::Deadline(d))) if known => {
                // Keep serving what is known; the next round starts after
                // `discovery_interval`. Counted, so it is seen.
                tracing::warn!(
                    source = %self.config.name,
                    deadline = ?d,
                    "discovery round did not finish in time; polling the keys known so far"
                );
                self.discovery.last = Some(Instant::now());
                self.unread.set_unfinished(d);
                return Ok(vec![Reason::Timeout]);
            }
            Ok(Err(DiscoveryFailure::Deadline(d))) => return Err(SourceError::Timeout(d)),
            Err(e) => {
                return Err(SourceError::Backend(format!("discovery task ended: {e}")));
            }
        };
        Ok(self.adopt_round(found))
    }

    /// Starts a discovery round on its own task (a scan, or zero config's
    /// library round), and says how long this poll waits for it.
    fn start_round(&mut self, conn: &Conn) -> Duration {
        self.discovery.forced = false;
        let scan = !self.config.recognise || self.discovery.scan_due(&self.config);
        let plain = match scan {
            true => Vec::new(),
            false => self
                .tracked
                .iter()
                .filter(|k| !k.exact)
                .map(|k| (k.key.clone(), k.state.clone()))
                .collect(),
        };
        self.discovery.scan_wanted = false;
        let input = RoundInput {
            config: Arc::new(self.config.clone()),
            known: discovery::known_pattern_keys(&self.tracked),
            plain,
            memory: std::mem::take(&mut self.discovery.memory),
            configured: self.configured.clone(),
            polled: match self.config.recognise {
                true => self.presets.polled(),
                false => Vec::new(),
            },
            scan,
        };
        self.discovery.running = Some(DiscoveryTask::spawn(
            conn.clone(),
            input,
            self.discovery_deadline(),
        ));
        self.config.poll_interval.min(self.poll_timeout()) / 2
    }

    /// Takes on what a finished round `found`: the libraries' entries, the
    /// plain keys, what it left out (logged when that changes), the
    /// presets' queues within what `max_keys` leaves. Returns refusals to
    /// count.
    fn adopt_round(&mut self, found: Found) -> Vec<Reason> {
        if let Some(specs) = found.recognised {
            self.presets.set_specs(specs);
        }
        self.discovery.memory = found.memory;
        if let (RoundKind::Full | RoundKind::Remembered, Some(learnt)) =
            (found.kind, &self.discovery.memory.learnt)
        {
            tracing::debug!(
                source = %self.config.name,
                took = ?learnt.took(),
                next_scan_in = ?learnt.scan_every(
                    self.config.keyspace_scan_interval,
                    self.config.discovery_interval
                ),
                "keyspace scanned"
            );
        }
        match found.kind {
            RoundKind::Full => self.discovery.finished.full += 1,
            RoundKind::Remembered => self.discovery.finished.remembered += 1,
            RoundKind::Libraries => self.discovery.finished.libraries += 1,
        }
        self.unread.set_finished();
        let mut refused = match found.plain {
            Plain::Found(plain) => {
                self.unread.set_plain(&plain, &self.config);
                discovery::adopt(plain, &self.config, &mut self.tracked, &mut self.dropped)
            }
            Plain::Kept { now_owned } => {
                self.tracked.retain(|k| !now_owned.contains(&k.key));
                Vec::new()
            }
        };
        refused.extend(found.left_out.unread.iter().copied());
        if found.left_out != self.discovery.left_out && !found.left_out.unread.is_empty() {
            tracing::warn!(
                source = %self.config.name,
                marks = found.left_out.unread.len(),
                keys = found.left_out.keys,
                "Redis refused reading some queue libraries' marks (a registry set, a queue's meta hash, a table of bindings); the queues and keys they may own are reported neither as the library's nor as plain keys"
            );
        }
        if found.left_out.over != self.discovery.left_out.over && !found.left_out.over.is_empty() {
            let (mark, bound) = &found.left_out.over[0];
            tracing::warn!(
                source = %self.config.name,
                marks = found.left_out.over.len(),
                first = %format!("{mark:?}: {bound}"),
                "some queue libraries' marks were not read for discovery's bounds (beyond max_keys marks a round reads, or a set over max_keys members); they are counted in queue_exporter_dropped_keys and the queues and keys they may own are unknown"
            );
        }
        self.unread.set_library(&found.left_out);
        self.discovery.left_out = found.left_out;
        // One `max_keys` budget per source: key and pattern entries first,
        // then the presets' logical queues.
        let budget = self.config.max_keys.saturating_sub(self.tracked.len());
        self.presets.adopt(found.presets, budget, &self.config.name);
        self.unread
            .set_presets(self.presets.dropped_names(), self.config.max_keys);
        self.discovery.last = Some(Instant::now());
        if self.config.recognise {
            self.log_picture();
        }
        refused
    }

    /// Zero config: logs what the last round recognised, at the first round
    /// and whenever it changes (not every round).
    fn log_picture(&mut self) {
        let plain = presets::picture::plain_counts(self.tracked.iter().map(|k| &k.state));
        let picture = presets::picture::picture(
            &self.presets.queue_counts(),
            &plain,
            &self.discovery.left_out,
        );
        if self.discovery.picture.as_deref() != Some(picture.as_str()) {
            tracing::info!(source = %self.config.name, "{picture}");
            self.discovery.picture = Some(picture);
        }
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
                // A round on the old master's connection is of no use.
                self.discovery.force();
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
        let password = match (&self.config.password_file, &self.config.password) {
            (Some(path), _) => Some(read_secret_file(path).map_err(|e| {
                SourceError::Config(format!("cannot read password_file {}: {e}", path.display()))
            })?),
            (None, Some(p)) => Some(p.expose().to_owned()),
            (None, None) => None,
        };
        if let Some(password) = password {
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

/// What one zero-config round recognised, for `queue-exporter discover`.
#[derive(Debug)]
pub struct Recognised {
    /// One `- preset:` entry per library and prefix, with the names of the
    /// queues it found (sorted; the shared keys aside).
    pub entries: Vec<(presets::PresetSpec, Vec<String>)>,
    /// The plain keys (raw) and their types, in key order.
    pub plain: Vec<(Vec<u8>, crate::config::KeyType)>,
    /// Keys the libraries took: a pattern written for plain keys must not
    /// reach them.
    pub consumed: std::collections::BTreeSet<Vec<u8>>,
    /// The line zero config logs for this picture.
    pub picture: String,
}

impl RedisSource {
    /// Runs one zero-config discovery round to its end on this source's
    /// connection (whatever its `queues:` say), calling `progress(scanned,
    /// dbsize)` every second while it runs: an estimate of the keys SCAN has
    /// visited so far, and `DBSIZE` (one server only). Read-only like a poll.
    pub async fn recognise_once(
        &mut self,
        progress: &mut (dyn FnMut(u64, Option<u64>) + Send),
    ) -> Result<Recognised, SourceError> {
        let conn = self.connection().await?;
        let mut config = self.config.clone();
        config.zero_config();
        config.max_keys = usize::MAX;
        let dbsize = match conn.is_cluster() {
            true => None,
            false => commands::query::<u64>(&conn, redis::cmd("DBSIZE"))
                .await
                .ok(),
        };
        let mut round_conn = conn.clone();
        round_conn.begin_discovery();
        let start = commands::SCANNED.load(std::sync::atomic::Ordering::Relaxed);
        let round = presets::zero::scan(&mut round_conn, &config, &[], None, &[]);
        tokio::pin!(round);
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.tick().await;
        let zero = loop {
            tokio::select! {
                r = &mut round => break r.map_err(|e| self.map_error(e))?,
                _ = tick.tick() => {
                    let now = commands::SCANNED.load(std::sync::atomic::Ordering::Relaxed);
                    // One pass, or more where `TYPE` is refused (the typed
                    // passes): `progress` shows no more than `dbsize`.
                    progress(now.saturating_sub(start), dbsize);
                }
            }
        };
        let plain_types =
            presets::picture::plain_counts(zero.plain.tracked.iter().map(|k| &k.state));
        let plain: Vec<(Vec<u8>, crate::config::KeyType)> = zero
            .plain
            .tracked
            .into_iter()
            .filter_map(|k| match k.state {
                tracked::KeyState::Typed(t) => Some((k.key, t)),
                _ => None,
            })
            .collect();
        let counts: Vec<(&presets::Preset, usize)> = zero
            .entries
            .iter()
            .map(|(s, u)| (&s.preset, presets::queue_names(u).len()))
            .collect();
        let picture = presets::picture::picture(&counts, &plain_types, &zero.left_out);
        let entries = zero
            .entries
            .into_iter()
            .map(|(s, u)| {
                let names = presets::queue_names(&u);
                (s, names)
            })
            .collect();
        Ok(Recognised {
            entries,
            plain,
            consumed: zero.consumed,
            picture,
        })
    }
}

/// Every word a `- preset:` entry may hold: `preset`, each library's
/// options (once each, in the list's order), `counters` (what
/// docs/configuration.md's table of preset options lists).
pub fn preset_words() -> Vec<&'static str> {
    let mut words = vec!["preset"];
    for library in presets::library::all() {
        for word in library.options() {
            if !words.contains(word) {
                words.push(word);
            }
        }
    }
    words.push("counters");
    words
}

/// The `- preset:` entries of `config` resolved against their libraries.
/// `app::preflight` refuses a config with an entry that does not resolve
/// before any source is built; should one come here all the same (a
/// config built in code), it is logged and left out, never guessed.
fn resolved_presets(config: &RedisSourceConfig) -> Vec<presets::PresetSpec> {
    config
        .presets
        .iter()
        .filter_map(|entry| match presets::resolve(entry) {
            Ok(spec) => Some(spec),
            Err((at, problem)) => {
                tracing::error!(source = %config.name, "{at}: {problem}; entry left out");
                None
            }
        })
        .collect()
}

/// Checks that every `- preset:` entry of `config` resolves against its
/// library; `Err` is `(path, problem)`, as config errors write them.
pub fn check_presets(config: &RedisSourceConfig) -> Result<(), presets::EntryError> {
    presets::resolve_all(&config.presets).map(|_| ())
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

/// Maps a client error to a [`SourceError`] whose reason label fits.
/// `timeout` is the per-command response timeout, for the message.
pub fn map_redis_error(e: redis::RedisError, target: &str, timeout: Duration) -> SourceError {
    if cluster::is_gap(&e) {
        return SourceError::ClusterSlots(e.detail().unwrap_or("slots without a primary").into());
    }
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
        let conn = self.connection().await?;
        let refused = self.discover(&conn).await?;
        let (mut poll_conn, changes) = self.poll_connection(&conn).await?;
        let now = SystemTime::now();
        let result = poll::poll_keys(
            &mut poll_conn,
            &self.config,
            &mut self.tracked,
            now,
            changes.as_ref(),
            &mut self.histogram_budget,
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
        let mut out = PollOutput::new(self.unread.coverage());
        out.queues = result.queues;
        // Presets: logical queues, and `counters:` totals of plain keys.
        let preset = self
            .presets
            .poll(&conn, &self.config.queues, &self.tracked, now)
            .await
            .map_err(|e| self.map_error(e))?;
        for (name, reading) in preset.plain_totals {
            for q in out.queues.iter_mut().filter(|q| q.name == name) {
                reading.apply(q);
            }
        }
        // A `key:` entry on a key a preset queue counts is that queue's.
        for (name, by) in preset.counted {
            for q in out.queues.iter_mut().filter(|q| q.name == name) {
                q.count_in(by.clone());
            }
        }
        out.queues.extend(preset.samples);
        out.stats.tracked_keys = (self.tracked.len() + self.presets.tracked()) as u64;
        // Library marks not read for a bound count as keys dropped.
        let marks_over = self.discovery.left_out.over.len() as u64;
        out.stats.dropped_keys = self.dropped + self.presets.dropped() + marks_over;
        out.stats.discovery_rounds = Some(self.discovery.finished);
        out.stats.age_parse_failures = result.age_parse_failures;
        out.stats.unchanged_keys = result.unchanged_keys;
        out.stats.age_histogram_staleness_seconds = result.histogram_staleness;
        // Keys Redis refused to answer for are counted without failing the poll.
        out.partial_errors = result.key_errors;
        out.partial_errors.extend(preset.key_errors);
        out.partial_errors.extend(refused);
        Ok(out)
    }

    fn poll_timeout(&self) -> Duration {
        // Bound the whole poll generously, individual commands by `timeout`;
        // discovery has its own deadline (`discovery_deadline`), and a poll
        // waits for it at most half of this.
        self.config
            .timeout
            .saturating_mul(4)
            .max(self.config.poll_interval)
    }

    fn scope(&self) -> Arc<dyn QueueScope> {
        Arc::new(RedisScope::new(&self.config, &self.configured))
    }
}
