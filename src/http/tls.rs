//! HTTPS for the HTTP listener (`web.tls_server_config`): the rustls server
//! config, and a [`TlsListener`] that axum serves like a TCP listener.
//! Handshakes run on their own tasks (bounded in number and time), so a
//! slow or silent client never holds up other clients' connections.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::config::{ClientAuthType, TlsVersion, WebTlsConfig};
use crate::crypto::{read_pem_certs, read_pem_key};
use crate::http::HttpError;
use crate::shutdown::Shutdown;

/// How long a client gets to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshakes in progress at once; further connections wait in the
/// kernel's accept queue.
const MAX_HANDSHAKES: usize = 256;

/// Handshaken connections waiting for the HTTP server to take them.
const READY_QUEUE: usize = 64;

/// Reads the certificate, key and client CA into a rustls server config
/// that offers HTTP/1.1 (the HTTP server speaks only that; clients offering
/// HTTP/2 too, as Prometheus does, settle on it). Errors name the `web.tls_server_config`
/// field and the file.
pub fn server_config(cfg: &WebTlsConfig) -> Result<rustls::ServerConfig, HttpError> {
    crate::crypto::install_crypto_provider();
    let file_error = |field| move |error| HttpError::TlsFile { field, error };
    let (_, certs) = read_pem_certs(&cfg.cert_file).map_err(file_error("cert_file"))?;
    let (_, key) = read_pem_key(&cfg.key_file).map_err(file_error("key_file"))?;
    let builder = rustls::ServerConfig::builder_with_provider(Arc::new(provider(cfg)))
        .with_protocol_versions(&versions(cfg))
        .map_err(|error| HttpError::Tls {
            field: "cipher_suites",
            error,
        })?;
    let builder = match (cfg.client_auth_type, &cfg.client_ca_file) {
        (ClientAuthType::NoClientCert, _) | (_, None) => builder.with_no_client_auth(),
        (auth, Some(ca)) => {
            let (_, cas) = read_pem_certs(ca).map_err(file_error("client_ca_file"))?;
            let mut roots = RootCertStore::empty();
            for ca in cas {
                roots.add(ca).map_err(|e| HttpError::Tls {
                    field: "client_ca_file",
                    error: e,
                })?;
            }
            let verifier = WebPkiClientVerifier::builder(Arc::new(roots));
            let verifier = if auth == ClientAuthType::VerifyClientCertIfGiven {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier.build().map_err(|e| HttpError::Tls {
                field: "client_ca_file",
                error: rustls::Error::General(e.to_string()),
            })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|error| HttpError::Tls {
            field: "key_file",
            error,
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.ignore_client_order = cfg.prefer_server_cipher_suites;
    Ok(config)
}

/// The process's crypto provider narrowed to `cipher_suites` (TLS 1.2
/// suites as listed, every TLS 1.3 suite, as Go does) and
/// `curve_preferences` (in their order); names were checked at load.
fn provider(cfg: &WebTlsConfig) -> rustls::crypto::CryptoProvider {
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    if !cfg.cipher_suites.is_empty() {
        let all = std::mem::take(&mut provider.cipher_suites);
        let (tls13, tls12): (Vec<_>, Vec<_>) = all
            .into_iter()
            .partition(|s| matches!(s, rustls::SupportedCipherSuite::Tls13(_)));
        provider.cipher_suites = tls13;
        for wanted in &cfg.cipher_suites {
            if let Some(s) = tls12.iter().find(|s| s.suite() == *wanted) {
                provider.cipher_suites.push(*s);
            }
        }
    }
    if !cfg.curve_preferences.is_empty() {
        let all = std::mem::take(&mut provider.kx_groups);
        provider.kx_groups = cfg
            .curve_preferences
            .iter()
            .filter_map(|wanted| all.iter().find(|g| g.name() == *wanted).copied())
            .collect();
    }
    provider
}

/// The TLS versions between `min_version` and `max_version`.
fn versions(cfg: &WebTlsConfig) -> Vec<&'static rustls::SupportedProtocolVersion> {
    let min = cfg.min_version.unwrap_or(TlsVersion::Tls12);
    let max = cfg.max_version.unwrap_or(TlsVersion::Tls13);
    [
        (TlsVersion::Tls12, &rustls::version::TLS12),
        (TlsVersion::Tls13, &rustls::version::TLS13),
    ]
    .into_iter()
    .filter(|(v, _)| (min..=max).contains(v))
    .map(|(_, p)| p)
    .collect()
}

/// A listener yielding connections whose TLS handshake has completed.
/// A background task accepts TCP connections and runs each handshake on
/// its own task; it stops on shutdown or when this listener is dropped.
#[derive(Debug)]
pub struct TlsListener {
    /// Handshaken connections, in the order they completed.
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    /// The bound address.
    local: SocketAddr,
}

impl TlsListener {
    /// Starts accepting on `tcp` with `config`.
    pub fn new(
        tcp: TcpListener,
        config: Arc<rustls::ServerConfig>,
        shutdown: Shutdown,
    ) -> std::io::Result<TlsListener> {
        let local = tcp.local_addr()?;
        let (tx, ready) = mpsc::channel(READY_QUEUE);
        tokio::spawn(accept_loop(tcp, TlsAcceptor::from(config), tx, shutdown));
        Ok(TlsListener { ready, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accept loop ended (shutdown): the server's own shutdown
            // signal ends serving; nothing more will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

/// Accepts TCP connections until shutdown and hands each to a handshake task.
async fn accept_loop(
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    ready: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
    mut shutdown: Shutdown,
) {
    let handshakes = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    loop {
        let permit = tokio::select! {
            p = handshakes.clone().acquire_owned() => p,
            () = shutdown.recv() => return,
        };
        // The semaphore is never closed.
        let Ok(permit) = permit else { return };
        let (stream, peer) = tokio::select! {
            r = tcp.accept() => match r {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of file descriptors and the like: wait, as axum does.
                    tracing::debug!(error = %e, "accepting an HTTPS connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = shutdown.recv() => return,
            () = ready.closed() => return,
        };
        let (acceptor, ready) = (acceptor.clone(), ready.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let _ = stream.set_nodelay(true);
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let _ = ready.send((tls, peer)).await;
                }
                // Scanners, plaintext clients and refused client
                // certificates end here; not worth more than debug.
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        });
    }
}
