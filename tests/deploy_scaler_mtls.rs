//! docs/kubernetes.md's mutual-TLS steps, run as far as a machine without a
//! cluster can: `make-certs` (in a copy of `deploy/`), `kubectl kustomize`
//! of `overlays/scaler-mtls` and `examples/mtls`, then the exporter binary
//! started with the overlay's Deployment environment and the files of the
//! Secret it mounts, exactly as the build has them, and called as KEDA
//! calls it for the example's trigger: over TLS to the name in
//! `scalerAddress`, with the CA and client certificate of the example's
//! Secret. The answer is the queue's depth; without the client certificate,
//! or over plain gRPC, the call is refused.
mod deploy_support;
mod reliability_support;
mod scaler_common;
mod support;

use std::collections::HashMap;
use std::time::Duration;

use deploy_support::{kind, kustomize, name, secret_value};
use queue_exporter::scaler::proto::external_scaler_client::ExternalScalerClient;
use reliability_support::Exporter;
use serde_json::Value;
use support::RedisServer;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

/// The one object of `kind` named `n`.
fn find<'a>(docs: &'a [Value], k: &str, n: &str) -> &'a Value {
    docs.iter()
        .find(|d| kind(d) == k && name(d) == n)
        .unwrap_or_else(|| panic!("no {k} {n}"))
}

/// Asks the scaler at `port` for the trigger `meta`'s value as KEDA would:
/// TLS to `host` (the scalerAddress's), trusting `ca`, presenting
/// `identity`. Any failure (handshake or RPC) is an `Err`.
async fn keda_call(
    port: u16,
    host: &str,
    ca: &[u8],
    identity: Option<(&[u8], &[u8])>,
    meta: &[(&str, &str)],
) -> Result<f64, String> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name(host);
    if let Some((cert, key)) = identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    let endpoint = Endpoint::from_shared(format!("https://127.0.0.1:{port}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .tls_config(tls)
        .map_err(|e| e.to_string())?;
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| format!("connect: {e:?}"))?;
    let mut client = ExternalScalerClient::new(channel);
    let answer = tokio::time::timeout(
        Duration::from_secs(5),
        scaler_common::metrics(&mut client, meta),
    )
    .await
    .map_err(|_| "timed out".to_string())?;
    answer.map(|(_, v)| v).map_err(|s| format!("rpc: {s:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mtls_overlay_serves_the_examples_trigger_and_refuses_clients_without_its_certificate()
{
    let exporter = kustomize("deploy/kubernetes/overlays/scaler-mtls");
    let examples = kustomize("deploy/kubernetes/examples/mtls");

    // The exporter's files: the Secret the Deployment mounts, written where
    // the pod would see them (moved under a temp dir), and its environment.
    let pod = &find(&exporter, "Deployment", "queue-exporter")["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let files = tempfile::tempdir().unwrap();
    let mut moved: Vec<(String, String)> = Vec::new();
    for mount in container["volumeMounts"].as_array().unwrap() {
        let volume = pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == mount["name"])
            .unwrap();
        let Some(secret_name) = volume["secret"]["secretName"].as_str() else {
            continue;
        };
        let secret = find(&exporter, "Secret", secret_name);
        let dir = files.path().join(name(secret));
        std::fs::create_dir_all(&dir).unwrap();
        for key in secret["data"]
            .as_object()
            .or(secret["stringData"].as_object())
            .unwrap()
            .keys()
        {
            std::fs::write(dir.join(key), secret_value(secret, key).unwrap()).unwrap();
        }
        moved.push((
            mount["mountPath"].as_str().unwrap().to_string(),
            dir.display().to_string(),
        ));
    }
    let env: Vec<(String, String)> = container["env"]
        .as_array()
        .expect("the overlay sets scaler.tls through the environment")
        .iter()
        .map(|e| {
            let mut value = e["value"].as_str().unwrap().to_string();
            for (from, to) in &moved {
                value = value.replace(from.as_str(), to);
            }
            (e["name"].as_str().unwrap().to_string(), value)
        })
        .collect();
    assert!(
        env.iter()
            .any(|(k, _)| k == "QUEUE_EXPORTER__SCALER__TLS__CLIENT_CA_FILE"),
        "mutual TLS: {env:?}"
    );

    // The ConfigMap's config, its Redis source moved to a private server
    // holding the example's queue (the RabbitMQ source left out).
    let redis = RedisServer::start();
    for i in 0..4 {
        redis.run::<()>(&[b"RPUSH", b"jobs:dlq", format!("dead-{i}").as_bytes()]);
    }
    let cm = exporter.iter().find(|d| kind(d) == "ConfigMap").unwrap();
    let mut config: Value =
        serde_norway::from_str(cm["data"]["config.yaml"].as_str().unwrap()).unwrap();
    let config = config.as_object_mut().unwrap();
    config.remove("listen");
    let sources = config["sources"].as_array_mut().unwrap();
    sources.retain(|s| s["type"] == "redis");
    sources[0]["url"] = Value::String(redis.url.clone());
    sources[0].as_object_mut().unwrap().remove("password_file");
    let body = serde_norway::to_string(&config).unwrap();
    let env_refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let app = Exporter::start(&body, &[], &env_refs).await;
    let port = app.grpc.port();

    // KEDA's side: the example's trigger and the Secret its
    // TriggerAuthentication names.
    let so = find(&examples, "ScaledObject", "dlq-worker");
    let trigger = &so["spec"]["triggers"][0];
    let address = trigger["metadata"]["scalerAddress"].as_str().unwrap();
    let host = address.rsplit_once(':').unwrap().0;
    let auth = find(
        &examples,
        "TriggerAuthentication",
        trigger["authenticationRef"]["name"].as_str().unwrap(),
    );
    let param: HashMap<&str, Vec<u8>> = auth["spec"]["secretTargetRef"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let secret = find(&examples, "Secret", r["name"].as_str().unwrap());
            (
                r["parameter"].as_str().unwrap(),
                secret_value(secret, r["key"].as_str().unwrap()).unwrap(),
            )
        })
        .collect();
    let meta: Vec<(&str, &str)> = trigger["metadata"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str().unwrap()))
        .collect();
    let identity = Some((
        param["tlsClientCert"].as_slice(),
        param["tlsClientKey"].as_slice(),
    ));

    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let value = loop {
        match keda_call(port, host, &param["caCert"], identity, &meta).await {
            Ok(v) if v == 4.0 => break v,
            other => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the example's trigger over mTLS: {other:?}; exporter stderr:\n{}",
                    app.stderr()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert_eq!(value, 4.0);

    // No client certificate, or plain gRPC: refused.
    let no_cert = keda_call(port, host, &param["caCert"], None, &meta).await;
    assert!(
        no_cert.is_err(),
        "a client without a certificate: {no_cert:?}"
    );
    let plain = Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await;
    let plain = match plain {
        Ok(channel) => scaler_common::metrics(&mut ExternalScalerClient::new(channel), &meta)
            .await
            .map(|(_, v)| v)
            .map_err(|s| s.to_string()),
        Err(e) => Err(e.to_string()),
    };
    assert!(plain.is_err(), "plain gRPC to the mTLS scaler: {plain:?}");
    // A name the certificate does not carry (the ClusterIP Service's) fails
    // the client's check: scalerAddress must be the headless Service.
    let wrong_name = keda_call(
        port,
        "queue-exporter.monitoring.svc.cluster.local",
        &param["caCert"],
        identity,
        &meta,
    )
    .await;
    assert!(wrong_name.is_err(), "{wrong_name:?}");
}
