//! The RabbitMQ source. Three methods fill the same snapshot, because real
//! clusters differ:
//!
//! - `management`: the management HTTP API, paged (everything, including
//!   unacked, consumers, counters and the oldest message's age);
//! - `prometheus`: the `rabbitmq_prometheus` plugin on every node (works
//!   with management stats disabled; the cheapest);
//! - `amqp`: passive `queue.declare` (ready messages and consumers only).
//!
//! Only GETs and passive declares are ever sent: the source never writes.

mod access;
mod amqp;
mod client;
mod credentials;
mod filter;
mod management;
mod prometheus;
mod sample;
mod service;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::{RabbitMethod, RabbitSourceConfig, Redacted};
use crate::snapshot::QueueScope;
use crate::sources::{PollOutput, Source, SourceError};

pub use filter::QueueFilter;
pub use management::PAGE_SIZE;

/// A RabbitMQ broker or cluster being watched.
pub struct RabbitSource {
    /// The source's configuration.
    config: RabbitSourceConfig,
    /// Which queues to report; shared with readers as the source's scope.
    filter: Arc<QueueFilter>,
    /// The method's own state (HTTP client, AMQP connection).
    method: Method,
    /// Acknowledgement readings across polls, for the measured service
    /// time (the AMQP method reads no acknowledgements: never measured).
    acks: service::AckMeter,
}

/// Per-method state kept between polls.
#[derive(Debug)]
enum Method {
    /// The management API.
    Management(management::Management),
    /// The Prometheus plugin.
    Prometheus(prometheus::Prometheus),
    /// AMQP passive declares.
    Amqp(amqp::Amqp),
}

impl std::fmt::Debug for RabbitSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RabbitSource")
            .field("name", &self.config.name)
            .field("method", &self.config.method)
            .field("url", &Redacted(&self.config.url).to_string())
            .field("state", &self.method)
            .finish()
    }
}

impl RabbitSource {
    /// Builds the source; nothing is contacted (and no file read) until the
    /// first poll, which reports any problem.
    pub fn new(config: RabbitSourceConfig) -> Self {
        let method = match config.method {
            RabbitMethod::Management => Method::Management(management::Management::default()),
            RabbitMethod::Prometheus => Method::Prometheus(prometheus::Prometheus::default()),
            RabbitMethod::Amqp => Method::Amqp(amqp::Amqp::default()),
        };
        RabbitSource {
            filter: Arc::new(QueueFilter::new(&config)),
            acks: service::AckMeter::holding(config.service_time_max_age),
            config,
            method,
        }
    }
}

/// True if the management API at `config.url` answers `/api/overview` with
/// a success within about a second. Used only with no config file, to decide
/// whether the default RabbitMQ source is live.
pub async fn probe_default(config: &RabbitSourceConfig) -> bool {
    let Ok(client) = client::HttpClient::with_bounds(config, Duration::from_secs(1), 1024 * 1024)
    else {
        return false;
    };
    let Ok(creds) = credentials::resolve(config) else {
        return false;
    };
    let Ok(base) = client::base_url(&config.url) else {
        return false;
    };
    let url = client::join(&base, &["api", "overview"]);
    client.get(&url, creds.as_ref()).await.is_ok()
}

impl Source for RabbitSource {
    async fn poll(&mut self) -> Result<PollOutput, SourceError> {
        let mut out = match &mut self.method {
            Method::Management(m) => m.poll(&self.config, &self.filter).await,
            Method::Prometheus(p) => p.poll(&self.config, &self.filter).await,
            Method::Amqp(a) => a.poll(&self.config, &self.filter).await,
        }?;
        self.acks.record(&mut out.queues, Instant::now());
        Ok(out)
    }

    fn scope(&self) -> Arc<dyn QueueScope> {
        self.filter.clone()
    }

    fn poll_timeout(&self) -> Duration {
        // Each request or AMQP operation is bounded by `timeout`; a poll makes
        // several (pages, vhosts, nodes, declares), so bound the whole generously.
        self.config
            .timeout
            .saturating_mul(8)
            .max(self.config.poll_interval)
    }
}
