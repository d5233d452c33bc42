//! Test PKI and TLS servers: a CA with a server and a client certificate
//! made by `rcgen` at test time (no key is ever committed), written to
//! files for configs, and a private `redis-server` that speaks only TLS.
//!
//! Test files include it next to `support`: `mod support; mod tls_support;`.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{free_port, write_file};

/// The test PKI is the shared one of `support`.
pub use crate::support::{Pki, make_pki};

/// A [`Pki`] written to files.
pub struct PkiFiles {
    /// The CA certificate.
    pub ca: PathBuf,
    /// The server certificate.
    pub server_cert: PathBuf,
    /// The server key.
    pub server_key: PathBuf,
    /// The client certificate.
    pub client_cert: PathBuf,
    /// The client key.
    pub client_key: PathBuf,
}

impl Pki {
    /// Writes every PEM into `dir`, named `{prefix}-ca.pem` and so on.
    pub fn write(&self, dir: &tempfile::TempDir, prefix: &str) -> PkiFiles {
        let f = |name: &str, pem: &str| write_file(dir, &format!("{prefix}-{name}"), pem);
        PkiFiles {
            ca: f("ca.pem", &self.ca),
            server_cert: f("server.pem", &self.server.0),
            server_key: f("server.key", &self.server.1),
            client_cert: f("client.pem", &self.client.0),
            client_key: f("client.key", &self.client.1),
        }
    }
}

/// A private `redis-server` listening only on a TLS port (`--port 0`),
/// requiring client certificates signed by its CA. Killed on drop.
pub struct TlsRedis {
    /// The TLS port.
    pub port: u16,
    /// The files of its PKI (server and client certificates, the CA).
    pub files: PkiFiles,
    child: Child,
    /// Holds the PEM files.
    _dir: tempfile::TempDir,
}

impl TlsRedis {
    /// Starts a server with a certificate of `pki`, requiring client
    /// certificates (`--tls-auth-clients yes`); returns once it answers PING
    /// over TLS.
    pub fn start(pki: &Pki) -> TlsRedis {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = pki.write(&dir, "redis");
        let port = free_port();
        let p = |p: &PathBuf| p.display().to_string();
        let child = Command::new("redis-server")
            .args(["--port", "0", "--bind", "127.0.0.1"])
            .args(["--tls-port", &port.to_string()])
            .args(["--tls-cert-file", &p(&files.server_cert)])
            .args(["--tls-key-file", &p(&files.server_key)])
            .args(["--tls-ca-cert-file", &p(&files.ca)])
            .args(["--tls-auth-clients", "yes"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (apt-get install redis-server)");
        let server = TlsRedis {
            port,
            files,
            child,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(mut c) = server.try_conn()
                && redis::cmd("PING").query::<String>(&mut c).is_ok()
            {
                return server;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server with TLS did not start on {port} (does Debian's build support --tls-port?)"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `rediss://127.0.0.1:{port}` (the server certificate names the IP too).
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.port)
    }

    fn try_conn(&self) -> redis::RedisResult<redis::Connection> {
        queue_exporter::crypto::install_crypto_provider();
        let read = |p: &PathBuf| std::fs::read(p).expect("read PEM");
        let client = redis::Client::build_with_tls(
            format!("rediss://127.0.0.1:{}", self.port),
            redis::TlsCertificates {
                client_tls: Some(redis::ClientTlsConfig {
                    client_cert: read(&self.files.client_cert),
                    client_key: read(&self.files.client_key),
                }),
                root_cert: Some(read(&self.files.ca)),
            },
        )?;
        client.get_connection_with_timeout(Duration::from_secs(2))
    }

    /// A connection (over TLS, with the client certificate) for writing
    /// test data; the exporter never writes.
    pub fn conn(&self) -> redis::Connection {
        self.try_conn().expect("connect to the TLS redis")
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
