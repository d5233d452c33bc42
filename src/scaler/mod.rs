//! The KEDA external-scaler gRPC service.
//!
//! A reader like `/metrics`: every answer is computed from the latest
//! snapshots in the [`Hub`], never from a backend call, so any number of
//! ScaledObjects and KEDA replicas cost the backends nothing.
//!
//! - [`metadata`]: parses and validates a trigger's `scalerMetadata`.
//! - [`selector`]: the `queue` key, an exact name or a glob.
//! - [`query`]: selects queues from the snapshots and aggregates one value.
//! - [`names`]: the path-safe metric names handed to the HPA.
//! - [`service`]: the tonic service (unary RPCs and push streams).
//! - [`record`]: each answer handed to the telemetry's decision store.
//! - [`tls`]: loading the listener's certificates.
//! - [`units`]: which unit of a preset (a queue, or `(all)`) holds an asked state.
//! - [`wait`]: the `WaitTime` model (replicas from backlog, age, arrivals, service time).
//! - [`wait_inputs`]: that model's inputs, read from a snapshot.
//! - [`ask`]: the `ask` command, a client of a running scaler.
//! - [`proto`]: code generated from `proto/externalscaler.proto`.

pub mod ask;
pub mod finite;
pub mod held;
pub mod keys;
pub mod metadata;
pub mod mode;
pub mod names;
pub mod query;
pub mod record;
pub mod selector;
pub mod service;
pub mod tls;
pub mod units;
pub mod wait;
pub mod wait_inputs;

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use crate::config::ScalerConfig;
use crate::hub::Hub;
use crate::shutdown::Shutdown;
use crate::telemetry::Telemetry;

use proto::external_scaler_server::ExternalScalerServer;
use service::Scaler;

/// Code generated from `proto/externalscaler.proto` (KEDA's protocol), with
/// both server and client, so tests and tools speak exactly what we serve.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("externalscaler");

    /// The encoded file descriptor set, served by `tonic-reflection`.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/externalscaler_descriptor.bin"));
}

/// The fully qualified gRPC service name, as used by health checks.
pub const SERVICE_NAME: &str = "externalscaler.ExternalScaler";

/// Concurrent streams allowed on one HTTP/2 connection. KEDA multiplexes one
/// `StreamIsActive` per ScaledObject over few connections, so hyper's default
/// of 200 would make the 201st ScaledObject wait; this bound still stops a
/// single client from opening an unbounded number.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 10_000;

/// HTTP/2 ping interval, so streams of a vanished KEDA pod are noticed and freed.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);

/// How long an unanswered HTTP/2 ping may take before the connection is closed.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// After shutdown, how long connections get to drain before they are dropped.
/// Our own streams end at once; this bounds streams we do not control (a
/// health `Watch`), and stays below the process-wide drain timeout.
const FORCE_CLOSE_AFTER: Duration = Duration::from_secs(3);

/// A problem starting or running the gRPC listener.
#[derive(Debug, thiserror::Error)]
pub enum ScalerError {
    /// The address could not be bound.
    #[error(transparent)]
    Bind(#[from] crate::listen::BindError),
    /// A TLS file (certificate, key or client CA) could not be read.
    #[error("scaler.tls.{field}: cannot read {}: {source}", .path.display())]
    TlsFile {
        /// Which config field names the file.
        field: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The certificates were read but rejected (bad PEM, key mismatch, ...).
    #[error("scaler.tls: {0}")]
    Tls(#[source] tonic::transport::Error),
    /// The reflection service could not be built from the descriptor set.
    #[error("gRPC reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// The server failed while running.
    #[error("gRPC server: {0}")]
    Serve(#[source] tonic::transport::Error),
}

/// Serves the external scaler, grpc.health.v1 and reflection until shutdown.
/// Open streams end when shutdown fires. `config` may change while serving
/// (a config reload): `max_staleness` follows it; TLS is set up once, here.
pub async fn serve(
    listener: tokio::net::TcpListener,
    hub: Hub,
    config: tokio::sync::watch::Receiver<ScalerConfig>,
    telemetry: Arc<Telemetry>,
    shutdown: Shutdown,
) -> Result<(), ScalerError> {
    let tls = config.borrow().tls.clone();
    let mut builder = tonic::transport::Server::builder()
        .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION)
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .tcp_nodelay(true);
    if let Some(tls) = &tls {
        builder = builder
            .tls_config(tls::server_config(tls)?)
            .map_err(ScalerError::Tls)?;
    }

    let (reporter, health_service) = tonic_health::server::health_reporter();
    set_health(&reporter, ServingStatus::NotServing).await;

    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;

    let scaler = Scaler::new(hub.clone(), config, telemetry, shutdown.clone());
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    let mut stop = shutdown.clone();
    let server = builder
        .add_service(health_service)
        .add_service(reflection)
        .add_service(ExternalScalerServer::new(scaler))
        .serve_with_incoming_shutdown(incoming, async move { stop.recv().await });

    let mut force = shutdown.clone();
    let force_close = async move {
        force.recv().await;
        tokio::time::sleep(FORCE_CLOSE_AFTER).await;
    };
    let health = report_health(hub, reporter, shutdown);

    let served = async {
        let mut server = pin!(server);
        tokio::select! {
            r = &mut server => r.map_err(ScalerError::Serve),
            () = force_close => {
                tracing::warn!("gRPC connections still open {FORCE_CLOSE_AFTER:?} after shutdown; closing them");
                Ok(())
            }
        }
    };
    let (result, ()) = tokio::join!(served, health);
    result
}

/// Reports NOT_SERVING until the first successful poll of any source, then
/// SERVING, and NOT_SERVING again on shutdown. Woken by snapshot updates.
/// Sets the status of both the server (`""`) and the scaler service.
async fn set_health(reporter: &HealthReporter, status: ServingStatus) {
    for service in ["", SERVICE_NAME] {
        reporter.set_service_status(service, status).await;
    }
}

async fn report_health(hub: Hub, reporter: HealthReporter, mut shutdown: Shutdown) {
    let mut changes = hub.subscribe();
    loop {
        if hub.any_success() {
            set_health(&reporter, ServingStatus::Serving).await;
            tracing::debug!("gRPC health: SERVING");
            break;
        }
        tokio::select! {
            () = shutdown.recv() => break,
            changed = changes.changed() => if changed.is_err() { break },
        }
    }
    shutdown.recv().await;
    set_health(&reporter, ServingStatus::NotServing).await;
}
