//! TLS files of a `rediss://` source (`tls: { ca_file, cert_file, key_file }`):
//! read, their PEM checked, and handed to the `redis` crate. `check` and
//! startup call [`certificates`] first, so a bad path fails there with the
//! field and file named instead of at the first poll.

use redis::{ClientTlsConfig, TlsCertificates};

use crate::config::RedisTlsConfig;
pub use crate::crypto::TlsFileError as RedisTlsError;
use crate::crypto::client_tls_files;

/// Reads and checks the configured files. With no `ca_file` the `redis`
/// crate's built-in web roots verify the server.
pub fn certificates(cfg: &RedisTlsConfig) -> Result<TlsCertificates, RedisTlsError> {
    let files = client_tls_files(
        cfg.ca_file.as_deref(),
        cfg.cert_file.as_deref(),
        cfg.key_file.as_deref(),
    )?;
    Ok(TlsCertificates {
        client_tls: files
            .identity
            .map(|(client_cert, client_key)| ClientTlsConfig {
                client_cert,
                client_key,
            }),
        root_cert: files.root_cert,
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
