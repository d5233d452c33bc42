//! The KEDA external-scaler gRPC service.
//!
//! PLACEHOLDER: being implemented in issue 5.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::config::ScalerConfig;
use crate::hub::Hub;
use crate::shutdown::Shutdown;
use crate::telemetry::Telemetry;

/// A problem starting or running the gRPC listener.
#[derive(Debug, thiserror::Error)]
pub enum ScalerError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Binds the gRPC listener (port 0 picks a free one).
pub async fn bind(addr: SocketAddr) -> Result<(tokio::net::TcpListener, SocketAddr), ScalerError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ScalerError::Bind { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| ScalerError::Bind { addr, source })?;
    Ok((listener, local))
}

/// Serves the external scaler until shutdown.
pub async fn serve(
    _listener: tokio::net::TcpListener,
    _hub: Hub,
    _config: ScalerConfig,
    _telemetry: Arc<Telemetry>,
    mut shutdown: Shutdown,
) -> Result<(), ScalerError> {
    shutdown.recv().await;
    Ok(())
}
