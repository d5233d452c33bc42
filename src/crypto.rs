//! The process-wide rustls crypto provider, shared by every TLS user (Redis `rediss://`,
//! RabbitMQ HTTPS and `amqps://`, the gRPC and HTTP listeners), and the PEM
//! file readers the TLS configs share.

use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Chooses rustls' process-wide crypto provider. Several dependencies enable
/// different providers (ring via tonic, aws-lc-rs via reqwest), and rustls then
/// refuses to guess; without this, the first TLS connection would fail.
pub fn install_crypto_provider() {
    // Err only means a provider is already installed, which is what we want.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

/// A PEM file that cannot be used. Names the file, never its contents (a
/// key file's bytes are a secret); the caller adds the config field.
#[derive(Debug, thiserror::Error)]
pub enum PemFileError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file was read but holds nothing usable.
    #[error("{}: {problem}", .path.display())]
    Content {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: &'static str,
    },
}

/// A TLS file of a source (`tls: { ca_file, cert_file, key_file }`, Redis
/// or RabbitMQ) that cannot be used. The message names the field (relative
/// to the source, e.g. `tls.ca_file`) and the file, never the file's
/// contents.
#[derive(Debug, thiserror::Error)]
#[error("tls.{field}: {error}")]
pub struct TlsFileError {
    /// The config field naming the file.
    pub field: &'static str,
    /// Why the file cannot be used.
    #[source]
    pub error: PemFileError,
}

/// The files of a source's `tls:` block, read and parsed as they will be
/// used: `ca_file` (certificates), `cert_file` (a certificate chain) and
/// `key_file` (its private key). `check` and startup read them first, so a
/// wrong path fails there, naming the field and the file, instead of
/// leaving the source down at its first poll.
pub struct ClientTlsFiles {
    /// The CA bundle the server's certificate must chain to.
    pub root_cert: Option<Vec<u8>>,
    /// The client certificate chain and its key, both PEM as read.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

/// Reads and checks `ca_file`, `cert_file` and `key_file` (the config's
/// validation requires the last two together; one alone is ignored here).
pub fn client_tls_files(
    ca_file: Option<&Path>,
    cert_file: Option<&Path>,
    key_file: Option<&Path>,
) -> Result<ClientTlsFiles, TlsFileError> {
    let at = |field| move |error| TlsFileError { field, error };
    let root_cert = match ca_file {
        Some(path) => Some(read_pem_certs(path).map_err(at("ca_file"))?.0),
        None => None,
    };
    let identity = match (cert_file, key_file) {
        (Some(cert), Some(key)) => Some((
            read_pem_certs(cert).map_err(at("cert_file"))?.0,
            read_pem_key(key).map_err(at("key_file"))?.0,
        )),
        _ => None,
    };
    Ok(ClientTlsFiles {
        root_cert,
        identity,
    })
}

/// Reads a PEM file that must hold at least one certificate, all valid;
/// returns the bytes as read and the parsed certificates.
pub fn read_pem_certs(
    path: &Path,
) -> Result<(Vec<u8>, Vec<CertificateDer<'static>>), PemFileError> {
    let bytes = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| content(path, "is not valid PEM"))?;
    if certs.is_empty() {
        return Err(content(path, "holds no PEM certificate"));
    }
    Ok((bytes, certs))
}

/// Reads a PEM file that must hold a private key (PKCS#8, PKCS#1 or SEC1);
/// returns the bytes as read and the parsed key.
pub fn read_pem_key(path: &Path) -> Result<(Vec<u8>, PrivateKeyDer<'static>), PemFileError> {
    let bytes = read(path)?;
    // The parser's error is not shown: only what is missing.
    let key = PrivateKeyDer::from_pem_slice(&bytes)
        .map_err(|_| content(path, "holds no PEM private key"))?;
    Ok((bytes, key))
}

fn read(path: &Path) -> Result<Vec<u8>, PemFileError> {
    std::fs::read(path).map_err(|source| PemFileError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn content(path: &Path, problem: &'static str) -> PemFileError {
    PemFileError::Content {
        path: path.to_path_buf(),
        problem,
    }
}
