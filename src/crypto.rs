//! The process-wide rustls crypto provider, shared by every TLS user (Redis `rediss://`,
//! RabbitMQ HTTPS and `amqps://`, the gRPC listener).

/// Chooses rustls' process-wide crypto provider. Several dependencies enable
/// different providers (ring via tonic, aws-lc-rs via reqwest), and rustls then
/// refuses to guess; without this, the first TLS connection would fail.
pub fn install_crypto_provider() {
    // Err only means a provider is already installed, which is what we want.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}
