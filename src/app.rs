//! Wiring: builds sources from the config, starts their poll loops, the
//! HTTP listener and the gRPC scaler, reloads the config on SIGHUP (sources
//! rebuilt, listeners untouched), and stops them all on shutdown.
//! Also the one-shot `once` and `check` commands.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use crate::config::{Config, ConfigError, LoadOptions, ScalerConfig, SourceConfig};
use crate::crypto::TlsFileError;
use crate::exposition::{Exposition, Format};
use crate::http::{self, HttpError, HttpSecurity, HttpState};
use crate::hub::{Hub, HubBuilder, HubControl, SnapshotPublisher, SourceSlot};
use crate::scaler::{self, ScalerError};
use crate::shutdown::{Shutdown, ShutdownTrigger, Signal, Signals};
use crate::snapshot::SourceKind;
use crate::sources::rabbitmq::{self, RabbitSource};
use crate::sources::redis::RedisSource;
use crate::sources::{self, Source};
use crate::telemetry::{LogList, Telemetry};

/// Why the application could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The HTTP listener failed.
    #[error(transparent)]
    Http(#[from] HttpError),
    /// The gRPC listener failed.
    #[error(transparent)]
    Scaler(#[from] ScalerError),
    /// A reload was asked for, but the config came from standard input or
    /// another file that is not a regular file (a pipe, a FIFO), which
    /// cannot be read twice ([`crate::config::is_read_once`]).
    #[error(
        "the configuration was read from standard input or another file that is not a regular file (a pipe or FIFO) and cannot be read again; restart to change it"
    )]
    ReloadFromStdin,
    /// A `- preset:` entry of a Redis source does not resolve against the
    /// library it names (an unknown library, an option it does not take, a
    /// bad value): the config holds entries as written, `sources` resolves
    /// them.
    #[error("{path}: {problem}")]
    Preset {
        /// The entry's path (`sources[0].queues[1]`), or its field's.
        path: String,
        /// What is wrong, `field: problem`.
        problem: String,
    },
    /// A source's TLS file (`sources[i].tls.*`, Redis or RabbitMQ) cannot
    /// be used.
    #[error("sources[{index}].{error}")]
    SourceTls {
        /// The source's position in `sources`.
        index: usize,
        /// Which file, and why.
        #[source]
        error: TlsFileError,
    },
}

/// How long a reload waits for newly started sources to finish their first
/// poll before it shows them to readers, so a scrape or a KEDA query right
/// after a reload still finds data (a source that is slower than this is
/// shown unpolled, like at startup).
pub const RELOAD_FIRST_POLL_WAIT: Duration = Duration::from_secs(5);

/// A running exporter.
#[derive(Debug)]
pub struct App {
    /// Where `/metrics` is served (useful with port 0).
    pub http_addr: SocketAddr,
    /// Where the gRPC scaler is served, if enabled.
    pub grpc_addr: Option<SocketAddr>,
    /// The snapshots, for in-process readers and tests.
    pub hub: Hub,
    /// Fires shutdown.
    trigger: ShutdownTrigger,
    /// The listeners' tasks (HTTP, gRPC).
    tasks: JoinSet<()>,
    /// How long shutdown waits for tasks (`shutdown_grace`).
    grace: Duration,
    /// Replaces the hub's set of sources on reload.
    control: HubControl,
    /// The poll loops running now, in config order.
    running: Vec<RunningSource>,
    /// The scaler's settings; the gRPC service follows changes (reload).
    scaler_config: watch::Sender<ScalerConfig>,
    /// Process-level metrics, including the reload gauges.
    telemetry: Arc<Telemetry>,
    /// The config in force: the one started with, or the last reload applied.
    config: Config,
}

/// One source's poll loop, as the app tracks it across reloads.
#[derive(Debug)]
struct RunningSource {
    /// The `source` label.
    name: String,
    /// The source's config entry as written; a reload keeps the loop
    /// running when the new entry is identical.
    entry: Option<serde_json::Value>,
    /// Its snapshot slot, carried into the next set when kept.
    slot: SourceSlot,
    /// Stops this loop alone (a child of the process-wide trigger).
    stop: ShutdownTrigger,
    /// The loop's task.
    task: JoinHandle<()>,
}

/// What a reload did, by source name.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReloadSummary {
    /// Sources whose config did not change: their loops kept running, with
    /// their connections, discovered keys and rate history.
    pub kept: Vec<String>,
    /// Sources started (new, or changed and restarted).
    pub started: Vec<String>,
    /// Sources stopped (removed, or changed and restarted).
    pub stopped: Vec<String>,
    /// Settings that changed but apply only after a restart.
    pub need_restart: Vec<&'static str>,
}

/// A source ready to run, with its publisher.
enum Built {
    /// A Redis source.
    Redis(RedisSource),
    /// A RabbitMQ source.
    Rabbit(RabbitSource),
}

/// Chooses the sources to run. With built-in defaults, a RabbitMQ
/// management API that does not answer is left out, and every choice is logged.
async fn select_sources(config: &Config) -> Vec<SourceConfig> {
    if !config.default_sources {
        return config.sources.clone();
    }
    let mut chosen = Vec::new();
    for s in &config.sources {
        match s {
            SourceConfig::Redis(r) => {
                let libraries = crate::sources::redis::recognised_libraries().join(", ");
                let what = match r.plain_keys {
                    true => format!(
                        "recognising queue libraries' queues ({libraries}) and other list, zset and stream keys"
                    ),
                    false => format!("recognising queue libraries' queues ({libraries})"),
                };
                tracing::info!(source = %r.name, url = %r.url.redacted(), "default source: local Redis, {what}");
                chosen.push(s.clone());
            }
            SourceConfig::RabbitMq(r) => {
                if rabbitmq::probe_default(r).await {
                    tracing::info!(source = %r.name, url = %crate::config::Redacted(&r.url), "default source: local RabbitMQ management API answers; watching all queues");
                    chosen.push(s.clone());
                } else {
                    tracing::info!(url = %crate::config::Redacted(&r.url), "default source: no RabbitMQ management API answers; RabbitMQ not watched");
                }
            }
        }
    }
    chosen
}

/// Builds one source and registers its slot in `hub`.
fn build_one(
    c: &SourceConfig,
    hub: &mut HubBuilder,
) -> (Built, SnapshotPublisher, std::time::Duration) {
    let (kind, built) = match c {
        SourceConfig::Redis(r) => (SourceKind::Redis, Built::Redis(RedisSource::new(r.clone()))),
        SourceConfig::RabbitMq(r) => (
            SourceKind::RabbitMq,
            Built::Rabbit(RabbitSource::new(r.clone())),
        ),
    };
    let scope = match &built {
        Built::Redis(s) => s.scope(),
        Built::Rabbit(s) => s.scope(),
    };
    let publisher = hub.add_source(c.name(), kind, c.poll_interval(), scope);
    (built, publisher, c.poll_interval())
}

fn build(
    configs: &[SourceConfig],
    hub: &mut HubBuilder,
) -> Vec<(Built, SnapshotPublisher, std::time::Duration)> {
    configs.iter().map(|c| build_one(c, hub)).collect()
}

/// Checks what the config can only tell by touching files: the TLS
/// certificates and keys of the gRPC listener, the HTTP listener and the
/// sources (Redis and RabbitMQ) must load, and the HTTP basic-auth users
/// must be usable.
/// Used by `start`, `reload` and `check`; returns what the HTTP listener needs.
/// Checks the sources' `- preset:` entries first ([`check_presets`]).
pub fn preflight(config: &Config) -> Result<HttpSecurity, AppError> {
    check_presets(config)?;
    crate::crypto::install_crypto_provider();
    if config.listen.grpc.is_some()
        && let Some(tls) = &config.scaler.tls
    {
        scaler::tls::server_config(tls)?;
    }
    for (index, source) in config.sources.iter().enumerate() {
        let checked = match source {
            SourceConfig::Redis(r) => match &r.tls {
                Some(tls) => crate::sources::redis::tls::certificates(tls).map(|_| ()),
                None => Ok(()),
            },
            SourceConfig::RabbitMq(r) => crate::crypto::client_tls_files(
                r.tls.ca_file.as_deref(),
                r.tls.cert_file.as_deref(),
                r.tls.key_file.as_deref(),
            )
            .map(|_| ()),
        };
        checked.map_err(|error| AppError::SourceTls { index, error })?;
    }
    Ok(HttpSecurity::from_config(&config.web)?)
}

/// Checks that every `- preset:` entry of every Redis source resolves
/// against the library it names: what the config, plain data, cannot
/// tell by itself. Run on every config loaded (`main`, [`preflight`]).
pub fn check_presets(config: &Config) -> Result<(), AppError> {
    for source in &config.sources {
        if let SourceConfig::Redis(r) = source {
            crate::sources::redis::check_presets(r)
                .map_err(|(path, problem)| AppError::Preset { path, problem })?;
        }
    }
    Ok(())
}

/// Starts a built source's poll loop, stoppable alone by its own trigger.
fn spawn_source(
    name: &str,
    entry: Option<serde_json::Value>,
    built: Built,
    publisher: SnapshotPublisher,
    interval: Duration,
    parent: &ShutdownTrigger,
) -> RunningSource {
    let stop = parent.child();
    let slot = publisher.slot();
    let shutdown = stop.subscribe();
    let task = match built {
        Built::Redis(s) => tokio::spawn(run_source(s, publisher, interval, shutdown)),
        Built::Rabbit(s) => tokio::spawn(run_source(s, publisher, interval, shutdown)),
    };
    RunningSource {
        name: name.to_string(),
        entry,
        slot,
        stop,
        task,
    }
}

/// The settings of `new` that differ from `old` but are fixed while the
/// process runs (bound sockets, the gRPC TLS acceptor, the log subscriber).
fn restart_only_changes(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut changed = Vec::new();
    if old.listen.http != new.listen.http {
        changed.push("listen.http");
    }
    if old.listen.grpc != new.listen.grpc {
        changed.push("listen.grpc");
    }
    if old.scaler.tls != new.scaler.tls {
        changed.push("scaler.tls");
    }
    if old.web != new.web {
        changed.push("web");
    }
    if old.log.format != new.log.format {
        changed.push("log.format");
    }
    if old.log.level != new.log.level {
        changed.push("log.level");
    }
    changed
}

/// Waits until every slot has finished a poll, or `limit` has passed.
async fn first_polls(hub: &Hub, slots: &[SourceSlot], limit: Duration) {
    let mut changes = hub.subscribe();
    let _ = tokio::time::timeout(limit, async {
        while !slots.iter().all(|s| s.current().polled) {
            if changes.changed().await.is_err() {
                return;
            }
        }
    })
    .await;
}

/// Stops source loops: signals them all, then waits for each up to `grace`
/// (a loop stops at its next await point, so this is quick) and aborts the rest.
async fn stop_sources(sources: Vec<RunningSource>, grace: Duration) {
    for r in &sources {
        r.stop.fire();
    }
    // Measured from here rather than as `now + grace`, which cannot overflow.
    let started = tokio::time::Instant::now();
    for mut r in sources {
        let left = grace.saturating_sub(started.elapsed());
        if tokio::time::timeout(left, &mut r.task).await.is_err() {
            tracing::warn!(source = %r.name, "source did not stop within {grace:?}; aborting it");
            r.task.abort();
        }
    }
}

impl App {
    /// Starts everything; returns once the listeners are bound.
    pub async fn start(config: Config) -> Result<App, AppError> {
        let security = preflight(&config)?;
        let sources = select_sources(&config).await;
        let mut builder = HubBuilder::default()
            .with_libraries(crate::sources::redis::presets::library::catalogue());
        let built = build(&sources, &mut builder);
        let (hub, control) = builder.build_swappable();
        let telemetry = Arc::new(Telemetry::new());
        let trigger = ShutdownTrigger::new();
        let mut tasks = JoinSet::new();

        let (http_listener, http_addr) = crate::listen::bind(config.listen.http)
            .await
            .map_err(HttpError::from)?;
        let grpc = match config.listen.grpc {
            Some(addr) => Some(crate::listen::bind(addr).await.map_err(ScalerError::from)?),
            None => None,
        };

        let running = sources
            .iter()
            .zip(built)
            .map(|(c, (source, publisher, interval))| {
                let entry = config.source_entry(c.name()).cloned();
                spawn_source(c.name(), entry, source, publisher, interval, &trigger)
            })
            .collect();

        let state = HttpState {
            exposition: Arc::new(Exposition::new(hub.clone(), telemetry.clone())),
            hub: hub.clone(),
            telemetry: telemetry.clone(),
        };
        let shutdown = trigger.subscribe();
        tasks.spawn(async move {
            if let Err(e) = http::serve(http_listener, state, security, shutdown).await {
                tracing::error!(error = %e, "HTTP listener stopped");
            }
        });
        tracing::info!(%http_addr, tls = config.web.tls_server_config.is_some(), basic_auth = !config.web.basic_auth_users.is_empty(), "serving /metrics");

        let scaler_config = watch::Sender::new(config.scaler.clone());
        let grpc_addr = match grpc {
            Some((listener, addr)) => {
                let (hub, cfg, tel, shutdown) = (
                    hub.clone(),
                    scaler_config.subscribe(),
                    telemetry.clone(),
                    trigger.subscribe(),
                );
                tasks.spawn(async move {
                    if let Err(e) = scaler::serve(listener, hub, cfg, tel, shutdown).await {
                        tracing::error!(error = %e, "gRPC listener stopped");
                    }
                });
                tracing::info!(grpc_addr = %addr, "serving the KEDA external scaler");
                Some(addr)
            }
            None => None,
        };
        telemetry.config_applied(SystemTime::now());

        Ok(App {
            http_addr,
            grpc_addr,
            hub,
            trigger,
            tasks,
            grace: config.shutdown_grace,
            control,
            running,
            scaler_config,
            telemetry,
            config,
        })
    }

    /// Applies a new config without touching the listeners: open
    /// connections, `StreamIsActive` streams and in-flight scrapes go on.
    ///
    /// Sources are matched by name: one whose config entry is unchanged
    /// keeps running; a new or changed one is started, and readers are
    /// switched to the new set once its new sources have polled once (at
    /// most [`RELOAD_FIRST_POLL_WAIT`]); removed and replaced loops are then
    /// stopped. `scaler.max_staleness` and `shutdown_grace` apply at once;
    /// `listen.*`, `scaler.tls` and `log.*` only after a restart (they are
    /// listed in the summary and logged). A config that fails
    /// [`preflight`] changes nothing.
    pub async fn reload(&mut self, new: Config) -> Result<ReloadSummary, AppError> {
        preflight(&new)?;
        let need_restart = restart_only_changes(&self.config, &new);
        let chosen = select_sources(&new).await;
        let mut old = std::mem::take(&mut self.running);
        let mut next = self.control.builder();
        let mut running = Vec::with_capacity(chosen.len());
        let mut summary = ReloadSummary {
            need_restart,
            ..ReloadSummary::default()
        };
        let mut fresh = Vec::new();
        for c in &chosen {
            let entry = new.source_entry(c.name()).cloned();
            let same = old
                .iter()
                .position(|r| r.name == c.name() && r.entry.is_some() && r.entry == entry);
            if let Some(i) = same {
                let r = old.remove(i);
                next.keep(r.slot.clone());
                summary.kept.push(r.name.clone());
                running.push(r);
            } else {
                let (built, publisher, interval) = build_one(c, &mut next);
                let r = spawn_source(c.name(), entry, built, publisher, interval, &self.trigger);
                fresh.push(r.slot.clone());
                summary.started.push(r.name.clone());
                running.push(r);
            }
        }
        // Make before break: readers switch once the new sources have data.
        first_polls(&self.hub, &fresh, RELOAD_FIRST_POLL_WAIT).await;
        self.control.install(next);
        self.running = running;
        summary.stopped = old.iter().map(|r| r.name.clone()).collect();
        stop_sources(old, self.grace).await;

        // What needs a restart stays as it runs, so a later reload still
        // reports it as changed.
        let mut new = new;
        new.listen = self.config.listen.clone();
        new.scaler.tls = self.config.scaler.tls.clone();
        new.log = self.config.log.clone();
        self.scaler_config.send_replace(new.scaler.clone());
        self.grace = new.shutdown_grace;
        self.config = new;
        self.telemetry.config_applied(SystemTime::now());
        Ok(summary)
    }

    /// Loads the config again as `opts` says (the file, the environment,
    /// the command-line overrides) and applies it; on any problem the
    /// running config stays. Logs the outcome on one line and sets
    /// `queue_exporter_config_reload_success`.
    pub async fn reload_from(&mut self, opts: &LoadOptions) -> Result<ReloadSummary, AppError> {
        let origin = self.config.origin.clone();
        let result = if opts
            .file
            .as_deref()
            .is_some_and(crate::config::is_read_once)
        {
            Err(AppError::ReloadFromStdin)
        } else {
            match Config::load(opts) {
                Ok(config) => self.reload(config).await,
                Err(e) => Err(AppError::Config(e)),
            }
        };
        match &result {
            Ok(summary) => {
                for field in &summary.need_restart {
                    tracing::warn!(
                        "config reload: {field} changed in {origin}, but it applies only after a restart; still using the old {field}"
                    );
                }
                tracing::info!(
                    kept = %LogList(&summary.kept[..]),
                    started = %LogList(&summary.started[..]),
                    stopped = %LogList(&summary.stopped[..]),
                    "config reloaded from {origin}"
                );
            }
            Err(e) => {
                self.telemetry.config_refused();
                // A config error names its file itself; the others do not.
                match e {
                    AppError::Config(e) => tracing::error!(
                        "config reload failed, keeping the running configuration: {e}"
                    ),
                    e => tracing::error!(
                        "config reload failed, keeping the running configuration: {origin}: {e}"
                    ),
                }
            }
        }
        result
    }

    /// Signals shutdown and waits up to `shutdown_grace` for tasks (listeners
    /// with their open streams and in-flight requests, poll loops) to
    /// finish, then aborts the rest: tonic's own graceful shutdown has no
    /// time limit.
    pub async fn shutdown(mut self) {
        self.trigger.fire();
        let grace = self.grace;
        let drained = tokio::time::timeout(grace, async {
            while self.tasks.join_next().await.is_some() {}
            for r in &mut self.running {
                let _ = (&mut r.task).await;
            }
        })
        .await;
        if drained.is_err() {
            tracing::warn!("some tasks did not stop within {grace:?}; aborting them");
            self.tasks.abort_all();
            for r in &self.running {
                r.task.abort();
            }
        }
    }
}

async fn run_source<S: Source>(
    source: S,
    publisher: SnapshotPublisher,
    interval: std::time::Duration,
    shutdown: Shutdown,
) {
    let mut stop = shutdown.clone();
    // `sources::run` notices shutdown only between polls; a poll stuck on a
    // backend that does not answer would hold shutdown up to its timeout
    // (4 × `timeout`), past the 5 s drain. Polls are read-only, so dropping
    // one midway is safe.
    tokio::select! {
        () = sources::run(source, publisher, interval, shutdown) => {}
        () = stop.recv() => {}
    }
}

/// Runs until SIGTERM/SIGINT, then shuts down gracefully. SIGHUP reloads
/// the config as `opts` says (see [`App::reload_from`]).
pub async fn run(config: Config, opts: LoadOptions) -> Result<(), AppError> {
    // First, so that a SIGHUP during startup is a reload, not the default
    // action (terminate).
    let mut signals = Signals::install();
    let mut app = App::start(config).await?;
    loop {
        match signals.next().await {
            Signal::Terminate => break,
            Signal::Reload => {
                tracing::info!("SIGHUP: reloading the configuration");
                // The outcome is logged and counted by `reload_from`.
                let _ = app.reload_from(&opts).await;
            }
        }
    }
    tracing::info!("shutting down");
    app.shutdown().await;
    Ok(())
}

/// The result of polling every source once.
#[derive(Debug)]
pub struct OnceReport {
    /// The exposition (classic text format).
    pub text: String,
    /// Each source whose poll failed, in config order.
    pub failures: Vec<PollFailure>,
}

/// A source whose one poll failed, with the cause, so the summary line a
/// user reads says why (not only a log line above it).
#[derive(Debug)]
pub struct PollFailure {
    /// The source's position in `sources` (`sources[0]` in messages), or
    /// `None` for a failure that is not a source's (the exposition).
    pub index: Option<usize>,
    /// The `source` label.
    pub name: String,
    /// The `reason` label, such as `connect` or `config`.
    pub reason: String,
    /// What went wrong, on one line (credential-free, like every
    /// [`sources::SourceError`]).
    pub cause: String,
}

/// Discovers and polls every source once, and renders the result.
pub async fn once(config: &Config) -> OnceReport {
    crate::crypto::install_crypto_provider();
    let sources = select_sources(config).await;
    let mut builder =
        HubBuilder::default().with_libraries(crate::sources::redis::presets::library::catalogue());
    let built = build(&sources, &mut builder);
    let hub = builder.build();
    let mut failures = Vec::new();
    // Every source at once, as `serve` polls them: the slowest sets the time.
    let polled = futures_util::future::join_all(built.into_iter().map(
        |(source, publisher, _)| async move {
            let (snapshot, outcome) = match source {
                Built::Redis(mut s) => sources::poll_once_reporting(&mut s, &publisher).await,
                Built::Rabbit(mut s) => sources::poll_once_reporting(&mut s, &publisher).await,
            };
            (snapshot, outcome, publisher)
        },
    ))
    .await;
    for (snapshot, outcome, publisher) in polled {
        if let Err(e) = outcome {
            let name = snapshot.source.to_string();
            failures.push(PollFailure {
                // Indexed in the config as written (built-in defaults that
                // were left out shift nothing: they are matched by name).
                index: config.sources.iter().position(|c| c.name() == name),
                name,
                reason: e.reason().as_str().to_string(),
                cause: crate::config::one_line(&e.to_string()),
            });
        }
        publisher.publish(snapshot);
    }
    let exposition = Exposition::new(hub, Arc::new(Telemetry::new()));
    let text = exposition.render_text(Format::Classic).unwrap_or_else(|e| {
        failures.push(PollFailure {
            index: None,
            name: "exposition".to_string(),
            reason: "exposition".to_string(),
            cause: e.to_string(),
        });
        String::new()
    });
    OnceReport { text, failures }
}
