//! TLS files of a `rediss://` source (`tls: { ca_file, cert_file, key_file }`):
//! read, their PEM checked, and handed to the `redis` crate. `check` and
//! startup call [`certificates`] first, so a bad path fails there with the
//! field and file named instead of at the first poll.

use redis::{ClientTlsConfig, TlsCertificates};

use crate::config::RedisTlsConfig;
use crate::crypto::{PemFileError, read_pem_certs, read_pem_key};

/// A TLS file of a Redis source that cannot be used. The message names the
/// field (relative to the source, e.g. `tls.ca_file`) and the file, never
/// the file's contents.
#[derive(Debug, thiserror::Error)]
#[error("tls.{field}: {error}")]
pub struct RedisTlsError {
    /// The config field naming the file.
    pub field: &'static str,
    /// Why the file cannot be used.
    #[source]
    pub error: PemFileError,
}

/// Reads and checks the configured files. With no `ca_file` the `redis`
/// crate's built-in web roots verify the server.
pub fn certificates(cfg: &RedisTlsConfig) -> Result<TlsCertificates, RedisTlsError> {
    let at = |field| move |error| RedisTlsError { field, error };
    let root_cert = match &cfg.ca_file {
        Some(path) => Some(read_pem_certs(path).map_err(at("ca_file"))?.0),
        None => None,
    };
    let client_tls = match (&cfg.cert_file, &cfg.key_file) {
        (Some(cert), Some(key)) => Some(ClientTlsConfig {
            client_cert: read_pem_certs(cert).map_err(at("cert_file"))?.0,
            client_key: read_pem_key(key).map_err(at("key_file"))?.0,
        }),
        // Config validation requires both or neither.
        _ => None,
    };
    Ok(TlsCertificates {
        client_tls,
        root_cert,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_field_and_the_file_but_not_the_contents() {
        let dir = tempfile::tempdir().unwrap();
        let missing = RedisTlsConfig {
            ca_file: Some(dir.path().join("nope.pem")),
            ..RedisTlsConfig::default()
        };
        let e = certificates(&missing).unwrap_err().to_string();
        assert!(e.starts_with("tls.ca_file: cannot read "), "{e}");
        assert!(e.contains("nope.pem"), "{e}");

        let garbage = dir.path().join("key.pem");
        std::fs::write(&garbage, "hunter2-not-a-key").unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "").unwrap();
        let e = certificates(&RedisTlsConfig {
            ca_file: Some(ca.clone()),
            ..RedisTlsConfig::default()
        })
        .unwrap_err()
        .to_string();
        assert!(e.ends_with("ca.pem: holds no PEM certificate"), "{e}");
        let e = certificates(&RedisTlsConfig {
            ca_file: None,
            cert_file: Some(garbage.clone()),
            key_file: Some(garbage.clone()),
        })
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("tls.cert_file: "), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
    }
}
