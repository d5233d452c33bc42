//! Binding listeners, shared by the HTTP server and the gRPC scaler.

use std::net::SocketAddr;

use tokio::net::TcpListener;

/// A listener could not be bound.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr}: {source}")]
pub struct BindError {
    /// The address asked for.
    pub addr: SocketAddr,
    /// The OS error.
    pub source: std::io::Error,
}

/// Binds `addr`, returning the listener and the bound address (port 0 picks a free one).
pub async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), BindError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| BindError { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| BindError { addr, source })?;
    Ok((listener, local))
}
