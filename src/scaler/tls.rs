//! TLS for the gRPC listener: server certificate, and client certificates
//! (mTLS) when `client_ca_file` is set. KEDA presents its side through a
//! TriggerAuthentication (`caCert`, `tlsClientCert`, `tlsClientKey`).

use std::path::Path;

use tonic::transport::{Certificate, Identity, ServerTlsConfig};

use crate::config::GrpcTlsConfig;
use crate::scaler::ScalerError;

/// Reads the configured PEM files into a tonic TLS config. With a client CA,
/// clients must present a certificate it signed; without one, any client may
/// connect over TLS.
pub fn server_config(cfg: &GrpcTlsConfig) -> Result<ServerTlsConfig, ScalerError> {
    let cert = read("cert_file", &cfg.cert_file)?;
    let key = read("key_file", &cfg.key_file)?;
    let mut tls = ServerTlsConfig::new().identity(Identity::from_pem(cert, key));
    if let Some(ca) = &cfg.client_ca_file {
        let ca = read("client_ca_file", ca)?;
        tls = tls
            .client_ca_root(Certificate::from_pem(ca))
            .client_auth_optional(false);
    }
    Ok(tls)
}

/// Reads one file, naming the config field on failure.
fn read(field: &'static str, path: &Path) -> Result<Vec<u8>, ScalerError> {
    std::fs::read(path).map_err(|source| ScalerError::TlsFile {
        field,
        path: path.to_path_buf(),
        source,
    })
}
