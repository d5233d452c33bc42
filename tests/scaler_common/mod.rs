//! Helpers shared by the `scaler_*` tests: a gRPC client generated from the
//! same proto the server uses, metadata builders, KEDA's replica arithmetic,
//! and Redis test-data writers.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use queue_exporter::scaler::proto::external_scaler_client::ExternalScalerClient;
use queue_exporter::scaler::proto::{GetMetricSpecResponse, GetMetricsRequest, ScaledObjectRef};
use tonic::transport::Channel;

use crate::support::{TestApp, indent, sample};

/// A client for the app's scaler.
pub type Client = ExternalScalerClient<Channel>;

/// Connects a plaintext client to `addr`.
pub async fn connect(addr: SocketAddr) -> Client {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect to scaler");
    ExternalScalerClient::new(channel)
}

/// Connects a plaintext client to the app's scaler.
pub async fn client(app: &TestApp) -> Client {
    connect(app.app().grpc_addr.expect("gRPC enabled")).await
}

/// Trigger metadata from pairs: the one place the scaler tests turn
/// `[("queue", "work-queue"), ...]` into what KEDA sends.
pub fn meta(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A ScaledObjectRef as KEDA sends it: its own keys included.
pub fn obj(pairs: &[(&str, &str)]) -> ScaledObjectRef {
    let mut m = meta(pairs);
    m.entry("scalerAddress".into())
        .or_insert_with(|| "queue-exporter.keda:9732".into());
    ScaledObjectRef {
        name: "worker".into(),
        namespace: "default".into(),
        scaler_metadata: m,
    }
}

/// `GetMetricSpec`, returning the only spec.
pub async fn spec(
    c: &mut Client,
    pairs: &[(&str, &str)],
) -> Result<(String, i64, f64), tonic::Status> {
    spec_of(c, obj(pairs)).await
}

async fn spec_of(c: &mut Client, r: ScaledObjectRef) -> Result<(String, i64, f64), tonic::Status> {
    let r: GetMetricSpecResponse = c.get_metric_spec(r).await?.into_inner();
    assert_eq!(r.metric_specs.len(), 1, "exactly one metric spec");
    let s = &r.metric_specs[0];
    Ok((s.metric_name.clone(), s.target_size, s.target_size_float))
}

/// `GetMetrics` with the name from `GetMetricSpec` (as KEDA strips `sN-`),
/// returning `(int, float)` of the only value.
pub async fn metrics(c: &mut Client, pairs: &[(&str, &str)]) -> Result<(i64, f64), tonic::Status> {
    value_of(c, obj(pairs)).await
}

async fn value_of(c: &mut Client, r: ScaledObjectRef) -> Result<(i64, f64), tonic::Status> {
    let (name, _, _) = spec_of(c, r.clone()).await?;
    metrics_of(c, r, &name).await
}

/// `GetMetrics` with an explicit metric name.
pub async fn metrics_named(
    c: &mut Client,
    pairs: &[(&str, &str)],
    name: &str,
) -> Result<(i64, f64), tonic::Status> {
    metrics_of(c, obj(pairs), name).await
}

async fn metrics_of(
    c: &mut Client,
    r: ScaledObjectRef,
    name: &str,
) -> Result<(i64, f64), tonic::Status> {
    let r = c
        .get_metrics(GetMetricsRequest {
            scaled_object_ref: Some(r),
            metric_name: name.to_string(),
        })
        .await?
        .into_inner();
    assert_eq!(
        r.metric_values.len(),
        1,
        "exactly one metric value (the HPA sums them)"
    );
    let v = &r.metric_values[0];
    Ok((v.metric_value, v.metric_value_float))
}

/// `IsActive`.
pub async fn active(c: &mut Client, pairs: &[(&str, &str)]) -> Result<bool, tonic::Status> {
    Ok(c.is_active(obj(pairs)).await?.into_inner().result)
}

/// The value KEDA uses: the float if > 0, else the int.
pub fn keda_value(int: i64, float: f64) -> f64 {
    if float > 0.0 { float } else { int as f64 }
}

/// Replicas the HPA sets for an `AverageValue` target: ceil(value / target).
pub fn keda_replicas(value: f64, target: f64) -> u64 {
    (value / target).ceil() as u64
}

/// Asks `GetMetrics` (as [`metrics`] does) until `accept` takes the answer.
async fn wait_metrics<T>(
    c: &Client,
    pairs: &[(&str, &str)],
    what: &str,
    timeout: Duration,
    accept: impl Fn(Result<(i64, f64), tonic::Status>) -> Option<T>,
) -> T {
    let r = obj(pairs);
    let (r, accept) = (&r, &accept);
    crate::support::wait_for(what, timeout, || async move {
        accept(value_of(&mut c.clone(), r.clone()).await)
    })
    .await
}

/// Waits until `GetMetrics` answers `expected` (the float field).
pub async fn wait_value(c: &Client, pairs: &[(&str, &str)], expected: f64) {
    wait_value_for(c, pairs, expected, Duration::from_secs(10)).await
}

/// Waits up to `timeout` until `GetMetrics` answers `expected` (the float field).
pub async fn wait_value_for(c: &Client, pairs: &[(&str, &str)], expected: f64, timeout: Duration) {
    let what = format!("GetMetrics = {expected}");
    wait_metrics(c, pairs, &what, timeout, |answer| match answer {
        Ok((_, f)) if (f - expected).abs() < 1e-9 => Some(()),
        _ => None,
    })
    .await
}

/// Waits until `GetMetrics` fails with `code`; returns the status.
pub async fn wait_code(
    c: &Client,
    pairs: &[(&str, &str)],
    code: tonic::Code,
    timeout: Duration,
) -> tonic::Status {
    let what = format!("GetMetrics {code:?}");
    wait_metrics(c, pairs, &what, timeout, |answer| match answer {
        Err(s) if s.code() == code => Some(s),
        _ => None,
    })
    .await
}

/// A config with one Redis source `main` and the scaler on. `queues` is the
/// list under `queues:`, written flush left or as an indented raw string:
///
/// ```ignore
/// redis_config(&redis.url, "100ms", r#"
///     - key: delayed
///       score: timestamp
/// "#)
/// ```
pub fn redis_config(url: &str, poll: &str, queues: &str) -> String {
    format!(
        r#"listen: {{ grpc: 127.0.0.1:0 }}
sources:
  - name: main
    type: redis
    url: {url}
    poll_interval: {poll}
    queues:
{queues}"#,
        queues = indent(queues, 6)
    )
}

/// Makes list `key` hold exactly `n` items.
pub fn set_list_len(conn: &mut redis::Connection, key: &str, n: usize) {
    let _: () = redis::cmd("DEL").arg(key).query(conn).expect("DEL");
    if n > 0 {
        let items: Vec<String> = (0..n).map(|i| format!("job-{i}")).collect();
        let _: () = redis::cmd("RPUSH")
            .arg(key)
            .arg(items)
            .query(conn)
            .expect("RPUSH");
    }
}

/// A gauge or counter from the app's `/metrics`.
pub async fn self_metric(app: &TestApp, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    sample(&app.metrics().await, name, labels)
}
