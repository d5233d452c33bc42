//! queue-exporter: work-queue metrics from Redis and RabbitMQ for Prometheus,
//! and a KEDA external scaler, from one process.
//!
//! Data flows one way: sources poll their backends and publish immutable
//! snapshots into the [`hub`]; readers ([`http`] and [`scaler`]) only read
//! the latest snapshots. See `ARCHITECTURE.md`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
// Outside tests, a failure is an error value or a proven-impossible case
// with a comment and an `allow`, never an unwrap, expect or panic.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod app;
pub mod config;
pub mod crypto;
pub mod discover;
pub mod exposition;
pub mod http;
pub mod hub;
pub mod listen;
pub mod plan;
pub mod scaler;
pub mod shutdown;
pub mod snapshot;
pub mod sources;
pub mod telemetry;
pub mod time;
