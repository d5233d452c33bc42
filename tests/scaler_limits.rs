//! Trigger metadata beyond the documented limits (keys, key length, value
//! length, total bytes), sent by a real gRPC client to the running scaler:
//! every RPC answers `INVALID_ARGUMENT` naming the key at fault, messages
//! up to gRPC's own 4 MiB limit included, and the server keeps answering
//! good requests afterwards.
mod scaler_common;
mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use queue_exporter::scaler::metadata::{MAX_KEY_BYTES, MAX_KEYS, MAX_TOTAL_BYTES, MAX_VALUE_BYTES};
use queue_exporter::scaler::proto::{GetMetricsRequest, ScaledObjectRef};
use scaler_common::*;
use support::*;
use tonic::Code;

/// Metadata as key/value pairs.
type Pairs = Vec<(String, String)>;

/// A ScaledObjectRef with exactly `meta` (no keys added).
fn raw(meta: HashMap<String, String>) -> ScaledObjectRef {
    ScaledObjectRef {
        name: "worker".into(),
        namespace: "default".into(),
        scaler_metadata: meta,
    }
}

/// Every RPC's answer to `r` (unary ones, and the opening of both streams).
async fn all_answers(c: &mut Client, r: &ScaledObjectRef) -> Vec<(&'static str, tonic::Status)> {
    let mut out = Vec::new();
    let mut push = |name, result: Result<(), tonic::Status>| {
        out.push((name, result.expect_err(name)));
    };
    push(
        "GetMetricSpec",
        c.get_metric_spec(r.clone()).await.map(drop),
    );
    push(
        "GetMetrics",
        c.get_metrics(GetMetricsRequest {
            scaled_object_ref: Some(r.clone()),
            metric_name: String::new(),
        })
        .await
        .map(drop),
    );
    push("IsActive", c.is_active(r.clone()).await.map(drop));
    push(
        "StreamIsActive",
        c.stream_is_active(r.clone()).await.map(drop),
    );
    push(
        "StreamMetricSpec",
        c.stream_metric_spec(r.clone()).await.map(drop),
    );
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_metadata_is_invalid_argument_naming_the_key() {
    let redis = RedisServer::start();
    set_list_len(&mut redis.conn(), "work", 3);
    let app = TestApp::start(&redis_config(&redis.url, "100ms", "- key: work")).await;
    let channel =
        tonic::transport::Endpoint::from_shared(format!("http://{}", app.app().grpc_addr.unwrap()))
            .unwrap()
            .connect()
            .await
            .unwrap();
    // Our client may send up to 16 MiB, so the server's own limit is what is tested.
    let mut c = Client::new(channel).max_encoding_message_size(16 << 20);
    wait_value(&c, &[("queue", "work")], 3.0).await;

    let at_limit = "w".repeat(MAX_VALUE_BYTES);
    let over = "w".repeat(MAX_VALUE_BYTES + 1);
    let long_key = "k".repeat(MAX_KEY_BYTES + 1);
    let pem = "p".repeat(MAX_TOTAL_BYTES);
    let three_mib = "x".repeat(3 << 20);
    let many: Vec<(String, String)> = (0..=MAX_KEYS)
        .map(|i| (format!("k{i}FromEnv"), "x".to_string()))
        .collect();
    let cases: Vec<(&str, Pairs, String)> = vec![
        (
            "a value one byte over",
            vec![("queue".into(), over.clone())],
            format!(
                "scalerMetadata.queue: value of {} bytes; at most {MAX_VALUE_BYTES}",
                MAX_VALUE_BYTES + 1
            ),
        ),
        (
            "a 3 MiB value (under gRPC's 4 MiB)",
            vec![
                ("queue".into(), "work".into()),
                ("vhost".into(), three_mib.clone()),
            ],
            format!(
                "scalerMetadata.vhost: value of {} bytes; at most {MAX_VALUE_BYTES}",
                3 << 20
            ),
        ),
        (
            "a long key",
            vec![
                ("queue".into(), "work".into()),
                (long_key.clone(), "v".into()),
            ],
            format!(
                "scalerMetadata.{}…: key of 257 bytes; at most 256",
                "k".repeat(64)
            ),
        ),
        (
            "too many keys",
            many.clone(),
            format!(
                "scalerMetadata: {} keys; at most {MAX_KEYS} are accepted",
                MAX_KEYS + 1
            ),
        ),
        (
            "too many bytes in all",
            vec![
                ("queue".into(), "work".into()),
                ("caCert".into(), pem.clone()),
            ],
            format!(
                "scalerMetadata.caCert: keys and values take {} bytes in all, at most {MAX_TOTAL_BYTES}",
                MAX_TOTAL_BYTES + "queue".len() + "work".len() + "caCert".len()
            ),
        ),
    ];
    for (label, pairs, want) in &cases {
        let r = raw(pairs.iter().cloned().collect());
        let started = Instant::now();
        for (rpc, status) in all_answers(&mut c, &r).await {
            assert_eq!(
                status.code(),
                Code::InvalidArgument,
                "{label} {rpc}: {status:?}"
            );
            assert!(
                status.message().starts_with(want.as_str()),
                "{label} {rpc}: {:?}",
                status.message().chars().take(200).collect::<String>()
            );
            assert!(status.message().len() <= 1100, "{label} {rpc}: message cut");
        }
        // Refused before any parsing or matching: quick even for 3 MiB
        // (generous bound for a shared machine; it is the transfer that costs).
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{label}: {:?}",
            started.elapsed()
        );
    }

    // Just within the limits, the same shapes are answered normally.
    let ok = raw([
        ("queue", "work"),
        ("vhost", ""),
        ("caCert", &pem[..MAX_TOTAL_BYTES - 100]),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect());
    assert!(c.get_metric_spec(ok.clone()).await.is_ok());
    let r = raw([("queue".to_string(), at_limit)].into_iter().collect());
    let status = c.is_active(r).await.expect_err("no such queue");
    assert_eq!(status.code(), Code::NotFound, "{status:?}");

    // Beyond gRPC's 4 MiB message limit the transport refuses it, still
    // with a status (never a dropped connection), and the server goes on.
    let huge = raw([("queue".to_string(), "x".repeat(5 << 20))]
        .into_iter()
        .collect());
    let status = c.get_metric_spec(huge).await.expect_err("over 4 MiB");
    assert_eq!(status.code(), Code::OutOfRange, "{status:?}");
    assert_eq!(metrics(&mut c, &[("queue", "work")]).await.unwrap().1, 3.0);

    // Counted like any refused request.
    let counted = self_metric(
        &app,
        "queue_exporter_grpc_requests_total",
        &[("method", "GetMetrics"), ("code", "INVALID_ARGUMENT")],
    )
    .await;
    assert_eq!(counted, Some(cases.len() as f64));
    app.stop().await;
}
