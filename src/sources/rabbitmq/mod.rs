//! The RabbitMQ source (management API, Prometheus plugin, or AMQP).
//!
//! PLACEHOLDER: being implemented in issue 4; polls fail with a config error.

use std::time::Duration;

use crate::config::RabbitSourceConfig;
use crate::sources::{PollOutput, Source, SourceError};

/// A RabbitMQ broker or cluster being watched.
#[derive(Debug)]
pub struct RabbitSource {
    /// The source's configuration.
    config: RabbitSourceConfig,
}

impl RabbitSource {
    /// Builds the source; nothing is contacted until the first poll.
    pub fn new(config: RabbitSourceConfig) -> Self {
        RabbitSource { config }
    }
}

/// True if the default local management API answers (used only when no config file is given).
pub async fn probe_default(_config: &RabbitSourceConfig) -> bool {
    false
}

impl Source for RabbitSource {
    async fn poll(&mut self) -> Result<PollOutput, SourceError> {
        Err(SourceError::Config(format!("rabbitmq source {} not implemented yet", self.config.name)))
    }

    fn poll_timeout(&self) -> Duration {
        self.config.timeout * 2
    }
}
