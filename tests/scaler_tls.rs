//! TLS and mutual TLS on the scaler's gRPC listener, with certificates made
//! by `rcgen` at test time (no key is ever committed).
mod scaler_common;
mod support;

use std::path::PathBuf;
use std::time::Duration;

use queue_exporter::scaler::proto::external_scaler_client::ExternalScalerClient;
use scaler_common::*;
use support::*;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

/// Writes the server's files and returns the `scaler:` config block.
fn tls_yaml(dir: &tempfile::TempDir, pki: &Pki, mutual: bool) -> String {
    let cert = write_file(dir, "server.pem", &pki.server.0);
    let key = write_file(dir, "server.key", &pki.server.1);
    let client_ca = if mutual {
        let ca = write_file(dir, "client-ca.pem", &pki.ca);
        format!("client_ca_file: {}", ca.display())
    } else {
        String::new()
    };
    format!(
        r#"scaler:
  tls:
    cert_file: {cert}
    key_file: {key}
    {client_ca}
"#,
        cert = cert.display(),
        key = key.display(),
    )
}

/// Connects over TLS trusting `ca`, optionally presenting a client identity,
/// and asks for a value. Any failure (handshake or RPC) is an `Err`.
async fn tls_call(port: u16, ca: &str, identity: Option<&(String, String)>) -> Result<f64, String> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name("localhost");
    if let Some((cert, key)) = identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    let endpoint = Endpoint::from_shared(format!("https://localhost:{port}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .tls_config(tls)
        .map_err(|e| e.to_string())?;
    call(endpoint).await
}

/// A plaintext client against the TLS port.
async fn plaintext_call(port: u16) -> Result<f64, String> {
    let endpoint = Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5));
    call(endpoint).await
}

/// Connects to `endpoint` and asks for the value of `work-queue`. Any
/// failure (handshake or RPC) is an `Err`.
async fn call(endpoint: Endpoint) -> Result<f64, String> {
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| format!("connect: {e:?}"))?;
    let mut c = ExternalScalerClient::new(channel);
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        metrics(&mut c, &[("queue", "work-queue")]),
    )
    .await
    .map_err(|_| "timed out".to_string())?;
    r.map(|(_, v)| v).map_err(|s| format!("rpc: {s:?}"))
}

fn start_redis_with_items() -> RedisServer {
    let redis = RedisServer::start();
    set_list_len(&mut redis.conn(), "work-queue", 6);
    redis
}

async fn start_app(redis: &RedisServer, tls_block: &str) -> TestApp {
    let yaml = format!(
        r#"{tls_block}sources:
  - name: main
    type: redis
    url: {url}
    poll_interval: 100ms
    queues:
      - key: work-queue
"#,
        url = redis.url
    );
    TestApp::start(&yaml).await
}

#[tokio::test]
async fn tls_serves_clients_that_trust_the_ca() {
    let redis = start_redis_with_items();
    let pki = make_pki("server");
    let dir = tempfile::tempdir().unwrap();
    let app = start_app(&redis, &tls_yaml(&dir, &pki, false)).await;
    let port = app.app().grpc_addr.unwrap().port();

    let v = wait_for("a value over TLS", Duration::from_secs(10), || async {
        tls_call(port, &pki.ca, None)
            .await
            .ok()
            .filter(|v| *v == 6.0)
    })
    .await;
    assert_eq!(v, 6.0);
    // Without client_ca_file, a client certificate is not required (but allowed).
    assert_eq!(tls_call(port, &pki.ca, Some(&pki.client)).await, Ok(6.0));
    // Plaintext is refused.
    assert!(plaintext_call(port).await.is_err());
    // A client that does not trust the server's CA refuses it.
    let other = make_pki("other");
    assert!(tls_call(port, &other.ca, None).await.is_err());
    app.stop().await;
}

#[tokio::test]
async fn mutual_tls_refuses_clients_without_a_trusted_certificate() {
    let redis = start_redis_with_items();
    let pki = make_pki("mtls");
    let dir = tempfile::tempdir().unwrap();
    let app = start_app(&redis, &tls_yaml(&dir, &pki, true)).await;
    let port = app.app().grpc_addr.unwrap().port();

    // KEDA with tlsClientCert/tlsClientKey from a TriggerAuthentication.
    let v = wait_for("a value over mTLS", Duration::from_secs(10), || async {
        tls_call(port, &pki.ca, Some(&pki.client))
            .await
            .ok()
            .filter(|v| *v == 6.0)
    })
    .await;
    assert_eq!(v, 6.0);

    // No client certificate: refused.
    let no_cert = tls_call(port, &pki.ca, None).await;
    let refused = no_cert.expect_err("a client without a certificate must be refused");
    assert!(
        refused.contains("CertificateRequired"),
        "refused by the server's TLS: {refused}"
    );
    // A certificate from another CA: refused.
    let rogue = make_pki("rogue");
    let wrong = tls_call(port, &pki.ca, Some(&rogue.client)).await;
    assert!(
        wrong.is_err(),
        "a client certificate from another CA must be refused: {wrong:?}"
    );
    // Plaintext: refused.
    assert!(plaintext_call(port).await.is_err());
    // The trusted client still works afterwards.
    assert_eq!(tls_call(port, &pki.ca, Some(&pki.client)).await, Ok(6.0));
    app.stop().await;
}

#[test]
fn unreadable_tls_files_are_reported_with_their_config_field() {
    let cfg = queue_exporter::config::GrpcTlsConfig {
        cert_file: PathBuf::from("/nonexistent/server.pem"),
        key_file: PathBuf::from("/nonexistent/server.key"),
        client_ca_file: None,
    };
    let e = queue_exporter::scaler::tls::server_config(&cfg).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with("scaler.tls.cert_file: cannot read /nonexistent/server.pem"),
        "{msg}"
    );
}
