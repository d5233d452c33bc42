//! Wiring: builds sources from the config, starts their poll loops, the
//! HTTP listener and the gRPC scaler, and stops them all on shutdown.
//! Also the one-shot `once` and `check` commands.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::task::JoinSet;

use crate::config::{Config, ConfigError, SourceConfig};
use crate::exposition::{Exposition, Format};
use crate::http::{self, HttpError, HttpSecurity, HttpState};
use crate::hub::{Hub, HubBuilder, SnapshotPublisher};
use crate::scaler::{self, ScalerError};
use crate::shutdown::{Shutdown, ShutdownTrigger};
use crate::snapshot::SourceKind;
use crate::sources::rabbitmq::{self, RabbitSource};
use crate::sources::redis::RedisSource;
use crate::sources::redis::tls::RedisTlsError;
use crate::sources::{self, Source};
use crate::telemetry::Telemetry;

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
    /// A Redis source's TLS file (`sources[i].tls.*`) cannot be used.
    #[error("sources[{index}].{error}")]
    RedisTls {
        /// The source's position in `sources`.
        index: usize,
        /// Which file, and why.
        #[source]
        error: RedisTlsError,
    },
}

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
    /// Every task started.
    tasks: JoinSet<()>,
    /// How long shutdown waits for tasks (`shutdown_grace`).
    grace: std::time::Duration,
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
                tracing::info!(source = %r.name, url = %r.url.redacted(), "default source: local Redis, discovering list, zset and stream keys");
                chosen.push(s.clone());
            }
            SourceConfig::RabbitMq(r) => {
                if rabbitmq::probe_default(r).await {
                    tracing::info!(source = %r.name, url = %r.url, "default source: local RabbitMQ management API answers; watching all queues");
                    chosen.push(s.clone());
                } else {
                    tracing::info!(url = %r.url, "default source: no RabbitMQ management API answers; RabbitMQ not watched");
                }
            }
        }
    }
    chosen
}

fn build(
    configs: &[SourceConfig],
    hub: &mut HubBuilder,
) -> Vec<(Built, SnapshotPublisher, std::time::Duration)> {
    configs
        .iter()
        .map(|c| {
            let (kind, built) = match c {
                SourceConfig::Redis(r) => {
                    (SourceKind::Redis, Built::Redis(RedisSource::new(r.clone())))
                }
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
        })
        .collect()
}

/// Checks what the config can only tell by touching files: the TLS
/// certificates and keys of the gRPC listener, the HTTP listener and the
/// Redis sources must load, and the HTTP basic-auth users must be usable.
/// Used by `start` and `check`; returns what the HTTP listener needs.
pub fn preflight(config: &Config) -> Result<HttpSecurity, AppError> {
    crate::crypto::install_crypto_provider();
    if config.listen.grpc.is_some()
        && let Some(tls) = &config.scaler.tls
    {
        scaler::tls::server_config(tls)?;
    }
    for (index, source) in config.sources.iter().enumerate() {
        if let SourceConfig::Redis(r) = source
            && let Some(tls) = &r.tls
        {
            crate::sources::redis::tls::certificates(tls)
                .map_err(|error| AppError::RedisTls { index, error })?;
        }
    }
    Ok(HttpSecurity::from_config(&config.web)?)
}

impl App {
    /// Starts everything; returns once the listeners are bound.
    pub async fn start(config: Config) -> Result<App, AppError> {
        let security = preflight(&config)?;
        let sources = select_sources(&config).await;
        let mut builder = HubBuilder::default();
        let built = build(&sources, &mut builder);
        let hub = builder.build();
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

        for (source, publisher, interval) in built {
            let shutdown = trigger.subscribe();
            match source {
                Built::Redis(s) => tasks.spawn(run_source(s, publisher, interval, shutdown)),
                Built::Rabbit(s) => tasks.spawn(run_source(s, publisher, interval, shutdown)),
            };
        }

        let state = HttpState {
            exposition: Arc::new(Exposition::new(hub.clone(), telemetry.clone())),
            hub: hub.clone(),
        };
        let shutdown = trigger.subscribe();
        tasks.spawn(async move {
            if let Err(e) = http::serve(http_listener, state, security, shutdown).await {
                tracing::error!(error = %e, "HTTP listener stopped");
            }
        });
        tracing::info!(%http_addr, tls = config.web.tls_server_config.is_some(), basic_auth = !config.web.basic_auth_users.is_empty(), "serving /metrics");

        let grpc_addr = match grpc {
            Some((listener, addr)) => {
                let (hub, cfg, tel, shutdown) = (
                    hub.clone(),
                    config.scaler.clone(),
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

        Ok(App {
            http_addr,
            grpc_addr,
            hub,
            trigger,
            tasks,
            grace: config.shutdown_grace,
        })
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
        })
        .await;
        if drained.is_err() {
            tracing::warn!("some tasks did not stop within {grace:?}; aborting them");
            self.tasks.abort_all();
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

/// Runs until SIGTERM/SIGINT, then shuts down gracefully.
pub async fn run(config: Config) -> Result<(), AppError> {
    let app = App::start(config).await?;
    crate::shutdown::os_signal().await;
    tracing::info!("shutting down");
    app.shutdown().await;
    Ok(())
}

/// The result of polling every source once.
#[derive(Debug)]
pub struct OnceReport {
    /// The exposition (classic text format).
    pub text: String,
    /// `(source, error)` for each source whose poll failed.
    pub failures: Vec<(String, String)>,
}

/// Discovers and polls every source once, and renders the result.
pub async fn once(config: &Config) -> OnceReport {
    crate::crypto::install_crypto_provider();
    let sources = select_sources(config).await;
    let mut builder = HubBuilder::default();
    let built = build(&sources, &mut builder);
    let hub = builder.build();
    let mut failures = Vec::new();
    for (source, publisher, _) in built {
        let (snapshot, ok) = match source {
            Built::Redis(mut s) => sources::poll_once(&mut s, &publisher).await,
            Built::Rabbit(mut s) => sources::poll_once(&mut s, &publisher).await,
        };
        if !ok {
            let reasons: Vec<_> = snapshot.polls.errors.keys().map(|r| r.as_str()).collect();
            failures.push((snapshot.source.to_string(), reasons.join(",")));
        }
        publisher.publish(snapshot);
    }
    let exposition = Exposition::new(hub, Arc::new(Telemetry::new()));
    let text = exposition.render(Format::Classic).unwrap_or_else(|e| {
        failures.push(("exposition".to_string(), e.to_string()));
        String::new()
    });
    OnceReport { text, failures }
}
